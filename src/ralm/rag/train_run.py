"""The folder of a `ralm rag train` or `ralm rag lsr` run on ralm.train's backbone: settings,
metrics, checkpoints, resume.

    OUT/rag_train.json       the optimisation settings and a digest of the training data
    (OUT/lsr_train.json)     (a resume must match them)
    OUT/metrics.jsonl        one row a step: the loss (answer loss, or LSR's KL), tokens, seconds
    OUT/checkpoints/step-N   weights, optimiser, schedule and RNG states (ralm.train.checkpoint),
                             every --save-every steps; the newest is kept

`open_run` starts a run or resumes the one in OUT from its newest intact checkpoint (whatever
stopped it: an exception, Ctrl-C, kill -9), so that the finished weights are those of an
uninterrupted run. The commands write their results (OUT/model, OUT/index, ...) once training ends.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ralm.errors import RalmError
from ralm.train.logging import METRICS_FILE, MetricsLogger, read_metric_rows, truncate_metrics

__all__ = ["CONFIG", "RunState", "checkpoint", "examples_digest", "open_run", "start_over"]

CONFIG = "rag_train.json"
MODE = "rag-train"
LSR_CONFIG = "lsr_train.json"


@dataclass
class RunState:
    """Where a (resumed) run stands: steps done, tokens seen, the loss of each step, seconds spent."""

    step: int = 0
    tokens: int = 0
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    logger: MetricsLogger | None = None
    digest: str = ""  # examples_digest of the training examples


def examples_digest(examples: Sequence[Any]) -> str:
    """SHA-256 of the examples' token ids and labels, in order: a resume must train on the same data."""
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([list(e.input_ids), list(e.labels)]).encode())
    return h.hexdigest()


def start_over(run: Path, config: str = CONFIG) -> None:
    """Remove what a run left in `run` (settings, metrics, checkpoints); the rest of the folder stays."""
    from ralm.train.checkpoint import CKPT_DIR

    shutil.rmtree(run / CKPT_DIR, ignore_errors=True)
    for name in (config, METRICS_FILE):
        (run / name).unlink(missing_ok=True)


def open_run(
    run: Path,
    cfg: Any,
    examples: Sequence[Any],
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: Any,
    device: torch.device,
    log: Callable[[str], None] = print,
    *,
    digest: str | None = None,
    command: str = "ralm rag train",
    config: str = CONFIG,
) -> RunState:
    """Start the run in `run`, or resume it: model, optimiser, schedule and RNG put back as they were
    at its newest intact checkpoint. RalmError (one line) for a run with other settings or data.

    digest: what identifies the training data (default `examples_digest(examples)`); command and
    config: the command named in messages and the settings file's name."""
    from ralm.atomic import write_json_atomic
    from ralm.train.checkpoint import clear_leftovers, intact_checkpoint, load_checkpoint, restore_rng

    settings = {"config": asdict(cfg), "examples": len(examples),
                "digest": examples_digest(examples) if digest is None else digest}  # fmt: skip
    saved = run / config
    state = RunState()
    if saved.is_file():
        old = json.loads(saved.read_text(encoding="utf-8"))
        diff = [k for k, v in settings["config"].items() if old.get("config", {}).get(k) != v]
        diff += [k for k in ("examples", "digest") if old.get(k) != settings[k]]
        if diff:
            what = ", ".join("training examples" if k == "digest" else k for k in diff)
            raise RalmError(
                f"{run}: holds an unfinished `{command}` run with other settings ({what}); rerun it "
                "with the same ones to resume, or pass --overwrite to start over"
            )
        clear_leftovers(run)
        ckpt = intact_checkpoint(run, command=command)
        if ckpt is not None:
            st = load_checkpoint(ckpt, model, opt, sched, purpose="resume")
            restore_rng(st["rng"], device, 1)
            truncate_metrics(run, st["step"])
            rows = [r for r in read_metric_rows(run / METRICS_FILE) if "loss" in r]
            state = RunState(st["step"], int(rows[-1].get("tokens", 0)) if rows else 0, [float(r["loss"]) for r in rows],
                             float(rows[-1]["seconds"]) if rows else 0.0)  # fmt: skip
            log(f"{run}: resuming at step {st['step']} ({ckpt.name})")
        else:
            (run / METRICS_FILE).unlink(missing_ok=True)  # stopped before its first checkpoint
    else:
        run.mkdir(parents=True, exist_ok=True)
        (run / METRICS_FILE).unlink(missing_ok=True)
        write_json_atomic(saved, settings)
    state.logger = MetricsLogger(run, tensorboard=False)
    state.digest = settings["digest"]
    return state


def checkpoint(
    run: Path,
    step: int,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: Any,
    batch_size: int,
    digest: str,
    mode: str = MODE,
) -> Path:
    """checkpoints/step-N of the run (the newest only is kept); mode names the trainer in its state."""
    from ralm.train.checkpoint import save_checkpoint

    return save_checkpoint(run, step, model, opt, sched, None, examples_seen=step * batch_size, mode=mode, keep=1,
                           docstore_fingerprint=digest)  # fmt: skip
