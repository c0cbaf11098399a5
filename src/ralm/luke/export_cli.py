"""`ralm luke export` (being built)."""

from __future__ import annotations

import argparse


def register(group: argparse._SubParsersAction) -> None:
    """Add `export` to the `ralm luke` group (nothing yet)."""
