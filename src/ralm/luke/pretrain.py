"""LUKE/DaLUKE pre-training: masked word + masked entity prediction over a DocStore.

`pretrain(cfg)` reads the entity spans of the chosen sources (`ralm.luke.data`), builds the
entity vocabulary (`ralm.luke.vocab`), starts the model from a BERT-like backbone
(`ralm.luke.init.from_bert`), then per optimiser step masks `batch_size x grad_accum` chunks,
minimises mlm_loss + mep_loss (each the mean cross-entropy over its masked positions, as LUKE
sums the two), clips, steps AdamW and the warm-up schedule, logs and checkpoints. At the last
step the model is written to RUN/model (`ralm.luke.io.save_model`).

Run directory: config.toml, entity_vocab.tsv, metrics.jsonl (+ tb/), checkpoints/step-N (model,
optimizer and scheduler state, torch RNG; `ralm.train.checkpoint`), model/. Everything the
inputs can get wrong (no entity spans for the sources, a tokenizer other than the store's, l > L,
a vocabulary that does not match the run on resume) is checked before anything is written
(`ralm.luke.pretrain_run`), so a failed start leaves --out as it was (an --overwrite deletes the
old run only after the checks).

Shared with `ralm pretrain` (REALM): the data order and per-example mask generators
(`ralm.realm.data`), AdamW groups and schedules (`ralm.train.optim`), metrics
(`ralm.train.logging`), checkpoints and their integrity records (`ralm.train.checkpoint`),
the writer lock, bf16 autocast and torchrun DDP (`ralm.train.distributed`). Determinism: step s
masks example j of micro-batch m with `default_rng([seed, s, m, j])` and the torch RNG state is
checkpointed, so a resumed run reaches the same weights as an uninterrupted one, and the
examples of a step do not depend on the number of processes. Under DDP each loss is normalised
by the masked positions of all ranks, so the averaged gradient is a single process's.

Metrics per step: loss, mlm_loss, mep_loss, mlm_acc, mep_acc (over the masked positions), lr,
grad_norm, entities_per_1k_tokens (entity tokens per 1,000 word tokens of the batch),
masked_words, masked_entities, examples_seen, step_seconds, elapsed_seconds. Step 0 records the
corpus: entities per 1,000 words with the run's sources, with links alone and with links +
auto-annotation (DaLUKE: 5 from links alone), words, tokens, training chunks, parameters.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ralm.errors import RalmError
from ralm.locks import writer_lock
from ralm.luke.annotations import annotation_stats
from ralm.luke.data import LukeCollator, MaskSettings
from ralm.luke.pretrain_config import CONFIG_FILE, LukePretrainConfig
from ralm.luke.pretrain_run import (
    COMMAND,
    MODEL_DIR,
    corpus_stats,
    is_finished,
    open_run,
    prepare,
    read_run_config,
)
from ralm.luke.stages import entity_side, set_stage, staged_schedule
from ralm.models.precision import autocast_context, autocast_dtype
from ralm.realm.data import batch_positions, example_rngs
from ralm.realm.training.run import check_checkpoint_corpus
from ralm.train.checkpoint import load_checkpoint, read_state, restore_rng, step_saver
from ralm.train.distributed import Dist, init_distributed, job
from ralm.train.logging import MetricsLogger, truncate_metrics
from ralm.train.loop import accumulated_step, run_steps
from ralm.train.optim import adamw, param_groups, warmup_schedule
from ralm.train.run import check_start, finished_note, out_state, rerun_of_finished

__all__ = ["MODEL_DIR", "corpus_stats", "prepare", "pretrain", "read_run_config", "train_step"]


def _ce_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, correct argmax count) over labels != -100; logits (..., C), labels (...)."""
    sel = labels != -100
    lg = logits[sel].float()  # (n, C)
    y = labels[sel]
    return F.cross_entropy(lg, y, reduction="sum"), (lg.argmax(-1) == y).sum()


