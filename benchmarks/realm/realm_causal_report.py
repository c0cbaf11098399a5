"""The report stage of realm_causal.py: benchmarks/results/realm_causal.json and .md from what the
other stages left in the work directory (evaluations, Table 2, downstream, speed, span recurrence)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import BENCH, RESULTS, ROOT, log, read_json, write_result

# the pre-training configs of the nb and en pairs, and the recall@k of Table 2 (realm_causal.py's too)
NB_CONFIG = BENCH / "data" / "realm_causal_nb.toml"
EN_CONFIG = BENCH / "data" / "realm_causal_en.toml"
KS = (1, 5, 20)


def _rows(path: Path) -> dict:
    return {r["name"]: r for r in read_json(path)["rows"]}


def _pair_metrics(prefix: str, run: Path) -> tuple[dict, dict]:
    final, start = _rows(run / "eval_mlm.json"), _rows(run / "eval_mlm_initial.json")
    m = {
        f"{prefix}_span_ppl_realm": final["realm (retrieval)"]["ppl"],
        f"{prefix}_span_ppl_closed_book": final["closed-book baseline"]["ppl"],
        f"{prefix}_span_ppl_realm_reader_alone": final["realm reader alone, closed-book"]["ppl"],
        f"{prefix}_span_ppl_realm_step0": start["realm (retrieval)"]["ppl"],
        f"{prefix}_span_ppl_closed_book_step0": start["closed-book baseline"]["ppl"],
        f"{prefix}_answers_in_docs": final["realm (retrieval)"]["answers_in_docs"],
    }
    m[f"{prefix}_span_ppl_ratio_realm_vs_closed_book"] = (
        m[f"{prefix}_span_ppl_realm"] / m[f"{prefix}_span_ppl_closed_book"]
    )
    m[f"{prefix}_span_ppl_ratio_step0"] = (
        m[f"{prefix}_span_ppl_realm_step0"] / m[f"{prefix}_span_ppl_closed_book_step0"]
    )
    by_kind = {}
    for when, rows in (("final", final), ("step0", start)):
        r, c = rows["realm (retrieval)"]["by_kind"], rows["closed-book baseline"]["by_kind"]
        for kind in r:
            by_kind.setdefault(kind, {})[when] = {
                "realm": r[kind]["ppl"],
                "closed_book": c[kind]["ppl"],
                "ratio": r[kind]["ppl"] / c[kind]["ppl"],
                "spans": r[kind]["spans"],
            }
    for kind, v in by_kind.items():
        m[f"{prefix}_span_ppl_ratio/{kind}"] = v["final"]["ratio"]
    return m, by_kind


# the stages the committed results ran, in order (one job a core, OMP_NUM_THREADS=1)
COMMITTED_RUN = (
    "python -m benchmarks.realm.realm_causal towers; ... corpus; ... en --steps 300; ... nb --steps 100; "
    "... table2; ... downstream --rag-limit 200; ... speed; ... report"
)


def report(work: Path) -> None:
    """Collect what the stages left in `work` into the results JSON (metrics, targets, settings) and a table."""
    metrics: dict = {}
    extra: dict = {
        "settings": {
            "nb_config": str(NB_CONFIG.relative_to(ROOT)),
            "en_config": str(EN_CONFIG.relative_to(ROOT)),
        }
    }
    targets: dict = {}
    for tag in ("nb", "en"):  # what each pair actually ran: steps, held-out chunks scored
        p = work / f"{tag}-realm" / "eval_mlm.json"
        if p.is_file():
            from ralm.realm.config import PretrainConfig

            cfg = PretrainConfig.from_toml(work / f"{tag}-realm" / "config.toml")
            extra["settings"][f"{tag}_steps"] = cfg.steps
            extra["settings"][f"{tag}_heldout_chunks_scored"] = _rows(p)["realm (retrieval)"]["examples"]
    if (work / "nb-realm" / "eval_mlm.json").is_file():
        m, kinds = _pair_metrics("nb", work / "nb-realm")
        metrics.update(m)
        extra["nb_by_kind"] = kinds
        targets["nb_span_ppl_ratio_realm_vs_closed_book"] = "<= 0.5"
    if (work / "table2.json").is_file():
        t2 = read_json(work / "table2.json")
        for when in ("before", "after"):
            for k in KS:
                metrics[f"nb_towers_recall@{k}_{when}"] = t2[when][f"recall@{k}"]
            metrics[f"nb_towers_hub@20_{when}"] = t2[when]["hub@20"]
        targets["nb_towers_recall@5_after"] = ">= nb_towers_recall@5_before"
    if (work / "en-realm" / "eval_mlm.json").is_file():
        m, kinds = _pair_metrics("en", work / "en-realm")
        metrics.update(m)
        extra["en_by_kind"] = kinds
        targets["en_span_ppl_ratio_realm_vs_closed_book"] = "<= 0.5"
    for arm in ("realm", "plain"):
        for mode, sub in (("rag", "rag-k3"), ("closed-book", "closed-book")):
            p = work / f"rag-eval-{arm}" / sub / "results.json"
            if p.is_file():
                res = read_json(p)["metrics"]
                metrics[f"downstream_{arm}_{mode}_em"] = res["em"]
                metrics[f"downstream_{arm}_{mode}_f1"] = res["f1"]
                metrics[f"downstream_{arm}_{mode}_questions"] = res["questions"]
    if (work / "speed.json").is_file():
        sp = read_json(work / "speed.json")
        metrics["step_vs_bare"] = sp["step_vs_bare"]
        metrics["step_vs_bare_full_logits"] = sp["step_vs_bare_full_logits"]
        metrics["step_seconds_median"] = sp["step_seconds_median"]
        extra["speed"] = sp
        targets["step_vs_bare"] = "<= 1.15"
    for name in ("nb", "en"):
        p = work / f"recurrence-{name}.json"
        if p.is_file():
            extra[f"span_recurrence_{name}"] = read_json(p)
    met = {}
    if "nb_span_ppl_ratio_realm_vs_closed_book" in metrics:
        met["nb_span_ppl_ratio_realm_vs_closed_book"] = (
            metrics["nb_span_ppl_ratio_realm_vs_closed_book"] <= 0.5
        )
    if "nb_towers_recall@5_after" in metrics:
        met["nb_towers_recall@5_after"] = (
            metrics["nb_towers_recall@5_after"] >= metrics["nb_towers_recall@5_before"]
        )
    if "en_span_ppl_ratio_realm_vs_closed_book" in metrics:
        met["en_span_ppl_ratio_realm_vs_closed_book"] = (
            metrics["en_span_ppl_ratio_realm_vs_closed_book"] <= 0.5
        )
    if "step_vs_bare" in metrics:
        met["step_vs_bare"] = metrics["step_vs_bare"] <= 1.15
    extra["targets_met"] = met
    write_result("realm_causal", COMMITTED_RUN, metrics, targets, **extra)
    (RESULTS / "realm_causal.md").write_text(markdown(metrics, extra), encoding="utf-8")
    log(f"written {RESULTS / 'realm_causal.json'} and .md")


def markdown(m: dict, extra: dict) -> str:
    def f(key, fmt="{:.2f}"):
        v = m.get(key)
        return fmt.format(v) if isinstance(v, (int, float)) else "-"

    lines = ["# REALM with a causal reader (issue 35)", ""]
    st = extra.get("settings", {})
    for p, name in (("nb", "Norwegian"), ("en", "English")):
        if f"{p}_steps" in st:
            lines.append(
                f"- {name}: {st[f'{p}_steps']} pre-training steps per run, "
                f"{st[f'{p}_heldout_chunks_scored']} held-out chunks scored"
            )
    lines.append("")
    lines += [
        "| | step 0: REALM / closed-book | end: REALM | end: closed-book | ratio (target <= 0.5) |",
        "|---|---|---|---|---|",
    ]
    for p, name in (("nb", "Norwegian, Gemma-3-270M"), ("en", "English, SmolLM2-135M")):
        lines.append(
            f"| {name} | {f(p + '_span_ppl_realm_step0')} / {f(p + '_span_ppl_closed_book_step0')} "
            f"| {f(p + '_span_ppl_realm')} | {f(p + '_span_ppl_closed_book')} "
            f"| {f(p + '_span_ppl_ratio_realm_vs_closed_book', '{:.3f}')} |"
        )
    for p in ("nb", "en"):
        kinds = extra.get(f"{p}_by_kind")
        if kinds:
            lines += [
                "",
                f"{p}: span perplexity by kind (REALM / closed-book = ratio; spans)",
                "",
                "| kind | step 0 | end |",
                "|---|---|---|",
            ]
            for k, v in kinds.items():
                cells = [
                    f"{v[w]['realm']:.2f} / {v[w]['closed_book']:.2f} = {v[w]['ratio']:.3f} ({v[w]['spans']})"
                    if w in v
                    else "-"
                    for w in ("step0", "final")
                ]
                lines.append(f"| {k} | {cells[0]} | {cells[1]} |")
    lines += ["", "| NorQuAD-open towers | R@1 | R@5 | R@20 |", "|---|---|---|---|"]
    for when in ("before", "after"):
        lines.append(
            f"| {when} REALM | " + " | ".join(f(f"nb_towers_recall@{k}_{when}", "{:.3f}") for k in KS) + " |"
        )
    lines += [
        "",
        "| NorQuAD-open rag train (same budget) | RAG k=3 EM / F1 | closed-book EM / F1 |",
        "|---|---|---|",
    ]
    for arm in ("realm", "plain"):
        lines.append(
            f"| {arm} | {f(f'downstream_{arm}_rag_em')} / {f(f'downstream_{arm}_rag_f1')} "
            f"| {f(f'downstream_{arm}_closed-book_em')} / {f(f'downstream_{arm}_closed-book_f1')} |"
        )
    lines += ["", f"step vs bare passes: {f('step_vs_bare', '{:.3f}')}x (target <= 1.15)", ""]
    return "\n".join(lines)
