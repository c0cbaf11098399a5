"""`PretrainConfig`: everything a REALM/BRENT (or MLM-only baseline) pre-training run needs.

Read from TOML (top-level keys, plus a ``[masking]`` table of `MaskingConfig` fields), overridden
by command-line flags, and saved as ``config.toml`` in the run directory. Defaults follow BRENT's
Table 4 where it applies (k = 8 incl. the null document, refresh every 100 steps, exact inner
product index, AdamW, cosine schedule with warm-up to a final lr of 0.1x, weight decay 0.1,
seed 42, score scaled by 1/sqrt(d)); batch size and steps are laptop-sized.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ralm.atomic import write_text_atomic
from ralm.errors import RalmError
from ralm.realm.masking.mlm import MaskingConfig
from ralm.realm.options import CHOICES, HELP, MODES, NULL_DOCS, QUERY_MASKS
from ralm.typed_config import (
    check_known,
    describe,
    fit,
    hints,
    read_toml,
    show,
    toml_line,
    tomllib,
)

CONFIG_FILE = "config.toml"

__all__ = ["CHOICES", "CONFIG_FILE", "HELP", "MODES", "PretrainConfig", "check_setting", "tomllib"]


@dataclass
class PretrainConfig:
    """One pre-training run. Paths are strings; None means "the default" (see each field)."""

    docstore: str = ""  # knowledge corpus Z (a DocStore directory); also the query corpus by default
    out: str = ""  # run directory
    mode: str = "realm"  # realm (retrieve-then-predict) | mlm (the MLM-only baseline, same reader)
    queries: str | None = None  # pre-training corpus X when it is not Z (a DocStore, same tokenizer)
    reader: str | None = (
        None  # HF masked-LM or encoder directory, or a causal LM (gemma3, smollm2, dir, .gguf); None = MiniLM
    )
    reader_kind: str = (
        "auto"  # auto (causal for a decoder-only LM) | mlm (masked LM, REALM) | causal (span generation)
    )
    causal_blank: str = "[{i}]"  # causal reader: the sentinel that replaces masked span i in the text
    reader_embeddings: str = (
        "auto"  # auto (frozen for a causal reader, trained for a masked LM) | train | freeze
    )
    reader_lora_r: int = 0  # causal reader: LoRA rank on its linear layers (peft); 0 = full fine-tuning
    reader_checkpointing: bool = False  # recompute the reader's layer activations in backward (less memory)
    retriever: str | None = None  # saved DualEncoder (e.g. from `ralm ict`) or HF encoder; None = reader's
    retriever_init: str | None = None  # a run whose towers, scale and null logit start this one
    pooling: str = "mean"  # for a retriever started from a plain encoder: mean (MiniLM) | cls (REALM)
    proj_dim: int | None = None  # REALM projects to 128; None keeps the backbone's size
    scale_by_sqrt_dim: bool = True  # BRENT: f(x, z) = q.d / sqrt(d)
    encoder_max_length: int = 128  # tokens of a query / document for the towers
    reader_max_length: int = 288  # tokens of [CLS] x [SEP] title [SEP] body [SEP] (REALM: 288)
    k: int = 8  # documents per query incl. the null document (BRENT: 8)
    null_doc: str = "empty"  # empty (REALM, BRENT code) | zeros (BRENT paper) | logit (learned offset) | none
    null_logit_init: float = 0.0  # null_doc = "logit": b in null score = mean retrieved score + b
    score_scale: str = "fixed"  # fixed: the towers' scores as they are | learned: times exp(s), s from 0
    lr_scale: float = 1e-2  # learning rate of the score scale and the null logit (no weight decay)
    marginal: str = "joint"  # joint: one marginal for the whole target | span: per span (REALM: per token)
    reader_backprop_top: int = 0  # reader gradient from the top m documents by posterior + null; 0 = all
    retriever_train: str = "both"  # both towers | query: doc tower and index frozen | none
    retriever_loss: str = "marginal"  # marginal (REALM) | distill (Atlas's perplexity distillation)
    reader_train: str = "train"  # train | freeze: the reader only scores, the retriever learns from it
    answer_queries: int = 0  # masked queries a step only the retriever reads (answer target, no reader)
    answer_negatives: str = "in_batch_zero"  # answer_queries: own | in_batch (checked) | in_batch_zero (at 0)
    answer_spans: str = "all"  # answer target: all masked spans | salient: the salient ones only
    answer_weight: float = 1.0  # answer_queries: weight of their mean KL in the step's loss
    distill_tau: float = 1.0  # distill: temperature of the target softmax(log p(y|z,x) / tau)
    reader_bucket_slack: float = 1.1  # causal reader: padding allowed per length group (inf: one group)
    # causal reader: doc_first ([bos] z x y, one row a document) | query_first ([bos] x, then every z y
    # packed after it: the query runs once for its K documents)
    reader_layout: str = "doc_first"
    query_masks: str = "hide"  # hide [MASK]s from the query tower (default) | keep them (REALM)
    steps: int = 300
    batch_size: int = 8  # queries per micro-batch
    grad_accum: int = 1  # micro-batches per optimiser step
    lr_reader: float = 1e-4
    lr_retriever: float = 1e-5
    weight_decay: float = 0.1
    schedule: str = "cosine"  # cosine | linear | constant
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1  # BRENT: 2e-5 -> 2e-6
    max_grad_norm: float = 1.0  # 0 = no clipping
    seed: int = 42
    data_offset: int = 0  # training examples skipped at the start of the seeded data order
    device: str = "auto"  # auto (cuda if available) | cpu | cuda | cuda:N
    autocast: str = "auto"  # auto (bf16 where the hardware has it) | bf16 | off
    refresh_every: int = 100  # BRENT: 100; 0 = never re-index
    candidates: str = "dense"  # dense: the index's top k (REALM, BRENT) | hybrid: BM25 + index fused by RRF
    candidate_depth: int = 32  # hybrid: chunks taken from each list before fusion
    bm25_lang: str | None = (
        None  # hybrid: BM25 analysis (da, nb, en, none = plain); None = the DocStore's lang
    )
    index_kind: str = "flat"  # exact inner product (BRENT); any DenseIndex kind, or "auto" (by corpus size)
    index_sharding: str = "none"  # none: each process holds the whole index | rank: process r holds shard r
    initial_index: str | None = None  # a saved DenseIndex of this corpus to start from (else built at step 0)
    refresh_mode: str = "sync"  # sync (BRENT: stop, re-embed, rebuild) | async (REALM: a builder process)
    builder_threads: int = 1  # async: torch threads of the index builder
    builder_cores: list[int] | None = None  # async: CPU cores to pin the builder to (e.g. [1])
    builder_device: str = "cpu"  # async: where the builder embeds (e.g. "cuda:1")
    dist_timeout_s: float = 600.0  # multi-process: collectives fail after this instead of hanging
    embed_batch_size: int = 128
    heldout: int = 200  # chunks held out of the training queries for `ralm evaluate-mlm`
    checkpoint_every: int = 100  # 0 = only at the end
    keep_checkpoints: int = 2
    tensorboard: bool = True
    masking: MaskingConfig = field(default_factory=MaskingConfig)

    def __post_init__(self) -> None:
        for f in fields(self):
            setattr(self, f.name, check_setting(f.name, getattr(self, f.name)))
        if isinstance(self.masking, dict):
            try:
                self.masking = MaskingConfig(**self.masking)
            except (TypeError, ValueError) as exc:
                raise RalmError(f"[masking]: {exc}") from None
        checks = [
            (self.mode in MODES, f"mode {self.mode!r}: choose {' or '.join(MODES)}"),
            (
                self.index_kind in CHOICES["index_kind"],
                f"index_kind {self.index_kind!r}: choose {', '.join(CHOICES['index_kind'])}",
            ),
            (self.null_doc in NULL_DOCS, f"null_doc {self.null_doc!r}: choose {', '.join(NULL_DOCS)}"),
            *[
                (getattr(self, f) in CHOICES[f], f"{f} {getattr(self, f)!r}: choose {', '.join(CHOICES[f])}")
                for f in (
                    "score_scale",
                    "marginal",
                    "retriever_train",
                    "retriever_loss",
                    "reader_train",
                    "reader_layout",
                    "answer_negatives",
                    "answer_spans",
                )
            ],
            (self.reader_backprop_top >= 0, f"reader_backprop_top={self.reader_backprop_top}: must be >= 0"),
            (self.distill_tau > 0, f"distill_tau={self.distill_tau}: must be > 0"),
            (self.answer_queries >= 0, f"answer_queries={self.answer_queries}: must be >= 0"),
            (self.answer_weight >= 0, f"answer_weight={self.answer_weight}: must be >= 0"),
            (
                self.answer_queries == 0 or (self.mode == "realm" and self.retriever_train != "none"),
                "answer_queries: only a retrieval run (mode realm) whose query tower learns "
                "(retriever_train both or query) has a retriever for them to train",
            ),
            (
                self.reader_train == "train" or self.mode == "realm",
                "reader_train = freeze: only a retrieval run (mode realm) has a retriever to train",
            ),
            (self.lr_scale >= 0, f"lr_scale={self.lr_scale}: must be >= 0"),
            (self.reader_bucket_slack >= 1, f"reader_bucket_slack={self.reader_bucket_slack}: must be >= 1"),
            (
                self.query_masks in QUERY_MASKS,
                f"query_masks {self.query_masks!r}: choose {', '.join(QUERY_MASKS)}",
            ),
            (self.k >= 1, f"k={self.k}: must be >= 1"),
            (
                self.reader_kind in CHOICES["reader_kind"],
                f"reader_kind {self.reader_kind!r}: choose {', '.join(CHOICES['reader_kind'])}",
            ),
            (
                self.reader_embeddings in CHOICES["reader_embeddings"],
                f"reader_embeddings {self.reader_embeddings!r}: choose {', '.join(CHOICES['reader_embeddings'])}",
            ),
            (
                "{i}" in self.causal_blank,
                f"causal_blank {self.causal_blank!r}: must contain {{i}}, e.g. [{{i}}]",
            ),
            (self.reader_lora_r >= 0, f"reader_lora_r={self.reader_lora_r}: must be >= 0"),
            (self.steps >= 1, f"steps={self.steps}: must be >= 1"),
            (self.batch_size >= 1, f"batch_size={self.batch_size}: must be >= 1"),
            (self.grad_accum >= 1, f"grad_accum={self.grad_accum}: must be >= 1"),
            (
                self.schedule in ("cosine", "linear", "constant"),
                f"schedule {self.schedule!r}: cosine, linear or constant",
            ),
            (0.0 <= self.min_lr_ratio <= 1.0, f"min_lr_ratio={self.min_lr_ratio}: must be in [0, 1]"),
            (self.refresh_every >= 0, f"refresh_every={self.refresh_every}: must be >= 0"),
            (
                self.refresh_mode in ("sync", "async"),
                f"refresh_mode {self.refresh_mode!r}: choose sync or async",
            ),
            (
                self.refresh_mode == "sync" or self.refresh_every >= 1,
                "refresh_mode async needs refresh_every >= 1",
            ),
            (
                self.index_sharding in CHOICES["index_sharding"],
                f"index_sharding {self.index_sharding!r}: choose none or rank",
            ),
            (
                self.index_sharding == "none" or self.refresh_mode == "sync",
                'index_sharding = "rank" needs refresh_mode = "sync" (the async builder holds the whole index)',
            ),
            (self.heldout >= 0, f"heldout={self.heldout}: must be >= 0"),
            (self.data_offset >= 0, f"data_offset={self.data_offset}: must be >= 0"),
            (
                self.candidates in ("dense", "hybrid"),
                f"candidates {self.candidates!r}: choose dense (the index's top k) or hybrid (BM25 + index)",
            ),
            (self.candidate_depth >= 1, f"candidate_depth={self.candidate_depth}: must be >= 1"),
            (self.keep_checkpoints >= 1, f"keep_checkpoints={self.keep_checkpoints}: must be >= 1"),
        ]
        for ok, msg in checks:
            if not ok:
                raise RalmError(msg)
        if self.mode == "realm" and self.k - (self.null_doc != "none") < 1:
            raise RalmError(f"k={self.k} leaves no retrieved document; use k >= 2 with a null document")
        if self.bm25_lang is not None:
            from ralm.retrieval.analysis import Analyzer
            from ralm.retrieval.bm25_spec import bm25_options

            try:
                Analyzer.resolve(**bm25_options(self.bm25_lang))
            except RalmError as exc:
                raise RalmError(f"bm25_lang: {exc}") from None

    # -- TOML
    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> PretrainConfig:
        check_known(cls, d, source)
        return cls(**d)

    @classmethod
    def from_toml(cls, path: str | os.PathLike, **overrides: Any) -> PretrainConfig:
        p = Path(path)
        data = read_toml(p)
        names = {f.name for f in fields(cls)}
        for key, value in data.items():
            if key in names:  # unknown keys: from_dict names them all
                try:
                    check_setting(key, value)
                except RalmError as exc:
                    raise RalmError(f"{p}: {exc}") from None
        masking = {**data.pop("masking", {}), **overrides.pop("masking", {})}
        data.update(overrides)
        data["masking"] = masking
        return cls.from_dict(data, source=str(p))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_toml(self) -> str:
        d = self.to_dict()
        masking = d.pop("masking")
        lines = [toml_line(k, v) for k, v in d.items() if v is not None]
        lines += ["", "[masking]"] + [toml_line(k, v) for k, v in masking.items() if v is not None]
        return "\n".join(lines) + "\n"

    def save(self, run_dir: str | os.PathLike) -> Path:
        return write_text_atomic(Path(run_dir) / CONFIG_FILE, self.to_toml())


# ----------------------------------------------------------------------------- value types
def check_setting(key: str, value: Any) -> Any:
    """`value` for the setting `key` ("steps", "masking.salient_rate", "masking"), checked against the
    field's annotation and converted where that loses nothing (an int for a float, a list for a
    tuple); RalmError "steps = 'ten': expected an integer" otherwise. Unknown keys pass unchanged
    (`from_dict` reports them)."""
    if key.startswith("masking."):
        name = key.removeprefix("masking.")
        known = hints(MaskingConfig)
        if name not in known:
            raise RalmError(f"{key}: unknown [masking] setting; known: {', '.join(sorted(known))}")
        tp = known[name]
    else:
        tp = hints(PretrainConfig).get(key)
        if tp is None:
            return value
    if tp is MaskingConfig:
        if isinstance(value, MaskingConfig):
            checked = {
                f.name: check_setting(f"masking.{f.name}", getattr(value, f.name)) for f in fields(value)
            }
            return MaskingConfig(**checked)
        if not isinstance(value, dict):
            raise RalmError(f"{key} = {show(value)}: expected a [masking] table")
        return {k: check_setting(f"masking.{k}", v) for k, v in value.items()}
    ok, out = fit(tp, value)
    if not ok:
        raise RalmError(f"{key} = {show(value)}: expected {describe(tp)}")
    return out
