"""`ralm serve` (being built)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add `serve` to the top-level parser (nothing yet)."""
