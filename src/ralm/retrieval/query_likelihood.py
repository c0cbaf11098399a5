"""Query-likelihood retrieval (Ponte & Croft 1998; Zhai & Lafferty 2001) over a DocStore.

Each chunk d is a unigram LM smoothed with the collection LM p_c(t) = cf(t) / |C|, and
score(q, d) = log p(q | d) = sum over query terms t of qtf(t) * log p(t | d):

    Dirichlet      p(t|d) = (tf(t,d) + mu p_c(t)) / (|d| + mu)
    Jelinek-Mercer p(t|d) = (1 - lam) tf(t,d) / |d| + lam p_c(t)      (lam: the collection's weight)

Both are computed from a sparse (N, V) term-count matrix (scipy CSR) with the part that does
not depend on whether d contains t taken out, so only the documents that contain a query
term need sparse work:

    Dirichlet  sum_t qtf [log(mu p_c) - log(|d| + mu)] + sum_{t in d} qtf log(1 + tf / (mu p_c))
    JM         sum_t qtf log(lam p_c) + sum_{t in d} qtf log(1 + (1 - lam) tf / (lam p_c |d|))

The first sums are one constant per query plus, for Dirichlet, |q| log(|d| + mu) per document
(a dense (N,) vector); the second is one sparse matrix product W q for a whole query batch.
The scores returned are these true log-likelihoods (natural log), not a rank-equivalent form.

mu: 2000 is Zhai & Lafferty's setting for TREC documents of several hundred to thousands of
words. DocStore chunks are short (<= 128 word pieces; 85 terms on average in the English
sample), and with mu = 2000 a chunk's own counts would weigh only ~4% against the collection.
The default here is mu = 200, a little over twice the mean chunk length. On the English sample
DocStore (5,409 chunks): known-item search with a random 6-term span of 500 chunks as the
query gave MRR 0.990 / 0.984 / 0.964 at mu = 10 / 200 / 2000 (verbatim spans favour little
smoothing); the chatterbot trivia questions whose answer string occurs in the sample (137)
gave answer recall@5 0.139 / 0.175 / 0.175 / 0.153 at mu = 10 / 200 / 500 / 2000 (noisy).
lam = 0.5 for JM: Zhai & Lafferty found ~0.1 best for title queries and ~0.7 for long,
verbose ones; question-like and REALM masked-sentence queries sit between (trivia recall@5:
0.168 at lam 0.1, 0.5 and 0.7; known-item MRR 0.990 / 0.986 at lam 0.1 / 0.5).

Terms: `word_tokenize(title + " " + text, lowercase=True)` with punctuation-only tokens
dropped (both options). Query terms that never occur in the collection (p_c = 0, log 0 for
every document) are skipped; a query with no known term scores 0 everywhere, and its k
results are then ids 0..k-1 (`analyze` tells which terms were used). Search is exhaustive, so
results are exact, best first, ties by the lower id, excluded ids never returned.

Saved as `ql_counts.npz` (the CSR arrays, loaded with allow_pickle=False), `ql_terms.json`
(the term list) and `ql.json` (manifest with the DocStore fingerprint and the options).
Left out: stemming and stopwords, two-stage smoothing, relevance-model query expansion,
translation models, an inverted index for collections whose (Q, N) score matrix is too big.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ralm.atomic import atomic_path
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, SearchResult, check_queries
from ralm.retrieval.exclusion import filter_excluded, prepare_exclude
from ralm.retrieval.index.io import check_fingerprints
from ralm.text import word_tokenize

FORMAT = "ralm-query-likelihood"
FORMAT_VERSION = 1
MANIFEST_FILE = "ql.json"
COUNTS_FILE = "ql_counts.npz"
TERMS_FILE = "ql_terms.json"
SMOOTHINGS = ("dirichlet", "jm")
DEFAULT_MU = 200.0
DEFAULT_LAMBDA = 0.5
QUERY_BATCH = 256  # queries scored at a time: memory is QUERY_BATCH x N float64

_WORD = re.compile(r"\w")


def analyze_text(text: str, lowercase: bool = True, drop_punctuation: bool = True) -> list[str]:
    """The terms of a text: `word_tokenize`, optionally without punctuation-only tokens.

    Example: `analyze_text("The Iliad, by Homer.")` -> `['the', 'iliad', 'by', 'homer']`.
    """
    tokens = word_tokenize(text, lowercase=lowercase)
    return [t for t in tokens if _WORD.search(t)] if drop_punctuation else tokens


def top_k_exact(scores: np.ndarray, k: int, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top k of dense scores with exclusion: ids (Q, k) int64 and scores (Q, k) float32.

    `scores`: (Q, N), every document scored; `exclude`: (Q, E) from `prepare_exclude` (-1 =
    padding) or None. Ranking is on the float32 values returned: best first, ties by the lower id.
    Only the rows' top-k candidates (plus everything tied with the k-th) are sorted.
    """
    s = np.asarray(scores, dtype=np.float32).copy()
    q, n = s.shape
    if exclude is not None:
        ok = (exclude >= 0) & (exclude < n)
        rows = np.broadcast_to(np.arange(q)[:, None], exclude.shape)[ok]
        s[rows, exclude[ok]] = -np.inf
    if k < n:
        kth = -np.partition(-s, k - 1, axis=1)[:, k - 1]  # (Q,) the k-th largest score per row
        r, c = np.nonzero(s >= kth[:, None])  # candidates, ids ascending within each row
        counts = np.bincount(r, minlength=q)
        pos = np.arange(len(r)) - np.repeat(np.cumsum(counts) - counts, counts)
        ids = np.full((q, int(counts.max())), -1, dtype=np.int64)
        cand = np.full(ids.shape, -np.inf, dtype=np.float32)
        ids[r, pos], cand[r, pos] = c, s[r, c]
    else:
        ids, cand = np.broadcast_to(np.arange(n, dtype=np.int64), (q, n)), s
    top_ids, top_scores, _ = filter_excluded(ids, cand, exclude, k)
    return top_ids, top_scores


