"""Downstream commands: fine-tune/evaluate on a task, and compare result directories.

ralm finetune TASK DATA --model M --out DIR [--retrieval [--index IDX] [--tune-retriever]] [--seeds 1,2,3]
ralm table DIR [DIR...]          (BRENT Table 1 layout: models x task metrics, without / with retrieval)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ralm.cli_flags import (
    add_autocast,
    add_device,
    add_no_progress,
    add_out,
    add_overwrite,
    dataclass_from_args,
)
from ralm.formats.types import TASKS


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write seeds as integers, e.g. 1,2,3") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: give distinct seeds, e.g. 1,2,3")
    return seeds


def cmd_finetune(args: argparse.Namespace) -> int:
    from ralm.errors import RalmError
    from ralm.samples import sample_path
    from ralm.tasks.finetune import FinetuneConfig, finetune
    from ralm.tasks.tables import results_markdown

    if args.data is not None and args.sample is not None:
        raise RalmError("give either DATA or --sample, not both")
    if args.data is None and args.sample is None and args.train is None:
        raise RalmError("no data: give DATA (a file or directory), --train FILE or --sample NAME")
    if args.sample:
        args.data = str(sample_path(args.sample))
    return run_seed_job(args, FinetuneConfig, finetune, results_markdown, data=args.data)


def run_seed_job(
    args: argparse.Namespace,
    config: type,
    run: Callable[[Any], Any],
    markdown: Callable[[Any], str],
    **fixed: Any,
) -> int:
    """Run a job of seeds from its parsed arguments (`ralm finetune`, `ralm luke ner`): `config`
    (a dataclass) takes every argument named like one of its fields that was given (not None), then
    `fixed`, and progress/save from --no-progress/--no-save; `run(cfg)` returns the results, printed
    as `markdown(results)` with the paths of results.json and results.md in cfg.out."""
    cfg = dataclass_from_args(
        config, args, skip_none=True, **fixed, progress=not args.no_progress, save=not args.no_save
    )
    results = run(cfg)
    print(markdown(results), end="")
    print(f"results: {Path(cfg.out) / 'results.json'}, {Path(cfg.out) / 'results.md'}")
    return 0


def add_split_args(p: argparse.ArgumentParser) -> None:
    """Add --train, --dev, --test and --test-fraction: the splits of a seed job's data beside or
    instead of DATA (`ralm finetune`, `ralm luke ner`: they mean the same in both)."""
    p.add_argument("--train", help="train split file or directory (overrides what DATA holds)")
    p.add_argument("--dev", help="dev split file or directory")
    p.add_argument("--test", help="test split file or directory")
    p.add_argument("--test-fraction", type=float, help="carve a test split out of train when there is none")


def cmd_table(args: argparse.Namespace) -> int:
    from ralm.tasks.tables import comparison_table, read_results

    results = [read_results(p) for p in args.runs]
    text = comparison_table(results)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "finetune",
        help="fine-tune and evaluate a reader on QA, NER, POS, classification or open-domain QA",
        description="Fine-tune a model on a downstream task (BRENT Table 1, REALM open-QA), per seed, "
        "with or without retrieval; writes results.json and results.md into --out. The job works in "
        ".OUT.partial beside --out; if it is interrupted (Ctrl-C, a crash, kill -9), rerunning the same "
        "command keeps the seeds that finished and runs the rest, with the same results (a rerun with "
        "other options is refused unless --overwrite, which starts over).",
    )
    p.add_argument("task", choices=TASKS)
    p.add_argument(
        "data",
        nargs="?",
        help="dataset file or directory (its train/dev/test files are found by name), a datasets "
        "save_to_disk folder, Parquet or JSON lines",
    )
    p.add_argument("--sample", choices=("polarity",), help="a bundled dataset instead of DATA (classify)")
    p.add_argument(
        "--model",
        help="REALM run, exported reader, HF encoder directory, or a decoder-only LM (gemma3, smollm2, a .gguf "
        "file, a causal LM directory) (default: bundled MiniLM)",
    )
    add_out(
        p,
        "output directory (written only when every seed is done; a rerun resumes an interrupted job)",
        type=None,
    )
    p.add_argument("--name", help="row label in tables (default: the model directory's name)")
    p.add_argument("--dataset", help="column label in tables (default: the data path's name)")
    p.add_argument(
        "--format",
        choices=("squad", "conllu", "conll", "text", "openqa", "hf"),
        help="the reader (default: detected); hf: Hugging Face rows (save_to_disk Arrow, Parquet, JSON lines)",
    )
    p.add_argument(
        "--labels",
        help="names of class ids (ner_tags/pos_tags/label as ClassLabel ids) when the data does not name "
        "them: a file with one name a line in id order, a JSON list, or a dataset_info.json",
    )
    add_split_args(p)
    p.add_argument(
        "--dev-fraction",
        type=float,
        help="carve this share of train as dev when the data has no dev split (default 0.1; 0: no dev, "
        "the last state is tested)",
    )
    p.add_argument("--seeds", type=parse_seeds, help="comma-separated seeds, e.g. 1,2,3,4,5 (default 42)")
    p.add_argument("--epochs", type=float)
    p.add_argument("--max-steps", type=int, help="stop after this many optimiser steps")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--lr", type=float, help="reader learning rate")
    p.add_argument("--lr-head", type=float, help="task head learning rate (default: --lr)")
    p.add_argument("--lr-retriever", type=float, help="query tower learning rate (default 3 x --lr)")
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--warmup-ratio", type=float)
    p.add_argument("--schedule", choices=("linear", "cosine", "constant"))
    p.add_argument("--max-length", type=int, help="tokens of the task input (QA: one window)")
    p.add_argument("--doc-stride", type=int, help="overlap of QA context windows (default 128)")
    p.add_argument("--doc-length", type=int, help="tokens of a retrieved chunk appended to the input")
    p.add_argument("--retrieval", action="store_true", help="pair each input with its top-k chunks")
    p.add_argument("--index", help="index directory to retrieve from (default: the REALM run's own)")
    p.add_argument("--retriever", choices=("dense", "bm25"), help="dense (default) or bm25 (frozen)")
    p.add_argument("-k", type=int, help="documents per input, null document included (open-qa: chunks)")
    p.add_argument("--no-null-doc", dest="null_doc", action="store_false", default=None)
    p.add_argument("--tune-retriever", action="store_true", default=None, help="fine-tune the query tower")
    p.add_argument("--max-train", type=int, help="use at most N training examples (seeded sample)")
    p.add_argument("--max-eval", type=int, help="evaluate on the first N dev/test examples")
    p.add_argument("--eval-every", type=int, help="also evaluate on dev every N steps")
    p.add_argument("--patience", type=int, help="early stopping: evaluations without dev improvement")
    add_device(p, "auto, cpu, cuda, cuda:N")
    add_autocast(p)
    p.add_argument("--lang", help="answer normalisation language for QA metrics (default en)")
    p.add_argument(
        "--answers",
        choices=("auto", "string", "regex"),
        help="open-qa: match answers as strings or regular expressions (EM at the prediction's start, no F1; "
        'recall: found in the chunk); auto (default): regex for JSONL records with "answer_type": "regex" '
        'and for files whose name or folder name contains "curatedtrec" (DPR\'s curatedtrec-test.qa.csv), '
        "string otherwise",
    )
    p.add_argument(
        "--bidirectional",
        action="store_true",
        default=None,
        help="decoder-only --model: rebuild it with bidirectional attention (Gemma-family configs; "
        "refused where the config has no switch). Without it a causal LM reads only the left context",
    )
    p.add_argument(
        "--pooling",
        choices=("last", "mean"),
        help="classify on a decoder-only LM: last real token (default) or mean",
    )
    p.add_argument("--lora-r", type=int, help="decoder-only --model: train LoRA adapters of this rank (peft)")
    p.add_argument(
        "--train-embeddings",
        action="store_true",
        default=None,
        help="decoder-only --model: also train the token embeddings (frozen by default)",
    )
    p.add_argument(
        "--eval-only",
        action="store_true",
        default=None,
        help="no training: score --model as it is on dev/test (e.g. a saved seed-N/model directory)",
    )
    p.add_argument("--no-save", action="store_true", help="do not write the fine-tuned models")
    add_no_progress(p)
    add_overwrite(p, "replace an earlier finetune output, and an interrupted job with other options")
    p.set_defaults(func=cmd_finetune)

    t = sub.add_parser(
        "table",
        help="print several `ralm finetune` results side by side (BRENT Table 1 layout)",
        description="Rows: models (--name of each job); columns: dataset metric, without / with retrieval; "
        "cells: mean ± std over seeds on the test split.",
    )
    t.add_argument("runs", nargs="+", help="`ralm finetune --out` directories")
    add_out(t, "also write the Markdown table to this file", required=False, type=None)
    t.set_defaults(func=cmd_table)
