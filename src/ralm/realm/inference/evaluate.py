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
the ratio to the closed-book row can be read per kind. A causal run also gets the content-token
perplexity: the span's own tokens only, leaving out the line break that ends it (which the reader
predicts almost for free, pulling every ratio toward 1); `ratio_interval` gives a paired bootstrap
95% interval (scipy.stats.bootstrap over the held-out spans) of the perplexity ratio of two rows,
`ratio_gain_interval` one of how much a ratio fell between two evaluations (step 0 and the end).
The JSON of `ralm evaluate-mlm` keeps each row's per-span scores (`per_example`) for that.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.models.precision import autocast_context, autocast_dtype
from ralm.realm.masking.causal import SPAN_KINDS
from ralm.realm.training.heldout import eval_collator, heldout_batches
from ralm.realm.training.run import LoadedRun

__all__ = [
    "EvalRow",
    "causal_span_scores",
    "content_tokens",
    "eval_collator",
    "evaluate_mlm",
    "format_table",
    "paired_ratio_interval",
    "ratio_gain_interval",
    "ratio_interval",
    "ratios",
]


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
    content_ppl: float | None = None  # causal runs: perplexity over the spans' content tokens
    content_tokens: int | None = None
    # per held-out example, in one order for every row: NLL and token counts (all, content)
    per_example: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

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
        if self.content_ppl is not None:
            d["content_ppl"] = self.content_ppl
            d["content_tokens"] = self.content_tokens
        if self.per_example:
            d["per_example"] = {k: v.tolist() for k, v in self.per_example.items()}
        return d


def content_tokens(batch) -> torch.Tensor:
    """(B,) the scored tokens of each query's spans that hold the spans' own characters (a causal
    batch's `lm_target_content` within `lm_target_labels`; all scored tokens when it has none)."""
    content = batch["lm_target_content"] if "lm_target_content" in batch else batch["lm_target_labels"]
    return (content * batch["lm_target_labels"]).sum(1)


def causal_span_scores(model, batch, search=None) -> dict[str, torch.Tensor]:
    """A causal model's log p(y|x) of each query's spans, over all scored tokens and over the content
    tokens alone: {"all": (B,), "content": (B,), "n_all": (B,), "n_content": (B,)}; with `search` the
    marginal over the retrieved documents and the null document (REALM), plus "found" (B,) (numpy:
    scored tokens of spans found in a retrieved chunk), else closed-book."""
    reader = model.reader
    B = batch["lm_query_ids"].shape[0]
    if search is None:
        log_p_z, rows = torch.zeros(B, 1), [[-1]] * B
    else:
        log_p_z, doc_ids = model.log_p_z(batch, search)
        rows = [[*r, -1] for r in doc_ids.tolist()] if model.null_doc != "none" else doc_ids.tolist()
    rr = reader.build_rows(batch, rows)
    lp = reader.token_log_probs(rr).float()
    lpz = log_p_z.float().to(lp.device)
    out = {
        "all": torch.logsumexp(lpz + rr.sums(lp), dim=1),
        "content": torch.logsumexp(lpz + rr.sums(lp, content_only=True), dim=1),
        "n_all": reader.n_target(batch),
        "n_content": content_tokens(batch),
    }
    if search is not None:
        out["found"] = reader.answers_found(batch, doc_ids)
    return out


