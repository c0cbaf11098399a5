"""Small neural LMs of the lecture: fixed-window feed-forward, LSTM and causal transformer.

All three read the same word tokens as the n-gram models (`ralm.lm.word_tokenize`) through a
`Vocab` whose ids 0, 1, 2 are `<unk>`, `<s>`, `</s>` (KenLM's numbering), capped by
frequency (`build_capped_vocab`), so their perplexities are comparable with `NGramLM`'s:
each sentence is `<s> w1 ... wk </s>`, `<s>` is context only, every other token (`</s>` and
`<unk>` included) is predicted and counted. Sentences are independent (no cross-sentence
context), as for the n-gram models.

Every model maps `ids (B, T)` = `<s> w1 ... w_{T-1}` to `logits (B, T, V)`, position t
predicting token t+1, and is causal: position t never sees a later token. Right padding is
therefore harmless.

The architectures (FeedForwardLM, LSTMLM, TransformerLM) and `build_model` are described and
defined in `ralm.lm.neural_models`.

`train_lm` runs AdamW on the summed token cross-entropy of length-bucketed batches, under
bf16 autocast where the CPU (or GPU) has native bf16, seeded, with a step and time budget,
halving the learning rate and finally stopping early when validation perplexity stops
improving; the best weights are restored. Perplexity is always computed in float32.
`save_lm` writes `model.safetensors` + `lm.json` (kind, config, vocabulary); nothing is
pickled. Left out: cross-sentence (document) context and truncated BPTT, sampled or
hierarchical softmax, mixed-precision training in fp16 (bf16 only), multi-GPU, generation.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ralm.atomic import write_text_atomic
from ralm.errors import RalmError
from ralm.lm.counts import BOS_ID, EOS_ID, SPECIALS, Vocab
from ralm.lm.neural_models import build_model
from ralm.train.loop import fit_steps

FORMAT = "ralm-neural-lm"
FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "lm.json"
IGNORE = -100  # target id of padding positions (F.cross_entropy's ignore_index)


# ----------------------------------------------------------------------------- vocabulary and data
def build_capped_vocab(
    sentences: Sequence[Sequence[str]], max_size: int | None = None, min_count: int = 1
) -> Vocab:
    """The `max_size` most frequent words seen at least `min_count` times (+ 3 specials).

    Ties in frequency keep the order of first appearance, so the vocabulary is deterministic.
    `max_size` counts the specials too. Example: `build_capped_vocab([["a", "b", "a"]], 4)`
    -> `<unk> <s> </s> a`.
    """
    freq = Counter(chain.from_iterable(sentences))
    for tok in SPECIALS:
        if tok in freq:
            raise RalmError(f"text contains the reserved token {tok!r}; remove or rename it")
    words = [w for w, c in sorted(freq.items(), key=lambda wc: -wc[1]) if c >= min_count]
    if max_size is not None:
        if max_size < len(SPECIALS) + 1:
            raise RalmError(f"vocabulary size {max_size}: must be at least {len(SPECIALS) + 1}")
        words = words[: max_size - len(SPECIALS)]
    return Vocab(words)


def encode_sentences(vocab: Vocab, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """Each sentence as an int64 array `<s> w1 ... wk </s>` (unknown words -> `<unk>` = 0)."""
    return [np.array([BOS_ID, *vocab.encode(s), EOS_ID], dtype=np.int64) for s in sentences]


def collate(seqs: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoded sentences -> (inputs (B, T), targets (B, T)) int64, T = longest length - 1.

    inputs[b, t] = seq[t] (padding: `</s>`, never attended to by earlier positions);
    targets[b, t] = seq[t + 1] (padding: IGNORE).
    """
    T = max(len(s) for s in seqs) - 1
    inputs = np.full((len(seqs), T), EOS_ID, dtype=np.int64)
    targets = np.full((len(seqs), T), IGNORE, dtype=np.int64)
    for b, s in enumerate(seqs):
        inputs[b, : len(s) - 1] = s[:-1]
        targets[b, : len(s) - 1] = s[1:]
    return torch.from_numpy(inputs), torch.from_numpy(targets)


def length_batches(
    lengths: np.ndarray, batch_tokens: int, rng: np.random.Generator | None = None
) -> list[np.ndarray]:
    """Group sentence indices of similar length into batches of <= batch_tokens padded tokens.

    With `rng`, equal lengths are shuffled and so is the batch order (training); without,
    the order is deterministic (evaluation). Example: lengths [3, 9, 4], batch_tokens 8 ->
    [[0, 2], [1]].
    """
    tie = rng.random(len(lengths)) if rng is not None else np.arange(len(lengths))
    order = np.lexsort((tie, lengths))
    batches: list[np.ndarray] = []
    start = 0
    for i in range(1, len(order) + 1):
        if i == len(order) or lengths[order[i]] * (i - start + 1) > batch_tokens:
            batches.append(order[start:i])
            start = i
    if rng is not None:
        batches = [batches[j] for j in rng.permutation(len(batches))]
    return batches


