"""Masking for REALM/BRENT pre-training: salient spans + random spans, and the two Table 2 ablations.

Strategies (`MaskingConfig.strategy`):

* "salient" (BRENT §3.6, REALM §3.4): whole salient spans (links, auto-annotated entities,
  NER, dates: precomputed in the DocStore, `tokens/salient.*`) chosen at random without overlap
  until at least `salient_rate` of the tokens are covered (always at least one span), then
  SpanBERT random spans over the tokens not yet masked for `random_span_rate` more. An example
  with no salient span of an allowed source gives None: REALM/BRENT train only on such examples
  (`eligible_ids` lists the chunks that have one).
* "uniform" (BERT random token masking; REALM Table 2 "random uniform masks").
* "span" (SpanBERT random spans; REALM Table 2 "random span masks"): span lengths from the
  geometric distribution Geo(p=0.2) truncated to 1..10 and renormalised, as SpanBERT samples
  them (mean 3.8 tokens).

Masked positions become [MASK] (REALM), or with `replace_probs=BERT_REPLACE` BERT's 80% [MASK] /
10% random token / 10% unchanged, drawn per token. Labels follow the HF convention: the original
id at masked positions, -100 elsewhere. Special token ids ([UNK] can occur in chunk text) are
never masked. Everything is deterministic given the `np.random.Generator`.

Budgets: a rate r over T tokens asks for r*T tokens, rounded stochastically (floor + Bernoulli
of the fraction), so the expected masked fraction is exactly r; the last random span is cut to
the remaining budget (so observed span lengths are slightly shorter than the sampled ones).

Left out: whole-word alignment of random spans and of uniform masking (SpanBERT/BERT-wwm mask
complete words; we mask wordpieces), SpanBERT's span-level 80/10/10 (we draw per token), NER in
the loop (spans come from the DocStore build), per-sentence selection of salient spans (REALM
picks one span per sentence; BRENT's rate-based rule is used instead), and per-worker seeding
for DataLoader workers (give each worker its own `rng`, e.g. from `worker_init_fn`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ralm.corpus.docstore import SALIENT_SOURCES, DocStore, RaggedArray

STRATEGIES = ("salient", "uniform", "span")
BERT_REPLACE = (0.8, 0.1, 0.1)  # BERT: [MASK], random token, unchanged
IGNORE_INDEX = -100  # HF / torch cross-entropy ignore label


@dataclass
class MaskingConfig:
    """How to mask a chunk for the MLM objective (see the module docstring)."""

    strategy: str = "salient"  # salient (BRENT/REALM) | uniform (BERT ablation) | span (SpanBERT ablation)
    salient_rate: float = 0.15  # fraction of tokens covered by whole salient spans (>= 1 span always)
    random_span_rate: float = 0.0375  # extra random-span masking with "salient" (BRENT: 25% of 15%)
    uniform_rate: float = 0.15  # fraction of tokens masked by "uniform" (BERT: 15%)
    span_rate: float = 0.15  # fraction of tokens masked by "span" (SpanBERT: 15%)
    span_p: float = 0.2  # geometric parameter of random span lengths (SpanBERT: 0.2)
    span_max_len: int = 10  # longest random span (SpanBERT: 10)
    # probabilities of (mask id, random token, unchanged) for a masked token; REALM: always [MASK],
    # BERT_REPLACE = (0.8, 0.1, 0.1)
    replace_probs: tuple[float, float, float] = (1.0, 0.0, 0.0)
    sources: tuple[str, ...] = field(default=SALIENT_SOURCES)  # salient sources that count
    # salient spans longer than this many tokens are never chosen (a long link text would mask
    # most of a chunk); None = no limit
    max_salient_tokens: int | None = 16
    # at most this many masked spans per chunk (salient ones first, then random ones; "uniform":
    # tokens); None = no cap. A causal reader with the per-span marginal explains each span by its
    # own documents: few spans a chunk keep a chunk's query about one or two facts.
    max_spans: int | None = None
    # only the salient spans whose tokens occur in another chunk of the knowledge corpus
    # (`ralm.realm.masking.retrievable`): the spans a retrieved chunk can help the reader with
    retrievable_only: bool = False

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, not {self.strategy!r}")
        for name in ("salient_rate", "random_span_rate", "uniform_rate", "span_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], not {v}")
        if not 0.0 < self.span_p <= 1.0:
            raise ValueError(f"span_p must be in (0, 1], not {self.span_p}")
        if self.span_max_len < 1:
            raise ValueError(f"span_max_len must be >= 1, not {self.span_max_len}")
        self.replace_probs = tuple(float(p) for p in self.replace_probs)  # type: ignore[assignment]
        if (
            len(self.replace_probs) != 3
            or min(self.replace_probs) < 0
            or abs(sum(self.replace_probs) - 1) > 1e-6
        ):
            raise ValueError(f"replace_probs must be 3 probabilities summing to 1, not {self.replace_probs}")
        self.sources = tuple(self.sources)
        bad = [s for s in self.sources if s not in SALIENT_SOURCES]
        if bad:
            raise ValueError(f"unknown salient sources {bad}; known: {SALIENT_SOURCES}")
        if self.max_salient_tokens is not None and self.max_salient_tokens < 1:
            raise ValueError(f"max_salient_tokens must be >= 1 or None, not {self.max_salient_tokens}")
        if self.max_spans is not None and self.max_spans < 1:
            raise ValueError(f"max_spans must be >= 1 or None, not {self.max_spans}")

    @property
    def source_codes(self) -> np.ndarray:
        """(K,) int32 codes (indexes into SALIENT_SOURCES) of the allowed salient sources."""
        return np.array([SALIENT_SOURCES.index(s) for s in self.sources], dtype=np.int32)


@dataclass
class MaskedExample:
    """One masked chunk (no special tokens added).

    input_ids: (T,) int64, the masked ids. labels: (T,) int64, original id where masked, -100 elsewhere.
    masked_spans: [(start, end, kind)] half-open token spans sorted by start; kind "salient" | "random".
    """

    input_ids: np.ndarray
    labels: np.ndarray
    masked_spans: list[tuple[int, int, str]]


def span_length_pmf(p: float = 0.2, max_len: int = 10) -> np.ndarray:
    """(max_len,) probabilities of span lengths 1..max_len: Geo(p) truncated and renormalised (SpanBERT)."""
    k = np.arange(max_len, dtype=np.float64)
    pmf = p * (1.0 - p) ** k
    return pmf / pmf.sum()


def _span_cdf(cfg: MaskingConfig) -> np.ndarray:
    return np.cumsum(span_length_pmf(cfg.span_p, cfg.span_max_len))


def sample_span_lengths(rng: np.random.Generator, n: int, cfg: MaskingConfig) -> np.ndarray:
    """(n,) int64 random span lengths in 1..cfg.span_max_len (inverse CDF of `span_length_pmf`)."""
    cdf = _span_cdf(cfg)
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), cfg.span_max_len - 1) + 1


def _stochastic_round(x: float, rng: np.random.Generator) -> int:
    lo = math.floor(x)
    return lo + int(rng.random() < x - lo)


def _place_random_spans(
    free: np.ndarray, budget: int, rng: np.random.Generator, cfg: MaskingConfig, max_count: int | None = None
) -> list[tuple[int, int]]:
    """Mask up to `budget` free positions with at most `max_count` random spans (None: no cap); marks
    them in `free` (T,) bool in place.

    Each span takes a sampled length (cut to the remaining budget), shortened further while no
    run of free positions is that long, and a uniformly random start among the fitting ones.
    """
    spans: list[tuple[int, int]] = []
    if budget <= 0:
        return spans
    lengths = sample_span_lengths(rng, budget, cfg)  # never more spans than budget tokens
    for want in lengths:
        if budget <= 0 or (max_count is not None and len(spans) >= max_count):
            break
        n = int(min(want, budget))
        cs = np.concatenate(([0], np.cumsum(free, dtype=np.int64)))
        starts = np.empty(0, dtype=np.int64)
        while n > 0:
            starts = np.flatnonzero(cs[n:] - cs[:-n] == n)
            if starts.size:
                break
            n -= 1
        if n == 0:
            break
        s = int(starts[rng.integers(starts.size)])
        free[s : s + n] = False
        spans.append((s, s + n))
        budget -= n
    return spans


def _salient_candidates(
    salient: np.ndarray, maskable: np.ndarray, cfg: MaskingConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Allowed salient spans as ((C,) starts, (C,) ends), in their stored order."""
    T = maskable.shape[0]
    sal = np.asarray(salient, dtype=np.int64).reshape(-1, 3)
    s, e, src = sal[:, 0], sal[:, 1], sal[:, 2]
    ok = np.isin(src, cfg.source_codes) & (s >= 0) & (e > s) & (e <= T)
    if cfg.max_salient_tokens is not None:
        ok &= e - s <= cfg.max_salient_tokens
    s, e = s[ok], e[ok]
    if s.size:  # a span made only of special tokens (e.g. all [UNK]) has nothing to predict
        cs = np.concatenate(([0], np.cumsum(maskable, dtype=np.int64)))
        has = cs[e] - cs[s] > 0
        s, e = s[has], e[has]
    return s, e


