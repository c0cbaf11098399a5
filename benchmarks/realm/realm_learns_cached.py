"""realm_learns.py's `cached` stage: the retriever trained offline from a frozen reader's cached scores.

Online REALM (and the `warm` stage) score every query's candidates with the reader once and move the
query tower one step on them: 400 queries are 400 pieces of evidence, each used once. With the reader
and the document tower frozen those scores never change, so here the frozen reader scores the top 8
dense candidates and the null document of --queries training queries once
(`ralm.realm.inference.diagnose.diagnose(ids=...)`, in --parts processes), and the query tower and the learned
score scale learn from the cached scores for --epochs passes (`ralm.realm.training.cached_distill`, Atlas's
perplexity distillation, the `warm` stage's settings).

The curve: the same training from the same start on the first n of the cached queries, for each n of
--sizes, each scored on the held-out spans of diag0 (the same reader, spans and closed-book run) by
re-ranking their cached top 8 (`rescore_records`, no reader call): the score/utility Spearman, the
content-token ratio under p(z|x) over the 8 and the null, and over the re-ranked top 3 and the null,
the entropy, answers in the re-ranked top 3. The largest n is then saved as a checkpoint and diagnosed
afresh (`evaluate-mlm --diagnose`: a new search of the whole index), like the `warm` stage's end.

Files (WORK/LANG-cached): scores-I-of-P.jsonl (the cached records), cached.json (the curve, the
training history, the settings), checkpoints/step-N, diagnose.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from benchmarks.realm.realm_learns_report import END_ROWS, end_table_lines, span_records
from ralm.realm.modeling.answer_target import ANSWER_NATS

# the `warm` stage's settings, in today's reader layout (the chunk before the query) so that the
# cached held-out scores are diag0's own records
CACHED = {
    "reader_train": "freeze",
    "retriever_train": "query",
    "retriever_loss": "distill",
    "score_scale": "learned",
    "lr_retriever": 1e-4,
}
READER_DEPTH = 8
# the end table: the `warm` stage's rows but the uniform and the top-8 oracle ones
END_ROWS_CACHED = tuple(
    r for r in END_ROWS if r[0] not in ("content_ratio_k_uniform", "content_ratio_K9_oracle")
)


def score_part(run_dir: Path, queries: int, part: int, parts: int, block: int = 100) -> Path:
    """Cache the frozen reader's scores of this part's share of the first `queries` training chunks,
    `block` queries at a time appended to the part's file (an interrupted part resumes there)."""
    from ralm.atomic import write_text_atomic
    from ralm.realm.inference.diagnose import diagnose
    from ralm.realm.training.run import load_run

    out = run_dir / f"scores-{part}-of-{parts}.jsonl"
    done = span_records(out) if out.is_file() else []
    ids = query_order(run_dir)[:queries][part::parts][len(done) :]
    if not len(ids):
        return out
    run = load_run(run_dir, initial=True)
    for s in range(0, len(ids), block):
        t0 = time.perf_counter()
        diag = diagnose(run, None, depth=READER_DEPTH, reader_depth=READER_DEPTH, ids=ids[s : s + block])
        seconds = time.perf_counter() - t0
        for r in diag.records:
            r["score_seconds"] = seconds / max(len(diag.records), 1)
        done += diag.records
        write_text_atomic(out, "".join(json.dumps(r) + "\n" for r in done))
        print(
            f"[cached] part {part}/{parts}: {len(done)} queries scored ({seconds:.0f} s for the last)",
            flush=True,
        )
    return out


def answer_targets(records: list[dict], nats: float = ANSWER_NATS) -> list[dict]:
    """The records as distant supervision (`--target answer`): each of the R chunks' log-likelihoods
    replaced by `nats` if it holds the masked span and 0 if not, the null document's by 0; spans
    whose R chunks all hold it or all miss it are left out (they rank nothing)."""
    out = []
    for r in records:
        holds = answer_flags(r)
        if len(set(holds)) < 2:
            continue
        lp = [nats * h for h in holds] + [0.0] * (len(r["reader_docs"]) - len(holds))
        out.append({**r, "lp_content": lp, "lp_all": lp})
    return out


