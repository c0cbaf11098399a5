"""REALM/BRENT pre-training loop, and the MLM-only baseline in the same loop.

`pretrain(cfg)` builds the model from `cfg` (`ralm.realm.config.PretrainConfig`), builds index
version 0 with the initial doc tower, then per optimiser step: masks `batch_size x grad_accum`
training chunks, runs retrieve-then-predict, backpropagates the marginal likelihood, clips,
steps AdamW and the schedule, logs metrics, refreshes the index every `refresh_every` steps and
checkpoints every `checkpoint_every` steps. `pretrain(cfg, resume=True)` continues from the newest
checkpoint and reaches the same parameters as an uninterrupted run (same device, fixed seed).

Determinism: the data order is a fixed permutation per epoch (seeded by `seed` and the epoch);
the masking of micro-batch m of step s draws from ``default_rng([seed, s, m])``; dropout uses the
torch RNG, whose state is checkpointed. So a checkpoint needs only the step, the torch RNG,
the model, optimizer and scheduler states and the index version (saved next to it).

Run directory layout::

    config.toml  split.json  metrics.jsonl  tb/  index/v00003/
    checkpoints/step-0000300/{model.safetensors, optim.pt, rng.safetensors, state.json, index/}

One writer per run: the main process holds `ralm.locks.writer_lock(out)` from before it looks at
the directory until it returns, so a second `ralm pretrain` into the same --out (with --resume
or --overwrite too) stops with one line naming the holder's PID, before anything is deleted or
written. Resuming checks the newest checkpoint's recorded sizes and digests and falls back to
the newest intact one with a warning (`ralm.train.checkpoint`); a metrics.jsonl line cut off by
a crash is dropped with a warning.

Modules: `ralm.realm.training.build` (model, optimizer, refresher), `ralm.realm.data` (split and data
order), `ralm.realm.training.run` (the run directory, `load_run`), `ralm.train.checkpoint`; this module
is the loop.

Metrics per step (JSONL and TensorBoard): loss (NLL per masked token), ppl (masked-token
perplexity of the batch), lr_reader, lr_retriever, grad_norm, index_version, step_seconds and,
with retrieval, null_mass (mean p(null|x)), entropy (of p(z|x), nats), score_scale (the learned
multiplier on the scores, 1 when fixed), null_logit (null_doc = "logit"), distill_kl (retriever_loss
= "distill" or "answer"), answer_kl and answer_live (with `answer_queries`: their mean KL over the
queries whose chunks rank something, and the share of such queries), utility_1..utility_{k-1}
(REALM's retrieval utility log p(y|z,x) - log p(y|null,x) by retrieval rank, needs a null
document), answers_in_docs (fraction of masked tokens that occur in some retrieved chunk: the
reader can only copy those), refresh_seconds on refresh steps.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.models.precision import autocast_context, autocast_dtype
from ralm.realm.config import PretrainConfig
from ralm.realm.data import example_rngs, micro_batch_ids, split_ids
from ralm.realm.masking.mlm import MaskingCollator
from ralm.realm.modeling.candidates import queries_are_corpus, run_search
from ralm.realm.modeling.model import RealmModel, RealmOutput
from ralm.realm.training.answer_queries import answer_query_objective
from ralm.realm.training.build import (
    build_model,
    first_index,
    make_collator,
    make_refresher,
    optimizer_for,
)
from ralm.realm.training.run import (
    FINISHED,
    check_checkpoint_corpus,
    open_stores,
    prepare_run,
    write_split,
)
from ralm.train.checkpoint import (
    load_checkpoint,
    read_state,
    restore_rng,
    step_saver,
)
from ralm.train.device import resolve_device
from ralm.train.distributed import Dist, init_distributed, job
from ralm.train.logging import MetricsLogger, truncate_metrics
from ralm.train.loop import accumulated_step, run_steps
from ralm.train.optim import warmup_schedule
from ralm.train.run import finished_note

logger = logging.getLogger(__name__)

__all__ = ["pretrain", "step_metrics", "train_step"]


# ----------------------------------------------------------------------------- one step
def step_metrics(outs: list[RealmOutput], model: RealmModel) -> dict[str, float]:
    """Per-step numbers from the micro-batches' outputs (see the module docstring)."""
    nll = -sum(float(o.log_p_y.detach().sum()) for o in outs)
    n = sum(int(o.n_masked.sum()) for o in outs)
    m: dict[str, float] = {"loss": nll / max(n, 1), "ppl": math.exp(min(nll / max(n, 1), 50.0))}
    if model.retrieval:
        lpz = torch.cat([o.log_p_z.detach().float() for o in outs])
        p = lpz.exp()
        m["entropy"] = float(-(p * lpz).sum(1).mean())
        if all(o.answers_found is not None for o in outs):
            m["answers_in_docs"] = sum(int(o.answers_found.sum()) for o in outs) / max(n, 1)
        m["score_scale"] = model.prior.scale
        if model.prior.null_logit is not None:
            m["null_logit"] = float(model.prior.null_logit.detach())
        if all(o.aux is not None for o in outs):
            m["distill_kl"] = float(torch.cat([o.aux.detach().float() for o in outs]).mean())
        if model.null_doc != "none":
            m["null_mass"] = float(p[:, -1].mean())
            lpyz = torch.cat([o.log_p_y_given_z.detach().float() for o in outs])
            util = (lpyz[:, :-1] - lpyz[:, -1:]).mean(0)
            for i, u in enumerate(util.tolist(), start=1):
                m[f"utility_{i}"] = u
    return m


