"""ralm's training loops, each called with the command's own loss:

* `fit_epochs` (`ralm finetune`, `ralm luke ner`): shuffled epochs of batches, one optimiser step a
  batch, a row of `metrics.jsonl` a step, dev evaluations every `eval_every` steps and at each
  epoch end, early stopping by the caller's evaluation;
* `fit_steps` (`ralm rag train`, `ralm rag lsr`, `ralm surealm train`, REALM's cached
  distillation): `total` optimiser steps over the caller's epochs of batches, resumable: a run
  resumed at step `start` walks the data order again up to there without training (so the batches
  after it are the uninterrupted run's), and `on_step` hears every step (the run's checkpoints
  and metrics, `ralm.rag.train_run`);
* `accumulated_step` (`ralm pretrain`, `ralm luke pretrain`): one optimiser step of `grad_accum`
  micro-batches under DistributedDataParallel, the gradients synchronised on the last one only,
  then the gradient norm (clipped or measured), AdamW and the schedule; the pre-training commands
  keep their own run loops (checkpoints, index refreshes, distributed resume).

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

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from typing import Any

import torch

__all__ = ["accumulated_step", "fit_epochs", "fit_steps"]


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
            if loss is not None:
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
                opt.step()
                row.update(loss=loss.item(), grad_norm=norm.item())
            opt.zero_grad(set_to_none=True)
            sched.step()
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
            opt.zero_grad(set_to_none=True)
            loss, info = loss_of(batch)
            loss.backward()
            value = float(loss.detach())
            norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip)) if grad_clip else 0.0
            opt.step()
            if sched is not None:
                sched.step()
            step += 1
            if on_step(step, value, info, norm):
                return step
        if done == walked:  # an epoch without a batch: the data ran out before `total`
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
    before_update: Callable[[], None] | None = None,
) -> float:
    """One optimiser step: `micro(m)` for m in 0..grad_accum-1 gives micro-batch m's objective,
    already scaled (under DDP its forward runs here, inside `no_sync` but for the last micro-batch,
    so the gradients are reduced once); backward of each; `before_update()` (e.g. an extra
    objective's own backward, or reading the learning rate); then the norm of the gradients that
    exist, clipped to `max_grad_norm` when it is > 0 (measured only otherwise), the optimiser and
    the schedule. Returns the norm before clipping."""
    opt.zero_grad(set_to_none=True)
    for m in range(grad_accum):
        last = m == grad_accum - 1
        sync = net.no_sync() if (distributed and not last and hasattr(net, "no_sync")) else nullcontext()
        with sync:
            micro(m).backward()
    if before_update is not None:
        before_update()
    params = [p for p in net.parameters() if p.grad is not None]
    if max_grad_norm > 0:
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    else:
        norm = float(
            torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in params]))
        )
    opt.step()
    sched.step()
    return norm