@torch.inference_mode()
def _score(run: LoadedRun, ids: np.ndarray, batch_size: int, how: str, model_run: LoadedRun) -> EvalRow:
    m = model_run.model
    dev = model_run.device
    ac = autocast_dtype(dev, model_run.cfg.autocast, torch.float32)
    found = 0
    cols: dict[str, list] = {"nll": [], "n": [], "nll_content": [], "n_content": [], "kind": []}
    for batch in heldout_batches(run, ids, batch_size):
        batch = {k: v.to(dev) for k, v in batch.items()}
        with autocast_context(dev, ac):
            if m.causal:
                got = causal_span_scores(m, batch, model_run.searcher if how == "retrieval" else None)
                lp, nm, lpc, nc = got["all"], got["n_all"], got["content"], got["n_content"]
                found += int(got["found"].sum()) if "found" in got else 0
            else:
                out = m(batch, model_run.searcher) if how == "retrieval" else m.reader_only(batch)
                lp, nm = out.log_p_y, out.n_masked
                lpc, nc = lp, nm
                if out.answers_found is not None:
                    found += int(out.answers_found.sum())
        cols["nll"] += (-lp.float()).tolist()
        cols["n"] += nm.tolist()
        cols["nll_content"] += (-lpc.float()).tolist()
        cols["n_content"] += nc.tolist()
        cols["kind"] += batch["lm_span_kind"][:, 0].tolist() if "lm_span_kind" in batch else [-1] * len(nm)
    per = {k: np.asarray(v, dtype=np.float64 if k.startswith("nll") else np.int64) for k, v in cols.items()}
    n = int(per["n"].sum())
    nll = float(per["nll"].sum()) / max(n, 1)
    by_kind = None
    if m.causal:
        by_kind = {}
        for code in sorted(set(per["kind"].tolist()) - {-1}):
            sel = per["kind"] == code
            k_nll, k_n = float(per["nll"][sel].sum()), int(per["n"][sel].sum())
            by_kind[SPAN_KINDS[code]] = {
                "ppl": math.exp(k_nll / max(k_n, 1)),
                "nll": k_nll / max(k_n, 1),
                "tokens": k_n,
                "spans": int(sel.sum()),
            }
    nc = int(per["n_content"].sum())
    content_nll = float(per["nll_content"].sum()) / max(nc, 1)
    return EvalRow(
        name="",
        ppl=math.exp(nll),
        nll=nll,
        tokens=n,
        examples=len(per["n"]),
        answers_in_docs=found / max(n, 1) if how == "retrieval" else None,
        by_kind=by_kind,
        content_ppl=math.exp(content_nll) if m.causal else None,
        content_tokens=nc if m.causal else None,
        per_example=per,
    )


