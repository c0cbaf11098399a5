"""The report stage of realm_learns.py: benchmarks/results/realm_learns.json and .md from the work folder.

Reads, where they exist: the step-0 diagnoses (LANG-diag0/diagnose_initial.json), each arm's
evaluations at step 0, at the intermediate checkpoints and at the end (LANG-ARM/eval_mlm*.json, with
bootstrap intervals), its diagnosis at the end, its metrics.jsonl (entropy, null mass, answers in
documents, score scale over steps), the compute-matched closed-book run, the towers' NorQuAD-open
recall, the speed stage and the GPU pack's REALM stages. Missing parts are listed under "not_run".
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from benchmarks.common import RESULTS, ROOT, write_result
from benchmarks.realm.realm_learns_downstream import downstream_lines, downstream_record

ARMS = (
    "today",
    "scale",
    "null",
    "span",
    "cands",
    "topm",
    "query",
    "lr",
    "distill",
    "all",
    "all_packed",
    "answer",
    "answer_warm",
    "answer_queries",
    "answer_warm_zero",
    "all_answer",
)
TARGETS = {
    "nb_ratio_content_end": "<= 0.5",
    "nb_ratio_content_end_compute_matched": "<= 0.6",
    "nb_ratio_gain_from_training": ">= 0.10",
    "nb_towers_recall@5_after": ">= nb_towers_recall@5_before + 0.02",
    "nb_answers_in_candidates_gain": ">= 0.05",
    "nb_null_mass_end": "between 0.02 and 0.5",
    "nb_entropy_ratio_end": "<= 0.7",
    "en_ratio_content_end": "<= 0.6",
    "en_ratio_gain_from_training": ">= 0.05",
    "step_queries_per_s_over_before": ">= 2",
    "nb_downstream_f1_realm_minus_plain": ">= 0",
}


# the warm stage's figures that go into the metrics, at step 0 and at the end
WARM_METRICS = (
    "content_ratio_k_run",
    "content_ratio_K9_run",
    "answers_in_dense@3",
    "answers_in_dense@8",
    "entropy_ratio",
    "score_utility_spearman",
)


def formatted_work(work: Path, fresh: bool = False) -> Path:
    """Where realm_learns.py's `formatted` stage keeps its runs: the sibling folder WORK-fmt, or
    WORK-fmt-fresh for the runs that read the queries after those the format run saw."""
    return work.with_name(work.name + ("-fmt-fresh" if fresh else "-fmt"))


def _read(p: Path) -> dict | None:
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def _ratio(ev: dict, row: str, content: bool) -> tuple[float, float, float] | None:
    """(ratio, low, high) of `row` over the closed-book row in an evaluate-mlm JSON."""
    for d in ev.get("ratios", []):
        if d["row"] == row:
            key = "content_ratio" if content else "ratio"
            if key in d:
                return d[key], d[f"{key}_low"], d[f"{key}_high"]
    return None


def _metrics_rows(run: Path) -> list[dict]:
    f = run / "metrics.jsonl"
    if not f.is_file():
        return []
    rows = []
    for line in f.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _finite(rows: list[dict], key: str) -> list[float]:
    """The finite numbers logged under `key`, in step order."""
    return [r[key] for r in rows if key in r and isinstance(r[key], int | float) and math.isfinite(r[key])]


def _tail_mean(rows: list[dict], key: str, n: int = 20) -> float | None:
    vals = _finite(rows, key)[-n:]
    return sum(vals) / len(vals) if vals else None


def _head_mean(rows: list[dict], key: str, n: int = 20) -> float | None:
    vals = _finite(rows, key)[:n]
    return sum(vals) / len(vals) if vals else None


def score_utility(diag: dict, queries: Path) -> dict | None:
    """The diagnosis's agreement of the retriever's ranking with the reader's (Spearman of log p(z|x)
    and log p(y|x,z) over the reader's chunks, `ralm.realm.inference.diagnose.score_utility_agreement`): from
    the summary when it has it, else computed from its per-span records (diagnoses written before
    the summary carried it)."""
    if "score_utility" in diag:
        return diag["score_utility"]
    if not queries.is_file():
        return None
    from ralm.realm.inference.diagnose import records_score_utility

    recs = span_records(queries)
    return records_score_utility(recs, has_null=recs[0]["reader_docs"][-1] == -1)  # the null document is last


FORMATTED_METRICS = (
    "ratio_content_step0",
    "ratio_content_end",
    "ratio_content_end_low",
    "ratio_content_end_high",
    "gain_from_training",
    "gain_from_training_low",
    "gain_from_training_high",
    "answers_in_docs_step0",
    "answers_in_docs_end",
)


def end_metrics(rec: dict, d0: dict | None, arm: str, run: Path) -> dict[str, float]:
    """The end-of-training measures of an arm (`arm_record`): null mass, entropy ratio and score-utility
    Spearman of its end diagnosis, answers in its candidates against the step-0 diagnosis `d0` (the
    same towers and spans; hybrid candidates except for `today`), the towers' NorQuAD-open recall."""
    out: dict[str, float] = {}
    diag = rec.get("diagnosis_end") or {}
    if diag:
        out["null_mass_end"] = diag.get("null_mass", math.nan)
        out["entropy_ratio_end"] = diag.get("entropy_ratio", math.nan)
        if diag.get("score_utility"):
            out["score_utility_spearman_end"] = diag["score_utility"]["spearman"]
        src = "hybrid" if arm != "today" else "dense"
        if d0 is not None:
            for depth in ("3", "8"):
                out[f"answers_in_candidates_gain@{depth}"] = (
                    diag["answers_in_candidates"][src][depth] - d0["answers_in_candidates"][src][depth]
                )
            out["answers_in_candidates_gain"] = out["answers_in_candidates_gain@8"]
    towers = _read(run / "towers.json")
    if towers is not None:
        for when in ("before", "after"):
            for k, v in towers[when].items():
                out[f"towers_{k}_{when}"] = v
    return out


