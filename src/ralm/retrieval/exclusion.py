"""Exclusions shared by every retriever (REALM's "prohibit trivial retrievals").

`prepare_exclude` checks k and turns a batch's exclusions (None, an id, or a list of ids per
query) into a (Q, E) int64 array padded with -1; `filter_excluded` keeps the top k of candidate
rows after dropping excluded and missing ids, best first with ties broken by the lower id.
Used by DenseIndex, BM25, the query-likelihood and late-interaction retrievers.
`select_candidates` (with its single-query fast path `select_single`) is DenseIndex's version:
it also says which rows must widen their search, because a tie at the k-th place may go on
past the candidates.
"""

from __future__ import annotations

import operator

import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds


def prepare_exclude(exclude_ids: ExcludeIds, n_queries: int, n_items: int, k: int) -> np.ndarray | None:
    """Check k and the exclusions of a query batch; returns them as a (Q, E) int64 array padded with -1.

    `exclude_ids`: None, or one entry per query: None, an id, or a sequence of ids (a (Q,) or
    (Q, E) integer array also works). Ids outside 0..n_items-1 are ignored (nothing to exclude).
    Raises RalmError when k < 1 or when some query has fewer than k chunks left to return.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise RalmError(f"k must be a positive integer, got {k!r}")
    k = int(k)
    if k > n_items:
        raise RalmError(f"k={k} is more than the N={n_items} chunks of the index; ask for k <= {n_items}")
    if exclude_ids is None:
        return None
    if (
        type(exclude_ids) is np.ndarray
        and exclude_ids.dtype == np.int64
        and exclude_ids.shape == (n_queries,)
        and k < n_items
    ):
        return exclude_ids[:, None]  # one id per query (REALM's own ids): k are always left
    arr = _exclude_array(exclude_ids, n_queries)
    width = arr.shape[1]
    if width == 0:
        return None
    if k + width > n_items:  # some query might have fewer than k chunks left: count them
        s = np.sort(np.where((arr >= 0) & (arr < n_items), arr, -1), axis=1)
        distinct = s >= 0
        distinct[:, 1:] &= s[:, 1:] != s[:, :-1]
        counts = distinct.sum(axis=1)
        worst = int(np.argmax(counts))
        if n_items - counts[worst] < k:
            raise RalmError(
                f"k={k} is more than the {n_items - counts[worst]} chunks left for query {worst} "
                f"(N={n_items}, {counts[worst]} excluded); ask for fewer results or exclude fewer ids"
            )
    return arr


def _exclude_array(exclude_ids: ExcludeIds, n_queries: int) -> np.ndarray:
    arr = None
    if isinstance(exclude_ids, np.ndarray) and exclude_ids.dtype.kind in "iu":
        arr = exclude_ids
    elif not isinstance(exclude_ids, (str, bytes)):
        try:
            cand = np.asarray(exclude_ids)
        except (ValueError, TypeError):  # ragged: different numbers of ids per query
            cand = None
        if cand is not None and cand.dtype.kind in "iu" and cand.ndim in (1, 2):
            arr = cand
    if arr is not None:
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or len(arr) != n_queries:
            raise RalmError(f"exclude_ids has {len(arr)} entries for {n_queries} queries; give one per query")
        return arr.astype(np.int64, copy=False)
    try:
        n = len(exclude_ids)  # type: ignore[arg-type]
    except TypeError:
        raise RalmError(
            f"exclude_ids must be a list with one entry (None, an id or a list of ids) per query, "
            f"got {type(exclude_ids).__name__}"
        ) from None
    if n != n_queries:
        raise RalmError(f"exclude_ids has {n} entries for {n_queries} queries; give one per query")
    rows: list[list[int]] = []
    for i, e in enumerate(exclude_ids):  # type: ignore[union-attr]
        if e is None:
            rows.append([])
        elif isinstance(e, (int, np.integer)) and not isinstance(e, bool):
            rows.append([int(e)])
        else:
            try:
                row = [int(x) for x in e if not isinstance(x, bool)]
                if len(row) != len(e):
                    raise TypeError
            except (TypeError, ValueError):
                raise RalmError(
                    f"exclude_ids[{i}] must be None, an integer id or a list of ids, got {e!r}"
                ) from None
            rows.append(row)
    width = max((len(r) for r in rows), default=0)
    out = np.full((n_queries, width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def filter_excluded(
    ids: np.ndarray, scores: np.ndarray, exclude: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top k of candidate rows after dropping excluded and missing (-1) ids.

    `ids`, `scores`: (Q, C) candidates (any order, higher score is better); `exclude`: (Q, E)
    from `prepare_exclude` or None. Returns ids (Q, k) int64 and scores (Q, k) float32, best first
    with ties broken by the lower id, and n_valid (Q,) the number of usable candidates; rows with
    n_valid < k are padded with id -1 and score -inf.
    """
    ids = np.asarray(ids, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float32)
    q, c = ids.shape
    if (
        exclude is None
        and c >= k
        and bool((ids[:, -1] >= 0).all())  # FAISS puts missing results (-1) last
        and (c == 1 or bool((scores[:, 1:] < scores[:, :-1]).all()))
    ):  # the common case: nothing to drop and already in order
        return ids[:, :k].copy(), scores[:, :k].copy(), np.full(q, c)
    valid = ids >= 0
    if exclude is not None and exclude.shape[1]:
        if exclude.shape[1] == 1:
            valid &= ids != exclude
        elif exclude.shape[1] <= 64:
            valid &= ~(ids[:, :, None] == exclude[:, None, :]).any(axis=2)
        else:
            for i in range(q):
                valid[i] &= ~np.isin(ids[i], exclude[i])
    all_valid = bool(valid.all())
    n_valid = np.full(q, c) if all_valid else valid.sum(axis=1)
    width = min(k, c)
    if c > 1 and bool((scores[:, 1:] >= scores[:, :-1]).any()):
        # Ties or not in order: sort by (valid first, score desc, id asc).
        order = np.lexsort((ids, -scores, ~valid), axis=1)[:, :width]
    elif not all_valid:
        # Strictly descending already (FAISS's order): move the valid ones forward, keeping order.
        order = np.argsort(~valid, axis=1, kind="stable")[:, :width]
    else:
        order = None
    if order is None:
        top_ids, top_scores = ids[:, :width].copy(), scores[:, :width].copy()
    else:
        flat = order + np.arange(0, q * c, c)[:, None]  # cheaper than take_along_axis
        top_ids, top_scores = ids.ravel()[flat], scores.ravel()[flat]
    if width < k:
        pad = k - width
        top_ids = np.pad(top_ids, ((0, 0), (0, pad)), constant_values=-1)
        top_scores = np.pad(top_scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    if (not all_valid or width < k) and int(n_valid.min()) < k:
        cols = np.arange(k)[None, :] >= n_valid[:, None]
        top_ids[cols] = -1
        top_scores[cols] = -np.inf
    return top_ids, top_scores, n_valid


# ufunc methods called directly: ndarray.all()/.min() go through Python wrappers that cost more than
# the reduction itself on a single query (benchmarks/retrieval/search.py, batch size 1)
_ALL = np.logical_and.reduce
_MIN = np.minimum.reduce
_ROW0 = np.zeros((1, 1), dtype=np.intp)  # the row index of a single query, for fancy indexing
_LESS = np.less


def select_single(
    ids: np.ndarray, scores: np.ndarray, excl: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray, None] | None:
    """`select_candidates`' fast path for a single query, on Python lists: a dozen values, where
    each numpy call would cost more than the work (benchmarks/retrieval/search.py, batch size 1). None when
    the row needs the general path: a missing candidate, a tie, or too few candidates.

    Example: ids [[7, 3, 9, 4]], scores [[.9, .8, .7, .6]], excl [[3]], k=2 -> ([[7, 9]], [[.9, .7]]).
    """
    row, s = ids[0].tolist(), scores[0].tolist()
    drop = 0 if excl is None else 1
    if len(row) <= k + drop or row[-1] < 0 or not all(map(operator.gt, s, s[1:])):
        return None  # FAISS pads a short row with -1 at the end; a tie needs the id order
    if excl is not None:
        e = int(excl[0, 0])
        if row[0] == e:  # the usual case (a chunk excluded from its own query): the next k
            return ids[:, 1 : k + 1], scores[:, 1 : k + 1], None
        if e in row[:k]:  # shift the candidates after it one place left (FAISS's fresh arrays)
            p = row.index(e)
            ids[0, p:k] = ids[0, p + 1 : k + 1]
            scores[0, p:k] = scores[0, p + 1 : k + 1]
    return ids[:, :k], scores[:, :k], None  # views of one row: C-contiguous, nobody else holds them


# ----------------------------------------------------------------------------- the index


def select_candidates(
    ids: np.ndarray, scores: np.ndarray, excl: np.ndarray | None, k: int, can_widen: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """`filter_excluded` of a search's candidates (ids, scores (Q, C), best first) plus which rows
    are done (None: all of them). can_widen: the search could still look at more candidates, so a
    row whose k-th result ties with its last candidate is not done (the lower ids must win it)."""
    c = ids.shape[1]
    # Fast path (most searches): nothing missing, scores strictly descending, at most one
    # excluded id per row. The k-th kept candidate then sits before the last one and scores
    # higher, so there is no tie to resolve and every row is done.
    fits = (excl is None and c > k) or (excl is not None and excl.shape[1] == 1 and c > k + 1)
    if fits and _MIN(ids[:, -1], axis=None) >= 0 and _ALL(_LESS(scores[:, 1:], scores[:, :-1]), axis=None):
        if excl is None:
            return ids[:, :k].copy(), scores[:, :k].copy(), None
        # a stable sort of "is excluded" moves the (at most one) excluded column to the end:
        # [7, 3, 9] excluding 3 -> columns [0, 2, 1] -> the first k of [7, 9, 3]
        keep = np.argsort(ids == excl, axis=1, kind="stable")[:, :k]
        rows = _ROW0 if len(ids) == 1 else np.arange(len(ids))[:, None]
        return ids[rows, keep], scores[rows, keep], None
    top_ids, top_scores, n_valid = filter_excluded(ids, scores, excl, k)
    done = n_valid >= k
    if can_widen:
        # A tie between the k-th result and the last candidate may continue past the
        # candidates; those rows search further so that the lower ids win it.
        last = (
            scores[:, -1] if bool((ids[:, -1] >= 0).all()) else np.where(ids >= 0, scores, np.inf).min(axis=1)
        )
        done &= top_scores[:, k - 1] > last
    return top_ids, top_scores, None if bool(done.all()) else done
