"""The held-out chunks of a run masked for evaluation: salient spans only, each chunk's mask drawn
from its own seed, so every evaluation (perplexity, the gold tables, answer records) scores the
same queries whatever the batch size or model."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ralm.realm.masking.mlm import MaskingCollator
from ralm.realm.training.build import make_collator
from ralm.realm.training.run import LoadedRun

__all__ = ["eval_collator", "heldout_batches"]


def eval_collator(run: LoadedRun) -> MaskingCollator:
    """The run's collator as evaluation masks with it: salient spans only, always [MASK], and for a
    causal reader one span a chunk (`heldout_batches` draws each chunk's mask from its own seed)."""
    cfg = replace(run.cfg.masking, strategy="salient", random_span_rate=0.0, replace_probs=(1.0, 0.0, 0.0))
    if run.model.causal:
        cfg = replace(cfg, salient_rate=0.0)  # one salient span a chunk: each query's NLL is one span's
    return make_collator(run.cfg, run.query_store, run.tokenizer, run.model, cfg, return_tensors="pt")


def heldout_batches(run: LoadedRun, ids: np.ndarray, batch_size: int):
    col = eval_collator(run)
    for s in range(0, len(ids), batch_size):
        kept, examples = [], []
        for c in ids[s : s + batch_size]:
            # one generator per chunk id: the same masks whatever the batch size or model
            ex = col.mask(int(c), np.random.default_rng([run.cfg.seed, 3, int(c)]))
            if ex is not None:
                kept.append(int(c))
                examples.append(ex)
        if kept:
            yield col.collate(kept, examples)
