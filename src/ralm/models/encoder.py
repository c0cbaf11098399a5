"""Encoders and task models from local directories: tower backbones, masked LMs, any Auto class.

* `load_encoder(path)`: the base model (`AutoModel`) of an encoder directory in float32, without
  BERT's pooler: a dual-encoder tower's or a ColBERT encoder's backbone (`encoder_dir` checks the
  directory first);
* `load_masked_lm(path)`: an `AutoModelForMaskedLM` and the weights it had to initialise (REALM's
  reader, LUKE's starting point; `or_base` falls back to the base model where a model type has
  no masked-LM class);
* `load_auto(cls, path, **kw)`: `transformers.<cls>.from_pretrained(path, **kw)` quietly, for the
  task heads (`AutoModelForTokenClassification`, ...) and saved task models.

Nothing here downloads: paths are local directories (`ralm.models.names.resolve_model_dir`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ralm.errors import RalmError
from ralm.models.names import resolve_model_dir
from ralm.models.quiet import quiet_transformers

__all__ = ["encoder_dir", "load_auto", "load_encoder", "load_masked_lm"]


def encoder_dir(path: str | os.PathLike | None) -> Path:
    """The model directory of an encoder argument (None or "minilm": the bundled MiniLM), which must
    hold a config.json."""
    d = resolve_model_dir(path)
    if not (d / "config.json").is_file():
        raise RalmError(
            f"{d}: not a Hugging Face model directory (no config.json); pass a directory written by "
            "save_pretrained or by DualEncoder.save"
        )
    return d


def load_encoder(path: str | os.PathLike | None):
    """AutoModel from a local directory in float32, without BERT's pooler (unused; DDP needs grads)."""
    import torch
    from transformers import AutoModel

    d = encoder_dir(path)
    with quiet_transformers():
        try:
            try:
                model = AutoModel.from_pretrained(
                    str(d), local_files_only=True, dtype=torch.float32, add_pooling_layer=False
                )
            except TypeError:  # the architecture has no pooler argument
                model = AutoModel.from_pretrained(str(d), local_files_only=True, dtype=torch.float32)
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RalmError(
                f"{d}: could not load a model ({first}); pass a Hugging Face model directory with weights"
            ) from None
    return model


def load_masked_lm(path: str | os.PathLike, *, or_base: bool = False, **kwargs: Any) -> tuple[Any, list[str]]:
    """(`AutoModelForMaskedLM` of `path`, the names of the weights it initialised because the
    checkpoint lacks them), `kwargs` to `from_pretrained`. `or_base`: where the model type has no
    masked-LM class (ValueError, KeyError), the base model (`AutoModel`) instead. transformers'
    errors propagate: callers word their own."""
    from transformers import AutoModel, AutoModelForMaskedLM

    try:
        model, info = AutoModelForMaskedLM.from_pretrained(str(path), output_loading_info=True, **kwargs)
    except (ValueError, KeyError):
        if not or_base:
            raise
        model, info = AutoModel.from_pretrained(str(path), output_loading_info=True, **kwargs)
    return model, list(info.get("missing_keys", []))


def load_auto(cls: str, path: str | os.PathLike, **kwargs: Any) -> Any:
    """`transformers.<cls>.from_pretrained(path, **kwargs)` with transformers' warnings and progress
    bars off; cls names a transformers class ("AutoModelForTokenClassification", "AutoModel",
    "AutoTokenizer", ...). transformers' errors propagate: callers word their own."""
    import transformers

    with quiet_transformers():
        return getattr(transformers, cls).from_pretrained(str(path), **kwargs)
