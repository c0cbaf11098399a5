"""`ralm retriever train`: train a dual encoder from labelled pairs (DPR) or from raw text (contrastive).

    cfg = RetrieverTrainConfig(mode="dpr", epochs=3, batch_size=32, hard_negatives=1)
    train_retriever(DualEncoder.from_pretrained(None), pairs, "runs/dpr", cfg, dev=dev_pairs)
    # runs/dpr/encoder/ (the best dev checkpoint), metrics.jsonl, results.json, train_config.json

Modes:
- **dpr** (Karpukhin et al. 2020): each step takes B questions with one positive each (no two
  sharing a positive: a batch is filled greedily and a clash waits for the next batch) and
  `hard_negatives` BM25 negatives each, drawn from the top `negative_depth` passages without the
  answer (`ralm.retrieval.training.negatives`); every question is scored against all B(1 + h) passages.
  A passage that is another positive of a question, or holds its answer, is masked out of that
  question's softmax instead of being pushed away.
- **contrastive**: pseudo pairs from a DocStore's chunks (`ralm.retrieval.training.views`: Contriever's
  independent cropping, ICT, or both), in-batch negatives only.
The loss and gradient caching are `ralm.retrieval.training.contrastive`'s. Dev evaluation
(`ralm.retrieval.training.dev_eval`, eval-retrieval's measures) runs at each epoch end or every
`eval_every` steps; the encoder with the best `select` metric is saved to `OUT/encoder`
(atomically), which `ralm index build --encoder`, `eval-retrieval --dense`, `finetune` and
`pretrain` (`retriever = ...`) load. Without dev questions, contrastive training measures recall
on chunks it holds out (a crop of each as the query, among all held-out chunks).

Resuming: `OUT/checkpoints/step-N` (weights, optimiser, schedule, generator states) is written
every `save_every` steps and at each evaluation; the batches are a function of (seed, epoch,
batch) only, so a rerun of the same command after a crash (kill -9 included) continues from the
newest intact checkpoint and draws what the uninterrupted run would have drawn. Half-written
leftovers of a dead run are removed with a note. A finished OUT is kept unless --overwrite.

Left out: multi-process training (in-batch negatives across GPUs need an all-gather of vectors)
and negatives mined with the encoder being trained (ANCE).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ralm.atomic import write_json_atomic
from ralm.errors import RalmError
from ralm.model_card import write_model_card
from ralm.models.precision import autocast_dtype
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.training.batches import SupervisedBatches, UnsupervisedBatches
from ralm.retrieval.training.contrastive import contrastive_losses
from ralm.retrieval.training.data import PairSet
from ralm.retrieval.training.run import RESULTS, prepare_run
from ralm.train.device import resolve_device
from ralm.train.logging import MetricsLogger, truncate_metrics
from ralm.train.loop import optimizer_step

MODES = ("dpr", "contrastive")


@dataclass
class RetrieverTrainConfig:
    """Options of one retriever training run; saved as OUT/train_config.json."""

    mode: str = "dpr"  # dpr (labelled pairs) | contrastive (pseudo pairs from raw text)
    recipe: str = "crop"  # contrastive views: crop (Contriever) | ict | both
    epochs: float = 3.0  # passes over the pairs (dpr); contrastive counts steps
    steps: int = 0  # > 0: stop after this many optimiser steps (contrastive default: 1000)
    batch_size: int = 32  # questions per step (DPR: 128 on 8 GPUs; in-batch negatives = B - 1)
    grad_cache: int = 0  # > 0: gradient caching with mini-batches of this many rows (memory of one)
    lr: float = 2e-5  # peak learning rate (DPR: 2e-5 for BERT-base)
    weight_decay: float = 0.01
    warmup_frac: float = 0.1  # linear warm-up over this fraction of the steps
    schedule: str = "linear"  # linear | cosine | constant after warm-up
    # logits = q.d / temperature; None = 0.05 for unit vectors (sentence-transformers' scale 20), else 1;
    # the encoder saves 1 / temperature as its score_scale (REALM's p(z|x) then has the trained sharpness)
    temperature: float | None = None
    hard_negatives: int = 1  # BM25 negatives per question and step (DPR: 1)
    negative_depth: int = 10  # drawn from this many top BM25 passages without the answer
    grad_clip: float = 1.0
    eval_every: int = 0  # steps between dev evaluations; 0 = each epoch end (dpr) / at the end
    select: str = "recall@5"  # dev metric that picks the saved encoder; "last" keeps the last one
    ks: tuple[int, ...] = (1, 5, 20)
    lang: str = "en"  # answer normalisation and BM25 analysis
    save_every: int = 200  # steps between resumable checkpoints
    keep_checkpoints: int = 1
    log_every: int = 10
    heldout: int = 500  # contrastive without dev questions: chunks held out for held-out recall
    crop_min: float = 0.1  # contrastive crops: share of the chunk's tokens (Contriever: 0.1-0.5)
    crop_max: float = 0.5
    delete_prob: float = 0.1  # Contriever's random word deletion in each crop
    remove_prob: float = 0.9  # ICT: remove the query sentence from its document
    seed: int = 0
    autocast: str = "auto"
    device: str = "auto"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise RalmError(f"mode {self.mode!r}: choose one of {', '.join(MODES)}")
        for name in ("batch_size", "save_every", "log_every", "negative_depth"):
            if getattr(self, name) < 1:
                raise RalmError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if self.batch_size < 2:
            raise RalmError(f"--batch-size {self.batch_size}: in-batch negatives need at least 2")
        if self.temperature is not None and self.temperature <= 0:
            raise RalmError(f"--temperature {self.temperature}: must be > 0")
        if self.hard_negatives < 0 or self.grad_cache < 0 or self.steps < 0 or self.epochs < 0:
            raise RalmError("--hard-negatives, --grad-cache, --steps and --epochs must be >= 0")
        self.ks = tuple(int(k) for k in self.ks)

    def comparable(self) -> dict[str, Any]:
        """The settings a resumed run must share with the one that wrote the checkpoint."""
        d = asdict(self)
        for k in ("log_every", "save_every", "keep_checkpoints", "device"):
            d.pop(k)
        d["ks"] = list(d["ks"])
        return d


# ----------------------------------------------------------------------------- the loop
def train_retriever(
    encoder: DualEncoder,
    train: PairSet | Any,
    out: str | os.PathLike,
    cfg: RetrieverTrainConfig,
    *,
    dev: PairSet | None = None,
    negatives: list[list[int]] | None = None,
    data: dict[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    log=print,
) -> dict[str, Any]:
    """Train `encoder` (mode dpr: `train` is a PairSet, `negatives` its mined hard negatives; mode
    contrastive: `train` is a StorePassages) and write OUT (see the module docstring).

    Returns the results written to OUT/results.json (best step and metrics, counts, seconds).
    """
    from ralm.locks import writer_lock
    from ralm.progress import tqdm
    from ralm.train.checkpoint import intact_checkpoint, load_checkpoint, restore_rng, save_checkpoint
    from ralm.train.optim import adamw, param_groups, warmup_schedule
    from ralm.train.run import finished_note

    out = Path(out)
    data = dict(data or {})
    device = resolve_device(cfg.device)  # before anything is written: a bad --device leaves nothing behind
    with writer_lock(out, "ralm retriever train"):
        start = prepare_run(out, cfg.comparable(), data, overwrite, log)
        if start == "finished":
            log(finished_note(out, str(out / RESULTS)))
            return json.loads((out / RESULTS).read_text(encoding="utf-8"))
        resume = start == "resume"
        torch.manual_seed(cfg.seed)
        encoder.to(device).train()
        tau = cfg.temperature or (0.05 if encoder.config.normalize else 1.0)
        encoder.config.score_scale = 1.0 / tau
        amp = autocast_dtype(device, cfg.autocast, next(encoder.parameters()).dtype)

        heldout = None
        if cfg.mode == "dpr":
            if not isinstance(train, PairSet) or negatives is None:
                raise ValueError("mode dpr needs a PairSet and its mined negatives")
            if len(train.examples) < 2:
                raise RalmError(
                    f"{train.source}: {len(train.examples)} usable pairs; training needs at least 2"
                )
            batches = SupervisedBatches(
                train,
                negatives,
                batch_size=cfg.batch_size,
                hard_negatives=cfg.hard_negatives,
                seed=cfg.seed,
                lang=cfg.lang,
            )
            per_epoch = batches.steps_per_epoch()
            total = cfg.steps or max(1, math.ceil(cfg.epochs * per_epoch))
        else:
            from ralm.retrieval.training.views import PairViews

            views = PairViews(
                train,
                encoder,
                cfg.recipe,
                crop_min=cfg.crop_min,
                crop_max=cfg.crop_max,
                delete_prob=cfg.delete_prob,
                remove_prob=cfg.remove_prob,
            )
            perm = np.random.default_rng([cfg.seed, 7]).permutation(len(train))
            n_held = 0 if dev is not None else min(cfg.heldout, len(train) // 5)
            held_ids, train_ids = perm[:n_held], perm[n_held:]
            if len(train_ids) < cfg.batch_size:
                raise RalmError(
                    f"{train.describe()}: {len(train_ids)} training chunks, fewer than --batch-size"
                )
            batches = UnsupervisedBatches(views, train_ids, batch_size=cfg.batch_size, seed=cfg.seed)
            per_epoch = 0
            total = cfg.steps or 1000
            if n_held >= 2:
                q_rows, _, used = views.rows(held_ids, np.random.default_rng([cfg.seed, 9]))
                heldout = (q_rows, np.asarray(used, dtype=np.int64), train)

        opt = adamw(param_groups(encoder, cfg.lr, cfg.weight_decay))
        sched = warmup_schedule(opt, cfg.schedule, int(cfg.warmup_frac * total), total)
        step, best, best_step, last_eval = 0, None, 0, {}
        if resume:
            ckpt = intact_checkpoint(out, command="ralm retriever train")
            if ckpt is not None:
                state = load_checkpoint(ckpt, encoder, opt, sched, purpose="resume")
                restore_rng(state["rng"], device, 1)
                step = int(state["step"])
                best, best_step = state.get("best"), int(state.get("best_step", 0))
                last_eval = state.get("last_eval") or {}
                truncate_metrics(out, step)
                log(f"resuming {out} from step {step} of {total}")
        logger = MetricsLogger(out)
        evaluate = _evaluator(encoder, dev, heldout, cfg)
        t0 = time.perf_counter()
        bar = tqdm(total=total, initial=step, desc=f"retriever {cfg.mode}", disable=not progress, unit="step")

        def checkpoint() -> None:
            save_checkpoint(
                out,
                step,
                encoder,
                opt,
                sched,
                None,
                examples_seen=step * cfg.batch_size,
                mode=cfg.mode,
                keep=cfg.keep_checkpoints,
                docstore_fingerprint=train_fingerprint(train),
            )
            st = out / "checkpoints" / f"step-{step:07d}" / "state.json"
            s = json.loads(st.read_text(encoding="utf-8"))
            s.update(best=best, best_step=best_step, last_eval=last_eval)
            write_json_atomic(st, s)

        try:
            if step == 0 and evaluate is not None:
                last_eval = evaluate()
                logger.log(0, **_prefixed(last_eval))
                log(_eval_line(0, last_eval))
            while step < total:
                if cfg.mode == "dpr":
                    epoch, b = divmod(step, per_epoch)
                    q_rows, d_rows, targets, mask = batches.batch(epoch, b, encoder)
                else:
                    q_rows, d_rows, targets, mask = batches.batch(step)
                res, losses = contrastive_losses(
                    encoder, q_rows, d_rows, targets, mask, chunk=cfg.grad_cache, amp=amp, device=device
                )
                grad_norm = optimizer_step(
                    opt, sched, encoder.parameters(), losses, max_grad_norm=cfg.grad_clip
                )
                step += 1
                bar.update(1)
                if step % cfg.log_every == 0 or step == total:
                    logger.log(
                        step,
                        loss=res.loss,
                        inbatch_acc=res.accuracy,
                        lr=sched.get_last_lr()[0],
                        grad_norm=grad_norm,
                        seconds=time.perf_counter() - t0,
                    )
                    bar.set_postfix(loss=f"{res.loss:.3f}", acc=f"{res.accuracy:.2f}")
                at_epoch_end = cfg.mode == "dpr" and per_epoch and step % per_epoch == 0
                due = (cfg.eval_every and step % cfg.eval_every == 0) or (not cfg.eval_every and at_epoch_end)
                if evaluate is not None and (due or step == total):
                    last_eval = evaluate()
                    extra = {"epoch": step / per_epoch} if per_epoch else {}
                    logger.log(step, **_prefixed(last_eval), **extra)
                    log(_eval_line(step, last_eval))
                    score = last_eval.get(cfg.select, last_eval.get(f"heldout_{cfg.select}"))
                    if cfg.select != "last" and score is not None and (best is None or score > best):
                        best, best_step = float(score), step
                        encoder.save(out / "encoder")
                    checkpoint()
                elif step % cfg.save_every == 0:
                    checkpoint()
        finally:
            bar.close()
            logger.close()
        if cfg.select == "last" or best is None:
            encoder.save(out / "encoder")
            best_step = step
        results = {
            "mode": cfg.mode,
            "recipe": cfg.recipe if cfg.mode == "contrastive" else None,
            "temperature": tau,
            "steps": step,
            "steps_per_epoch": per_epoch or None,
            "best_step": best_step,
            "select": cfg.select,
            "best": best,
            "last_eval": last_eval,
            "data": data,
            "seconds": round(time.perf_counter() - t0, 1),
            "encoder": str(out / "encoder"),
        }
        write_json_atomic(out / RESULTS, results)
        write_model_card(out / "encoder", encoder_card(out, cfg, results))
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        return results


def encoder_card(out: Path, cfg: RetrieverTrainConfig, results: dict[str, Any]) -> str:
    """The README.md model card of a trained encoder: how it was trained and how it scored on dev."""
    from ralm.model_card import model_card

    best = results.get("best")
    details = {
        "trained by": f"ralm `retriever train {cfg.mode}`"
        + (f" (recipe {cfg.recipe})" if cfg.mode == "contrastive" else ""),
        "training data": ", ".join(
            f"{k} `{Path(str(v)).name}`"
            for k, v in results["data"].items()
            if k in ("train", "corpus", "dev")
        ),
        "steps": f"{results['steps']} (saved: step {results['best_step']}, by dev {cfg.select})",
        f"dev {cfg.select}": "–" if best is None else f"{best:.4f}",
        "batch size / lr / temperature": f"{cfg.batch_size} / {cfg.lr:g} / {results.get('temperature')}",
        "language (answers, BM25)": cfg.lang,
    }
    return model_card(
        f"{out.name}: a dense retriever trained with ralm",
        "A dual encoder (score = query vector . document vector, times the saved score scale) trained "
        "with in-batch negatives. `query/` and `doc/` are each a Hugging Face and sentence-transformers "
        "model directory; ralm takes the whole directory (`ralm index build --encoder`, `ralm pretrain`).",
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=["ralm", "dense-retrieval", cfg.mode],
        details={k: v for k, v in details.items() if v},
        usage=f"""