class QueryLikelihoodSearcher:
    """Query likelihood with Dirichlet or Jelinek-Mercer smoothing; a `Searcher` (ralm.retrieval.base).

    `QueryLikelihoodSearcher.build(store)` counts a DocStore's terms; `search_text(queries, k)`
    ranks its chunks; `scores(queries)` gives every chunk's log p(q | d), shape (Q, N).
    """

    def __init__(
        self,
        counts: sp.csr_matrix,
        terms: list[str],
        manifest: dict[str, Any],
        smoothing: str = "dirichlet",
        mu: float = DEFAULT_MU,
        lam: float = DEFAULT_LAMBDA,
    ) -> None:
        self.counts = counts.tocsr()  # (N, V) int32 term frequencies
        self.terms = terms
        self.term_id = {t: i for i, t in enumerate(terms)}
        self.manifest = manifest
        self.doc_len = np.asarray(self.counts.sum(axis=1), dtype=np.float64).ravel()  # (N,) |d|
        cf = np.asarray(self.counts.sum(axis=0), dtype=np.float64).ravel()  # (V,)
        total = cf.sum()
        self.p_c = cf / total if total > 0 else cf  # (V,) collection LM
        self._weights: sp.csr_matrix | None = None
        self.set_smoothing(smoothing, mu=mu, lam=lam)

    # -- metadata
    def __len__(self) -> int:
        return self.counts.shape[0]

    @property
    def count(self) -> int:
        return self.counts.shape[0]

    @property
    def docstore_fingerprint(self) -> str | None:
        return self.manifest.get("docstore_fingerprint")

    def __repr__(self) -> str:
        par = f"mu={self.mu:g}" if self.smoothing == "dirichlet" else f"lam={self.lam:g}"
        return f"QueryLikelihoodSearcher(N={self.count}, V={len(self.terms)}, {self.smoothing}, {par})"

    def set_smoothing(self, smoothing: str, *, mu: float | None = None, lam: float | None = None) -> None:
        """Switch to "dirichlet" (mu > 0) or "jm" (0 < lam <= 1); the sparse weights are recomputed."""
        if smoothing not in SMOOTHINGS:
            raise RalmError(f"smoothing {smoothing!r}: choose dirichlet or jm")
        mu = float(self.__dict__.get("mu", DEFAULT_MU) if mu is None else mu)
        lam = float(self.__dict__.get("lam", DEFAULT_LAMBDA) if lam is None else lam)
        if not mu > 0:
            raise RalmError(f"Dirichlet mu must be > 0, got {mu}")
        if not 0 < lam <= 1:
            raise RalmError(f"Jelinek-Mercer lambda must be in (0, 1], got {lam}")
        self.smoothing, self.mu, self.lam = smoothing, mu, lam
        self._weights = None

    def _doc_weights(self) -> sp.csr_matrix:
        """(N, V) float64 sparse: the document-dependent part log(1 + ...) of log p(t|d), tf > 0 only."""
        if self._weights is None:
            c = self.counts
            tf = c.data.astype(np.float64)
            pc = self.p_c[c.indices]
            if self.smoothing == "dirichlet":
                w = np.log1p(tf / (self.mu * pc))
            else:
                dl = np.repeat(self.doc_len, np.diff(c.indptr))
                w = np.log1p((1.0 - self.lam) * tf / (self.lam * pc * dl))
            self._weights = sp.csr_matrix((w, c.indices, c.indptr), shape=c.shape)
        return self._weights

    # -- build
    @classmethod
    def build(
        cls,
        store: DocStore,
        *,
        include_title: bool = True,
        lowercase: bool = True,
        drop_punctuation: bool = True,
        smoothing: str = "dirichlet",
        mu: float = DEFAULT_MU,
        lam: float = DEFAULT_LAMBDA,
        batch_size: int = 1024,
    ) -> QueryLikelihoodSearcher:
        """Count the terms of every chunk of `store` (title + text unless include_title=False)."""
        if len(store) == 0:
            raise RalmError(f"{store.root}: the DocStore has no chunks to index")
        term_id: dict[str, int] = {}
        indptr = [0]
        indices: list[np.ndarray] = []
        data: list[np.ndarray] = []
        columns = ["title", "text"] if include_title else ["text"]
        for batch in store.iter_batches(batch_size, columns):
            titles = batch["title"] if include_title else [None] * len(batch["text"])
            for title, text in zip(titles, batch["text"], strict=True):
                doc = f"{title} {text}" if title else text
                ids = [
                    term_id.setdefault(t, len(term_id))
                    for t in analyze_text(doc, lowercase, drop_punctuation)
                ]
                u, c = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
                indices.append(u.astype(np.int32))
                data.append(c.astype(np.int32))
                indptr.append(indptr[-1] + len(u))
        n, v = len(indptr) - 1, len(term_id)
        counts = sp.csr_matrix(
            (
                np.concatenate(data) if data else np.zeros(0, np.int32),
                np.concatenate(indices) if indices else np.zeros(0, np.int32),
                np.asarray(indptr, dtype=np.int64),
            ),
            shape=(n, max(v, 1)),
        )
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "docstore": str(store.root),
            "docstore_fingerprint": store.fingerprint,
            "count": n,
            "n_terms": v,
            "n_tokens": int(counts.sum()),
            "include_title": include_title,
            "lowercase": lowercase,
            "drop_punctuation": drop_punctuation,
        }
        terms = [""] * v
        for t, i in term_id.items():
            terms[i] = t
        return cls(counts, terms, manifest, smoothing=smoothing, mu=mu, lam=lam)

    # -- scoring
    def analyze(self, query: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """(term ids (n,), their query counts (n,), skipped terms unseen in the collection)."""
        terms = analyze_text(query, self.manifest["lowercase"], self.manifest["drop_punctuation"])
        known = [self.term_id[t] for t in terms if t in self.term_id]
        skipped = [t for t in terms if t not in self.term_id]
        ids, qtf = np.unique(np.asarray(known, dtype=np.int64), return_counts=True)
        return ids, qtf.astype(np.float64), skipped

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """(Q, N) float64 log p(q | d) (natural log) of every chunk for each query."""
        queries = check_queries(queries)
        out = np.empty((len(queries), self.count), dtype=np.float64)
        for start in range(0, len(queries), QUERY_BATCH):
            out[start : start + QUERY_BATCH] = self._score_batch(queries[start : start + QUERY_BATCH])
        return out

    def _score_batch(self, queries: list[str]) -> np.ndarray:
        rows, cols, vals = [], [], []
        for i, q in enumerate(queries):
            ids, qtf, _ = self.analyze(q)
            rows.append(np.full(len(ids), i))
            cols.append(ids)
            vals.append(qtf)
        r, c, qv = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
        qmat = sp.csr_matrix((qv, (r, c)), shape=(len(queries), self.counts.shape[1]))  # (Q, V)
        sparse_part = (self._doc_weights() @ qmat.T).T.toarray()  # (Q, N)
        qlen = np.asarray(qmat.sum(axis=1)).ravel()  # (Q,) known query terms, with repeats
        if self.smoothing == "dirichlet":
            const = np.bincount(r, weights=qv * np.log(self.mu * self.p_c[c]), minlength=len(queries))
            return sparse_part + const[:, None] - qlen[:, None] * np.log(self.doc_len + self.mu)[None, :]
        const = np.bincount(r, weights=qv * np.log(self.lam * self.p_c[c]), minlength=len(queries))
        return sparse_part + const[:, None]

    def search_text(self, queries: Sequence[str], k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Top-k chunk ids and log p(q|d) scores per query, best first (ties: lower id first).

        Always k results; RalmError for an empty batch, an empty query, or k larger than the
        chunks left after exclusion.
        """
        queries = check_queries(queries)
        excl = prepare_exclude(exclude_ids, len(queries), self.count, k)
        ids = np.empty((len(queries), k), dtype=np.int64)
        scores = np.empty((len(queries), k), dtype=np.float32)
        for start in range(0, len(queries), QUERY_BATCH):
            sl = slice(start, start + QUERY_BATCH)
            s = self._score_batch(queries[sl])
            ids[sl], scores[sl] = top_k_exact(s, k, None if excl is None else excl[sl])
        return SearchResult(ids=ids, scores=scores)

    # -- persistence
    def save(self, directory: str | os.PathLike) -> Path:
        """Write `ql_counts.npz`, `ql_terms.json` and `ql.json` into `directory`."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        c = self.counts
        with atomic_path(d / COUNTS_FILE, ".npz") as tmp:
            np.savez(
                tmp, indptr=c.indptr, indices=c.indices, data=c.data, shape=np.asarray(c.shape, np.int64)
            )
        (d / TERMS_FILE).write_text(json.dumps(self.terms, ensure_ascii=False) + "\n", encoding="utf-8")
        manifest = {**self.manifest, "smoothing": self.smoothing, "mu": self.mu, "lam": self.lam}
        (d / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        return d

    @classmethod
    def load(
        cls, directory: str | os.PathLike, *, docstore_fingerprint: str | None = None
    ) -> QueryLikelihoodSearcher:
        """Read a saved retriever; with a fingerprint given, check it was built from that DocStore."""
        d = Path(directory)
        for name in (MANIFEST_FILE, COUNTS_FILE, TERMS_FILE):
            if not (d / name).is_file():
                raise RalmError(
                    f"{d / name}: no such file; build the index with QueryLikelihoodSearcher.build"
                )
        try:
            manifest = json.loads((d / MANIFEST_FILE).read_text(encoding="utf-8"))
            terms = json.loads((d / TERMS_FILE).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RalmError(f"{d}: unreadable query-likelihood files ({exc}); rebuild the index") from None
        if manifest.get("format") != FORMAT or manifest.get("version", 0) > FORMAT_VERSION:
            raise RalmError(
                f"{d / MANIFEST_FILE}: not a {FORMAT} v{FORMAT_VERSION} manifest; rebuild the index"
            )
        check_fingerprints(d, manifest, docstore_fingerprint, None)
        try:
            with np.load(d / COUNTS_FILE, allow_pickle=False) as z:
                shape = tuple(int(x) for x in z["shape"])
                counts = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=shape)
        except (OSError, ValueError, KeyError) as exc:
            raise RalmError(f"{d / COUNTS_FILE}: unreadable ({exc}); rebuild the index") from None
        if shape[0] != manifest["count"] or len(terms) != manifest["n_terms"]:
            raise RalmError(
                f"{d}: counts/terms do not match {MANIFEST_FILE} (an interrupted save?); rebuild it"
            )
        return cls(
            counts,
            terms,
            manifest,
            manifest.get("smoothing", "dirichlet"),
            manifest.get("mu", DEFAULT_MU),
            manifest.get("lam", DEFAULT_LAMBDA),
        )
