"""`ralm luke ner` (being built)."""

from __future__ import annotations

import argparse


def register(group: argparse._SubParsersAction) -> None:
    """Add `ner` to the `ralm luke` group (nothing yet)."""
