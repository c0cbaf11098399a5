"""`LukePretrainConfig`: everything a `ralm luke pretrain` run needs, read from TOML, saved in the run.

Defaults are DaLUKE's pre-training table (Nielsen et al., "Hyperparameters for pretraining
experiments") scaled down for a CPU; each comment gives the paper's value. The four rows of the
paper's experiment table are two switches: `auto_annotation` (Baseline vs "+auto") and
`entity_hidden_size` (None = l = L, LUKE; a smaller l, "+ent"). `mode = "mlm"` trains the same
model on the same word tokens and word masks with no entity tokens (E = 0): the plain-MLM step
that a LUKE step's cost is compared with.

Top-level TOML keys only (no tables); unknown keys and values of the wrong type are one-line
RalmErrors naming the file and the key. This module imports no torch: the CLI parser needs it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ralm.atomic import write_text_atomic
from ralm.errors import RalmError
from ralm.luke.config import DEFAULT_ENTITY_ATTENTION
from ralm.typed_config import check_known, describe, fit, hints, read_toml, show, toml_line

__all__ = ["CONFIG_FILE", "MODES", "RESUME_FIELDS", "LukePretrainConfig", "check_setting"]

CONFIG_FILE = "config.toml"
MODES = ("luke", "mlm")
# settings a checkpoint (and the entity vocabulary) depends on: a resume must not change them
RESUME_FIELDS = (
    "docstore",
    "mode",
    "backbone",
    "seed",
    "batch_size",
    "grad_accum",
    "entity_vocab_size",
    "entity_hidden_size",
    "entity_emb_size",
    "sources",
    "auto_annotation",
    "max_seq_length",
    "entity_attention",
    "entity_min_mentions",
    "entity_first_steps",
    "max_entities",
    "max_mention_length",
    "mlm_prob",
    "random_word_prob",
    "unmasked_word_prob",
    "mep_prob",
)


@dataclass
class LukePretrainConfig:
    """One LUKE/DaLUKE pre-training run (see the module docstring)."""

    docstore: str = ""  # the pre-training corpus (a DocStore directory: tokens + link/auto entity spans)
    out: str = ""  # run directory
    mode: str = "luke"  # luke: words + entities | mlm: the same model on the same words, E = 0
    backbone: str | None = None  # BERT-like HF directory whose word parts are copied; None = bundled MiniLM
    entity_vocab_size: int = 10_000  # entity table rows incl. [PAD]/[UNK]/[MASK] (LUKE: 500,000)
    entity_min_mentions: int = 1  # only entities with at least this many mentions in the corpus get a row
    entity_hidden_size: int | None = None  # l; None = L (LUKE, the Baseline row); l < L: DaLUKE "+ent"
    entity_emb_size: int = 256  # entity embedding table width, projected to l (DaLUKE: 256)
    # joint: one softmax over words and entities (LUKE, HF) | separate: the paper's four softmaxes, the
    # entity term of the word outputs gated from 0 (the word stream starts as the plain encoder)
    entity_attention: str = DEFAULT_ENTITY_ATTENTION
    # the entity side alone first (LUKE; DaLUKE freezes the base for half the steps): entity embeddings,
    # entity head, entity-side queries/keys/values/feed-forward, the gates and the word MLM head train for
    # this many steps at entity_first_lr, the rest frozen; then everything, its learning rate warmed up again
    entity_first_steps: int = 0
    entity_first_lr: float = 1e-3
    sources: list[str] = field(default_factory=lambda: ["link"])  # entity spans: link (Wikipedia links)
    auto_annotation: bool = False  # also DaLUKE's auto-annotated spans ("+auto" rows)
    max_seq_length: int = 128  # [CLS] words [SEP] (LUKE: 512; DocStore chunks are shorter anyway)
    max_entities: int = 32  # entity tokens per example (LUKE: 128)
    max_mention_length: int = 30  # word positions per entity (LUKE: 30)
    mlm_prob: float = 0.15  # word masking probability (DaLUKE: 15%)
    random_word_prob: float = 0.1  # of the masked words, replaced by a random word (DaLUKE: 10%)
    unmasked_word_prob: float = 0.1  # of the masked words, left unchanged (DaLUKE: 10%)
    mep_prob: float = 0.15  # entity masking probability (DaLUKE: 15%)
    steps: int = 300  # optimiser steps (DaLUKE: 3,000 batches)
    batch_size: int = 8  # chunks per micro-batch over all processes (DaLUKE: 4,080)
    grad_accum: int = 1  # micro-batches per optimiser step
    lr: float = 1e-4  # peak learning rate (DaLUKE: 1e-4)
    warmup_ratio: float = 0.06  # linear warm-up over this share of the steps (DaLUKE: 6%)
    schedule: str = "linear"  # decay after the warm-up: linear (LUKE) | cosine | constant
    weight_decay: float = 0.01  # AdamW weight decay (DaLUKE: 0.01); none on biases and norms
    max_grad_norm: float = 1.0  # clip the gradient norm (BERT, LUKE: 1.0); 0 = no clipping
    seed: int = 42  # data order, masks, the fresh weights and dropout
    device: str = "auto"  # auto (cuda if available) | cpu | cuda | cuda:N
    autocast: str = "auto"  # bf16 autocast: auto (where the hardware has it) | bf16 | off
    checkpoint_every: int = 100  # 0 = only at the end
    keep_checkpoints: int = 2
    dist_timeout_s: float = 600.0  # multi-process: collectives fail after this instead of hanging
    tensorboard: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            setattr(self, f.name, check_setting(f.name, getattr(self, f.name)))
        self.sources = list(dict.fromkeys(self.sources))
        from ralm.luke.annotations import ENTITY_SOURCES

        probs = ("mlm_prob", "random_word_prob", "unmasked_word_prob", "mep_prob", "warmup_ratio")
        checks = [
            (self.mode in MODES, f"mode {self.mode!r}: choose {' or '.join(MODES)}"),
            (
                all(s in ENTITY_SOURCES for s in self.sources),
                f"sources {self.sources}: entity sources are {', '.join(ENTITY_SOURCES)}",
            ),
            (bool(self.entity_sources), "sources = [] and auto_annotation = false: no entity source left"),
            (self.entity_vocab_size > 3, f"entity_vocab_size={self.entity_vocab_size}: must be > 3"),
            (
                self.entity_hidden_size is None or self.entity_hidden_size >= 1,
                f"entity_hidden_size={self.entity_hidden_size}: must be >= 1",
            ),
            (self.entity_emb_size >= 1, f"entity_emb_size={self.entity_emb_size}: must be >= 1"),
            (self.entity_min_mentions >= 1, f"entity_min_mentions={self.entity_min_mentions}: must be >= 1"),
            (
                self.entity_attention in ("joint", "separate"),
                f"entity_attention {self.entity_attention!r}: choose joint or separate",
            ),
            (
                0 <= self.entity_first_steps < self.steps,
                f"entity_first_steps={self.entity_first_steps}: must be >= 0 and below steps={self.steps}",
            ),
            (self.entity_first_lr > 0, f"entity_first_lr={self.entity_first_lr}: must be > 0"),
            (self.max_seq_length >= 3, f"max_seq_length={self.max_seq_length}: must be >= 3"),
            (self.max_entities >= 1, f"max_entities={self.max_entities}: must be >= 1"),
            (self.max_mention_length >= 1, f"max_mention_length={self.max_mention_length}: must be >= 1"),
            *((0.0 <= getattr(self, p) <= 1.0, f"{p}={getattr(self, p)}: must be in [0, 1]") for p in probs),
            (
                self.random_word_prob + self.unmasked_word_prob <= 1.0,
                "random_word_prob + unmasked_word_prob must be <= 1",
            ),
            (self.steps >= 1, f"steps={self.steps}: must be >= 1"),
            (self.batch_size >= 1, f"batch_size={self.batch_size}: must be >= 1"),
            (self.grad_accum >= 1, f"grad_accum={self.grad_accum}: must be >= 1"),
            (self.lr > 0, f"lr={self.lr}: must be > 0"),
            (
                self.schedule in ("linear", "cosine", "constant"),
                f"schedule {self.schedule!r}: linear, cosine or constant",
            ),
            (self.weight_decay >= 0, f"weight_decay={self.weight_decay}: must be >= 0"),
            (self.max_grad_norm >= 0, f"max_grad_norm={self.max_grad_norm}: must be >= 0"),
            (
                self.autocast in ("auto", "bf16", "off"),
                f"autocast {self.autocast!r}: choose auto, bf16 or off",
            ),
            (self.checkpoint_every >= 0, f"checkpoint_every={self.checkpoint_every}: must be >= 0"),
            (self.keep_checkpoints >= 1, f"keep_checkpoints={self.keep_checkpoints}: must be >= 1"),
        ]
        for ok, msg in checks:
            if not ok:
                raise RalmError(msg)

    @property
    def entity_sources(self) -> tuple[str, ...]:
        """The salient sources whose spans become entity tokens: `sources`, plus "auto" with auto_annotation."""
        return tuple(dict.fromkeys([*self.sources, *(["auto"] if self.auto_annotation else [])]))

    @property
    def warmup_steps(self) -> int:
        return round(self.warmup_ratio * self.steps)

    @property
    def replace_probs(self) -> tuple[float, float, float]:
        """(mask, random word, unchanged) for a masked word (BERT, DaLUKE: 0.8, 0.1, 0.1)."""
        keep = self.random_word_prob + self.unmasked_word_prob
        return (1.0 - keep, self.random_word_prob, self.unmasked_word_prob)

    # -- TOML
    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> LukePretrainConfig:
        check_known(cls, d, source)
        return cls(**d)

    @classmethod
    def from_toml(cls, path: str | os.PathLike, **overrides: Any) -> LukePretrainConfig:
        p = Path(path)
        data = read_toml(p)
        for key, value in data.items():
            try:
                check_setting(key, value)
            except RalmError as exc:
                raise RalmError(f"{p}: {exc}") from None
        data.update(overrides)
        return cls.from_dict(data, source=str(p))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_toml(self) -> str:
        return "\n".join(toml_line(k, v) for k, v in self.to_dict().items() if v is not None) + "\n"

    def save(self, run_dir: str | os.PathLike) -> Path:
        """Write RUN/config.toml atomically."""
        return write_text_atomic(Path(run_dir) / CONFIG_FILE, self.to_toml())


def check_setting(key: str, value: Any) -> Any:
    """`value` checked against the type of setting `key` (converted where nothing is lost: an int for a
    float); RalmError "steps = 'ten': expected an integer" otherwise. Unknown keys pass (from_dict names them)."""
    tp = hints(LukePretrainConfig).get(key)
    if tp is None:
        return value
    ok, out = fit(tp, value)
    if not ok:
        raise RalmError(f"{key} = {show(value)}: expected {describe(tp)}")
    return list(out) if isinstance(out, tuple) else out
