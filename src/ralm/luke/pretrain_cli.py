"""`ralm luke pretrain`: LUKE/DaLUKE masked word + entity pre-training on a DocStore.

ralm luke pretrain CONFIG.toml [--out RUN] [--overwrite]    (a new run)
ralm luke pretrain CONFIG.toml --out RUN --resume           (continue from the newest intact checkpoint)
ralm luke pretrain --out RUN --resume                       (the same, with RUN's own config.toml)
ralm luke pretrain CONFIG.toml --nproc 4                    (= torchrun --nproc_per_node 4 -m ralm luke pretrain ...)
ralm luke pretrain CONFIG.toml --stats-only                 (entity annotations per 1,000 words, as JSON)

Flags override the config file; `--set NAME=VALUE` reaches any setting (TOML syntax). The parser
is built on every `ralm` command, so nothing heavy is imported until the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from ralm.cli_flags import add_overwrite, add_quiet, add_resume
from ralm.errors import RalmError

# flag -> setting, for the settings worth a flag of their own
FLAGS = {
    "docstore": str,
    "out": str,
    "mode": str,
    "backbone": str,
    "steps": int,
    "batch_size": int,
    "seed": int,
}


def config_from_args(args: argparse.Namespace):
    """The run's LukePretrainConfig: the config file (if any), then --set, then the flags."""
    from ralm.luke.pretrain_config import LukePretrainConfig, check_setting
    from ralm.typed_config import parse_value

    overrides: dict = {}
    known = set(LukePretrainConfig.__dataclass_fields__)
    for item in args.set or []:
        if "=" not in item:
            raise RalmError(f"--set {item!r}: write NAME=VALUE (e.g. --set auto_annotation=true)")
        key, val = (s.strip() for s in item.split("=", 1))
        if key not in known:
            raise RalmError(f"--set {key}: unknown setting; known: {', '.join(sorted(known))}")
        try:
            overrides[key] = check_setting(key, parse_value(val))
        except RalmError as exc:
            raise RalmError(f"--set {key}={val}: {str(exc).rsplit(': ', 1)[1]}") from None
    for name in FLAGS:
        v = getattr(args, name, None)
        if v is not None:
            overrides[name] = v
    if args.config:
        return LukePretrainConfig.from_toml(args.config, **overrides)
    return LukePretrainConfig.from_dict(overrides, source="command line")


def cmd_pretrain(args: argparse.Namespace) -> int:
    from ralm.luke.pretrain_config import CONFIG_FILE
    from ralm.train.distributed import torchrun_command, without_nproc

    if args.nproc is not None and args.nproc > 1 and "WORLD_SIZE" not in os.environ and not args.stats_only:
        cmd = torchrun_command(args.nproc, without_nproc(args.argv))
        print("launching: " + " ".join(cmd), flush=True)
        return subprocess.run(cmd, check=False).returncode
    if args.resume and args.config is None and args.out and not args.docstore:
        saved = Path(args.out) / CONFIG_FILE
        if saved.is_file():  # `--out RUN --resume`: the run's own config
            args.config = str(saved)
    cfg = config_from_args(args)
    if args.stats_only:
        from ralm.luke.pretrain import corpus_stats

        if not cfg.docstore:
            raise RalmError("--stats-only needs a docstore (--docstore or the config file)")
        print(json.dumps(corpus_stats(cfg), indent=2))
        return 0
    from ralm.luke.pretrain import pretrain

    run = pretrain(
        cfg, resume=args.resume, overwrite=args.overwrite, progress=not args.quiet, stop_after=args.stop_after
    )
    print(f"run: {run} (model/, entity_vocab.tsv, metrics.jsonl, checkpoints/, config.toml)")
    return 0


def register(group: argparse._SubParsersAction) -> None:
    """Add `pretrain` to the `ralm luke` group."""
    p = group.add_parser(
        "pretrain",
        help="masked word + masked entity pre-training (LUKE; DaLUKE with l < L) on a DocStore",
        description="Pre-train a LUKE/DaLUKE model from a TOML config and/or flags: entity spans from the "
        "DocStore's links (and, with auto_annotation = true, its auto-annotated spans), the most frequent "
        "entities as the entity vocabulary, 15% word + 15% entity masking. The run directory gets "
        'config.toml, entity_vocab.tsv, metrics.jsonl, checkpoints/ and model/. mode = "mlm" trains the '
        "same model on the same words without entity tokens (the plain-MLM baseline).",
    )
    p.add_argument("config", nargs="?", help="TOML config (top-level keys; see configs/luke_demo.toml)")
    helps = {
        "docstore": "the pre-training DocStore",
        "out": "run directory",
        "mode": "luke (words + entities) or mlm (same model, no entity tokens)",
        "backbone": "BERT-like HF model directory to start from (default: the bundled MiniLM)",
        "steps": "optimiser steps",
        "batch_size": "chunks per micro-batch over all processes",
        "seed": "seed of data order, masks, fresh weights and dropout",
    }
    from ralm.luke.pretrain_config import LukePretrainConfig

    for name, typ in FLAGS.items():
        default = LukePretrainConfig.__dataclass_fields__[name].default
        if default not in (None, ""):
            helps[name] += f" (default: {default})"
        p.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=typ,
            default=None,
            choices=["luke", "mlm"] if name == "mode" else None,
            help=helps[name],
        )
    p.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="any other setting in TOML syntax, e.g. --set auto_annotation=true --set entity_hidden_size=192 "
        "(repeatable)",
    )
    add_resume(p, "continue from the newest intact checkpoint of --out")
    add_overwrite(p, "delete an existing run directory and start over (after the checks)")
    add_quiet(p, "no progress bar")
    p.add_argument(
        "--stop-after", type=int, default=None, metavar="STEP", help="checkpoint and stop after this step"
    )
    p.add_argument(
        "--nproc", type=int, default=None, metavar="N", help="run N local processes through torchrun (DDP)"
    )
    p.add_argument(
        "--stats-only",
        action="store_true",
        help="print the DocStore's entity annotations per 1,000 words (links, links + auto) as JSON; train nothing",
    )
    p.set_defaults(func=cmd_pretrain)
