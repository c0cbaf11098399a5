"""An eval-only diagnosis of a causal REALM run: how much of the gap to the oracle each lever can close.

For every held-out chunk, masked as `ralm.realm.inference.evaluate` masks it (one salient span), it records:

* the candidates of three sources, `depth` deep (default 20): dense (the run's index), BM25 over the
  chunks as the towers' tokenizer decodes them (the run's `bm25_lang`), and hybrid (the two fused
  by reciprocal rank fusion, as `candidates = "hybrid"` makes them); and whether the span's text
  occurs (case-folded) in each candidate;
* for the run's own candidate source, the top `reader_depth` candidates (default 8) and the null
  document: each one's log p(z|x) under the run (towers, learned scale, null document) and the
  reader's log p(y|x,z), over all scored tokens and over the span's content tokens;
* the closed-book log p(y|x): the baseline run's reader when one is given, else the run's own
  reader without a document.

From those it reports (`summarize`), for all and for content tokens, the span perplexity ratio to
closed-book, with a paired bootstrap 95% interval, under: the run's p(z|x) over its k documents;
a uniform p(z|x); the score scale multiplied by 0.5, 2, 4 and 8; and best-of-K (the oracle: the
one document the reader likes best). Each at K = the run's k and at K = reader_depth + 1 (more
candidates). Also answers-in-candidates at depths 3, 8 and 20 per source, the entropy of
p(z|x) over ln K, the prior and posterior mass of the null document, and whether the retriever
ranks the chunks as the reader values them (`score_utility_agreement`: the per-span Spearman
correlation of log p(z|x) with the reader's log p(y|x,z) over the top `reader_depth` chunks, and
how often the highest-scored chunk is the reader's best), and how much each query tells the
retriever (`query_signal`: the share of spans whose chunks differ in holding the span, the reader's
preference in nats for the chunk that holds it, and that chunk's rank under p(z|x)).

Left out: masked-LM readers (their "span" is a set of word pieces; `evaluate-mlm` scores them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.models.precision import autocast_context, autocast_dtype
from ralm.realm.inference.evaluate import causal_span_scores, paired_ratio_interval
from ralm.realm.modeling.answer_target import span_in_chunk
from ralm.realm.training.heldout import heldout_batches
from ralm.realm.training.run import LoadedRun

SOURCES = ("dense", "bm25", "hybrid")
DEPTHS = (3, 8, 20)
SCALES = (0.5, 2.0, 4.0, 8.0)

__all__ = [
    "DEPTHS",
    "SCALES",
    "SOURCES",
    "Diagnosis",
    "diagnose",
    "format_diagnosis",
    "span_in_chunk",
    "summarize",
]


@dataclass
class Diagnosis:
    """Per-query records (`records`, JSON-ready) and their summary (`summary`)."""

    records: list[dict[str, Any]]
    summary: dict[str, Any]

    def save(self, out: str | Path) -> Path:
        """RUN/diagnose.json (the summary) and diagnose_queries.jsonl (the records) beside it."""
        from ralm.atomic import write_json_atomic, write_text_atomic

        out = Path(out)
        write_text_atomic(
            out.with_name(out.stem + "_queries.jsonl"), "".join(json.dumps(r) + "\n" for r in self.records)
        )
        return write_json_atomic(out, self.summary)


def _sources(run: LoadedRun, depth: int):
    """(bm25 search, hybrid search) over the run's knowledge corpus at `depth`."""
    from ralm.realm.modeling.candidates import HybridCandidates, bm25_for_docs

    model = run.model
    bm25 = bm25_for_docs(model.docs, lang=run.cfg.bm25_lang)
    tok = model.docs.inputs.tower.tokenizer
    hybrid = HybridCandidates(run.refresher.search, bm25, tok, depth=max(depth, run.cfg.candidate_depth))
    return bm25, hybrid


