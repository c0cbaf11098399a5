"""Estimators that produce backoff-form (ARPA) tables from `NGramCounts`.

A backoff-form model stores, for every n-gram row of every order, `log10 p(w | context)`
and, for rows that are contexts, a log10 backoff weight `b(context)`; an n-gram that is
not listed scores `b(context) * p(w | shorter context)`. This module builds those tables
for Katz backoff, interpolated Kneser-Ney (one discount per order), modified Kneser-Ney
(Chen & Goodman D1, D2, D3+ per order, computed the way KenLM's lmplz does) and add-delta
unigrams. Interpolated models are written in backoff form with the interpolation folded in:
the probability of a listed n-gram is the full interpolated one and the backoff weight of a
context is its interpolation weight gamma.

Conventions shared with lmplz: `<s>` is context only (its unigram log10 prob is stored as
-99, SRILM-style; lmplz stores 0, which no sentence score uses); `<unk>` is a zero-count word whose probability is its share of the lowest order's
leftover mass spread uniformly over the vocabulary (all types incl. `</s>` and `<unk>`, not
`<s>`); log10 values are floored at -99 (probability zero).

Left out: pruning, count cut-offs, lmplz's `--interpolate_unigrams 0` (SRILM) mode, Katz
with count thresholds other than the Good-Turing k, and Witten-Bell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ralm.errors import RalmError
from ralm.lm.counts import BOS_ID, UNK_ID, NGramCounts

LOG10_ZERO = -99.0
MKN_FALLBACK = (0.5, 1.0, 1.5)  # lmplz --discount_fallback defaults


@dataclass
class BackoffTables:
    """log10_prob[k-1], log10_bow[k-1]: float64 (n_k,) aligned with the order-k keys."""

    log10_prob: list[np.ndarray]
    log10_bow: list[np.ndarray]


def safe_log10(p: np.ndarray) -> np.ndarray:
    """log10 with zero (or rounding-negative) mapped to the ARPA floor -99."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log10(p)
    out[~(p > 0)] = LOG10_ZERO
    return np.maximum(out, LOG10_ZERO)


def count_of_counts(values: np.ndarray, upto: int) -> np.ndarray:
    """n[r] = number of entries with value r, for r = 0..upto (shape (upto + 1,))."""
    v = np.asarray(values, dtype=np.int64)
    return np.bincount(v[v <= upto], minlength=upto + 1)[: upto + 1]


def mkn_discounts(n1: int, n2: int, n3: int, n4: int) -> tuple[float, float, float] | None:
    """Chen & Goodman (eq. 26) modified Kneser-Ney discounts, or None where lmplz refuses them.

    Y = n1 / (n1 + 2 n2); D_j = j - (j + 1) Y n_{j+1} / n_j for j = 1, 2, 3. Like lmplz this
    needs n1, n2, n3 > 0 and 0 <= D_j <= j. Example: (10, 5, 3, 2) -> (0.5, 1.1, 1.6667).
    """
    n = [0, n1, n2, n3, n4]
    if min(n1, n2, n3) <= 0:
        return None
    y = n1 / (n1 + 2.0 * n2)
    d = tuple(j - (j + 1) * y * n[j + 1] / n[j] for j in (1, 2, 3))
    if any(not 0.0 <= d[j - 1] <= j for j in (1, 2, 3)):
        return None
    return d  # type: ignore[return-value]


def kn_discount(n1: int, n2: int) -> float | None:
    """Interpolated Kneser-Ney discount D = n1 / (n1 + 2 n2), or None when n1 == 0."""
    if n1 <= 0:
        return None
    return n1 / (n1 + 2.0 * n2)