def mask_example(
    input_ids: np.ndarray,
    salient: np.ndarray | None,
    cfg: MaskingConfig,
    rng: np.random.Generator,
    *,
    mask_id: int,
    vocab_size: int,
    special_ids: Iterable[int] = (),
) -> MaskedExample | None:
    """Mask one chunk.

    input_ids: (T,) token ids without special tokens. salient: (S, 3) rows (token_start, token_end,
    source code) as `DocStore.salient_tokens` gives them (ignored unless strategy is "salient").
    Returns None for the "salient" strategy when no salient span of an allowed source fits (or, for
    any strategy, when nothing can be masked); the caller skips such chunks.
    """
    ids = np.asarray(input_ids, dtype=np.int64)
    T = ids.shape[0]
    specials = np.fromiter(special_ids, dtype=np.int64)
    maskable = ~np.isin(ids, specials) if specials.size else np.ones(T, dtype=bool)
    if not maskable.any():
        return None
    spans: list[tuple[int, int, str]] = []

    if cfg.strategy == "salient":
        cand_s, cand_e = _salient_candidates(
            salient if salient is not None else np.zeros((0, 3)), maskable, cfg
        )
        if cand_s.size == 0:
            return None
        taken = np.zeros(T, dtype=bool)
        covered, target = 0, cfg.salient_rate * T
        cap = cfg.max_spans
        for k in rng.permutation(cand_s.size):
            if cap is not None and len(spans) >= cap:
                break
            s, e = int(cand_s[k]), int(cand_e[k])
            if taken[s:e].any():
                continue
            taken[s:e] = True
            spans.append((s, e, "salient"))
            covered += int(maskable[s:e].sum())
            if covered >= target:
                break
        free = maskable & ~taken
        budget = _stochastic_round(cfg.random_span_rate * T, rng)
        left = None if cap is None else cap - len(spans)
        spans += [(s, e, "random") for s, e in _place_random_spans(free, budget, rng, cfg, left)]
        mask = maskable & ~free
    elif cfg.strategy == "span":
        free = maskable.copy()
        budget = max(1, _stochastic_round(cfg.span_rate * T, rng))
        spans = [(s, e, "random") for s, e in _place_random_spans(free, budget, rng, cfg, cfg.max_spans)]
        mask = maskable & ~free
    else:  # uniform
        cand = np.flatnonzero(maskable)
        n = min(cand.size, max(1, _stochastic_round(cfg.uniform_rate * T, rng)))
        if cfg.max_spans is not None:
            n = min(n, cfg.max_spans)
        pos = np.sort(rng.choice(cand, size=n, replace=False))
        mask = np.zeros(T, dtype=bool)
        mask[pos] = True
        spans = [(int(p), int(p) + 1, "random") for p in pos]

    labels = np.full(T, IGNORE_INDEX, dtype=np.int64)
    labels[mask] = ids[mask]
    out = ids.copy()
    pos = np.flatnonzero(mask)
    p_mask, p_rand, _ = cfg.replace_probs
    if p_mask >= 1.0:
        out[pos] = mask_id
    else:
        u = rng.random(pos.size)
        out[pos[u < p_mask]] = mask_id
        rand_pos = pos[(u >= p_mask) & (u < p_mask + p_rand)]
        out[rand_pos] = _random_tokens(rng, rand_pos.size, vocab_size, specials)
    spans.sort()
    return MaskedExample(input_ids=out, labels=labels, masked_spans=spans)