# ----------------------------------------------------------------------------- scoring
def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def sequence_nll(
    model: nn.Module, sentences: Sequence[np.ndarray], batch_tokens: int = 8192
) -> tuple[float, int]:
    """(total NLL in nats, number of predicted tokens) of encoded sentences, in float32, eval mode.

    Each sentence `<s> w1 ... wk </s>` contributes k + 1 predictions (`</s>` included).
    """
    if not len(sentences):
        raise RalmError("cannot score an empty set of sentences")
    was_training = model.training
    model.eval()
    device = _device_of(model)
    total, count = 0.0, 0
    try:
        lengths = np.array([len(s) for s in sentences])
        for idx in length_batches(lengths, batch_tokens):
            inputs, targets = collate([sentences[i] for i in idx])
            logits = model(inputs.to(device)).float()
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                targets.to(device).reshape(-1),
                ignore_index=IGNORE,
                reduction="sum",
            )
            total += float(loss)
            count += int((targets != IGNORE).sum())
    finally:
        model.train(was_training)
    return total, count


def perplexity(model: nn.Module, sentences: Sequence[np.ndarray], batch_tokens: int = 8192) -> float:
    """exp(total NLL / predicted tokens) over encoded sentences (KenLM's convention, base e)."""
    total, count = sequence_nll(model, sentences, batch_tokens)
    return math.exp(total / count)


@torch.no_grad()
def next_token_probs(model: nn.Module, context: Sequence[int]) -> torch.Tensor:
    """(V,) float32 distribution of the token after `context` (ids, starting with `<s>`)."""
    was_training = model.training
    model.eval()
    try:
        ids = torch.tensor([list(context)], dtype=torch.long, device=_device_of(model))
        return torch.softmax(model(ids)[0, -1].float(), dim=-1)
    finally:
        model.train(was_training)


# ----------------------------------------------------------------------------- training
@dataclass
class TrainConfig:
    """How `train_lm` optimises a model."""

    lr: float = 2e-3  # AdamW peak learning rate
    weight_decay: float = 0.01  # on weight matrices only (not biases, norms)
    betas: tuple[float, float] = (0.9, 0.99)
    batch_tokens: int = 4096  # padded tokens per step (sentences grouped by length)
    max_epochs: int = 20  # passes over the training sentences
    max_steps: int | None = None  # stop after this many optimizer steps
    time_budget_s: float | None = None  # stop after this many seconds of training
    warmup_steps: int = 50  # linear learning-rate warm-up
    patience: int = 2  # evaluations without validation improvement before stopping
    lr_decay: float = 0.5  # multiply the lr by this after each evaluation without improvement
    eval_every: int | None = None  # steps between validation runs; None = once per epoch
    grad_clip: float = 1.0  # max global gradient norm (0 = off)
    seed: int = 0  # batch order and dropout
    autocast: str = "auto"  # "auto" (bf16 where native), "bf16" or "off"


@dataclass
class TrainResult:
    """What `train_lm` did: best validation perplexity, epochs (fractional), steps, seconds."""

    best_valid_ppl: float | None
    epochs: float
    steps: int
    seconds: float
    stopped_by: str  # "epochs", "steps", "time", "early_stopping"
    history: list[dict] = field(default_factory=list)  # one entry per evaluation


def _autocast_dtype(device: torch.device, mode: str) -> torch.dtype | None:
    from ralm.models.precision import autocast_dtype

    return autocast_dtype(device, mode, torch.float32)


