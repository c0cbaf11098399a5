"""Training checkpoints of a run (REALM and LUKE pre-training, retriever training): write atomically, check, find the newest intact one, read back.

``checkpoints/step-N/`` holds model.safetensors (every parameter of the RealmModel, tied ones
once), optim.pt (optimizer and scheduler state dicts, read with ``weights_only=True``),
rng.safetensors (torch and CUDA generator states), index/ (a hard-linked copy of the index
version the next step searches, so resuming needs nothing from outside the checkpoint) and
state.json (step, examples seen, index version and its number of shards, mode, corpus fingerprint, and ``files``: the
size and XXH3-128 digest of every other file, `ralm.integrity` records).

A checkpoint is written into a temporary directory and renamed into place, so a crash leaves
either the whole checkpoint or none; what a rename cannot guard against (a disk that fills or
fails later, a copy cut short, a file edited by hand) the records find: `intact_checkpoint`
checks sizes and digests (a few hundred MB hash in well under a second, little next to the
training it saves) and falls back to the newest intact checkpoint with a warning. Checkpoints
written before files were recorded are checked for their files' presence only; if one of them
is damaged, `load_checkpoint` still ends in one line naming the file.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ralm.atomic import replace_dir, temp_sibling
from ralm.errors import RalmError
from ralm.integrity import check_digests, check_sizes, records
from ralm.train.logging import warn

CKPT_DIR = "checkpoints"
STATE_FILE = "state.json"
REQUIRED = ("model.safetensors", "optim.pt", "rng.safetensors")

__all__ = [
    "CKPT_DIR",
    "checkpoint_problems",
    "clear_leftovers",
    "finished_checkpoints",
    "intact_checkpoint",
    "latest_checkpoint",
    "load_checkpoint",
    "read_state",
    "restore_rng",
    "save_checkpoint",
    "step_saver",
]

# what to do about a checkpoint that cannot be used, by what was being done with it
_INSTEAD = {
    "resume": "resume from the previous checkpoint, or start over with --overwrite",
    "load": "use the previous checkpoint",
}
_INSTEAD_ONE = {
    "resume": "resume from the previous one, or start over with --overwrite",
    "load": "use the previous one",
}


def finished_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The run's completed checkpoint directories (those with a state.json), oldest first."""
    d = Path(run_dir) / CKPT_DIR
    return sorted(p for p in d.glob("step-*") if (p / STATE_FILE).is_file()) if d.is_dir() else []


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest completed checkpoint, intact or not (see `intact_checkpoint`)."""
    done = finished_checkpoints(run_dir)
    return done[-1] if done else None


def read_state(ckpt: Path) -> dict[str, Any]:
    """A checkpoint's state.json (RalmError if unreadable)."""
    p = ckpt / STATE_FILE
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RalmError(f"{p}: unreadable ({_one_line(exc)}); checkpoint {ckpt.name} is damaged") from None
    if not isinstance(state, dict) or "step" not in state:
        raise RalmError(f"{p}: not a checkpoint state; checkpoint {ckpt.name} is damaged")
    return state


def checkpoint_problems(ckpt: Path, *, digests: bool = True) -> list[str]:
    """What is wrong with a checkpoint's files ([] when intact): sizes, and digests unless told not to."""
    try:
        state = read_state(ckpt)
    except RalmError as exc:
        return [str(exc).split("; checkpoint ")[0]]
    files = state.get("files")
    if not isinstance(files, dict):  # written before files were recorded: what can be checked
        return [f"{ckpt / n}: missing" for n in REQUIRED if not (ckpt / n).is_file()]
    return check_digests(ckpt, files) if digests else check_sizes(ckpt, files)


def intact_checkpoint(
    run_dir: str | os.PathLike, *, digests: bool = True, command: str = "ralm pretrain"
) -> Path | None:
    """The newest checkpoint whose files match their records; a warning names any newer damaged
    one passed over. None when the run has no checkpoint; RalmError (naming `command` as the way to
    start over) when none is intact."""
    run = Path(run_dir)
    damaged: list[tuple[Path, list[str]]] = []
    for ckpt in reversed(finished_checkpoints(run)):
        problems = checkpoint_problems(ckpt, digests=digests)
        if not problems:
            if damaged:
                names = ", ".join(c.name for c, _ in damaged)
                what = f"checkpoint {names} is" if len(damaged) == 1 else f"checkpoints {names} are"
                warn(f"{what} damaged ({_summary(damaged)}); using {ckpt.name}, the newest intact checkpoint")
            return ckpt
        damaged.append((ckpt, problems))
    if damaged:
        raise RalmError(
            f"{run}: every checkpoint is damaged ({_summary(damaged)}); start the run over with "
            f"`{command} --overwrite`"
        )
    return None


def _summary(damaged: list[tuple[Path, list[str]]]) -> str:
    return "; ".join(p[0] + (f" and {len(p) - 1} more" if len(p) > 1 else "") for _, p in damaged)


