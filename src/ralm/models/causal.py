"""Causal LMs from an LM spec: the decoder-only loader, and SUREALM's (encoders run as decoders).

An LM spec is a short name (``"gemma3"``, ``"smollm2"``), a local directory
`AutoModelForCausalLM` loads (Llama, Qwen2, Gemma3, GPT-2, ...), a directory holding one ``.gguf``
file, or a ``.gguf`` file (`ralm.models.names`). Nothing here downloads.

* `load_causal_lm(spec)`: (float32 decoder-only LM in train mode, its fast tokenizer, a display
  name); encoders and encoder-decoders are refused in one line (`ralm.models.names.check_causal`).
  The frozen LMs, RAG generators, REALM's causal reader and decoder bodies load through it;
* `load_as_causal_lm(spec)`: any LM spec as a causal LM, a BERT-style encoder with
  ``is_decoder=True`` and a fresh LM head (SUREALM's small-scale rows; ``"minilm"`` and None
  give the bundled MiniLM); no tokenizer (`ralm.models.tokenizers.load_lm_tokenizer`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ralm.errors import RalmError
from ralm.models.names import NAMED_LMS, check_causal, resolve_lm
from ralm.models.quiet import quiet_gguf, quiet_transformers

__all__ = ["load_as_causal_lm", "load_causal_lm", "load_causal_lm_later"]

ENCODERS_AS_DECODERS = ("bert", "roberta", "xlm-roberta", "electra", "distilbert")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def load_causal_lm(
    spec: str | os.PathLike, *, gguf_file: str | None = None, what: str = "LM"
) -> tuple[Any, Any, str]:
    """(float32 causal LM in train mode, its fast tokenizer, a display name) of `spec`; one-line
    RalmError for anything that is not a decoder-only LM or has no fast tokenizer. `gguf_file`
    names the .gguf file inside a directory holding several (`ralm.models.names.resolve_lm`)."""
    load, tok, _, name = load_causal_lm_later(spec, gguf_file=gguf_file, what=what)
    return load(), tok, name


def load_causal_lm_later(
    spec: str | os.PathLike, *, gguf_file: str | None = None, what: str = "LM"
) -> tuple[Callable[[], Any], Any, Any, str]:
    """(load_model, fast tokenizer, config, display name) of `spec`: the tokenizer and the config
    now, the float32 weights when `load_model()` is called. A served model whose greedy decoding
    runs in llama.cpp may never need its torch weights (`ralm.frozen.lm.load_frozen_lm`), and
    Gemma-3's take seconds to build. Refusals as `load_causal_lm`, the weights' own when loaded."""
    if str(spec) == "minilm" and gguf_file is None:
        raise RalmError(f"minilm is an encoder, not a causal LM; the {what} must be a decoder-only LM")
    d, gguf = resolve_lm(spec, gguf_file)
    name = str(spec) if str(spec) in NAMED_LMS else str(d / gguf) if gguf else str(d)
    check_causal(d, gguf, what)
    cached = None
    if gguf:
        from ralm.models import gguf_cache

        cached = gguf_cache.lookup(d / gguf)
        if cached is not None:  # de-quantised before: read the safetensors copy (seconds, not a minute)
            d, gguf = cached, None
    tok = _tokenizer(d, gguf)
    config = _config(d, gguf)
    if getattr(config, "is_encoder_decoder", False):
        raise RalmError(f"{d}: an encoder-decoder model; the {what} must be a decoder-only LM")
    return (lambda: _weights(d, gguf, tok, as_gguf=cached is not None)), tok, config, name


def _tokenizer(d: Path, gguf: str | None) -> Any:
    """The fast tokenizer in `d` (or in its GGUF file); one-line RalmError without one."""
    from transformers import AutoTokenizer

    kw: dict = {"gguf_file": gguf} if gguf else {}
    try:
        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True, **kw)
    except (OSError, ValueError, KeyError) as exc:
        raise RalmError(f"{d}: could not load a tokenizer ({_first_line(exc)[:200]})") from None
    if not getattr(tok, "is_fast", False):
        raise RalmError(f"{d}: not a fast tokenizer (no tokenizer.json); ralm needs character offsets")
    return tok


def _config(d: Path, gguf: str | None) -> Any:
    """The model configuration in `d` (or in its GGUF file's metadata)."""
    from transformers import AutoConfig

    kw: dict = {"gguf_file": gguf} if gguf else {}
    try:
        with quiet_transformers(), quiet_gguf():
            return AutoConfig.from_pretrained(str(d), local_files_only=True, **kw)
    except (OSError, ValueError, KeyError) as exc:
        raise RalmError(f"{d}: cannot be loaded as a causal LM ({_first_line(exc)[:200]})") from None


def _weights(d: Path, gguf: str | None, tok: Any, *, as_gguf: bool = False) -> Any:
    """The float32 causal LM in `d` (de-quantised from its GGUF file, then kept in the GGUF cache
    with `tok`); one-line RalmError for weights that do not load as a causal LM. as_gguf: `d` is the
    GGUF cache's copy of a GGUF file, loaded as that file's load would be."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM

    kw: dict = {"gguf_file": gguf} if gguf else {}
    # transformers' GGUF load leaves the global generator alone and its safetensors load draws from
    # it: the cached copy of a GGUF file loads inside fork_rng, so a run seeded before the load
    # draws the same dropout whether the cache was cold or warm
    keep = torch.random.fork_rng(devices=[]) if as_gguf else contextlib.nullcontext()
    try:
        with quiet_transformers(), quiet_gguf(), keep:
            model = AutoModelForCausalLM.from_pretrained(
                str(d), local_files_only=True, dtype=torch.float32, **kw
            )
    except (OSError, ValueError, KeyError) as exc:
        raise RalmError(f"{d}: cannot be loaded as a causal LM ({_first_line(exc)[:200]})") from None
    if gguf:
        from ralm.models import gguf_cache

        gguf_cache.store(d / gguf, model, tok)
    return model


def _model_type(d: Path) -> str | None:
    try:
        return json.loads((d / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, json.JSONDecodeError):
        return None


def load_as_causal_lm(spec: str | os.PathLike | None, *, config_only: bool = False):
    """A causal LM in float32 from an LM spec; a fresh LM head when the checkpoint is an encoder
    without one (see the module docstring). `config_only`: random weights of the same shape."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d, gguf = resolve_lm(spec)
    kw: dict = {"gguf_file": gguf} if gguf else {}
    if _model_type(d) in ENCODERS_AS_DECODERS:
        kw["is_decoder"] = True
    try:
        with quiet_transformers():
            if config_only:
                cfg = AutoConfig.from_pretrained(str(d), local_files_only=True, **kw)
                model = AutoModelForCausalLM.from_config(cfg)
            else:
                model = AutoModelForCausalLM.from_pretrained(
                    str(d), local_files_only=True, dtype=torch.float32, **kw
                )
    except (OSError, ValueError, KeyError) as exc:
        raise RalmError(
            f"{d}: cannot be loaded as a causal LM ({_first_line(exc)[:200]}); pass a decoder or "
            "BERT-style directory"
        ) from None
    return model