def answer_flags(r: dict) -> list[float]:
    """1.0 for each of a record's R chunks (the null document left out) that holds the masked span."""
    R = len(r["reader_docs"]) - int(r["reader_docs"][-1] == -1)
    flag = dict(zip(r["candidates"]["dense"], r["has_answer"]["dense"], strict=True))
    return [float(flag.get(d, False)) for d in r["reader_docs"][:R]]


def answer_agreement(records: list[dict]) -> dict:
    """`score_utility_agreement` of the records' scores over their R chunks with holding the answer:
    does the retriever rank the chunks that hold the masked span first?"""
    from ralm.realm.inference.diagnose import score_utility_agreement

    R = len(answer_flags(records[0]))
    return score_utility_agreement(
        np.array([r["log_p_z_r"][:R] for r in records]), np.array([answer_flags(r) for r in records])
    )


def _summary_row(summary: dict) -> dict:
    c = summary["ratios"]["content"]
    su = summary["score_utility"]
    return {
        "content_ratio_K9_run": c["K=9"]["run"]["ratio"],
        "content_ratio_K9_run_low": c["K=9"]["run"]["low"],
        "content_ratio_K9_run_high": c["K=9"]["run"]["high"],
        "content_ratio_k_run": c["run_k"]["run"]["ratio"],
        "content_ratio_k_run_low": c["run_k"]["run"]["low"],
        "content_ratio_k_run_high": c["run_k"]["run"]["high"],
        "content_ratio_K9_oracle": c["K=9"]["oracle"]["ratio"],
        "content_ratio_k_oracle": c["run_k"]["oracle"]["ratio"],
        "entropy_ratio": summary["entropy_ratio"],
        "null_mass": summary.get("null_mass"),
        "answers_in_dense@3": summary["answers_in_candidates"]["dense"]["3"],
        "score_utility_spearman": su["spearman"],
        "score_utility_spearman_low": su["spearman_low"],
        "score_utility_spearman_high": su["spearman_high"],
        "top_agreement": su["top_agreement"],
    }


