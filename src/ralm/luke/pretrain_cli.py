"""`ralm luke pretrain` (being built)."""

from __future__ import annotations

import argparse


def register(group: argparse._SubParsersAction) -> None:
    """Add `pretrain` to the `ralm luke` group (nothing yet)."""