def ratio_interval(
    a: EvalRow, b: EvalRow, *, content: bool = False, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """(ratio, low, high): perplexity of row `a` over row `b` on the same held-out examples, with a
    paired bootstrap 95% interval (`paired_ratio_interval`)."""
    key, nkey = ("nll_content", "n_content") if content else ("nll", "n")
    if a.per_example[key].shape != b.per_example[key].shape or not np.array_equal(
        a.per_example[nkey], b.per_example[nkey]
    ):
        raise RalmError("ratio_interval: the two rows were not scored on the same examples")
    return paired_ratio_interval(
        a.per_example[key], b.per_example[key], a.per_example[nkey], resamples=resamples, seed=seed
    )


def paired_ratio_interval(
    nll_a: np.ndarray, nll_b: np.ndarray, tokens: np.ndarray, *, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """(ratio, low, high): the perplexity ratio exp((Σ nll_a - Σ nll_b) / Σ tokens) of two models on
    the same examples (each example's summed NLL and token count, (N,) arrays), with a paired
    percentile bootstrap 95% interval (scipy.stats.bootstrap, examples resampled together).

    Example: nll_a [2, 2], nll_b [3, 3], tokens [1, 1] -> ratio exp(-1) = 0.368 (and an interval of
    that one value: every resample has the same difference).
    """
    xa, xb = np.asarray(nll_a, dtype=np.float64), np.asarray(nll_b, dtype=np.float64)
    t = np.asarray(tokens, dtype=np.float64)

    def stat(x, y, n, axis=-1):
        return np.exp((x.sum(axis) - y.sum(axis)) / np.maximum(n.sum(axis), 1))

    ratio = float(stat(xa, xb, t))
    if len(t) < 2 or np.allclose(xa - xb, (xa - xb)[0] * t / max(t[0], 1)):
        return ratio, ratio, ratio  # no spread to resample (or a single example)
    return (ratio, *_paired_bootstrap((xa, xb, t), stat, resamples, seed))


def _paired_bootstrap(cols: tuple[np.ndarray, ...], stat, resamples: int, seed: int) -> tuple[float, float]:
    """(low, high): the percentile bootstrap 95% interval of `stat` over examples, the (N,) columns
    `cols` resampled together (scipy.stats.bootstrap; `stat(*cols, axis)` vectorised)."""
    from scipy.stats import bootstrap

    res = bootstrap(
        cols,
        stat,
        paired=True,
        vectorized=True,
        n_resamples=resamples,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def ratio_gain_interval(
    before: tuple[np.ndarray, np.ndarray],
    after: tuple[np.ndarray, np.ndarray],
    tokens: np.ndarray,
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(gain, low, high): how much a perplexity ratio fell between two evaluations of the same held-out
    examples, ratio(before) - ratio(after), each ratio exp((Σ nll_a - Σ nll_b) / Σ tokens) as in
    `paired_ratio_interval`; `before` and `after` are (nll_a, nll_b) pairs of (N,) arrays (summed NLL
    per example of the model and of its baseline), `tokens` the examples' (N,) token counts. The 95%
    interval is a percentile bootstrap over the examples, the four scores resampled together.

    Example: before ([2, 2], [3, 3]), after ([2, 2], [2, 2]), tokens [1, 1] -> gain exp(-1) - 1 = -0.632.
    """
    cols = [np.asarray(x, dtype=np.float64) for x in (*before, *after, tokens)]
    if len({c.shape for c in cols}) != 1:
        raise RalmError("ratio_gain_interval: the evaluations were not scored on the same examples")

    def stat(b_a, b_b, a_a, a_b, n, axis=-1):
        t = np.maximum(n.sum(axis), 1)
        return np.exp((b_a.sum(axis) - b_b.sum(axis)) / t) - np.exp((a_a.sum(axis) - a_b.sum(axis)) / t)

    gain = float(stat(*cols))
    if len(cols[-1]) < 2:
        return gain, gain, gain
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns, and returns nan, when every resample is equal
        low, high = _paired_bootstrap(tuple(cols), stat, resamples, seed)
    if not (math.isfinite(low) and math.isfinite(high)):  # no spread to resample
        return gain, gain, gain
    return gain, low, high


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


def ratios(rows: list[EvalRow]) -> list[dict]:
    """Each row's perplexity over the last row's (the baseline when there is one), all tokens and
    content tokens, with paired bootstrap 95% intervals (`ratio_interval`)."""
    base = rows[-1]
    out = []
    for r in rows[:-1]:
        d = {"row": r.name, "over": base.name}
        d["ratio"], d["ratio_low"], d["ratio_high"] = ratio_interval(r, base)
        if r.content_ppl is not None and base.content_ppl is not None:
            d["content_ratio"], d["content_ratio_low"], d["content_ratio_high"] = ratio_interval(
                r, base, content=True
            )
        out.append(d)
    return out


def format_table(rows: list[EvalRow]) -> str:
    """A plain-text table: model, perplexity (and content-token perplexity for a causal run), NLL/token,
    masked tokens, examples; then each row's ratio to the last with its 95% interval."""
    w = max(len(r.name) for r in rows)
    content = any(r.content_ppl is not None for r in rows)
    ch = f"  {'content ppl':>11}" if content else ""
    head = f"{'model':<{w}}  {'ppl':>10}{ch}  {'nll/token':>9}  {'tokens':>7}  {'examples':>8}  {'answers in docs':>15}"
    lines = [head, "-" * len(head)]
    for r in rows:
        found = f"{r.answers_in_docs:>15.3f}" if r.answers_in_docs is not None else f"{'-':>15}"
        cc = (f"  {r.content_ppl:>11.2f}" if r.content_ppl is not None else f"  {'-':>11}") if content else ""
        lines.append(
            f"{r.name:<{w}}  {r.ppl:>10.2f}{cc}  {r.nll:>9.4f}  {r.tokens:>7}  {r.examples:>8}  {found}"
        )
    kinds = sorted({k for r in rows for k in (r.by_kind or {})})
    if kinds:
        lines += ["", "perplexity by span kind (spans): " + "  ".join(kinds)]
        for r in rows:
            bk = r.by_kind or {}
            cells = [f"{bk[k]['ppl']:.2f} ({bk[k]['spans']})" if k in bk else "-" for k in kinds]
            lines.append(f"{r.name:<{w}}  " + "  ".join(cells))
    if len(rows) > 1 and all(r.per_example for r in rows):
        lines += ["", f"perplexity ratio to {rows[-1].name} (95% bootstrap interval)"]
        for d in ratios(rows):
            text = f"{d['row']:<{w}}  {d['ratio']:.3f} [{d['ratio_low']:.3f}, {d['ratio_high']:.3f}]"
            if "content_ratio" in d:
                text += (
                    f"   content tokens {d['content_ratio']:.3f} "
                    f"[{d['content_ratio_low']:.3f}, {d['content_ratio_high']:.3f}]"
                )
            lines.append(text)
    return "\n".join(lines)
