"""Weights in transit for the GPU pack: fp16 copies that travel, fp32 directories on arrival, and
the Gemma-3 GGUF reader converted once into a model directory.

`to_fp16(src, out)` / `to_fp32(src, out)`: a model directory (or a saved DualEncoder, one
sub-directory per tower) with its float32 safetensors halved for the trip, and back (values differ
from the originals by fp16 rounding, alike for every arm of a stage). `convert(part, src, out)`: a
causal LM given as a .gguf file written as a float32 model directory (config, generation config,
safetensors) or its tokenizer, so that later commands load it in seconds instead of re-parsing the
GGUF file's vocabulary (`python weights.py convert tokenizer|model SRC OUT [--config DIR]`).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

FP16_WEIGHTS = "model.fp16.safetensors"


def _weight_files(root: Path, name: str) -> list[Path]:
    return [w for w in [root / name, *root.glob(f"*/{name}")] if w.is_file() and not w.parent.is_symlink()]


def to_fp16(src: Path, out: Path) -> None:
    """A copy of a model directory (a saved DualEncoder: one per tower) with each model.safetensors's float
    weights as fp16 in FP16_WEIGHTS beside it; everything else as is."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out, symlinks=True, ignore=shutil.ignore_patterns("model.safetensors"))
    for w in _weight_files(src, "model.safetensors"):
        sd = load_file(str(w))
        half = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in sd.items()}
        save_file(half, str(out / w.parent.relative_to(src) / FP16_WEIGHTS))


def to_fp32(src: Path, out: Path) -> Path:
    """What to_fp16 wrote, back to a loadable DualEncoder directory with fp32 weights."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, out, symlinks=True, ignore=shutil.ignore_patterns(FP16_WEIGHTS))
    for w in _weight_files(src, FP16_WEIGHTS):
        sd = load_file(str(w))
        full = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in sd.items()}
        save_file(full, str(out / w.parent.relative_to(src) / "model.safetensors"), metadata={"format": "pt"})
    return out


def convert(part: str, src: Path, out: Path, config: Path | None = None) -> None:
    """Write `part` ("tokenizer" or "model": config, generation config, float32 safetensors) of the
    causal LM `src` (a .gguf file or a model directory) into `out`; `config`: a directory whose
    config.json is the model's (skips a read of the GGUF file)."""
    import torch
    from safetensors.torch import save_model

    from ralm.models.encoder import load_auto
    from ralm.models.quiet import quiet_gguf

    d, kw = (src.parent, {"gguf_file": src.name}) if src.suffix == ".gguf" else (src, {})
    out.mkdir(parents=True, exist_ok=True)
    if part == "tokenizer":
        load_auto("AutoTokenizer", d, local_files_only=True, **kw).save_pretrained(str(out))
        return
    if config is not None:
        kw["config"] = load_auto("AutoConfig", config, local_files_only=True)
    with quiet_gguf():
        model = load_auto("AutoModelForCausalLM", d, local_files_only=True, dtype=torch.float32, **kw)
    cfg = model.config  # as ralm.models.save.save_causal_lm writes it
    if hasattr(cfg, "gguf_file"):
        cfg.gguf_file = None
    cfg._name_or_path = ""
    cfg.to_json_file(str(out / "config.json"))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.to_json_file(str(out / "generation_config.json"))
    save_model(model, str(out / "model.safetensors"))


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="convert a carried GGUF causal LM (see convert)")
    ap.add_argument("cmd", choices=["convert"])
    ap.add_argument("part", choices=["tokenizer", "model"])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--config", type=Path, default=None)
    a = ap.parse_args()
    t = time.perf_counter()
    convert(a.part, a.src, a.out, a.config)
    print(f"{a.part} of {a.src} -> {a.out} in {time.perf_counter() - t:.1f} s", flush=True)