from sentence_transformers import SentenceTransformer

queries = SentenceTransformer("{out.name}/encoder/query")
docs = SentenceTransformer("{out.name}/encoder/doc")
scores = queries.encode(["a question"]) @ docs.encode(["a passage"]).T
""",
    )


def train_fingerprint(train) -> str:
    passages = train.passages if isinstance(train, PairSet) else train
    return passages.fingerprint


def _prefixed(metrics: dict[str, float]) -> dict[str, float]:
    return {f"dev_{k}": v for k, v in metrics.items()}


def _eval_line(step: int, m: dict[str, float]) -> str:
    return f"step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in m.items())


def _evaluator(encoder: DualEncoder, dev: PairSet | None, heldout, cfg: RetrieverTrainConfig):
    """A function returning the dev metrics now (None when there is nothing to evaluate on)."""
    from ralm.retrieval.training.dev_eval import evaluate_pairs, heldout_recall

    if dev is not None:
        return lambda: evaluate_pairs(encoder, dev, ks=cfg.ks, lang=cfg.lang, autocast=cfg.autocast)
    if heldout is None:
        return None
    q_rows, ids, passages = heldout
    return lambda: heldout_recall(encoder, q_rows, ids, passages, ks=cfg.ks, autocast=cfg.autocast)


def config_from(args: dict[str, Any]) -> RetrieverTrainConfig:
    """A RetrieverTrainConfig from a dict, ignoring keys that are not its fields."""
    names = {f.name for f in fields(RetrieverTrainConfig)}
    return RetrieverTrainConfig(**{k: v for k, v in args.items() if k in names and v is not None})