def _random_tokens(rng: np.random.Generator, n: int, vocab_size: int, specials: np.ndarray) -> np.ndarray:
    """(n,) int64 ids uniform over the vocabulary minus the special ids."""
    tok = rng.integers(0, vocab_size, size=n)
    bad = np.isin(tok, specials)
    while bad.any():
        tok[bad] = rng.integers(0, vocab_size, size=int(bad.sum()))
        bad = np.isin(tok, specials)
    return tok


def _salient_array(store: DocStore) -> RaggedArray:
    if store._salient is None:
        store._salient = RaggedArray(store.root / "tokens" / "salient", "int32", 3)
    return store._salient


def kept_salient(store: DocStore, chunk_id: int, span_keep: np.ndarray | None) -> np.ndarray:
    """Chunk `chunk_id`'s salient spans (S_c, 3) as `DocStore.salient_tokens` gives them, only those
    `span_keep` (S,) keeps (a flag per salient span of the store, in stored order; None: all)."""
    sal = store.salient_tokens(chunk_id)
    if span_keep is None:
        return sal
    o = _salient_array(store).offsets
    return sal[np.asarray(span_keep[o[chunk_id] : o[chunk_id + 1]], dtype=bool)]


def eligible_ids(store: DocStore, cfg: MaskingConfig, span_keep: np.ndarray | None = None) -> np.ndarray:
    """(E,) int64 sorted ids of the chunks `mask_example` can mask under `cfg` (with only the salient
    spans `span_keep` keeps, see `MaskingCollator`).

    "salient": chunks with at least one salient span of an allowed source within
    `max_salient_tokens` (read once from the ragged salient index, no per-chunk Python; a span made
    only of special tokens still counts here, `mask_example` then returns None). Other strategies:
    every non-empty chunk.
    """
    if cfg.strategy != "salient":
        return np.flatnonzero(store.lengths() > 0).astype(np.int64)
    sal = _salient_array(store)
    data = np.asarray(sal.data)
    n_spans = np.diff(sal.offsets)
    ok = np.isin(data[:, 2], cfg.source_codes) & (data[:, 1] > data[:, 0])
    if cfg.max_salient_tokens is not None:
        ok &= data[:, 1] - data[:, 0] <= cfg.max_salient_tokens
    if span_keep is not None:
        ok &= np.asarray(span_keep, dtype=bool)
    row = np.repeat(np.arange(len(n_spans), dtype=np.int64), n_spans)
    counts = np.bincount(row[ok], minlength=len(n_spans))
    return np.flatnonzero(counts).astype(np.int64)