def kn_adjusted_counts(counts: NGramCounts) -> list[np.ndarray]:
    """lmplz's adjusted counts per order (the counts' integer type, aligned with the keys).

    Highest order: raw counts. Lower orders: the number of distinct words seen to the left
    (continuation count N1+(. w)), except n-grams starting with `<s>`, which cannot be
    extended to the left and keep their raw count. The unigrams `<s>` and `<unk>` get 0.
    """
    N = counts.order
    dtype = counts.counts[0].dtype  # int32 unless the corpus has 2^31+ tokens
    adj: list[np.ndarray] = [np.empty(0, dtype=dtype)] * N
    adj[N - 1] = counts.counts[N - 1].copy()
    for k in range(N - 1, 0, -1):
        cont = np.bincount(counts.suffix[k], minlength=len(counts.keys[k - 1])).astype(dtype)
        first = counts.first_word(k)
        adj[k - 1] = np.where(first == BOS_ID, counts.counts[k - 1], cont)
    adj[0] = adj[0].copy()
    adj[0][BOS_ID] = 0
    adj[0][UNK_ID] = 0
    return adj


def choose_kn_discounts(
    adj: list[np.ndarray],
    modified: bool,
    given: object = None,
    fallback: object = "default",
) -> tuple[list[tuple[float, float, float]], list[int]]:
    """Discounts (D1, D2, D3+) per order and the orders (1-based) that used the fallback.

    given: None (estimate), one number (kn) / one 3-tuple (mkn) for all orders, or a list
    with one entry per order. fallback: used for an order whose counts-of-counts do not
    allow an estimate (tiny corpora); None raises RalmError instead, as lmplz does.
    """
    N = len(adj)
    if fallback == "default":
        fallback = MKN_FALLBACK if modified else MKN_FALLBACK[0]
    out: list[tuple[float, float, float]] = []
    used_fallback: list[int] = []
    per_order = _per_order(given, N, modified)
    for k in range(1, N + 1):
        if per_order is not None:
            d3 = _as_triple(per_order[k - 1], modified, k)
        else:
            n = count_of_counts(adj[k - 1], 4)
            est = mkn_discounts(*(int(x) for x in n[1:5])) if modified else kn_discount(int(n[1]), int(n[2]))
            if est is None:
                if fallback is None:
                    raise RalmError(
                        f"cannot estimate Kneser-Ney discounts for {k}-grams (counts of counts "
                        f"n1..n4 = {n[1:5].tolist()}); corpus too small: pass discount_fallback"
                    )
                est = fallback
                used_fallback.append(k)
            d3 = _as_triple(est, modified, k)
        out.append(d3)
    return out, used_fallback


def _as_triple(value: object, modified: bool, k: int) -> tuple[float, float, float]:
    try:
        if modified:
            d = tuple(float(x) for x in value)  # type: ignore[union-attr]
            if len(d) != 3:
                raise ValueError
        else:
            d = (float(value),) * 3  # type: ignore[arg-type]
    except (TypeError, ValueError):
        want = "(D1, D2, D3+)" if modified else "one number"
        raise RalmError(f"discount for {k}-grams must be {want}, got {value!r}") from None
    for j, dj in enumerate(d, start=1):
        if not (np.isfinite(dj) and 0.0 <= dj <= j):
            raise RalmError(f"discount D{j} for {k}-grams must be in [0, {j}], got {dj}")
    return d  # type: ignore[return-value]


def _per_order(given: object, N: int, modified: bool) -> list | None:
    if given is None:
        return None
    if not modified and isinstance(given, int | float):
        return [given] * N
    try:
        seq = list(given)  # type: ignore[call-overload]
    except TypeError:
        raise RalmError(f"discounts must be a number or a list per order, got {given!r}") from None
    if modified and seq and all(isinstance(x, int | float) for x in seq):
        return [seq] * N
    if len(seq) != N:
        raise RalmError(f"give one discount per order ({N}), got {len(seq)}")
    return seq