def train_lm(
    model: nn.Module,
    train: Sequence[np.ndarray],
    valid: Sequence[np.ndarray] | None = None,
    config: TrainConfig | None = None,
    log: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train `model` on encoded sentences with AdamW; returns what happened.

    With `valid`, validation perplexity is measured every `eval_every` steps (or per epoch),
    the learning rate decays on a plateau, training stops after `patience` evaluations
    without improvement, and the best weights are restored at the end.
    """
    cfg = config or TrainConfig()
    if not len(train):
        raise RalmError("no training sentences")
    device = _device_of(model)
    ac_dtype = _autocast_dtype(device, cfg.autocast)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=cfg.betas,
    )
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    lengths = np.array([len(s) for s in train])
    lr_scale, best, best_state, bad = 1.0, math.inf, None, 0
    history: list[dict] = []
    step, t0, stopped = 0, time.perf_counter(), "epochs"

    def evaluate(epoch: float) -> bool:
        """Validate; returns True when training should stop (patience exhausted)."""
        nonlocal best, best_state, bad, lr_scale
        ppl = perplexity(model, valid)
        history.append(
            {
                "step": step,
                "epoch": round(epoch, 3),
                "valid_ppl": ppl,
                "seconds": round(time.perf_counter() - t0, 2),
                "lr": cfg.lr * lr_scale,
            }
        )
        if log:
            log(f"step {step} epoch {epoch:.2f}: valid ppl {ppl:.2f} lr {cfg.lr * lr_scale:.2e}")
        if ppl < best - 1e-6:
            best, bad = ppl, 0
            best_state = copy.deepcopy(model.state_dict())
            return False
        bad += 1
        lr_scale *= cfg.lr_decay
        return bad >= cfg.patience

    model.train()
    epoch_done = 0.0
    params = list(model.parameters())

    def run_epoch(epoch: int, batches: list) -> bool:
        """The epoch's optimiser steps (`ralm.train.loop.fit_steps`); True when a stop rule fired."""
        stop = False

        def loss_of(idx):
            inputs, targets = collate([train[i] for i in idx])
            inputs, targets = inputs.to(device), targets.to(device)
            lr = cfg.lr * lr_scale * min(1.0, (step + 1) / max(1, cfg.warmup_steps))
            for g in opt.param_groups:
                g["lr"] = lr
            with torch.autocast(device.type, dtype=ac_dtype, enabled=ac_dtype is not None):
                logits = model(inputs)
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE
            )
            return loss, None

        def on_step(j: int, _loss: float, _info, _norm: float) -> bool:
            nonlocal step, epoch_done, stopped, stop
            step += 1
            epoch_done = epoch + j / len(batches)
            if cfg.max_steps is not None and step >= cfg.max_steps:
                stopped, stop = "steps", True
            elif cfg.time_budget_s is not None and time.perf_counter() - t0 >= cfg.time_budget_s:
                stopped, stop = "time", True
            periodic = valid is not None and cfg.eval_every and step % cfg.eval_every == 0
            if periodic and not stop and evaluate(epoch_done):
                stopped, stop = "early_stopping", True
            return stop

        fit_steps(
            total=len(batches),
            start=0,
            epoch_batches=lambda: batches,
            loss_of=loss_of,
            opt=opt,
            sched=None,
            params=params,
            grad_clip=cfg.grad_clip,
            on_step=on_step,
        )
        return stop

    for epoch in range(cfg.max_epochs):
        stop = run_epoch(epoch, length_batches(lengths, cfg.batch_tokens, rng))
        if stop:
            if valid is not None and (not history or history[-1]["step"] != step):
                evaluate(epoch_done)
            break
        if valid is not None and not cfg.eval_every and evaluate(epoch_done):
            stopped = "early_stopping"
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return TrainResult(
        best_valid_ppl=None if valid is None else best,
        epochs=round(epoch_done, 3),
        steps=step,
        seconds=time.perf_counter() - t0,
        stopped_by=stopped,
        history=history,
    )


# ----------------------------------------------------------------------------- persistence
def save_lm(model: nn.Module, vocab: Vocab, directory: str | os.PathLike) -> Path:
    """Write `model.safetensors` (tied weights stored once) and `lm.json` (kind, config, vocab)."""
    from safetensors.torch import save_model

    if len(vocab) != model.config.vocab_size:
        raise RalmError(f"vocabulary has {len(vocab)} entries but the model {model.config.vocab_size}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    save_model(model, str(d / WEIGHTS_FILE))
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "kind": model.kind,
        "config": asdict(model.config),
        "vocab": vocab.id_to_token,
    }
    write_text_atomic(d / CONFIG_FILE, json.dumps(meta, ensure_ascii=False, indent=1) + "\n")
    return d


def load_lm(directory: str | os.PathLike) -> tuple[nn.Module, Vocab]:
    """Read a directory written by `save_lm`; returns (model in eval mode, vocabulary)."""
    from safetensors.torch import load_model

    d = Path(directory)
    cpath, wpath = d / CONFIG_FILE, d / WEIGHTS_FILE
    for p in (cpath, wpath):
        if not p.is_file():
            raise RalmError(
                f"{p}: no such file; save a neural LM there with save_lm or `ralm lm ladder --save-dir`"
            )
    try:
        meta = json.loads(cpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RalmError(f"{cpath}: unreadable ({exc}); save the model again") from None
    if meta.get("format") != FORMAT or meta.get("version", 0) > FORMAT_VERSION:
        raise RalmError(f"{cpath}: not a {FORMAT} v{FORMAT_VERSION} file")
    tokens = meta["vocab"]
    if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
        raise RalmError(f"{cpath}: the vocabulary must start with {', '.join(SPECIALS)}")
    vocab = Vocab(tokens[len(SPECIALS) :])
    model = build_model(meta["kind"], meta["config"])
    try:
        load_model(model, str(wpath))
    except (RuntimeError, OSError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise RalmError(
            f"{wpath}: weights do not match {CONFIG_FILE} ({first}); save the model again"
        ) from None
    model.eval()
    return model, vocab
