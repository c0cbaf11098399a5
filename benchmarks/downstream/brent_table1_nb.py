"""BRENT Table 1 in Norwegian: Gemma-3-270M as installed against the same model after causal-reader
REALM pre-training, with MiniLM for reference, on NorNE, UD Bokmål, NoReC and NorQuAD.

Rows (BRENT §4.1):
  * ``gemma-plain``: Gemma-3-270M as installed (the `gemma3` GGUF, saved once as a float32 HF
    directory under --work so every cell loads it quickly);
  * ``gemma-realm``: the reader of a Norwegian causal-reader REALM run, exported with `ralm
    export-reader` (--realm-reader; the committed table: issue 45's `all_answer` arm of
    `benchmarks/realm/realm_learns.py`), i.e. the same checkpoint after retrieval-augmented
    pre-training, extracted as an ordinary LM (BRENT_reader);
  * ``minilm``: the bundled English MiniLM, for reference.

Both Gemma rows use causal attention (no --bidirectional): each position reads only its left
context, so their rows are not comparable with a bidirectional encoder's (MiniLM's). Tagging
labels a word on its first sub-token, as BRENT does.

Columns (datasets read by path from ../shared/data, never copied):
  * NorNE NER entity F1 (train: the NDT-format train files; dev/test: NorNE's UD files);
  * UD Bokmål UPOS accuracy: trained on NorNE's UD dev file and tested on its UD test file
    (the same sentences as UD Bokmål, in one UD conversion; no UPOS train file is available here);
  * NoReC sentence-level binary sentiment: accuracy and macro-F1;
  * NorQuAD extractive QA: EM/F1 (start/end heads; no dev split is scored, the last state is tested).

CPU budget: every cell trains on the same seeded subset per seed (--max-train, NorQuAD
--qa-train) and scores the first --max-eval dev/test examples (NorQuAD --qa-eval); seeds 1,2,3.
Each cell is one `ralm finetune` output under --work/cells (kept when it has results.json, so a
cut-off grid resumes); --jobs cells run at once, one torch thread each.

Writes benchmarks/results/brent_table1_nb.json (metrics `<task>/<row>/<metric>` = mean over seeds,
`.../<metric>_std`, and `<task>/realm_minus_plain/<metric>`) and brent_table1_nb.md (`ralm table`).

Extra rows (--rows): ``gemma-plain-bi`` and ``gemma-realm-bi``, the same two checkpoints fine-tuned
with --bidirectional (Gemma-3's use_bidirectional_attention), so every position reads both sides.

Run: python -m benchmarks.downstream.brent_table1_nb [--jobs 2] [--rows gemma-plain,gemma-realm,minilm]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from benchmarks import common
from benchmarks.common import RESULTS, ROOT, ralm_stdout, script_command, write_result

DATA = ROOT.parent / "shared" / "data"
NAME = "brent_table1_nb"

# name: (task, data under ../shared/data or None, flags with {D} = the data folder, primary metrics)
TASKS: dict[str, tuple[str, str | None, list[str], tuple[str, ...]]] = {
    "norne": ("ner", "norne", ["--max-length", "128"], ("f1",)),
    "ud-bokmaal": (
        "pos",
        None,
        [
            "--train",
            "{D}/norne/ud/nob/no_bokmaal-ud-dev.conllu",
            "--test",
            "{D}/norne/ud/nob/no_bokmaal-ud-test.conllu",
            "--max-length",
            "128",
        ],
        ("accuracy",),
    ),
    "norec": ("classify", "norec_sentence/binary", ["--max-length", "96"], ("accuracy", "macro_f1")),
    "norquad": (
        "extractive-qa",
        None,
        [
            "--train",
            "{D}/norquad/all/training_dataset_flattened.reconstructed.json",
            "--test",
            "{D}/norquad/all/test_dataset_flattened.json",
            "--max-length",
            "384",
            "--lang",
            "nb",
            "--dev-fraction",
            "0",
        ],
        ("em", "f1"),
    ),
}
ROWS = ("gemma-plain", "gemma-realm", "minilm")
EXTRA_ROWS = ("gemma-plain-bi", "gemma-realm-bi")  # the Gemma rows with --bidirectional (not by default)
LABEL = {
    "gemma-plain": "Gemma-3-270M",
    "gemma-realm": "Gemma-3-270M + REALM (nb, 100 steps)",
    "minilm": "MiniLM (en)",
    "gemma-plain-bi": "Gemma-3-270M, bidirectional",
    "gemma-realm-bi": "Gemma-3-270M + REALM, bidirectional",
}
COST = {"norquad": 4, "norec": 2, "norne": 2, "ud-bokmaal": 1}  # relative, to start the long cells first


def cell_dir(work: Path, column: str, row: str) -> Path:
    """The `ralm finetune` (or generation) output folder of one table cell: column x row."""
    return work / "cells" / f"{column}-{row}"


def finished_cells(work: Path, tasks: list[str], rows: list[str]) -> list[tuple[str, str, Path]]:
    """(column, row, folder) of every cell of `tasks` x `rows`, then of the generation columns x `rows`,
    that has its results.json: what a table over those rows and tasks can show."""
    columns = [*tasks, *[g for g in GEN_MODES if g not in tasks]]
    cells = [(c, r, cell_dir(work, c, r)) for c in columns for r in rows]
    return [cell for cell in cells if (cell[2] / "results.json").is_file()]


def grid_complete(work: Path) -> bool:
    """Whether every cell of the default grid (TASKS x ROWS) has its results in `work`."""
    return all((cell_dir(work, t, r) / "results.json").is_file() for t in TASKS for r in ROWS)


# `ralm ARGS` offline on one thread, nothing said first (output=LOG: its output appended to LOG)
ralm = partial(common.ralm, env={**common.OFFLINE, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, say=None)


def ensure_plain(work: Path) -> Path:
    """Gemma-3-270M as installed, written once as a float32 HF directory (loads in seconds, not a
    GGUF de-quantisation per cell)."""
    out = work / "gemma3-plain"
    if not (out / "config.json").is_file():
        from ralm.models.causal import load_causal_lm
        from ralm.models.save import save_causal_lm

        lm, tok, _ = load_causal_lm("gemma3")
        save_causal_lm(
            lm, tok, out, card="# Gemma-3-270M as installed (gemma3 GGUF, de-quantised to float32)\n"
        )
    return out


def model_for(row: str, work: Path, realm_reader: Path) -> list[str]:
    if row.endswith("-bi"):
        return [*model_for(row[: -len("-bi")], work, realm_reader), "--bidirectional"]
    if row == "gemma-plain":
        return ["--model", str(ensure_plain(work))]
    if row == "gemma-realm":
        if not (realm_reader / "config.json").is_file():
            raise SystemExit(
                f"{realm_reader}: no exported reader; run python -m benchmarks.realm.realm_causal nb and export-reader"
            )
        return ["--model", str(realm_reader)]
    return []


def cell_flags(tname: str, row: str, args) -> list[str]:
    task, rel, extra, _ = TASKS[tname]
    qa = task == "extractive-qa"
    lr = args.lr_gemma if row.startswith("gemma") else args.lr
    flags = [
        "finetune",
        task,
        *([str(DATA / rel)] if rel else []),
        "--dataset",
        tname,
        "--name",
        LABEL[row],
        "--seeds",
        args.seeds,
        "--max-train",
        str(args.qa_train if qa else args.max_train),
        "--max-eval",
        str(args.qa_eval if qa else args.max_eval),
        "--epochs",
        str(args.qa_epochs if qa else args.epochs),
        "--batch-size",
        str(args.qa_batch_size if qa else args.batch_size),
        "--lr",
        str(lr),
        "--lr-head",
        str(10 * lr),
        "--no-save",
        "--no-progress",
        "--overwrite",
    ]
    return flags + [x.replace("{D}", str(DATA)) for x in extra]


# ----------------------------------------------------------------------------- NorQuAD by generation
GEN_MODES = {"norquad-cb": "closed-book", "norquad-rag": "rag"}  # dataset column -> rag eval mode
METRICS = {**{t: v[3] for t, v in TASKS.items()}, **{c: ("em", "f1") for c in GEN_MODES}}
# the four columns the target counts (primary metric last): the extractive head stays near F1 5-8
# at this budget, far behind, so NorQuAD counts by generation with passages (RAG k=3), as the issue allows
COUNTED = ("norne", "ud-bokmaal", "norec", "norquad-rag")


def gen_cells(args, work: Path) -> None:
    """NorQuAD answered by generation (`ralm rag train` + `rag eval`), per Gemma row and seed, both
    closed-book (the question alone: what the reader knows) and RAG k=3 (dense top 3 of one fixed
    index, --rag-index, the same for both rows: how the reader reads passages). Each (mode, row) is
    a cell directory whose results.json `ralm table` reads; `finished_cells` lists those done."""
    from benchmarks.retrieval.retriever_train import qa_jsonl

    train_q = qa_jsonl("train", work / "train.jsonl")
    test_q = qa_jsonl("test", work / "test.jsonl")
    index = Path(args.rag_index)
    rows = [r for r in ("gemma-plain", "gemma-realm") if r in args.rows.split(",")]
    for col in args.gen_cols.split(","):
        mode = GEN_MODES[col]
        for row in rows:
            out = cell_dir(work, col, row)
            if (out / "results.json").is_file():
                continue
            if mode == "rag" and not (index / "retrieval.json").is_file():
                raise SystemExit(
                    f"{index}: no index; run python -m benchmarks.realm.realm_causal downstream (index-plain)"
                )
            lm = model_for(row, work, Path(args.realm_reader))[1]
            records = []
            t_cell = time.perf_counter()
            for seed in [int(x) for x in args.seeds.split(",")]:
                sd = out.parent / f".{out.name}" / f"seed-{seed}"
                ev = sd / "eval"
                if not (ev / "results.json").is_file():  # one mode: rag eval writes into --out itself
                    t0 = time.perf_counter()
                    gen = sd / "gen"
                    where = (
                        ["--closed-book"]
                        if mode == "closed-book"
                        else ["--index", str(index), "--retriever", "dense", "-k", "3"]
                    )
                    ralm(
                        "rag",
                        "train",
                        str(train_q),
                        "--lm",
                        lm,
                        *where,
                        "--lang",
                        "nb",
                        "--epochs",
                        "1",
                        "--limit",
                        str(args.gen_train),
                        "--batch-size",
                        "4",
                        "--lora-r",
                        "16",
                        "--no-chat",
                        "--seed",
                        str(seed),
                        "--out",
                        str(gen),
                        "--no-progress",
                        output=work / "grid.log",
                    )
                    ralm(
                        "rag",
                        "eval",
                        str(test_q),
                        "--lm",
                        str(gen / "model"),
                        "--index",
                        str(index),
                        "--retriever",
                        "dense",
                        "--mode",
                        mode,
                        "-k",
                        "3",
                        "--lang",
                        "nb",
                        "--no-chat",
                        "--batch-size",
                        "16",
                        "--limit",
                        str(args.gen_eval),
                        "--out",
                        str(ev),
                        "--no-progress",
                        output=work / "grid.log",
                    )
                    shutil.rmtree(gen / "model", ignore_errors=True)  # 1 GB a seed; the scores are kept
                    (sd / "seconds").write_text(f"{time.perf_counter() - t0:.1f}\n")
                m = json.loads((ev / "results.json").read_text(encoding="utf-8"))["metrics"]
                secs = float((sd / "seconds").read_text()) if (sd / "seconds").is_file() else 0.0
                records.append(
                    {
                        "seed": seed,
                        "test": {"em": m["em"], "f1": m["f1"]},
                        "seconds": secs,
                        "train_examples": args.gen_train,
                        "test_examples": int(m["questions"]),
                    }
                )
            from ralm.tasks.finetune import summarize

            res = {
                "task": "rag-qa",
                "name": LABEL[row],
                "model": lm,
                "retrieval": mode == "rag",
                "dataset": "norquad-gen",
                "data": str(test_q),
                "primary": "em",
                "seeds": records,
                "summary": summarize(records),
                "mode": mode,
                "seconds": round(time.perf_counter() - t_cell, 1),
            }
            out.mkdir(parents=True, exist_ok=True)
            (out / "results.json").write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")


def run_grid(args, work: Path) -> None:
    """`ralm finetune` of every cell of --tasks x --rows without its results.json, --jobs at a time."""
    cells = [(t, r, cell_dir(work, t, r)) for t in args.tasks.split(",") for r in args.rows.split(",")]
    todo = [c for c in cells if not (c[2] / "results.json").is_file()]
    todo.sort(key=lambda c: -COST[c[0]] * (1 if c[1].startswith("gemma") else 0.15))
    for row in {r for _, r, _ in todo}:
        model_for(row, work, Path(args.realm_reader))  # make / check the models before the workers start
    log = work / "grid.log"

    def one(cell):
        tname, row, out = cell
        t0 = time.perf_counter()
        print(f"start {tname} / {row}", flush=True)
        try:
            ralm(
                *cell_flags(tname, row, args),
                "--out",
                str(out),
                *model_for(row, work, Path(args.realm_reader)),
                output=log,
            )
        except subprocess.CalledProcessError:
            print(f"FAILED {tname} / {row} (see {log})", flush=True)
            return
        print(f"done {tname} / {row}: {time.perf_counter() - t0:.0f} s", flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, todo))


def report(cells: list[tuple[str, str, Path]], args) -> None:
    table = ralm_stdout("table", *(c[2] for c in cells))
    metrics: dict[str, float] = {}
    seeds: dict[str, list[int]] = {}
    timing = ["", "| cell | seeds | train ex. | test ex. | seconds per seed |", "|" + " --- |" * 5]
    for tname, row, out in cells:
        res = json.loads((out / "results.json").read_text(encoding="utf-8"))
        for m in METRICS[tname]:
            st = res["summary"]["test"][m]
            metrics[f"{tname}/{row}/{m}"] = round(st["mean"], 2)
            metrics[f"{tname}/{row}/{m}_std"] = round(st["std"], 2)
        seeds[f"{tname}/{row}"] = [r["seed"] for r in res["seeds"]]
        s = res["seeds"]
        timing.append(
            f"| {tname} / {row} | {len(s)} | {s[0]['train_examples']} | {s[0]['test_examples']} | {res['seconds'] / len(s):.0f} |"
        )
    wins = 0
    compared = 0
    for tname in COUNTED:
        m = METRICS[tname][-1]
        for suffix in ("", "-bi"):
            a, b = (
                metrics.get(f"{tname}/gemma-realm{suffix}/{m}"),
                metrics.get(f"{tname}/gemma-plain{suffix}/{m}"),
            )
            if a is None or b is None:
                continue
            if not suffix:
                compared += 1
                wins += a >= b
            for mm in METRICS[tname]:
                metrics[f"{tname}/realm_minus_plain{suffix}/{mm}"] = round(
                    metrics[f"{tname}/gemma-realm{suffix}/{mm}"]
                    - metrics[f"{tname}/gemma-plain{suffix}/{mm}"],
                    2,
                )
    metrics["tasks_realm_at_least_plain"] = wins
    metrics["tasks_compared"] = compared
    text = table + "\n".join(timing) + "\n"
    (RESULTS / f"{NAME}.md").write_text(text, encoding="utf-8")
    print(text)
    write_result(
        NAME,
        script_command(__file__),
        metrics,
        {
            "tasks_realm_at_least_plain": ">= 3 of 4 (mean over seeds; primary metric: f1, accuracy, macro_f1, f1)"
        },
        seeds=seeds,
        settings={k: v for k, v in vars(args).items() if k not in ("work",)},
        notes=[
            "Gemma rows use causal attention (left context only); not comparable with MiniLM's bidirectional row.",
            "Same seeded training subset per seed for every row; the first --max-eval test examples.",
            "NorQuAD: extractive start/end heads, trained on --qa-train questions; no dev selection.",
            "Train/test counts per cell are in the table.",
            "NorQuAD generation: `rag train` (1 epoch, batch 4, LoRA r=16) on the first --gen-train train "
            "questions, `rag eval` on the first --gen-eval test questions; the counts of each cell are in the table.",
        ],
        table=table,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--rows", default=",".join(ROWS), help=f"of {', '.join(ROWS + EXTRA_ROWS)}")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--max-train", type=int, default=400)
    ap.add_argument("--max-eval", type=int, default=250)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--qa-train", type=int, default=48, help="NorQuAD training questions per seed")
    ap.add_argument("--qa-eval", type=int, default=40, help="NorQuAD test questions")
    ap.add_argument("--qa-epochs", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument(
        "--qa-batch-size",
        type=int,
        default=4,
        help="NorQuAD windows per step (16 x 384 tokens took 12 GB on Gemma-3)",
    )
    ap.add_argument("--lr", type=float, default=1e-4, help="MiniLM's lr (heads 10x)")
    ap.add_argument("--lr-gemma", type=float, default=5e-5, help="the Gemma rows' lr (heads 10x)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--realm-reader", default=str(ROOT / "runs" / "b35" / "nb-realm-reader"))
    ap.add_argument("--work", default=str(ROOT / "runs" / "b39"))
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument(
        "--gen", action="store_true", help="only the NorQuAD generation cells (closed-book, RAG k=3)"
    )
    ap.add_argument(
        "--gen-cols",
        default=",".join(GEN_MODES),
        help=f"with --gen: the generation columns to run, of {', '.join(GEN_MODES)}",
    )
    ap.add_argument("--gen-train", type=int, default=120, help="NorQuAD train questions for rag train")
    ap.add_argument("--gen-eval", type=int, default=200, help="first N NorQuAD test questions for rag eval")
    ap.add_argument(
        "--rag-index",
        default=str(ROOT / "runs" / "b35" / "index-plain"),
        help="the fixed dense index of the RAG cells (dpr-cc towers over the NorQuAD pool)",
    )
    args = ap.parse_args()
    bad = [c for c in args.gen_cols.split(",") if c not in GEN_MODES]
    if bad:
        ap.error(f"--gen-cols {args.gen_cols!r}: name columns among {', '.join(GEN_MODES)}")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.gen:
        gen_cells(args, work)
        return
    if args.report_only:
        report(finished_cells(work, args.tasks.split(","), args.rows.split(",")), args)
        return
    run_grid(args, work)
    if not grid_complete(work):
        print(
            f"{work}: not every default cell has results; the committed table is left as it is "
            "(write it with --report-only --rows gemma-plain,gemma-realm,minilm once the grid is complete)"
        )
        return
    # the table shows the whole default grid, not only the cells this run trained (a run of some
    # --rows or --tasks that completes the folder must not write a table of just those)
    report(finished_cells(work, list(TASKS), list(ROWS)), args)


if __name__ == "__main__":
    main()
