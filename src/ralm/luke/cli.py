"""`ralm luke ...` subcommands (being built)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add `luke` to the top-level parser (nothing yet)."""