def cached_stage(
    work: Path,
    lang: str,
    run_dir: Path,
    *,
    parts: int,
    sizes: list[int],
    epochs: int,
    batch_size: int,
    negatives: str = "none",
    scores_dir: Path | None = None,
    target: str = "reader",
    queries: int | None = None,
) -> Path:
    """The curve over `sizes` and the end diagnosis of the largest (see the module docstring);
    target "answer" learns from `answer_targets` of the cached records instead of the reader's
    scores (the held-out figures stay the reader's); "answer_free" learns from
    `ralm.realm.training.answer_queries.answer_records` of the first `queries` training chunks (no reader:
    any number of them), the curve's sizes counting those queries."""
    import torch

    from ralm.atomic import write_json_atomic
    from ralm.realm.inference.diagnose import summarize
    from ralm.realm.training.cached_distill import distill_query_tower, rescore_records, save_distilled
    from ralm.realm.training.run import load_run

    out = run_dir / "cached.json"
    if out.is_file():
        return backfill_answer_agreement(work, lang, run_dir)
    scores_dir = scores_dir or run_dir
    files = [scores_dir / f"scores-{i}-of-{parts}.jsonl" for i in range(parts)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"{', '.join(missing)}: score them first (`cached {lang} --part I/{parts}`)")
    # what the parts hold (a part stopped early gives fewer): the queries scored in every part's order
    parts_records = [span_records(f) for f in files]
    per = min(len(x) for x in parts_records)
    train = [r for x in parts_records for r in x[:per]]
    order = {int(c): i for i, c in enumerate(query_order(run_dir))}
    train.sort(key=lambda r: order[int(r["chunk"])])  # the data order, whatever the parts
    held_path = work / f"{lang}-diag0" / "diagnose_initial_queries.jsonl"
    if not held_path.is_file():
        raise SystemExit(f"{held_path}: run `realm_learns.py diag0 {lang}` first")
    held = span_records(held_path)
    run = load_run(run_dir, initial=True)
    kr = run.model.n_retrieved
    start = {k: v.detach().clone() for k, v in run.model.state_dict().items()}

    def held_row() -> dict:
        rescored = rescore_records(run, held)
        return {**_summary_row(summarize(rescored, k=kr)), **_answer_row(answer_agreement(rescored))}

    curve = [{"queries": 0, "steps": 0, **held_row()}]
    pool = train
    if target == "answer_free":
        pool = _answer_pool(run, run_dir, queries)
        sizes = sorted({min(n, queries or n) for n in sizes})
    else:
        sizes = sorted({min(n, len(train)) for n in sizes})
    history: dict[str, list] = {}
    for n in sizes:
        run.model.load_state_dict(start)
        t0 = time.perf_counter()
        if target == "answer_free":  # the records among the first n queries
            learn = [r for r in pool if order[int(r["chunk"])] < n]
        else:
            learn = answer_targets(train[:n]) if target == "answer" else train[:n]
        opt, sched, hist = distill_query_tower(
            run, learn, epochs=epochs, batch_size=batch_size, log_every=25, negatives=negatives
        )
        seconds = time.perf_counter() - t0
        steps = hist[-1]["step"]
        row = {
            "queries": n,
            "steps": steps,
            "train_seconds": seconds,
            "kl_first": hist[0]["kl"],
            "kl_last": hist[-1]["kl"],
            "learned_from": len(learn),
            **held_row(),
        }
        rescored = rescore_records(run, train[:n])  # the reader-scored ones among its queries
        row["train_score_utility_spearman"] = summarize(rescored, k=kr)["score_utility"]["spearman"]
        row["train_answer_spearman"] = answer_agreement(rescored)["spearman"]
        curve.append(row)
        history[str(n)] = hist
        print(f"[cached] {n} queries, {steps} steps: {json.dumps(row)}", flush=True)
        if n == sizes[-1]:
            save_distilled(run, run_dir, steps, opt, sched, examples_seen=n * epochs)
    scored = [r.get("score_seconds", 0.0) for r in train]
    payload = {
        "lang": lang,
        "settings": {
            **CACHED,
            "epochs": epochs,
            "batch_size": batch_size,
            "negatives": negatives,
            "target": target,
            **({"answer_nats": ANSWER_NATS} if target in ("answer", "answer_free") else {}),
            "reader_depth": READER_DEPTH,
            "distill_tau": run.cfg.distill_tau,
            "warmup_steps": run.cfg.warmup_steps,
        },
        "cached_queries": len(train),
        **({"answer_queries": sizes[-1], "answer_records": len(pool)} if target == "answer_free" else {}),
        "score_seconds_per_query": float(np.mean(scored)) if scored else None,
        "parts": parts,
        "curve": curve,
        "history": history,
        "torch_threads": torch.get_num_threads(),
    }
    return write_json_atomic(out, payload)


def backfill_answer_agreement(work: Path, lang: str, run_dir: Path) -> Path:
    """Add the held-out `answer_agreement` to the first and last rows of a cached.json written before
    it was measured: the step-0 tower and the saved end tower re-rank diag0's cached top 8."""
    from ralm.atomic import write_json_atomic
    from ralm.realm.training.cached_distill import rescore_records
    from ralm.realm.training.run import load_run

    out = run_dir / "cached.json"
    c = json.loads(out.read_text(encoding="utf-8"))
    first, last = c["curve"][0], c["curve"][-1]
    if "answer_spearman" in first and "answer_spearman" in last:
        return out
    held = span_records(work / f"{lang}-diag0" / "diagnose_initial_queries.jsonl")
    for row, initial in ((first, True), (last, False)):
        if "answer_spearman" not in row:
            row.update(
                _answer_row(answer_agreement(rescore_records(load_run(run_dir, initial=initial), held)))
            )
    return write_json_atomic(out, c)


