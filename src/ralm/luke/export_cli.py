"""`ralm luke export RUN OUT [--overwrite]`: a run's LUKE model as a Hugging Face LUKE directory.

RUN is a `ralm luke pretrain` run directory (or a model directory written by
ralm.luke.io.save_model). With l == L, OUT loads in transformers' LukeModel, LukeForMaskedLM and
LukeForEntitySpanClassification; with l < L it holds ralm's own format and the command says so.
An existing OUT is refused unless --overwrite. The work is in ralm.luke.export.
"""

from __future__ import annotations

import argparse

from ralm.cli_flags import add_overwrite


def cmd_export(args: argparse.Namespace) -> int:
    from ralm.luke.export import export_model

    export_model(args.run, args.out, overwrite=args.overwrite)
    return 0


def register(group: argparse._SubParsersAction) -> None:
    """Add `export` to the `ralm luke` group."""
    p = group.add_parser(
        "export",
        help="write a LUKE run's model as a Hugging Face LUKE directory",
        description="Write the model of a `ralm luke pretrain` run (or a LUKE model directory) to OUT as a "
        "Hugging Face LUKE model (config.json, model.safetensors, tokenizer files, entity_vocab.json) that "
        "LukeModel / LukeForMaskedLM / LukeForEntitySpanClassification load. A DaLUKE model with a reduced "
        "entity dimension (l < L) cannot be represented by HF LUKE and is written in ralm's own format.",
    )
    p.add_argument("run", metavar="RUN", help="run directory (with model/) or LUKE model directory")
    p.add_argument("out", metavar="OUT", help="output directory")
    add_overwrite(p, "replace an existing export in OUT")
    p.set_defaults(func=cmd_export)
