"""Issue 45's downstream 2x2 (`realm_learns.py downstream nb NAME`): does REALM pre-training help
open-domain QA in Norwegian once the reader is fine-tuned for it?

NorQuAD-open with `ralm rag train`, reader by towers:

  reader   plain   Gemma-3-270M as installed
           realm   the reader of the nb arm NAME (`export-reader` of its last checkpoint)
  towers   start   the dpr-cc NorQuAD encoder the arm started from (realm_causal.py's towers stage)
           realm   the arm's towers after REALM pre-training

Each cell is fine-tuned with SEEDS seeds at the same budget (the first --rag-limit training
questions, --rag-epochs epochs, batch 8, LoRA r = 16, the dense top 3 of the cell's towers over the
5,859-chunk NorQuAD pool), then `ralm rag eval` scores RAG k = 3 on the first --test-limit of the 472
test questions (all by default): EM and F1, their mean and standard deviation over the seeds. The
issue's metric compares the REALM reader with REALM towers against the plain reader with the
starting towers (`nb_downstream_f1_realm_minus_plain`, target >= 0).

Every run resumes (`rag train --save-every`) and is skipped when its results exist. `--part I/P`
runs the cells-and-seeds I, I + P, ... of the 12 (two processes side by side: 0/2 and 1/2);
`--cells` limits the runs to some cells (e.g. plain-start,realm-realm: the issue's metric first). The
plain reader with the starting towers is the same for every arm: its runs live once under --work
(`nb-downstream/`) and run before the arm has finished; the other cells under the arm's folder.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from benchmarks.common import ralm, read_json

READERS = ("plain", "realm")
TOWERS = ("start", "realm")
SEEDS = (0, 1, 2)
K = 3


CELLS = tuple(f"{r}-{t}" for r in READERS for t in TOWERS)


def _jobs(cells: tuple[str, ...] = CELLS) -> list[tuple[str, str, int]]:
    """Every (reader, towers, seed) of `cells`, seeds outermost: a stopped run leaves whole seeds."""
    return [(r, t, s) for s in SEEDS for r in READERS for t in TOWERS if f"{r}-{t}" in cells]


def cells_of(text: str) -> tuple[str, ...]:
    """The --cells flag: comma-separated READER-TOWERS names, e.g. plain-start,realm-realm."""
    cells = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in cells if c not in CELLS]
    if bad or not cells:
        raise SystemExit(f"--cells {text!r}: name cells among {', '.join(CELLS)}, comma-separated")
    return cells


def exported(work: Path, run_work: Path, name: str) -> tuple[Path, Path]:
    """The arm's reader and towers as `export-reader` writes them (made when missing)."""
    reader, towers = run_work / f"nb-{name}-reader", run_work / f"nb-{name}-towers"
    if not (towers / "ralm_encoder.json").is_file() or not (reader / "config.json").is_file():
        ralm("export-reader", run_work / f"nb-{name}", reader, "--retriever-out", towers, "--overwrite")
    return reader, towers


def dense_index(towers: Path, pool: Path, out: Path) -> Path:
    """The dense index of `pool` by `towers` at `out`, built once."""
    if not (out / "retrieval.json").is_file():
        ralm("index", "build", pool, "--encoder", towers, "--out", out, "--overwrite", "--quiet")
    return out


def rag_train(
    questions: Path, lm: object, index: Path, k: int, epochs: float, limit: int, out: Path, *extra
) -> None:
    """`ralm rag train` as the downstream rows run it: `lm` on `limit` Norwegian `questions`, `k`
    chunks dense-retrieved from `index`, batch 8, LoRA r=16, no chat template; `extra` before --out."""
    flags = ["--epochs", epochs, "--limit", limit, "--batch-size", 8, "--lora-r", 16, "--no-chat", *extra]
    ralm(
        "rag",
        "train",
        questions,
        "--lm",
        lm,
        "--index",
        index,
        "--retriever",
        "dense",
        "-k",
        k,
        "--lang",
        "nb",
        *flags,
        "--out",
        out,
        "--no-progress",
    )


