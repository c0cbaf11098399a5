"""Search a sharded index over torch.distributed: rank r holds shard r, every rank gets the global top k.

One search is three collectives (gloo on CPU, NCCL on GPU; whatever group `Dist` joined):

    1. all-gather the queries and their exclusions   every rank now has the whole batch (Q, d)
    2. each rank: its shard's top k for the batch     shard_topk: global ids, (Q, k_s)
    3. all-gather those lists, merge                  merge_topk: the global top k, (Q, k)

and each rank keeps the rows of its own queries. Every rank checks the same gathered batch,
so a bad k or exclusion list raises the same RalmError on every rank instead of leaving the
others waiting in a collective. For flat shards the result equals `DenseIndex.search` on the
whole corpus exactly (ralm.retrieval.index.shard_merge).

Every rank of the group must call `search` the same number of times, in the same order (as
the ranks of a DDP step do; a rank with no queries passes an empty (0, d) batch).
Left out: overlapping the collectives with the shard search, and GPU-side merging.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch.distributed as tdist

from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, SearchResult
from ralm.retrieval.exclusion import prepare_exclude
from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.shard_merge import merge_topk, shard_topk
from ralm.train.distributed import Dist

__all__ = ["DistributedShardSearch", "all_gather"]


def all_gather(dist: Dist, obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank ([obj] in one process)."""
    if not dist.enabled:
        return [obj]
    parts: list[Any] = [None] * dist.world
    tdist.all_gather_object(parts, obj)
    return parts


def _pad(rows: list[np.ndarray | None], n_rows: list[int]) -> np.ndarray | None:
    """Per-rank (n_r, E_r) exclusion arrays (None: none) as one (Q, max E) array padded with -1."""
    width = max((r.shape[1] for r in rows if r is not None), default=0)
    if width == 0:
        return None
    out = np.full((sum(n_rows), width), -1, dtype=np.int64)
    pos = 0
    for r, n in zip(rows, n_rows, strict=True):
        if r is not None:
            out[pos : pos + n, : r.shape[1]] = r
        pos += n
    return out


class DistributedShardSearch:
    """This rank's shard of a sharded index, searched together with the other ranks' shards.

    shard: a DenseIndex of chunks start..start + shard.count - 1 of `total`; dist: the job.
    `search(q, k, exclude_ids)` has DenseIndex.search's meaning for this rank's queries.
    """

    def __init__(self, dist: Dist, shard: DenseIndex, start: int, total: int) -> None:
        self.dist = dist
        self.shard = shard
        self.start = int(start)
        self.total = int(total)
        self.manifest = shard.manifest
        self.kind = shard.kind
        self.metric = shard.metric

    @property
    def count(self) -> int:
        return self.total

    def __len__(self) -> int:
        return self.total

    @property
    def dim(self) -> int:
        return self.shard.dim

    @property
    def docstore_fingerprint(self) -> str:
        return self.shard.docstore_fingerprint

    def memory_bytes(self) -> int:
        """This rank's shard only."""
        return self.shard.memory_bytes()

    def search(
        self, query_vectors: np.ndarray, k: int, exclude_ids: ExcludeIds = None, *, all_rows: bool = False
    ) -> SearchResult:
        """Global top-k ids and scores (Q_r, k) of this rank's queries (Q_r, d), best first, ties
        by the lower id; `all_rows`: those of every rank's queries (Q, k), in rank order.

        A collective: every rank must call it (see the module docstring).
        """
        q = np.ascontiguousarray(query_vectors, dtype=np.float32)
        if q.ndim != 2:
            raise RalmError(f"query vectors must be a 2-D (Q, d) array, got shape {q.shape}")
        parts = all_gather(self.dist, (q, exclude_ids))
        n_rows = [len(p[0]) for p in parts]
        excl = _pad(
            [prepare_exclude(e, n, self.total, k) for (_, e), n in zip(parts, n_rows, strict=True)], n_rows
        )
        q_all = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else q
        if len(q_all) == 0:
            return SearchResult(ids=np.empty((0, k), np.int64), scores=np.empty((0, k), np.float32))
        lists = all_gather(self.dist, shard_topk(self.shard, self.start, q_all, k, excl))
        ids, scores = merge_topk([x[0] for x in lists], [x[1] for x in lists], k, excl)
        if all_rows:
            return SearchResult(ids=ids, scores=scores)
        lo = sum(n_rows[: self.dist.rank])
        hi = lo + n_rows[self.dist.rank]
        return SearchResult(ids=ids[lo:hi], scores=scores[lo:hi])
