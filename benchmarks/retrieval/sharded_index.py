"""Sharded dense index: exactness against the unsharded flat index, search time, memory per process.

Corpora (synthetic, like realm_scale.py's 1M vectors, which are MiniLM vectors plus noise):
5,000 cluster centres drawn N(0, 1) in d=384, each chunk a centre plus N(0, 0.3^2) noise, stored
float16 as a refresh stores them; "demo" is the first 5,409 chunks (the enwiki sample's size),
"1M" all 1,000,000. Queries: 32 chunks plus noise, each excluding its own chunk (REALM's trivial
retrieval), k = 10.

Measured:
* exactness: ids and scores of the sharded flat index (2 and 4 shards) searched by 2 gloo
  processes (ralm.retrieval.index.dist_search, each rank its queries, every rank the global top k),
  and by one process (ShardedIndex, shards in turn), against one DenseIndex: equal element for
  element, or the number of differing entries;
* search time at 1M chunks, batch 32: 2 processes x 1 FAISS thread, each holding one shard (the
  whole collective search: gather, shard search, gather, merge), against one process with
  2 FAISS threads searching the whole index, and the same process searching the 2 shards in
  turn; median of `--reps` searches;
* peak RSS (VmHWM) per process of 2 gloo processes that load the 1M index and search it:
  replicated (every rank loads the whole index, as `index_sharding = "none"` does after a
  refresh) against sharded (each rank its shard). This is the index's part of a trainer: the
  trainer's own memory (model, optimiser, data) comes on top and is the same either way
  (realm_scale.json: 2,833 MiB for the MiniLM REALM trainer on the 12k sample).

Run: python -m benchmarks.retrieval.sharded_index [--chunks 1000000] [--reps 10]
Writes benchmarks/results/sharded_index.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import time
from pathlib import Path

import numpy as np

from benchmarks.common import script_command, write_result
from ralm.atomic import atomic_path

FP = {"docstore_fingerprint": "bench-corpus", "encoder_fingerprint": "bench-encoder"}
K = 10
DEMO = 5409


def vectors(work: Path, n: int, d: int, seed: int = 0) -> np.ndarray:
    """(n, d) float16 memory map of clustered vectors (see the module docstring), made once."""
    path = work / f"vectors-{n}x{d}.npy"
    if not path.exists():
        rng = np.random.default_rng(seed)
        centres = rng.standard_normal((5000, d)).astype(np.float32)
        with atomic_path(path, ".npy") as tmp:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(n, d))
            for lo in range(0, n, 65536):
                hi = min(n, lo + 65536)
                pick = rng.integers(0, len(centres), hi - lo)
                out[lo:hi] = centres[pick] + 0.3 * rng.standard_normal((hi - lo, d)).astype(np.float32)
            out.flush()
            del out
    return np.load(path, mmap_mode="r")


def search_seconds(index, q: np.ndarray, src: np.ndarray, reps: int) -> list[float]:
    """Seconds of each of `reps` searches of `q` (k = K, each query's source excluded) in `index`,
    after one search to warm it up."""
    index.search(q, K, exclude_ids=src)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        index.search(q, K, exclude_ids=src)
        times.append(time.perf_counter() - t0)
    return times


def queries(x: np.ndarray, n_q: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = np.sort(rng.choice(len(x), n_q, replace=False)).astype(np.int64)
    q = np.asarray(x[src], dtype=np.float32) + 0.1 * rng.standard_normal((n_q, x.shape[1])).astype(np.float32)
    return q, src


def vmhwm_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, job: str, work: str, plan: dict) -> None:
    """One of 2 gloo processes: `job` is "exact" (every corpus and shard count), "time" or "rss-*"."""
    import faiss
    import torch
    import torch.distributed as tdist

    from ralm.retrieval.index.dense import DenseIndex
    from ralm.retrieval.index.dist_search import DistributedShardSearch
    from ralm.retrieval.index.sharded import load_rank_shards
    from ralm.train.distributed import Dist

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    dist = Dist(rank, 2)
    w = Path(work)
    q = np.load(w / "queries.npy")
    src = np.load(w / "sources.npy")
    half = len(q) // 2
    mine = slice(0, half) if rank == 0 else slice(half, len(q))
    out: dict = {}
    if job == "exact":
        for name, shards in plan["exact"]:
            d = w / name
            qq, ss = (np.load(d / "queries.npy"), np.load(d / "sources.npy")) if name == "demo" else (q, src)
            hh = len(qq) // 2
            m = slice(0, hh) if rank == 0 else slice(hh, len(qq))
            index, start = load_rank_shards(d / f"shards{shards}", rank, 2)
            res = DistributedShardSearch(dist, index, start, plan["n"][name]).search(
                qq[m], K, exclude_ids=ss[m]
            )
            np.save(d / f"dist{shards}-rank{rank}-ids.npy", res.ids)
            np.save(d / f"dist{shards}-rank{rank}-scores.npy", res.scores)
            del index
    elif job == "time":
        index, start = load_rank_shards(w / "1M" / "shards2", rank, 2)
        search = DistributedShardSearch(dist, index, start, plan["n"]["1M"])
        search.search(q[mine], K, exclude_ids=src[mine])  # warm-up
        times = []
        for _ in range(plan["reps"]):
            dist.barrier()
            t0 = time.perf_counter()
            search.search(q[mine], K, exclude_ids=src[mine])
            times.append(time.perf_counter() - t0)
        out["seconds"] = times
    else:  # rss-replicated / rss-sharded: load the 1M index as a refresh leaves it, search it
        if job == "rss-replicated":
            whole = DenseIndex.load(w / "1M" / "whole")
            res = whole.search(q[mine], K, exclude_ids=src[mine])
        else:
            index, start = load_rank_shards(w / "1M" / "shards2", rank, 2)
            res = DistributedShardSearch(dist, index, start, plan["n"]["1M"]).search(
                q[mine], K, exclude_ids=src[mine]
            )
        out["ids"] = res.ids.tolist()
        dist.barrier()
        out["vmhwm_mib"] = vmhwm_mib()
    (w / f"{job}-rank{rank}.json").write_text(json.dumps(out))
    tdist.destroy_process_group()


def spawn(job: str, work: Path, plan: dict) -> list[dict]:
    import torch.multiprocessing as mp

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"  # each worker 1 thread, whatever its BLAS reads (spawned: read at start)
    mp.start_processes(_worker, args=(_free_port(), job, str(work), plan), nprocs=2, start_method="spawn")
    return [json.loads((work / f"{job}-rank{r}.json").read_text()) for r in (0, 1)]


def differing(a: np.ndarray, b: np.ndarray) -> int:
    return int((np.asarray(a) != np.asarray(b)).sum()) if a.shape == b.shape else int(max(a.size, b.size))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--work", type=Path, default=Path("/tmp/ralm-bench-sharded"))
    args = ap.parse_args()

    import faiss

    from ralm.retrieval.index.dense import DenseIndex
    from ralm.retrieval.index.shard_build import build_sharded
    from ralm.retrieval.index.sharded import ShardedIndex

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    x = vectors(work, args.chunks, args.dim)
    corpora = {"demo": x[:DEMO], "1M": x}
    plan: dict = {"n": {"demo": DEMO, "1M": args.chunks}, "exact": [], "reps": args.reps}
    metrics: dict = {"chunks": args.chunks, "dim": args.dim, "batch": args.queries, "k": K}
    refs = {}
    faiss.omp_set_num_threads(2)
    for name, xs in corpora.items():
        d = work / name
        d.mkdir(exist_ok=True)
        q, src = queries(xs, args.queries)
        np.save(d / "queries.npy", q)
        np.save(d / "sources.npy", src)
        if name == "1M":
            np.save(work / "queries.npy", q)
            np.save(work / "sources.npy", src)
        t0 = time.perf_counter()
        whole = DenseIndex.build(xs, kind="flat", **FP)
        metrics[f"build_seconds_whole_{name}"] = time.perf_counter() - t0
        refs[name] = whole.search(q, K, exclude_ids=src)
        if name == "1M":
            shutil.rmtree(d / "whole", ignore_errors=True)
            whole.save(d / "whole")
        del whole
        for shards in (2, 4):
            t0 = time.perf_counter()
            build_sharded(xs, d / f"shards{shards}", shards, kind="flat", **FP)
            metrics[f"build_seconds_{shards}_shards_{name}"] = time.perf_counter() - t0
            plan["exact"].append((name, shards))
            one = ShardedIndex.load(d / f"shards{shards}").search(q, K, exclude_ids=src)
            metrics[f"one_process_{shards}_shards_{name}_differing_ids"] = differing(one.ids, refs[name].ids)
            metrics[f"one_process_{shards}_shards_{name}_differing_scores"] = differing(
                one.scores, refs[name].scores
            )
        print(f"{name}: built ({time.perf_counter() - t_all:.0f} s)", flush=True)

    spawn("exact", work, plan)
    for name, shards in plan["exact"]:
        d = work / name
        ids = np.concatenate([np.load(d / f"dist{shards}-rank{r}-ids.npy") for r in (0, 1)])
        scores = np.concatenate([np.load(d / f"dist{shards}-rank{r}-scores.npy") for r in (0, 1)])
        metrics[f"two_processes_{shards}_shards_{name}_differing_ids"] = differing(ids, refs[name].ids)
        metrics[f"two_processes_{shards}_shards_{name}_differing_scores"] = differing(
            scores, refs[name].scores
        )
    print(f"exactness done ({time.perf_counter() - t_all:.0f} s)", flush=True)

    # search time at 1M, batch 32: one process with 2 threads vs 2 processes x 1 thread
    q, src = np.load(work / "queries.npy"), np.load(work / "sources.npy")
    one_t = search_seconds(DenseIndex.load(work / "1M" / "whole"), q, src, args.reps)
    turn_t = search_seconds(ShardedIndex.load(work / "1M" / "shards2"), q, src, args.reps)
    two = spawn("time", work, plan)
    two_t = np.maximum(two[0]["seconds"], two[1]["seconds"])  # the slower rank ends the search
    metrics["search_ms_1M_one_process_2_threads"] = 1000 * float(np.median(one_t))
    metrics["search_ms_1M_one_process_2_shards_in_turn_2_threads"] = 1000 * float(np.median(turn_t))
    metrics["search_ms_1M_two_processes_1_thread_each"] = 1000 * float(np.median(two_t))
    metrics["search_speedup_two_processes_vs_one"] = float(np.median(one_t) / np.median(two_t))
    print(f"timing done ({time.perf_counter() - t_all:.0f} s)", flush=True)

    rep = spawn("rss-replicated", work, plan)
    shd = spawn("rss-sharded", work, plan)
    assert rep[0]["ids"] == shd[0]["ids"] and rep[1]["ids"] == shd[1]["ids"]
    metrics["peak_rss_mib_per_rank_replicated"] = max(r["vmhwm_mib"] for r in rep)
    metrics["peak_rss_mib_per_rank_sharded"] = max(r["vmhwm_mib"] for r in shd)
    metrics["peak_rss_ratio_sharded_vs_replicated"] = (
        metrics["peak_rss_mib_per_rank_sharded"] / metrics["peak_rss_mib_per_rank_replicated"]
    )
    metrics["index_mib_whole"] = args.chunks * args.dim * 4 / 2**20
    metrics["total_seconds"] = time.perf_counter() - t_all
    cmd = script_command(__file__, f"--chunks {args.chunks}" if args.chunks != 1_000_000 else "")
    res = write_result(
        "sharded_index",
        cmd,
        metrics,
        {
            "two_processes_*_differing_ids / _scores": "0 (same ids and scores as the unsharded flat index)",
            "search_speedup_two_processes_vs_one": "reported (same total threads)",
            "peak_rss_ratio_sharded_vs_replicated": "<= 0.6",
        },
        vectors="synthetic: 5,000 N(0,1) centres in d=384, each chunk a centre + N(0, 0.3^2) noise, float16",
    )
    print(json.dumps(res["metrics"], indent=2))


if __name__ == "__main__":
    main()