MODEL_INPUTS = ("input_ids", "attention_mask", "entity_ids", "entity_attention_mask", "entity_position_ids")


def train_step(
    net: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched,
    collator: LukeCollator,
    train_ids: np.ndarray,
    cfg: LukePretrainConfig,
    step: int,
    dev: torch.device,
    ac: torch.dtype | None,
    dist: Dist | None = None,
) -> dict[str, float]:
    """One optimiser step (1-based `step`): grad_accum micro-batches, clip, AdamW, schedule.

    `net` is the LukeForPretraining or its DDP wrapper. A micro-batch is `cfg.batch_size` chunks in
    all; rank r takes its contiguous share. Returns the step's metrics over all ranks.
    """
    dist = dist or Dist()
    per_step = cfg.batch_size * cfg.grad_accum
    lo, hi = dist.share(cfg.batch_size)
    sums = np.zeros(8)  # mlm ce, mlm correct, mlm n, mep ce, mep correct, mep n, entities, words
    lr = opt.param_groups[0]["lr"]  # the step's learning rate, before the schedule moves it

    def micro(m: int) -> torch.Tensor:
        nonlocal sums
        ids = batch_positions(train_ids, cfg.seed, (step - 1) * per_step + m * cfg.batch_size, cfg.batch_size)
        batch = collator(ids[lo:hi], example_rngs(cfg.seed, step, m, range(lo, hi)))
        batch = {k: v.to(dev) for k, v in batch.items()}
        mlm_y, mep_y = batch["mlm_labels"], batch["entity_labels"]
        local = [
            float((mlm_y != -100).sum()),
            float((mep_y != -100).sum()),
            float(batch["entity_attention_mask"].sum()),
            float(batch["attention_mask"].sum() - 2 * batch["input_ids"].shape[0]),
        ]
        n_mlm, n_mep, n_ent, n_words = dist.all_reduce_sum(local)
        with autocast_context(dev, ac):
            out = net(**{k: batch[k] for k in MODEL_INPUTS})
        mlm_ce, mlm_ok = _ce_sum(out["mlm_logits"], mlm_y)
        mep_ce, mep_ok = _ce_sum(out["entity_logits"], mep_y)
        loss = mlm_ce / max(n_mlm, 1.0) + mep_ce / max(n_mep, 1.0)
        part = [float(mlm_ce.detach()), float(mlm_ok), float(mep_ce.detach()), float(mep_ok)]
        mlm_ce_all, mlm_ok_all, mep_ce_all, mep_ok_all = dist.all_reduce_sum(part)
        sums += [mlm_ce_all, mlm_ok_all, n_mlm, mep_ce_all, mep_ok_all, n_mep, n_ent, n_words]
        # DDP averages gradients over ranks: scale so the average is d(global mean loss)
        return loss * (dist.world / cfg.grad_accum)

    gn = accumulated_step(
        net,
        opt,
        sched,
        grad_accum=cfg.grad_accum,
        micro=micro,
        max_grad_norm=cfg.max_grad_norm,
        distributed=dist.enabled,
    )
    mlm_loss, mep_loss = sums[0] / max(sums[2], 1), sums[3] / max(sums[5], 1)
    return {
        "loss": mlm_loss + mep_loss,
        "mlm_loss": mlm_loss,
        "mep_loss": mep_loss,
        "mlm_acc": sums[1] / max(sums[2], 1),
        "mep_acc": sums[4] / max(sums[5], 1),
        "lr": lr,
        "grad_norm": gn,
        "entities_per_1k_tokens": 1000.0 * sums[6] / max(sums[7], 1),
        "masked_words": int(sums[2]),
        "masked_entities": int(sums[5]),
    }


