"""The search interface every retrieval backend in ralm implements (dense, BM25, hybrid,
query likelihood, late interaction), and `Hit`, one retrieved chunk as every user of retrieval sees it.

A backend answers a batch of queries with the top-k chunk ids of one DocStore and their
scores, best first. `exclude_ids` removes given ids per query (REALM's "prohibit trivial
retrievals": the chunk a masked query came from); a retriever still returns k results when
the store has k other chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ralm.errors import RalmError


@dataclass
class SearchResult:
    """ids: (Q, k) int64 chunk ids, best first; scores: (Q, k) float32, higher is better."""

    ids: np.ndarray
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


ExcludeIds = Sequence[Sequence[int] | int | None] | None
"""Per query: an id, several ids, or None (nothing excluded); or None for all queries."""


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk: its DocStore chunk id (-1 for a passage given as text), score (higher is
    better), the title of its article, its text, and its rank in the list it came in (1 = best)."""

    id: int
    score: float
    title: str
    text: str
    rank: int


class Searcher(Protocol):
    """What every retrieval backend offers: text queries in, the top-k chunk ids of one DocStore out.

    BM25 (`BM25Searcher`), dense (`DenseSearcher`), hybrid (`HybridSearcher`), late interaction
    (`LateInteractionSearcher`), query likelihood (`QueryLikelihoodSearcher`) and a re-ranked first
    stage (`RerankSearcher`) are searchers; the rest of each (building, saving, `scores`, `rerank`)
    differs from backend to backend. The public front over them is `ralm.Retriever`, which opens an
    index or a DocStore as one (`Retriever.backend`). Checked statically: not runtime_checkable.
    """

    def search_text(self, queries: Sequence[str], k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Top-k chunk ids and scores for each query string, best first; `exclude_ids` removes
        ids per query and k results still come back while the store has k others."""
        ...


def check_queries(queries: Sequence[str]) -> list[str]:
    """The query batch as a list; RalmError for a single string, an empty batch or an empty query."""
    if isinstance(queries, str):
        raise RalmError("queries must be a list of strings, got a single string; wrap it in a list")
    queries = list(queries)
    if not queries:
        raise RalmError("empty query batch: pass at least one query")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise RalmError(f"query {i} is a {type(q).__name__}, not a string")
        if not q.strip():
            raise RalmError(f"query {i} is empty; pass some words to search for")
    return queries
