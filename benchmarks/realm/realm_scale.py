"""Scale: REALM pre-training over a 1M-chunk corpus on one CPU box: trainer peak RSS per index kind,
refresh time, and recall@k of the compressed indexes against exact search.

Corpus: the enwiki sample's 106 articles repeated `--copies` times, each copy with 10% of its
words replaced by other words of the same article (seeded) and its own title, built with
`ralm corpus build` into 64-token chunks (about 1M chunks for 82 copies).

Vectors: embedding 1M chunks with MiniLM takes ~3 h on these 2 cores, so the corpus vectors
are synthesised: copy 0 is embedded for real with the MiniLM doc tower, and chunk j of copy c
gets the copy-0 vector of the same article and position plus Gaussian noise (cosine ~0.9 to it),
written as a float16 memory map. The refresh time is then an estimate: the measured doc-tower
throughput on this machine times the corpus size, plus the measured index build time.

Measured:
* index build seconds, memory and recall@10 vs flat for sq8 and ivf-pq, on 1,000 real masked-query
  vectors from the query tower;
* peak RSS of `ralm pretrain` (a subprocess; `ru_maxrss`) running 20 REALM steps that search the
  1M-chunk index (flat, sq8, ivf-pq via `initial_index`) and re-score candidates with the live towers,
  against the same trainer on the 12k-chunk sample;
* doc-tower embedding throughput (chunks/s), so refresh seconds per 100k chunks and at 1M.

Run: python -m benchmarks.realm.realm_scale [--copies 82]
Writes benchmarks/results/realm_scale.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import ralm, script_command, write_result
from benchmarks.realm.realm_quality import ensure_store

# the flags of a trainer run measured for its memory (here and in sharded_pretrain_rss), not for
# what it learns: no index refresh, no checkpoints, no held-out evaluation
MEMORY_RUN = ["--refresh-every", "0", "--checkpoint-every", "0", "--heldout", "0"]


def synthetic_jsonl(sample_store, out: Path, copies: int, seed: int = 0) -> int:
    """The sample's articles `copies` times, 10% of words swapped per copy; returns articles written."""
    import numpy as np

    from ralm.corpus.docstore import DocStore

    store = DocStore(sample_store)
    texts: dict[int, list[str]] = {}
    titles: dict[int, str] = {}
    for b in store.iter_batches(1024, columns=["article", "title", "text"]):
        for a, t, x in zip(b["article"], b["title"], b["text"], strict=True):
            texts.setdefault(a, []).append(x)
            titles[a] = t
    rng = np.random.default_rng(seed)
    n = 0
    with open(out, "w", encoding="utf-8") as f:
        for c in range(copies):
            for a in sorted(texts):
                words = " ".join(texts[a]).split(" ")
                if c:
                    idx = rng.random(len(words)) < 0.10
                    words = [
                        w if not m else words[int(rng.integers(len(words)))]
                        for w, m in zip(words, idx, strict=True)
                    ]
                f.write(
                    json.dumps({"title": f"{titles[a]} ({c})" if c else titles[a], "text": " ".join(words)})
                    + "\n"
                )
                n += 1
    return n


_RSS_WRAPPER = """
import re, runpy, sys
out = sys.argv.pop(1)
sys.argv[0] = "ralm"
try:
    runpy.run_module("ralm", run_name="__main__")
finally:
    status = open("/proc/self/status").read()
    with open(out, "w") as f:
        f.write(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1))
"""


