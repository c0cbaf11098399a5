"""Fast tokenizers of model directories and LM specs, and the fingerprint a DocStore records.

ralm needs fast tokenizers (chunking and span labels read their character offsets): both loaders
refuse a slow one in one line.
"""

from __future__ import annotations

import hashlib
import os

from ralm.errors import RalmError
from ralm.models.names import resolve_lm, resolve_model_dir
from ralm.models.quiet import quiet_transformers

__all__ = ["load_lm_tokenizer", "load_tokenizer", "tokenizer_fingerprint"]


def load_tokenizer(path: str | os.PathLike | None = None):
    """The fast tokenizer of a local model directory (chunking needs its character offsets)."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    d = resolve_model_dir(path)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RalmError(
            f"{d}: could not load a tokenizer ({first}); pass a model directory with tokenizer files"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    if not getattr(tok, "is_fast", False):
        raise RalmError(
            f"{d}: tokenizer is not a fast tokenizer; ralm needs tokenizer.json (convert it with `tokenizers`)"
        )
    return tok


def load_lm_tokenizer(spec: str | os.PathLike | None):
    """(fast tokenizer, its sha256 fingerprint) of an LM spec (`ralm.models.names.resolve_lm`: a
    short name, a GGUF file, a directory; None is the bundled MiniLM), without loading the model."""
    from transformers import AutoTokenizer

    d, gguf = resolve_lm(spec)
    try:
        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(str(d), gguf_file=gguf, local_files_only=True)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RalmError(
            f"{d}: could not load a tokenizer ({first}); pass a model directory with tokenizer files"
        ) from None
    if not getattr(tok, "is_fast", False):
        raise RalmError(f"{d}: not a fast tokenizer (no tokenizer.json); ralm needs character offsets")
    return tok, tokenizer_fingerprint(tok)


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of the tokenizer's full serialisation (vocab, normaliser, pre-tokeniser)."""
    return hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode("utf-8")).hexdigest()
