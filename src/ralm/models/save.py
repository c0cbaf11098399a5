"""Saving a causal LM (GGUF-loaded ones too) as a directory transformers loads."""

from __future__ import annotations

import os
from pathlib import Path

from ralm.atomic import staged_dir

__all__ = ["save_causal_lm"]


def save_causal_lm(model, tokenizer, out: str | os.PathLike, card: str | None = None) -> Path:
    """OUT/ with config.json, model.safetensors (tied weights once) and the tokenizer, atomically;
    `AutoModelForCausalLM.from_pretrained(OUT)` loads it (also when the model came from a GGUF
    file, whose own `save_pretrained` refuses); `card` is written as its README.md model card."""
    from safetensors.torch import save_model

    with staged_dir(out) as tmp:
        cfg = model.config
        for attr in ("gguf_file", "_name_or_path"):
            if hasattr(cfg, attr):
                setattr(cfg, attr, "" if attr == "_name_or_path" else None)
        cfg.to_json_file(str(tmp / "config.json"))
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.to_json_file(str(tmp / "generation_config.json"))
        save_model(model, str(tmp / "model.safetensors"))
        tokenizer.save_pretrained(str(tmp))
        if card is not None:
            from ralm.model_card import write_model_card

            write_model_card(tmp, card)
    return Path(out)
