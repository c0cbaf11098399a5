"""Where REALM's k candidate documents come from: the MIPS index alone, or BM25 fused with it.

REALM and BRENT take the top k of the (stale) MIPS index and re-score them with the live
towers. With `candidates = "hybrid"` the top `candidate_depth` of the index and of a BM25 index
are fused by reciprocal rank fusion (`ralm.retrieval.hybrid.fuse_rankings`) and the best k of
the fused list go on to the towers, which score them as before: p(z|x) and the gradient are
unchanged, only the candidate set differs. This helps where the towers start out weak (an
English encoder on Danish text) and the index collapses onto a few hub chunks.

BM25 sees what the towers see: chunks are indexed as the tower tokenizer's decoding of their
token ids, and a masked query as the decoding of its visible tokens ([MASK] and special tokens
dropped), so no masked word reaches BM25, and an uncased tokenizer folds both sides alike.
The query's own source chunk is excluded from both lists (REALM's trivial retrieval). Which chunk
that is has one rule for every path (training, evaluation, diagnosis, answer supervision, a run's
searcher): `trivial_ids`. Queries drawn from the knowledge corpus itself exclude their own chunk;
queries from another DocStore (`queries = ...`) exclude nothing, since their chunk ids are not
ids of the corpus. `run_search` is the search a run uses, with that rule applied.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.bm25 import BM25Searcher, store_analyzer
from ralm.retrieval.bm25_spec import bm25_options
from ralm.retrieval.hybrid import fuse_rankings

DenseSearch = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


def queries_are_corpus(store, qstore) -> bool:
    """Whether the query DocStore `qstore` is the knowledge corpus `store` (the same object or the
    same build, by fingerprint), so that a query's chunk id is a chunk id of the corpus."""
    return qstore is store or qstore.fingerprint == store.fingerprint


def trivial_ids(source_ids: np.ndarray, same_corpus: bool) -> np.ndarray:
    """(B,) int64 chunk ids of the knowledge corpus to exclude for queries made from chunks
    `source_ids` (B,) of the query store: the ids themselves when the queries are the corpus's own
    chunks (REALM's trivial retrieval), -1 (nothing excluded) when they come from another store.

    Example: trivial_ids([4, 9], True) -> [4, 9]; trivial_ids([4, 9], False) -> [-1, -1].
    """
    src = np.asarray(source_ids, dtype=np.int64)
    return src if same_corpus else np.full(src.shape, -1, dtype=np.int64)


class TrivialExclusion:
    """A REALM `search` (dense or hybrid) with `trivial_ids` applied to the source ids it is given,
    so callers pass a batch's `source_ids` as they are, whatever store the queries come from."""

    def __init__(self, search, same_corpus: bool) -> None:
        self.search = search
        self.same_corpus = bool(same_corpus)
        self.wants_query_ids = bool(getattr(search, "wants_query_ids", False))

    def __call__(
        self, q: np.ndarray, source_ids: np.ndarray, k: int, query_ids: np.ndarray | None = None
    ) -> np.ndarray:
        src = trivial_ids(source_ids, self.same_corpus)
        if self.wants_query_ids:
            return self.search(q, src, k, query_ids=query_ids)
        return self.search(q, src, k)


