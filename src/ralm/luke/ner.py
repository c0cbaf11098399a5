"""NER by span classification on a LUKE/DaLUKE model: fine-tuning per seed and the whole job.

Every word span of a sentence up to `max_span_length` words (`ralm.luke.spans`) becomes a
`[MASK]` entity (id 2) whose position ids are its word-token positions (-1 padded to the model's
`max_mention_length`, longer spans keep their first positions, as LUKE); `LukeForSpanClassification`
classifies concat(first word output, last word output, entity output) into "O" or an entity type.
A sentence with more spans than `max_entities` is split into chunks, each a row that repeats the
sentence's words (span entities of one row attend to each other, as in LUKE, so the chunk size is
part of the input, not only of the batching). Decoding keeps non-overlapping spans by descending
softmax probability of their predicted type (`spans.decode_spans`) and writes IOB2 tags, scored
with seqeval against the sentence's full gold tags, so entities that truncation cut or that are
longer than the maximum span count as missed.

`luke_ner(cfg)` is `ralm luke ner`: it reads the data exactly as `ralm finetune ner` does (same
readers, splits, dev/test carving with the first seed, `--train-limit` sampling per seed), trains
every seed from the pre-trained weights (AdamW + warm-up from `ralm.train.optim`, dev scoring at
each epoch end and every `eval_every` steps, best dev state kept as in `ralm.tasks.trainer`) and
writes `results.json`/`results.md` in `ralm finetune`'s format, so `ralm table` shows the LUKE row
beside the word-only one. The inference rate (sentences/s, words in to IOB2 tags out, on the test
split) is reported per seed and in the summary. Defaults follow DaLUKE's fine-tuning table
(15 epochs, batch 8 sentences, lr 5e-5, 6% warm-up, weight decay 0.01, linear decay, dropout 0.025
before the classifier).

Options for a span classifier starved of positives and for measuring it apart from the entity
tokens (issue 47): `o_weight` weights the "O" class's cross-entropy (the others 1); `decode =
"threshold"` types a span as an entity when 1 - P(O) exceeds a threshold tuned on dev (best entity
F1 over 0.05..0.95), recorded per seed and applied to test; `words_only` is DaLUKE's span
classifier without entity tokens (concat(first, last) word states, the same head and budget);
`context_words` reads each sentence with up to that many words of the sentences before and after
it in its split (LUKE reads a sentence inside its document).

`link_entities` is DaLUKE's auto-annotation applied at NER time: a candidate span whose words, joined
by a space, name an entity of the run's entity vocabulary (entity_vocab.tsv, matched case-insensitively
as the auto-annotator matches: `EntityVocabulary.name_ids`, `spans.link_spans`) enters the model as
that entity's id instead of [MASK], so what pre-training stored in the entity's embedding reaches the
classifier; every other span stays [MASK]. Without it (the default, the paper's setting) only what the
encoder knows about the words reaches the classifier. The linked spans are counted per split.

Cut off, a rerun of the same command keeps the seeds that finished (`ralm.train.seed_jobs`, as
`ralm finetune`). Left out: nested entities, resuming inside a seed, multi-process fine-tuning.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from ralm.atomic import write_json_atomic
from ralm.errors import RalmError
from ralm.locks import writer_lock
from ralm.luke.config import ENTITY_MASK_ID
from ralm.luke.ner_model import Backbone, decode_tags, load_backbone, score_tags, span_probs, tune_threshold
from ralm.luke.spans import (
    check_iob2,
    chunk_rows,
    collate,
    context_words,
    encode_sentences,
)
from ralm.train.seed_jobs import abandon, prepare_job, publish, run_seeds

__all__ = ["LukeNerConfig", "entity_names", "luke_ner", "results_md", "run_seed"]


@dataclass
class LukeNerConfig:
    """One `ralm luke ner` job (DaLUKE's fine-tuning table as defaults)."""

    data: str | None  # dataset file or directory, as `ralm finetune ner` takes it
    out: str
    model: str  # `ralm luke pretrain` run directory, or a model directory written by luke.io.save_model
    tokenizer: str | None = None  # default: the tokenizer saved with the model or run
    name: str | None = None  # row label in tables (default: the run directory's name)
    dataset: str | None = None  # column label in tables (default: the data path's name)
    format: str | None = None  # conll | conllu (default: detected)
    train: str | None = None
    dev: str | None = None
    test: str | None = None
    test_fraction: float = 0.0
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    epochs: float = 15.0
    max_steps: int = 0  # > 0: stop after this many optimiser steps (overrides epochs)
    batch_size: int = 8  # sentences per optimiser step (all their span chunks)
    lr: float = 5e-5
    lr_head: float | None = None  # the span classifier; default = lr
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    schedule: str = "linear"
    max_length: int = 256  # word tokens per sentence, special tokens included (capped by the model)
    max_span_length: int = 16  # words (LUKE's max_mention_length for NER)
    max_entities: int = 128  # spans per forward row; longer sentences are split into chunks
    train_limit: int = 0  # use at most N training sentences (seeded sample per seed; 0 = all)
    max_eval: int = 0  # score at most the first N dev/test sentences (0 = all)
    eval_every: int = 0  # also score dev every N steps (0 = at each epoch end only)
    patience: int = 0  # stop after N dev evaluations without improvement (0 = never)
    head_dropout: float = 0.025  # dropout before the span classifier (DaLUKE's "final, linear layer")
    o_weight: float = 1.0  # cross-entropy weight of the "O" class (the entity classes weigh 1)
    decode: str = "argmax"  # argmax (LUKE) | threshold: 1 - P(O) > a threshold tuned on dev
    words_only: bool = False  # the span classifier without entity tokens (DaLUKE's words_only)
    context_words: int = 0  # words of the neighbouring sentences read around each sentence (LUKE)
    link_entities: bool = False  # a span naming a vocabulary entity enters as that entity, not [MASK]
    grad_clip: float = 1.0
    eval_batch_size: int = 32  # chunk rows per forward at evaluation
    device: str = "auto"
    autocast: str = "auto"
    save: bool = True  # write each seed's fine-tuned model
    overwrite: bool = False
    progress: bool = True


# ----------------------------------------------------------------------------- one seed


def _optimizer(cfg: LukeNerConfig, model) -> torch.optim.Optimizer:
    from ralm.train.optim import adamw, param_groups

    seen: set[int] = set()
    groups = param_groups(model.luke, cfg.lr, cfg.weight_decay, name="encoder", skip=seen)
    groups += param_groups(model, cfg.lr_head or cfg.lr, cfg.weight_decay, name="head", skip=seen)
    return adamw(groups)


def run_seed(
    cfg: LukeNerConfig,
    bb: Backbone,
    splits: dict[str, list],
    classes: list[str],
    seed: int,
    out: Path,
    names: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Fine-tune one seed into `out` (metrics.jsonl, eval.json, predictions.jsonl, model/); its record.

    names: folded entity name -> id (`EntityVocabulary.name_ids()`) to link spans with, None for
    [MASK] on every span.
    """
    from ralm.models.precision import autocast_context, autocast_dtype
    from ralm.tasks.adapters import shuffled
    from ralm.tasks.trainer import BestState, subsample, write_predictions
    from ralm.train.device import resolve_device
    from ralm.train.logging import MetricsLogger
    from ralm.train.loop import fit_epochs
    from ralm.train.optim import warmup_schedule

    t0 = time.perf_counter()
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    device = resolve_device(cfg.device)
    model = bb.load(len(classes), cfg.head_dropout, words_only=cfg.words_only).to(device).train()
    if cfg.o_weight != 1.0:
        model.class_weights = torch.tensor([cfg.o_weight] + [1.0] * (len(classes) - 1))
    dtype = autocast_dtype(device, cfg.autocast, torch.float32)
    M, pad = model.config.max_mention_length, bb.tokenizer.pad_token_id
    max_length = min(cfg.max_length, model.config.max_position_embeddings)
    train_set = subsample(splits["train"], cfg.train_limit, seed)
    dev = splits.get("dev", [])[: cfg.max_eval or None]
    test = splits.get("test", [])[: cfg.max_eval or None]

    def encode(examples):
        ctx = context_words(examples, cfg.context_words) if cfg.context_words else None
        return encode_sentences(
            bb.tokenizer,
            examples,
            classes,
            max_length=max_length,
            max_span_length=cfg.max_span_length,
            context=ctx,
            names=names,
        )

    def probs(feats):
        return span_probs(
            model,
            feats,
            pad_id=pad,
            batch_size=cfg.eval_batch_size,
            max_entities=cfg.max_entities,
            device=device,
            dtype=dtype,
        )

    threshold: float | None = None

    def tag(feats):
        return decode_tags(feats, probs(feats), classes, threshold)

    feats, reach = encode(train_set)
    dev_feats = encode(dev)[0]
    t_train = time.perf_counter()
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * math.ceil(len(feats) / cfg.batch_size)))
    opt = _optimizer(cfg, model)
    sched = warmup_schedule(opt, cfg.schedule, int(cfg.warmup_ratio * total), total)
    params = [p for g in opt.param_groups for p in g["params"]]
    best = BestState("f1")
    holder = SimpleNamespace(model=model, retriever=None)  # what BestState keeps and restores
    log = MetricsLogger(out, tensorboard=False)

    def evaluate_dev(step: int) -> bool:
        if not dev:
            return False
        return best.record(score_tags(dev, tag(dev_feats)), step, holder, log, cfg.patience)

    def loss_of(batch):
        rows = chunk_rows(feats, batch, cfg.max_entities)
        head = {"spans": sum(hi - lo for _, lo, hi in rows)}
        if not rows:  # sentences without any span (all words cut) give no loss
            return None, head
        x = collate(rows, feats, pad, M)
        with autocast_context(device, dtype):
            return model(**{k: v.to(device) for k, v in x.items()})["loss"], head

    step = fit_epochs(
        total=total,
        batch_size=cfg.batch_size,
        order=lambda epoch: shuffled(len(feats), seed, epoch),
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
    )
    train_seconds = time.perf_counter() - t_train
    best.restore(holder)
    record: dict[str, Any] = {"seed": seed, "steps": step, "best_step": best.step if best.state else step}
    record["dev"] = best.metrics if best.state else (score_tags(dev, tag(dev_feats)) if dev else {})
    if cfg.decode == "threshold" and dev:
        threshold, record["dev_threshold"] = tune_threshold(dev, dev_feats, probs(dev_feats), classes)
        record["threshold"] = threshold
    preds: dict[str, list[str]] = {}
    timed = test or dev
    if timed:  # inference rate: words in, IOB2 tags out (features, forward passes, decoding)
        t_inf = time.perf_counter()
        tags = tag(encode(timed)[0])
        seconds = time.perf_counter() - t_inf
        record["inference"] = {
            "split": "test" if test else "dev",
            "sentences": len(timed),
            "seconds": round(seconds, 4),
            "sentences_per_s": len(timed) / max(seconds, 1e-9),
        }
        if test:
            record["test"] = score_tags(test, tags)
            preds = {ex.id: t for ex, t in zip(test, tags, strict=True)}
    if names is not None:
        record["linked_spans"] = {
            "train": _linked(feats),
            "dev": _linked(dev_feats),
            "test": _linked(encode(test)[0]) if test else None,
        }
    record.update(
        train_examples=len(train_set),
        train_spans=int(sum(len(f.spans) for f in feats)),
        unreachable_train_entities={"too_long": reach["too_long"], "cut": reach["cut"]},
        dev_examples=len(dev),
        test_examples=len(test),
        train_seconds=round(train_seconds, 2),
        seconds=round(time.perf_counter() - t0, 2),
    )
    log.close()
    write_predictions(out / "predictions.jsonl", preds)
    if cfg.save:
        from ralm.luke.io import save_model

        save_model(model, out / "model", extra={"classes": classes, "max_span_length": cfg.max_span_length})
        if not (out / "model" / "tokenizer_config.json").is_file():  # save_model copies the run's own
            bb.tokenizer.save_pretrained(str(out / "model"))
    write_json_atomic(out / "eval.json", record)  # last: it marks the seed finished (ralm.train.seed_jobs)
    return record


def _linked(feats: list) -> dict[str, int]:
    """How many candidate spans were linked to an entity, and how many of those are gold entities."""
    linked = gold = 0
    for f in feats:
        if f.entity_ids is None:
            continue
        hit = f.entity_ids != ENTITY_MASK_ID
        linked += int(hit.sum())
        gold += int((hit & (f.labels != 0)).sum())
    return {"spans": linked, "gold_entity_spans": gold}


# ----------------------------------------------------------------------------- the job


def entity_names(bb: Backbone) -> dict[str, int]:
    """`EntityVocabulary.name_ids()` of the run behind `bb` (its entity_vocab.tsv in the run or model
    directory); RalmError naming the place looked in when there is none, or when it does not fit the
    model's entity table."""
    from ralm.luke.io import read_model_info
    from ralm.luke.vocab import VOCAB_FILE, EntityVocabulary

    run = Path(bb.source)
    where = list(
        dict.fromkeys((run / VOCAB_FILE, bb.model_dir / VOCAB_FILE, bb.model_dir.parent / VOCAB_FILE))
    )
    path = next((p for p in where if p.is_file()), None)
    if path is None:
        raise RalmError(
            f"{run}: no {VOCAB_FILE} in the run or model directory; --link-entities matches spans "
            "against the entity vocabulary that `ralm luke pretrain` writes into its run: pass that run "
            "as --model, or drop --link-entities"
        )
    vocab = EntityVocabulary.load(path)
    rows = read_model_info(bb.model_dir)["config"].entity_vocab_size
    if len(vocab) > rows:
        raise RalmError(
            f"{path}: {len(vocab)} entity ids, but the model's entity table has {rows} rows; "
            "--link-entities needs the vocabulary of the run the model comes from"
        )
    return vocab.name_ids()


def luke_ner(cfg: LukeNerConfig, log=print, note: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every seed of `cfg`, written to `cfg.out`; returns the results.json dict. The job folder is
    `ralm finetune`'s (`ralm.train.seed_jobs`), written under `out`'s writer lock once the data and
    the model have loaded: cut off, a rerun of the same command keeps the finished seeds. note:
    where the notes on interrupted jobs go (stderr by default)."""
    from ralm.tasks.datasets import check_label_sets, load_task_data

    if min(cfg.max_span_length, cfg.max_entities, cfg.batch_size, cfg.eval_batch_size) < 1:
        raise RalmError("--max-span-length, --max-entities and the batch sizes must be at least 1")
    if cfg.decode not in ("argmax", "threshold"):
        raise RalmError(f"--decode {cfg.decode!r}: choose argmax or threshold")
    if cfg.o_weight <= 0 or cfg.context_words < 0:
        raise RalmError("--o-weight must be > 0 and --context-words >= 0")
    if not cfg.seeds:
        raise RalmError("no seeds: give at least one, e.g. --seeds 1,2,3,4,5")
    out = Path(cfg.out)
    data = load_task_data(
        cfg.data,
        "ner",
        fmt=cfg.format,
        train=cfg.train,
        dev=cfg.dev,
        test=cfg.test,
        test_fraction=cfg.test_fraction,
        seed=cfg.seeds[0],
    )
    for msg in data.notes:
        log(f"note: {msg}")
    if not data.splits.get("train"):
        raise RalmError(
            f"{cfg.data or cfg.train}: no train split found; pass --train FILE (and --dev/--test)"
        )
    check_iob2(data, cfg.format)
    check_label_sets(data)
    labels = data.labels()
    classes = ["O"] + sorted({t[2:] for t in labels if t != "O"})
    bb = load_backbone(cfg.model, cfg.tokenizer)
    names = entity_names(bb) if cfg.link_entities else None
    note = note or (lambda m: print(m, file=sys.stderr))
    with writer_lock(out):
        return _run_job(cfg, out, bb, data, labels, classes, names, log, note)


def _run_job(
    cfg: LukeNerConfig, out: Path, bb: Backbone, data, labels, classes, names, log, note
) -> dict[str, Any]:
    """The seeds of `cfg` in the job folder of `out` (held under its writer lock), then the results."""
    from ralm.tasks.finetune import summarize

    tmp = prepare_job(out, asdict(cfg), cfg.overwrite, note)
    try:
        init = {"model": str(bb.model_dir.resolve()), "tokenizer": str(Path(bb.tokenizer_dir).resolve())}
        write_json_atomic(tmp / "init.json", init)

        def rate(rec: dict[str, Any]) -> list[str]:
            r = rec.get("inference", {}).get("sentences_per_s")
            return [f"{r:.1f} sentences/s"] if r else []

        records = run_seeds(
            tmp,
            cfg.seeds,
            lambda seed, sd: run_seed(cfg, bb, data.splits, classes, seed, sd, names),
            log,
            rate,
        )
        results = {
            "task": "ner",
            "method": "luke-span",
            "name": cfg.name or bb.label,
            "model": bb.source,
            "backbone": bb.backbone,
            "retrieval": False,
            "retriever": None,
            "data": str(cfg.data or cfg.train),
            "dataset": cfg.dataset or Path(cfg.data or cfg.train).name,
            "format": data.format,
            "sources": data.sources,
            "notes": data.notes,
            "primary": "f1",
            "labels": labels,
            "classes": classes,
            "config": asdict(cfg),
            "seeds": records,
            "summary": summarize(records),
            "inference": _speed(records),
            "seconds": round(sum(r["seconds"] for r in records), 2),
        }
        publish(tmp, out, results, results_md(results))
    except BaseException:
        abandon(tmp, note)
        raise
    return results


def _speed(records: list[dict]) -> dict[str, Any] | None:
    """Mean and sample std of the seeds' inference rates (sentences/s)."""
    import statistics

    xs = [r["inference"]["sentences_per_s"] for r in records if "inference" in r]
    if not xs:
        return None
    std = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return {
        "split": records[0]["inference"]["split"],
        "sentences_per_s": {"mean": statistics.fmean(xs), "std": std, "n": len(xs)},
    }


def results_md(results: dict[str, Any]) -> str:
    """`ralm finetune`'s results.md, plus the span classifier's inference rate."""
    from ralm.tasks.tables import cell, results_markdown

    text = results_markdown(results)
    speed = results.get("inference")
    if speed:
        rate = cell(speed["sentences_per_s"])
        text += f"\ninference ({speed['split']} split, words to IOB2 tags): {rate} sentences/s\n"
    return text
