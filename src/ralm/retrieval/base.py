"""The search interface every retriever in ralm implements (dense, BM25, and later LM-based).

A retriever answers a batch of queries with the top-k chunk ids of one DocStore and their
scores, best first. `exclude_ids` removes given ids per query (REALM's "prohibit trivial
retrievals": the chunk a masked query came from); a retriever still returns k results when
the store has k other chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class SearchResult:
    """ids: (Q, k) int64 chunk ids, best first; scores: (Q, k) float32, higher is better."""

    ids: np.ndarray
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


ExcludeIds = Sequence[Sequence[int] | int | None] | None
"""Per query: an id, several ids, or None (nothing excluded); or None for all queries."""


class Retriever(Protocol):
    """Anything that searches a DocStore by text."""

    def search_text(self, queries: Sequence[str], k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Top-k chunk ids and scores for each query string."""
        ...
