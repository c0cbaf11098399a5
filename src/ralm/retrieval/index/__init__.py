"""Indexes over chunk embeddings: FAISS MIPS, index directories, shards, distributed search.

    dense        DenseIndex: one FAISS index whose row i is chunk i (flat, ivf, hnsw, sq*, ivf-pq)
    kinds        the FAISS index kinds and their parameters
    plan         which kind fits a corpus (auto_kind, memory estimates)
    io           saving and loading index files and manifests
    directory    `ralm index build`'s folder: encoder, embeddings, index, BM25, manifest
    build        building that folder from a DocStore and an encoder
    open         opening that folder for search (load_retriever, DenseRetriever)
    sharded      ShardedIndex: contiguous chunk ranges, one DenseIndex each
    shard_build  building shards on many hosts; shard_merge: merging their top-k lists
    dist_search  searching shards held by several processes
    cli          the `ralm index` commands

`from ralm.retrieval.index import DenseIndex` (the path before this package existed) still works.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # ralm.retrieval.index was the module that is now index/dense.py: its names stay reachable
    # here, imported on first use (importing dense eagerly would load FAISS for every submodule)
    import importlib

    if name.startswith("_") or name == "dense":  # the import system's own probes
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    dense = importlib.import_module(f"{__name__}.dense")
    if name in dense.__all__:
        return getattr(dense, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