def clear_leftovers(run_dir: str | os.PathLike) -> None:
    """Remove what an interrupted writer of the run left half-written: temporary checkpoint and index
    build directories, temporary files. Only under the run's writer lock."""
    run = Path(run_dir)
    for pattern in (
        f"{CKPT_DIR}/.step-*.tmp-*",
        "index/.build-v*",
        "index/snapshot-v*",
        "index/.snapshot-v*",
        "*.tmp",
        "*.tmp-*",
    ):
        for p in run.glob(pattern):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link (else copy) every file under `src` to the same place under `dst` (a sharded
    index version has a directory per shard)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_dir():
            _link_tree(f, dst / f.name)
            continue
        try:
            os.link(f, dst / f.name)
        except OSError:
            shutil.copy2(f, dst / f.name)


def step_saver(
    run: Path, cfg: Any, model, opt, sched, refresher, docstore_fingerprint: str
) -> Callable[[int], None]:
    """`save_checkpoint` of step N for a pre-training run (`ralm pretrain`, `ralm luke pretrain`)
    whose config has `mode`, `keep_checkpoints`, `batch_size` (per micro-batch, over all processes)
    and `grad_accum`: step N has consumed N * batch_size * grad_accum examples."""
    per_step = cfg.batch_size * cfg.grad_accum

    def save(step: int) -> None:
        save_checkpoint(
            run,
            step,
            model,
            opt,
            sched,
            refresher,
            mode=cfg.mode,
            examples_seen=step * per_step,
            keep=cfg.keep_checkpoints,
            docstore_fingerprint=docstore_fingerprint,
        )

    return save


def save_checkpoint(
    run: Path,
    step: int,
    model,
    opt,
    sched,
    refresher,
    *,
    examples_seen: int,
    mode: str,
    keep: int,
    docstore_fingerprint: str,
) -> Path:
    """Write checkpoints/step-N atomically (temp dir + rename); keep the newest `keep` checkpoints.

    examples_seen: training examples consumed by `step` (state.json records it); mode: the run's
    mode, which a resume must match; docstore_fingerprint: the corpus the run trains on.
    """
    from safetensors.torch import save_file, save_model

    root = run / CKPT_DIR
    final = root / f"step-{step:07d}"
    tmp = temp_sibling(root / f"step-{step:07d}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        save_model(model, str(tmp / "model.safetensors"))
        torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, tmp / "optim.pt")
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            for i, s in enumerate(torch.cuda.get_rng_state_all()):
                rng[f"cuda{i}"] = s
        save_file(rng, str(tmp / "rng.safetensors"))
        if refresher is not None:
            _link_tree(refresher.version_dir(refresher.version), tmp / "index")
        names = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
        state = {
            "step": step,
            "examples_seen": examples_seen,
            "index_version": refresher.version if refresher is not None else None,
            "index_shards": getattr(refresher, "n_shards", 1) if refresher is not None else None,
            "mode": mode,
            "docstore_fingerprint": docstore_fingerprint,
            "files": records(tmp, names),
        }
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        replace_dir(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    old = sorted(p for p in root.glob("step-*") if p.is_dir())
    for p in old[: max(0, len(old) - keep)]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] if text else type(exc).__name__


def load_checkpoint(
    ckpt: Path, model, opt=None, sched=None, refresher=None, *, purpose: str = "resume"
) -> dict[str, Any]:
    """Load a checkpoint into `model` (and `opt`, `sched`, `refresher`); returns its state with "rng".

    A file that cannot be read, or an index that cannot be used, is one RalmError naming it and
    saying what to do (`purpose`: "resume" or "load", what the checkpoint is wanted for).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file, load_model

    def damaged(path: Path, exc: BaseException) -> RalmError:
        return RalmError(
            f"{path}: cannot be read ({_one_line(exc)}); checkpoint {ckpt.name} is damaged: "
            f"delete it to {_INSTEAD[purpose]}"
        )

    state = read_state(ckpt)
    path = ckpt / "model.safetensors"
    try:
        load_model(model, str(path), device=str(next(model.parameters()).device))
    except (SafetensorError, OSError) as exc:
        raise damaged(path, exc) from None
    except RuntimeError as exc:  # missing or unexpected parameters: another model than config.toml's
        raise RalmError(
            f"{path}: holds another model than the run's config.toml describes ({_one_line(exc)})"
        ) from None
    if opt is not None:
        path = ckpt / "optim.pt"
        try:
            st = torch.load(path, weights_only=True, map_location="cpu")
        except (RuntimeError, OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
            raise damaged(path, exc) from None
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
    path = ckpt / "rng.safetensors"
    try:
        rng = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise damaged(path, exc) from None
    if refresher is not None:
        try:
            refresher.load(ckpt / "index")
        except RalmError as exc:  # the index's own advice (`ralm index build`) does not fit here
            parts = str(exc).split("; ")
            while len(parts) > 1 and "ralm index" in parts[-1]:
                parts.pop()
            inner = "; ".join(parts)
            raise RalmError(
                f"checkpoint {ckpt.name}: its index cannot be used ({inner}); delete the checkpoint to "
                f"{_INSTEAD_ONE[purpose]}"
            ) from None
    return {**state, "rng": rng}


def restore_rng(rng: dict[str, torch.Tensor], device: torch.device, world: int) -> None:
    """Put back the generator states of `load_checkpoint(...)["rng"]`, so a resumed run draws the
    masks and dropout it would have drawn without the stop. CUDA states only for a single-process
    job on a GPU (under torchrun each rank reseeds itself)."""
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and world == 1:
        torch.cuda.set_rng_state_all([rng[k] for k in sorted(rng) if k.startswith("cuda")])
