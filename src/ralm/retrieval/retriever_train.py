"""`ralm retriever train`: train a dual encoder from labelled pairs (DPR) or from raw text (contrastive).

    cfg = RetrieverTrainConfig(mode="dpr", epochs=3, batch_size=32, hard_negatives=1)
    train_retriever(DualEncoder.from_pretrained(None), pairs, "runs/dpr", cfg, dev=dev_pairs)
    # runs/dpr/encoder/ (the best dev checkpoint), metrics.jsonl, results.json, train_config.json

Modes:
- **dpr** (Karpukhin et al. 2020): each step takes B questions with one positive each (no two
  sharing a positive: a batch is filled greedily and a clash waits for the next batch) and
  `hard_negatives` BM25 negatives each, drawn from the top `negative_depth` passages without the
  answer (`ralm.retrieval.negatives`); every question is scored against all B(1 + h) passages.
  A passage that is another positive of a question, or holds its answer, is masked out of that
  question's softmax instead of being pushed away.
- **contrastive**: pseudo pairs from a DocStore's chunks (`ralm.retrieval.views`: Contriever's
  independent cropping, ICT, or both), in-batch negatives only.
The loss and gradient caching are `ralm.retrieval.contrastive`'s. Dev evaluation
(`ralm.retrieval.dev_eval`, eval-retrieval's measures) runs at each epoch end or every
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

from ralm.errors import RalmError
from ralm.retrieval.contrastive import contrastive_step
from ralm.retrieval.encoders import DualEncoder, autocast_dtype
from ralm.retrieval.evaluate import token_string
from ralm.retrieval.train_data import PairSet
from ralm.train.logging import MetricsLogger, read_metric_rows, warn

MODES = ("dpr", "contrastive")
RESULTS = "results.json"
CONFIG = "train_config.json"


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

    # read by ralm.train.checkpoint
    grad_accum: int = 1

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


def _device(cfg: RetrieverTrainConfig) -> torch.device:
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


# ----------------------------------------------------------------------------- batches
def plan_epoch(positives: list[int], batch_size: int, rng: np.random.Generator) -> list[list[int]]:
    """Example indices grouped into batches in a random order, no two in a batch sharing a positive.

    positives: each example's positive id. An example whose positive is already in the batch
    waits for the next one; whatever still clashes at the end goes into the last batches as is.
    Example: positives [7, 7, 8], batch 2 -> two batches, the two 7s apart.
    """
    order = rng.permutation(len(positives)).tolist()
    batches: list[list[int]] = []
    cur: list[int] = []
    used: set[int] = set()
    waiting: list[int] = []

    def take(i: int) -> None:
        cur.append(i)
        used.add(positives[i])

    for i in order:
        if positives[i] in used:
            waiting.append(i)
            continue
        take(i)
        while len(cur) == batch_size:
            batches.append(cur)
            cur, used = [], set()
            still = []
            for j in waiting:
                if len(cur) < batch_size and positives[j] not in used:
                    take(j)
                else:
                    still.append(j)
            waiting = still
    rest = cur + waiting  # full batches so far + ceil(len(rest) / B) = ceil(n / B) batches in all
    batches.extend(rest[s : s + batch_size] for s in range(0, len(rest), batch_size))
    return batches


class SupervisedBatches:
    """DPR batches of a PairSet: epoch plans, hard negatives drawn per batch, the false-negative mask."""

    def __init__(self, pairs: PairSet, negatives: list[list[int]], cfg: RetrieverTrainConfig) -> None:
        self.pairs, self.negatives, self.cfg = pairs, negatives, cfg
        self.positive = [ex.positives[0] for ex in pairs.examples]
        self._plans: dict[int, list[list[int]]] = {}
        self._needles: dict[int, list[str]] = {}

    def plan(self, epoch: int) -> list[list[int]]:
        if epoch not in self._plans:
            rng = np.random.default_rng([self.cfg.seed, epoch])
            self._plans = {epoch: plan_epoch(self.positive, self.cfg.batch_size, rng)}
        return self._plans[epoch]

    def steps_per_epoch(self) -> int:
        return len(self.plan(0))

    def batch(self, epoch: int, b: int, encoder: DualEncoder):
        """(query rows, doc rows, targets, mask) of batch b of `epoch`."""
        idx = self.plan(epoch)[b]
        rng = np.random.default_rng([self.cfg.seed, epoch, b, 1])
        exs = [self.pairs.examples[i] for i in idx]
        docs = [self.positive[i] for i in idx]
        for i in idx:
            pool = self.negatives[i]
            h = min(self.cfg.hard_negatives, len(pool))
            if h:
                docs.extend(int(c) for c in rng.choice(pool, size=h, replace=False))
        q_tok = encoder.query_tower.tokenizer([e.query for e in exs], add_special_tokens=False)["input_ids"]
        tpl, m = encoder.query_tower.template, encoder.config.max_length
        q_rows = [tpl.build(None, ids, m) for ids in q_tok]
        d_rows = self.pairs.passages.doc_rows(encoder, docs)
        return q_rows, d_rows, list(range(len(idx))), self.mask(exs, docs)

    def mask(self, exs, docs: list[int]) -> torch.Tensor:
        """(B, N) True where doc j is a known positive of question i or holds one of its answers."""
        out = torch.zeros((len(exs), len(docs)), dtype=torch.bool)
        hays: dict[int, str] = {}
        for i, ex in enumerate(exs):
            pos = set(ex.positives)
            needles = [n for n in (token_string(a, self.cfg.lang) for a in ex.answers or []) if n.strip()]
            for j, d in enumerate(docs):
                if d in pos:
                    out[i, j] = True
                elif needles:
                    if d not in hays:
                        hays[d] = token_string(self.pairs.passages.text(d), self.cfg.lang)
                    out[i, j] = any(n in hays[d] for n in needles)
        return out


class UnsupervisedBatches:
    """Contrastive batches: B distinct training chunks per step, each turned into a pseudo pair."""

    def __init__(self, views, train_ids: np.ndarray, cfg: RetrieverTrainConfig) -> None:
        self.views, self.ids, self.cfg = views, train_ids, cfg

    def batch(self, step: int):
        rng = np.random.default_rng([self.cfg.seed, step, 2])
        pick = rng.choice(self.ids, size=min(len(self.ids), 2 * self.cfg.batch_size), replace=False)
        q_rows, d_rows, used = self.views.rows(pick, rng)
        q_rows, d_rows = q_rows[: self.cfg.batch_size], d_rows[: self.cfg.batch_size]
        if len(q_rows) < 2:
            raise RalmError("too few chunks with two or more sentences for ICT; use --recipe crop or both")
        return q_rows, d_rows, list(range(len(q_rows))), None


# ----------------------------------------------------------------------------- run directory
def prepare_run(out: Path, cfg: RetrieverTrainConfig, data: dict[str, Any], overwrite: bool) -> bool:
    """Make `out` ready; True when it holds a checkpoint of the same run to resume.

    A finished run (results.json) is kept unless `overwrite`; a run with other settings is refused.
    """
    from ralm.train.checkpoint import clear_leftovers, finished_checkpoints

    _remove_stale_temps(out)
    if out.exists() and not out.is_dir():
        raise RalmError(f"{out}: exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        known = (out / CONFIG).is_file()
        if overwrite:
            if not known:
                raise RalmError(
                    f"{out}: exists and is not a retriever run (no {CONFIG}); refusing to overwrite it"
                )
            shutil.rmtree(out)
        elif (out / RESULTS).is_file():
            raise RalmError(f"{out}: holds a finished run; choose another --out or pass --overwrite")
        elif not known:
            raise RalmError(f"{out}: exists and is not a retriever run; choose another --out")
        else:
            saved = json.loads((out / CONFIG).read_text(encoding="utf-8"))
            diff = [k for k, v in cfg.comparable().items() if saved.get("config", {}).get(k) != v]
            diff += [k for k, v in data.items() if saved.get("data", {}).get(k) != v]
            if diff:
                raise RalmError(
                    f"{out}: holds an unfinished run with other settings ({', '.join(sorted(diff))}); "
                    "rerun it with the same ones to resume, or pass --overwrite to start over"
                )
            clear_leftovers(out)
            if finished_checkpoints(out):
                return True
            (out / "metrics.jsonl").unlink(missing_ok=True)  # cut before its first checkpoint
            return False
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / CONFIG, {"config": cfg.comparable(), "data": data})
    return False


def _remove_stale_temps(out: Path) -> None:
    """Remove `.OUT.tmp-PID`-style leftovers of processes that are gone, with a note."""
    for p in out.parent.glob(f".{out.name}*.tmp-*") if out.parent.is_dir() else []:
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            warn(f"removed {p}, left half-written by process {pid}, which is gone")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _truncate_metrics(out: Path, step: int) -> None:
    """Drop metric rows written after checkpoint `step` (the resumed run writes them again)."""
    p = out / "metrics.jsonl"
    if p.is_file():
        rows = [r for r in read_metric_rows(p) if int(r.get("step", 0)) <= step]
        tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        os.replace(tmp, p)


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
    from tqdm.auto import tqdm

    from ralm.locks import writer_lock
    from ralm.train.checkpoint import intact_checkpoint, load_checkpoint, restore_rng, save_checkpoint
    from ralm.train.optim import adamw, param_groups, warmup_schedule

    out = Path(out)
    data = dict(data or {})
    with writer_lock(out, "ralm retriever train"):
        resume = prepare_run(out, cfg, data, overwrite)
        device = _device(cfg)
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
            batches = SupervisedBatches(train, negatives, cfg)
            per_epoch = batches.steps_per_epoch()
            total = cfg.steps or max(1, math.ceil(cfg.epochs * per_epoch))
        else:
            from ralm.retrieval.views import PairViews

            views = PairViews(
                train, encoder, cfg.recipe, crop_min=cfg.crop_min, crop_max=cfg.crop_max,
                delete_prob=cfg.delete_prob, remove_prob=cfg.remove_prob,
            )  # fmt: skip
            perm = np.random.default_rng([cfg.seed, 7]).permutation(len(train))
            n_held = 0 if dev is not None else min(cfg.heldout, len(train) // 5)
            held_ids, train_ids = perm[:n_held], perm[n_held:]
            if len(train_ids) < cfg.batch_size:
                raise RalmError(
                    f"{train.describe()}: {len(train_ids)} training chunks, fewer than --batch-size"
                )
            batches = UnsupervisedBatches(views, train_ids, cfg)
            per_epoch = 0
            total = cfg.steps or 1000
            if n_held >= 2:
                heldout = _heldout_pairs(views, held_ids, cfg)

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
                _truncate_metrics(out, step)
                log(f"resuming {out} from step {step} of {total}")
        logger = MetricsLogger(out)
        evaluate = _evaluator(encoder, dev, heldout, cfg)
        t0 = time.perf_counter()
        bar = tqdm(total=total, initial=step, desc=f"retriever {cfg.mode}", disable=not progress, unit="step")

        def checkpoint() -> None:
            save_checkpoint(out, step, encoder, opt, sched, None, cfg, train_fingerprint(train))
            st = out / "checkpoints" / f"step-{step:07d}" / "state.json"
            s = json.loads(st.read_text(encoding="utf-8"))
            s.update(best=best, best_step=best_step, last_eval=last_eval)
            _write_json(st, s)

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
                opt.zero_grad(set_to_none=True)
                res = contrastive_step(
                    encoder, q_rows, d_rows, targets, mask,
                    chunk=cfg.grad_cache, amp=amp, device=device,
                )  # fmt: skip
                grad_norm = torch.nn.utils.clip_grad_norm_(encoder.parameters(), cfg.grad_clip).item()
                opt.step()
                sched.step()
                step += 1
                bar.update(1)
                if step % cfg.log_every == 0 or step == total:
                    logger.log(
                        step, loss=res.loss, inbatch_acc=res.accuracy, lr=sched.get_last_lr()[0],
                        grad_norm=grad_norm, seconds=time.perf_counter() - t0,
                    )  # fmt: skip
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
        _write_json(out / RESULTS, results)
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        return results


def train_fingerprint(train) -> str:
    passages = train.passages if isinstance(train, PairSet) else train
    return passages.fingerprint


def _prefixed(metrics: dict[str, float]) -> dict[str, float]:
    return {f"dev_{k}": v for k, v in metrics.items()}


def _eval_line(step: int, m: dict[str, float]) -> str:
    return f"step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in m.items())


def _heldout_pairs(views, held_ids: np.ndarray, cfg: RetrieverTrainConfig):
    """Held-out chunks and one fixed query row each (a view of the chunk, drawn once)."""
    rng = np.random.default_rng([cfg.seed, 9])
    q_rows, _, used = views.rows(held_ids, rng)
    return q_rows, np.asarray(used, dtype=np.int64), views.passages


def _evaluator(encoder: DualEncoder, dev: PairSet | None, heldout, cfg: RetrieverTrainConfig):
    """A function returning the dev metrics now (None when there is nothing to evaluate on)."""
    from ralm.retrieval.dev_eval import embed_passages, evaluate_pairs, search_exact

    if dev is not None:
        return lambda: evaluate_pairs(encoder, dev, ks=cfg.ks, lang=cfg.lang, autocast=cfg.autocast)
    if heldout is None:
        return None
    q_rows, ids, passages = heldout

    def run() -> dict[str, float]:
        was = encoder.training
        encoder.eval()
        try:
            with torch.inference_mode():
                d = embed_passages(encoder, passages, ids, autocast=cfg.autocast)
                tpl, types = encoder.query_tower.template, encoder.query_tower.uses_token_types

                def batches():
                    for s in range(0, len(q_rows), 64):
                        yield np.arange(s, min(len(q_rows), s + 64)), tpl.collate(q_rows[s : s + 64], types)

                q = encoder._encode(encoder.query_tower, batches(), len(q_rows), None, cfg.autocast, False)
        finally:
            encoder.train(was)
        top, _ = search_exact(q, d, max(cfg.ks))
        rank_ok = top == np.arange(len(ids))[:, None]
        return {f"heldout_recall@{k}": float(rank_ok[:, :k].any(axis=1).mean()) for k in cfg.ks}

    return run


def config_from(args: dict[str, Any]) -> RetrieverTrainConfig:
    """A RetrieverTrainConfig from a dict, ignoring keys that are not its fields."""
    names = {f.name for f in fields(RetrieverTrainConfig)}
    return RetrieverTrainConfig(**{k: v for k, v in args.items() if k in names and v is not None})
