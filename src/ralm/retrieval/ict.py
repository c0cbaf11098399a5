"""Inverse Cloze Task (Lee et al. 2019): the retriever warm start used by REALM and BRENT.

A pseudo-query is one random sentence of a chunk; its pseudo-document is the chunk (with its
title) with that sentence removed 90% of the time, so the retriever learns both lexical
matching and context beyond it. Each step scores B queries against the B documents of the
batch (in-batch negatives) and minimises the cross-entropy of the right one.

Held-out recall: chunks set aside before training (never seen as queries or documents) give
one pseudo-query each, always with its sentence removed from its document; recall@k is the
fraction of queries whose document ranks in the top k among all held-out documents. It is
logged before training (the untuned encoder) and every `eval_every` steps.

Left out: ICT on article introductions only (BRENT used 68k intros; pass a DocStore of intros
for that) and distributed training (see the scale issue).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ralm.corpus.docstore import DocStore
from ralm.corpus.sentences import split_sentences
from ralm.errors import RalmError
from ralm.precision import autocast_context, autocast_dtype
from ralm.retrieval.encoders import DualEncoder
from ralm.train.device import resolve_device
from ralm.train.logging import MetricsLogger
from ralm.train.optim import adamw, param_groups, warmup_schedule


@dataclass
class ICTConfig:
    """ICT training options; saved as ict_config.json in the run directory."""

    steps: int = 1000  # optimiser steps
    batch_size: int = 32  # queries per step = in-batch negatives + 1 (BRENT: 128)
    lr: float = 1e-4  # BRENT's ICT learning rate
    weight_decay: float = 0.01  # not on biases and LayerNorm
    warmup_frac: float = 0.1  # linear warm-up over this fraction of the steps
    schedule: str = "linear"  # linear | cosine | constant after warm-up
    remove_prob: float = 0.9  # remove the query sentence from its document (Lee et al.: 90%)
    grad_clip: float = 1.0  # max gradient norm
    heldout_frac: float = 0.05  # chunks set aside for held-out recall
    heldout_max: int = 1000  # at most this many held-out queries
    eval_every: int = 200  # steps between held-out evaluations (and at the end)
    log_every: int = 10  # steps between metric lines
    autocast: str = "auto"  # bf16 autocast where the CPU/GPU has native bf16
    device: str = "auto"  # auto = cuda if available else cpu
    seed: int = 0


def ict_pair(
    text: str, sentence: int, remove: bool, spans: list[tuple[int, int]] | None = None
) -> tuple[str, str]:
    """(pseudo-query, pseudo-document) of `text` taking sentence number `sentence` as the query.

    spans: `split_sentences(text)` when the caller already has it.
    Example: ict_pair("A b. C d. E f.", 1, True) -> ("C d.", "A b. E f.").
    """
    if spans is None:
        spans = split_sentences(text)
    s, e = spans[sentence]
    query = text[s:e]
    if not remove:
        return query, text
    doc = (text[:s].rstrip() + " " + text[e:].lstrip()).strip()
    return query, doc


class ICTSampler:
    """Draws ICT examples from a set of chunk ids of a DocStore (chunks of >= 2 sentences)."""

    def __init__(
        self, store: DocStore, ids: np.ndarray, rng: np.random.Generator, remove_prob: float
    ) -> None:
        self.store = store
        self.ids = np.asarray(ids)
        self.rng = rng
        self.remove_prob = remove_prob

    def example(self, cid: int, remove: bool | None = None) -> tuple[str, str, str] | None:
        """(query, title, document) for chunk `cid`, or None when it has fewer than 2 sentences."""
        row = self.store.get(cid)
        spans = split_sentences(row["text"])
        if len(spans) < 2:
            return None
        if remove is None:
            remove = bool(self.rng.random() < self.remove_prob)
        q, d = ict_pair(row["text"], int(self.rng.integers(len(spans))), remove, spans)
        return q, row["title"], d

    def batch(self, size: int, max_tries: int = 20) -> list[tuple[str, str, str]]:
        """`size` examples from distinct chunks."""
        out: list[tuple[str, str, str]] = []
        seen: set[int] = set()
        for _ in range(max_tries):
            for cid in self.rng.choice(self.ids, size=min(len(self.ids), 2 * size), replace=False):
                if int(cid) in seen:
                    continue
                seen.add(int(cid))
                ex = self.example(int(cid))
                if ex is not None:
                    out.append(ex)
                    if len(out) == size:
                        return out
        raise RalmError(
            f"{self.store.root}: too few chunks with 2+ sentences for an ICT batch of {size}; "
            "use a smaller --batch-size or a bigger corpus"
        )


def ict_loss(
    encoder: DualEncoder, examples: list[tuple[str, str, str]], amp_dtype, device
) -> tuple[torch.Tensor, float]:
    """In-batch softmax loss and accuracy for (query, title, document) examples."""
    queries = [q for q, _, _ in examples]
    titles = [t for _, t, _ in examples]
    docs = [d for _, _, d in examples]
    qb = {k: v.to(device) for k, v in encoder.tokenize_queries(queries).items()}
    db = {k: v.to(device) for k, v in encoder.tokenize_docs(titles, docs).items()}
    with autocast_context(device, amp_dtype):
        q = encoder.query_tower(**qb)
        d = encoder.doc_tower(**db)
    scores = encoder.score(q.float(), d.float())  # (B, B): query i against every document
    target = torch.arange(len(examples), device=scores.device)
    loss = F.cross_entropy(scores, target)
    acc = (scores.argmax(dim=1) == target).float().mean().item()
    return loss, acc


def heldout_recall(
    encoder: DualEncoder, examples: list[tuple[str, str, str]], ks=(1, 5, 10), device=None, autocast="auto"
) -> dict[str, float]:
    """recall@k of each held-out query's own document among all held-out documents."""
    q = encoder.encode_queries([e[0] for e in examples], device=device, autocast=autocast)
    d = encoder.encode_docs(
        [e[1] for e in examples], [e[2] for e in examples], device=device, autocast=autocast
    )
    s = q @ d.T  # (Q, Q); the right document of query i is i
    rank = (s > np.diag(s)[:, None]).sum(axis=1)  # documents scoring strictly higher
    return {f"heldout_recall@{k}": float((rank < k).mean()) for k in ks if k <= len(examples)}


