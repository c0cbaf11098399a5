"""Opening a retrieval index directory for search: its BM25, its dense index, or both fused
(hybrid), checked against the DocStore the directory was built from. `ralm.Retriever.load` (and
`Retriever.open`, the commands' `--index`) go through here; code outside ralm.retrieval goes
through them (an import-linter contract in pyproject.toml keeps it so).

    INDEX/
      retrieval.json     DocStore path + fingerprint, encoder fingerprints, index kind, and the
                         sizes + XXH3-128 of the encoder's files and the manifests (written last)
      build.json         the encoder source and options the build was asked for
      encoder/           the DualEncoder (queries are embedded with its query tower)
      embeddings.npy     doc vectors (resumable while being written; see ralm.retrieval.embed)
      dense/             the FAISS index (index.faiss + index.json), or its shards (shards.json +
                         shard-*-of-*/, built with shards > 1: ralm.retrieval.index.sharded)
      bm25/              the BM25 index, when built with bm25

A directory without retrieval.json is an unfinished build: `ralm index build` resumes it, but
only when asked for the same encoder (source and options; else one line naming the option that
differs), and nothing searches it. A finished index is never touched without overwrite=True
(`--overwrite`): the new one is then built beside it (PARENT/.NAME.rebuild, itself resumable)
and swapped in at the end, so the old one answers searches until then. The whole build holds
the directory's writer lock (ralm.locks): a second writer fails at once, naming the holder.
Files are checked on load (ralm.retrieval.index.directory: the encoder's files, index.faiss, the BM25
files) and all of them by `ralm index verify`.

Building one (`build_index_dir`): ralm.retrieval.index.build; the files and their checks
(`MANIFEST`, `verify_index_dir`, `read_index_dir`): ralm.retrieval.index.directory; the dense side
(`DenseSearcher`, FAISS): ralm.retrieval.index.open.

The BM25, dense and hybrid searchers all answer `search_text` (the `Searcher` protocol of
ralm.retrieval.base), so every caller can switch between them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.base import Searcher
from ralm.retrieval.bm25 import BM25Searcher
from ralm.retrieval.index.directory import read_index_dir
from ralm.retrieval.index.io import IndexFileError
from ralm.retrieval.index.open import damaged_index, open_dense

__all__ = ["open_searcher"]


def open_searcher(
    path: str | os.PathLike,
    kind: str = "dense",
    store: str | os.PathLike | None = None,
    *,
    bm25_options: dict[str, Any] | None = None,
    fusion: str = "rrf",
    depth: int = 100,
    dense_weight: float = 0.5,
    log: Callable[[str], None] = print,
) -> tuple[DocStore, Searcher]:
    """(DocStore, searcher) from an index directory; kind "dense", "bm25" or "hybrid" (both fused,
    the dense side weighted `dense_weight`, BM25 1 - dense_weight).

    bm25_options (lang/stopwords/stemmer): the BM25 analysis wanted. The index's own BM25 is used
    when it was built that way (or when none is asked for); otherwise one is built in memory.
    """
    path = Path(path)
    if kind not in ("dense", "bm25", "hybrid"):
        raise RalmError(f"retriever {kind!r}: choose dense, bm25 or hybrid")
    ds, manifest = read_index_dir(path, store)
    if kind == "dense":
        return ds, open_dense(path, ds, manifest)
    sparse = _index_bm25(path, ds, manifest, bm25_options, log)
    if kind == "bm25":
        return ds, sparse
    from ralm.retrieval.hybrid import fuse_searchers

    dense = open_dense(path, ds, manifest)
    return ds, fuse_searchers(sparse, dense, len(ds), fusion=fusion, dense_weight=dense_weight, depth=depth)


def _index_bm25(
    path: Path,
    ds: DocStore,
    manifest: dict[str, Any],
    options: dict[str, Any] | None,
    log: Callable[[str], None],
) -> BM25Searcher:
    if manifest.get("bm25"):
        try:
            stored = BM25Searcher.load(path / "bm25", docstore_fingerprint=ds.fingerprint)
        except IndexFileError as exc:
            raise damaged_index(path, exc) from None
        if options is None or stored.matches(**options):
            return stored
        built = BM25Searcher.build(ds, **options)
        log(
            f"{path}: its BM25 uses {stored.describe()}; built one with {built.describe()} in memory "
            "(rebuild the index with those options to keep it)"
        )
        return built
    if options is None:
        raise RalmError(f"{path}: built without BM25; rebuild with `ralm index build --bm25` or pass --lang")
    built = BM25Searcher.build(ds, **options)
    log(f"{path}: built without BM25; built one with {built.describe()} in memory")
    return built
