"""The torch device a command runs on, from its --device value, with one clear error for a bad one."""

from __future__ import annotations

import torch

from ralm.errors import RalmError

__all__ = ["resolve_device"]


def resolve_device(name: str) -> torch.device:
    """ "auto" -> the CUDA GPU when there is one, else the CPU; "cpu", "cuda", "cuda:N" as given.

    RalmError (one line, exit 2 in the CLI) for a name torch does not know, or for CUDA on a machine
    without a CUDA GPU (instead of torch's error at the first tensor moved there)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise RalmError(f"device {name!r}: use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RalmError(f"device {name!r}: no CUDA GPU is available here; use --device cpu")
    return dev