def kneser_ney(
    counts: NGramCounts,
    discounts: list[tuple[float, float, float]],
    adj: list[np.ndarray] | None = None,
) -> BackoffTables:
    """Interpolated (modified) Kneser-Ney in backoff form, as lmplz computes it.

    For order k and context c (lmplz / Chen & Goodman):
      u(c w) = (a(c w) - D(a(c w))) / sum_x a(c x)
      gamma(c) = (D1 N1(c .) + D2 N2(c .) + D3 N3+(c .)) / sum_x a(c x)
      p(w | c) = u(c w) + gamma(c) p(w | c'),  with p(w | empty) interpolating 1/|V|.
    The backoff weight of c is gamma(c); |V| counts every type except `<s>`.
    adj: `kn_adjusted_counts(counts)` if already computed. Memory: the tables plus a few
    arrays of one order (each order's probabilities become log10 in place once the next
    order has used them).
    """
    if adj is None:
        adj = kn_adjusted_counts(counts)
    V = counts.V
    n_types = V - 1  # <s> excluded, <unk> included
    probs: list[np.ndarray] = []
    bows: list[np.ndarray] = []
    for k in range(1, counts.order + 1):
        a = adj[k - 1].astype(np.float64)
        dvec = np.array((0.0, *discounts[k - 1]))
        d = dvec[np.minimum(adj[k - 1], 3)]
        if k == 1:
            total = a.sum()
            gamma0 = d.sum() / total
            p = (a - d) / total + gamma0 / n_types
            p[BOS_ID] = 0.0
        else:
            ctx = counts.prefix(k)
            n_ctx = len(counts.keys[k - 2])
            den = np.bincount(ctx, weights=a, minlength=n_ctx)
            gnum = np.bincount(ctx, weights=d, minlength=n_ctx)
            has = den > 0
            gamma = np.ones(n_ctx)
            gamma[has] = gnum[has] / den[has]
            del gnum
            # p = (a - d) / den[ctx] + gamma[ctx] * p_lower, computed in place
            a -= d
            del d
            a /= den[ctx]
            del den
            lower = probs[k - 2][counts.suffix[k - 1]]
            lower *= gamma[ctx]
            del ctx
            a += lower
            del lower
            p = a
            bows[k - 2] = np.where(has, safe_log10(gamma), 0.0)
            _log10_in_place(probs[k - 2])  # the next order has used them
        probs.append(p)
        bows.append(np.zeros(len(p)))
    _log10_in_place(probs[-1])
    return BackoffTables(probs, bows)


