"""`ralm finetune`: fine-tune and evaluate a reader on a downstream task, per seed, with or without retrieval.

`finetune(cfg)` reads the dataset (`ralm.tasks.datasets`), resolves the model once
(`ralm.tasks.models.prepare_init`), then runs each seed (`ralm.tasks.trainer.run_seed`: the task
head and, with `retrieval`, the retriever; AdamW and a warm-up schedule from `ralm.train.optim`
with reader, head and query tower at their own learning rates; dev scoring every `eval_every`
steps and at each epoch end, keeping the best dev state, early stopping after `patience`
evaluations without improvement; dev and test scored with that state) and summarises the seeds.
Outputs go to `.OUT.partial` beside `out`, renamed to `out` only when every seed has finished::

    out/results.json  out/results.md  out/init.json  out/init/ (a REALM run's exported parts)
    out/seed-42/{metrics.jsonl, eval.json, predictions.jsonl, model/ (AutoModelFor...), query/}

A job holds `out`'s writer lock throughout. Cut off (Ctrl-C, a crash, kill -9), it leaves
`.OUT.partial` with its finished seeds; a rerun of the same command keeps those, runs the others
(an unfinished seed from its start) and gives the results an uninterrupted job gives (timings
aside). A rerun with other options is refused, naming them, unless --overwrite (which then
starts over). `.OUT.partial-PID` folders that killed jobs of earlier versions left are removed
with a note. The rules: `ralm.train.seed_jobs`.

Defaults follow BRENT Appendix A where it gives them (Table 5: NorQuAD; Table 7: NoReC sentence;
Table 8: morpho-syntactic tasks, used for NER and POS); `TASK_DEFAULTS` lists them.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ralm.errors import RalmError
from ralm.locks import writer_lock
from ralm.tasks.config import TASK_DEFAULTS, FinetuneConfig
from ralm.tasks.metrics import PRIMARY
from ralm.tasks.models import prepare_init, write_init
from ralm.tasks.trainer import run_seed
from ralm.train.seed_jobs import abandon, prepare_job, publish, run_seeds

__all__ = ["TASK_DEFAULTS", "FinetuneConfig", "finetune"]


def _run_reader(model: str) -> str | None:
    """The reader backbone a REALM run's config names (None when `model` is not a run)."""
    import tomllib

    p = Path(model).expanduser() / "config.toml"
    if not p.is_file():
        return None
    try:
        cfg = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return cfg.get("reader") if cfg.get("reader_kind", "auto") != "mlm" else None


def summarize(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """{split: {metric: {"mean", "std", "n"}}} over seeds (std: sample std, 0 for one seed)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for split in ("dev", "test"):
        names = sorted({m for r in records for m in r.get(split, {})})
        for m in names:
            xs = [float(r[split][m]) for r in records if m in r.get(split, {})]
            out.setdefault(split, {})[m] = {
                "mean": statistics.fmean(xs),
                "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
                "n": len(xs),
            }
    return out


def finetune(cfg: FinetuneConfig, log=print, note: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every seed of `cfg`; returns the results dict written to `out/results.json`.

    log: where the data notes and one line per seed go (stdout); note: where the notes on
    interrupted jobs go (stderr by default: stale folders removed, a job resumed or kept).
    """
    with writer_lock(Path(cfg.out)):
        return _finetune(cfg, log, note or (lambda m: print(m, file=sys.stderr)))


def _finetune(cfg: FinetuneConfig, log, note: Callable[[str], None]) -> dict[str, Any]:
    from ralm.tasks.datasets import check_label_sets, load_task_data
    from ralm.tasks.tables import results_markdown

    cfg = cfg.resolved()
    out = Path(cfg.out)
    data = load_task_data(
        cfg.data,
        cfg.task,
        fmt=cfg.format,
        train=cfg.train,
        dev=cfg.dev,
        test=cfg.test,
        test_fraction=cfg.test_fraction,
        dev_fraction=cfg.dev_fraction,
        seed=cfg.seeds[0],
        answers=cfg.answers,
        labels=cfg.labels,
    )
    for msg in data.notes:
        log(f"note: {msg}")
    if not data.splits.get("train"):
        raise RalmError(
            f"{cfg.data or cfg.train}: no train split found; pass --train FILE (and --dev/--test)"
        )
    if cfg.retrieval and cfg.task != "open-qa":
        from ralm.tasks.causal_heads import is_causal_backbone

        if is_causal_backbone(cfg.model) or (cfg.model and is_causal_backbone(_run_reader(cfg.model))):
            raise RalmError(
                f"{cfg.model}: --retrieval needs an encoder reader; with a causal LM the retrieved chunk "
                "comes after the input, where a causal input cannot read it (use `ralm rag` instead)"
            )
    labels = None
    if cfg.task in ("ner", "pos", "classify"):
        check_label_sets(data)
        labels = data.labels()
    tmp = prepare_job(out, asdict(cfg), cfg.overwrite, note)
    try:
        spec = prepare_init(cfg.model, tmp, retrieval=cfg.retrieval, index=cfg.index, retriever=cfg.retriever)
        write_init(spec, tmp, final=out)
        records = run_seeds(tmp, cfg.seeds, lambda seed, sd: run_seed(cfg, spec, data, labels, seed, sd), log)
        results = {
            "task": cfg.task,
            "name": cfg.name or spec.label,
            "model": spec.source,
            "retrieval": cfg.retrieval,
            "retriever": cfg.retriever if cfg.retrieval else None,
            "data": str(cfg.data or cfg.train),
            "dataset": cfg.dataset or Path(cfg.data or cfg.train).name,
            "format": data.format,
            "sources": data.sources,
            "notes": data.notes,
            "primary": PRIMARY[cfg.task],
            "labels": labels,
            "config": asdict(cfg),
            "seeds": records,
            "summary": summarize(records),
            "seconds": round(sum(r["seconds"] for r in records), 2),
        }
        publish(tmp, out, results, results_markdown(results))
    except BaseException:
        abandon(tmp, note)
        raise
    return results
