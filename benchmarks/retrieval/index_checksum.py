"""The cost of checking `index.faiss` against its recorded XXH3-128 digest on every load.

Question and target (issue "Faults and bad files"): `DenseIndex.load` now verifies the size and
digest of index.faiss (2,000 flipped bytes used to give a silent wrong answer). Is that cheap
enough to do on every load? Target: `load_with_checksum_vs_bare_read_ratio <= 1.10`, where the
bare read is the library call alone, `faiss.read_index(path)`; otherwise only a cheap check
would stay on load and the full hash would move to `ralm index verify`.

Data: a flat (exact inner product) index of 1,000,000 random float32 vectors of dimension 384
(the MiniLM size): index.faiss is 1.5 GB. Written by `DenseIndex.save` into a temp dir, deleted
at the end. Page cache warm (one untimed read first): the comparison is of the work done in
memory, not of the disk.

Timed in pairs (bare, ralm), the order alternating, REPS pairs; wall and process CPU time
(user + system: what this process did, less sensitive to other work on a shared machine):
- bare:   faiss.read_index(path)
- ralm:   DenseIndex.load(dir): manifest, fingerprints, size, then FAISS reads through a
          PyCallbackIOReader whose 8 MiB blocks are hashed on their way (one pass over the file)
- memory: the alternative first proposed: read the file into a numpy uint8 array, digest_bytes
          it, faiss.deserialize_index the array (FAISS copies the array twice more); fewer reps
- hash:   digest_bytes of the file's bytes already in memory (the hash alone), for its share

The target metric is the median over the pairs of ralm's wall time / bare's wall time (a pair
runs back to back, so both see about the same load from other work); the ratios of the medians
and of the minimums, and of CPU times, are reported beside it.

Run: OMP_NUM_THREADS=1 python -m benchmarks.retrieval.index_checksum [--n 1000000] [--reps 9]
Writes benchmarks/results/index_checksum.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import script_command, write_result

RATIO_TARGET = 1.10
DIM = 384


def timed(fn) -> float:
    return timed2(fn)[0]


def timed2(fn) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call; its result is dropped after the clock stops."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    elapsed = time.perf_counter() - t, time.process_time() - c
    del out
    return elapsed


def hash_times(path: Path, reps: int) -> list[float]:
    """Seconds of digest_bytes over the file's bytes already in memory, `reps` times."""
    from ralm.integrity import digest_bytes

    data = np.fromfile(path, dtype=np.uint8)
    return [timed(lambda: digest_bytes(data)) for _ in range(reps)]


def main() -> None:
    import faiss

    from ralm.integrity import digest, digest_bytes
    from ralm.retrieval.index.dense import DenseIndex

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="vectors (default 1,000,000)")
    ap.add_argument("--reps", type=int, default=9, help="timed (bare, ralm) pairs (default 9)")
    ap.add_argument("--tmp", default=None, help="where to write the index (default: the system temp dir)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="index-checksum-", dir=args.tmp))
    try:
        rng = np.random.default_rng(0)
        x = np.empty((args.n, DIM), dtype=np.float32)
        for s in range(0, args.n, 100_000):
            x[s : s + 100_000] = rng.standard_normal((min(100_000, args.n - s), DIM), dtype=np.float32)
        index = DenseIndex.build(x, docstore_fingerprint="bench", encoder_fingerprint="bench")
        del x
        t = time.perf_counter()
        index.save(tmp)
        save_s = time.perf_counter() - t
        del index
        path = tmp / "index.faiss"
        size = path.stat().st_size
        digest(path)  # warm the page cache
        save_hash_s = timed(lambda: digest(path))  # the digest pass `save` adds after writing

        def bare():
            return faiss.read_index(str(path))

        def ralm():
            return DenseIndex.load(tmp, docstore_fingerprint="bench", encoder_fingerprint="bench")

        def memory():
            a = np.fromfile(path, dtype=np.uint8)
            digest_bytes(a)
            return faiss.deserialize_index(a)

        assert ralm().count == args.n
        times: dict[str, list[float]] = {"bare": [], "ralm": [], "memory": []}
        cpu: dict[str, list[float]] = {"bare": [], "ralm": []}
        for rep in range(args.reps):
            for name in ("bare", "ralm") if rep % 2 == 0 else ("ralm", "bare"):
                wall, c = timed2(bare if name == "bare" else ralm)
                times[name].append(wall)
                cpu[name].append(c)
        for _ in range(min(3, args.reps)):
            times["memory"].append(timed(memory))
        hash_s = hash_times(path, args.reps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}
    ratio = statistics.median(r / b for r, b in zip(times["ralm"], times["bare"], strict=True))
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    metrics = {
        "n_vectors": args.n,
        "dim": DIM,
        "index_faiss_bytes": size,
        "repetitions": args.reps,
        "bare_read_index_seconds_median": round(med["bare"], 4),
        "load_with_checksum_seconds_median": round(med["ralm"], 4),
        "load_with_checksum_vs_bare_read_ratio": round(ratio, 3),
        "load_with_checksum_vs_bare_read_ratio_of_medians": round(med["ralm"] / med["bare"], 3),
        "load_with_checksum_vs_bare_read_ratio_of_minimums": round(low["ralm"] / low["bare"], 3),
        "bare_read_index_cpu_seconds_median": round(cpu_med["bare"], 4),
        "load_with_checksum_cpu_seconds_median": round(cpu_med["ralm"], 4),
        "load_with_checksum_vs_bare_read_cpu_ratio": round(cpu_med["ralm"] / cpu_med["bare"], 3),
        "hash_seconds_median": round(statistics.median(hash_s), 4),
        "hash_gb_per_second": round(size / statistics.median(hash_s) / 1e9, 1),
        "hash_time_share_of_load": round(statistics.median(hash_s) / med["ralm"], 3),
        "in_memory_deserialize_seconds_median": round(med["memory"], 4),
        "in_memory_deserialize_vs_bare_read_ratio": round(med["memory"] / med["bare"], 3),
        "save_seconds": round(save_s, 3),
        "save_digest_seconds": round(save_hash_s, 4),
        "meets_target": ratio <= RATIO_TARGET,
        "times_seconds": {k: [round(t, 4) for t in v] for k, v in times.items()},
        "cpu_seconds": {k: [round(t, 4) for t in v] for k, v in cpu.items()},
    }
    result = write_result(
        "index_checksum",
        script_command(__file__, f"--n {args.n} --reps {args.reps}", python="OMP_NUM_THREADS=1 python"),
        metrics,
        {"load_with_checksum_vs_bare_read_ratio": f"<= {RATIO_TARGET}"},
        notes=(
            "Page cache warm; the machine's 2 cores are shared with other work, so single runs vary: "
            "the loads run in back-to-back pairs and the median pair ratio is the metric. 'memory' is "
            "the read-into-numpy + "
            "digest_bytes + faiss.deserialize_index variant, not used by ralm (FAISS copies the buffer "
            "twice more)."
        ),
    )
    for k, v in result["metrics"].items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
