"""Batches of sentences with their offline-retrieved memory, and the perplexity counts.

A sentence W = w_1..w_N becomes ``[BOS] w_1 .. w_N`` (input, positions t = 0..N) and
``w_1 .. w_N [EOS]`` (labels): every token of the sentence and its end are predicted, the start
token never is. With retrieval, block j = 1..floor(N / delta) is the top-K of the data store for
the query w_1..w_{j*delta} (`Datastore.neighbors`, computed offline, own sentence excluded for
training sentences): K memory slots with the entry's prefix embedding as key, its suffix
embedding as value, and block number j (see `ralm.surealm.model.memory_mask`). The controls
(`neighbours`): "random" puts K random training entries in each block instead, never one of the
sentence's own entries, the same ones every time the sentence is read (drawn from a generator seeded
by the sentence id and the block); "null" keeps the slots and their blocks but zeroes their
embeddings. Slot dropout (`slot_dropout`, training batches only) turns each real slot into a null
slot with that probability, drawn anew at every read: a sentence's memory is then no fixed code the
LM can learn the sentence by (the neighbours are computed offline, so without it a training sentence
meets the very same K x J embeddings in every epoch).

Perplexities (`PerplexityCounts`): token level exp(NLL / predicted tokens), and word level
exp(NLL / words) where words are the sentence's whitespace-separated words plus one for its
end (the [EOS] prediction), so the two share the numerator and differ only in what is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.lm.perplexity import Perplexities
from ralm.surealm.datastore import Datastore

IGNORE_INDEX = -100

__all__ = ["IGNORE_INDEX", "PerplexityCounts", "SentenceBatcher", "lm_special_ids"]


def lm_special_ids(tokenizer) -> tuple[int, int, int]:
    """(bos, eos, pad) ids of an LM tokenizer: BOS/EOS, or [CLS]/[SEP] for a BERT vocabulary."""
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if bos is None or eos is None:
        raise RalmError("the LM tokenizer has no BOS/EOS (or [CLS]/[SEP]) token to frame sentences")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    return int(bos), int(eos), int(pad)


@dataclass
class PerplexityCounts(Perplexities):
    """Summed NLL (nats) and what it is normalised by."""

    nll: float = 0.0
    tokens: int = 0
    words: int = 0
    sentences: int = 0

    def add(self, other: PerplexityCounts) -> None:
        self.nll += other.nll
        self.tokens += other.tokens
        self.words += other.words
        self.sentences += other.sentences

    def as_dict(self) -> dict:
        return {**self.perplexity_fields(), "sentences": self.sentences}


class SentenceBatcher:
    """Builds model inputs for a list of sentence ids of a data store."""

    def __init__(
        self,
        store: Datastore,
        tokenizer,
        *,
        k: int,
        delta: int,
        retrieval: bool = True,
        neighbours: str = "retrieved",
        seed: int = 0,
        slot_dropout: float = 0.0,
    ) -> None:
        if neighbours not in ("retrieved", "random", "null"):
            raise RalmError(f"neighbours={neighbours!r}: use retrieved, random or null")
        if not 0.0 <= slot_dropout < 1.0:
            raise RalmError(f"memory slot dropout {slot_dropout}: must be in [0, 1)")
        if retrieval and neighbours == "random" and len(store) <= k:
            raise RalmError(f"{store.root}: {len(store)} entries are too few to draw {k} random ones")
        if retrieval and k > store.k:
            raise RalmError(
                f"K={k} but {store.root} kept only {store.k} neighbours per query; rebuild it with --k {k}"
            )
        self.store = store
        self.k = k
        self.delta = delta
        self.retrieval = retrieval
        self.neighbours = neighbours
        self.seed = seed
        self.slot_dropout = slot_dropout
        self._drop_rng = np.random.default_rng([seed, 31])
        self.bos, self.eos, self.pad = lm_special_ids(tokenizer)
        self._words: dict[int, int] = {}

    def words(self, sid: int) -> int:
        """Whitespace words of sentence `sid` plus one for its end."""
        if sid not in self._words:
            self._words[sid] = len(self.store.text(sid).split()) + 1
        return self._words[sid]

    def batch(self, sids: np.ndarray | list[int], *, train: bool = False) -> dict[str, torch.Tensor]:
        """input_ids/attention_mask/labels (B, T); with retrieval mem_keys/mem_values (B, J, d) float32
        and mem_block (B, J) long (0 = padding slot). `train`: a training batch, the one kind that
        gets slot dropout (its dropped slots are -2 in mem_entries)."""
        toks = [self.store.tokens(int(s)) for s in sids]
        B = len(toks)
        T = max(len(t) for t in toks) + 1
        ids = torch.full((B, T), self.pad, dtype=torch.long)
        labels = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((B, T), dtype=torch.long)
        for b, t in enumerate(toks):
            n = len(t)
            tt = torch.from_numpy(t.astype(np.int64))
            ids[b, 0] = self.bos
            ids[b, 1 : n + 1] = tt
            labels[b, :n] = tt
            labels[b, n] = self.eos
            mask[b, : n + 1] = 1
        out = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        if self.retrieval:
            out.update(self.memory(sids, toks, train=train))
        return out

    def memory(self, sids, toks, *, train: bool = False) -> dict[str, torch.Tensor]:
        K, delta = self.k, self.delta
        entries, blocks = [], []
        for s, t in zip(sids, toks, strict=True):
            nb = len(t) // delta  # blocks fetched at t = delta, 2*delta, ... <= N
            if self.neighbours == "random":
                entries.append(self.random_entries(int(s), nb).reshape(-1))
            else:
                nbr = self.store.sentence_neighbors(int(s), K)  # (N, K): row L-1 = query w_1..w_L
                rows = np.arange(1, nb + 1) * delta - 1
                entries.append(nbr[rows].reshape(-1))
            blocks.append(np.repeat(np.arange(1, nb + 1), K))
        J = max((len(e) for e in entries), default=0)
        B = len(entries)
        ent = np.full((B, J), -1, dtype=np.int64)
        blk = np.zeros((B, J), dtype=np.int64)
        for b, (e, j) in enumerate(zip(entries, blocks, strict=True)):
            ent[b, : len(e)] = e
            blk[b, : len(j)] = j
        keys, values = self.store.read_entries(ent)
        if self.neighbours == "null":
            keys[:] = 0.0
            values[:] = 0.0
        if train and self.slot_dropout > 0.0:
            drop = (ent >= 0) & (self._drop_rng.random(ent.shape) < self.slot_dropout)
            keys[drop] = 0.0
            values[drop] = 0.0
            ent[drop] = -2
        return {
            "mem_keys": torch.from_numpy(keys),
            "mem_values": torch.from_numpy(values),
            "mem_block": torch.from_numpy(blk),
            "mem_entries": torch.from_numpy(ent),
        }

    def random_entries(self, sid: int, blocks: int) -> np.ndarray:
        """(blocks, K) random entry ids of the training store, none of sentence `sid`'s own, the same
        for the same sentence every time (a generator seeded by the batcher's seed and `sid`)."""
        rng = np.random.default_rng([self.seed, 23, sid])
        E = len(self.store)
        out = rng.integers(0, E, size=(blocks, self.k))
        own = np.asarray(self.store.entry_sid)[out] == sid
        while own.any():  # redraw the sentence's own entries
            out[own] = rng.integers(0, E, size=int(own.sum()))
            own = np.asarray(self.store.entry_sid)[out] == sid
        return out.astype(np.int64)

    def counts(self, sids) -> PerplexityCounts:
        """Predicted tokens, words and sentences of `sids` (NLL 0): the denominators."""
        toks = sum(len(self.store.tokens(int(s))) + 1 for s in sids)
        return PerplexityCounts(0.0, toks, sum(self.words(int(s)) for s in sids), len(sids))