def gain_interval(start: dict, end: dict) -> tuple[float, float, float] | None:
    """(gain, low, high) of the content-token ratio to closed-book from step 0 to the end, paired over
    the held-out spans (`ralm.realm.inference.evaluate.ratio_gain_interval`); None when either evaluation was
    written without per-span scores."""
    from ralm.realm.inference.evaluate import ratio_gain_interval

    def cols(ev: dict) -> tuple | None:
        by = {r["name"]: r.get("per_example") for r in ev.get("rows", [])}
        realm, closed = by.get("realm (retrieval)"), by.get("closed-book baseline")
        if not realm or not closed:
            return None
        return realm["nll_content"], closed["nll_content"], realm["n_content"]

    a, b = cols(start), cols(end)
    if a is None or b is None or a[2] != b[2]:
        return None
    return ratio_gain_interval(a[:2], b[:2], a[2])


def arm_record(work: Path, lang: str, arm: str) -> dict | None:
    """Everything measured of one arm: ratios at step 0 and at the end (all and content tokens, with
    intervals), the curves, the end-of-training diagnosis and the last steps' retrieval numbers."""
    run = work / f"{lang}-{arm}"
    end, start = _read(run / "eval_mlm.json"), _read(run / "eval_mlm_initial.json")
    if end is None:
        return None
    rec: dict = {"steps": end.get("step")}
    for when, ev in (("end", end), ("step0", start)):
        if ev is None:
            continue
        for part, content in (("all", False), ("content", True)):
            r = _ratio(ev, "realm (retrieval)", content)
            if r is not None:
                (
                    rec[f"ratio_{part}_{when}"],
                    rec[f"ratio_{part}_{when}_low"],
                    rec[f"ratio_{part}_{when}_high"],
                ) = r
    comp = _read(run / "eval_mlm_compute.json")
    if comp is not None:
        r = _ratio(comp, "realm (retrieval)", True)
        if r is not None:
            (
                rec["ratio_content_end_compute_matched"],
                rec["ratio_content_end_compute_matched_low"],
                rec["ratio_content_end_compute_matched_high"],
            ) = r
    if "ratio_content_step0" in rec and "ratio_content_end" in rec:
        rec["gain_from_training"] = rec["ratio_content_step0"] - rec["ratio_content_end"]
        interval = gain_interval(start, end)
        if interval is not None:
            _, rec["gain_from_training_low"], rec["gain_from_training_high"] = interval
    realm_row = next((r for r in end["rows"] if r["name"] == "realm (retrieval)"), None)
    if realm_row and realm_row.get("answers_in_docs") is not None:
        rec["answers_in_docs_end"] = realm_row["answers_in_docs"]
    start_row = next((r for r in (start or {}).get("rows", []) if r["name"] == "realm (retrieval)"), None)
    if start_row and start_row.get("answers_in_docs") is not None:
        rec["answers_in_docs_step0"] = start_row["answers_in_docs"]
    diag = _read(run / "diagnose.json")
    if diag is not None:
        rec["diagnosis_end"] = {
            "answers_in_candidates": diag["answers_in_candidates"],
            "entropy_ratio": diag["entropy_ratio"],
            "null_mass": diag.get("null_mass"),
            "null_posterior": diag.get("null_posterior"),
            "content_ratios_run_k": {k: v["ratio"] for k, v in diag["ratios"]["content"]["run_k"].items()},
            "score_utility": score_utility(diag, run / "diagnose_queries.jsonl"),
            "distinct_dense_top3": distinct_top(run / "diagnose_queries.jsonl"),
        }
    rows = _metrics_rows(run)
    for key in (
        "entropy",
        "null_mass",
        "answers_in_docs",
        "score_scale",
        "null_logit",
        "distill_kl",
        "answer_kl",
        "answer_live",
        "step_seconds",
    ):
        v = _tail_mean(rows, key)
        if v is not None:
            rec[f"train_{key}_last20"] = v
    for key in ("distill_kl", "answer_kl", "score_scale", "answers_in_docs"):
        v = _head_mean(rows, key)
        if v is not None:
            rec[f"train_{key}_first20"] = v
    curve = []
    for p in sorted(run.glob("eval_mlm_step*.json"), key=lambda q: int(q.stem.removeprefix("eval_mlm_step"))):
        ev = _read(p)
        r = _ratio(ev, "realm (retrieval)", True)
        if r is not None:
            curve.append({"step": ev["step"], "ratio_content": r[0]})
    if curve:
        rec["curve"] = curve
    return rec


