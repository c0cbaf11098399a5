"""The batches of retriever training: DPR batches of labelled pairs and contrastive batches of raw text.

- `plan_epoch`: each epoch's questions in a random order, grouped so that no two questions in a
  batch share a positive passage (a clash waits for the next batch).
- `SupervisedBatches`: a batch's queries, their positives and `hard_negatives` BM25 negatives each,
  and the mask of false negatives (another positive of the question, or a passage holding its
  answer), which `ralm.retrieval.training.contrastive` leaves out of that question's softmax.
- `UnsupervisedBatches`: B distinct chunks per step, each a pseudo pair (`ralm.retrieval.training.views`).
Every batch is a function of (seed, epoch, batch) or (seed, step) only, so a resumed run draws
what the uninterrupted run would have drawn.
"""

from __future__ import annotations

import numpy as np
import torch

from ralm.answers import token_string
from ralm.errors import RalmError
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.training.data import PairSet


def plan_epoch(positives: list[int], batch_size: int, rng: np.random.Generator) -> list[list[int]]:
    """Example indices grouped into batches in a random order, no two in a batch sharing a positive.

    positives: each example's positive id. An example whose positive is already in the batch
    waits for the next one; whatever still clashes at the end goes into the last batches as is.
    Example: positives [7, 7, 8], batch 2 -> two batches, the two 7s apart.
    """
    order = rng.permutation(len(positives)).tolist()
    batches: list[list[int]] = []
    cur: list[int] = []
    used: set[int] = set()
    waiting: list[int] = []

    def take(i: int) -> None:
        cur.append(i)
        used.add(positives[i])

    for i in order:
        if positives[i] in used:
            waiting.append(i)
            continue
        take(i)
        while len(cur) == batch_size:
            batches.append(cur)
            cur, used = [], set()
            still = []
            for j in waiting:
                if len(cur) < batch_size and positives[j] not in used:
                    take(j)
                else:
                    still.append(j)
            waiting = still
    rest = cur + waiting  # full batches so far + ceil(len(rest) / B) = ceil(n / B) batches in all
    batches.extend(rest[s : s + batch_size] for s in range(0, len(rest), batch_size))
    return batches


class SupervisedBatches:
    """DPR batches of a PairSet: epoch plans, hard negatives drawn per batch, the false-negative mask.

    negatives: each question's hard-negative pool (best first); `hard_negatives` are drawn from it
    per question and batch; lang: answer normalisation for the mask.
    """

    def __init__(
        self,
        pairs: PairSet,
        negatives: list[list[int]],
        *,
        batch_size: int,
        hard_negatives: int = 1,
        seed: int = 0,
        lang: str = "en",
    ) -> None:
        self.pairs, self.negatives = pairs, negatives
        self.batch_size, self.hard_negatives, self.seed, self.lang = batch_size, hard_negatives, seed, lang
        self.positive = [ex.positives[0] for ex in pairs.examples]
        self._plans: dict[int, list[list[int]]] = {}
        self._needles: dict[int, list[str]] = {}

    def plan(self, epoch: int) -> list[list[int]]:
        if epoch not in self._plans:
            rng = np.random.default_rng([self.seed, epoch])
            self._plans = {epoch: plan_epoch(self.positive, self.batch_size, rng)}
        return self._plans[epoch]

    def steps_per_epoch(self) -> int:
        return len(self.plan(0))

    def batch(self, epoch: int, b: int, encoder: DualEncoder):
        """(query rows, doc rows, targets, mask) of batch b of `epoch`: B questions, their positives
        (columns 0..B-1) and their drawn hard negatives; a function of (seed, epoch, b) only."""
        idx = self.plan(epoch)[b]
        rng = np.random.default_rng([self.seed, epoch, b, 1])
        exs = [self.pairs.examples[i] for i in idx]
        docs = [self.positive[i] for i in idx]
        for i in idx:
            pool = self.negatives[i]
            h = min(self.hard_negatives, len(pool))
            if h:
                docs.extend(int(c) for c in rng.choice(pool, size=h, replace=False))
        q_tok = encoder.query_tower.tokenizer([e.query for e in exs], add_special_tokens=False)["input_ids"]
        tpl, m = encoder.query_tower.template, encoder.config.max_length
        q_rows = [tpl.build(None, ids, m) for ids in q_tok]
        d_rows = self.pairs.passages.doc_rows(encoder, docs)
        return q_rows, d_rows, list(range(len(idx))), self.mask(exs, docs)

    def mask(self, exs, docs: list[int]) -> torch.Tensor:
        """(B, N) True where doc j is a known positive of question i or holds one of its answers."""
        out = torch.zeros((len(exs), len(docs)), dtype=torch.bool)
        hays: dict[int, str] = {}
        for i, ex in enumerate(exs):
            pos = set(ex.positives)
            needles = [n for n in (token_string(a, self.lang) for a in ex.answers or []) if n.strip()]
            for j, d in enumerate(docs):
                if d in pos:
                    out[i, j] = True
                elif needles:
                    if d not in hays:
                        hays[d] = token_string(self.pairs.passages.text(d), self.lang)
                    out[i, j] = any(n in hays[d] for n in needles)
        return out


class UnsupervisedBatches:
    """Contrastive batches: B distinct training chunks per step, each turned into a pseudo pair."""

    def __init__(self, views, train_ids: np.ndarray, *, batch_size: int, seed: int = 0) -> None:
        self.views, self.ids, self.batch_size, self.seed = views, train_ids, batch_size, seed

    def batch(self, step: int):
        """(query rows, doc rows, targets, None) of optimiser step `step` (a function of seed and step)."""
        rng = np.random.default_rng([self.seed, step, 2])
        pick = rng.choice(self.ids, size=min(len(self.ids), 2 * self.batch_size), replace=False)
        q_rows, d_rows, used = self.views.rows(pick, rng)
        q_rows, d_rows = q_rows[: self.batch_size], d_rows[: self.batch_size]
        if len(q_rows) < 2:
            raise RalmError("too few chunks with two or more sentences for ICT; use --recipe crop or both")
        return q_rows, d_rows, list(range(len(q_rows))), None