def _optimizer(model: torch.nn.Module, cfg: LukePretrainConfig):
    """AdamW and its schedule: one warm-up and decay, or with `entity_first_steps` the two stages of
    `ralm.luke.stages` (the entity side in groups of its own, named "entity")."""
    if not cfg.entity_first_steps:
        opt = adamw(param_groups(model, cfg.lr, cfg.weight_decay, name="luke"))
        return opt, warmup_schedule(opt, cfg.schedule, cfg.warmup_steps, cfg.steps)
    ent = torch.nn.ParameterList([p for n, p in model.named_parameters() if entity_side(n)])
    seen: set[int] = set()
    groups = param_groups(ent, cfg.lr, cfg.weight_decay, name="entity", skip=seen)
    groups += param_groups(model, cfg.lr, cfg.weight_decay, name="luke", skip=seen)
    opt = adamw(groups)
    sched = staged_schedule(
        opt,
        first_steps=cfg.entity_first_steps,
        first_lr=cfg.entity_first_lr,
        lr=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        total_steps=cfg.steps,
        kind=cfg.schedule,
    )
    return opt, sched


# ----------------------------------------------------------------------------- the run
def pretrain(
    cfg: LukePretrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    stop_after: int | None = None,
) -> Path:
    """Train (or continue) the run `cfg.out`; returns its directory. See the module docstring.

    Under `torchrun` every process runs this: DDP over the model, each rank a share of every
    batch; rank 0 alone holds the writer lock and writes the run directory.
    stop_after: end this call after that step (checkpointed); `resume=True` continues the run.
    """
    if not cfg.docstore or not cfg.out:
        raise RalmError(
            "luke pretrain needs a docstore and an out directory (--docstore, --out or the config)"
        )
    with job(init_distributed(cfg.device, cfg.dist_timeout_s)) as dist, ExitStack() as held:
        return _pretrain(cfg, dist, held, resume, overwrite, progress, stop_after)