def distinct_top(queries: Path, depth: int = 3) -> int | None:
    """How many distinct chunks the held-out queries' dense top `depth` holds, over all of them (of a
    diagnosis's per-query records): 3 x 200 when no two queries share a chunk, `depth` when every
    query retrieves the same ones (hub chunks: a tower that has collapsed)."""
    if not queries.is_file():
        return None
    return len({c for r in span_records(queries) for c in r["candidates"]["dense"][:depth]})


def span_records(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]


def paired_ratio_change(before: list[dict], after: list[dict], how: str) -> dict:
    """Two diagnoses of the same held-out spans (the per-span records of `evaluate-mlm --diagnose`,
    same reader and closed-book): each one's content-token span ratio to closed-book, and the
    perplexity ratio of after over before with its paired bootstrap 95% interval over the spans
    (`paired_ratio_interval`). how: "run" (p(z|x) over the run's k documents, the top k - 1 + the
    null document) or "oracle" (the best of those k)."""
    import numpy as np
    from scipy.special import logsumexp

    from ralm.realm.inference.evaluate import paired_ratio_interval

    if [(r["chunk"], r["span"]) for r in before] != [(r["chunk"], r["span"]) for r in after]:
        raise ValueError("the two diagnoses score different spans")
    n = np.array([r["n_content"] for r in before], dtype=np.float64)
    closed = -np.array([r["closed_content"] for r in before])

    def span_nll(rows: list[dict]) -> np.ndarray:
        out = []
        for r in rows:
            lp = np.asarray(r["lp_content"])
            k = len(r["log_p_z_k"])
            lpk = np.concatenate([lp[: k - 1], lp[-1:]])  # the top k - 1 and the null document (last)
            out.append(-(logsumexp(np.asarray(r["log_p_z_k"]) + lpk) if how == "run" else lpk.max()))
        return np.asarray(out)

    x, y = span_nll(before), span_nll(after)
    ratio, low, high = paired_ratio_interval(y, x, n)
    return {
        "before": paired_ratio_interval(x, closed, n)[0],
        "after": paired_ratio_interval(y, closed, n)[0],
        "after_over_before": ratio,
        "after_over_before_low": low,
        "after_over_before_high": high,
    }