def rag_eval(
    questions: Path,
    model: Path,
    index: Path,
    modes: tuple[str, ...],
    k: int,
    name: str,
    out: Path,
    limit: int | None,
) -> None:
    """`ralm rag eval` of the downstream rows: `model` on the Norwegian test `questions` in `modes`, `k`
    chunks dense-retrieved from `index`, batch 16, no chat template; the first `limit` questions (None: all)."""
    flags = ["--lang", "nb", "--no-chat", "--batch-size", 16, "--name", name, "--out", out, "--no-progress"]
    ralm(
        "rag",
        "eval",
        questions,
        "--lm",
        model,
        "--index",
        index,
        "--retriever",
        "dense",
        "--mode",
        *modes,
        "-k",
        k,
        *flags,
        *([] if limit is None else ["--limit", limit]),
    )


def run_folder(work: Path, run_work: Path, name: str, reader: str, towers: str, seed: int) -> Path:
    """Where one fine-tuning run lives. The plain reader with the starting towers is the same run for
    every arm, so it lives once under `work`; the other cells under the arm's folder."""
    if (reader, towers) == ("plain", "start"):
        return work / "nb-downstream" / f"plain-start-seed{seed}"
    return run_work / f"nb-{name}-downstream" / f"{reader}-{towers}-seed{seed}"


def results_file(run: Path) -> Path:
    """Where one run's `ralm rag eval` (RAG k = K) writes its results: the stage's --out folder and
    the path the record reads are both this one."""
    return run / "eval" / f"rag-k{K}" / "results.json"


def reading_split(predictions: Path) -> dict[str, float]:
    """From one run's `rag eval` predictions.jsonl, the reader's share apart from the towers': the
    percentage of questions with an answer string in one of the K passages (`in_top`), and the
    mean F1 (percent) over those questions and over the others. A reader that reads passages worse
    loses F1 on the first group at the same `in_top`; weaker towers lower `in_top`."""
    rows = [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines() if line]
    hit = [float(r["f1"]) for r in rows if any(r["answer_in_passages"])]
    miss = [float(r["f1"]) for r in rows if not any(r["answer_in_passages"])]
    return {
        "in_top": 100.0 * len(hit) / len(rows),
        "f1_in_top": 100.0 * statistics.fmean(hit) if hit else math.nan,
        "f1_not_in_top": 100.0 * statistics.fmean(miss) if miss else math.nan,
    }


def downstream_stage(
    work: Path,
    name: str,
    run_work: Path,
    limit: int,
    epochs: float,
    test_limit: int | None = None,
    part: tuple[int, int] = (0, 1),
    cells: tuple[str, ...] = CELLS,
) -> None:
    """Fine-tune and evaluate this process's share of the runs of `cells` (by default the whole 2x2)
    x SEEDS of the nb arm `name`. The share is taken over those runs only, so two cells split in
    two parts give each process one cell's seeds."""
    from benchmarks.retrieval.retriever_train import qa_jsonl

    train_q = qa_jsonl("train", work / "train.jsonl")
    test_q = qa_jsonl("test", work / "test.jsonl")
    lms: dict[str, str | Path] = {"plain": "gemma3"}
    indexes = {"start": dense_index(work / "dpr-cc" / "encoder", work / "pool", work / "index-dpr-cc")}
    if (run_work / f"nb-{name}" / "eval_mlm.json").is_file():
        reader, towers = exported(work, run_work, name)
        lms["realm"] = reader
        indexes["realm"] = dense_index(towers, work / "pool", run_work / f"nb-{name}-index")
    else:  # the baseline cell needs no arm: it can run while the arm trains
        print(
            f"{run_work / f'nb-{name}'}: not trained and evaluated yet; only the plain-start runs", flush=True
        )
    # the budget is fixed before any run: a folder that ran at another budget is refused, not mixed
    budget = {"rag_limit": limit, "rag_epochs": epochs, "test_limit": test_limit, "k": K}
    runnable = {(r, t) for r, t, _ in _jobs(cells) if r in lms and t in indexes}
    for folder in {run_folder(work, run_work, name, r, t, 0).parent for r, t in runnable}:
        f = folder / "budget.json"
        if f.is_file() and read_json(f) != budget:
            raise SystemExit(
                f"{folder}: its runs used the budget {read_json(f)}, not {budget}; pass those flags"
            )
        folder.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(budget) + "\n", encoding="utf-8")
    i, p = part
    for n, (r, t, seed) in enumerate(_jobs(cells)):
        if n % p != i or (r, t) not in runnable:
            continue
        d = run_folder(work, run_work, name, r, t, seed)
        gen = d / "rag"
        if not (gen / "model" / "config.json").is_file():
            rag_train(train_q, lms[r], indexes[t], K, epochs, limit, gen, "--seed", seed, "--save-every", 5)
        res = results_file(d)
        if not res.is_file():  # `rag eval --out` writes results.json in res's folder
            rag_eval(
                test_q, gen / "model", indexes[t], ("rag",), K, f"{r}-{t}-seed{seed}", res.parent, test_limit
            )