def train_step(
    model,
    opt: torch.optim.Optimizer,
    sched,
    collator: MaskingCollator,
    train_ids: np.ndarray,
    cfg: PretrainConfig,
    step: int,
    search,
    dev: torch.device,
    ac: torch.dtype | None,
    dist: Dist | None = None,
) -> tuple[list[RealmOutput], float, tuple[float, int], dict[str, float]]:
    """One optimiser step (1-based `step`): grad_accum micro-batches, clip, AdamW, schedule.

    `model` is the RealmModel or its DistributedDataParallel wrapper. A micro-batch is
    `cfg.batch_size` queries in all (the global batch); rank r of `dist` takes its contiguous
    share, and every query's masks come from its own generator (`example_rngs`), so the examples
    and masks of a step do not depend on the number of processes. The loss of a micro-batch is
    its summed NLL over the masked tokens of all ranks, so the averaged gradients equal a single
    process's on the whole batch.

    With `cfg.answer_queries`, the step's answer queries add their loss to the gradients before the
    clip (`ralm.realm.training.answer_queries.answer_query_objective`; one process).

    Returns this rank's micro-batch outputs, the gradient norm before clipping, the step's
    (summed NLL, masked tokens) over all ranks and the answer queries' metrics ({} without them).
    """
    dist = dist or Dist()
    outs: list[RealmOutput] = []
    lo, hi = dist.share(cfg.batch_size)
    sums = [0.0, 0]  # the step's summed NLL and masked tokens over all ranks
    extra: dict[str, float] = {}

    def micro(m: int) -> torch.Tensor:
        ids = micro_batch_ids(train_ids, cfg, step, m)
        batch = collator(ids[lo:hi], rngs=example_rngs(cfg.seed, step, m, range(lo, hi)))
        batch = {k: v.to(dev) for k, v in batch.items()}
        with autocast_context(dev, ac):
            out = model(batch, search)
        nll_local = -out.log_p_y.sum()
        nll_all, n_all = dist.all_reduce_sum([float(nll_local.detach()), float(out.n_masked.sum())])
        objective = nll_local if out.aux is None else nll_local + out.aux.sum()
        sums[0] += nll_all
        sums[1] += int(n_all)
        outs.append(out)
        # DDP averages gradients over ranks: scale so the average is d(global mean NLL)
        return objective * (dist.world / max(n_all, 1.0) / cfg.grad_accum)

    def answer_queries() -> torch.Tensor | None:
        core = getattr(model, "module", model)
        loss, metrics = answer_query_objective(core, collator, train_ids, cfg, step, search, dev, ac)
        extra.update(metrics)
        return loss

    gn = accumulated_step(
        model,
        opt,
        sched,
        grad_accum=cfg.grad_accum,
        micro=micro,
        max_grad_norm=cfg.max_grad_norm,
        distributed=dist.enabled,
        extra=answer_queries if cfg.answer_queries else None,
    )
    nll_sum, n_sum = sums
    return outs, gn, (nll_sum, n_sum), extra