@torch.inference_mode()
def diagnose(
    run: LoadedRun,
    baseline: LoadedRun | None = None,
    *,
    n: int | None = None,
    depth: int = 20,
    reader_depth: int = 8,
    batch_size: int = 4,
    ids: Sequence[int] | None = None,
) -> Diagnosis:
    """The diagnosis of `run` on its held-out chunks (the first `n`), see the module docstring.

    `ids`: score these chunk ids instead (masked as the held-out ones are, one seeded mask per chunk
    id), e.g. training chunks whose records `ralm.realm.training.cached_distill` learns from."""
    model = run.model
    if not model.causal or not model.retrieval:
        raise RalmError(f"{run.cfg.out}: --diagnose is for a REALM run with a causal reader")
    if reader_depth < model.n_retrieved:
        raise RalmError(
            f"reader_depth={reader_depth}: at least the run's {model.n_retrieved} retrieved chunks"
        )
    if depth < max(DEPTHS[:-1]) or depth < reader_depth:
        raise RalmError(f"depth={depth}: at least {max(max(DEPTHS[:-1]), reader_depth)}")
    if n_chunks := len(run.store):
        depth = min(depth, n_chunks - 1)
        reader_depth = min(reader_depth, depth)
    ids = np.asarray(run.heldout_ids if ids is None else ids, dtype=np.int64)
    ids = ids if n is None else ids[:n]
    dev = run.device
    ac = autocast_dtype(dev, run.cfg.autocast, torch.float32)
    bm25, hybrid = _sources(run, depth)
    kr = model.n_retrieved
    has_null = model.null_doc != "none"
    records: list[dict[str, Any]] = []
    for batch in heldout_batches(run, ids, batch_size):
        batch = {k: v.to(dev) for k, v in batch.items()}
        B = batch["lm_query_ids"].shape[0]
        with autocast_context(dev, ac):
            q = model.embed_queries(batch)
            qn, src = q.float().cpu().numpy(), batch["source_ids"].cpu().numpy()
            texts = hybrid.query_texts(batch["input_ids"].cpu().numpy())
            cands = {
                "dense": np.asarray(run.search(qn, src, depth), dtype=np.int64),
                "bm25": _bm25(bm25, texts, run.trivial(src), depth),
                "hybrid": np.asarray(
                    hybrid(qn, run.trivial(src), depth, query_ids=batch["input_ids"].cpu().numpy())
                ),
            }
            own = cands["hybrid" if run.cfg.candidates == "hybrid" else "dense"][:, :reader_depth]
            lpz_k = model.prior_over(q, own[:, :kr]).float()  # the run's own p(z|x) over its k documents
            lpz_r = model.prior_over(q, own).float()  # over reader_depth chunks (+ null)
            rows = [[*r, -1] if has_null else list(r) for r in own.tolist()]
            rr = model.reader.build_rows(batch, rows)
            lp = model.reader.token_log_probs(rr).float()
            lp_all, lp_content = rr.sums(lp).cpu(), rr.sums(lp, content_only=True).cpu()
            closed_model = baseline.model if baseline is not None else model
            closed = causal_span_scores(closed_model, batch)
        spans = model.reader.span_texts(batch)
        kinds = batch["lm_span_kind"][:, 0].tolist()
        for b in range(B):
            span = spans[b][0] if spans[b] else ""
            rec: dict[str, Any] = {
                "chunk": int(src[b]),
                "span": span,
                "kind": int(kinds[b]),
                "n_all": int(closed["n_all"][b]),
                "n_content": int(closed["n_content"][b]),
                "closed_all": float(closed["all"][b]),
                "closed_content": float(closed["content"][b]),
                "candidates": {s: cands[s][b].tolist() for s in SOURCES},
                "has_answer": {
                    s: [span_in_chunk(model.reader, int(c), span) for c in cands[s][b].tolist()]
                    for s in SOURCES
                },
                "reader_docs": rows[b],
                "lp_all": lp_all[b].tolist(),
                "lp_content": lp_content[b].tolist(),
                "log_p_z_k": lpz_k[b].cpu().tolist(),
                "log_p_z_r": lpz_r[b].cpu().tolist(),
            }
            records.append(rec)
    source = "hybrid" if run.cfg.candidates == "hybrid" else "dense"
    summary = summarize(records, k=kr, has_null=has_null, source=source)
    summary.update(
        run=str(run.cfg.out),
        checkpoint=str(run.checkpoint.name),
        step=int(run.state.get("step", 0)),
        baseline=None if baseline is None else str(baseline.cfg.out),
        candidates=run.cfg.candidates,
        depth=depth,
        reader_depth=reader_depth,
    )
    return Diagnosis(records, summary)


