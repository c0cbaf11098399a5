"""LUKE/DaLUKE pre-training batches: masked words and masked entities over a DocStore's chunks.

The entity spans come from ralm.luke.annotations (`EntitySpans`: links and, optionally, DaLUKE's
auto-annotated spans, read once per run).

A batch is, per chunk, `[CLS] words [SEP]` (truncated to `max_seq_length`) and the chunk's first
`max_entities` entity spans that lie inside the kept words:
  input_ids, attention_mask, mlm_labels      (B, T)
  entity_ids, entity_attention_mask, entity_labels   (B, E)
  entity_position_ids                        (B, E, M): word positions ([CLS] = 0), padded with -1
T and E are the batch's longest; M = `max_mention_length` (a longer span keeps its first M words).

Masking, deterministic given each example's `np.random.Generator`:
* words: BERT's masking as `ralm.realm.masking.mlm.mask_example` does it ("uniform": 15% of a chunk's
  tokens, stochastically rounded, at least one, without replacement; 80% [MASK], 10% a random token,
  10% unchanged; special tokens, [CLS]/[SEP]/[PAD] and any [UNK] in the text, never).
* entities: 15% of the chunk's known entities (stochastically rounded, without replacement)
  become [MASK] (id 2) with their vocabulary id as label; DaLUKE always uses [MASK] for a masked
  entity (LUKE's random/unchanged entity options default to 0 too). Entities outside the
  vocabulary enter as [UNK] (id 1) and are never predicted. Labels are -100 elsewhere.
* the words of a masked entity's span are not masked on purpose: DaLUKE masks words and entities
  independently, and LUKE's `--mask-words-in-entity-span` is off by default. Words are drawn
  first, so a `with_entities=False` (plain MLM) batch masks exactly the same words.
Left out: whole-word masking (LUKE's default; we mask wordpieces as `realm.masking` does) and
LUKE's fixed minimum of one masked entity per example (we keep the expected rate at 15%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.luke.annotations import EntitySpans
from ralm.luke.vocab import MASK_ID, SPECIAL_TOKENS, EntityVocabulary
from ralm.realm.masking.mlm import BERT_REPLACE, IGNORE_INDEX, MaskingConfig, mask_example

__all__ = [
    "LukeCollator",
    "LukeExample",
    "MaskSettings",
    "WordTokens",
    "collate",
    "make_example",
]


# ----------------------------------------------------------------------------- one example
@dataclass(frozen=True)
class WordTokens:
    """The backbone tokenizer's special ids and vocabulary size (what word masking needs)."""

    cls_id: int
    sep_id: int
    pad_id: int
    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...]

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> WordTokens:
        ids = {}
        for name in ("cls", "sep", "pad", "mask"):
            v = getattr(tokenizer, f"{name}_token_id", None)
            if v is None:
                raise RalmError(
                    f"the backbone's tokenizer has no {name} token; LUKE needs [CLS]/[SEP]/[PAD]/[MASK]"
                )
            ids[name] = int(v)
        return cls(
            ids["cls"],
            ids["sep"],
            ids["pad"],
            ids["mask"],
            len(tokenizer),
            tuple(sorted(tokenizer.all_special_ids)),
        )


@dataclass(frozen=True)
class MaskSettings:
    """What an example keeps and how it is masked (see the module docstring)."""

    max_seq_length: int = 128  # [CLS] + words + [SEP]
    max_entities: int = 32
    max_mention_length: int = 30
    mlm_prob: float = 0.15
    replace_probs: tuple[float, float, float] = BERT_REPLACE  # [MASK], random word, unchanged
    mep_prob: float = 0.15
    with_entities: bool = True  # False: E = 0, the plain MLM batch of the same words


@dataclass
class LukeExample:
    """One masked chunk. input_ids/mlm_labels: (T,) words without [CLS]/[SEP]; entity_ids,
    entity_labels: (E,); entity_spans: (E, 2) half-open word spans into input_ids."""

    chunk_id: int
    input_ids: np.ndarray
    mlm_labels: np.ndarray
    entity_ids: np.ndarray
    entity_labels: np.ndarray
    entity_spans: np.ndarray


def _stochastic_round(x: float, rng: np.random.Generator) -> int:
    lo = math.floor(x)
    return lo + int(rng.random() < x - lo)


