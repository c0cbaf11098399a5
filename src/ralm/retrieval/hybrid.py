"""Hybrid retrieval: a sparse (BM25) and a dense ranking fused into one.

Each first-stage retriever returns its top `depth` chunks per query; the union is re-ranked by
- "rrf", reciprocal rank fusion (Cormack et al. 2009): score(c) = sum_r w_r / (rrf_k + rank_r(c)),
  rank 1-based, a chunk missing from a list adds nothing; rrf_k = 60 as in the paper. It needs
  no score calibration, which is why it is the default.
- "weighted", a convex combination of min-max normalised scores: per query and retriever,
  s' = (s - min) / (max - min) over that retriever's top `depth` (1.0 when all are equal), a chunk
  missing from a list gets 0; score(c) = sum_r w_r s'_r(c).
Ties go to the lower chunk id, so the order is deterministic. Exclusion (`exclude_ids`) is
applied by each first-stage retriever, so the fused list never holds an excluded chunk.

Why: the bundled MiniLM is English; on Danish or Norwegian text BM25 finds the words and the
dense tower adds paraphrase matches. Fusing their ranks keeps BM25's recall where the encoder
collapses to a few hub chunks. Example (rrf_k=60, equal weights): BM25 [7, 3], dense [3, 9] ->
3: 1/62 + 1/61, 7: 1/61, 9: 1/62 -> [3, 7, 9].

Left out: learned fusion weights and score-distribution normalisation (z-scores), which need
relevance labels for the corpus at hand.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, Searcher, SearchResult, check_queries

METHODS = ("rrf", "weighted")


def fusion_weights(method: str, dense_weight: float) -> list[float] | None:
    """The weights of [BM25, dense] for `--dense-weight` w: [1 - w, w], except RRF at the equal
    weight 0.5, which keeps the usual RRF scores (None: 1 and 1)."""
    if method == "rrf" and dense_weight == 0.5:
        return None
    return [1.0 - dense_weight, dense_weight]


def fuse_rankings(
    ids: Sequence[np.ndarray],
    scores: Sequence[np.ndarray],
    k: int,
    *,
    method: str = "rrf",
    weights: Sequence[float] | None = None,
    rrf_k: float = 60.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Fuse R rankings of one query: ids[r], scores[r] (depth_r,) best first -> (ids (k',), scores (k',)).

    k' = min(k, size of the union); ids < 0 (padding) are ignored.
    Example: fuse_rankings([[7, 3], [3, 9]], [[2., 1.], [.9, .5]], 3) -> ([3, 7, 9], [.0325, .0164, .0161]).
    """
    if method not in METHODS:
        raise RalmError(f"fusion {method!r}: choose one of {', '.join(METHODS)}")
    w = np.ones(len(ids)) if weights is None else np.asarray(weights, dtype=np.float64)
    if len(w) != len(ids):
        raise RalmError(f"{len(w)} fusion weights for {len(ids)} rankings")
    fused: dict[int, float] = {}
    for r, (row_ids, row_scores) in enumerate(zip(ids, scores, strict=True)):
        row_ids = np.asarray(row_ids, dtype=np.int64)
        keep = row_ids >= 0
        row_ids = row_ids[keep]
        if method == "rrf":
            part = w[r] / (rrf_k + np.arange(1, len(row_ids) + 1, dtype=np.float64))
        else:
            s = np.asarray(row_scores, dtype=np.float64)[keep]
            lo, hi = (float(s.min()), float(s.max())) if len(s) else (0.0, 0.0)
            part = w[r] * ((s - lo) / (hi - lo) if hi > lo else np.ones_like(s))
        for cid, v in zip(row_ids.tolist(), part.tolist(), strict=True):
            fused[cid] = fused.get(cid, 0.0) + v
    if not fused:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    all_ids = np.fromiter(fused.keys(), dtype=np.int64, count=len(fused))
    all_scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
    order = np.lexsort((all_ids, -all_scores))[:k]  # score descending, then id ascending
    return all_ids[order], all_scores[order].astype(np.float32)


