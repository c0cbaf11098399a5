"""ralm's training loops, each called with the command's own loss:

* `fit_epochs` (`ralm finetune`, `ralm luke ner`): shuffled epochs of batches, one optimiser step a
  batch, a row of `metrics.jsonl` a step, dev evaluations every `eval_every` steps and at each
  epoch end, early stopping by the caller's evaluation;
* `fit_steps` (`ralm rag train`, `ralm rag lsr`, `ralm surealm train`, REALM's cached
  distillation): `total` optimiser steps over the caller's epochs of batches, resumable: a run
  resumed at step `start` walks the data order again up to there without training (so the batches
  after it are the uninterrupted run's), and `on_step` hears every step (the run's checkpoints
  and metrics, `ralm.rag.train_run`);
* `run_steps` (`ralm pretrain`, `ralm luke pretrain`): the steps of a resumable pre-training run
  in every process, from the step after `start` to `total`: the command's step, the step's row of
  `metrics.jsonl` (timed, checked finite), a checkpoint every `checkpoint_every` steps and at the
  last, and an early end after `stop_after` (a time-limited job); each of its steps is an
* `accumulated_step`: one optimiser step of `grad_accum` micro-batches under
  DistributedDataParallel, the gradients synchronised on the last one only, then the gradient
  norm (clipped or measured), AdamW and the schedule. The commands open, resume and close their
  runs themselves (`ralm.train.run`, `ralm.train.checkpoint`).

Under all three, and under `ralm retriever train`'s contrastive steps, one update is
`optimizer_step` (clear the gradients, back-propagate, clip or measure the norm, step the optimiser
and the schedule) and every loss is back-propagated by `backpropagate`, the one place ralm calls
`.backward()`.

`fit_epochs` in detail.

A step: the caller's `loss_of(indices)` gives the batch's loss (None when the batch has nothing to
learn from, e.g. no retrieved chunk holds an answer) and the first fields of its row; the loop runs
backward, clips the gradient norm to `grad_clip`, steps the optimiser (only with a loss), clears
the gradients and steps the schedule (always: the schedule counts batches, not updates). The row is
`loss` (None without one), the caller's fields, `grad_norm`, `epoch`, `lr`, `step_seconds` and
the fields of `row_tail()`.

Evaluation: `evaluate(step)` scores dev, keeps what it wants and says whether to stop. It runs
every `eval_every` steps before the last (0: never mid-epoch) and after an epoch when the run is
done or has no mid-epoch evaluations, so the last step is always evaluated once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from typing import Any

import torch

__all__ = ["accumulated_step", "backpropagate", "fit_epochs", "fit_steps", "optimizer_step", "run_steps"]


def fit_epochs(
    *,
    total: int,
    batch_size: int,
    order: Callable[[int], Sequence[int]],
    loss_of: Callable[[Sequence[int]], tuple[torch.Tensor | None, dict[str, Any]]],
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    params: Sequence[torch.nn.Parameter],
    grad_clip: float,
    log,
    evaluate: Callable[[int], bool],
    eval_every: int = 0,
    progress: bool = True,
    desc: str = "",
    row_tail: Callable[[], dict[str, Any]] | None = None,
) -> int:
    """Train for `total` steps of `batch_size` items, epoch `e` in the order `order(e)` (item
    indices); returns the steps taken (fewer when `evaluate` stops the run). `log`: a
    `ralm.train.logging.MetricsLogger`."""
    from ralm.progress import tqdm

    bar = tqdm(total=total, desc=desc, disable=not progress, leave=False)
    step, epoch, stop = 0, 0, False
    while step < total and not stop:
        items = order(epoch)
        for s in range(0, len(items), batch_size):
            t0 = time.perf_counter()
            loss, head = loss_of(items[s : s + batch_size])
            row: dict[str, Any] = {"loss": None, **head}
            norm = optimizer_step(opt, None, params, [loss], max_grad_norm=grad_clip)
            if norm is not None:
                row.update(loss=loss.item(), grad_norm=norm)
            sched.step()  # always: the schedule counts batches, not updates
            step += 1
            row.update(epoch=epoch, lr=sched.get_last_lr()[0], step_seconds=time.perf_counter() - t0)
            if row_tail is not None:
                row.update(row_tail())
            log.log(step, **row)
            bar.update(1)
            if row["loss"] is not None:
                bar.set_postfix(loss=f"{row['loss']:.3f}")
            if eval_every and step % eval_every == 0 and step < total:
                stop = evaluate(step)
            if step >= total or stop:
                break
        epoch += 1
        if not stop and (step >= total or not eval_every):
            stop = evaluate(step)
    bar.close()
    return step


def fit_steps(
    *,
    total: int,
    start: int,
    epoch_batches: Callable[[], Iterable[Any]],
    loss_of: Callable[[Any], tuple[torch.Tensor, Any]],
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler | None,
    params: Sequence[torch.nn.Parameter],
    grad_clip: float | None,
    on_step: Callable[[int, float, Any, float], bool | None],
) -> int:
    """Train from step `start` to `total`: each call of `epoch_batches()` gives the next epoch's
    batches (item indices; it is called again from the first batch of a resumed run, so the data
    order is the uninterrupted run's); a step clears the gradients, runs `loss_of(batch)` -> (loss,
    info), backward, clips to `grad_clip` (None or 0: no clipping), steps the optimiser and the
    schedule (None: the caller sets the learning rate itself), then calls `on_step(step, loss,
    info, grad_norm)` (the norm before clipping; 0.0 without clipping), which ends the run by
    returning True. An epoch without batches ends the run early (a caller whose batches are
    counted by the data, not by `total`, returns one iterator that runs out). Returns the last
    step."""
    step, done = start, 0
    while done < total:
        walked = done
        for batch in epoch_batches():
            if done >= total:
                break
            done += 1
            if done <= step:  # a resumed run walks the data order up to its step
                continue
            loss, info = loss_of(batch)
            norm = optimizer_step(opt, sched, params, [loss], max_grad_norm=grad_clip or None, measure=False)
            step += 1
            if on_step(step, float(loss.detach()), info, norm or 0.0):
                return step
        if done == walked:  # an epoch without a batch: the data ran out before `total`
            break
    return step


def run_steps(
    *,
    start: int,
    total: int,
    step_row: Callable[[int], dict[str, Any]],
    checkpoint: Callable[[int], None],
    dist: Any,
    log: Any | None,
    bar: Any,
    postfix: Callable[[dict[str, Any]], dict[str, str]],
    not_finite: str,
    checkpoint_every: int = 0,
    stop_after: int | None = None,
    after_step: Callable[[int, dict[str, Any]], None] | None = None,
    before_checkpoint: Callable[[int], None] | None = None,
) -> int:
    """Steps `start`+1 .. `total` of a pre-training run, in every process of `dist`
    (`ralm.train.distributed.Dist`); returns the last step taken.

    A step: `step_row(step)` trains and gives the step's metrics; the loop adds `step_seconds` (the
    step alone) and `elapsed_seconds` (since this call), moves `bar` (postfix: `postfix(row)`),
    calls `after_step(step, row)` (work after the update that may add to the row, e.g. an index
    refresh), raises RalmError("step N: " + `not_finite`) when the row's loss is not finite, and
    writes the row with `log` (None in every process but the main one). At the last step, after
    `stop_after` and every `checkpoint_every` steps (0: never between), `before_checkpoint(step)`
    runs, then `checkpoint(step)` in the main process, then every process waits for it. The run
    ends after `stop_after` (checkpointed), and `total` stays the schedule's length.
    """
    from ralm.errors import RalmError

    t_run = time.perf_counter()
    step = start
    for step in range(start + 1, total + 1):
        t0 = time.perf_counter()
        row = step_row(step)
        row["step_seconds"] = time.perf_counter() - t0
        row["elapsed_seconds"] = time.perf_counter() - t_run
        bar.update(1)  # the step is done: the bar says so during the work after it
        bar.set_postfix(**postfix(row))
        if after_step is not None:
            after_step(step, row)
        if not math.isfinite(row["loss"]):
            raise RalmError(f"step {step}: {not_finite}")
        if log is not None:
            log.log(step, **row)
        stop = stop_after is not None and step >= stop_after
        if step == total or stop or (checkpoint_every and step % checkpoint_every == 0):
            if before_checkpoint is not None:
                before_checkpoint(step)
            if dist.is_main:
                checkpoint(step)
            dist.barrier()
        if stop:
            break
    return step


def accumulated_step(
    net: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    *,
    grad_accum: int,
    micro: Callable[[int], torch.Tensor],
    max_grad_norm: float,
    distributed: bool = False,
    extra: Callable[[], torch.Tensor | None] | None = None,
) -> float:
    """One optimiser step: `micro(m)` for m in 0..grad_accum-1 gives micro-batch m's objective,
    already scaled (under DDP its forward and backward run inside `no_sync` but for the last
    micro-batch, so the gradients are reduced once); then `extra()`, an objective added after the
    micro-batches (REALM's answer queries; None: nothing this step); then `optimizer_step`: the
    norm of the gradients that exist, clipped to `max_grad_norm` when it is > 0 (measured only
    otherwise), the optimiser and the schedule. Returns the norm before clipping."""

    def losses() -> Iterator[torch.Tensor | None]:
        for m in range(grad_accum):
            last = m == grad_accum - 1
            sync = net.no_sync() if (distributed and not last and hasattr(net, "no_sync")) else nullcontext()
            with sync:  # open while the loss is back-propagated: the generator waits inside it
                yield micro(m)
        if extra is not None:
            yield extra()

    params = list(net.parameters())
    norm = optimizer_step(
        opt, sched, params, losses(), max_grad_norm=max_grad_norm if max_grad_norm > 0 else None
    )
    return 0.0 if norm is None else norm


def backpropagate(losses: Iterable[torch.Tensor | None]) -> int:
    """Back-propagate each loss as it comes, the gradients accumulating in the parameters' .grad;
    None stands for nothing to learn from. Every loss ralm trains on passes here. A lazy iterable
    builds each loss after the previous one's graph is freed (micro-batches, gradient caching's
    mini-batches), so memory holds one graph at a time. Returns how many were back-propagated."""
    n = 0
    for loss in losses:
        if loss is not None:
            loss.backward()
            n += 1
    return n


def optimizer_step(
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler | None,
    params: Iterable[torch.nn.Parameter],
    losses: Iterable[torch.Tensor | None],
    *,
    max_grad_norm: float | None,
    measure: bool = True,
) -> float | None:
    """One update of the parameters: clear their gradients, `backpropagate(losses)`, then (when a
    loss was back-propagated) the norm of the gradients that exist, clipped to `max_grad_norm`
    (None: no clipping; measured only when `measure`, else 0.0), the optimiser and the schedule
    (None: the caller moves the learning rate). Returns the norm before clipping, or None when no
    loss came (then neither the optimiser nor the schedule moves)."""
    opt.zero_grad(set_to_none=True)
    if not backpropagate(losses):
        return None
    grads = [p for p in params if p.grad is not None]
    if max_grad_norm is not None:
        norm = float(torch.nn.utils.clip_grad_norm_(grads, max_grad_norm))
    elif measure:
        norm = float(
            torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in grads]))
        )
    else:
        norm = 0.0
    opt.step()
    if sched is not None:
        sched.step()
    return norm