def make_example(
    input_ids: np.ndarray,
    spans: np.ndarray,
    rng: np.random.Generator,
    settings: MaskSettings,
    tok: WordTokens,
    chunk_id: int = -1,
) -> LukeExample:
    """Truncate and mask one chunk. input_ids: (T,) token ids (no special tokens); spans: (S, 3) rows
    (token_start, token_end, entity vocabulary id) in text order."""
    ids = np.asarray(input_ids, dtype=np.int64)[: settings.max_seq_length - 2]
    T = ids.shape[0]
    masked, labels = ids.copy(), np.full(T, IGNORE_INDEX, dtype=np.int64)
    if settings.mlm_prob > 0 and T:
        cfg = MaskingConfig(
            strategy="uniform", uniform_rate=settings.mlm_prob, replace_probs=settings.replace_probs
        )
        ex = mask_example(
            ids, None, cfg, rng, mask_id=tok.mask_id, vocab_size=tok.vocab_size, special_ids=tok.special_ids
        )
        if ex is not None:  # None: nothing maskable (only special tokens)
            masked, labels = ex.input_ids, ex.labels
    sp = np.asarray(spans, dtype=np.int64).reshape(-1, 3)
    if not settings.with_entities:
        sp = sp[:0]
    sp = sp[(sp[:, 1] <= T) & (sp[:, 1] > sp[:, 0])][: settings.max_entities]
    ent = sp[:, 2].copy()
    ent_labels = np.full(ent.shape[0], IGNORE_INDEX, dtype=np.int64)
    known = np.flatnonzero(ent >= len(SPECIAL_TOKENS))
    if settings.with_entities:
        n = min(known.size, _stochastic_round(settings.mep_prob * known.size, rng))
        chosen = rng.choice(known, size=n, replace=False) if n else known[:0]
        ent_labels[chosen] = ent[chosen]
        ent[chosen] = MASK_ID
    return LukeExample(chunk_id, masked, labels, ent, ent_labels, sp[:, :2].copy())


# ----------------------------------------------------------------------------- batches
def collate(
    examples: Sequence[LukeExample], settings: MaskSettings, tok: WordTokens, return_tensors: str = "pt"
) -> dict[str, Any]:
    """Pad examples into the batch of the module docstring (torch int64 tensors, or numpy with "np")."""
    B = len(examples)
    lens = np.array([ex.input_ids.shape[0] for ex in examples], dtype=np.int64)
    T = int(lens.max()) + 2 if B else 2
    E = max((ex.entity_ids.shape[0] for ex in examples), default=0)
    M = settings.max_mention_length
    input_ids = np.full((B, T), tok.pad_id, dtype=np.int64)
    mlm_labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)
    entity_ids = np.zeros((B, E), dtype=np.int64)
    entity_labels = np.full((B, E), IGNORE_INDEX, dtype=np.int64)
    entity_mask = np.zeros((B, E), dtype=np.int64)
    positions = np.full((B, E, M), -1, dtype=np.int64)
    input_ids[:, 0] = tok.cls_id
    for b, ex in enumerate(examples):
        t = int(lens[b])
        input_ids[b, 1 : t + 1] = ex.input_ids
        input_ids[b, t + 1] = tok.sep_id
        mlm_labels[b, 1 : t + 1] = ex.mlm_labels
        e = ex.entity_ids.shape[0]
        entity_ids[b, :e] = ex.entity_ids
        entity_labels[b, :e] = ex.entity_labels
        entity_mask[b, :e] = 1
        for k, (s, end) in enumerate(ex.entity_spans.tolist()):
            n = min(end - s, M)
            positions[b, k, :n] = np.arange(s + 1, s + 1 + n)  # +1: [CLS]
    batch = {
        "input_ids": input_ids,
        "attention_mask": (np.arange(T)[None, :] < (lens + 2)[:, None]).astype(np.int64),
        "mlm_labels": mlm_labels,
        "entity_ids": entity_ids,
        "entity_attention_mask": entity_mask,
        "entity_position_ids": positions,
        "entity_labels": entity_labels,
        "chunk_ids": np.array([ex.chunk_id for ex in examples], dtype=np.int64),
    }
    if return_tensors == "pt":
        import torch

        return {k: torch.from_numpy(v) for k, v in batch.items()}
    if return_tensors != "np":
        raise ValueError(f"return_tensors must be 'pt' or 'np', not {return_tensors!r}")
    return batch


class LukeCollator:
    """Chunk ids of a DocStore -> a masked LUKE batch (`collate`), one generator per example.

    `collator(ids, rngs)`: ids (B,) chunk ids, rngs B generators (`ralm.realm.data.example_rngs`),
    so an example's masks depend on its position in the global batch, not on the process count.
    """

    def __init__(
        self,
        store: DocStore,
        spans: EntitySpans,
        vocab: EntityVocabulary,
        tok: WordTokens,
        settings: MaskSettings,
        return_tensors: str = "pt",
    ) -> None:
        if spans.n_chunks != len(store):
            raise ValueError(f"spans of {spans.n_chunks} chunks for a store of {len(store)}")
        self.store, self.spans, self.vocab, self.tok, self.settings = store, spans, vocab, tok, settings
        self.return_tensors = return_tensors
        self._vocab_ids = spans.vocab_ids(vocab)

    def example(self, chunk_id: int, rng: np.random.Generator) -> LukeExample:
        cid = int(chunk_id)
        return make_example(
            self.store.input_ids(cid),
            self.spans.chunk(cid, self._vocab_ids),
            rng,
            self.settings,
            self.tok,
            cid,
        )

    def __call__(self, ids: Sequence[int], rngs: Sequence[np.random.Generator]) -> dict[str, Any]:
        if len(rngs) != len(ids):
            raise ValueError(f"{len(rngs)} generators for {len(ids)} ids")
        examples = [self.example(i, r) for i, r in zip(ids, rngs, strict=True)]
        return collate(examples, self.settings, self.tok, self.return_tensors)