class MaskingCollator:
    """Turns chunk ids of a DocStore into a masked MLM batch `[CLS] x [SEP] [PAD]...`.

    `collator(ids)` -> dict of torch int64 tensors:
      input_ids (B, L) masked, padded with the pad id; attention_mask (B, L) 1 on [CLS] x [SEP];
      labels (B, L) original ids at masked positions (shifted by +1 for [CLS]), -100 elsewhere;
      source_ids (B,) the chunk ids (REALM excludes a query's own chunk from its retrievals).
    L = longest chunk + 2 (rounded up to `pad_to_multiple_of`). `span_keep` (S,) bool over the
    store's salient spans in stored order: only the kept ones may be masked (None: all; see
    `ralm.realm.masking.retrievable`). Chunks that cannot be masked
    (`mask_example` -> None) are dropped, with their ids, so B <= len(ids); pass ids from
    `eligible_ids` to keep B fixed. `return_tensors="np"` gives numpy arrays instead.
    """

    def __init__(
        self,
        store: DocStore,
        tokenizer: Any,
        cfg: MaskingConfig | None = None,
        *,
        seed: int | None = 0,
        rng: np.random.Generator | None = None,
        pad_to_multiple_of: int | None = None,
        return_tensors: str = "pt",
        span_keep: np.ndarray | None = None,
    ) -> None:
        self.store = store
        self.cfg = cfg or MaskingConfig()
        self.rng = rng if rng is not None else np.random.default_rng(seed)
        self.cls_id = _token_id(tokenizer, "cls_token_id")
        self.sep_id = _token_id(tokenizer, "sep_token_id")
        self.pad_id = _token_id(tokenizer, "pad_token_id")
        self.mask_id = _token_id(tokenizer, "mask_token_id")
        self.vocab_size = len(tokenizer)
        self.special_ids = tuple(sorted(set(tokenizer.all_special_ids)))
        self.pad_to_multiple_of = pad_to_multiple_of
        self.span_keep = span_keep
        if return_tensors not in ("pt", "np"):
            raise ValueError(f"return_tensors must be 'pt' or 'np', not {return_tensors!r}")
        self.return_tensors = return_tensors

    def mask(self, chunk_id: int, rng: np.random.Generator | None = None) -> MaskedExample | None:
        """`mask_example` on chunk `chunk_id` of the store (its salient spans kept by `span_keep`)."""
        return mask_example(
            self.store.input_ids(chunk_id),
            kept_salient(self.store, chunk_id, self.span_keep),
            self.cfg,
            rng if rng is not None else self.rng,
            mask_id=self.mask_id,
            vocab_size=self.vocab_size,
            special_ids=self.special_ids,
        )

    def __call__(
        self,
        ids: Sequence[int],
        rng: np.random.Generator | None = None,
        rngs: Sequence[np.random.Generator] | None = None,
    ) -> dict[str, Any]:
        """Mask and collate chunks `ids`; `rngs` gives each example its own generator (so an
        example's masks do not depend on which others share its batch or its process)."""
        if rngs is not None and len(rngs) != len(ids):
            raise ValueError(f"{len(rngs)} generators for {len(ids)} ids")
        kept: list[int] = []
        examples: list[MaskedExample] = []
        for j, cid in enumerate(ids):
            ex = self.mask(int(cid), rngs[j] if rngs is not None else rng)
            if ex is not None:
                kept.append(int(cid))
                examples.append(ex)
        return self.collate(kept, examples)

    def collate(self, ids: Sequence[int], examples: Sequence[MaskedExample]) -> dict[str, Any]:
        """The batch of already masked `examples` of chunks `ids` (what `__call__` returns)."""
        kept = [int(i) for i in ids]
        B = len(examples)
        lens = np.array([ex.input_ids.shape[0] for ex in examples], dtype=np.int64)
        L = int(lens.max()) + 2 if B else 2
        if self.pad_to_multiple_of:
            L = -(-L // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = np.full((B, L), self.pad_id, dtype=np.int64)
        labels = np.full((B, L), IGNORE_INDEX, dtype=np.int64)
        input_ids[:, 0] = self.cls_id
        for b, ex in enumerate(examples):
            t = ex.input_ids.shape[0]
            input_ids[b, 1 : t + 1] = ex.input_ids
            labels[b, 1 : t + 1] = ex.labels
        input_ids[np.arange(B), lens + 1] = self.sep_id
        attention_mask = (np.arange(L)[None, :] < (lens + 2)[:, None]).astype(np.int64)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            "source_ids": np.asarray(kept, dtype=np.int64),
        }
        if self.return_tensors == "pt":
            import torch

            return {k: torch.from_numpy(v) for k, v in batch.items()}
        return batch


def _token_id(tokenizer: Any, attr: str) -> int:
    v = getattr(tokenizer, attr, None)
    if v is None:
        raise ValueError(
            f"the tokenizer has no {attr.removesuffix('_id')}; masking needs [CLS]/[SEP]/[PAD]/[MASK]"
        )
    return int(v)