class HybridCandidates:
    """A REALM `search` callable: (q (B, d), source_ids (B,), k, query_ids (B, L)) -> (B, k) chunk ids.

    dense_search: the refresher's search (MIPS top-k with the query's source chunk excluded).
    bm25: a BM25Searcher over the knowledge corpus's decoded chunks (see `bm25_for_docs`).
    tokenizer: the query tokenizer, to decode visible query tokens.
    """

    wants_query_ids = True

    def __init__(
        self,
        dense_search: DenseSearch,
        bm25: BM25Searcher,
        tokenizer,
        *,
        depth: int = 32,
        rrf_k: float = 60.0,
    ) -> None:
        if depth < 1:
            raise RalmError(f"candidate_depth {depth}: must be >= 1")
        self.dense_search = dense_search
        self.bm25 = bm25
        self.tokenizer = tokenizer
        self.depth = int(depth)
        self.rrf_k = float(rrf_k)
        self._drop = {int(i) for i in tokenizer.all_special_ids}

    def query_texts(self, query_ids: np.ndarray) -> list[str]:
        """The visible words of each masked query: [MASK], [CLS], [SEP] and padding dropped."""
        rows = [[int(t) for t in row if int(t) not in self._drop] for row in np.asarray(query_ids)]
        return self.tokenizer.batch_decode(rows, skip_special_tokens=True)

    def __call__(
        self, q: np.ndarray, source_ids: np.ndarray, k: int, query_ids: np.ndarray | None = None
    ) -> np.ndarray:
        if query_ids is None:
            raise ValueError("hybrid candidates need the masked query ids")
        n = len(self.bm25)
        src = np.asarray(source_ids, dtype=np.int64)
        depth = min(max(self.depth, k), n - 1)
        dense = np.asarray(self.dense_search(q, src, depth), dtype=np.int64)  # (B, depth)
        texts = self.query_texts(query_ids)
        live = [i for i, t in enumerate(texts) if t.strip()]
        sparse: dict[int, np.ndarray] = {}
        if live:
            excl = [int(src[i]) if src[i] >= 0 else None for i in live]
            res = self.bm25.search_text([texts[i] for i in live], depth, exclude_ids=excl)
            sparse = dict(zip(live, res.ids, strict=True))
        out = np.empty((len(dense), k), dtype=np.int64)
        for b, row in enumerate(dense):
            lists = [row] if b not in sparse else [row, sparse[b]]
            ids, _ = fuse_rankings(lists, [np.zeros(len(x)) for x in lists], k, rrf_k=self.rrf_k)
            out[b] = ids[:k]
        return out


def bm25_for_docs(docs, *, lang: str | None = None) -> BM25Searcher:
    """A BM25Searcher over every chunk of `docs` (ChunkDocs) as the tower tokenizer decodes it.

    lang: a BM25 spec (`bm25_options`: "da", "nb:stem", "none" for plain analysis); None = the
    DocStore's recorded language."""
    tok = docs.inputs.tower.tokenizer
    store = docs.store
    texts: list[str] = []
    for lo in range(0, len(store), 4096):
        rows = [store.input_ids(i).tolist() for i in range(lo, min(lo + 4096, len(store)))]
        texts.extend(tok.batch_decode(rows, skip_special_tokens=True))
    if lang is None:
        return BM25Searcher.from_texts(
            texts, docstore_fingerprint=store.fingerprint, analyzer=store_analyzer(store)
        )
    return BM25Searcher.from_texts(texts, docstore_fingerprint=store.fingerprint, **bm25_options(lang))


def candidate_search(cfg, model, dense_search: DenseSearch):
    """The `search` a REALM model uses under `cfg` (PretrainConfig): the index's, or hybrid candidates."""
    if cfg.candidates != "hybrid":
        return dense_search
    bm25 = bm25_for_docs(model.docs, lang=cfg.bm25_lang)
    return HybridCandidates(dense_search, bm25, model.docs.inputs.tower.tokenizer, depth=cfg.candidate_depth)


def run_search(cfg, model, dense_search: DenseSearch, *, same_corpus: bool):
    """The `search` of a run under `cfg`: `candidate_search` with the trivial-retrieval rule
    (`trivial_ids`) applied, for the trainer and for a loaded run alike. Queries from the corpus
    itself pass their source ids through unchanged, so the search is `candidate_search`'s own."""
    search = candidate_search(cfg, model, dense_search)
    return search if same_corpus else TrivialExclusion(search, same_corpus=False)


def in_batch_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each query's candidates followed by the other queries' (in-batch negatives).

    rows (B, R) chunk ids -> (out (B, B*R), pad (B, B*R) bool): row b holds its own R chunks first,
    then those of queries 0..B-1 other than b, in order. A chunk that already stands earlier in
    the row (its own, or another query's twice) keeps its place but is marked in `pad`, to be left
    out of the softmax; its id is the row's first chunk.

    Example: rows [[1, 2], [2, 3]] -> out [[1, 2, 1, 3], [2, 3, 1, 2]], pad [[F, F, T, F], [F, F, F, T]].
    """
    rows = np.asarray(rows, dtype=np.int64)
    B, R = rows.shape
    out = np.repeat(rows[:, :1], B * R, axis=1)
    pad = np.zeros((B, B * R), dtype=bool)
    for b in range(B):
        seen: set[int] = set()
        order = [b, *(o for o in range(B) if o != b)]
        for slot, c in enumerate(rows[order].ravel().tolist()):
            if c in seen:
                pad[b, slot] = True
                continue
            seen.add(c)
            out[b, slot] = c
    return out, pad
