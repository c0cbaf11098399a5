"""`ralm luke ner DATA --model RUN --out DIR`: NER by LUKE/DaLUKE span classification, per seed.

A thin call into `ralm.luke.ner.luke_ner`; DATA, --train/--dev/--test, --format and --seeds mean
what they mean for `ralm finetune ner`, so the word-only row runs on the same splits and seeds.
"""

from __future__ import annotations

import argparse

from ralm.cli_flags import add_autocast, add_device, add_no_progress, add_out, add_overwrite

__all__ = ["register"]


def cmd_ner(args: argparse.Namespace) -> int:
    from ralm.errors import RalmError
    from ralm.luke.ner import LukeNerConfig, luke_ner, results_md
    from ralm.tasks.cli import run_seed_job

    if args.data is None and args.train is None:
        raise RalmError("no data: give DATA (a file or directory) or --train FILE")
    return run_seed_job(
        args, LukeNerConfig, luke_ner, results_md, data=args.data
    )  # DATA may be absent (--train)


def register(group: argparse._SubParsersAction) -> None:
    """Add `ner` to the `ralm luke` group."""
    from ralm.tasks.cli import add_split_args, parse_seeds

    p = group.add_parser(
        "ner",
        help="fine-tune and evaluate NER by span classification (LUKE/DaLUKE), mean ± std over seeds",
        description="Every word span up to --max-span-length words is a [MASK] entity; the classifier "
        "reads the entity output and the span's first and last word outputs; non-overlapping spans are "
        "kept by score. With --link-entities a span that names a vocabulary entity is that entity instead. Writes results.json/results.md in `ralm finetune`'s format (see `ralm table`).",
    )
    p.add_argument("data", nargs="?", help="NER dataset file or directory (train/dev/test found by name)")
    p.add_argument("--model", required=True, help="`ralm luke pretrain` run (or a LUKE model directory)")
    add_out(p, "output directory (written only when every seed is done)", type=None)
    p.add_argument("--tokenizer", help="tokenizer directory (default: the one saved with the run)")
    p.add_argument("--name", help="row label in tables (default: the run directory's name)")
    p.add_argument("--dataset", help="column label in tables (default: the data path's name)")
    p.add_argument("--format", choices=("conllu", "conll"))
    add_split_args(p)
    p.add_argument("--seeds", type=parse_seeds, help="comma-separated seeds (default 1,2,3,4,5)")
    p.add_argument("--epochs", type=float, help="default 15 (DaLUKE)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimiser steps")
    p.add_argument("--batch-size", type=int, help="sentences per step (default 8)")
    p.add_argument("--lr", type=float, help="default 5e-5")
    p.add_argument("--lr-head", type=float, help="span classifier learning rate (default: --lr)")
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--warmup-ratio", type=float, help="default 0.06")
    p.add_argument("--schedule", choices=("linear", "cosine", "constant"))
    p.add_argument("--max-length", type=int, help="word tokens per sentence (default 256)")
    p.add_argument("--max-span-length", type=int, help="longest candidate span in words (default 16)")
    p.add_argument("--max-entities", type=int, help="spans per forward row; more are chunked (default 128)")
    p.add_argument("--train-limit", type=int, help="use at most N training sentences (seeded sample)")
    p.add_argument("--max-eval", type=int, help="score the first N dev/test sentences")
    p.add_argument("--eval-every", type=int, help="also score dev every N steps")
    p.add_argument("--head-dropout", type=float, help="dropout before the span classifier (default 0.025)")
    p.add_argument("--patience", type=int, help="early stopping: evaluations without dev improvement")
    p.add_argument("--o-weight", type=float, help='cross-entropy weight of the "O" class (default 1)')
    p.add_argument(
        "--decode",
        choices=("argmax", "threshold"),
        help="argmax (default) or threshold: a span is an entity when 1 - P(O) exceeds a threshold tuned on dev",
    )
    p.add_argument(
        "--words-only",
        action="store_true",
        default=None,
        help="the span classifier without entity tokens: first and last word states only (DaLUKE's words_only)",
    )
    p.add_argument(
        "--context-words",
        type=int,
        help="read each sentence with up to N words of the sentences around it in its split (default 0)",
    )
    p.add_argument(
        "--link-entities",
        action="store_true",
        default=None,
        help="a candidate span whose words, joined by a space, name an entity of the run's entity_vocab.tsv "
        "(case-insensitive, as corpus auto-annotation matches) enters the model as that entity instead of "
        "[MASK] (DaLUKE's string-match annotation at NER time); other spans stay [MASK]",
    )
    p.add_argument("--eval-batch-size", type=int, help="chunk rows per forward at evaluation (default 32)")
    add_device(p, "auto, cpu, cuda, cuda:N")
    add_autocast(p)
    p.add_argument("--no-save", action="store_true", help="do not write the fine-tuned models")
    add_no_progress(p)
    add_overwrite(p, "replace an earlier output")
    p.set_defaults(func=cmd_ner)
