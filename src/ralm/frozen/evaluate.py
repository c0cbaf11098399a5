"""Perplexity of a frozen causal LM on a text: no retrieval, In-Context RALM, REPLUG.

All modes score the same tokens (1..N-1 of the text, each once) on the same block grid
(ralm.frozen.windows); they differ in what stands in front of a block's context:

* ``none``: nothing (HF's sliding-window perplexity, `max_length` and `stride`).
* ``in-context`` (Ram et al. 2023): every `stride` tokens the last `query_tokens` tokens are the
  query; the top-1 chunk is prepended (cut to `doc_tokens`, taking the place of the oldest
  context tokens so the input stays within `max_length`). With `rerank` M > 1 the top-M chunks
  are each tried and the one maximising log p(the `rerank_tokens` tokens before the block |
  chunk + the context before them) is kept (their LM-based reranking; the same forward pass
  scores the block, as in their code).
* ``replug`` (Shi et al. 2023): each of the top-k chunks is prepended in its own forward pass,
  and p(y) = sum_k softmax(scores / temperature)_k p(y | chunk_k + context).
* ``knnlm`` (Khandelwal et al. 2020): the passes of ``none``, and each position's context vector
  searched in a data store (ralm.frozen.datastore) of the same LM over a corpus:
  p(y) = knn_lambda p_kNN(y) + (1 - knn_lambda) p_LM(y). The text's articles are left out.

A block whose query is empty (the first one) or finds nothing is scored without a document.
Cost: one search call for all blocks, then forward passes packed into batches; with retrieval
N / stride passes (k for REPLUG, M for reranking) of at most `max_length` tokens, so time grows
linearly with the text. Consecutive blocks with the same document and context start share one
pass (without retrieval the whole first window is one pass).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ralm.errors import RalmError
from ralm.frozen.datastore import Datastore, KnnScores, knn_label_probs
from ralm.frozen.lm import FrozenLM, ScoreJob
from ralm.frozen.retrieve import DocTokens, ScoredChunk, query_text, search_blocks
from ralm.frozen.text import EvalText
from ralm.frozen.windows import Block, context_start, query_range, window_blocks
from ralm.lm.perplexity import Perplexities

MODES = ("none", "in-context", "replug", "knnlm")
DEFAULT_MAX_LENGTH = 1024

__all__ = ["MODES", "EvalConfig", "EvalResult", "Retrieval", "check_config", "evaluate"]


@dataclass
class EvalConfig:
    """Options of one evaluation (see the module docstring); max_length None = min(1024, LM's)."""

    mode: str = "none"
    stride: int = 4
    max_length: int | None = None
    query_tokens: int = 32
    doc_tokens: int = 256
    k: int = 4
    temperature: float = 1.0
    rerank: int = 1
    rerank_tokens: int = 16
    knn_k: int = 1024
    knn_lambda: float = 0.25
    knn_temperature: float = 1.0
    batch_tokens: int = 8192


@dataclass
class Retrieval:
    """What retrieval needs: a retriever over `docs.store`, the chunks excluded from every query."""

    retriever: object
    docs: DocTokens
    exclude_ids: np.ndarray | None = None
    description: str = ""


@dataclass
class EvalResult(Perplexities):
    """Summed NLL (nats) over `tokens` scored tokens and the text's `words`; timings in seconds.

    per_token: (N,) log p of every token given its context (NaN for token 0); block_docs: the
    chunk ids in front of each block (REPLUG: all k; empty: no document)."""

    config: EvalConfig
    nll: float
    tokens: int
    words: int
    blocks: int
    blocks_with_docs: int
    seconds: dict[str, float]
    per_token: np.ndarray = field(repr=False)
    block_docs: list[list[int]] = field(repr=False)
    block_list: list[Block] = field(repr=False)
    knn: KnnScores | None = field(default=None, repr=False)  # knnlm: tokens 1..N-1, any lambda

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds["total"] if self.seconds["total"] > 0 else math.inf

    def as_dict(self) -> dict:
        return {
            **{k: v for k, v in asdict(self.config).items() if k != "batch_tokens"},
            **self.perplexity_fields(),
            "blocks": self.blocks,
            "blocks_with_docs": self.blocks_with_docs,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
        }


def check_config(cfg: EvalConfig, lm: FrozenLM, n: int, retrieval: bool) -> int:
    """The max length to use for `n` text tokens; RalmError for options that cannot work together."""
    if cfg.mode not in MODES:
        raise RalmError(f"mode {cfg.mode!r}: choose one of {', '.join(MODES)}")
    limit = lm.max_positions
    max_len = cfg.max_length or min(DEFAULT_MAX_LENGTH, limit or DEFAULT_MAX_LENGTH)
    if limit is not None and max_len > limit:
        raise RalmError(f"--max-length {max_len}: the LM has {limit} positions")
    if not 1 <= cfg.stride <= max_len:
        raise RalmError(f"--stride {cfg.stride}: must be between 1 and the max length {max_len}")
    if n < 2:
        raise RalmError(f"the text has {n} token(s); at least 2 are needed to score one")
    if cfg.mode == "none":
        return max_len
    if cfg.mode == "knnlm":
        if not retrieval:
            raise RalmError("mode knnlm needs a data store: pass --datastore DIR (`ralm lm-datastore`)")
        if cfg.knn_k < 1 or not 0.0 <= cfg.knn_lambda <= 1.0 or not cfg.knn_temperature > 0:
            raise RalmError(
                f"--knn-k {cfg.knn_k} / --knn-lambda {cfg.knn_lambda} / --knn-temperature "
                f"{cfg.knn_temperature}: need k >= 1, 0 <= lambda <= 1, temperature > 0"
            )
        return max_len
    if not retrieval:
        raise RalmError(f"mode {cfg.mode} needs a retriever: pass --index INDEX or --corpus STORE")
    if n <= cfg.stride:
        raise RalmError(
            f"the text has {n} tokens, not more than one stride ({cfg.stride}): nothing would be "
            "retrieved for; lower --stride or evaluate a longer text"
        )
    if cfg.query_tokens < 1:
        raise RalmError(f"--query-tokens {cfg.query_tokens}: must be at least 1")
    need = cfg.stride + (cfg.rerank_tokens if cfg.rerank > 1 else 0)
    if cfg.doc_tokens > max_len - need:
        raise RalmError(
            f"--doc-tokens {cfg.doc_tokens} leaves no room: max length {max_len} must hold the document, "
            f"a block of {cfg.stride}"
            + (f" and {cfg.rerank_tokens} reranking tokens" if cfg.rerank > 1 else "")
        )
    if cfg.mode == "replug":
        if cfg.k < 1:
            raise RalmError(f"--k {cfg.k}: must be at least 1")
        if cfg.rerank > 1:
            raise RalmError("--rerank is for in-context; REPLUG ensembles its top-k instead")
        if not cfg.temperature > 0:
            raise RalmError(f"--temperature {cfg.temperature}: must be > 0")
    if cfg.rerank < 1 or (cfg.rerank > 1 and cfg.rerank_tokens < 1):
        raise RalmError(f"--rerank {cfg.rerank} / --rerank-tokens {cfg.rerank_tokens}: must be >= 1")
    return max_len


@dataclass
class _Spec:
    """One forward pass: input doc + text tokens c .. end-2; scores targets [first, end), then `extra`."""

    doc: np.ndarray
    doc_id: int
    c: int
    first: int
    end: int
    extra: tuple[int, int] = (0, 0)

    def job(self, ids: np.ndarray) -> ScoreJob:
        m = len(self.doc)
        tok = np.concatenate([np.arange(self.first, self.end), np.arange(*self.extra)]).astype(np.int64)
        return ScoreJob(
            input_ids=np.concatenate([self.doc, ids[self.c : self.end - 1]]),
            positions=m + tok - 1 - self.c,
            labels=ids[tok],
        )


def evaluate(
    lm: FrozenLM,
    text: EvalText,
    cfg: EvalConfig,
    retrieval: Retrieval | None = None,
    datastore: Datastore | None = None,
    exclude_articles: Sequence[int] = (),
) -> EvalResult:
    """Score every token 1..N-1 of `text` under `cfg` (see the module docstring); `datastore` and
    `exclude_articles` (its articles never searched) are for mode knnlm."""
    t_start = time.perf_counter()
    n = len(text)
    knn = cfg.mode == "knnlm"
    max_len = check_config(cfg, lm, n, (datastore if knn else retrieval) is not None)
    ids = np.asarray(text.ids, dtype=np.int64)
    if knn:
        assert datastore is not None
        datastore.check(lm)
        retrieval = None
    blocks = window_blocks(n, max_len, cfg.stride, split_first=cfg.mode not in ("none", "knnlm"))
    hits: list[list[ScoredChunk]] = [[] for _ in blocks]
    t_search = t_docs = 0.0
    if retrieval is not None and cfg.mode != "none":
        queries = [
            query_text(text.span(*query_range(b, cfg.query_tokens))) if b.start > 0 else None for b in blocks
        ]
        depth = cfg.k if cfg.mode == "replug" else cfg.rerank
        hits, t_search = search_blocks(retrieval.retriever, queries, depth, retrieval.exclude_ids)
        d0 = retrieval.docs.seconds
        retrieval.docs.fetch([h.id for row in hits for h in row])
        t_docs = retrieval.docs.seconds - d0
    empty = np.empty(0, dtype=np.int64)

    # one pass per (block, candidate); consecutive single-candidate blocks with the same document
    # and context start share one (that happens only while the context starts at token 0)
    specs: list[_Spec] = []
    owners: list[list[int]] = []  # per block and candidate: its pass; the block's offset in it
    offsets: list[int] = []
    mergeable = False
    for bi, b in enumerate(blocks):
        cands = hits[bi]
        if len(cands) <= 1:
            doc_id = cands[0].id if cands else -1
            doc = retrieval.docs[doc_id] if cands and retrieval is not None else empty
            c = context_start(b, max_len - len(doc))
            last = specs[-1] if specs else None
            if mergeable and last is not None and (last.doc_id, last.c, last.end) == (doc_id, c, b.first):
                owners.append([len(specs) - 1])
                offsets.append(b.first - last.first)
                last.end = b.end
            else:
                specs.append(_Spec(doc, doc_id, c, b.first, b.end))
                owners.append([len(specs) - 1])
                offsets.append(0)
            mergeable = True
            continue
        mergeable = False
        docs = [retrieval.docs[h.id] for h in cands]  # type: ignore[union-attr]
        starts = [context_start(b, max_len - len(d)) for d in docs]
        extra = (0, 0)
        if cfg.mode == "in-context":  # reranking tokens: those before the block, common to all candidates
            extra = (max(b.start - cfg.rerank_tokens, max(starts) + 1), b.start)
        owners.append([])
        offsets.append(0)
        for h, d, c in zip(cands, docs, starts, strict=True):
            specs.append(_Spec(d, h.id, c, b.first, b.end, extra))
            owners[-1].append(len(specs) - 1)

    t0 = time.perf_counter()
    if knn:
        scored, hidden = lm.score_hidden([sp.job(ids) for sp in specs], cfg.batch_tokens)
    else:
        scored = lm.score([sp.job(ids) for sp in specs], cfg.batch_tokens)
    t_lm = time.perf_counter() - t0
    knn_scores = None
    if knn:  # every pass scores consecutive tokens: concatenated, they are tokens 1..N-1 in order
        assert datastore is not None
        t1 = time.perf_counter()
        dist, vals = datastore.search(np.concatenate(hidden), cfg.knn_k, exclude_articles)
        t_search = time.perf_counter() - t1
        match = vals == ids[1:, None]
        p_knn = knn_label_probs(dist, match, cfg.knn_temperature)
        knn_scores = KnnScores(np.concatenate(scored), p_knn, cfg.knn_temperature, dist, match)
        mixed = knn_scores.logp(cfg.knn_lambda)
        at = 0
        for i in range(len(specs)):
            scored[i] = mixed[at : at + len(scored[i])]
            at += len(scored[i])

    per_token = np.full(n, np.nan)
    block_docs: list[list[int]] = []
    for bi, b in enumerate(blocks):
        nt, own = b.n_targets, owners[bi]
        if len(own) == 1:
            o = offsets[bi]
            per_token[b.first : b.end] = scored[own[0]][o : o + nt]
            block_docs.append([hits[bi][0].id] if hits[bi] else [])
            continue
        lps = np.stack([scored[j][:nt] for j in own])  # (K, targets)
        if cfg.mode == "replug":
            s = np.array([h.score for h in hits[bi]], dtype=np.float64) / cfg.temperature
            logw = s - np.logaddexp.reduce(s)
            per_token[b.first : b.end] = np.logaddexp.reduce(logw[:, None] + lps, axis=0)
            block_docs.append([h.id for h in hits[bi]])
        else:
            best = int(np.argmax([float(scored[j][nt:].sum()) for j in own]))
            per_token[b.first : b.end] = lps[best]
            block_docs.append([hits[bi][best].id])
    tokens = n - 1
    nll = -float(per_token[1:].sum())
    if not np.isfinite(nll):
        raise RuntimeError("a scored token got no log-probability")  # a bug, not a user error
    seconds = {"retrieval": t_search, "docs": t_docs, "lm": t_lm, "total": time.perf_counter() - t_start}
    return EvalResult(
        config=EvalConfig(**{**asdict(cfg), "max_length": max_len}),
        nll=nll,
        tokens=tokens,
        words=text.n_words,
        blocks=len(blocks),
        blocks_with_docs=sum(1 for d in block_docs if d),
        seconds=seconds,
        per_token=per_token,
        block_docs=block_docs,
        block_list=blocks,
        knn=knn_scores,
    )
