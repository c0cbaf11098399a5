"""ralm's own on-disk format for LUKE / DaLUKE models: `save_model` / `load_model`.

A model directory holds
    config.json        {"format": "ralm_luke", "format_version": 1, "model_class": "LukeForPretraining",
                        "config": LukeConfig.to_dict(), "num_labels": n (span classifier only),
                        "extra": provenance such as the backbone directory and whatever the caller adds}
    model.safetensors  the state dict (no tensor stored twice: the decoders are tied at forward time)
    tokenizer files    copied from the backbone (vocab.txt, tokenizer.json, ...) when it is known,
                       so `ralm.models.tokenizers.load_tokenizer(model_dir)` works on the directory alone.
It is written into `.NAME.tmp-PID` beside the target and renamed into place; an old model
directory at the target is replaced only after the new one is complete. Every problem a user can
cause (missing dir, foreign or corrupt files, a config that does not validate, e.g. l > L) is a
RalmError naming the file. Hugging Face's format is `ralm.luke.export`'s business.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ralm.atomic import temp_sibling
from ralm.errors import RalmError
from ralm.luke.config import LukeConfig
from ralm.luke.model import EntityAwareModel, LukeForPretraining, LukeForSpanClassification

__all__ = [
    "save_model",
    "load_model",
    "read_model_info",
    "is_model_dir",
    "write_safetensors",
    "TOKENIZER_FILES",
    "FORMAT",
]

FORMAT, FORMAT_VERSION = "ralm_luke", 1
CONFIG, WEIGHTS = "config.json", "model.safetensors"
CLASSES = {c.__name__: c for c in (LukeForPretraining, LukeForSpanClassification, EntityAwareModel)}
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "sentencepiece.bpe.model",
    "spiece.model",
    "added_tokens.json",
)


def write_safetensors(tensors: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """safetensors' save_file, then the umask's permissions (it creates the file 0600)."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata={"format": "pt"})
    mask = os.umask(0o022)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def is_model_dir(path: str | os.PathLike) -> bool:
    """True if `path/config.json` carries the ralm_luke format marker."""
    try:
        return json.loads((Path(path) / CONFIG).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _tokenizer_source(model: nn.Module) -> Path | None:
    meta = getattr(model, "ralm_meta", {}) or {}
    for cand in (getattr(model, "_ralm_tokenizer_dir", None), meta.get("backbone")):
        if cand and (Path(cand) / "tokenizer_config.json").is_file():
            return Path(cand)
    return None


def _unwrap(model: nn.Module) -> nn.Module:
    """The model inside torch.compile (`_orig_mod`) and DistributedDataParallel (`module`) wrappers."""
    while True:
        if isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        elif type(model).__name__ not in CLASSES and isinstance(getattr(model, "module", None), nn.Module):
            model = model.module
        else:
            return model


def save_model(model: nn.Module, out_dir: str | os.PathLike, extra: dict | None = None) -> None:
    """Write `model` (LukeForPretraining, LukeForSpanClassification or EntityAwareModel) to `out_dir`.

    extra: JSON-serialisable provenance merged into the model's `ralm_meta` under config.json's "extra".
    A DistributedDataParallel or torch.compile wrapper is unwrapped.
    An existing `out_dir` is replaced if it is a ralm LUKE model directory (or empty), else refused.
    """
    from ralm.atomic import replace_dir

    model = _unwrap(model)
    name = type(model).__name__
    if name not in CLASSES:
        raise TypeError(f"save_model: unsupported model class {name}")
    out = Path(out_dir)
    if out.exists() and not (out.is_dir() and (is_model_dir(out) or not any(out.iterdir()))):
        raise RalmError(f"{out}: exists and is not a ralm LUKE model directory; refusing to overwrite it")
    info: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_class": name,
        "config": model.config.to_dict(),
        "extra": {**(getattr(model, "ralm_meta", {}) or {}), **(extra or {})},
    }
    if isinstance(model, LukeForSpanClassification):
        info["num_labels"] = model.num_labels
        if model.words_only:
            info["words_only"] = True
    text = json.dumps(info, indent=2, sort_keys=True) + "\n"  # fails here, before anything is written
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        write_safetensors(tensors, tmp / WEIGHTS)
        src = _tokenizer_source(model)
        if src is not None:
            for f in TOKENIZER_FILES:
                if (src / f).is_file():
                    shutil.copyfile(src / f, tmp / f)
        (tmp / CONFIG).write_text(text, encoding="utf-8")
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_model_info(model_dir: str | os.PathLike) -> dict[str, Any]:
    """config.json of a ralm LUKE model dir, checked (format, class, a valid LukeConfig under "config")."""
    d = Path(model_dir)
    if not d.exists():
        raise RalmError(f"{d}: no such model directory; pass a directory written by ralm.luke.io.save_model")
    if not d.is_dir():
        raise RalmError(f"{d}: not a directory; pass a LUKE model directory")
    path = d / CONFIG
    if not path.is_file():
        raise RalmError(f"{path}: missing; {d} is not a ralm LUKE model directory")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RalmError(f"{path}: not valid JSON ({exc}); the model directory is corrupt") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise RalmError(f'{path}: not a ralm LUKE model config (no "format": "{FORMAT}")')
    if info.get("format_version") != FORMAT_VERSION:
        raise RalmError(
            f"{path}: format_version {info.get('format_version')!r}; this ralm reads {FORMAT_VERSION}"
        )
    if info.get("model_class") not in CLASSES:
        raise RalmError(f"{path}: unknown model_class {info.get('model_class')!r}")
    try:
        info["config"] = LukeConfig.from_dict(info.get("config"))
    except RalmError as exc:
        raise RalmError(f"{path}: {exc}") from None
    except TypeError as exc:
        raise RalmError(f"{path}: invalid config ({exc})") from None
    return info


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise RalmError(f"{path}: missing; the model directory is incomplete")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise RalmError(
            f"{path}: unreadable weights ({str(exc).splitlines()[0] if str(exc) else exc})"
        ) from None


