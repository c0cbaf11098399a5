"""Top-k over shards: each shard's top k of its contiguous share of the chunk ids, merged.

A sharded index splits chunk ids 0..N-1 into contiguous ranges [start, stop), one per shard
(`shard_ranges`, the same split as `Dist.share`: the first shards take the remainder). Row i
of shard s is chunk start_s + i, so a shard's local ids become global ids by adding start_s.

`shard_topk` searches one shard for a batch of queries with their global exclusions (REALM's
trivial retrievals) and returns global ids; `merge_topk` merges the shards' lists into the
global top k, best first, ties broken by the lower id — what `DenseIndex.search` returns on
the whole corpus. For an exact (flat) index the merged ids and scores equal the unsharded
search exactly: FAISS computes each inner product on its own, wherever the row sits (tested
against brute force, benchmarks/retrieval/sharded_index.py on 1M chunks).

Why it is exact: every shard returns its own exact top k_s (ties by lower id), with
k_s >= k + the query's exclusions inside the shard whenever the shard has that many chunks
(else all its chunks). Any chunk of the global top k is within the top k + |excluded| of
its own shard, so the union of the lists holds the global top k.

Deliberately left out: approximate backends give per-shard approximations (each shard trains
its own quantiser), so their merged results are close to, not equal to, the unsharded ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.exclusion import filter_excluded

__all__ = ["merge_topk", "shard_ranges", "shard_topk"]


def shard_ranges(n: int, n_shards: int) -> list[tuple[int, int]]:
    """[start, stop) of each of n_shards contiguous shares of n ids (first shards take the remainder).

    Example: shard_ranges(10, 3) -> [(0, 4), (4, 7), (7, 10)].
    """
    if n_shards < 1:
        raise RalmError(f"--shards {n_shards}: must be >= 1")
    if n_shards > n:
        raise RalmError(f"--shards {n_shards}: more shards than the {n} chunks; use at most {n}")
    base, extra = divmod(n, n_shards)
    out, start = [], 0
    for s in range(n_shards):
        stop = start + base + (1 if s < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def shard_topk(
    index, start: int, q: np.ndarray, k: int, exclude: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """One shard's candidates for the global top k: (ids (Q, k_s) global int64, scores (Q, k_s) float32).

    index: the shard's DenseIndex (row i = chunk start + i); q: (Q, d) float32 queries;
    exclude: (Q, E) global ids padded with -1 (`prepare_exclude`) or None. When the shard has
    k chunks left after every query's exclusions, it returns exactly its top k of the chunks
    not excluded; a smaller shard returns all its chunks (k_s = its size), exclusions included
    (`merge_topk` drops them).
    """
    c = index.count
    local = None
    if exclude is not None:
        inside = (exclude >= start) & (exclude < start + c)
        if inside.any():
            local = np.where(inside, exclude - start, -1)
            width = int(inside.sum(axis=1).max())
            if k + width > c:  # some query may have fewer than k chunks left here: take them all
                res = index.search(q, c)
                return res.ids.astype(np.int64, copy=False) + start, res.scores
    kk = min(k, c)
    res = index.search(q, kk, exclude_ids=local)
    return res.ids.astype(np.int64, copy=False) + start, res.scores


def merge_topk(
    ids: Sequence[np.ndarray], scores: Sequence[np.ndarray], k: int, exclude: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The global top k from per-shard candidate lists: (ids (Q, k) int64, scores (Q, k) float32).

    ids[s], scores[s]: (Q, k_s) global ids and scores of shard s (any order; -1 ids are
    missing results); exclude: (Q, E) global ids padded with -1, dropped here too. Best first,
    ties broken by the lower id. RalmError when some query has fewer than k candidates left.

    Example: ids [[[4, 1]], [[7, 9]]], scores [[[.9, .5]], [[.9, .8]]], k=3 -> ids [[4, 7, 9]].
    """
    if not ids:
        raise RalmError("nothing to merge: no shard returned candidates")
    all_ids = np.concatenate([np.asarray(x, dtype=np.int64) for x in ids], axis=1)
    all_scores = np.concatenate([np.asarray(x, dtype=np.float32) for x in scores], axis=1)
    top_ids, top_scores, n_valid = filter_excluded(all_ids, all_scores, exclude, k)
    short = np.flatnonzero(n_valid < k)
    if short.size:
        i = int(short[0])
        raise RalmError(
            f"k={k} but the shards hold only {int(n_valid[i])} chunks for query {i} after its exclusions; "
            "ask for fewer results"
        )
    return top_ids, top_scores
