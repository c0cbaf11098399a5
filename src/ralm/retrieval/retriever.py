"""`Retriever`: any retrieval index directory (dense, BM25 or hybrid) or DocStore opened for text search.

The Python face of `ralm search`, in pyserini's manner: `Retriever.load(INDEX).search(queries, k)`
gives each query's top-k chunks as `Hit`s (chunk id, score, title, text, rank), best first. It
wraps `ralm.retrieval.searchers.open_searcher` (which checks the index against its DocStore) and
the searchers' common `search_text` (the `Searcher` protocol of `ralm.retrieval.base`), which
stays available as `search_ids` for code that wants the id and score arrays.

It is the one way in for code outside ralm.retrieval (an import-linter contract in pyproject.toml):
`Retriever.open(INDEX or STORE)` opens either, `Retriever.from_args(args)` what a command's
`--index/--corpus/--retriever/--lang` name (declared by `ralm.retrieval.options.add_retrieval_args`),
`Retriever.hybrid(bm25, dense)` fuses two open ones, and `matched_mask` tells matched hits apart.

Also here: `RerankSearcher` (a first stage's candidates re-scored by a reranker, e.g. ColBERT)
and the helpers that show search results as text (`snippet`, `top_texts`).

Deliberately left out: building indexes (`ralm.retrieval.index.build.build_index_dir`, `ralm index build`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, Hit, Searcher, SearchResult, check_queries
from ralm.retrieval.options import KINDS

__all__ = ["Hit", "RerankSearcher", "Retriever", "matched_mask", "snippet", "top_texts"]


class Retriever:
    """A retrieval index directory opened for text search: dense, BM25 or hybrid.

    Example (an index that `ralm index build corpus/ --out index/ --bm25` wrote)::

        retriever = Retriever.load("index/", kind="bm25")
        hits = retriever.search("Who taught Aristotle?", k=3)   # [Hit(id=..., ..., rank=1), ...]
        batch = retriever.search(["q1", "q2"], k=3)            # one list of hits per query

    Attributes: `store` (the DocStore searched), `backend` (the `Searcher` behind it: BM25, dense,
    hybrid, ...), `kind` ("dense", "bm25", "hybrid"), `path`.
    """

    def __init__(
        self,
        store: DocStore,
        backend: Searcher,
        kind: str,
        path: Path | None = None,
        description: str | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.kind = kind
        self.path = path
        where = path if path is not None else getattr(store, "root", "a DocStore")
        self.description = description or f"{kind} over {where}"

    @classmethod
    def open(
        cls,
        path_or_store: str | os.PathLike | DocStore | None = None,
        *,
        index: str | os.PathLike | None = None,
        corpus: str | os.PathLike | DocStore | None = None,
        kind: str = "bm25",
        lang: str | None = None,
        bm25_options: dict[str, Any] | None = None,
        log: Callable[[str], None] = lambda m: None,
    ) -> Retriever:
        """Open an index directory or a DocStore for search: the one way in from outside ralm.retrieval.

        path_or_store: an index directory (`ralm index build --out`, its retrieval.json), opened as
        `kind`; or a DocStore (its directory, or an open DocStore), searched by BM25 built in memory.
        index= / corpus=: the same, named as the commands' `--index INDEX` / `--corpus STORE` name
        them (`from_args`); both: the index, over `corpus` as its DocStore (when it moved).
        lang: the BM25 analysis (`ralm.retrieval.bm25_spec`: "en", "nb:stem", "none"); left out, an
        index's own BM25 is used, and over a DocStore its recorded language, else English.
        bm25_options: the analysis as `BM25Searcher.build` options instead of lang (over a DocStore,
        {} = the DocStore's own analysis: its language where Snowball knows it, else plain).
        One-line RalmError for a kind the inputs cannot give, a missing or damaged index or store.
        """
        from ralm.retrieval.bm25_spec import bm25_options as options_of

        if path_or_store is not None:
            if index is not None or corpus is not None:
                raise RalmError("give what to search once: as path_or_store, or as index= / corpus=")
            if _is_docstore(path_or_store):
                corpus = path_or_store
            else:
                index = path_or_store
        if kind not in KINDS:
            raise RalmError(f"retriever {kind!r}: choose one of {', '.join(KINDS)}")
        if bm25_options is None and lang:
            bm25_options = options_of(lang)
        if index is not None:
            store = corpus.root if isinstance(corpus, DocStore) else corpus
            r = cls.load(index, kind, store=store, bm25_options=bm25_options, log=log)
            r.description = f"{kind} over {index}"
            return r
        if corpus is None:
            raise RalmError("retrieval needs --index INDEX (bm25, dense or hybrid) or --corpus STORE (bm25)")
        if kind != "bm25":
            raise RalmError(
                f"--retriever {kind} needs an index directory (--index); --corpus alone gives bm25"
            )
        from ralm.retrieval.bm25 import BM25Searcher

        store = corpus if isinstance(corpus, DocStore) else DocStore(corpus)
        if bm25_options is None:
            bm25_options = options_of(store.lang or "en")
        backend = BM25Searcher.build(store, **bm25_options)
        where = store.root if isinstance(corpus, DocStore) else corpus
        return cls(store, backend, "bm25", None, f"bm25 ({backend.describe()}) over {where}")

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, log: Callable[[str], None] = lambda m: None) -> Retriever:
        """What a command's retrieval options name (`ralm.retrieval.options.add_retrieval_args`:
        --index, --corpus, --retriever, --lang), opened as `open` opens it; errors name the options."""
        return cls.open(index=args.index, corpus=args.corpus, kind=args.retriever, lang=args.lang, log=log)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        kind: str = "dense",
        *,
        store: str | os.PathLike | None = None,
        fusion: str = "rrf",
        dense_weight: float = 0.5,
        bm25_options: dict[str, Any] | None = None,
        log: Callable[[str], None] = lambda m: None,
    ) -> Retriever:
        """Open the index directory `path` (`ralm index build --out`) as a `kind` retriever.

        store: the DocStore, when it moved since the index was built; fusion ("rrf" or "weighted")
        and dense_weight (in [0, 1]) shape a hybrid's ranking; bm25_options (lang, stopwords,
        stemmer) the BM25 analysis wanted (built in memory when the index has another).
        RalmError (one line) for a missing or unfinished index, or one built from another corpus.
        """
        from ralm.retrieval.searchers import open_searcher

        _check_dense_weight(dense_weight)
        ds, backend = open_searcher(
            path, kind, store, bm25_options=bm25_options, fusion=fusion, dense_weight=dense_weight, log=log
        )
        return cls(ds, backend, kind, Path(path))

    @classmethod
    def hybrid(
        cls,
        sparse: Retriever,
        dense: Retriever,
        *,
        fusion: str = "rrf",
        dense_weight: float = 0.5,
        depth: int = 100,
    ) -> Retriever:
        """Two open retrievers of one DocStore, BM25 and dense, fused into a hybrid as
        `load(path, "hybrid")` fuses an index's own two: rank fusion ("rrf") or min-max normalised
        scores ("weighted"), the dense side weighted dense_weight, each giving its top `depth`.

        For a dense side that is not an index directory's (`ralm serve` over a REALM run: the run's
        query tower over its own index). RalmError when the two search different DocStores."""
        from ralm.retrieval.hybrid import fuse_searchers

        _check_dense_weight(dense_weight)
        if sparse.store is not dense.store and (
            len(sparse.store) != len(dense.store) or sparse.store.fingerprint != dense.store.fingerprint
        ):
            raise RalmError(
                f"hybrid: {sparse.description} and {dense.description} search different DocStores"
            )
        backend = fuse_searchers(
            sparse.backend,
            dense.backend,
            len(sparse.store),
            fusion=fusion,
            dense_weight=dense_weight,
            depth=depth,
        )
        return cls(sparse.store, backend, "hybrid", dense.path)

    @property
    def encoder(self) -> Any:
        """The dense side's `DualEncoder` (a dense or hybrid retriever); RalmError for BM25."""
        backends = getattr(self.backend, "retrievers", [self.backend])
        for b in backends:
            if hasattr(b, "encoder"):
                return b.encoder
        raise RalmError(f"{self.description}: has no dense side, so no encoder; open it as dense or hybrid")

    def doc_vectors(self) -> np.ndarray:
        """(N, d) the document vectors the index directory was built from (its embeddings.npy,
        memory-mapped), row i = chunk i; RalmError when the directory did not keep them."""
        emb = None if self.path is None else self.path / "embeddings.npy"
        try:
            vectors = np.load(emb, mmap_mode="r") if emb is not None else None
        except (OSError, ValueError):
            vectors = None
        if vectors is None or vectors.ndim != 2 or len(vectors) != len(self.store):
            raise RalmError(
                f"{emb or self.description}: no document vectors of this index (missing, unreadable or "
                "another size); rebuild it with `ralm index build`"
            )
        return vectors

    def search_ids(self, queries: Sequence[str], k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """The arrays behind `search`: ids (Q, k) int64 and scores (Q, k) float32, best first."""
        if not 1 <= k <= len(self.store):
            raise RalmError(f"k {k}: must be between 1 and the number of chunks ({len(self.store)})")
        return self.backend.search_text(check_queries(queries), k, exclude_ids)

    def search(
        self, queries: str | Sequence[str], k: int = 5, *, matched_only: bool = False
    ) -> list[Hit] | list[list[Hit]]:
        """The top-k chunks of one query (a list of `Hit`s), or of each of several (a list of lists).

        matched_only: leave out hits that did not match (no chunk, a score that is not finite, a BM25
        score <= 0: no query term in the chunk), so a query may get fewer than k."""
        one = isinstance(queries, str)
        res = self.search_ids([queries] if one else list(queries), k)
        keep = matched_mask(self.backend, res) if matched_only else np.ones(res.ids.shape, dtype=bool)
        rows = iter(self.store.get_many(int(i) for i in res.ids[keep]))
        hits = []
        for q_ids, q_scores, q_keep in zip(res.ids, res.scores, keep, strict=True):
            ranked = []
            for cid, score, ok in zip(q_ids, q_scores, q_keep, strict=True):
                if ok:
                    row = next(rows)
                    ranked.append(
                        Hit(int(cid), float(score), row["title"], row["text"], rank=len(ranked) + 1)
                    )
            hits.append(ranked)
        return hits[0] if one else hits

    def __repr__(self) -> str:
        return f"Retriever({str(self.path)!r}, kind={self.kind!r}, chunks={len(self.store)})"


class RerankSearcher:
    """A first-stage retriever's top `depth` chunks, re-scored by `reranker.rerank` (e.g. ColBERT
    MaxSim); a `Searcher`."""

    def __init__(self, first: Searcher, reranker: Any, depth: int = 100) -> None:
        """first: the first stage; reranker: anything with `rerank(queries, ids) -> SearchResult`."""
        self.first = first
        self.reranker = reranker
        self.depth = depth

    def search_text(self, queries: Sequence[str], k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Top-k after re-ranking; k <= depth."""
        if k > self.depth:
            raise RalmError(f"k {k} is larger than the re-ranking depth {self.depth}; raise the depth")
        queries = check_queries(queries)
        cand = self.first.search_text(queries, self.depth, exclude_ids)
        res = self.reranker.rerank(queries, cand.ids)
        return SearchResult(ids=res.ids[:, :k], scores=res.scores[:, :k])


def matched_mask(searcher: Searcher, result: SearchResult) -> np.ndarray:
    """(Q, k) bool: which hits of `searcher`'s `result` matched their query: a chunk (id >= 0), a
    finite score and, from BM25, a score > 0 (some query term in the chunk). What
    `Retriever.search(matched_only=True)` keeps, and the frozen LM's retrieval (ralm.frozen.retrieve)."""
    from ralm.retrieval.bm25 import BM25Searcher

    keep = np.isfinite(result.scores) & (result.ids >= 0)
    if isinstance(searcher, BM25Searcher):
        keep &= result.scores > 0
    return keep


def _is_docstore(path_or_store: str | os.PathLike | DocStore) -> bool:
    """Whether `Retriever.open`'s argument is a DocStore (an open one, or a folder with a DocStore's
    manifest.json and no index's retrieval.json); anything else is opened as an index directory."""
    from ralm.corpus.manifest import MANIFEST as STORE_MANIFEST
    from ralm.retrieval.index.directory import MANIFEST as INDEX_MANIFEST

    if isinstance(path_or_store, DocStore):
        return True
    p = Path(path_or_store)
    return (p / STORE_MANIFEST).is_file() and not (p / INDEX_MANIFEST).is_file()


def _check_dense_weight(dense_weight: float) -> None:
    if not 0.0 <= dense_weight <= 1.0:
        raise RalmError(f"dense_weight {dense_weight}: must be between 0 and 1")


def snippet(text: str, width: int = 100) -> str:
    """One line of at most `width` characters."""
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def top_texts(store: DocStore, result: SearchResult) -> dict[int, str]:
    """Chunk id -> text for every id in a search result."""
    ids = sorted({int(i) for i in np.asarray(result.ids).ravel() if i >= 0})
    return {i: store.get(i)["text"] for i in ids}