def load_model(model_dir: str | os.PathLike, cls: type = LukeForPretraining, **kw: Any) -> nn.Module:
    """The model saved in `model_dir`, as `cls`, in eval mode.

    cls: the stored class, or a narrower view of it: EntityAwareModel (the encoder of either) or
    LukeForSpanClassification from a stored LukeForPretraining (kw num_labels required; fresh
    classifier). kw for LukeForSpanClassification: num_labels (default: the stored one), dropout.
    """
    d = Path(model_dir)
    info = read_model_info(d)
    cfg: LukeConfig = info["config"]
    stored = CLASSES[info["model_class"]]
    if stored is LukeForSpanClassification:
        if "num_labels" in kw and kw["num_labels"] != info.get("num_labels"):
            raise RalmError(
                f"{d}: holds a span classifier with {info.get('num_labels')} labels, not {kw['num_labels']}"
            )
        model = LukeForSpanClassification(
            cfg,
            int(info.get("num_labels", 0)),
            dropout=kw.get("dropout"),
            words_only=bool(info.get("words_only")),
        )
    elif stored is LukeForPretraining:
        model = LukeForPretraining(cfg)
    else:
        model = EntityAwareModel(cfg)
    sd = _read_weights(d / WEIGHTS)
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise RalmError(
            f"{d / WEIGHTS}: does not match its config.json ({first[1].strip() if len(first) > 1 else first[0]})"
        ) from None
    meta = dict(info.get("extra") or {})
    if cls is stored:
        pass
    elif cls is EntityAwareModel and stored is not EntityAwareModel:
        model = model.luke
    elif cls is LukeForSpanClassification and stored is LukeForPretraining:
        if "num_labels" not in kw:
            raise RalmError(
                f"{d}: holds a pre-trained model; give num_labels to build a span classifier from it"
            )
        model = LukeForSpanClassification.from_pretraining(
            model, int(kw["num_labels"]), dropout=kw.get("dropout"), words_only=bool(kw.get("words_only"))
        )
    else:
        raise RalmError(f"{d}: holds a {stored.__name__}, which cannot be loaded as a {cls.__name__}")
    model.ralm_meta = meta
    if (d / "tokenizer_config.json").is_file():
        model._ralm_tokenizer_dir = str(d)
    return model.eval()