# ----------------------------------------------------------------------------- the run
def pretrain(
    cfg: PretrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    stop_after: int | None = None,
) -> Path:
    """Train (or continue) the run `cfg.out`; returns its directory. See the module docstring.

    Under `torchrun` every process runs this: the model is wrapped in DistributedDataParallel,
    each rank takes its share of every global batch and of every corpus re-embedding, and rank 0
    alone holds the writer lock and writes the run directory, metrics and checkpoints.

    stop_after: end this call after that step (checkpointed), as a time-limited job would; the
    schedule still follows `cfg.steps` and `resume=True` continues the run.
    """
    if not cfg.docstore or not cfg.out:
        raise RalmError(
            "pretrain needs a docstore and an out directory (--docstore, --out or the config file)"
        )
    with job(init_distributed(cfg.device, cfg.dist_timeout_s)) as dist, ExitStack() as held:
        return _pretrain(
            cfg, dist, held, resume=resume, overwrite=overwrite, progress=progress, stop_after=stop_after
        )


def _pretrain(
    cfg: PretrainConfig,
    dist: Dist,
    held: ExitStack,
    *,
    resume: bool,
    overwrite: bool,
    progress: bool,
    stop_after: int | None,
) -> Path:
    from ralm.progress import tqdm

    if cfg.batch_size % dist.world:
        raise RalmError(
            f"batch_size={cfg.batch_size} (queries per micro-batch over all processes) is not divisible by "
            f"the {dist.world} processes; use a multiple of {dist.world}"
        )
    if cfg.answer_queries and dist.world > 1:
        raise RalmError(
            f"answer_queries={cfg.answer_queries} runs in one process only (their loss is not shared "
            f"among the {dist.world} processes yet); set answer_queries=0 or run one process"
        )
    run = Path(cfg.out)

    def open_run() -> str | None:
        ckpt = prepare_run(run, cfg, held, resume=resume, overwrite=overwrite)
        return str(ckpt) if ckpt is not None else None

    value = dist.on_main(open_run)  # every rank stops with rank 0's one line
    if value == FINISHED:
        if dist.is_main:
            print(finished_note(run, f"step {cfg.steps}"), file=sys.stderr, flush=True)
        return run
    ckpt = Path(value) if value else None
    store, qstore = open_stores(cfg)
    state = read_state(ckpt) if ckpt is not None else None
    if ckpt is not None:
        check_checkpoint_corpus(run, ckpt, state, store, cfg)
    torch.manual_seed(cfg.seed)
    dev = dist.device if dist.enabled else resolve_device(cfg.device)
    model, tokenizer = build_model(cfg, store)
    model.to(dev)
    same_corpus = queries_are_corpus(store, qstore)
    train_ids, held_out = split_ids(cfg, qstore)
    if dist.is_main:
        run.mkdir(parents=True, exist_ok=True)
        cfg.save(run)
        write_split(run, train_ids, held_out)
    dist.barrier()
    collator = make_collator(cfg, qstore, tokenizer, model, return_tensors="pt")
    opt = optimizer_for(model, cfg)
    sched = warmup_schedule(opt, cfg.schedule, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
    show = progress and dist.is_main
    refresher = make_refresher(cfg, model, run, dist, progress=show) if model.retrieval else None
    start = 0
    if ckpt is not None:
        state = load_checkpoint(ckpt, model, opt, sched, refresher, purpose="resume")
        start = int(state["step"])
        restore_rng(state["rng"], dev, dist.world)
        if dist.is_main:
            truncate_metrics(run, start)
        if refresher is not None and hasattr(refresher, "last_snapshot_step"):
            refresher.last_snapshot_step = start
        logger.info("resumed %s at step %d (index version %s)", run, start, state["index_version"])
    elif refresher is not None:
        first_index(refresher, cfg, model, show=show)
    if dist.world > 1:
        torch.manual_seed(cfg.seed + 1000 * dist.rank + start)  # dropout differs per rank
    ac = autocast_dtype(dev, cfg.autocast, torch.float32)
    metrics = MetricsLogger(run, tensorboard=cfg.tensorboard) if dist.is_main else None
    if metrics is not None and start == 0 and refresher is not None:
        metrics.log(0, refresh_seconds=refresher.last_seconds, index_version=refresher.version)
    per_step = cfg.batch_size * cfg.grad_accum
    search = None
    if refresher is not None:  # the query's own chunk excluded only when the queries are Z's chunks
        search = run_search(cfg, model, refresher.search, same_corpus=same_corpus)

    net = dist.wrap(model)
    fault = _fault_injection(dist)
    refreshing = refresher is not None and not model.doc_tower_frozen  # a frozen doc tower: the index stays

    def step_row(step: int) -> dict:
        if fault is not None and step == fault:
            os._exit(3)  # RALM_TEST_KILL_RANK_AT: this rank dies as if killed
        version = refresher.version if refresher is not None else None
        outs, gn, (nll, n), extra = train_step(
            net, opt, sched, collator, train_ids, cfg, step, search, dev, ac, dist
        )
        row = step_metrics(outs, model) | extra
        row["loss"] = nll / max(n, 1)  # over all ranks
        row["ppl"] = math.exp(min(row["loss"], 50.0))
        lrs = {g["name"]: g["lr"] for g in opt.param_groups}
        row["lr_reader"] = lrs.get("reader", lrs.get("reader_no_decay", 0.0))
        if model.retrieval:
            row["lr_retriever"] = lrs.get("retriever", lrs.get("retriever_no_decay", 0.0))
            row["index_version"] = version
        row["grad_norm"] = gn
        row["examples_seen"] = step * per_step
        return row

    def refresh(step: int, row: dict) -> None:
        if step == cfg.steps or (cfg.refresh_every and step % cfg.refresh_every == 0):
            bar.refresh()  # before a re-embedding, also in a log (which otherwise prints at intervals)
        if refreshing:
            t = refresher.maybe_refresh(step, model.encoder)
            if t is not None:
                row["refresh_seconds"] = t
                row.update(getattr(refresher, "last_swap", {}))

    def last_refresh(step: int) -> None:  # the final index is the final encoder's (sync refresh)
        if step != cfg.steps or not refreshing or not refresher.every or cfg.refresh_mode != "sync":
            return
        if refresher.built_at_step != step:
            t = refresher.refresh(model.encoder, step)
            if metrics is not None:
                metrics.log(step, refresh_seconds=t, index_version=refresher.version)

    bar = tqdm(total=cfg.steps, initial=start, disable=not show, unit="step", desc=f"pretrain {cfg.mode}")
    try:
        run_steps(
            start=start,
            total=cfg.steps,
            step_row=step_row,
            checkpoint=step_saver(run, cfg, model, opt, sched, refresher, store.fingerprint),
            dist=dist,
            log=metrics,
            bar=bar,
            postfix=lambda row: {"loss": f"{row['loss']:.3f}", "ppl": f"{row['ppl']:.1f}"},
            not_finite="the loss is not finite; lower the learning rates or use --autocast off",
            checkpoint_every=cfg.checkpoint_every,
            stop_after=stop_after,
            after_step=refresh,
            before_checkpoint=last_refresh,
        )
    finally:
        bar.close()
        if metrics is not None:
            metrics.close()
        if refresher is not None and hasattr(refresher, "close"):
            refresher.close()
    return run


def _fault_injection(dist: Dist) -> int | None:
    """RALM_TEST_KILL_RANK_AT="RANK:STEP" makes that rank exit abruptly at that step (fault tests)."""
    spec = os.environ.get("RALM_TEST_KILL_RANK_AT")
    if not spec:
        return None
    rank, step = (int(x) for x in spec.split(":"))
    return step if rank == dist.rank else None
