"""Training and evaluating SUREALM and its no-retrieval baseline (the same backbone, same loop).

`train(cfg)`: cross-entropy over every predicted token of the training sentences (shuffled per
epoch, seeded), AdamW with no decay on biases and norms, linear (SUREALM §4.2) or cosine decay
after warm-up, clipping, bf16 autocast where the hardware has it. Every `eval_every` steps the
validation perplexity is measured and the best model so far is kept (the paper keeps the
checkpoint of minimum validation perplexity): `out/` holds surealm.json, config.json, tokenizer
files and model.safetensors of that model, plus train.json (the config and the data store path),
metrics.jsonl and eval.json.

`evaluate(model, tokenizer, store, split)`: token- and word-level perplexity
(`ralm.surealm.data.PerplexityCounts`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ralm.atomic import move_into_place, write_json_atomic
from ralm.errors import RalmError
from ralm.models.precision import autocast_context, autocast_dtype
from ralm.surealm.data import IGNORE_INDEX, PerplexityCounts, SentenceBatcher
from ralm.surealm.datastore import Datastore
from ralm.surealm.model import SurealmConfig, SurealmLM
from ralm.surealm.options import DEFAULT_PATHWAY
from ralm.surealm.sentences import FILL_SPLITS
from ralm.train.device import resolve_device
from ralm.train.logging import METRICS_FILE, MetricsLogger
from ralm.train.loop import fit_steps
from ralm.train.optim import adamw, param_groups, warmup_schedule
from ralm.train.run import out_state

logger = logging.getLogger(__name__)

TRAIN_FILE = "train.json"

__all__ = ["TrainConfig", "evaluate", "load_trained", "run_datastore", "train"]


@dataclass
class TrainConfig:
    """One SUREALM (or baseline) training run."""

    datastore: str = ""
    out: str = ""
    lm: str | None = None  # backbone spec: minilm | smollm2 | a directory; None = the data store's LM
    # a trained run (SUREALM or no-retrieval) whose backbone weights start this run, e.g. add
    # retrieval to an LM already fine-tuned on the sentences; its memory maps are not taken
    init_from: str | None = None
    retrieval: bool = True  # False: the no-retrieval baseline
    k: int = 8  # SUREALM: 8
    delta: int = 1  # SUREALM: 1
    steps: int = 1000
    batch_size: int = 32  # sentences per step (SUREALM small models: 128)
    lr: float = 1e-4  # SUREALM: 2e-5 for 200 epochs; more for a laptop's few thousand steps
    # zero (memory starts inert) | identity (eqs. 4-5 as written); see SurealmConfig.memory_init
    memory_init: str = "zero"
    memory_window: int | None = None  # latest blocks visible (None = all, eq. 6; SurealmConfig.memory_window)
    memory_gain: float | None = None  # starting gain of the memory LayerNorms (SurealmConfig.memory_gain)
    lr_memory: float | None = None  # lr of the memory projections (None = 10 x lr: they start from scratch)
    # where the memory enters (SurealmConfig.pathway): cross (gated cross-attention, inert at step 0) | self
    pathway: str = DEFAULT_PATHWAY
    memory_bias: float | None = None  # self pathway: learned memory-logit offset, starting here
    # retrieved | random (the control for retrieval itself) | null (the control for extra slots)
    neighbours: str = "retrieved"
    # training only: each memory slot becomes a null slot with this probability, drawn anew at every
    # read, so that the fixed offline neighbours are no code to memorise a training sentence by
    memory_dropout: float = 0.0
    weight_decay: float = 0.01
    warmup_steps: int = 100  # SUREALM: 500
    schedule: str = "linear"  # linear (SUREALM) | cosine | constant
    max_grad_norm: float = 1.0
    eval_every: int = 250  # validation perplexity; the best model is kept
    eval_sentences: int | None = 2000  # validation sentences per evaluation (None = all)
    seed: int = 0
    device: str = "auto"
    autocast: str = "auto"
    tensorboard: bool = True

    def check(self) -> None:
        for name, v in (
            ("steps", self.steps),
            ("batch_size", self.batch_size),
            ("eval_every", self.eval_every),
        ):
            if v < 1:
                raise RalmError(f"{name}={v}: must be >= 1")
        if not 0.0 <= self.memory_dropout < 1.0:
            raise RalmError(f"memory_dropout={self.memory_dropout}: must be in [0, 1)")

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def check_compatible(store: Datastore, cfg: SurealmConfig, tokenizer_sha: str) -> None:
    """Refuse a data store built with another encoder or LM tokenizer than the model's."""
    m = store.manifest
    if tokenizer_sha and m.get("lm_tokenizer_sha256") != tokenizer_sha:
        raise RalmError(
            f"{store.root}: built with another LM tokenizer than the model's; rebuild it with --lm set to the model's backbone"
        )
    if cfg.encoder_fingerprint and m.get("encoder_fingerprint") != cfg.encoder_fingerprint:
        raise RalmError(
            f"{store.root}: built with another sentence encoder than the model was trained with; "
            "use the model's data store or retrain"
        )
    if cfg.retrieval and int(m["dim"]) != cfg.mem_dim:
        raise RalmError(f"{store.root}: embeddings of dim {m['dim']}, the model expects {cfg.mem_dim}")


