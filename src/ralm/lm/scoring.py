"""The scoring engine behind `NGramLM`: vectorised lookups over the sorted n-gram tables.

A batch of sentences becomes one flat id array; for every order k one `np.searchsorted`
finds the row of the k-gram starting at each position (`_locate`). From those rows:
backoff-form models (katz, kn, mkn, ARPA) score the longest n-gram in the model plus the
backoff weights of the longer contexts (ARPA semantics, as KenLM); stupid backoff scores the
relative frequency of the longest match times alpha per step; mle and add-delta use the
full available context only. `next_word_log10_probs` builds a whole next-word distribution
from the tables by the same rules, independently of the per-token path.

Left out: caching of lookups between calls, KenLM-style state objects for incremental
scoring (score a prefix once, extend it word by word).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ralm.errors import RalmError
from ralm.lm import arpa_bulk as _arpa_bulk
from ralm.lm.counts import BOS_ID, NGramCounts, Vocab
from ralm.lm.smoothing import BackoffTables


class NGramScorer:
    """Scoring over ralm's n-gram tables; `NGramLM` adds fitting, I/O and sampling."""

    vocab: Vocab
    order: int
    estimator: str
    params: dict
    _keys: list[np.ndarray]
    _tables: BackoffTables | None
    _counts: NGramCounts | None
    _ctx_tot: list[np.ndarray]

    @property
    def vocab_size(self) -> int:
        """Number of vocabulary entries including `<unk>`, `<s>`, `</s>`."""
        return len(self.vocab)

    def _lookup(self, k: int, query: np.ndarray) -> np.ndarray:
        table = self._keys[k - 1]
        return _arpa_bulk._find_rows(table, query)

    def _locate(self, flat: np.ndarray, sid: np.ndarray) -> list[np.ndarray]:
        """Rows of all n-grams of a flat id array, padded by P = order leading -1 entries.

        idx[k][P + i] is the row of the k-gram flat[i : i + k] when it lies in one sentence
        and is in the model, else -1; idx[k][P + i] for -P <= i < 0 is -1. Shape (P + T,).
        """
        T = len(flat)
        V = self.vocab_size
        P = self.order
        unigrams = np.full(P + T, -1, dtype=np.int64)
        unigrams[P:] = flat
        idx: list[np.ndarray] = [np.empty(0, dtype=np.int64), unigrams]
        for k in range(2, self.order + 1):
            out = np.full(P + T, -1, dtype=np.int64)
            n = T - k + 1
            if n > 0:
                prev = idx[k - 1][P : P + n]
                ok = np.flatnonzero((prev >= 0) & (sid[:n] == sid[k - 1 :]))
                if len(ok):
                    out[P + ok] = self._lookup(k, prev[ok] * V + flat[ok + k - 1])
            idx.append(out)
        return idx

    def _score_flat(self, flat: np.ndarray, sid: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """log10 score of predicting flat[t] for each t in `targets` from its sentence's history.

        flat, sid: int32 (T,) ids and sentence numbers (non-decreasing); targets: (n,) positions.
        """
        idx = self._locate(flat, sid)
        t = np.asarray(targets, dtype=np.int64)
        N = P = self.order
        # longest order the sentence allows at t (history inside t's sentence, plus t itself)
        avail = np.minimum(N, t - np.searchsorted(sid, sid[t]) + 1)
        rows = [np.empty(0, dtype=np.int64)] + [idx[k][P + t - k + 1] for k in range(1, N + 1)]

        def context_rows(m: int) -> np.ndarray:  # the m tokens before t, if in t's sentence
            return np.where(m < avail, idx[m][P + t - m], -1)

        if self._tables is None and self.estimator in ("mle", "laplace", "lidstone"):
            return self._score_add_delta(flat, t, avail, rows, context_rows)
        # longest n-gram in the model ending at t, even past a missing shorter one (as KenLM,
        # which fills such gaps in non-suffix-closed ARPA files with blank entries)
        longest = np.ones(len(t), dtype=np.int64)
        for k in range(2, N + 1):
            longest[rows[k] >= 0] = k
        lp = np.zeros(len(t))
        if self._tables is not None:
            for k in range(1, N + 1):
                sel = longest == k
                lp[sel] = self._tables.log10_prob[k - 1][rows[k][sel]]
            for m in range(1, N):  # backoff weights of the contexts longer than the match
                crow = context_rows(m)
                add = (m >= longest) & (crow >= 0)
                lp[add] += self._tables.log10_bow[m - 1][crow[add]]
            return lp
        c = self._counts  # stupid backoff: relative frequency of the longest match
        assert c is not None
        num = np.zeros(len(t))
        den = np.ones(len(t))
        for k in range(1, N + 1):
            sel = longest == k
            num[sel] = c.counts[k - 1][rows[k][sel]]
            den[sel] = self._ctx_tot[0][0] if k == 1 else self._ctx_tot[k - 1][context_rows(k - 1)[sel]]
        num[flat[t] == BOS_ID] = 0.0
        with np.errstate(divide="ignore"):
            lp = np.log10(num / den)
        return lp + (avail - longest) * math.log10(self.params["alpha"])

    def _score_add_delta(self, flat, t, avail, rows, context_rows) -> np.ndarray:
        """MLE / add-delta with the full available context (nltk.lm's definition)."""
        c = self._counts
        assert c is not None
        delta = self.params.get("delta", 0.0)
        num = np.zeros(len(t))
        den = np.zeros(len(t))
        for k in range(1, self.order + 1):
            sel = avail == k
            if not sel.any():
                continue
            r = rows[k][sel]
            num[sel] = np.where(r >= 0, c.counts[k - 1][r], 0)
            if k == 1:
                den[sel] = self._ctx_tot[0][0]
            else:
                cr = context_rows(k - 1)[sel]
                den[sel] = np.where(cr >= 0, self._ctx_tot[k - 1][cr], 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = (num + delta) / (den + delta * (self.vocab_size - 1))
        p[~(den + delta > 0)] = 0.0  # mle with an unseen context: nltk's 0
        p[flat[t] == BOS_ID] = 0.0
        with np.errstate(divide="ignore"):
            return np.log10(p)

    def _context_row(self, ids: Sequence[int]) -> int:
        """Row of the n-gram `ids` in its order's table, or -1."""
        row = int(ids[0])
        V = self.vocab_size
        for j, w in enumerate(ids[1:], start=2):
            row = int(self._lookup(j, np.array([row * V + int(w)]))[0])
            if row < 0:
                return -1
        return row

    def _extensions(self, k: int, row: int) -> tuple[int, int]:
        """Slice [lo, hi) of the order-k table holding the extensions of (k-1)-gram `row`."""
        V = self.vocab_size
        lo, hi = np.searchsorted(self._keys[k - 1], [row * V, (row + 1) * V])
        return int(lo), int(hi)

    def next_word_log10_probs(self, context: Sequence[str] = ()) -> np.ndarray:
        """log10 P(w | context) for every vocabulary id w, shape (vocab_size,).

        Index with `lm.vocab.token_to_id[token]`. Computed from the tables directly (not via
        `log10_prob`), so the two are an independent check of each other. For stupid
        backoff these are the (unnormalised) scores.
        """
        if isinstance(context, str):
            raise RalmError("context must be a sequence of tokens, not a string")
        ids = self.vocab.encode(list(context))[-(self.order - 1) :] if self.order > 1 else []
        V = self.vocab_size
        if self.estimator in ("mle", "laplace", "lidstone") and self._tables is None:
            c = self._counts
            assert c is not None
            m = len(ids)
            num = np.zeros(V)
            if m == 0:
                num[:] = c.counts[0]
                den = float(self._ctx_tot[0][0])
            else:
                row = self._context_row(ids)
                den = float(self._ctx_tot[m][row]) if row >= 0 else 0.0
                if row >= 0:
                    lo, hi = self._extensions(m + 1, row)
                    num[self._keys[m][lo:hi] % V] = c.counts[m][lo:hi]
            delta = self.params.get("delta", 0.0)
            p = (num + delta) / (den + delta * (V - 1)) if den + delta > 0 else np.zeros(V)
            p[BOS_ID] = 0.0
            with np.errstate(divide="ignore"):
                return np.log10(p)
        if self._tables is not None:
            lp = self._tables.log10_prob[0].copy()
        else:
            c = self._counts
            assert c is not None
            with np.errstate(divide="ignore"):
                lp = np.log10(c.counts[0] / self._ctx_tot[0][0])
            lp[BOS_ID] = -np.inf
        for m in range(1, len(ids) + 1):
            row = self._context_row(ids[-m:])
            if self._tables is None:
                lp += math.log10(self.params["alpha"])
            if row < 0:
                continue
            lo, hi = self._extensions(m + 1, row)
            words = self._keys[m][lo:hi] % V
            if self._tables is not None:
                lp += self._tables.log10_bow[m - 1][row]
                lp[words] = self._tables.log10_prob[m][lo:hi]
            else:
                c = self._counts
                assert c is not None
                lp[words] = np.log10(c.counts[m][lo:hi] / self._ctx_tot[m][row])
        return lp