def _log10_in_place(p: np.ndarray) -> None:
    """p = safe_log10(p) without a second array."""
    zero = ~(p > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log10(p, out=p)
    p[zero] = LOG10_ZERO
    np.maximum(p, LOG10_ZERO, out=p)


def good_turing_discounts(n: np.ndarray, k: int) -> np.ndarray | None:
    """Katz's Good-Turing discount ratios d_r for r = 0..k (d_0 unused), or None if unusable.

    r* = (r + 1) n_{r+1} / n_r,  A = (k + 1) n_{k+1} / n_1,  d_r = (r*/r - A) / (1 - A).
    Needs n_1..n_{k+1} > 0, A < 1 and every 0 < d_r <= 1. n has shape (>= k + 2,).
    """
    if np.any(n[1 : k + 2] <= 0):
        return None
    common = (k + 1) * n[k + 1] / n[1]
    if common >= 1.0:
        return None
    r = np.arange(1, k + 1, dtype=np.float64)
    rstar = (r + 1) * n[2 : k + 2] / n[1 : k + 1]
    d = (rstar / r - common) / (1.0 - common)
    if np.any(d <= 0) or np.any(d > 1):
        return None
    return np.concatenate(([1.0], d))


def katz_discount_ratios(values: np.ndarray, k: int) -> tuple[np.ndarray, bool]:
    """Discount ratio for counts 0..k (counts > k are not discounted); and whether the
    absolute-discount fallback replaced Good-Turing.

    When the Good-Turing ratios for threshold k are unusable (noisy counts of counts, e.g.
    n6 > n5 gives d5 > 1), the largest threshold k' < k that works is used, counts above
    k' staying undiscounted; if none works, absolute discounting d_r = (r - D) / r with
    D = n1 / (n1 + 2 n2) (0.5 without singletons or doubletons).
    """
    n = count_of_counts(values, k + 1).astype(np.float64)
    for kk in range(k, 0, -1):
        d = good_turing_discounts(n, kk)
        if d is not None:
            return np.concatenate((d, np.ones(k - kk))), False
    D = n[1] / (n[1] + 2 * n[2]) if n[1] > 0 and n[2] > 0 else 0.5
    r = np.arange(0, k + 1, dtype=np.float64)
    r[0] = 1.0
    d = (r - D) / r
    d[0] = 1.0
    return d, True


def katz(counts: NGramCounts, k: int = 5) -> tuple[BackoffTables, list[list[float]], list[int]]:
    """Katz backoff with Good-Turing discounts for counts <= k (Katz 1987).

    p(w | c) = d_{c(cw)} c(cw) / c(c.) for seen c w, else alpha(c) p(w | c'), with alpha(c)
    making each distribution sum to 1. Unigrams: discounted counts plus the leftover mass
    spread uniformly over the vocabulary (KenLM's convention, which is what `<unk>` gets).
    A context whose seen words already hold all of the lower order's mass cannot back off;
    its seen probabilities are rescaled to sum to 1 (as SRILM does).
    Returns the tables, the ratios d_1..d_k per order, and the orders that used the
    absolute-discount fallback.
    """
    V = counts.V
    ratios: list[list[float]] = []
    fallback: list[int] = []
    probs: list[np.ndarray] = []
    bows: list[np.ndarray] = []
    for order in range(1, counts.order + 1):
        c = counts.counts[order - 1]
        if order == 1:
            c = c.copy()
            c[BOS_ID] = 0
        d, fb = katz_discount_ratios(c[c > 0], k)
        ratios.append(d[1:].tolist())
        if fb:
            fallback.append(order)
        factor = np.where(c <= k, d[np.minimum(c, k)], 1.0)
        if order == 1:
            total = float(c.sum())
            p = factor * c / total
            leftover = max(0.0, 1.0 - p.sum())
            p = p + leftover / (V - 1)
            p[BOS_ID] = 0.0
        else:
            ctx = counts.prefix(order)
            tot = counts.context_totals(order)
            p = factor * c / tot[ctx]
            lower = probs[order - 2][counts.suffix[order - 1]]
            n_ctx = len(tot)
            num = 1.0 - np.bincount(ctx, weights=p, minlength=n_ctx)
            den = 1.0 - np.bincount(ctx, weights=lower, minlength=n_ctx)
            # No unseen word left with lower-order mass: renormalise the seen ones (SRILM).
            stuck = (tot > 0) & (den <= 1e-12)
            if stuck.any():
                seen_mass = 1.0 - num
                p = np.where(stuck[ctx], p / seen_mass[ctx], p)
                num = np.where(stuck, 0.0, num)
            alpha = np.where(den > 1e-12, np.clip(num, 0.0, None) / np.maximum(den, 1e-12), 0.0)
            bows[order - 2] = np.where(tot > 0, safe_log10(alpha), 0.0)
        probs.append(p)
        bows.append(np.zeros(len(p)))
    return BackoffTables([safe_log10(p) for p in probs], bows), ratios, fallback


def add_delta_unigrams(counts: NGramCounts, delta: float) -> BackoffTables:
    """Add-delta unigram table: (c(w) + delta) / (N + delta |V|), `<s>` excluded."""
    c = counts.counts[0].astype(np.float64).copy()
    c[BOS_ID] = 0.0
    p = (c + delta) / (c.sum() + delta * (counts.V - 1))
    p[BOS_ID] = 0.0
    return BackoffTables([safe_log10(p)], [np.zeros(len(p))])