def _nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed NLL over labelled positions: logits (B, T, V), labels (B, T)."""
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


def _inputs(batch: dict, dev: torch.device) -> dict:
    keep = ("input_ids", "attention_mask", "mem_keys", "mem_values", "mem_block")
    return {k: batch[k].to(dev) for k in keep if k in batch}


@torch.inference_mode()
def evaluate(
    model: SurealmLM,
    batcher: SentenceBatcher,
    sids: np.ndarray,
    *,
    batch_size: int = 64,
    device: torch.device | None = None,
    autocast: str = "auto",
) -> PerplexityCounts:
    """Summed NLL and counts over sentences `sids` (token- and word-level perplexity)."""
    dev = device or next(model.parameters()).device
    ac = autocast_dtype(dev, autocast, torch.float32)
    was = model.training
    model.eval()
    total = PerplexityCounts()
    order = np.asarray(sids)[np.argsort([len(batcher.store.tokens(int(s))) for s in sids], kind="stable")]
    for s0 in range(0, len(order), batch_size):
        ids = order[s0 : s0 + batch_size]
        batch = batcher.batch(ids)
        with autocast_context(dev, ac):
            logits = model(**_inputs(batch, dev))
        c = batcher.counts(ids)
        c.nll = float(_nll(logits, batch["labels"].to(dev)))
        total.add(c)
    model.train(was)
    return total


def _save_atomic(model: SurealmLM, tokenizer, out: Path, extra: dict) -> None:
    """Write the model into a temp dir next to `out`, then swap it in (metrics files stay)."""
    tmp = out / ".model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save(tmp, tokenizer)
    for p in tmp.iterdir():
        move_into_place(p, out / p.name)
    tmp.rmdir()
    write_json_atomic(out / TRAIN_FILE, extra)


def train(cfg: TrainConfig, *, overwrite: bool = False, progress: bool = True) -> Path:
    """Train SUREALM (or the baseline with retrieval=False); returns the output directory."""
    from ralm.models.causal import load_as_causal_lm
    from ralm.models.tokenizers import load_lm_tokenizer
    from ralm.progress import tqdm

    cfg.check()
    store = Datastore(cfg.datastore)
    store.require_split(
        "valid",
        "training keeps the model of lowest validation perplexity, so it needs valid sentences; "
        f"rebuild the data store: {FILL_SPLITS}",
    )
    if cfg.lm is None:
        cfg.lm = str(store.manifest.get("lm", "minilm"))
    out = Path(cfg.out)
    state = out_state(out, METRICS_FILE, TRAIN_FILE)  # the run folder's rule (ralm.train.run)
    if state != "empty":
        if not overwrite:
            raise RalmError(f"{out}: exists; pass --overwrite to replace it")
        if state == "foreign":  # neither a finished nor an interrupted run
            raise RalmError(f"{out}: exists and is not a SUREALM training run; refusing to replace it")
        shutil.rmtree(out)
    tokenizer, tok_sha = load_lm_tokenizer(cfg.lm)
    mcfg = SurealmConfig(
        lm=cfg.lm,
        retrieval=cfg.retrieval,
        k=cfg.k,
        delta=cfg.delta,
        mem_dim=store.dim,
        memory_init=cfg.memory_init,
        memory_gain=cfg.memory_gain,
        memory_window=cfg.memory_window,
        pathway=cfg.pathway,
        memory_bias=cfg.memory_bias,
        neighbours=cfg.neighbours,
        datastore_fingerprint=store.fingerprint,
        encoder_fingerprint=store.manifest["encoder_fingerprint"],
        lm_tokenizer_sha256=tok_sha,
    )
    check_compatible(store, mcfg, tok_sha)
    if cfg.retrieval and cfg.k > len(store):
        raise RalmError(f"K={cfg.k} is more than the {len(store)} entries of {store.root}; lower K")
    torch.manual_seed(cfg.seed)
    dev = resolve_device(cfg.device)
    model = SurealmLM(load_as_causal_lm(cfg.lm), mcfg)
    if cfg.init_from:
        init_backbone(model, cfg.init_from, tok_sha)
    model = model.to(dev).train()
    batcher = SentenceBatcher(
        store,
        tokenizer,
        k=cfg.k,
        delta=cfg.delta,
        retrieval=cfg.retrieval,
        neighbours=cfg.neighbours,
        slot_dropout=cfg.memory_dropout,
    )
    train_ids, valid_ids = store.split_ids("train"), store.split_ids("valid")
    if not len(train_ids):
        raise RalmError(f"{store.root}: no training sentences")
    rng_eval = np.random.default_rng([cfg.seed, 5])
    if cfg.eval_sentences is not None and len(valid_ids) > cfg.eval_sentences:
        valid_ids = np.sort(rng_eval.choice(valid_ids, cfg.eval_sentences, replace=False))

    seen: set[int] = set()
    groups = param_groups(model.backbone, cfg.lr, cfg.weight_decay, name="lm", skip=seen)
    if cfg.retrieval:
        mem = memory_modules(model)
        lr_mem = cfg.lr_memory if cfg.lr_memory is not None else 10 * cfg.lr
        for m in mem:
            groups += param_groups(m, lr_mem, cfg.weight_decay, name="memory", skip=seen)
    opt = adamw(groups)
    sched = warmup_schedule(opt, cfg.schedule, cfg.warmup_steps, cfg.steps)
    ac = autocast_dtype(dev, cfg.autocast, torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    extra = {"config": asdict(cfg), "datastore": str(Path(cfg.datastore).resolve())}
    metrics = MetricsLogger(out, tensorboard=cfg.tensorboard)
    best = math.inf
    n = len(train_ids)
    bar = tqdm(
        total=cfg.steps, disable=not progress, unit="step", desc="surealm" if cfg.retrieval else "baseline"
    )
    params = list(model.parameters())

    def batches():
        for step in range(1, cfg.steps + 1):
            pos = (step - 1) * cfg.batch_size
            epoch, off = divmod(pos, n)
            order = np.random.default_rng([cfg.seed, 11, epoch]).permutation(n)
            idx = order[off : off + cfg.batch_size]
            if len(idx) < cfg.batch_size:  # wrap into the next epoch's order
                nxt = np.random.default_rng([cfg.seed, 11, epoch + 1]).permutation(n)
                idx = np.concatenate([idx, nxt[: cfg.batch_size - len(idx)]])
            yield idx

    def loss_of(idx):
        batch = batcher.batch(train_ids[idx], train=True)
        with autocast_context(dev, ac):
            logits = model(**_inputs(batch, dev))
        labels = batch["labels"].to(dev)
        ntok = int((labels != IGNORE_INDEX).sum())
        return _nll(logits, labels) / max(ntok, 1), None

    t0 = time.perf_counter()

    def on_step(step: int, lv: float, _info, gn: float) -> None:
        nonlocal best, t0
        if not math.isfinite(lv):
            raise RalmError(
                f"step {step}: the loss is not finite; lower the learning rate or use --autocast off"
            )
        row = {
            "loss": lv,
            "ppl": math.exp(min(lv, 50.0)),
            "lr": sched.get_last_lr()[0],
            "grad_norm": gn,
            "epoch": (step - 1) * cfg.batch_size / n,
            "step_seconds": time.perf_counter() - t0,
        }
        if step % cfg.eval_every == 0 or step == cfg.steps:
            c = evaluate(model, batcher, valid_ids, device=dev, autocast=cfg.autocast)
            row.update({"valid_token_ppl": c.token_ppl, "valid_word_ppl": c.word_ppl})
            if model.cross is not None:
                row["gate_mean_abs"] = float(np.mean(np.abs(model.gates())))
            if c.token_ppl < best:
                best = c.token_ppl
                _save_atomic(model, tokenizer, out, {**extra, "best_step": step, "valid": c.as_dict()})
        metrics.log(step, **row)
        bar.update(1)
        bar.set_postfix(loss=f"{row['loss']:.3f}")
        t0 = time.perf_counter()

    try:
        fit_steps(
            total=cfg.steps,
            start=0,
            epoch_batches=batches,
            loss_of=loss_of,
            opt=opt,
            sched=sched,
            params=params,
            grad_clip=cfg.max_grad_norm if cfg.max_grad_norm > 0 else None,
            on_step=on_step,
        )
    finally:
        bar.close()
        metrics.close()
    return out


def init_backbone(model: SurealmLM, run: str | os.PathLike, tokenizer_sha: str) -> None:
    """Copy the backbone weights of the trained run `run` into `model` (same architecture and tokenizer)."""
    src, _ = SurealmLM.load(run)
    if src.config.lm_tokenizer_sha256 and src.config.lm_tokenizer_sha256 != tokenizer_sha:
        raise RalmError(
            f"{run}: trained with another LM tokenizer than this run's; start from a run of the same LM"
        )
    try:
        model.backbone.load_state_dict(src.backbone.state_dict(), strict=True)
    except RuntimeError as exc:
        raise RalmError(
            f"{run}: its backbone does not fit this run's ({str(exc).splitlines()[0][:160]}); "
            "start from a run of the same LM"
        ) from None


def memory_modules(model: SurealmLM) -> list[torch.nn.Module]:
    """The memory projections, cross-attention blocks and memory-logit offset (trained from scratch,
    so at their own learning rate)."""
    mods: list[torch.nn.Module] = [model.key_proj, model.value_proj, model.key_norm, model.value_norm]
    if model.cross is not None:
        mods.append(model.cross)
    if model.memory_bias is not None:
        holder = torch.nn.Module()
        holder.memory_bias = model.memory_bias
        mods.append(holder)
    return mods


def run_datastore(path: str | os.PathLike, datastore: str | os.PathLike | None = None) -> str | None:
    """The data store of the trained run `path`: `datastore` if given, else the one it recorded (or None)."""
    if datastore:
        return str(datastore)
    f = Path(path) / TRAIN_FILE
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text(encoding="utf-8")).get("datastore")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None


def load_trained(path: str | os.PathLike, datastore: str | os.PathLike | None = None, device: str = "auto"):
    """(model, tokenizer, store, batcher) of a trained run; `datastore` overrides the recorded one."""
    d = Path(path)
    model, tok = SurealmLM.load(d)
    ds = run_datastore(d, datastore)
    if not ds:
        raise RalmError(f"{d}: no data store recorded; pass --datastore")
    store = Datastore(ds)
    from ralm.models.tokenizers import tokenizer_fingerprint

    check_compatible(store, model.config, tokenizer_fingerprint(tok))
    if model.config.retrieval and model.config.datastore_fingerprint not in ("", store.fingerprint):
        logger.warning("%s: not the data store the model was trained with (fingerprints differ)", store.root)
    model.to(resolve_device(device))
    batcher = SentenceBatcher(
        store,
        tok,
        k=model.config.k,
        delta=model.config.delta,
        retrieval=model.config.retrieval,
        neighbours=model.config.neighbours,
    )
    return model, tok, store, batcher