# the rows of an end-versus-step-0 table (`warm`, and realm_learns_cached.py's end): (key, label)
END_ROWS = (
    ("content_ratio_k_run", "content ratio, p(z\\|x) over the top 3 + null"),
    ("content_ratio_k_uniform", "the same, uniform p(z\\|x)"),
    ("content_ratio_k_oracle", "the same, best of k (oracle)"),
    ("content_ratio_K9_run", "content ratio, p(z\\|x) over the top 8 + null"),
    ("content_ratio_K9_oracle", "the same, oracle"),
    ("answers_in_dense@3", "answers in the dense top 3"),
    ("answers_in_dense@8", "answers in the dense top 8"),
    ("answers_in_dense@20", "answers in the dense top 20"),
    ("entropy_ratio", "entropy of p(z\\|x) / ln K"),
    ("score_utility_spearman", "scores vs the reader's log p(y\\|x,z) over the top 8, Spearman"),
)


def end_table_lines(w: dict, rows: tuple[tuple[str, str], ...]) -> list[str]:
    """The table rows (step 0, end [95%]) of a `warm_record`-shaped record for `rows`, a blank line,
    the paired end-over-step-0 perplexity lines, a blank line (the table's header is the caller's)."""
    lines = []
    for key, label in rows:
        a, b = w.get(f"{key}_step0"), w.get(f"{key}_end")
        if a is None or b is None:
            continue
        if f"{key}_end_low" in w:
            lines.append(
                f"| {label} | {a:.3f} | {b:.3f} [{w[key + '_end_low']:.3f}, {w[key + '_end_high']:.3f}] |"
            )
        else:
            lines.append(f"| {label} | {a:.3f} | {b:.3f} |")
    lines.append("")
    for how in ("run", "oracle"):
        c = w.get(f"paired_{how}")
        if c:
            lines.append(
                f"Content-token perplexity ({how}), end over step 0, paired bootstrap over the spans: "
                f"{c['after_over_before']:.3f} [{c['after_over_before_low']:.3f}, "
                f"{c['after_over_before_high']:.3f}]."
            )
    lines.append("")
    return lines


def warm_record(work: Path, lang: str, name: str = "warm") -> dict | None:
    """The `warm` stage (or `cached`, `name`): the retriever trained alone from a frozen reader,
    diagnosed at its end on the step-0 diagnosis's basis (the same reader, held-out spans and
    closed-book); None until it ran."""
    d0 = _read(work / f"{lang}-diag0" / "diagnose_initial.json")
    end = _read(work / f"{lang}-{name}" / "diagnose.json")
    if d0 is None or end is None:
        return None
    rows = _metrics_rows(work / f"{lang}-{name}")
    seen = [r["examples_seen"] for r in rows if "examples_seen" in r]
    rec: dict = {"steps": end.get("step"), "queries": seen[-1] if seen else None}
    spans = {
        "step0": work / f"{lang}-diag0" / "diagnose_initial_queries.jsonl",
        "end": work / f"{lang}-{name}" / "diagnose_queries.jsonl",
    }
    for when, d in (("step0", d0), ("end", end)):
        for src, row in d["answers_in_candidates"].items():
            for depth, v in row.items():
                rec[f"answers_in_{src}@{depth}_{when}"] = v
        for block in ("run_k", "K=9"):
            for name in ("run", "uniform", "oracle"):
                r = d["ratios"]["content"].get(block, {}).get(name)
                if r is not None:
                    tag = "k" if block == "run_k" else "K9"
                    rec[f"content_ratio_{tag}_{name}_{when}"] = r["ratio"]
                    rec[f"content_ratio_{tag}_{name}_{when}_low"] = r["low"]
                    rec[f"content_ratio_{tag}_{name}_{when}_high"] = r["high"]
        rec[f"entropy_ratio_{when}"] = d["entropy_ratio"]
        rec[f"null_mass_{when}"] = d.get("null_mass")
        su = score_utility(d, spans[when])
        if su is not None:
            rec[f"score_utility_spearman_{when}"] = su["spearman"]
            rec[f"score_utility_spearman_{when}_low"] = su["spearman_low"]
            rec[f"score_utility_spearman_{when}_high"] = su["spearman_high"]
    for key in ("score_scale", "distill_kl", "step_seconds"):
        v = _tail_mean(rows, key)
        if v is not None:
            rec[f"train_{key}_last20"] = v
    if spans["step0"].is_file() and spans["end"].is_file():
        before, after = span_records(spans["step0"]), span_records(spans["end"])
        for how in ("run", "oracle"):
            rec[f"paired_{how}"] = paired_ratio_change(before, after, how)
    return rec


