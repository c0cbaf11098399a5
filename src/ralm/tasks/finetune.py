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
with a note. The rules: `ralm.tasks.job_dir`.

Defaults follow BRENT Appendix A where it gives them (Table 5: NorQuAD; Table 7: NoReC sentence;
Table 8: morpho-syntactic tasks, used for NER and POS); `TASK_DEFAULTS` lists them.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ralm.errors import RalmError
from ralm.locks import writer_lock
from ralm.tasks.job_dir import abandon, finished_record, prepare_job, publish, start_seed
from ralm.tasks.metrics import PRIMARY
from ralm.tasks.models import prepare_init, write_init
from ralm.tasks.trainer import run_seed
from ralm.tasks.types import TASKS

__all__ = ["TASK_DEFAULTS", "FinetuneConfig", "finetune"]

# BRENT Table 8 (morpho-syntactic tasks; used for NER and POS alike)
_TAGGING = {
    "batch_size": 32,
    "epochs": 10.0,
    "lr": 1e-4,
    "lr_head": 1e-3,
    "schedule": "cosine",
    "max_length": 256,
}
# BRENT Appendix A (Tables 5, 7, 8); open-qa after REALM/ORQA (top-5, small lr).
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "extractive-qa": {"batch_size": 16, "epochs": 3.0, "lr": 5e-5, "schedule": "linear", "max_length": 384},
    "classify": {
        "batch_size": 32,
        "epochs": 3.0,
        "lr": 1e-5,
        "lr_retriever": 3e-5,
        "schedule": "cosine",
        "max_length": 128,
    },
    "ner": _TAGGING,
    "pos": _TAGGING,
    "open-qa": {
        "batch_size": 8,
        "epochs": 4.0,
        "lr": 1e-5,
        "lr_retriever": 1e-5,
        "schedule": "linear",
        "max_length": 256,
        "k": 5,
        "tune_retriever": True,
    },
}


@dataclass
class FinetuneConfig:
    """One `ralm finetune` job. None means "the task's default" (`TASK_DEFAULTS`)."""

    task: str
    data: str | None  # dataset file or directory; None when --train (and --dev/--test) name the files
    out: str
    model: str | None = None  # REALM run, exported reader or HF encoder; None = bundled MiniLM
    name: str | None = None  # row label in tables (default: the model directory's name)
    dataset: str | None = None  # column label in tables (default: the data path's name)
    format: str | None = None  # force a reader format (squad, conllu, conll, text, openqa, hf)
    labels: str | None = None  # names of class ids (one a line) for data that holds ids without names
    train: str | None = None  # explicit split files override what is found under `data`
    dev: str | None = None
    test: str | None = None
    test_fraction: float = 0.0  # carve a seeded test split out of train when the data has none
    dev_fraction: float = 0.1  # likewise a dev split (0: none; the last state is tested)
    seeds: list[int] = field(default_factory=lambda: [42])
    epochs: float | None = None
    max_steps: int = 0  # > 0: stop after this many optimiser steps (overrides epochs)
    batch_size: int | None = None
    lr: float | None = None  # reader (encoder) learning rate
    lr_head: float | None = None  # task head; default = lr
    lr_retriever: float | None = None  # query tower (with --tune-retriever); default 3 x lr (BRENT)
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    schedule: str | None = None  # linear | cosine | constant
    max_length: int | None = None  # tokens of the task input x (QA: one doc-stride window)
    doc_stride: int = 128
    doc_length: int = 128  # tokens of a retrieved chunk appended to x
    retrieval: bool = False
    index: str | None = None  # index directory; default the REALM run's own
    retriever: str = "dense"  # dense | bm25 (frozen)
    k: int | None = None  # documents per input incl. the null document (open-qa: retrieved chunks)
    null_doc: bool = True
    tune_retriever: bool | None = None  # fine-tune the query tower (the index stays fixed)
    max_train: int = 0  # use at most this many training examples (0 = all; seeded sample)
    max_eval: int = 0  # evaluate on at most this many dev/test examples (0 = all; first ones)
    eval_every: int = 0  # also evaluate every N steps (0 = at each epoch end only)
    patience: int = 0  # stop after N evaluations without dev improvement (0 = never)
    grad_clip: float = 1.0
    eval_batch_size: int = 64
    device: str = "auto"
    autocast: str = "auto"
    lang: str = "en"  # answer normalisation (articles) for QA metrics
    answers: str = "auto"  # open-QA answers: auto (the file says), string, or regex (CuratedTREC)
    # decoder-only backbones (gemma3, smollm2, a .gguf file, a causal LM directory or REALM run)
    bidirectional: bool = False  # rebuild with use_bidirectional_attention (Gemma-family configs)
    pooling: str = "last"  # classify on a causal LM: last real token | mean over real tokens
    lora_r: int = 0  # > 0: train LoRA adapters of this rank instead of the body's weights
    train_embeddings: bool = False  # a causal LM's token embeddings stay frozen unless set
    eval_only: bool = False  # no training: score the model as loaded (e.g. a saved seed-N/model)
    save: bool = True  # write the fine-tuned model of each seed
    overwrite: bool = False
    progress: bool = True

    def resolved(self) -> FinetuneConfig:
        """A copy with the task defaults filled in."""
        if self.task not in TASKS:
            raise RalmError(f"task {self.task!r}: choose one of {', '.join(TASKS)}")
        d = {**TASK_DEFAULTS[self.task]}
        vals = asdict(self)
        for f in fields(self):
            if vals[f.name] is None and f.name in d:
                vals[f.name] = d[f.name]
        out = FinetuneConfig(**vals)
        out.lr_head = out.lr_head or out.lr
        out.lr_retriever = out.lr_retriever or 3 * out.lr
        out.k = out.k or 4
        out.tune_retriever = bool(out.tune_retriever)
        if self.task == "open-qa":
            out.retrieval, out.null_doc = True, False
        return out


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


def prepare_out(out: Path, overwrite: bool) -> Path:
    """A fresh temporary sibling of `out` to write a fine-tuning job into (renamed over `out` at the
    end); RalmError when `out` exists without `overwrite`, or is not a fine-tuning output.
    `ralm luke ner`'s all-or-nothing output; `finetune` resumes through `ralm.tasks.job_dir`."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise RalmError(f"{out}: exists; choose another --out or pass --overwrite")
        if out.is_dir() and not (out / "results.json").is_file():
            raise RalmError(
                f"{out}: exists and is not a fine-tuning output (no results.json); refusing to overwrite it"
            )
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish_results(tmp: Path, out: Path, results: dict[str, Any], markdown: str) -> None:
    """Write results.json and results.md into the job's temporary directory `tmp` (from
    `prepare_out`), then rename it over `out`."""
    (tmp / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (tmp / "results.md").write_text(markdown, encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)


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
        records = []
        for seed in cfg.seeds:
            rec = finished_record(tmp, seed)
            reused = rec is not None
            if rec is None:
                rec = run_seed(cfg, spec, data, labels, seed, start_seed(tmp, seed))
            shown = rec.get("test") or rec.get("dev")
            log(
                f"seed {seed}: "
                + ", ".join(f"{k} {v:.2f}" for k, v in shown.items())
                + f" ({'test' if rec.get('test') else 'dev'}; {rec['seconds']:.0f} s"
                + ("; finished by the interrupted run)" if reused else ")")
            )
            records.append(rec)
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