def _answer_pool(run, run_dir: Path, queries: int | None) -> list[dict]:
    """`answer_records` of the first `queries` training chunks in query order (all without a number),
    computed once into RUN/answer_records.jsonl."""
    from ralm.atomic import write_text_atomic
    from ralm.realm.training.answer_queries import answer_records

    path = run_dir / "answer_records.jsonl"
    if path.is_file():
        return span_records(path)
    ids = query_order(run_dir)[:queries]
    t0 = time.perf_counter()
    recs = answer_records(run, ids, depth=READER_DEPTH)
    print(
        f"[cached] answer records: {len(recs)} of {len(ids)} queries rank something "
        f"({time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in recs))
    return recs


def _answer_row(a: dict) -> dict:
    return {
        "answer_spearman": a["spearman"],
        "answer_spearman_low": a["spearman_low"],
        "answer_spearman_high": a["spearman_high"],
    }


def query_order(run_dir: Path) -> np.ndarray:
    """The run's training chunk ids (split.json) in a seeded order: the queries to cache, the first n
    of which each point of the curve learns from."""
    train = json.loads((run_dir / "split.json").read_text(encoding="utf-8"))["train"]
    return np.random.default_rng([42, 45]).permutation(np.asarray(train, dtype=np.int64))


# ----------------------------------------------------------------------------- the report
TARGETS = {
    "en_cached_entropy_ratio_end": "<= 0.7 (the issue's bar for nb_entropy_ratio_end)",
    "en_cached_answers_in_candidates_gain": ">= 0.05 (the issue's bar for nb_answers_in_candidates_gain)",
    "en_cached_score_utility_spearman_end": "reported (0.006 at step 0)",
}
RERANK_METRICS = (
    "score_utility_spearman",
    "content_ratio_K9_run",
    "content_ratio_k_run",
    "entropy_ratio",
    "answers_in_dense@3",
    "top_agreement",
    "answer_spearman",
)
LABELS = (
    ("score_utility_spearman", "Spearman of scores vs the reader's log p(y\\|x,z) over the 8"),
    ("top_agreement", "top-scored chunk is the reader's best (chance 0.125)"),
    ("content_ratio_K9_run", "content ratio, p(z\\|x) over the 8 + null"),
    ("content_ratio_k_run", "content ratio, p(z\\|x) over the re-ranked top 3 + null"),
    ("entropy_ratio", "entropy of p(z\\|x) over the top 3 + null / ln 4"),
    ("answers_in_dense@3", "answers in the re-ranked top 3"),
    ("answer_spearman", "Spearman of scores vs holding the answer over the 8"),
    ("train_score_utility_spearman", "Spearman on its own training queries"),
    ("train_answer_spearman", "the same vs holding the answer, its own training queries"),
)


def report_cached(work: Path, langs: tuple[str, ...] = ("en", "nb")) -> dict | None:
    """benchmarks/results/realm_learns_cached.json and .md from each LANG-cached run's cached.json and
    its end diagnosis beside diag0's; None when no language has run."""

    from benchmarks.common import RESULTS, write_result
    from benchmarks.realm.realm_learns_report import END_ROWS, warm_record

    # the end table: the `warm` stage's rows but the uniform and the top-8 oracle ones
    END_ROWS_CACHED = tuple(
        r for r in END_ROWS if r[0] not in ("content_ratio_k_uniform", "content_ratio_K9_oracle")
    )

    metrics: dict[str, float] = {}
    sections: dict[str, dict] = {}
    lines = ["# REALM's retriever from cached reader scores (issue 45, `realm_learns.py cached`)", ""]
    for lang in langs:
        for name in (
            "cached",
            "cached-in_batch",
            "cached-answer",
            "cached-answer_free",
            "cached-answer_free-in_batch",
        ):
            tag = f"{lang}_{name.replace('-', '_')}"
            run = work / f"{lang}-{name}"
            c = (
                json.loads((run / "cached.json").read_text(encoding="utf-8"))
                if (run / "cached.json").is_file()
                else None
            )
            if c is None:
                continue
            end = warm_record(work, lang, name)
            sections[f"{lang}-{name}"] = {"cached": c, "end": end}
            curve = c["curve"]
            first, last = curve[0], curve[-1]
            for key in RERANK_METRICS:
                if key in first and key in last:  # answer_spearman: the runs since --target answer
                    metrics[f"{tag}_rerank_{key}_step0"] = first[key]
                    metrics[f"{tag}_rerank_{key}_end"] = last[key]
            metrics[f"{tag}_queries"] = last["queries"]
            metrics[f"{tag}_score_seconds_per_query"] = c["score_seconds_per_query"]
            if end is not None:
                for key in (
                    "score_utility_spearman",
                    "entropy_ratio",
                    "content_ratio_k_run",
                    "content_ratio_K9_run",
                ):
                    for when in ("step0", "end"):
                        if f"{key}_{when}" in end:
                            metrics[f"{tag}_{key}_{when}"] = end[f"{key}_{when}"]
                for depth in ("3", "8", "20"):
                    a, b = (
                        end.get(f"answers_in_dense@{depth}_step0"),
                        end.get(f"answers_in_dense@{depth}_end"),
                    )
                    if a is not None and b is not None:
                        metrics[f"{tag}_answers_in_dense@{depth}_gain"] = b - a
                if f"{tag}_answers_in_dense@3_gain" in metrics:  # the reader's candidates: the top 3
                    metrics[f"{tag}_answers_in_candidates_gain"] = metrics[f"{tag}_answers_in_dense@3_gain"]
                for how in ("run", "oracle"):
                    for key, v in end.get(f"paired_{how}", {}).items():
                        metrics[f"{tag}_content_ratio_{how}_{key}"] = v
            s = c["settings"]
            scored = (
                f"{c['answer_queries']} training queries, no reader pass: {c['answer_records']} of them "
                "rank something"
                if "answer_queries" in c
                else f"{c['cached_queries']} training queries scored once, {c['score_seconds_per_query']:.2f} s "
                "a query on one core"
            )
            lines += [
                f"## {lang}, `{name}`: the curve ({scored}; {s['epochs']} passes, "
                f"{s['batch_size']} queries a step, lr {s['lr_retriever']:g}, tau {s['distill_tau']:g}, "
                f"negatives: {s.get('negatives', 'none')}, target: "
                + (
                    f"which chunks hold the masked span ({s['answer_nats']:g} nats over the rest)"
                    if s.get("target") in ("answer", "answer_free")
                    else "the reader's scores"
                )
                + ")",
                "",
                "Held-out: diag0's 200 spans, their cached dense top 8 re-ranked by the trained query tower "
                "(the reader's scores unchanged, no new search). 95% intervals in brackets.",
                "",
                "| queries | steps | " + " | ".join(label for _, label in LABELS) + " |",
                "|---" * (len(LABELS) + 2) + "|",
            ]
            for row in curve:
                cells = []
                for key, _ in LABELS:
                    v = row.get(key)
                    if v is None:
                        cells.append("")
                    elif f"{key}_low" in row:
                        cells.append(f"{v:.3f} [{row[key + '_low']:.3f}, {row[key + '_high']:.3f}]")
                    else:
                        cells.append(f"{v:.3f}")
                lines.append(f"| {row['queries']} | {row['steps']} | " + " | ".join(cells) + " |")
            lines.append("")
            if end is not None:
                lines += [
                    f"## {lang}, `{name}`: the end, a fresh search of the whole index (`evaluate-mlm --diagnose`)",
                    "",
                    "| | step 0 (diag0) | end |",
                    "|---|---|---|",
                ]
                lines += end_table_lines(end, END_ROWS_CACHED)
    if not sections:
        return None
    cmd = (
        "python -m benchmarks.realm.realm_learns diag0 en; python -m benchmarks.realm.realm_learns cached en "
        "--queries 2600 --part 0/2 (and --part 1/2 beside it, one core each); python -m "
        "benchmarks.realm.realm_learns cached en --sizes 250,500,1000,2600 --epochs 5 (OMP_NUM_THREADS=2); "
        "python -m benchmarks.realm.realm_learns report-cached"
    )
    targets = {k: v for k, v in TARGETS.items() if f"{k.split('_')[0]}-cached" in sections}
    out = write_result("realm_learns_cached", cmd, metrics, targets, runs=sections)
    (RESULTS / "realm_learns_cached.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