class HybridSearcher:
    """Several first-stage retrievers (usually BM25 and dense) fused into one ranking; a `Searcher`.

    retrievers: each answers `search_text`; n_items: chunks in the store (bounds the depth).
    depth: chunks taken from each retriever per query (>= k; 100 by default).
    """

    def __init__(
        self,
        retrievers: Sequence[Searcher],
        n_items: int,
        *,
        method: str = "rrf",
        weights: Sequence[float] | None = None,
        depth: int = 100,
        rrf_k: float = 60.0,
    ) -> None:
        if len(retrievers) < 2:
            raise RalmError("hybrid retrieval needs at least two retrievers to fuse")
        if method not in METHODS:
            raise RalmError(f"fusion {method!r}: choose one of {', '.join(METHODS)}")
        if depth < 1:
            raise RalmError(f"fusion depth {depth}: must be >= 1")
        if weights is not None and (
            len(weights) != len(retrievers) or any(x < 0 for x in weights) or not sum(weights) > 0
        ):
            raise RalmError(
                f"fusion weights {list(weights)}: give one non-negative weight per retriever, not all 0"
            )
        if rrf_k < 0:
            raise RalmError(f"rrf_k {rrf_k}: must be >= 0")
        self.retrievers = list(retrievers)
        self.n_items = int(n_items)
        self.method = method
        self.weights = None if weights is None else [float(x) for x in weights]
        self.depth = int(depth)
        self.rrf_k = float(rrf_k)

    def __len__(self) -> int:
        return self.n_items

    def __repr__(self) -> str:
        return f"HybridSearcher({self.method}, depth={self.depth}, {len(self.retrievers)} retrievers)"

    def search_text(self, queries: Sequence[str], k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Top-k fused chunk ids and fused scores per query (k results while the store has them)."""
        queries = check_queries(queries)
        n_excl = _max_excluded(exclude_ids)
        if k < 1 or k > self.n_items - n_excl:
            raise RalmError(f"k={k}: must be between 1 and the {self.n_items - n_excl} chunks left to return")
        depth = min(max(self.depth, k), self.n_items - n_excl)
        firsts = [r.search_text(queries, depth, exclude_ids) for r in self.retrievers]
        out_ids = np.empty((len(queries), k), dtype=np.int64)
        out_scores = np.empty((len(queries), k), dtype=np.float32)
        for i in range(len(queries)):
            ids, sc = fuse_rankings(
                [f.ids[i] for f in firsts],
                [f.scores[i] for f in firsts],
                k,
                method=self.method,
                weights=self.weights,
                rrf_k=self.rrf_k,
            )
            out_ids[i], out_scores[i] = ids, sc  # the union holds >= depth >= k ids
        return SearchResult(ids=out_ids, scores=out_scores)


def fuse_searchers(
    sparse: Searcher,
    dense: Searcher,
    n_items: int,
    *,
    fusion: str = "rrf",
    dense_weight: float = 0.5,
    depth: int = 100,
) -> HybridSearcher:
    """BM25 and dense fused as `--retriever hybrid` fuses them: [sparse, dense], weighted
    `fusion_weights(fusion, dense_weight)`, the top `depth` of each (n_items: chunks in the store)."""
    return HybridSearcher(
        [sparse, dense], n_items, method=fusion, depth=depth, weights=fusion_weights(fusion, dense_weight)
    )


def _max_excluded(exclude_ids: ExcludeIds) -> int:
    """The most ids excluded from any one query (0 for None)."""
    if exclude_ids is None:
        return 0
    if isinstance(exclude_ids, np.ndarray):
        arr = exclude_ids.reshape(len(exclude_ids), -1)
        return int((arr >= 0).sum(axis=1).max()) if arr.size else 0
    most = 0
    for row in exclude_ids:
        if row is None:
            continue
        vals = [row] if np.isscalar(row) else list(row)  # type: ignore[arg-type]
        most = max(most, sum(1 for v in vals if int(v) >= 0))
    return most
