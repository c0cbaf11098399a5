"""N-gram language models: fitting, scoring, sampling, ARPA import and export.

`NGramLM.fit(sentences, order, estimator, **params)` counts orders 1..order (1-10; KenLM's
Python module reads up to order 6) over any tokenisation and estimates one of:

  mle             maximum likelihood with the full available context, like nltk.lm.MLE: an
                  unseen context or n-gram has probability 0 (log10 -inf). Not exportable
                  (ARPA cannot state a zero: its floor is -99, and it backs off).
  laplace         add-one; `lidstone` is add-delta (param `delta`, default 0.5):
                  (c(h w) + delta) / (c(h .) + delta |V|) with the full available context,
                  like nltk.lm.Laplace / Lidstone. Exportable as ARPA for order 1 only: above
                  it an unseen word after a seen context has its own probability, which ARPA
                  backoff cannot express without listing all |V| words after every context.
                  Score these in memory (`ralm ngram score --train TEXT ...`).
  stupid_backoff  Brants et al. 2007 (param `alpha`, default 0.4): relative frequency of the
                  longest seen n-gram times alpha per back-off step. Scores are NOT
                  probabilities (they do not sum to 1) and cannot be written as ARPA.
  katz            Katz backoff, Good-Turing discounts for counts <= k (param `k`, default 5).
  kn              interpolated Kneser-Ney, one discount per order D = n1 / (n1 + 2 n2).
  mkn             modified Kneser-Ney (Chen & Goodman D1, D2, D3+ per order) computed as
                  KenLM's lmplz does; params `discounts`, `discount_fallback`.

Conventions (KenLM's): each sentence is scored as `<s> w1 ... wk </s>`; `<s>` is context
only and never predicted; `</s>` is predicted. ralm writes the `<s>` unigram's log10 prob
as -99 (SRILM's convention, asked for by the issue); current lmplz writes 0 there instead.
Neither KenLM nor ralm ever uses that number when scoring sentences, so scores agree.
`<unk>` stands for every word not seen in training: it is in the vocabulary with count 0, so it gets what each estimator gives a zero-count word (for kn/mkn/katz, its share
of the lowest order's leftover mass spread uniformly over |V| = all types incl. `</s>` and
`<unk>`, excl. `<s>`; 0 for mle and stupid_backoff). Probabilities are log10 throughout,
like KenLM and ARPA, and functions say so in their names.

Left out: pruning, count cut-offs, interpolated Katz/Witten-Bell, class-based models, the
KenLM binary format, and persistence for estimators that are not backoff-form (mle,
stupid_backoff, add-delta above order 1): refit them from text.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence

import numpy as np

from ralm.errors import RalmError
from ralm.lm import arpa as _arpa
from ralm.lm.counts import (
    BOS_ID,
    EOS_ID,
    UNK_ID,
    NGramCounts,
    Vocab,
    check_order,
    count_ngrams,
)
from ralm.lm.scoring import NGramScorer
from ralm.lm.smoothing import (
    BackoffTables,
    add_delta_unigrams,
    choose_kn_discounts,
    katz,
    kn_adjusted_counts,
    kneser_ney,
)

ESTIMATORS = ("mle", "laplace", "lidstone", "stupid_backoff", "katz", "kn", "mkn")
ALIASES = {
    "add_delta": "lidstone",
    "add-delta": "lidstone",
    "sb": "stupid_backoff",
    "stupid-backoff": "stupid_backoff",
    "ikn": "kn",
    "kneser_ney": "kn",
    "modified_kn": "mkn",
    "modified_kneser_ney": "mkn",
}
PARAMS = {
    "mle": {},
    "laplace": {},
    "lidstone": {"delta": 0.5},
    "stupid_backoff": {"alpha": 0.4},
    "katz": {"k": 5},
    "kn": {"discount": None, "discount_fallback": "default"},
    "mkn": {"discounts": None, "discount_fallback": "default"},
}
MAX_ORDER = 10


def canonical_estimator(name: str) -> str:
    """The canonical estimator name for `name` (aliases accepted); RalmError if unknown."""
    key = str(name).strip().lower().replace(" ", "_")
    key = ALIASES.get(key, key)
    if key not in ESTIMATORS:
        valid = ", ".join(ESTIMATORS)
        raise RalmError(f"unknown n-gram estimator {name!r}; valid: {valid} (aliases: {', '.join(ALIASES)})")
    return key


class NGramLM(NGramScorer):
    """A fitted n-gram LM; build with `NGramLM.fit(...)` or `NGramLM.from_arpa(path)`.

    Attributes: `order`, `estimator` (canonical name, or "arpa" when read from a file),
    `params` (estimator parameters), `vocab` (`Vocab`: ids 0, 1, 2 = `<unk>`, `<s>`,
    `</s>`), `discounts` (per order; kn/mkn: (D1, D2, D3+), katz: d_1..d_k ratios),
    `discount_fallback_orders` (orders whose discounts came from the fallback), `meta`
    (strings written to / read from the ARPA header).

    Example:
        >>> lm = NGramLM.fit([["a", "b"], ["a", "c"]], order=2, estimator="kn")
        >>> bool(round(lm.score_sentence(["a", "b"]), 4) == round(float(sum(lm.full_scores(["a", "b"]))), 4))
        True
    """

    def __init__(
        self,
        vocab: Vocab,
        order: int,
        keys: list[np.ndarray],
        estimator: str,
        params: dict | None = None,
        tables: BackoffTables | None = None,
        counts: NGramCounts | None = None,
        meta: dict[str, str] | None = None,
    ) -> None:
        self.vocab = vocab
        self.order = order
        self.estimator = estimator
        self.params = dict(params or {})
        self.meta = dict(meta or {})
        self.discounts: list = []
        self.discount_fallback_orders: list[int] = []
        self.n_train_sentences = counts.n_sentences if counts is not None else 0
        self.n_train_tokens = counts.n_tokens if counts is not None else 0
        self._keys = keys
        self._tables = tables
        self._counts = counts if tables is None else None  # backoff tables do not need the counts
        self._ctx_tot: list[np.ndarray] = []
        if counts is not None and tables is None:
            self._ctx_tot = [counts.context_totals(k) for k in range(1, order + 1)]

    # ------------------------------------------------------------------ construction
    @classmethod
    def fit(
        cls,
        sentences: Iterable[Sequence[str]],
        order: int = 3,
        estimator: str = "mkn",
        **params: object,
    ) -> NGramLM:
        """Count `sentences` (each a list of string tokens) and estimate the model.

        order: 1..10. estimator: one of ESTIMATORS (or an alias); params as listed in the
        module docstring. Raises RalmError for a bad order, an unknown estimator or
        parameter, an empty corpus, or reserved tokens (`<s>`, `</s>`, `<unk>`) in the text.
        Example: `NGramLM.fit([["the", "cat"], ["the", "dog"]], 2, "lidstone", delta=0.1)`.
        """
        order = check_order(order, MAX_ORDER)
        est = canonical_estimator(estimator)
        p = _check_params(est, params)
        counts = count_ngrams(sentences, order)
        tables: BackoffTables | None = None
        discounts: list = []
        fallback: list[int] = []
        if est in ("kn", "mkn"):
            modified = est == "mkn"
            adj = kn_adjusted_counts(counts)
            discounts, fallback = choose_kn_discounts(
                adj,
                modified,
                p["discounts" if modified else "discount"],
                p["discount_fallback"],
            )
            tables = kneser_ney(counts, discounts, adj)
            del adj
        elif est == "katz":
            k = p["k"]
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise RalmError(f"katz parameter k must be a positive integer, got {k!r}")
            tables, discounts, fallback = katz(counts, k)
        elif est in ("laplace", "lidstone"):
            if est == "laplace":
                p = {"delta": 1.0}
            delta = p["delta"]
            if isinstance(delta, bool) or not isinstance(delta, int | float) or not delta > 0:
                raise RalmError(f"lidstone parameter delta must be a number > 0, got {delta!r}")
            p["delta"] = float(delta)
            if order == 1:
                tables = add_delta_unigrams(counts, p["delta"])
        elif est == "stupid_backoff":
            alpha = p["alpha"]
            if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= 1:
                raise RalmError(f"stupid_backoff parameter alpha must be in (0, 1], got {alpha!r}")
            p["alpha"] = float(alpha)
        model = cls(counts.vocab, order, counts.keys, est, p, tables=tables, counts=counts)
        model.discounts = [list(d) for d in discounts]
        model.discount_fallback_orders = fallback
        return model

    @classmethod
    def from_arpa(cls, path: str | os.PathLike) -> NGramLM:
        """Load an ARPA file (from ralm, KenLM lmplz, SRILM) as a backoff model.

        The model scores exactly as the file says (ARPA backoff semantics, as KenLM does).
        Raises RalmError with `path:line` for a malformed file.
        """
        a = _arpa.read_arpa(path)
        tables = BackoffTables(a.log10_prob, a.log10_bow)
        return cls(a.vocab, len(a.keys), a.keys, "arpa", {}, tables=tables, meta=a.meta)

    # ------------------------------------------------------------------ properties
    @property
    def sizes(self) -> list[int]:
        """Number of n-gram rows per order (unigrams: the whole vocabulary)."""
        return [len(k) for k in self._keys]

    @property
    def is_normalised(self) -> bool:
        """False only for stupid backoff (its scores are not probabilities)."""
        return self.estimator != "stupid_backoff"

    def __repr__(self) -> str:
        return (
            f"NGramLM(order={self.order}, estimator={self.estimator!r}, "
            f"vocab={self.vocab_size}, ngrams={self.sizes})"
        )

    # ------------------------------------------------------------------ scoring
    def log10_prob(self, word: str, context: Sequence[str] = ()) -> float:
        """log10 P(word | context); the context is the preceding tokens, oldest first.

        Include "<s>" at the start of `context` for a sentence-initial word. Unknown words
        score as `<unk>`. Example: `lm.log10_prob("cat", ["<s>", "the"])`.
        """
        if isinstance(context, str):
            raise RalmError("context must be a sequence of tokens, not a string")
        ctx = list(context)[-(self.order - 1) :] if self.order > 1 else []
        ids = np.array(self.vocab.encode([*ctx, word]), dtype=np.int32)
        sid = np.zeros(len(ids), dtype=np.int32)
        target = np.array([len(ids) - 1])
        return float(self._score_flat(ids, sid, target)[0])

    def prob(self, word: str, context: Sequence[str] = ()) -> float:
        """P(word | context) = 10 ** log10_prob(word, context)."""
        return 10.0 ** self.log10_prob(word, context)

    def full_scores(self, tokens: Sequence[str], bos: bool = True, eos: bool = True) -> np.ndarray:
        """log10 probability of each predicted token (and of `</s>` if eos), shape (len + eos,)."""
        if isinstance(tokens, str):
            raise RalmError("tokens must be a list of strings, not one string")
        flat, sid = self.vocab.encode_sentences([list(tokens)], bos=bos, eos=eos)
        targets = np.arange(int(bos), len(flat))
        return self._score_flat(flat, sid, targets)

    def score_sentence(self, tokens: Sequence[str], bos: bool = True, eos: bool = True) -> float:
        """Total log10 probability of one tokenised sentence, like `kenlm.Model.score`."""
        return float(self.full_scores(tokens, bos=bos, eos=eos).sum())

    def score_sentences(
        self, sentences: Iterable[Sequence[str]], bos: bool = True, eos: bool = True
    ) -> np.ndarray:
        """Total log10 probability of each sentence, shape (n_sentences,); vectorised."""
        sents = sentences if isinstance(sentences, list) else list(sentences)
        if any(isinstance(s, str) for s in sents):
            raise RalmError("sentences must be lists of tokens, not strings")
        if not sents:
            return np.zeros(0)
        flat, sid = self.vocab.encode_sentences(sents, bos=bos, eos=eos)
        targets = np.arange(len(flat))
        if bos:  # the first position of each sentence is its <s>: context only
            first = np.ones(len(flat), dtype=bool)
            first[1:] = sid[1:] != sid[:-1]
            targets = targets[~first]
        lp = self._score_flat(flat, sid, targets)
        return np.bincount(sid[targets], weights=lp, minlength=len(sents))

    def perplexity(self, sentences: Iterable[Sequence[str]]) -> float:
        """10 ** (-total log10 prob / predicted tokens), `</s>` and OOVs included (KenLM's)."""
        sents = sentences if isinstance(sentences, list) else list(sentences)
        n = sum(len(s) + 1 for s in sents)
        if n == 0:
            raise RalmError("cannot compute perplexity of an empty text")
        total = float(self.score_sentences(sents).sum())
        return 10.0 ** (-total / n) if math.isfinite(total) else math.inf

    # ------------------------------------------------------------------ generation
    def sample(
        self,
        rng_seed: int,
        max_len: int = 30,
        context: Sequence[str] = (),
        bos: bool = True,
        include_unk: bool = False,
    ) -> list[str]:
        """Generate tokens after `<s>` (if bos) + `context` until `</s>` or `max_len` tokens.

        Seeded: the same seed gives the same tokens. `<unk>` is not drawn unless
        include_unk; stupid-backoff scores are renormalised. Returns the new tokens only.
        Example: `lm.sample(0, max_len=20, context=["the"])`.
        """
        if isinstance(context, str):
            raise RalmError("context must be a sequence of tokens, not a string")
        if max_len < 0:
            raise RalmError(f"max_len must be >= 0, got {max_len}")
        rng = np.random.default_rng(rng_seed)
        history = ["<s>"] * int(bos) + list(context)
        out: list[str] = []
        for _ in range(max_len):
            p = 10.0 ** self.next_word_log10_probs(history)
            p[BOS_ID] = 0.0
            if not include_unk:
                p[UNK_ID] = 0.0
            cdf = np.cumsum(p)
            if not cdf[-1] > 0:
                break
            w = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
            w = min(w, len(cdf) - 1)
            if w == EOS_ID:
                break
            tok = self.vocab.id_to_token[w]
            out.append(tok)
            history.append(tok)
        return out

    # ------------------------------------------------------------------ export
    def to_arpa(self, path: str | os.PathLike) -> None:
        """Write the model as an ARPA file (katz, kn, mkn, arpa, and add-delta of order 1).

        Raises RalmError for estimators that are not backoff-form: stupid backoff (not
        normalised), mle (zero probabilities), add-delta above order 1.
        """
        if self._tables is None:
            reasons = {
                "stupid_backoff": "its scores are not normalised probabilities",
                "mle": "it gives unseen n-grams probability zero",
            }
            default = "add-delta has no backoff form above order 1 (each context would list all |V| words)"
            why = reasons.get(self.estimator, default)
            raise RalmError(
                f"cannot write a {self.estimator} model as ARPA: {why}; use katz, kn or mkn, or score it "
                "in memory (`ralm ngram score --train TEXT ...`)"
            )
        meta = {"order": str(self.order), "estimator": self.estimator}
        if self.estimator != "arpa":  # provenance: parameters and the discounts used
            meta["params"] = " ".join(f"{k}={v}" for k, v in self.params.items() if v is not None) or "-"
            if self.discounts:
                meta["discounts"] = " | ".join(" ".join(f"{d:.6g}" for d in ds) for ds in self.discounts)
        meta.update({k: str(v) for k, v in self.meta.items() if k not in meta})
        if self.estimator == "arpa" and "estimator" in self.meta:
            meta["estimator"] = self.meta["estimator"]
        _arpa.write_arpa(path, self.vocab, self._keys, self._tables.log10_prob, self._tables.log10_bow, meta)


def _check_params(est: str, params: dict) -> dict:
    allowed = PARAMS[est]
    for name in params:
        if name not in allowed:
            valid = ", ".join(allowed) or "none"
            raise RalmError(f"estimator {est!r} has no parameter {name!r} (valid: {valid})")
    out = dict(allowed)
    out.update(params)
    return out