def peak_rss_of(args: list[str], work: Path) -> tuple[float, float]:
    """(peak RSS MiB, seconds) of `python -m ralm ARGS` in a child process that reports its own
    high-water mark (VmHWM; ru_maxrss is carried over from the parent across fork+exec on Linux,
    so a big parent would hide the child's own peak)."""
    t = time.perf_counter()
    out = work / "rss.txt"
    res = subprocess.run(
        [sys.executable, "-c", _RSS_WRAPPER, str(out), *args], capture_output=True, text=True
    )
    if res.returncode:
        raise SystemExit(res.stderr[-3000:])
    return int(out.read_text()) / 1024, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=82)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--work", default="/tmp/ralm-bench-scale")
    args = ap.parse_args()

    import numpy as np
    import torch

    from ralm.corpus.docstore import DocStore
    from ralm.realm.config import PretrainConfig
    from ralm.realm.masking.mlm import MaskingCollator, MaskingConfig
    from ralm.realm.refresh.sync import embed_chunks
    from ralm.realm.training.build import build_model
    from ralm.retrieval.index.dense import DenseIndex
    from ralm.retrieval.index.plan import estimate

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    sample = ensure_store(Path("/tmp/ralm-bench-realm") / "enwiki-64", 64)
    big = work / f"synthetic-{args.copies}"
    if not (big / "manifest.json").is_file():
        src = work / "synthetic.jsonl"
        synthetic_jsonl(sample, src, args.copies)
        t = time.perf_counter()
        ralm(
            "corpus", "build", src, "--out", big, "--chunk-size", 64, "--workers", 2, "--overwrite", say=None
        )
        print(f"corpus build: {time.perf_counter() - t:.0f}s", flush=True)
    store = DocStore(big)
    N = len(store)
    cfg = PretrainConfig(
        docstore=str(big),
        out="-",
        encoder_max_length=64,
        heldout=0,
        masking=MaskingConfig(strategy="uniform"),
    )
    torch.manual_seed(0)
    model, tok = build_model(cfg, store)
    model.eval()
    # copy-0 chunks: articles 0..105 of the synthetic corpus are the unperturbed sample
    art = np.asarray(model.docs.inputs.article)
    n_art = int(art.max()) + 1
    per_copy = n_art // args.copies
    copy0 = np.flatnonzero(art < per_copy)
    t = time.perf_counter()
    v0 = embed_chunks(model.encoder, model.docs, ids=copy0)
    embed_rate = len(copy0) / (time.perf_counter() - t)
    print(f"embedded {len(copy0)} chunks at {embed_rate:.0f}/s", flush=True)
    # every chunk: the copy-0 vector of the same article and position, plus noise
    first = np.searchsorted(art, np.arange(n_art))
    pos = np.arange(N) - first[art]
    base_art = art % per_copy
    n0 = np.bincount(art[copy0], minlength=per_copy)
    src_row = first[base_art] + np.minimum(pos, n0[base_art] - 1)
    d = v0.shape[1]
    vec_path = work / "vectors.npy"
    vecs = np.lib.format.open_memmap(vec_path, mode="w+", dtype=np.float16, shape=(N, d))
    rng = np.random.default_rng(1)
    norm = float(np.linalg.norm(v0, axis=1).mean())
    for s in range(0, N, 65536):
        rows = np.arange(s, min(N, s + 65536))
        v = v0[src_row[rows]]
        noisy = art[rows] >= per_copy
        v[noisy] += rng.normal(0, 0.48 * norm / np.sqrt(d), size=(int(noisy.sum()), d)).astype(np.float32)
        vecs[rows] = v.astype(np.float16)
    vecs.flush()
    # indexes
    fp, efp = store.fingerprint, model.encoder.fingerprint("doc")
    built = {}
    for kind in ("flat", "sq8", "ivf-pq"):
        t = time.perf_counter()
        idx = DenseIndex.build(
            np.load(vec_path, mmap_mode="r"), kind=kind, docstore_fingerprint=fp, encoder_fingerprint=efp
        )
        built[kind] = {
            "build_seconds": time.perf_counter() - t,
            "memory_bytes": idx.memory_bytes(),
            "estimate": estimate(kind, N, d)["text"],
        }
        idx.save(work / f"index-{kind}")
        print(kind, built[kind], flush=True)
        del idx
    # recall@10 of compressed vs flat on real masked queries
    col = MaskingCollator(store, tok, MaskingConfig(strategy="uniform"), return_tensors="pt")
    qids = np.random.default_rng(2).choice(N, size=args.queries, replace=False)
    with torch.inference_mode():
        q = np.concatenate(
            [
                model.embed_queries(col(qids[s : s + 64], rng=np.random.default_rng(s))).float().numpy()
                for s in range(0, len(qids), 64)
            ]
        )
    flat = DenseIndex.load(work / "index-flat")
    exact = flat.search(q, 10).ids
    del flat
    for kind in ("sq8", "ivf-pq"):
        idx = DenseIndex.load(work / f"index-{kind}")
        got = idx.search(q, 10).ids
        built[kind]["recall_at_10_vs_flat"] = float(
            np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, exact, strict=True)])
        )
        del idx
    # trainer peak RSS per index kind (subprocesses), and on the 12k-chunk sample
    rss = {}
    base = [
        "pretrain",
        "--steps",
        str(args.steps),
        "--batch-size",
        "4",
        "--k",
        "4",
        *MEMORY_RUN,
        "--set",
        "encoder_max_length=64",
        "--set",
        "reader_max_length=160",
        "--set",
        "tensorboard=false",
        "--set",
        'masking.strategy="uniform"',
        "--quiet",
        "--overwrite",
    ]
    for kind in ("flat", "sq8", "ivf-pq"):
        rss[kind], secs = peak_rss_of(
            base
            + [
                "--docstore",
                str(big),
                "--out",
                str(work / f"run-{kind}"),
                "--set",
                f'initial_index="{work / f"index-{kind}"}"',
            ],
            work,
        )
        print(f"trainer RSS with {kind}: {rss[kind]:.0f} MiB ({secs:.0f}s)", flush=True)
    rss["sample"], _ = peak_rss_of(
        base + ["--docstore", str(sample), "--out", str(work / "run-sample")], work
    )
    per100k = 100_000 / embed_rate

    def key(kind: str) -> str:  # "ivf-pq" -> "ivfpq" in metric names
        return re.sub("[^a-z0-9]", "", kind)

    metrics = {
        "chunks": N,
        "dim": d,
        "doc_tower_chunks_per_second": embed_rate,
        "refresh_embed_seconds_per_100k_chunks": per100k,
        **{f"index_build_seconds_{key(k)}": v["build_seconds"] for k, v in built.items()},
        **{f"index_memory_mib_{key(k)}": v["memory_bytes"] / 2**20 for k, v in built.items()},
        "recall_at_10_sq8_vs_flat": built["sq8"]["recall_at_10_vs_flat"],
        "recall_at_10_ivfpq_vs_flat": built["ivf-pq"]["recall_at_10_vs_flat"],
        **{
            f"refresh_seconds_estimate_{key(k)}": N / embed_rate + v["build_seconds"]
            for k, v in built.items()
        },
        **{f"trainer_peak_rss_mib_{key(k)}": v for k, v in rss.items()},
    }
    write_result(
        "realm_scale",
        script_command(__file__),
        metrics,
        {
            "recall_at_10_ivfpq_vs_flat": "reported",
            "trainer_peak_rss_mib_ivfpq": "reported (bounded: << flat)",
        },
        vectors="copy 0 embedded with MiniLM; other copies = copy-0 vector + Gaussian noise (see the docstring)",
        estimates={k: v["estimate"] for k, v in built.items()},
        settings=vars(args),
    )


if __name__ == "__main__":
    main()
