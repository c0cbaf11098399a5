"""Quiet loading: transformers' warnings and progress bars, and the GGUF de-quantisation bar, off."""

from __future__ import annotations

import contextlib

__all__ = ["quiet_gguf", "quiet_transformers"]


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' warnings and its load/save progress bars inside the block."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def quiet_gguf():
    """No progress bar while transformers de-quantises a GGUF file (it calls tqdm directly)."""
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    old = getattr(gguf_utils, "tqdm", None)
    gguf_utils.tqdm = lambda it, *a, **k: it
    try:
        yield
    finally:
        gguf_utils.tqdm = old