def _bm25(bm25, texts: Sequence[str], exclude: np.ndarray, depth: int) -> np.ndarray:
    """(B, depth) BM25 candidates of the visible query words, the chunks `exclude` (B,) left out (-1:
    none; `LoadedRun.trivial`); a query with no visible word gets -1s."""
    out = np.full((len(texts), depth), -1, dtype=np.int64)
    live = [i for i, t in enumerate(texts) if t.strip()]
    if live:
        res = bm25.search_text(
            [texts[i] for i in live],
            depth,
            exclude_ids=[int(exclude[i]) if exclude[i] >= 0 else None for i in live],
        )
        for i, row in zip(live, res.ids, strict=True):
            out[i, : len(row)] = row
    return out


# ----------------------------------------------------------------------------- the summary
def _nll(lpz: np.ndarray, lp: np.ndarray) -> np.ndarray:
    """(N,) -log Σ_z p(z|x) p(y|z,x) from (N, K) log p(z|x) and log p(y|x,z)."""
    x = lpz + lp
    m = x.max(1, keepdims=True)
    return -(m[:, 0] + np.log(np.exp(x - m).sum(1)))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(1, keepdims=True))


def _ratio(nll: np.ndarray, closed: np.ndarray, tokens: np.ndarray) -> dict[str, float]:
    r, lo, hi = paired_ratio_interval(nll, closed, tokens)
    return {"ratio": r, "low": lo, "high": hi}


