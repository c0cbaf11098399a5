"""`ralm.train.loop.fit_epochs` against a naive loop written out by hand: the same weights, the same
rows of metrics.jsonl, evaluations where the docstring says, early stopping, and a batch without a
loss stepping the schedule but not the weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ralm.train.logging import MetricsLogger
from ralm.train.loop import fit_epochs

X = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
Y = X @ torch.tensor([1.0, -2.0, 0.5])


def _parts():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched, list(model.parameters())


def _order(epoch: int) -> list[int]:
    return list(np.random.default_rng([7, epoch]).permutation(10))


def _loss(model, batch):
    if 9 in batch:  # a batch the model cannot learn from
        return None
    idx = torch.as_tensor(list(batch))
    return ((model(X[idx])[:, 0] - Y[idx]) ** 2).mean()


def _rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_fit_epochs_equals_the_naive_loop_and_evaluates_on_schedule(tmp_path):
    total, bs, every = 7, 4, 3
    model, opt, sched, params = _parts()
    evaluated = []
    log = MetricsLogger(tmp_path / "a", tensorboard=False)
    steps = fit_epochs(
        total=total,
        batch_size=bs,
        order=_order,
        loss_of=lambda b: (_loss(model, b), {"n": len(b)}),
        opt=opt,
        sched=sched,
        params=params,
        grad_clip=0.5,
        log=log,
        evaluate=lambda step: evaluated.append(step) or False,
        eval_every=every,
        progress=False,
    )
    log.close()
    assert steps == total
    assert evaluated == [3, 6, 7]  # every 3 steps before the last, then the last once

    ref, ropt, rsched, rparams = _parts()
    want, step, epoch = [], 0, 0
    while step < total:
        order = _order(epoch)
        for s in range(0, len(order), bs):
            loss = _loss(ref, order[s : s + bs])
            row = {"loss": None, "n": len(order[s : s + bs])}
            if loss is not None:
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(rparams, 0.5)
                ropt.step()
                row.update(loss=loss.item(), grad_norm=norm.item())
            ropt.zero_grad(set_to_none=True)
            rsched.step()
            step += 1
            row.update(epoch=epoch, lr=rsched.get_last_lr()[0])
            want.append(row)
            if step >= total:
                break
        epoch += 1
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters(), strict=True))
    got = _rows(tmp_path / "a")
    assert [r["step"] for r in got] == list(range(1, total + 1))
    assert [{k: r[k] for k in want[i]} for i, r in enumerate(got)] == want
    assert any(r["loss"] is None for r in want) and any(r["loss"] is not None for r in want)
    for r, w in zip(got, want, strict=True):  # the loop's field order: loss, the caller's, then its own
        assert list(r) == ["step", *w, "step_seconds"]


def test_evaluate_can_stop_the_run_and_no_mid_epoch_evaluation_means_one_an_epoch(tmp_path):
    model, opt, sched, params = _parts()
    evaluated = []
    log = MetricsLogger(tmp_path / "b", tensorboard=False)
    steps = fit_epochs(
        total=20,
        batch_size=4,
        order=_order,
        loss_of=lambda b: (_loss(model, b), {}),
        opt=opt,
        sched=sched,
        params=params,
        grad_clip=1.0,
        log=log,
        evaluate=lambda step: evaluated.append(step) or len(evaluated) == 2,
        eval_every=0,
        progress=False,
    )
    log.close()
    assert evaluated == [3, 6] and steps == 6  # 3 batches an epoch; the second evaluation stops it


def _steps(model, opt, sched, params, total, start, seen):
    import random

    from ralm.train.loop import fit_steps

    rng = random.Random(3)

    def epoch_batches():
        order = list(range(10))
        rng.shuffle(order)
        return [order[s : s + 4] for s in range(0, 10, 4)]

    def loss_of(batch):
        idx = torch.as_tensor(list(batch))
        return ((model(X[idx])[:, 0] - Y[idx]) ** 2).mean(), list(batch)

    return fit_steps(
        total=total,
        start=start,
        epoch_batches=epoch_batches,
        loss_of=loss_of,
        opt=opt,
        sched=sched,
        params=params,
        grad_clip=0.5,
        on_step=lambda step, loss, batch, norm: seen.append((step, batch)),
    )


def test_fit_steps_resumed_at_a_step_trains_the_uninterrupted_runs_batches():
    """Seven steps in one go, against four steps then a resume from step 4 on the weights of step 4
    (as a checkpoint gives them back): the same batches after step 4 and the same weights."""
    model, opt, sched, params = _parts()
    whole: list = []
    assert _steps(model, opt, sched, params, 7, 0, whole) == 7
    part, opt2, sched2, params2 = _parts()
    first: list = []
    assert _steps(part, opt2, sched2, params2, 4, 0, first) == 4
    rest: list = []
    assert _steps(part, opt2, sched2, params2, 7, 4, rest) == 7
    assert first + rest == whole and [s for s, _ in rest] == [5, 6, 7]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), part.parameters(), strict=True))


def test_fit_steps_ends_when_the_data_runs_out_before_total():
    """Batches counted by the data (one iterator over every epoch): 3 batches and total 10 train 3
    steps and return, instead of asking an empty epoch again and again."""
    from ralm.train.loop import fit_steps

    model, opt, sched, params = _parts()
    walk = iter([[0, 1], [2, 3], [4, 5]])
    seen = []
    steps = fit_steps(
        total=10,
        start=0,
        epoch_batches=lambda: walk,
        loss_of=lambda b: (((model(X[b])[:, 0] - Y[b]) ** 2).mean(), None),
        opt=opt,
        sched=sched,
        params=params,
        grad_clip=None,
        on_step=lambda step, loss, info, norm: seen.append((step, norm)),
    )
    assert steps == 3 and seen == [(1, 0.0), (2, 0.0), (3, 0.0)]


def test_accumulated_step_equals_one_step_on_the_whole_batch():
    """Two micro-batches of 5 scaled by 1/2 give the gradient (and the update) of one batch of 10;
    `extra` runs after their backward passes, before the update, and its objective adds to the
    gradients (here half the whole batch's loss again: 1.5 times its gradient in all); without
    clipping the norm is measured, with it the norm before clipping is returned."""
    from ralm.train.loop import accumulated_step

    def mse(model, idx):
        return ((model(X[idx])[:, 0] - Y[idx]) ** 2).mean()

    model, opt, sched, _ = _parts()
    calls = []

    def extra():
        calls.append([p.grad.clone() for p in model.parameters()])
        return mse(model, torch.arange(10)) / 2

    norm = accumulated_step(
        model,
        opt,
        sched,
        grad_accum=2,
        micro=lambda m: mse(model, torch.arange(5 * m, 5 * m + 5)) / 2,
        max_grad_norm=0.0,
        extra=extra,
    )
    ref, ropt, rsched, rparams = _parts()
    mse(ref, torch.arange(10)).backward()
    assert all(torch.allclose(g, p.grad) for g, p in zip(calls[0], rparams, strict=True))
    ropt.zero_grad()
    (1.5 * mse(ref, torch.arange(10))).backward()
    want = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in rparams]))
    assert norm == pytest.approx(float(want), rel=1e-6)
    ropt.step()
    assert all(torch.allclose(a, b) for a, b in zip(model.parameters(), ref.parameters(), strict=True))
    clipped = accumulated_step(
        model,
        opt,
        sched,
        grad_accum=1,
        micro=lambda m: mse(model, torch.arange(10)),
        max_grad_norm=1e-3,
        extra=lambda: None,  # nothing this step: the update is the micro-batch's alone
    )
    assert clipped > 1e-3  # the norm before clipping


def test_optimizer_step_without_a_loss_moves_nothing():
    """No loss to learn from: no update, no schedule step, and None for the norm."""
    from ralm.train.loop import optimizer_step

    model, opt, sched, params = _parts()
    before = [p.detach().clone() for p in params]
    assert optimizer_step(opt, sched, params, [None, None], max_grad_norm=1.0) is None
    assert all(torch.equal(a, b) for a, b in zip(before, params, strict=True))
    assert sched.last_epoch == 0
    assert optimizer_step(opt, sched, params, [None, _loss(model, [0, 1])], max_grad_norm=1.0) > 0
    assert sched.last_epoch == 1 and not torch.equal(before[0], params[0])


def test_fit_steps_stops_when_the_step_callback_says_so_and_runs_without_a_schedule():
    from ralm.train.loop import fit_steps

    model, opt, _, params = _parts()
    lrs = []

    def on_step(step, loss, info, norm):
        lrs.append(opt.param_groups[0]["lr"])
        return step == 2

    steps = fit_steps(
        total=10,
        start=0,
        epoch_batches=lambda: [[0, 1], [2, 3], [4, 5]],
        loss_of=lambda b: (((model(X[b])[:, 0] - Y[b]) ** 2).mean(), None),
        opt=opt,
        sched=None,
        params=params,
        grad_clip=None,
        on_step=on_step,
    )
    assert steps == 2 and lrs == [0.1, 0.1]  # stopped after step 2; no schedule moved the rate
