"""The span classifier of `ralm luke ner` as a model: loading it (--model) and predicting IOB2 tags.

`load_backbone` resolves --model (a `ralm luke pretrain` run or a LUKE model directory) and its
tokenizer; `Backbone.load` puts a fresh `LukeForSpanClassification` head on the pre-trained
weights. `predict_tags` classifies every candidate span of a sentence (chunks of `max_entities`
spans per row, see ralm.luke.ner), then decodes non-overlapping spans by descending probability
(`spans.decode_spans`) into IOB2 tags; `score_tags` scores them with seqeval like the word-only
tagger. Training and the job around it are in ralm.luke.ner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.luke.spans import SentenceSpans, chunk_rows, collate, decode_spans, spans_to_iob2

__all__ = [
    "Backbone",
    "decode_tags",
    "load_backbone",
    "predict_tags",
    "score_tags",
    "span_probs",
    "tune_threshold",
]


# ----------------------------------------------------------------------------- prediction


@torch.no_grad()
def span_probs(
    model,
    features: list[SentenceSpans],
    *,
    pad_id: int,
    batch_size: int,
    max_entities: int,
    device: torch.device,
    dtype: torch.dtype | None = None,
) -> list[np.ndarray]:
    """Per sentence, the (S, C) class probabilities of its candidate spans (class 0 = "O")."""
    from ralm.models.precision import autocast_context

    was = model.training
    model.eval()
    M = model.config.max_mention_length
    probs: list[np.ndarray] = [np.zeros((len(x.spans), 0)) for x in features]
    rows = chunk_rows(features, range(len(features)), max_entities)
    rows.sort(key=lambda r: len(features[r[0]].input_ids))  # similar lengths share a batch
    try:
        for s in range(0, len(rows), batch_size):
            part = rows[s : s + batch_size]
            batch = collate(part, features, pad_id, M)
            batch.pop("labels")
            with autocast_context(device, dtype):
                logits = model(**{k: v.to(device) for k, v in batch.items()})["logits"]
            p = logits.float().softmax(-1).cpu().numpy()
            for r, (f, lo, hi) in enumerate(part):
                if probs[f].shape[1] != p.shape[-1]:
                    probs[f] = np.zeros((len(features[f].spans), p.shape[-1]), dtype=np.float64)
                probs[f][lo:hi] = p[r, : hi - lo]
    finally:
        model.train(was)
    return probs


def decode_tags(
    features: list[SentenceSpans], probs: list[np.ndarray], classes: list[str], threshold: float | None = None
) -> list[list[str]]:
    """IOB2 tags per sentence from span probabilities (`span_probs`), then greedy non-overlapping
    decoding by score (`spans.decode_spans`).

    threshold None: each span's argmax class, scored by its probability (LUKE). A number: a span is
    an entity when 1 - P(O) > threshold, typed by its most probable entity class and scored by
    1 - P(O): recall bought back where the argmax prefers "O" (0.70% of candidate spans are
    entities in WNUT-17, so "O" wins most close calls).
    Example: P = (O .55, PER .40, LOC .05) is "O" by argmax, "PER" at threshold 0.3.
    """
    out = []
    for x, p in zip(features, probs, strict=True):
        if not len(x.spans) or not p.shape[1]:
            out.append(spans_to_iob2([], x.n_words))
            continue
        if threshold is None:
            cls, score = p.argmax(1), p.max(1)
        else:
            cls = p[:, 1:].argmax(1) + 1
            score = 1.0 - p[:, 0]
            cls = np.where(score > threshold, cls, 0)
        kept = decode_spans(x.spans, [classes[k] for k in cls], score.tolist())
        out.append(spans_to_iob2(kept, x.n_words))
    return out


def predict_tags(
    model,
    features: list[SentenceSpans],
    classes: list[str],
    *,
    pad_id: int,
    batch_size: int,
    max_entities: int,
    device: torch.device,
    dtype: torch.dtype | None = None,
    threshold: float | None = None,
) -> list[list[str]]:
    """IOB2 tags per sentence: `span_probs`, then `decode_tags` (argmax, or 1 - P(O) > threshold)."""
    probs = span_probs(
        model,
        features,
        pad_id=pad_id,
        batch_size=batch_size,
        max_entities=max_entities,
        device=device,
        dtype=dtype,
    )
    return decode_tags(features, probs, classes, threshold)


THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05 .. 0.95


def tune_threshold(
    examples: list, features: list[SentenceSpans], probs: list[np.ndarray], classes: list[str]
) -> tuple[float, dict[str, float]]:
    """The threshold of `THRESHOLDS` whose decoding scores the best entity F1 on `examples` (dev), ties
    to the one nearest 0.5; returns it and its metrics."""
    best: tuple[float, float, dict] | None = None
    for t in THRESHOLDS:
        m = score_tags(examples, decode_tags(features, probs, classes, t))
        key = (m["f1"], -abs(t - 0.5))
        if best is None or key > (best[1], -abs(best[0] - 0.5)):
            best = (t, m["f1"], m)
    assert best is not None
    return best[0], best[2]


def score_tags(examples: list, tags: list[list[str]]) -> dict[str, float]:
    """The word-only tagger's NER metrics: seqeval entity P/R/F1 and token accuracy, in percent."""
    from ralm.tasks import metrics as M

    gold = [ex.labels for ex in examples]
    return {**M.entity_metrics(gold, tags), **M.tagging_accuracy(gold, tags)}