# runs kept for the record of a fix (folder LANG-NAME): what they measured before it
SUPERSEDED = {
    "answer-detached": "the `answer` arm before b67f6c9, with the null logit's mean of the retrieved scores "
    "detached: the answer loss pushed every retrieved score up through the query vector's norm",
}
# an arm's figures that go into the metrics as LANG_arm_ARM_KEY (every arm, the headline's too)
ARM_METRICS = (
    "ratio_content_step0",
    "ratio_content_end",
    "gain_from_training",
    "ratio_content_end_compute_matched",
)


def keep_previous(metrics: dict, extra: dict, previous: dict) -> dict:
    """The metrics with what the committed realm_learns.json holds of runs this work folder lacks.

    Runs found in the work folder win; everything else (an arm, a diagnosis, a warm or formatted
    stage measured on another machine, and the metrics computed from them) is kept as it was.
    Returns the merged metrics; `extra` is merged in place."""
    keys = (
        "arms",
        "formatted",
        "formatted_fresh",
        "diag0",
        "warm",
        "headline_arm",
        "step_cost",
        "superseded",
    )
    for key in keys:
        now = extra.setdefault(key, {})
        for lang, old in (previous.get(key) or {}).items():
            if lang not in now:
                now[lang] = old
            elif key in ("arms", "formatted", "formatted_fresh"):  # arm by arm, in ARMS order
                both = {**old, **now[lang]}
                now[lang] = {arm: both[arm] for arm in ARMS if arm in both}
            elif key == "superseded":
                now[lang] = {**old, **now[lang]}
    if "speed" not in extra and "speed" in previous:
        extra["speed"] = previous["speed"]
    covered = {f"{lang}: step-0 diagnosis" for lang in extra.get("diag0", {})}
    extra["not_run"] = [x for x in extra.get("not_run", []) if x not in covered]
    return {**previous.get("metrics", {}), **metrics}


