"""One fine-tuning seed: build the task model (and retriever), train, keep the best dev state, score.

`run_seed(cfg, spec, data, labels, seed, out)` is what `ralm finetune` runs per seed. The loop is
plain: a seeded permutation of the training items per epoch, micro-batches of `batch_size`,
`adapter.loss` (the same code path with and without retrieval), clipping, AdamW and a warm-up
schedule from `ralm.train.optim`, one `metrics.jsonl` row per step. The dev split is scored every
`eval_every` steps and at each epoch end; `BestState` keeps a CPU copy of the best weights (and of
the tuned query tower) and restores them before the final dev/test scoring and saving.

Left out: resuming inside an interrupted seed (a rerun of the job keeps its finished seeds and
runs this one again from its start, see `ralm.train.seed_jobs`), gradient accumulation and
multi-process fine-tuning.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ralm.atomic import write_json_atomic
from ralm.models.precision import autocast_context, autocast_dtype
from ralm.tasks.adapters import Adapter, TaggingAdapter, make_adapter, shuffled
from ralm.tasks.metrics import PRIMARY
from ralm.tasks.models import InitSpec, load_retriever_parts, load_task_model
from ralm.train.logging import MetricsLogger
from ralm.train.loop import fit_epochs
from ralm.train.optim import adamw, param_groups, warmup_schedule

if TYPE_CHECKING:
    from ralm.tasks.config import FinetuneConfig

__all__ = ["BestState", "evaluate", "optimizer_for", "run_seed"]


def subsample(examples: list, n: int, seed: int) -> list:
    """At most n examples, a seeded sample kept in file order (all when n is 0 or large)."""
    if not n or n >= len(examples):
        return examples
    keep = np.sort(np.random.default_rng([seed, 3]).choice(len(examples), n, replace=False))
    return [examples[i] for i in keep]


@dataclass
class Parts:
    """What one seed trains: the HF task model, its tokenizer, the retriever (or None), the adapter."""

    model: Any
    tokenizer: Any
    retriever: Any
    adapter: Adapter
    device: torch.device
    dtype: torch.dtype | None

    encoded: dict[int, list] = field(default_factory=dict)  # id(examples) -> items, encoded once

    def evaluate(self, examples: list, batch_size: int) -> tuple[dict, dict]:
        """Dev/test scores; each example list is encoded once however often it is scored."""
        if id(examples) not in self.encoded:
            self.encoded[id(examples)] = self.adapter.encode(examples)
        items = self.encoded[id(examples)]
        return evaluate(self.adapter, examples, self.retriever, batch_size, self.dtype, self.device, items)


def build_parts(cfg: FinetuneConfig, spec: InitSpec, labels: list[str] | None) -> Parts:
    from ralm.train.device import resolve_device

    device = resolve_device(cfg.device)
    causal = {
        "bidirectional": cfg.bidirectional,
        "pooling": cfg.pooling,
        "lora_r": cfg.lora_r,
        "train_embeddings": cfg.train_embeddings,
    }
    model, tok = load_task_model(cfg.task, spec.reader, labels, causal)
    model.to(device).train()
    retriever = None
    if cfg.retrieval:
        retriever = load_retriever_parts(
            spec, reader_tokenizer=tok, k=cfg.k, tune=cfg.tune_retriever, null_doc=cfg.null_doc
        )
        retriever.to(device).train()
    adapter = make_adapter(
        cfg.task,
        tok,
        model,
        labels,
        max_length=cfg.max_length,
        doc_length=cfg.doc_length,
        doc_stride=cfg.doc_stride,
        lang=cfg.lang,
    )
    return Parts(model, tok, retriever, adapter, device, autocast_dtype(device, cfg.autocast, torch.float32))


def evaluate(
    adapter: Adapter, examples: list, retriever, batch_size: int, dtype, device, items: list | None = None
) -> tuple[dict, dict]:
    """(metrics, predictions) of the adapter's model on `examples` (eval mode, no grad); `items` are
    the examples already encoded by `adapter.encode`, when the caller has them."""
    modules = [adapter.model] + ([retriever] if retriever is not None else [])
    modes = [m.training for m in modules]
    for m in modules:
        m.eval()
    try:
        with torch.no_grad(), autocast_context(device, dtype):
            items = adapter.encode(examples) if items is None else items
            preds = adapter.predict(examples, items, retriever, batch_size)
        return adapter.score(examples, preds), preds
    finally:
        for m, was in zip(modules, modes, strict=True):
            m.train(was)


def optimizer_for(cfg: FinetuneConfig, model, retriever) -> torch.optim.AdamW:
    """AdamW groups: encoder at lr, the task head at lr_head, the query tower at lr_retriever."""
    base = getattr(model, model.base_model_prefix)
    seen: set[int] = set()
    groups = param_groups(base, cfg.lr, cfg.weight_decay, name="reader", skip=seen)
    groups += param_groups(model, cfg.lr_head, cfg.weight_decay, name="head", skip=seen)
    if retriever is not None and retriever.tune:
        groups += param_groups(
            retriever.encoder.query_tower, cfg.lr_retriever, cfg.weight_decay, name="retriever", skip=seen
        )
    return adamw(groups)


def _cpu_copy(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


@dataclass
class BestState:
    """The best dev evaluation so far: score of the primary metric, its step, metrics and weights.

    `offer(metrics, step, parts)` keeps a copy when the primary metric improves and counts the
    evaluations since the last improvement (`stale`, for early stopping); `record` logs a dev
    evaluation, offers it and says whether to stop; `restore(parts)` puts the kept weights back.
    """

    primary: str
    score: float = float("-inf")
    step: int = 0
    metrics: dict = field(default_factory=dict)
    stale: int = 0
    state: dict | None = None
    query: dict | None = None

    def offer(self, metrics: dict, step: int, parts: Parts) -> None:
        if self.state is None or metrics[self.primary] > self.score:
            self.score, self.step, self.metrics, self.stale = metrics[self.primary], step, metrics, 0
            self.state = _cpu_copy(parts.model)
            r = parts.retriever
            self.query = _cpu_copy(r.encoder.query_tower) if r is not None and r.tune else None
        else:
            self.stale += 1

    def record(self, metrics: dict, step: int, parts: Parts, log: MetricsLogger, patience: int) -> bool:
        """A dev evaluation at `step`: its metrics logged as dev_*, offered (`offer`); True when
        `patience` evaluations (0: never) have passed without improvement."""
        log.log(step, **{f"dev_{k}": v for k, v in metrics.items()})
        self.offer(metrics, step, parts)
        return bool(patience and self.stale >= patience)

    def restore(self, parts: Parts) -> None:
        if self.state is not None:
            parts.model.load_state_dict(self.state)
        if self.query is not None:
            parts.retriever.encoder.query_tower.load_state_dict(self.query)


def train(cfg: FinetuneConfig, parts: Parts, items: list, dev: list, seed: int, log: MetricsLogger):
    """The optimisation (`ralm.train.loop.fit_epochs`); returns (steps taken, BestState)."""
    adapter, retriever = parts.adapter, parts.retriever
    if cfg.eval_only:
        return 0, BestState(PRIMARY[cfg.task])
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * math.ceil(len(items) / cfg.batch_size)))
    opt = optimizer_for(cfg, parts.model, retriever)
    sched = warmup_schedule(opt, cfg.schedule, int(cfg.warmup_ratio * total), total)
    params = [p for g in opt.param_groups for p in g["params"]]
    best = BestState(PRIMARY[cfg.task])
    skipped_before = getattr(adapter, "skipped", 0)

    def evaluate_dev(step: int) -> bool:
        """Score dev, keep the best state; True when early stopping says stop."""
        if not dev:
            return False
        return best.record(parts.evaluate(dev, cfg.eval_batch_size)[0], step, parts, log, cfg.patience)

    def loss_of(batch: Sequence[int]):
        with autocast_context(parts.device, parts.dtype):
            return adapter.loss([items[i] for i in batch], retriever), {}

    def skipped() -> dict[str, int]:
        return {"skipped": adapter.skipped - skipped_before} if hasattr(adapter, "skipped") else {}

    step = fit_epochs(
        total=total,
        batch_size=cfg.batch_size,
        order=lambda epoch: shuffled(len(items), seed, epoch),
        loss_of=loss_of,
        opt=opt,
        sched=sched,
        params=params,
        grad_clip=cfg.grad_clip,
        log=log,
        evaluate=evaluate_dev,
        eval_every=cfg.eval_every,
        progress=cfg.progress,
        desc=f"seed {seed}",
        row_tail=skipped,
    )
    return step, best


def run_seed(cfg: FinetuneConfig, spec: InitSpec, data, labels, seed: int, out: Path) -> dict[str, Any]:
    """Train and evaluate one seed into `out` (metrics.jsonl, eval.json, predictions.jsonl, model/);
    returns its eval record. eval.json (the record) is written last, through a rename."""
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    t0 = time.perf_counter()
    parts = build_parts(cfg, spec, labels)
    train_set = subsample(data.splits["train"], cfg.max_train, seed)
    dev = data.splits.get("dev", [])[: cfg.max_eval or None]
    test = data.splits.get("test", [])[: cfg.max_eval or None]
    items = parts.adapter.encode(train_set)
    if isinstance(parts.adapter, TaggingAdapter):  # truncated words get the commonest training tag
        tags = Counter(t for ex in train_set for t in ex.labels)
        parts.adapter.fill_label = tags.most_common(1)[0][0] if tags else None
    log = MetricsLogger(out, tensorboard=False)
    skipped_before = getattr(parts.adapter, "skipped", 0)
    t_train = time.perf_counter()
    steps, best = train(cfg, parts, items, dev, seed, log)
    train_seconds = time.perf_counter() - t_train
    best.restore(parts)
    t_eval = time.perf_counter()
    record: dict[str, Any] = {"seed": seed, "steps": steps, "best_step": best.step if best.state else steps}
    # the restored state's dev metrics are the best evaluation's (eval mode is deterministic)
    record["dev"] = (
        best.metrics if best.state else (parts.evaluate(dev, cfg.eval_batch_size)[0] if dev else {})
    )
    test_preds: dict = {}
    if test:
        record["test"], test_preds = parts.evaluate(test, cfg.eval_batch_size)
    record.update(
        train_examples=len(train_set),
        train_items=len(items),
        dev_examples=len(dev),
        test_examples=len(test),
        train_seconds=round(train_seconds, 2),
        eval_seconds=round(time.perf_counter() - t_eval, 2),
        seconds=round(time.perf_counter() - t0, 2),
    )
    if hasattr(parts.adapter, "skipped"):
        record["skipped_train_examples"] = parts.adapter.skipped - skipped_before
    log.close()
    write_predictions(out / "predictions.jsonl", test_preds)
    if cfg.save and not cfg.eval_only:
        from ralm.models.quiet import quiet_transformers

        with quiet_transformers():  # no "Writing model shards" bar in the log
            parts.model.save_pretrained(str(out / "model"), safe_serialization=True)
            parts.tokenizer.save_pretrained(str(out / "model"))
        if parts.retriever is not None and parts.retriever.tune:
            parts.retriever.encoder.save(out / "retriever")
    # last, and atomically: eval.json marks a finished seed (ralm.train.seed_jobs resumes on it)
    write_json_atomic(out / "eval.json", record)
    return record


def write_predictions(path: Path, preds: dict) -> None:
    """One JSON line {"id", "prediction"} per example of `preds` (id -> prediction)."""
    with open(path, "w", encoding="utf-8") as f:
        for k, v in preds.items():
            f.write(json.dumps({"id": k, "prediction": v}, ensure_ascii=False) + "\n")
