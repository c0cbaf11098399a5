"""One `ralm finetune` job's settings (`FinetuneConfig`) and the per-task defaults from BRENT
Appendix A (`TASK_DEFAULTS`: Table 5 NorQuAD, Table 7 NoReC sentence, Table 8 the
morpho-syntactic tasks, used for NER and POS). The job itself: `ralm.tasks.finetune`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ralm.errors import RalmError
from ralm.formats.types import TASKS

__all__ = ["TASK_DEFAULTS", "FinetuneConfig"]


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
