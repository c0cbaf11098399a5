"""Opening a retrieval index directory for search: the DocStore it answers for, its dense, BM25
or hybrid retriever, checked against that DocStore (`ralm.Retriever.load` goes through here).

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
(`MANIFEST`, `verify_index_dir`): ralm.retrieval.index.directory.

`DenseRetriever` and `BM25Retriever` answer `search_text` the same way, so every caller can
switch between "dense" and "bm25".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, SearchResult, check_queries
from ralm.retrieval.bm25 import BM25Retriever
from ralm.retrieval.embed import embed_docstore
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.directory import INDEX_DIR_FORMAT, INDEX_DIR_VERSION, MANIFEST, check_encoder_files
from ralm.retrieval.index.io import IndexFileError, read_manifest
from ralm.retrieval.index.sharded import ShardedIndex, load_dense

__all__ = [
    "DenseRetriever",
    "dense_retriever_for",
    "index_dense_centred",
    "load_retriever",
    "open_index_dir",
]


class DenseRetriever:
    """Text queries -> query tower -> FAISS index (or ShardedIndex) over the DocStore's doc vectors."""

    def __init__(
        self,
        encoder: DualEncoder,
        index: DenseIndex | ShardedIndex,
        batch_size: int = 64,
        autocast: str = "auto",
    ) -> None:
        self.encoder = encoder
        self.index = index
        self.batch_size = batch_size
        self.autocast = autocast

    def search_text(self, queries: Sequence[str], k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Top-k chunk ids and scores for each query string."""
        queries = check_queries(queries)
        q = self.encoder.encode_queries(queries, batch_size=self.batch_size, autocast=self.autocast)
        return self.index.search(q, k, exclude_ids=exclude_ids)


def dense_retriever_for(
    store: DocStore,
    encoder: DualEncoder,
    work: Path,
    *,
    kind: str = "flat",
    batch_size: int = 64,
    progress: bool = True,
    center: bool = False,
    **params: Any,
) -> DenseRetriever:
    """Embed `store` with `encoder` into `work/` (resumable) and index it (centred: see DenseIndex)."""
    work.mkdir(parents=True, exist_ok=True)
    vectors = embed_docstore(
        encoder, store, work / "embeddings.npy", batch_size=batch_size, progress=progress
    )
    index = DenseIndex.build(
        vectors,
        kind=kind,
        docstore_fingerprint=store.fingerprint,
        encoder_fingerprint=encoder.fingerprint("doc"),
        center=center,
        **params,
    )
    return DenseRetriever(encoder, index)


def open_index_dir(
    path: str | os.PathLike, store: str | os.PathLike | None = None
) -> tuple[DocStore, dict[str, Any]]:
    """The DocStore an index directory was built from (or `store`, checked) and its manifest."""
    path = Path(path)
    if not path.is_dir():
        raise RalmError(f"{path}: no such index directory; build one with `ralm index build`")
    mpath = path / MANIFEST
    if not mpath.is_file():
        if (path / "encoder").exists():
            raise RalmError(
                f"{path}: unfinished index build; rerun `ralm index build` with the same options (it resumes)"
            )
        raise RalmError(f"{path}: not a ralm index (no {MANIFEST}); build one with `ralm index build`")
    manifest = read_manifest(mpath, INDEX_DIR_FORMAT, INDEX_DIR_VERSION, "retrieval index")
    ds = DocStore(store if store is not None else manifest["docstore"])
    if ds.fingerprint != manifest["docstore_fingerprint"]:
        raise RalmError(
            f"{path}: built from another corpus than {ds.root} (fingerprint {manifest['docstore_fingerprint'][:12]} "
            f"vs {ds.fingerprint[:12]}); rebuild it with `ralm index build`"
        )
    return ds, manifest


def load_retriever(
    path: str | os.PathLike,
    kind: str = "dense",
    store: str | os.PathLike | None = None,
    *,
    bm25_options: dict[str, Any] | None = None,
    fusion: str = "rrf",
    depth: int = 100,
    dense_weight: float = 0.5,
    log: Callable[[str], None] = print,
):
    """(DocStore, retriever) from an index directory; kind "dense", "bm25" or "hybrid" (both fused,
    the dense side weighted `dense_weight`, BM25 1 - dense_weight).

    bm25_options (lang/stopwords/stemmer): the BM25 analysis wanted. The index's own BM25 is used
    when it was built that way (or when none is asked for); otherwise one is built in memory.
    """
    path = Path(path)
    if kind not in ("dense", "bm25", "hybrid"):
        raise RalmError(f"retriever {kind!r}: choose dense, bm25 or hybrid")
    ds, manifest = open_index_dir(path, store)
    if kind == "dense":
        return ds, _index_dense(path, ds, manifest)
    sparse = _index_bm25(path, ds, manifest, bm25_options, log)
    if kind == "bm25":
        return ds, sparse
    from ralm.retrieval.hybrid import HybridRetriever, fusion_weights

    return ds, HybridRetriever(
        [sparse, _index_dense(path, ds, manifest)],
        len(ds),
        method=fusion,
        depth=depth,
        weights=fusion_weights(fusion, dense_weight),
    )


def _index_dense(path: Path, ds: DocStore, manifest: dict[str, Any]) -> DenseRetriever:
    check_encoder_files(path, manifest)  # the query tower has no fingerprint to be checked against
    enc = DualEncoder.from_pretrained(path / "encoder")
    try:
        index = load_dense(
            path / "dense", docstore_fingerprint=ds.fingerprint, encoder_fingerprint=enc.fingerprint("doc")
        )
    except IndexFileError as exc:
        raise _damaged_index(path, exc) from None
    return DenseRetriever(enc, index)


def index_dense_centred(path: str | os.PathLike, store: str | os.PathLike | None = None) -> DenseRetriever:
    """The dense side of an index directory, centred (see DenseIndex): its own centred index when
    it was built with `--center`, else an exact (flat) centred index over its saved embeddings.

    RalmError (one line) when the directory kept no embeddings to centre."""
    path = Path(path)
    ds, manifest = open_index_dir(path, store)
    if manifest.get("center"):
        return _index_dense(path, ds, manifest)
    check_encoder_files(path, manifest)
    enc = DualEncoder.from_pretrained(path / "encoder")
    emb = path / "embeddings.npy"
    try:
        vectors = np.load(emb, mmap_mode="r")
    except (OSError, ValueError):
        raise RalmError(
            f"{emb}: missing or unreadable, so the index cannot be centred; rebuild it with "
            "`ralm index build --center`, or evaluate the DocStore itself with --center"
        ) from None
    if vectors.shape != (len(ds), enc.dim):
        raise RalmError(f"{emb}: shape {tuple(vectors.shape)}, not ({len(ds)}, {enc.dim}); rebuild the index")
    index = DenseIndex.build(
        vectors,
        kind="flat",
        docstore_fingerprint=ds.fingerprint,
        encoder_fingerprint=enc.fingerprint("doc"),
        center=True,
    )
    return DenseRetriever(enc, index)


def _damaged_index(path: Path, exc: IndexFileError) -> RalmError:
    """A damaged file of an index directory: what is wrong, then verify it all and rebuild it."""
    return RalmError(
        f"{exc.what}; check the whole index with `ralm index verify {path}`, then rebuild it "
        "(`ralm index build ... --overwrite`)"
    )


def _index_bm25(
    path: Path,
    ds: DocStore,
    manifest: dict[str, Any],
    options: dict[str, Any] | None,
    log: Callable[[str], None],
) -> BM25Retriever:
    if manifest.get("bm25"):
        try:
            stored = BM25Retriever.load(path / "bm25", docstore_fingerprint=ds.fingerprint)
        except IndexFileError as exc:
            raise _damaged_index(path, exc) from None
        if options is None or stored.matches(**options):
            return stored
        built = BM25Retriever.build(ds, **options)
        log(
            f"{path}: its BM25 uses {stored.describe()}; built one with {built.describe()} in memory "
            "(rebuild the index with those options to keep it)"
        )
        return built
    if options is None:
        raise RalmError(f"{path}: built without BM25; rebuild with `ralm index build --bm25` or pass --lang")
    built = BM25Retriever.build(ds, **options)
    log(f"{path}: built without BM25; built one with {built.describe()} in memory")
    return built
