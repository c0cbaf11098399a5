"""Held-out masked-LM perplexity of a pre-training run, with and without retrieval.

`evaluate_mlm(run, baseline)` masks the run's held-out chunks (never training queries; listed in
its split.json) with salient spans only (the run's masking config with the random spans turned
off and always [MASK]; seeded per chunk, so every model sees exactly the same masked inputs) and
reports masked-token perplexity exp(-Σ log p(y|x) / Σ |y|) for:

* "realm (retrieval)": the full model, p(y|x) = Σ_z p(z|x) p(y|z,x) over the top k (incl. null);
* "realm reader alone": the run's reader on ``[CLS] x [SEP]`` (BRENT's extracted reader);
* "mlm-only baseline": the baseline run's reader on ``[CLS] x [SEP]`` (BRENT's NorBERT2_50k row).

The query chunk itself is excluded from retrieval, as in training.

A causal-reader run (`reader_kind = "causal"`) is scored on the masked spans it generates: one
salient span per held-out chunk (chosen at random, seeded per chunk), perplexity per LM token of
the span, with the "reader alone" and baseline rows closed-book (no document). Each row also gives
the perplexity per span kind (link, auto, ner, date, name, number: where the span came from), so
the ratio to the closed-book row can be read per kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.precision import autocast_context, autocast_dtype
from ralm.realm.build import make_collator
from ralm.realm.causal_masking import SPAN_KINDS
from ralm.realm.masking import MaskingCollator
from ralm.realm.run import LoadedRun

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
    by_kind: dict[str, dict[str, float]] | None = None  # causal runs: {kind: {ppl, nll, tokens, spans}}

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
        if self.by_kind is not None:
            d["by_kind"] = self.by_kind
        return d


def _eval_collator(run: LoadedRun) -> MaskingCollator:
    cfg = replace(run.cfg.masking, strategy="salient", random_span_rate=0.0, replace_probs=(1.0, 0.0, 0.0))
    if run.model.causal:
        cfg = replace(cfg, salient_rate=0.0)  # one salient span a chunk: each query's NLL is one span's
    return make_collator(run.cfg, run.query_store, run.tokenizer, run.model, cfg, return_tensors="pt")


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
    kinds: dict[str, list[float]] = {}  # kind -> [nll, tokens, spans]
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
        if "lm_span_kind" in batch:
            for kind, nll_b, n_b in zip(
                batch["lm_span_kind"][:, 0].tolist(), lp.tolist(), nm.tolist(), strict=True
            ):
                acc = kinds.setdefault(SPAN_KINDS[kind], [0.0, 0, 0])
                acc[0] -= nll_b
                acc[1] += int(n_b)
                acc[2] += 1
    nll = total / max(n, 1)
    by_kind = None
    if kinds:
        by_kind = {
            k: {
                "ppl": math.exp(v[0] / max(v[1], 1)),
                "nll": v[0] / max(v[1], 1),
                "tokens": v[1],
                "spans": v[2],
            }
            for k, v in sorted(kinds.items())
        }
    return EvalRow(
        name="",
        ppl=math.exp(nll),
        nll=nll,
        tokens=n,
        examples=ex,
        answers_in_docs=found / max(n, 1) if how == "retrieval" else None,
        by_kind=by_kind,
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
    alone = "reader alone, closed-book" if run.model.causal else "reader alone"
    rows.append(replace(_score(run, ids, batch_size, "reader", run), name=f"{run.cfg.mode} {alone}"))
    if baseline is not None:
        if baseline.model.causal != run.model.causal:
            raise RalmError(
                f"{baseline.cfg.out}: its reader is {'causal' if baseline.model.causal else 'a masked LM'}, "
                f"{run.cfg.out}'s is not; compare runs with the same kind of reader"
            )
        name = "closed-book baseline" if baseline.model.causal else f"{baseline.cfg.mode}-only baseline"
        rows.append(replace(_score(run, ids, batch_size, "reader", baseline), name=name))
    return rows


def format_table(rows: list[EvalRow]) -> str:
    """A plain-text table: model, perplexity, NLL/token, masked tokens, examples."""
    w = max(len(r.name) for r in rows)
    head = f"{'model':<{w}}  {'ppl':>10}  {'nll/token':>9}  {'tokens':>7}  {'examples':>8}  {'answers in docs':>15}"
    lines = [head, "-" * len(head)]
    for r in rows:
        found = f"{r.answers_in_docs:>15.3f}" if r.answers_in_docs is not None else f"{'-':>15}"
        lines.append(f"{r.name:<{w}}  {r.ppl:>10.2f}  {r.nll:>9.4f}  {r.tokens:>7}  {r.examples:>8}  {found}")
    kinds = sorted({k for r in rows for k in (r.by_kind or {})})
    if kinds:
        lines += ["", "perplexity by span kind (spans): " + "  ".join(kinds)]
        for r in rows:
            bk = r.by_kind or {}
            cells = [f"{bk[k]['ppl']:.2f} ({bk[k]['spans']})" if k in bk else "-" for k in kinds]
            lines.append(f"{r.name:<{w}}  " + "  ".join(cells))
    return "\n".join(lines)
