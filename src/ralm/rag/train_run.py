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

__all__ = [
    "CONFIG",
    "LSR_CONFIG",
    "RunState",
    "drop_checkpoints",
    "examples_digest",
    "open_run",
    "prepare_out",
]

CONFIG = "rag_train.json"
MODE = "rag-train"
LSR_CONFIG = "lsr_train.json"


@dataclass
class RunState:
    """Where a (resumed) run stands (steps done, tokens seen, the loss of each step, seconds spent),
    and what `after_step` needs to log each step and checkpoint every `save_every` steps."""

    run: Path
    step: int = 0
    tokens: int = 0
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    digest: str = ""  # what identifies the training data (examples_digest)
    save_every: int = 0
    batch_size: int = 1
    mode: str = MODE  # names the trainer in the checkpoints' state
    parts: tuple = ()  # (model, optimiser, schedule): what a checkpoint saves
    logger: MetricsLogger | None = None

    def after_step(self, step: int, total: int, **row: Any) -> None:
        """One metrics.jsonl row for `step`, and checkpoints/step-N when one is due (not at the end:
        the command writes its result then)."""
        from ralm.train.checkpoint import save_checkpoint

        self.logger.log(step, **row)
        if self.save_every and step % self.save_every == 0 and step < total:
            model, opt, sched = self.parts
            save_checkpoint(
                self.run,
                step,
                model,
                opt,
                sched,
                None,
                examples_seen=step * self.batch_size,
                mode=self.mode,
                keep=1,
                docstore_fingerprint=self.digest,
            )

    def close(self) -> None:
        self.logger.close()


def examples_digest(examples: Sequence[Any]) -> str:
    """SHA-256 of the examples' token ids and labels, in order: a resume must train on the same data."""
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([list(e.input_ids), list(e.labels)]).encode())
    return h.hexdigest()


def prepare_out(
    out: Path, save_every: int, overwrite: bool, result: str, config: str = CONFIG, extra: Sequence[str] = ()
) -> bool:
    """Before a `rag train`/`rag lsr` run loads anything: refuse a negative --save-every; with
    --overwrite start over (the settings, metrics, checkpoints, `result` and `extra` files removed).

    Returns True when OUT holds a finished run (its `result` file) and --overwrite was not given:
    the caller says so and changes nothing."""
    from ralm.train.checkpoint import CKPT_DIR

    if save_every < 0:
        raise RalmError(f"--save-every {save_every}: must be >= 0")
    if overwrite:
        shutil.rmtree(out / CKPT_DIR, ignore_errors=True)
        for name in (config, METRICS_FILE, result, *extra):  # the result too: this run, if stopped, resumes
            (out / name).unlink(missing_ok=True)
        return False
    return (out / result).is_file()


def drop_checkpoints(out: Path) -> None:
    """Once the run's result is written, its checkpoints have served their purpose (resuming)."""
    from ralm.train.checkpoint import CKPT_DIR

    shutil.rmtree(out / CKPT_DIR, ignore_errors=True)


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
    save_every: int = 0,
    batch_size: int = 1,
    digest: str | None = None,
    command: str = "ralm rag train",
    config: str = CONFIG,
    mode: str = MODE,
) -> RunState:
    """Start the run in `run`, or resume it: model, optimiser, schedule and RNG put back as they were
    at its newest intact checkpoint. RalmError (one line) for a run with other settings or data.

    save_every, batch_size: the checkpoints `after_step` writes; digest: what identifies the training
    data (default `examples_digest(examples)`); command, config, mode: the command named in
    messages, the settings file's name, the trainer's name in the checkpoints."""
    from ralm.atomic import write_json_atomic
    from ralm.train.checkpoint import load_checkpoint, restore_rng
    from ralm.train.run import refuse_other_settings, resume_point

    settings = {
        "config": asdict(cfg),
        "examples": len(examples),
        "digest": examples_digest(examples) if digest is None else digest,
    }
    saved = run / config
    state = RunState(run)
    if saved.is_file():
        refuse_other_settings(run, config, settings, command, labels={"digest": "training examples"})
        ckpt = resume_point(run, command)
        if ckpt is not None:
            st = load_checkpoint(ckpt, model, opt, sched, purpose="resume")
            restore_rng(st["rng"], device, 1)
            truncate_metrics(run, st["step"])
            rows = [r for r in read_metric_rows(run / METRICS_FILE) if "loss" in r]
            state.step, state.losses = st["step"], [float(r["loss"]) for r in rows]
            if rows:
                state.tokens, state.seconds = int(rows[-1].get("tokens", 0)), float(rows[-1]["seconds"])
            log(f"{run}: resuming at step {st['step']} ({ckpt.name})")
    else:
        run.mkdir(parents=True, exist_ok=True)
        (run / METRICS_FILE).unlink(missing_ok=True)
        write_json_atomic(saved, settings)
    state.logger = MetricsLogger(run, tensorboard=False)
    state.digest, state.save_every, state.batch_size, state.mode = (
        settings["digest"],
        save_every,
        batch_size,
        mode,
    )
    state.parts = (model, opt, sched)
    return state
