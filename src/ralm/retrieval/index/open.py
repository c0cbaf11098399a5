"""The dense side of a retrieval index directory: `DenseSearcher` (query tower -> FAISS), opened
from the directory (`open_dense`, checked against its DocStore and encoder files), centred
(`index_dense_centred`) or built over a DocStore in a work folder (`dense_retriever_for`).

The directory's layout and the BM25 and hybrid searchers beside this one: ralm.retrieval.searchers,
which `ralm.Retriever` opens an index through.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, SearchResult, check_queries
from ralm.retrieval.embed import embed_docstore
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.directory import check_encoder_files, read_index_dir
from ralm.retrieval.index.io import IndexFileError
from ralm.retrieval.index.sharded import ShardedIndex, load_dense

__all__ = ["DenseSearcher", "damaged_index", "dense_retriever_for", "index_dense_centred", "open_dense"]


class DenseSearcher:
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
) -> DenseSearcher:
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
    return DenseSearcher(encoder, index)


def open_dense(path: Path, ds: DocStore, manifest: dict[str, Any]) -> DenseSearcher:
    """The dense searcher of index directory `path` (`ds` and `manifest` from `read_index_dir`): its
    encoder (files checked against their records) and its FAISS index or shards (fingerprints checked)."""
    check_encoder_files(path, manifest)  # the query tower has no fingerprint to be checked against
    enc = DualEncoder.from_pretrained(path / "encoder")
    try:
        index = load_dense(
            path / "dense", docstore_fingerprint=ds.fingerprint, encoder_fingerprint=enc.fingerprint("doc")
        )
    except IndexFileError as exc:
        raise damaged_index(path, exc) from None
    return DenseSearcher(enc, index)


def index_dense_centred(path: str | os.PathLike, store: str | os.PathLike | None = None) -> DenseSearcher:
    """The dense side of an index directory, centred (see DenseIndex): its own centred index when
    it was built with `--center`, else an exact (flat) centred index over its saved embeddings.

    RalmError (one line) when the directory kept no embeddings to centre."""
    path = Path(path)
    ds, manifest = read_index_dir(path, store)
    if manifest.get("center"):
        return open_dense(path, ds, manifest)
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
    return DenseSearcher(enc, index)


def damaged_index(path: Path, exc: IndexFileError) -> RalmError:
    """A damaged file of an index directory: what is wrong, then verify it all and rebuild it."""
    return RalmError(
        f"{exc.what}; check the whole index with `ralm index verify {path}`, then rebuild it "
        "(`ralm index build ... --overwrite`)"
    )
