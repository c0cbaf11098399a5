"""Training checkpoints of a pre-training run: write atomically, find the newest, read back.

``checkpoints/step-N/`` holds model.safetensors (every parameter of the RealmModel, tied ones
once), optim.pt (optimizer and scheduler state dicts, read with ``weights_only=True``),
rng.safetensors (torch and CUDA generator states), state.json (step, examples seen, index
version, mode, corpus fingerprint) and index/ (a hard-linked copy of the index version the next
step searches, so resuming needs nothing from outside the checkpoint).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from ralm.realm.config import PretrainConfig

CKPT_DIR = "checkpoints"

__all__ = ["CKPT_DIR", "latest_checkpoint", "load_checkpoint", "save_checkpoint"]


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    d = Path(run_dir) / CKPT_DIR
    done = sorted(p for p in d.glob("step-*") if (p / "state.json").is_file()) if d.is_dir() else []
    return done[-1] if done else None


def _link_tree(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        try:
            os.link(f, dst / f.name)
        except OSError:
            shutil.copy2(f, dst / f.name)


def save_checkpoint(
    run: Path, step: int, model, opt, sched, refresher, cfg: PretrainConfig, docstore_fingerprint: str
) -> Path:
    """Write checkpoints/step-N atomically (temp dir + rename); keep the newest `keep_checkpoints`."""
    from safetensors.torch import save_file, save_model

    root = run / CKPT_DIR
    final = root / f"step-{step:07d}"
    tmp = root / f".step-{step:07d}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / "model.safetensors"))
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, tmp / "optim.pt")
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            rng[f"cuda{i}"] = s
    save_file(rng, str(tmp / "rng.safetensors"))
    state = {
        "step": step,
        "examples_seen": step * cfg.batch_size * cfg.grad_accum,
        "index_version": refresher.version if refresher is not None else None,
        "mode": cfg.mode,
        "docstore_fingerprint": docstore_fingerprint,
    }
    if refresher is not None:
        _link_tree(refresher.version_dir(refresher.version), tmp / "index")
    (tmp / "state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    old = sorted(p for p in root.glob("step-*") if p.is_dir())
    for p in old[: max(0, len(old) - cfg.keep_checkpoints)]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def load_checkpoint(ckpt: Path, model, opt=None, sched=None, refresher=None) -> dict[str, Any]:
    from safetensors.torch import load_file, load_model

    load_model(model, str(ckpt / "model.safetensors"), device=str(next(model.parameters()).device))
    if opt is not None:
        st = torch.load(ckpt / "optim.pt", weights_only=True, map_location="cpu")
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
    state = json.loads((ckpt / "state.json").read_text(encoding="utf-8"))
    if refresher is not None:
        refresher.load(ckpt / "index")
    return {**state, "rng": load_file(str(ckpt / "rng.safetensors"))}