def report(work: Path, keep: bool = False) -> dict:
    """Write realm_learns.json and .md from `work`; `keep`: merged with the committed file's runs that
    `work` lacks (`keep_previous`), so that one new arm can be added on a machine without the others."""
    metrics: dict[str, float] = {}
    extra: dict = {"arms": {}, "diag0": {}, "not_run": []}
    previous = _read(RESULTS / "realm_learns.json") if keep else None
    for lang in ("en", "nb"):
        d0 = _read(work / f"{lang}-diag0" / "diagnose_initial.json")
        if d0 is not None:
            extra["diag0"][lang] = d0
            for src, row in d0["answers_in_candidates"].items():
                for depth, v in row.items():
                    metrics[f"{lang}_step0_answers_in_{src}@{depth}"] = v
            for part in ("all", "content"):
                for block, rows in d0["ratios"][part].items():
                    if block == "closed_book_ppl":
                        continue
                    tag = "k" if block == "run_k" else block.replace("=", "")
                    for name, v in rows.items():
                        metrics[f"{lang}_step0_{part}_ratio_{tag}_{name}"] = v["ratio"]
            su = score_utility(d0, work / f"{lang}-diag0" / "diagnose_initial_queries.jsonl")
            if su is not None:
                d0["score_utility"] = su
                metrics[f"{lang}_step0_score_utility_spearman"] = su["spearman"]
        elif previous is not None and lang in (previous.get("diag0") or {}):
            # the committed step-0 diagnosis (same towers recipe): the headline arm's
            # answers-in-candidates gain is measured against it, not carried over from another arm
            extra["diag0"][lang] = previous["diag0"][lang]
        else:
            extra["not_run"].append(f"{lang}: step-0 diagnosis")
        arms = {}
        for arm in ARMS:
            rec = arm_record(work, lang, arm)
            if rec is not None:
                arms[arm] = rec
        extra["arms"][lang] = arms
        # `formatted`: the arms from a reader that already knows the span-infill format (WORK-fmt)
        # (`--fresh`: WORK-fmt-fresh, on the queries after those the format run saw)
        for fresh, tag in ((False, "formatted"), (True, "formatted_fresh")):
            fmt = {a: r for a in ARMS if (r := arm_record(formatted_work(work, fresh), lang, a)) is not None}
            if not fmt:
                continue
            extra.setdefault(tag, {})[lang] = fmt
            for arm, r in fmt.items():
                for key in FORMATTED_METRICS:
                    if key in r:
                        metrics[f"{lang}_{tag}_{arm}_{key}"] = r[key]
        warm = warm_record(work, lang)
        if warm is not None:
            extra.setdefault("warm", {})[lang] = warm
            for key in WARM_METRICS:
                for when in ("step0", "end"):
                    if f"{key}_{when}" in warm:
                        metrics[f"{lang}_warm_{key}_{when}"] = warm[f"{key}_{when}"]
            for how in ("run", "oracle"):
                for key, v in warm.get(f"paired_{how}", {}).items():
                    if key.startswith("after_over_before"):
                        metrics[f"{lang}_warm_content_ratio_{how}_{key}"] = v
        name = next((a for a in ("all_answer", "all_packed", "all", "today") if a in arms), None)
        best = arms.get(name) if name else None
        if best is not None:
            extra.setdefault("headline_arm", {})[lang] = name
            end = end_metrics(best, extra["diag0"].get(lang), name, work / f"{lang}-{name}")
            metrics.update({f"{lang}_{k}": v for k, v in end.items()})
        for tag in ("formatted", "formatted_fresh"):
            for arm, r in extra.get(tag, {}).get(lang, {}).items():
                run = formatted_work(work, tag == "formatted_fresh") / f"{lang}-{arm}"
                end = end_metrics(r, extra["diag0"].get(lang), arm, run)
                metrics.update({f"{lang}_{tag}_{arm}_{k}": v for k, v in end.items()})
        if best is not None and "ratio_content_end" in best:
            metrics[f"{lang}_ratio_content_end"] = best["ratio_content_end"]
            metrics[f"{lang}_ratio_all_end"] = best.get("ratio_all_end", math.nan)
            if "gain_from_training" in best:
                metrics[f"{lang}_ratio_gain_from_training"] = best["gain_from_training"]
            if "ratio_content_end_compute_matched" in best:
                metrics[f"{lang}_ratio_content_end_compute_matched"] = best[
                    "ratio_content_end_compute_matched"
                ]
    # the downstream 2x2 (realm_learns_downstream.py) of each nb arm that has one
    for arm in extra["arms"].get("nb", {}):
        down = downstream_record(work, work, arm)
        if down is None:
            continue
        extra.setdefault("downstream", {})[arm] = down
        for cell, c in down["cells"].items():
            for key, v in c.items():
                metrics[f"nb_downstream_{arm}_{cell.replace('-', '_')}_{key}"] = v
        if arm == extra.get("headline_arm", {}).get("nb") and "f1_realm_minus_plain" in down:
            metrics["nb_downstream_f1_realm_minus_plain"] = down["f1_realm_minus_plain"]
    # the five variants (speed-en.json), or today's settings against the new ones alone
    speed = _read(work / "speed-en.json") or _read(work / "speed-en-today-new.json")
    if speed is not None:
        extra["speed"] = speed
        if "new_over_today" in speed:
            metrics["step_queries_per_s_over_before"] = speed["new_over_today"]
        for k, v in speed.items():
            if k.endswith("_over_today"):
                metrics[f"speed_{k}"] = v
    for lang in ("en", "nb"):
        # the cost of a REALM step of the headline arm in closed-book steps, timed side by side:
        # what the compute-matched closed-book baseline must be given
        arm = extra.get("headline_arm", {}).get(lang)
        # the timing the compute-matched run was sized by (at the runs' grad_accum), else one micro-batch
        match = _read(work / f"{lang}-closed-compute-{arm}" / "compute_match.json") if arm else None
        timing = (
            Path(match["ratio_from"]).name
            if match and match.get("ratio_from", "").endswith(".json")
            else None
        )
        pair = _read(work / (timing or f"speed-{lang}-{arm}-closed.json")) if arm else None
        if pair and f"{arm}_step_seconds" in pair and "closed_step_seconds" in pair:
            metrics[f"{lang}_{arm}_step_over_closed_book_step"] = (
                pair[f"{arm}_step_seconds"] / pair["closed_step_seconds"]
            )
            extra.setdefault("step_cost", {})[lang] = pair
    for lang in ("en", "nb"):
        for name, why in SUPERSEDED.items():
            rec = arm_record(work, lang, name)
            if rec is not None:
                extra.setdefault("superseded", {}).setdefault(lang, {})[name] = {**rec, "why": why}
    d0q = {
        lang: distinct_top(work / f"{lang}-diag0" / "diagnose_initial_queries.jsonl") for lang in ("en", "nb")
    }
    for lang, n in d0q.items():
        if n is not None:
            metrics[f"{lang}_step0_distinct_dense_top3"] = n
    if previous is not None:
        metrics = keep_previous(metrics, extra, previous)
    for group, tag in (("arms", "arm"), ("superseded", "superseded")):
        for lang, arms in extra.get(group, {}).items():
            for arm, rec in arms.items():
                prefix = f"{lang}_{tag}_{arm.replace('-', '_')}"
                for key in ARM_METRICS:
                    if key in rec:
                        metrics[f"{prefix}_{key}"] = rec[key]
                top3 = (rec.get("diagnosis_end") or {}).get("distinct_dense_top3")
                if top3 is not None:
                    metrics[f"{prefix}_distinct_dense_top3_end"] = top3
    write_result(
        "realm_learns",
        "python -m benchmarks.realm.realm_learns diag0 en; ... arm en NAME --steps N (each arm); ... closed en; "
        "... speed; ... report",
        metrics,
        TARGETS,
        **extra,
    )
    (RESULTS / "realm_learns.md").write_text(markdown(metrics, extra), encoding="utf-8")
    return metrics


