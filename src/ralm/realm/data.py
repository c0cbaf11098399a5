"""Which chunks a run trains on and in what order: the held-out split, the seeded data order, the
per-example mask generators (see `ralm.realm.training.trainer` on determinism)."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.realm.config import PretrainConfig
from ralm.realm.masking.mlm import eligible_ids

__all__ = ["answer_query_ids", "batch_positions", "example_rngs", "micro_batch_ids", "span_keep", "split_ids"]


def span_keep(cfg: PretrainConfig, qstore: DocStore) -> np.ndarray | None:
    """The salient spans of the query store `qstore` a run may mask (S,) bool, or None for all:
    with `masking.retrievable_only` the ones whose tokens occur in another chunk of the run's
    knowledge corpus (`ralm.realm.masking.retrievable`, computed once a process per pair of stores)."""
    if not cfg.masking.retrievable_only:
        return None
    return _retrievable(str(qstore.root), cfg.docstore)


@functools.lru_cache(maxsize=4)
def _retrievable(queries: str, corpus: str) -> np.ndarray:
    from ralm.realm.masking.retrievable import retrievable_spans
    from ralm.realm.modeling.candidates import queries_are_corpus

    q, c = DocStore(queries), DocStore(corpus)
    return retrievable_spans(q, c, same_corpus=queries_are_corpus(c, q))


def split_ids(cfg: PretrainConfig, qstore: DocStore) -> tuple[np.ndarray, np.ndarray]:
    """(train ids, held-out ids): `cfg.heldout` query chunks held out (seeded), the rest eligible.

    Held-out chunks are drawn from the chunks with a salient span (the only ones `evaluate-mlm`
    can score; with `masking.retrievable_only`, a retrievable one), whatever the training strategy, so runs with the same seed and `heldout` hold
    out the same chunks: an MLM warm-up with uniform masking never sees the chunks that the
    REALM run and its baseline are later evaluated on.
    """
    keep = span_keep(cfg, qstore)
    scorable = (
        eligible_ids(qstore, replace(cfg.masking, strategy="salient"), keep)
        if cfg.heldout
        else np.zeros(0, np.int64)
    )
    if cfg.heldout and len(scorable) <= cfg.heldout:
        raise RalmError(
            f"{qstore.root}: only {len(scorable)} chunks have a salient span to mask; lower heldout "
            f"(now {cfg.heldout}) or use a larger corpus"
        )
    rng = np.random.default_rng([cfg.seed, 7])
    held = np.sort(rng.choice(scorable, size=cfg.heldout, replace=False)) if cfg.heldout else scorable[:0]
    train = np.setdiff1d(eligible_ids(qstore, cfg.masking, keep), held)
    if not len(train):
        raise RalmError(
            f"{qstore.root}: no chunk left to train on with strategy {cfg.masking.strategy!r} "
            f"after holding out {cfg.heldout}"
        )
    return train, held


ANSWER_STREAM = 13  # the seed stream of the answer queries' data order (the reader's is 11)


def answer_query_ids(train_ids: np.ndarray, cfg: PretrainConfig, step: int) -> np.ndarray:
    """Chunk ids of step `step`'s (1-based) `answer_queries`, shape (cfg.answer_queries,): a data
    order of their own (seeded apart from the reader's), read from the start, so over a run they
    cover the training chunks once before any repeats."""
    n = cfg.answer_queries
    return batch_positions(train_ids, cfg.seed, (step - 1) * n, n, stream=ANSWER_STREAM)


def batch_positions(train_ids: np.ndarray, seed: int, start: int, size: int, stream: int = 11) -> np.ndarray:
    """Chunk ids at global example positions start..start+size-1 (one seeded permutation per epoch
    of `stream`: 11 the reader's data order)."""
    n = len(train_ids)
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        pos = start + filled
        epoch, off = divmod(pos, n)
        order = np.random.default_rng([seed, stream, epoch]).permutation(n)
        take = min(size - filled, n - off)
        out[filled : filled + take] = train_ids[order[off : off + take]]
        filled += take
    return out


def micro_batch_ids(train_ids: np.ndarray, cfg: PretrainConfig, step: int, micro: int) -> np.ndarray:
    """Chunk ids of micro-batch `micro` of optimiser step `step` (1-based), shape (cfg.batch_size,):
    the data order read from position `cfg.data_offset`, `batch_size * grad_accum` examples a step."""
    start = cfg.data_offset + (step - 1) * cfg.batch_size * cfg.grad_accum + micro * cfg.batch_size
    return batch_positions(train_ids, cfg.seed, start, cfg.batch_size)


def example_rngs(seed: int, step: int, micro: int, positions: range) -> list[np.random.Generator]:
    """One generator per example, keyed by (seed, step, micro-batch, position in the global micro-batch)."""
    return [np.random.default_rng([seed, step, micro, j]) for j in positions]
