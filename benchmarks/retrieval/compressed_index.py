"""Compressed and approximate indexes: memory vs exact flat, and recall@10 against exact search.

Question and target (issue: dense index): the compressed backends (sq8, ivf-pq; and sq6, sq4)
should be at least 4x smaller than flat (`memory_ratio_vs_flat >= 4`) while keeping
`recall_at_10_vs_exact >= 0.95` on each query set; ivf-flat and hnsw are reported alongside (they
store the raw vectors, so they are not smaller than flat, only faster on big corpora).

Data: the same real MiniLM embeddings as benchmarks/retrieval/search.py (the enwiki sample's 5,409 chunks,
cached in the temp dir). Queries: the 261 trivia questions, and 1,024 chunk embeddings with
their own id excluded (REALM's trivial retrieval). recall@10 = |approx top-10 & exact top-10| / 10,
averaged over all queries, exact = `DenseIndex` kind "flat" with the same exclusions.
Memory = size of the serialized FAISS index (`DenseIndex.memory_bytes`), so codebooks, IVF
centroids and the 8-byte ids of inverted lists are counted.

Each backend is built with its defaults and with a small sweep of parameters (search-time ones,
nprobe and ef_search, without rebuilding). The result file lists every configuration; the
metrics give, per backend, the defaults and the smallest configuration that reaches the recall
target.

Run: python -m benchmarks.retrieval.compressed_index [--docstore DIR]
Writes benchmarks/results/compressed_index.json.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from benchmarks.common import sample_store, script_command, write_result
from benchmarks.retrieval.search import DEFAULT_DOCSTORE, load_embeddings

RECALL_TARGET = 0.95
RATIO_TARGET = 4.0
K = 10

# (kind, build params, search-time sweep); {} = the defaults.
CONFIGS = [
    ("sq8", {}, [{}]),
    ("sq6", {}, [{}]),
    ("sq4", {}, [{}]),
    ("ivf-pq", {}, [{}, {"nprobe": 32}, {"nprobe": 64}, {"nprobe": 1024}]),
    ("ivf-pq", {"m": 96}, [{}, {"nprobe": 32}, {"nprobe": 64}]),
    ("ivf-pq", {"m": 48}, [{}, {"nprobe": 64}]),
    ("ivf-pq", {"nlist": 64}, [{"nprobe": 8}, {"nprobe": 16}]),
    ("ivf-pq", {"nlist": 64, "m": 96}, [{"nprobe": 8}, {"nprobe": 16}]),
    ("ivf-flat", {}, [{}, {"nprobe": 32}, {"nprobe": 64}]),
    ("hnsw", {}, [{}, {"ef_search": 64}, {"ef_search": 256}]),
    ("hnsw", {"M": 16}, [{}, {"ef_search": 256}]),
]


def recall_at_k(approx: np.ndarray, exact: np.ndarray) -> float:
    k = exact.shape[1]
    return float(
        np.mean([len(set(a) & set(e)) / k for a, e in zip(approx.tolist(), exact.tolist(), strict=True)])
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docstore", type=Path, default=DEFAULT_DOCSTORE)
    ap.add_argument("--chunk-queries", type=int, default=1024)
    args = ap.parse_args()

    import faiss

    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.index.dense import DenseIndex

    store = DocStore(sample_store(args.docstore))
    x, trivia, _ = load_embeddings(store.root)
    fps = {"docstore_fingerprint": store.fingerprint, "encoder_fingerprint": "minilm-bench"}
    rng = np.random.default_rng(0)
    own = np.sort(rng.choice(len(x), size=min(args.chunk_queries, len(x)), replace=False)).astype(np.int64)
    sets = {"trivia": (trivia, None), "chunks_own_id_excluded": (x[own], own)}

    flat = DenseIndex.build(x, kind="flat", **fps)
    exact = {name: flat.search(q, K, exclude_ids=e).ids for name, (q, e) in sets.items()}
    flat_bytes = flat.memory_bytes()
    print(f"flat: {flat_bytes:,} bytes", flush=True)

    rows = []
    for kind, build_params, sweep in CONFIGS:
        t = time.perf_counter()
        index = DenseIndex.build(x, kind=kind, **fps, **build_params)
        build_s = time.perf_counter() - t
        default_nprobe, default_ef = index.params.get("nprobe"), index.params.get("ef_search")
        for search_params in sweep:
            index.set_search_params(
                nprobe=search_params.get("nprobe", default_nprobe) if default_nprobe else None,
                ef_search=search_params.get("ef_search", default_ef) if default_ef else None,
            )
            recalls, secs, n = {}, 0.0, 0
            for name, (q, e) in sets.items():
                t = time.perf_counter()
                got = index.search(q, K, exclude_ids=e).ids
                secs += time.perf_counter() - t
                n += len(q)
                recalls[name] = round(recall_at_k(got, exact[name]), 4)
            total = sum(recalls[s] * len(sets[s][0]) for s in sets) / n
            worst = min(recalls.values())
            mem = index.memory_bytes()
            row = {
                "kind": kind,
                "build_params": build_params,
                "params": dict(index.params),
                "memory_bytes": mem,
                "memory_ratio_vs_flat": round(flat_bytes / mem, 3),
                "recall_at_10_vs_exact": round(total, 4),
                "recall_at_10_worst_query_set": worst,
                "recall_at_10_by_queries": recalls,
                "build_s": round(build_s, 2),
                "search_us_per_query": round(1e6 * secs / n, 1),
                "defaults": not build_params and not search_params,
            }
            rows.append(row)
            print(
                f"{kind:9s} {str(build_params):26s} {str(search_params):20s} ratio {row['memory_ratio_vs_flat']:6.2f}"
                f"  recall@10 {total:.4f} (worst set {worst:.4f})  build {build_s:6.2f} s  {row['search_us_per_query']:8.1f} us/q",
                flush=True,
            )

    metrics: dict = {"flat_memory_bytes": flat_bytes, "n_chunks": len(x), "dim": int(x.shape[1])}
    for kind in ("sq8", "sq6", "sq4", "ivf-pq", "ivf-flat", "hnsw"):
        mine = [r for r in rows if r["kind"] == kind]
        default = next(r for r in mine if r["defaults"])
        key = kind.replace("-", "_")
        metrics[f"{key}_default_memory_ratio_vs_flat"] = default["memory_ratio_vs_flat"]
        metrics[f"{key}_default_recall_at_10_vs_exact"] = default["recall_at_10_vs_exact"]
        metrics[f"{key}_default_recall_at_10_worst_query_set"] = default["recall_at_10_worst_query_set"]
        # The target must hold on both query sets, not only on their pooled average (the 1,024
        # in-distribution chunk queries would otherwise outweigh the 261 trivia questions).
        good = [r for r in mine if r["recall_at_10_worst_query_set"] >= RECALL_TARGET]
        best = max(good, key=lambda r: r["memory_ratio_vs_flat"]) if good else None
        metrics[f"{key}_best_memory_ratio_at_recall_target"] = best["memory_ratio_vs_flat"] if best else None
        metrics[f"{key}_best_params"] = best["params"] if best else None
        if kind in ("sq8", "sq6", "sq4", "ivf-pq"):
            metrics[f"{key}_meets_targets"] = bool(best and best["memory_ratio_vs_flat"] >= RATIO_TARGET)
    write_result(
        "compressed_index",
        script_command(__file__, ""),
        metrics,
        {
            "memory_ratio_vs_flat": f">= {RATIO_TARGET} for the compressed ones (sq8, ivf-pq; sq6, sq4)",
            "recall_at_10_vs_exact": f">= {RECALL_TARGET} (judged on each query set)",
        },
        configurations=rows,
        notes=(
            "The recall target is judged on each query set separately: pooled, the 1,024 chunk queries "
            "(in-distribution, easy) would carry ivf-pq over 0.95 while the trivia questions stay "
            "below it. sq8 stores 1 byte per dimension against flat's 4, plus 2 floats per dimension "
            "of trained ranges, so its ratio is 4 minus that (3.99 here) and cannot reach >= 4 at any "
            "corpus size. sq6 (6 bits per dimension, added for this) reaches both targets. ivf-pq "
            "(m = d/2 = 192 by default) loses recall on the trivia questions to the product "
            "quantisation itself: even probing every list keeps it under 0.95; its ratio here is held "
            "down by fixed costs (IVF centroids and PQ codebooks, ~0.6 MB) and 8-byte ids per vector "
            "(on large corpora it tends to 4*d / (m + 8) = 7.7). Build times were measured on a shared "
            "2-core machine where FAISS's OpenMP k-means for 192 PQ sub-quantisers runs several times "
            "slower with 2 threads than with 1 (contention); they are not representative."
        ),
        load_average_after=[round(v, 2) for v in os.getloadavg()],
        faiss_version=faiss.__version__,
        queries={name: len(q) for name, (q, _) in sets.items()},
    )


if __name__ == "__main__":
    main()
