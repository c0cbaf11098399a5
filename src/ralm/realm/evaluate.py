"""Held-out masked-LM perplexity of a pre-training run, with and without retrieval.

`evaluate_mlm(run, baseline)` masks the run's held-out chunks (never training queries; listed in
its split.json) with salient spans only (the run's masking config with the random spans turned
off and always [MASK]; seeded per chunk, so every model sees exactly the same masked inputs) and
reports masked-token perplexity exp(-Σ log p(y|x) / Σ |y|) for:

* "realm (retrieval)": the full model, p(y|x) = Σ_z p(z|x) p(y|z,x) over the top k (incl. null);
* "realm reader alone": the run's reader on ``[CLS] x [SEP]`` (BRENT's extracted reader);
* "mlm-only baseline": the baseline run's reader on ``[CLS] x [SEP]`` (BRENT's NorBERT2_50k row).

The query chunk itself is excluded from retrieval, as in training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.realm.masking import MaskingCollator
from ralm.realm.run import LoadedRun
from ralm.retrieval.encoders import autocast_context, autocast_dtype

__all__ = ["EvalRow", "evaluate_mlm", "format_table"]


@dataclass
class EvalRow:
    """One model's held-out score: perplexity, NLL per masked token, counts."""

    name: str
    ppl: float
    nll: float
    tokens: int
    examples: int
    answers_in_docs: float | None = None  # retrieval rows: masked tokens found in a retrieved chunk

    def as_dict(self) -> dict:
        d = {
            "name": self.name,
            "ppl": self.ppl,
            "nll": self.nll,
            "tokens": self.tokens,
            "examples": self.examples,
        }
        if self.answers_in_docs is not None:
            d["answers_in_docs"] = self.answers_in_docs
        return d


def _eval_collator(run: LoadedRun) -> MaskingCollator:
    cfg = replace(run.cfg.masking, strategy="salient", random_span_rate=0.0, replace_probs=(1.0, 0.0, 0.0))
    return MaskingCollator(run.query_store, run.tokenizer, cfg, return_tensors="pt")


def _batches(run: LoadedRun, ids: np.ndarray, batch_size: int):
    col = _eval_collator(run)
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


@torch.inference_mode()
def _score(run: LoadedRun, ids: np.ndarray, batch_size: int, how: str, model_run: LoadedRun) -> EvalRow:
    m = model_run.model
    dev = model_run.device
    ac = autocast_dtype(dev, model_run.cfg.autocast, torch.float32)
    total, n, ex, found = 0.0, 0, 0, 0
    for batch in _batches(run, ids, batch_size):
        batch = {k: v.to(dev) for k, v in batch.items()}
        with autocast_context(dev, ac):
            out = m(batch, model_run.searcher) if how == "retrieval" else m.reader_only(batch)
            lp, nm = out.log_p_y, out.n_masked
        if out.answers_found is not None:
            found += int(out.answers_found.sum())
        total += -float(lp.float().sum())
        n += int(nm.sum())
        ex += int(lp.shape[0])
    nll = total / max(n, 1)
    return EvalRow(
        name="",
        ppl=math.exp(nll),
        nll=nll,
        tokens=n,
        examples=ex,
        answers_in_docs=found / max(n, 1) if how == "retrieval" else None,
    )


def evaluate_mlm(
    run: LoadedRun, baseline: LoadedRun | None = None, *, n: int | None = None, batch_size: int = 8
) -> list[EvalRow]:
    """The evaluation table (see the module docstring); `n` limits the held-out chunks used."""
    ids = run.heldout_ids if n is None else run.heldout_ids[:n]
    if len(ids) == 0:
        raise RalmError(f"{run.cfg.out}: the run holds no chunks out (heldout = 0); retrain with heldout > 0")
    if baseline is not None:
        if baseline.query_store.fingerprint != run.query_store.fingerprint:
            raise RalmError(
                f"{baseline.cfg.out}: trained on another corpus than {run.cfg.out}; compare runs on one corpus"
            )
        leaked = np.intersect1d(baseline.train_ids, ids)
        if len(leaked):
            raise RalmError(
                f"{baseline.cfg.out}: trained on {len(leaked)} of {run.cfg.out}'s held-out chunks; "
                "train both with the same seed, heldout and masking settings"
            )
    rows = []
    if run.model.retrieval:
        rows.append(
            replace(_score(run, ids, batch_size, "retrieval", run), name=f"{run.cfg.mode} (retrieval)")
        )
    rows.append(replace(_score(run, ids, batch_size, "reader", run), name=f"{run.cfg.mode} reader alone"))
    if baseline is not None:
        rows.append(
            replace(
                _score(run, ids, batch_size, "reader", baseline), name=f"{baseline.cfg.mode}-only baseline"
            )
        )
    return rows


def format_table(rows: list[EvalRow]) -> str:
    """A plain-text table: model, perplexity, NLL/token, masked tokens, examples."""
    w = max(len(r.name) for r in rows)
    head = f"{'model':<{w}}  {'ppl':>10}  {'nll/token':>9}  {'tokens':>7}  {'examples':>8}  {'answers in docs':>15}"
    lines = [head, "-" * len(head)]
    for r in rows:
        found = f"{r.answers_in_docs:>15.3f}" if r.answers_in_docs is not None else f"{'-':>15}"
        lines.append(f"{r.name:<{w}}  {r.ppl:>10.2f}  {r.nll:>9.4f}  {r.tokens:>7}  {r.examples:>8}  {found}")
    return "\n".join(lines)