def downstream_record(work: Path, run_work: Path, name: str) -> dict | None:
    """Per cell `READER-TOWERS`: EM and F1 mean and sample standard deviation over the seeds that
    finished (the deviation from two seeds on), their number and the test questions; and
    `f1_realm_minus_plain` (realm-realm's mean F1 minus plain-start's) when both cells have every
    seed. None when no run finished; SystemExit when the cells' folders record different budgets."""
    cells: dict[str, dict] = {}
    budgets = []
    for r in READERS:
        for t in TOWERS:
            folders = [run_folder(work, run_work, name, r, t, seed) for seed in SEEDS]
            done = [f for d in folders if (f := results_file(d)).is_file()]
            res = [read_json(f)["metrics"] for f in done]
            if (folders[0].parent / "budget.json").is_file():
                budgets.append(read_json(folders[0].parent / "budget.json"))
            if not res:
                continue
            cell: dict[str, float] = {"seeds": len(res), "questions": res[0]["questions"]}
            for key in ("em", "f1"):
                values = [float(m[key]) for m in res]
                cell[f"{key}_mean"] = statistics.fmean(values)
                if len(values) > 1:
                    cell[f"{key}_std"] = statistics.stdev(values)
            preds = [f.parent / "predictions.jsonl" for f in done]
            if all(f.is_file() for f in preds):  # every finished seed, or no split
                splits = [reading_split(f) for f in preds]
                for key in splits[0]:
                    cell[f"{key}_mean"] = statistics.fmean(s[key] for s in splits)
            cells[f"{r}-{t}"] = cell
    if not cells:
        return None
    rec: dict = {"cells": cells}
    if budgets:
        rec["budget"] = budgets[0]
        if any(b != budgets[0] for b in budgets):
            raise SystemExit(
                f"nb-{name}: the downstream cells ran at different budgets ({budgets}); rerun them"
            )
    a, b = cells.get("realm-realm"), cells.get("plain-start")
    if a and b and a["seeds"] == b["seeds"] == len(SEEDS):
        rec["f1_realm_minus_plain"] = a["f1_mean"] - b["f1_mean"]
    return rec


def downstream_lines(rec: dict, name: str) -> list[str]:
    """The 2x2 as a markdown table (EM / F1, mean +- std over the seeds)."""
    lines = [
        f"## nb: downstream, NorQuAD-open RAG k = {K} after `ralm rag train` (arm `{name}`)",
        "",
        "| reader \\ towers | start (dpr-cc) | realm |",
        "|---|---|---|",
    ]
    for r in READERS:
        cells = []
        for t in TOWERS:
            c = rec["cells"].get(f"{r}-{t}")
            if c is None:
                cells.append("not run")
                continue
            em, f1 = (
                f"{c[f'{k}_mean']:.1f}" + (f" +- {c[f'{k}_std']:.1f}" if f"{k}_std" in c else "")
                for k in ("em", "f1")
            )
            n = int(c["seeds"])
            cells.append(f"{em} / {f1} ({n} seed{'s' if n > 1 else ''})")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    split = {c: v for c, v in rec["cells"].items() if "f1_in_top_mean" in v}
    if split:
        lines += [
            "",
            f"Reading apart from retrieval (means over the seeds): the share of questions with an answer "
            f"in the top {K}, and F1 on those and on the rest.",
            "",
            f"| reader-towers | answer in top {K} | F1 when in top {K} | F1 when not |",
            "|---|---|---|---|",
        ]
        for c, v in split.items():
            lines.append(
                f"| {c} | {v['in_top_mean']:.1f}% | {v['f1_in_top_mean']:.1f} | {v['f1_not_in_top_mean']:.1f} |"
            )
    if "f1_realm_minus_plain" in rec:
        lines += [
            "",
            f"F1, REALM reader and towers minus plain reader and starting towers: "
            f"{rec['f1_realm_minus_plain']:+.2f}",
        ]
    lines.append("")
    return lines
