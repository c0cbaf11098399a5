"""BRENT Table 1 at laptop scale: fine-tune four models on QA, NER, POS and sentiment, 5 seeds each.

Rows (BRENT §4.1): the base MiniLM; the MLM-only baseline run (NorBERT2_50k's role: the same
continued pre-training without retrieval); the REALM reader extracted from a REALM run, without
retrieval (BRENT_reader); and the same REALM run with retrieval during fine-tuning (BRENT_Wiki:
its query tower tuned, its index fixed, k documents incl. the null document).

The two pre-training runs are `configs/demo.toml` (the English Wikipedia sample from gensim,
64-token chunks, MiniLM reader and towers) for --pretrain-steps steps each; they are made once
under --work and reused. Datasets are read by path from ../shared/data (never copied): BRENT's
Norwegian sets (NorQuAD, NorNE, UD Bokmål, NoReC sentence) and English ones (WNUT-17, UD EWT,
SST-2). Training sets are subsampled (--max-train, seeded per seed) and evaluation cut to the
first --max-eval examples of dev and test so the grid fits 2 CPU cores; the README table says so.
BRENT's learning rates are for full data sets and thousands of steps; at this scale (about 100
steps) every task uses --lr (tagging heads 10x, as BRENT Table 8), batch --batch-size, --epochs.
The with-retrieval row runs for --retrieval-tasks only (BRENT Table 3 ran retrieval for sentiment
alone; with k=4 a step reads ~8x the tokens).

Each cell is one `ralm finetune` output directory under --work/cells (skipped when it already has
results.json, so an interrupted grid resumes). Writes benchmarks/results/downstream.json and
benchmarks/results/downstream.md (the `ralm table` of every cell).

Run: python -m benchmarks.downstream.downstream [--tasks sst2,wnut17,ud-ewt,norquad] [--seeds 1,2,3,4,5]

The default grid is English (SST-2, WNUT-17, UD EWT) plus NorQuAD: the bundled MiniLM is English
and uncased, and both pre-training runs read English Wikipedia. On Norwegian NoReC the MiniLM
classifier stays at the majority class at this scale (dev macro-F1 40.7 at every evaluation of a
126-step, 1,000-example run, where SST-2 reaches 83 with the same settings), so the Norwegian sets
measure the backbone's language, not the pre-training; pass --tasks norne,ud-bokmaal,norec to
run them.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import partial
from pathlib import Path

from benchmarks import common
from benchmarks.common import ROOT, ralm_stdout, script_command, write_result

DATA = ROOT.parent / "shared" / "data"

# name: (task, path under ../shared/data, extra finetune flags)
TASKS: dict[str, tuple[str, str, list[str]]] = {
    "norquad": (
        "extractive-qa",
        "norquad/all",
        # one seed, 1 epoch: a NorQuAD context makes ~6.5 windows of 384 tokens, ~15 min a seed here
        [
            "--lang",
            "nb",
            "--max-length",
            "384",
            "--max-train",
            "200",
            "--max-eval",
            "100",
            "--epochs",
            "1",
            "--seeds",
            "1",
        ],
    ),
    "norne": ("ner", "norne", ["--max-length", "128"]),
    "ud-bokmaal": (
        "pos",
        "ud_norwegian_bokmaal",
        ["--train", "no_bokmaal-ud-dev.conllu", "--test", "no_bokmaal-ud-test.conllu", "--max-length", "128"],
    ),
    "norec": ("classify", "norec_sentence/binary", ["--max-length", "96", "--max-train", "500"]),
    "wnut17": ("ner", "wnut17", ["--max-length", "128", "--max-train", "1500", "--epochs", "3"]),
    "ud-ewt": ("pos", "ud_english_ewt", ["--max-length", "128", "--max-train", "1000"]),
    "sst2": ("classify", "sst2", ["--max-length", "96", "--max-train", "1000"]),
}
ROWS = ("minilm", "mlm", "realm-reader", "realm+ret")
# `ralm ARGS` offline, nothing said first, its output dropped (output=LOG: appended to LOG)
ralm = partial(common.ralm, env=common.OFFLINE, output=os.devnull, say=None)


def ensure_pretrained(work: Path, steps: int) -> tuple[Path, Path]:
    """The REALM and MLM-only runs of configs/demo.toml on the English sample (made once)."""
    corpus, realm, mlm = work / "corpus", work / "realm", work / "mlm"
    if not (corpus / "manifest.json").is_file():
        ralm(
            "corpus", "build", "--sample", "enwiki", "--out", str(corpus), "--chunk-size", "64", "--overwrite"
        )
    for run, mode in ((realm, "realm"), (mlm, "mlm")):
        if not list((run / "checkpoints").glob(f"step-{steps:07d}")):
            ralm(
                "pretrain",
                str(ROOT / "configs" / "demo.toml"),
                "--mode",
                mode,
                "--docstore",
                str(corpus),
                "--out",
                str(run),
                "--steps",
                str(steps),
                "--checkpoint-every",
                str(steps),
                "--overwrite",
            )
    return realm, mlm


def cell_args(row: str, realm: Path, mlm: Path) -> list[str]:
    return {
        "minilm": ["--name", "MiniLM"],
        "mlm": ["--model", str(mlm), "--name", "MLM-only run"],
        "realm-reader": ["--model", str(realm), "--name", "REALM reader"],
        "realm+ret": ["--model", str(realm), "--name", "REALM reader", "--retrieval", "--tune-retriever"],
    }[row]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="sst2,wnut17,ud-ewt,norquad")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument(
        "--retrieval-tasks",
        default="sst2",
        help="tasks that get the with-retrieval row (BRENT ran retrieval for sentiment only; it costs ~8x)",
    )
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--pretrain-steps", type=int, default=600)
    ap.add_argument(
        "--max-train", type=int, default=800, help="training examples per seed (tasks may lower it)"
    )
    ap.add_argument("--max-eval", type=int, default=300)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4, help="reader lr for every task (tagging heads: 10x)")
    ap.add_argument("--k", type=int, default=4, help="documents with retrieval, null included (BRENT: 4)")
    ap.add_argument("--doc-length", type=int, default=64)
    ap.add_argument("--work", default=str(ROOT / "runs" / "downstream"))
    ap.add_argument("--name", default="downstream")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    log = work / "grid.log"
    realm, mlm = ensure_pretrained(work, args.pretrain_steps)
    cells: list[tuple[str, str, Path]] = []
    for tname in args.tasks.split(","):
        task, rel, extra = TASKS[tname]
        data = DATA / rel
        if not data.exists():
            print(f"skip {tname}: {data} not found")
            continue
        extra = [
            str(data / x) if i and extra[i - 1] in ("--train", "--dev", "--test") else x
            for i, x in enumerate(extra)
        ]
        for row in args.rows.split(","):
            if row == "realm+ret" and tname not in args.retrieval_tasks.split(","):
                continue
            out = work / "cells" / f"{tname}-{row}"
            if not (out / "results.json").is_file():
                t0 = time.perf_counter()
                print(f"{tname} / {row} ...", flush=True)
                ralm(
                    "finetune",
                    task,
                    str(data),
                    "--out",
                    str(out),
                    "--overwrite",
                    "--no-save",
                    "--no-progress",
                    "--dataset",
                    tname,
                    "--seeds",
                    args.seeds,
                    "--max-train",
                    str(args.max_train),
                    "--max-eval",
                    str(args.max_eval),
                    "--epochs",
                    str(args.epochs),
                    "-k",
                    str(args.k),
                    "--doc-length",
                    str(args.doc_length),
                    "--batch-size",
                    str(args.batch_size),
                    "--lr",
                    str(args.lr),
                    *(["--lr-head", str(10 * args.lr)] if task in ("ner", "pos") else []),
                    *extra,
                    *cell_args(row, realm, mlm),
                    output=log,
                )
                print(f"  {time.perf_counter() - t0:.0f} s", flush=True)
            cells.append((tname, row, out))
    table = ralm_stdout("table", *(c[2] for c in cells))
    timing = [
        "",
        "| cell | seeds | train ex. | test ex. | seconds per seed (mean) | total s |",
        "|" + " --- |" * 6,
    ]
    for tname, row, out in cells:
        res = json.loads((out / "results.json").read_text())
        seeds = res["seeds"]
        timing.append(
            f"| {tname} / {row} | {len(seeds)} | {seeds[0]['train_examples']} | {seeds[0]['test_examples']} "
            f"| {res['seconds'] / len(seeds):.0f} | {res['seconds']:.0f} |"
        )
    text = table + "\n".join(timing) + "\n"
    (ROOT / "benchmarks" / "results" / f"{args.name}.md").write_text(text, encoding="utf-8")
    print(text)
    metrics: dict[str, float] = {}
    for tname, row, out in cells:
        res = json.loads((out / "results.json").read_text())
        split = "test" if "test" in res["summary"] else "dev"
        for m, st in res["summary"][split].items():
            metrics[f"{tname}/{row}/{split}_{m}_mean"] = round(st["mean"], 2)
            metrics[f"{tname}/{row}/{split}_{m}_std"] = round(st["std"], 2)
        metrics[f"{tname}/{row}/seconds"] = res["seconds"]
    write_result(
        args.name,
        script_command(__file__),
        metrics,
        {"table": "BRENT Table 1 layout over 5 seeds; no winner required (issue 14)"},
        settings={
            "seeds": args.seeds,
            "pretrain_steps": args.pretrain_steps,
            "max_train": args.max_train,
            "max_eval": args.max_eval,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "retrieval_tasks": args.retrieval_tasks,
            "task_flags": {t: TASKS[t][2] for t in args.tasks.split(",")},
            "k": args.k,
            "doc_length": args.doc_length,
        },
        table=table,
    )


if __name__ == "__main__":
    main()