def _spearman(arm: dict) -> str:
    su = (arm.get("diagnosis_end") or {}).get("score_utility")
    if not su:
        return "–"
    return f"{su['spearman']:.3f} [{su['spearman_low']:.3f}, {su['spearman_high']:.3f}]"


def ablation_table(arms: dict[str, dict]) -> list[str]:
    """The markdown rows of an ablation: one line an arm (`arm_record`)."""

    def f(r: dict, k: str) -> str:
        v = r.get(k)
        return "–" if v is None else f"{v:.3f}"

    lines = [
        "| arm | steps | content ratio step 0 | content ratio end [95%] | gain [95%] | all-token ratio end | "
        "entropy (last 20 steps) | null mass | score scale | answers in docs | "
        "scores vs reader, Spearman (end) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, r in arms.items():
        end = "–"
        if "ratio_content_end" in r:
            end = (
                f"{r['ratio_content_end']:.3f} "
                f"[{r['ratio_content_end_low']:.3f}, {r['ratio_content_end_high']:.3f}]"
            )
        gain = f(r, "gain_from_training")
        if "gain_from_training_low" in r:
            gain += f" [{r['gain_from_training_low']:.3f}, {r['gain_from_training_high']:.3f}]"
        lines.append(
            f"| {arm} | {r.get('steps')} | {f(r, 'ratio_content_step0')} | {end} | "
            f"{gain} | {f(r, 'ratio_all_end')} | {f(r, 'train_entropy_last20')} | "
            f"{f(r, 'train_null_mass_last20')} | {f(r, 'train_score_scale_last20')} | "
            f"{f(r, 'answers_in_docs_end')} | {_spearman(r)} |"
        )
    return lines


def markdown(metrics: dict, extra: dict) -> str:
    lines = ["# REALM that learns (issue 45)", ""]
    for lang, d0 in extra["diag0"].items():
        lines += [f"## {lang}: diagnosis at step 0 ({d0['queries']} held-out spans, k = {d0['k']})", ""]
        lines += ["| candidates | @3 | @8 | @20 |", "|---|---|---|---|"]
        for src, row in d0["answers_in_candidates"].items():
            lines.append(
                f"| {src} | " + " | ".join(f"{row.get(d, math.nan):.3f}" for d in ("3", "8", "20")) + " |"
            )
        lines += [
            "",
            "| span ratio to closed-book (95% interval) | "
            + " | ".join(k for k in d0["ratios"]["content"] if k != "closed_book_ppl")
            + " |",
        ]
        blocks = [k for k in d0["ratios"]["content"] if k != "closed_book_ppl"]
        lines.append("|---|" + "---|" * len(blocks))
        names = list(d0["ratios"]["content"][blocks[0]])
        for part in ("content", "all"):
            for name in names:
                cells = []
                for b in blocks:
                    v = d0["ratios"][part][b][name]
                    cells.append(f"{v['ratio']:.3f} [{v['low']:.3f}, {v['high']:.3f}]")
                lines.append(f"| {part} tokens: {name} | " + " | ".join(cells) + " |")
        su = d0.get("score_utility")
        if su:
            lines += [
                "",
                f"Does the retriever rank the chunks as the reader values them? Spearman of log p(z\\|x) "
                f"against log p(y\\|x,z) over the top {d0.get('reader_depth', '?')} chunks, mean over "
                f"{su['spans']} spans: {su['spearman']:.3f} [{su['spearman_low']:.3f}, {su['spearman_high']:.3f}]; "
                f"the top-scored chunk is the reader's best for {su['top_agreement']:.3f} of them "
                f"(chance {su['top_chance']:.3f}).",
            ]
        lines.append("")
    for lang, arms in extra["arms"].items():
        if arms:
            lines += [f"## {lang}: ablation", "", *ablation_table(arms), ""]
    for lang, arms in extra.get("superseded", {}).items():
        lines += [f"## {lang}: runs kept for the record of a fix", ""]
        for name, r in arms.items():
            lines.append(f"- `{name}`: {r['why']}.")
        lines += ["", *ablation_table(arms), ""]
        for name, r in arms.items():
            diag = r.get("diagnosis_end") or {}
            if diag.get("distinct_dense_top3") is not None:
                lines.append(
                    f"`{name}` at the end: answers in the dense top 3 / 8 / 20 "
                    + " / ".join(f"{diag['answers_in_candidates']['dense'][d]:.3f}" for d in ("3", "8", "20"))
                    + f"; the held-out queries' dense top 3 holds {diag['distinct_dense_top3']} distinct chunks."
                )
        lines.append("")
    for tag, how in (
        ("formatted", "on the same queries"),
        ("formatted_fresh", "on the queries after those (`--fresh`: none seen before)"),
    ):
        for lang, arms in extra.get(tag, {}).items():
            lines += [
                f"## {lang}: from a reader that knows the span format (`{tag}`)",
                "",
                "Both the REALM arm and its closed-book run start from the closed-book run's reader after "
                f"its steps (the format learnt), and train the same steps again {how}.",
                "",
                *ablation_table(arms),
                "",
            ]
    for lang, w in extra.get("warm", {}).items():
        lines += [
            f"## {lang}: the retriever alone, from a frozen reader (`warm`, {w['steps']} steps, "
            f"{w['queries']} queries)",
            "",
            "Query tower only, Atlas's perplexity distillation, learned scale; the reader frozen, so the "
            "diagnosis at the end has the step-0 basis (same reader, spans and closed-book run).",
            "",
            "| | step 0 | end |",
            "|---|---|---|",
        ]
        lines += end_table_lines(w, END_ROWS)
    speed = extra.get("speed")
    if speed:
        names = [k.removesuffix("_queries_per_s") for k in speed if k.endswith("_queries_per_s")]
        lines += [
            f"## en: speed of a REALM step (CPU, {speed['queries_per_step']} queries a step, median of "
            f"{speed['steps_measured']} interleaved steps)",
            "",
            f"Machine: {speed.get('machine', 'not recorded')}; autocast {speed.get('autocast', 'not recorded')}.",
            "",
            "| variant | seconds a step | queries/s | over today |",
            "|---|---|---|---|",
        ]
        for n in names:
            over = speed.get(f"{n}_over_today", 1.0 if n == "today" else math.nan)
            lines.append(
                f"| {n} | {speed[f'{n}_step_seconds']:.2f} | {speed[f'{n}_queries_per_s']:.3f} | {over:.2f} |"
            )
        lines.append("")
    for lang, pair in extra.get("step_cost", {}).items():
        arm = extra["headline_arm"][lang]
        ratio = pair[f"{arm}_step_seconds"] / pair["closed_step_seconds"]
        lines += [
            f"{lang}: a step of the `{arm}` arm costs {ratio:.1f} closed-book steps "
            f"({pair[f'{arm}_step_seconds']:.2f} s against {pair['closed_step_seconds']:.2f} s, timed "
            "side by side).",
            "",
        ]
    for arm, down in extra.get("downstream", {}).items():
        lines += downstream_lines(down, arm)
    if extra["not_run"]:
        lines += ["Not run: " + "; ".join(extra["not_run"]), ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    report(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "runs" / "b45")