# ----------------------------------------------------------------------------- the model


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")


@dataclass
class Backbone:
    """What --model names: the pre-trained model directory, its tokenizer, and a row label."""

    model_dir: Path
    tokenizer: Any
    tokenizer_dir: Path
    source: str
    label: str
    backbone: str | None = None  # the checkpoint the run started from (`ralm finetune ner`'s comparison row)

    def load(self, num_labels: int, dropout: float | None = None, words_only: bool = False):
        """A fresh `LukeForSpanClassification` on the pre-trained weights (head seeded by torch's RNG);
        `words_only`: the span classifier that reads the words alone (no entity tokens)."""
        from ralm.luke.io import load_model
        from ralm.luke.model import LukeForSpanClassification

        model = load_model(
            self.model_dir,
            cls=LukeForSpanClassification,
            num_labels=num_labels,
            dropout=dropout,
            words_only=words_only,
        )
        if len(self.tokenizer) > model.config.vocab_size:
            raise RalmError(
                f"{self.tokenizer_dir}: the tokenizer has {len(self.tokenizer)} tokens, more than the "
                f"model's vocabulary ({model.config.vocab_size}) in {self.model_dir}; "
                "pass the run's own --tokenizer"
            )
        return model


def load_backbone(model: str, tokenizer: str | None = None) -> Backbone:
    """Resolve --model (a `ralm luke pretrain` run with model/, or a luke.io model directory) and
    its tokenizer (--tokenizer, else tokenizer files in the model directory, the run or run/tokenizer/)."""
    from ralm.models.tokenizers import load_tokenizer

    p = Path(model).expanduser()
    if not p.is_dir():
        raise RalmError(f"{p}: no such directory; --model needs a `ralm luke pretrain` run directory")
    model_dir = p / "model" if (p / "model" / "config.json").is_file() else p
    if not (model_dir / "config.json").is_file():
        raise RalmError(
            f"{p}: neither a `ralm luke pretrain` run (no model/config.json) nor a LUKE model directory "
            "(no config.json); pass the run's --out directory"
        )
    found: str | Path | None = tokenizer
    if not tokenizer:
        where = (model_dir, p, p / "tokenizer")
        found = next((d for d in where if any((d / f).is_file() for f in _TOKENIZER_FILES)), None)
    if found is None:
        raise RalmError(
            f"{p}: no tokenizer saved with the model or run; pass --tokenizer DIR (the backbone the run "
            "started from, e.g. minilm)"
        )
    from ralm.luke.io import read_model_info

    started = read_model_info(model_dir).get("extra", {}).get("backbone")
    return Backbone(
        model_dir, load_tokenizer(found), Path(found), str(p.resolve()), p.resolve().name, started
    )