def train_ict(
    encoder: DualEncoder, store: DocStore, out: str | os.PathLike, cfg: ICTConfig, progress: bool = True
) -> dict[str, Any]:
    """Train `encoder` with ICT on `store`; saves `out/encoder/`, metrics and the config. Returns the last eval."""
    from ralm.progress import tqdm

    device = resolve_device(cfg.device)  # before anything is written: a bad --device leaves nothing
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ict_config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n", encoding="utf-8")
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    encoder.to(device)
    amp = autocast_dtype(device, cfg.autocast, next(encoder.parameters()).dtype)

    perm = rng.permutation(len(store))
    n_held = min(cfg.heldout_max, int(round(cfg.heldout_frac * len(store))))
    held_ids, train_ids = perm[:n_held], perm[n_held:]
    if len(train_ids) < cfg.batch_size:
        raise RalmError(
            f"{store.root}: {len(train_ids)} training chunks, fewer than --batch-size {cfg.batch_size}"
        )
    held_sampler = ICTSampler(store, held_ids, np.random.default_rng(cfg.seed + 1), 1.0)
    held = [ex for ex in (held_sampler.example(int(i), remove=True) for i in held_ids) if ex is not None]
    sampler = ICTSampler(store, train_ids, rng, cfg.remove_prob)

    opt = adamw(param_groups(encoder, cfg.lr, cfg.weight_decay))
    sched = warmup_schedule(opt, cfg.schedule, int(cfg.warmup_frac * cfg.steps), cfg.steps)
    logger = MetricsLogger(out)
    last: dict[str, Any] = {}
    if len(held) >= 2:
        last = heldout_recall(encoder, held, device=device, autocast=cfg.autocast)
        logger.log(0, **last, heldout_queries=len(held))
    encoder.train()
    bar = tqdm(range(1, cfg.steps + 1), desc="ict", disable=not progress)
    t0 = time.perf_counter()
    try:
        for step in bar:
            loss, acc = ict_loss(encoder, sampler.batch(cfg.batch_size), amp, device)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(encoder.parameters(), cfg.grad_clip).item()
            opt.step()
            sched.step()
            if step % cfg.log_every == 0 or step == cfg.steps:
                logger.log(
                    step,
                    loss=loss.item(),
                    inbatch_acc=acc,
                    lr=sched.get_last_lr()[0],
                    grad_norm=grad_norm,
                    seconds=time.perf_counter() - t0,
                )
                bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{acc:.2f}")
            if len(held) >= 2 and (step % cfg.eval_every == 0 or step == cfg.steps):
                last = heldout_recall(encoder, held, device=device, autocast=cfg.autocast)
                logger.log(step, **last)
                encoder.train()
    finally:
        logger.close()
        bar.close()
    encoder.eval()
    encoder.save(out / "encoder")
    return last