def score_utility_agreement(
    log_p_z: np.ndarray, log_p_y: np.ndarray, *, resamples: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Does the retriever rank a span's chunks as the reader values them? From (N, R) log p(z|x) and
    the reader's (N, R) log p(y|x,z) over the same R chunks (the null document left out):

    * `spearman`: the mean over spans of the Spearman rank correlation of the two rows, with a
      percentile bootstrap 95% interval (`spearman_low`, `spearman_high`) over the spans; a span
      whose scores or log-likelihoods are all equal has no ranking and is left out (`spans` counts
      the rest). 1 means the scores order the chunks exactly by their use to the reader; 0, no
      relation: no score scale can then make p(z|x) better than uniform.
    * `top_agreement`: the share of spans whose highest-scored chunk is the reader's best one, beside
      `top_chance` = 1 / R.

    Example: scores [0, -1, -2] twice, log p(y|x,z) [-1, -2, -3] and [-3, -2, -1] -> spearman 0 (the
    mean of 1 and -1), top_agreement 0.5, top_chance 1/3.
    """
    from scipy.stats import bootstrap, rankdata

    s, u = np.asarray(log_p_z, dtype=np.float64), np.asarray(log_p_y, dtype=np.float64)
    if s.shape != u.shape or s.ndim != 2 or s.shape[1] < 2:
        raise RalmError(f"score_utility_agreement: need two (N, R>=2) arrays, got {s.shape} and {u.shape}")
    rs, ru = rankdata(s, axis=1), rankdata(u, axis=1)
    rs, ru = rs - rs.mean(1, keepdims=True), ru - ru.mean(1, keepdims=True)
    den = np.sqrt((rs**2).sum(1) * (ru**2).sum(1))
    live = den > 0
    rho = (rs * ru).sum(1)[live] / den[live]
    out = {
        "top_agreement": float((s.argmax(1) == u.argmax(1)).mean()),
        "top_chance": 1.0 / s.shape[1],
        "spans": int(live.sum()),
    }
    if len(rho) == 0:
        return {**out, "spearman": float("nan"), "spearman_low": float("nan"), "spearman_high": float("nan")}
    mean = float(rho.mean())
    if len(rho) < 2 or np.all(rho == rho[0]):
        return {**out, "spearman": mean, "spearman_low": mean, "spearman_high": mean}
    ci = bootstrap(
        (rho,), np.mean, n_resamples=resamples, method="percentile", rng=np.random.default_rng(seed)
    ).confidence_interval
    return {**out, "spearman": mean, "spearman_low": float(ci.low), "spearman_high": float(ci.high)}


def records_score_utility(records: Sequence[dict[str, Any]], *, has_null: bool) -> dict[str, float]:
    """`score_utility_agreement` of per-span diagnosis records: the prior and the content-token
    log-likelihood of the reader's chunks (each record's `log_p_z_r` and `lp_content`, the null
    document, last when `has_null`, left out)."""
    R = len(records[0]["lp_all"]) - int(has_null)  # reader_depth
    return score_utility_agreement(
        np.array([r["log_p_z_r"][:R] for r in records]), np.array([r["lp_content"][:R] for r in records])
    )


def query_signal(
    records: Sequence[dict[str, Any]], *, has_null: bool, source: str = "dense"
) -> dict[str, float]:
    """How much each query tells the retriever, from diagnosis records (the reader's top R chunks of
    the run's candidate `source`, the null document left out):

    * `mixed`: the share of spans whose R chunks hold the span in some and not in others (the only
      spans whose marginal ranks the chunks by the span: the rest give the towers no direction);
    * `signal_nats`: over the mixed spans, the mean of the best holding chunk's content log p(y|x,z)
      minus the mean over the chunks that do not hold it (how much the reader prefers the right one);
    * `right_rank`: over the spans with a holding chunk, the mean rank (1 = first) under p(z|x) of the
      holding chunk the prior ranks highest, and `right_top`, the share where it is first.

    Example: one span, lp_content [-1, -5, -3] over 3 chunks of which the first holds it, log p(z|x)
    [-2, -1, -3] -> mixed 1, signal_nats -1 - (-4) = 3, right_rank 2, right_top 0.
    """
    R = len(records[0]["lp_content"]) - int(has_null)
    gaps, ranks = [], []
    for r in records:
        holds = np.array(r["has_answer"][source][:R], dtype=bool)
        lp = np.array(r["lp_content"][:R])
        lpz = np.array(r["log_p_z_r"][:R])
        if holds.any():
            order = np.argsort(-lpz, kind="stable")
            ranks.append(int(np.flatnonzero(holds[order])[0]) + 1)
            if not holds.all():
                gaps.append(float(lp[holds].max() - lp[~holds].mean()))
    return {
        "mixed": len(gaps) / len(records),
        "signal_nats": float(np.mean(gaps)) if gaps else float("nan"),
        "with_right": len(ranks) / len(records),
        "right_rank": float(np.mean(ranks)) if ranks else float("nan"),
        "right_top": float(np.mean(np.array(ranks) == 1)) if ranks else float("nan"),
    }


def summarize(
    records: Sequence[dict[str, Any]], *, k: int, has_null: bool = True, source: str = "dense"
) -> dict[str, Any]:
    """The report of `diagnose` from its per-query records (see the module docstring); `k` retrieved
    chunks a query in the run (its k minus the null document); `source` the run's candidates."""
    if not records:
        raise RalmError("no held-out query to diagnose")
    out: dict[str, Any] = {"queries": len(records), "k": k + int(has_null)}
    found: dict[str, dict[str, float]] = {}
    for s in SOURCES:
        hits = np.array([r["has_answer"][s] for r in records], dtype=bool)  # (N, depth)
        found[s] = {str(d): float(hits[:, :d].any(1).mean()) for d in DEPTHS if d <= hits.shape[1]}
    out["answers_in_candidates"] = found
    R = len(records[0]["lp_all"]) - int(has_null)  # reader_depth
    cols_k = [*range(k), *([R] if has_null else [])]  # the run's k documents: top k chunks + null
    cols_r = list(range(R + int(has_null)))
    lpz_k = np.array([r["log_p_z_k"] for r in records])
    lpz_r = np.array([r["log_p_z_r"] for r in records])
    ratios: dict[str, Any] = {}
    for part in ("all", "content"):
        lp = np.array([r[f"lp_{part}"] for r in records])
        closed = -np.array([r[f"closed_{part}"] for r in records])
        tokens = np.array([r[f"n_{part}"] for r in records], dtype=np.float64)
        block: dict[str, Any] = {"closed_book_ppl": float(math.exp(closed.sum() / max(tokens.sum(), 1)))}
        for name, cols, lpz in (("k", cols_k, lpz_k), ("R", cols_r, lpz_r)):
            sub = lp[:, cols]
            K = len(cols)
            rows = {
                "run": _ratio(_nll(lpz, sub), closed, tokens),
                "uniform": _ratio(_nll(np.full_like(sub, -math.log(K)), sub), closed, tokens),
                "oracle": _ratio(-sub.max(1), closed, tokens),
            }
            for c in SCALES:
                rows[f"scale_x{c:g}"] = _ratio(_nll(_log_softmax(c * lpz), sub), closed, tokens)
            block[f"K={K}" if name == "R" else "run_k"] = rows
        ratios[part] = block
    out["ratios"] = ratios
    out["score_utility"] = records_score_utility(records, has_null=has_null)
    out["query_signal"] = query_signal(records, has_null=has_null, source=source)
    p = np.exp(lpz_k)
    out["entropy_ratio"] = float((-(p * lpz_k).sum(1) / math.log(lpz_k.shape[1])).mean())
    if has_null:
        out["null_mass"] = float(p[:, -1].mean())
        lp_k = np.array([r["lp_all"] for r in records])[:, cols_k]
        post = np.exp(_log_softmax(lpz_k + lp_k))
        out["null_posterior"] = float(post[:, -1].mean())
    return out


def format_diagnosis(summary: dict[str, Any]) -> str:
    """The summary as plain text: answers in candidates, then the ratio table per token set."""
    lines = [
        f"diagnosis of {summary.get('run', '?')} at step {summary.get('step', '?')}: "
        f"{summary['queries']} held-out spans, k = {summary['k']}"
    ]
    lines.append("answers in candidates (depth: " + ", ".join(map(str, DEPTHS)) + ")")
    for s, row in summary["answers_in_candidates"].items():
        lines.append(f"  {s:<7} " + "  ".join(f"@{d} {v:.3f}" for d, v in row.items()))
    for part, block in summary["ratios"].items():
        lines.append(
            f"span perplexity ratio to closed-book, {part} tokens "
            f"(closed-book ppl {block['closed_book_ppl']:.2f}); 95% interval"
        )
        for kname, rows in block.items():
            if kname == "closed_book_ppl":
                continue
            cells = [f"{name} {v['ratio']:.3f} [{v['low']:.3f}, {v['high']:.3f}]" for name, v in rows.items()]
            lines.append(f"  {kname:<6} " + "; ".join(cells))
    extra = [f"entropy/ln K {summary['entropy_ratio']:.3f}"]
    if "null_mass" in summary:
        extra += [f"null mass {summary['null_mass']:.4f}", f"null posterior {summary['null_posterior']:.4f}"]
    lines.append("  ".join(extra))
    su = summary.get("score_utility")
    if su:
        lines.append(
            f"scores vs the reader's log p(y|x,z) over {summary.get('reader_depth', '?')} chunks: Spearman "
            f"{su['spearman']:.3f} [{su['spearman_low']:.3f}, {su['spearman_high']:.3f}] ({su['spans']} spans); "
            f"top chunk is the reader's best {su['top_agreement']:.3f} (chance {su['top_chance']:.3f})"
        )
    qs = summary.get("query_signal")
    if qs:
        lines.append(
            f"query signal: {qs['mixed']:.3f} of spans have chunks that hold the span and chunks that do not; "
            f"the reader prefers the holding one by {qs['signal_nats']:.2f} nats; {qs['with_right']:.3f} have "
            f"a holding chunk, ranked {qs['right_rank']:.2f} on average under p(z|x) (first: {qs['right_top']:.3f})"
        )
    return "\n".join(lines)
