"""`ralm luke ...`: LUKE/DaLUKE pre-training, NER by span classification, Hugging Face export.

The group only wires the subcommands; each lives beside the code it calls:
`pretrain` in ralm.luke.pretrain_cli, `ner` in ralm.luke.ner_cli, `export` in ralm.luke.export_cli.
"""

from __future__ import annotations

import argparse

from ralm.cli_flags import add_command_group

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add `luke` and its subcommands to the top-level parser."""
    from ralm.luke import export_cli, ner_cli, pretrain_cli

    group = add_command_group(
        sub,
        "luke",
        "LUKE/DaLUKE entity-aware models: pretrain, ner, export",
        dest="luke_command",
        description="Entity-aware self-attention over word and entity tokens (LUKE; DaLUKE with a "
        "reduced entity dimension): masked word + entity pre-training on a DocStore, NER by span "
        "classification, export as a Hugging Face LUKE model.",
    )
    pretrain_cli.register(group)
    ner_cli.register(group)
    export_cli.register(group)