def _pretrain(
    cfg: LukePretrainConfig,
    dist: Dist,
    held: ExitStack,
    resume: bool,
    overwrite: bool,
    progress: bool,
    stop_after: int | None,
) -> Path:
    from ralm.luke.io import save_model
    from ralm.progress import tqdm
    from ralm.train.device import resolve_device

    if cfg.batch_size % dist.world:
        raise RalmError(
            f"batch_size={cfg.batch_size} is not divisible by the {dist.world} processes; use a multiple of {dist.world}"
        )
    run = Path(cfg.out)

    def finished() -> bool:  # a run in --out: looked at under its writer lock, kept from here on
        if overwrite or out_state(run, CONFIG_FILE) != "unfinished":
            return False
        held.enter_context(writer_lock(run))
        return rerun_of_finished(
            run, is_finished(run, cfg), f"step {cfg.steps}, {run / MODEL_DIR}", resume=resume
        )

    if dist.on_main(finished):
        if dist.is_main:
            print(finished_note(run, f"step {cfg.steps}, {run / MODEL_DIR}"), file=sys.stderr, flush=True)
        return run
    dist.on_main(lambda: check_start(run, CONFIG_FILE, COMMAND, resume=resume, overwrite=overwrite))
    prep = prepare(cfg)
    model = prep.model
    ckpt_name = dist.on_main(lambda: open_run(run, cfg, prep, held, resume, overwrite))
    dist.barrier()
    ckpt = Path(ckpt_name) if ckpt_name else None
    dev = dist.device if dist.enabled else resolve_device(cfg.device)
    model.to(dev)
    settings = MaskSettings(
        max_seq_length=cfg.max_seq_length,
        max_entities=cfg.max_entities,
        max_mention_length=cfg.max_mention_length,
        mlm_prob=cfg.mlm_prob,
        replace_probs=cfg.replace_probs,
        mep_prob=cfg.mep_prob,
        with_entities=cfg.mode == "luke",
    )
    collator = LukeCollator(prep.store, prep.spans, prep.vocab, prep.tok, settings)
    train_ids = np.flatnonzero(prep.store.lengths() > 0).astype(np.int64)
    opt, sched = _optimizer(model, cfg)
    start = 0
    torch.manual_seed(cfg.seed)
    if ckpt is not None:
        state = read_state(ckpt)
        check_checkpoint_corpus(run, ckpt, state, prep.store, cfg)
        state = load_checkpoint(ckpt, model, opt, sched, None, purpose="resume")
        start = int(state["step"])
        restore_rng(state["rng"], dev, dist.world)
        if dist.is_main:
            truncate_metrics(run, start)
    if dist.world > 1:
        torch.manual_seed(cfg.seed + 1000 * dist.rank + start)  # dropout differs per rank
    ac = autocast_dtype(dev, cfg.autocast, torch.float32)
    metrics = MetricsLogger(run, tensorboard=cfg.tensorboard) if dist.is_main else None
    show = progress and dist.is_main
    if metrics is not None and start == 0:
        st = annotation_stats(prep.spans)
        first = {
            "entities_per_1k_words": st.per_1k_words(cfg.entity_sources),
            "entities_per_1k_words_link": st.per_1k_words(["link"]),
            "entities_per_1k_words_link_auto": st.per_1k_words(["link", "auto"]),
            "corpus_words": st.words,
            "corpus_tokens": st.tokens,
            "train_chunks": len(train_ids),
            "entity_vocab": len(prep.vocab),
            "parameters": sum(p.numel() for p in model.parameters()),
        }
        metrics.log(0, **first)
        if show:
            tqdm.write(
                f"luke pretrain: {st.words} words, {len(prep.spans)} entity spans ({', '.join(cfg.entity_sources)}): "
                f"{first['entities_per_1k_words']:.2f} per 1,000 words (links alone "
                f"{first['entities_per_1k_words_link']:.2f}, links + auto {first['entities_per_1k_words_link_auto']:.2f})"
            )
    # entity parameters get no gradient in mode mlm or in a batch without entities
    staged = cfg.entity_first_steps > 0
    if staged:
        set_stage(model, start + 1, cfg.entity_first_steps)
    net = dist.wrap(model, find_unused_parameters=True)
    model.train()
    per_step = cfg.batch_size * cfg.grad_accum

    def step_row(step: int) -> dict:
        nonlocal net
        if staged and step == cfg.entity_first_steps + 1:  # the word side joins: DDP must see it
            set_stage(model, step, cfg.entity_first_steps)
            net = dist.wrap(model, find_unused_parameters=True)
        row = train_step(net, opt, sched, collator, train_ids, cfg, step, dev, ac, dist)
        if staged:
            row["stage"] = 1 if step <= cfg.entity_first_steps else 2
        row["examples_seen"] = step * per_step
        return row

    bar = tqdm(
        total=cfg.steps, initial=start, disable=not show, unit="step", desc=f"luke pretrain {cfg.mode}"
    )
    try:
        last = run_steps(
            start=start,
            total=cfg.steps,
            step_row=step_row,
            checkpoint=step_saver(run, cfg, model, opt, sched, None, prep.store.fingerprint),
            dist=dist,
            log=metrics,
            bar=bar,
            postfix=lambda row: {"mlm": f"{row['mlm_loss']:.3f}", "mep": f"{row['mep_loss']:.3f}"},
            not_finite='the loss is not finite; lower lr or use autocast = "off"',
            checkpoint_every=cfg.checkpoint_every,
            stop_after=stop_after,
        )
    finally:
        bar.close()
        if metrics is not None:
            metrics.close()
    finished = last >= cfg.steps
    if dist.is_main and finished:  # also when a resumed run had only its model left to write
        extra = {"run": str(run), "step": cfg.steps, "mode": cfg.mode, "sources": list(cfg.entity_sources)}
        save_model(model, run / MODEL_DIR, extra=extra)
    dist.barrier()
    return run
