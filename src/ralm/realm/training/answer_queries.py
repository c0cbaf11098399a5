"""Reader-free training records for the query tower: which candidates hold the masked span.

REALM's salient-span masking hides a named entity or date; a retrieved chunk that holds the same
string is the one the reader can copy it from (`realm_learns.py explain`: holding the span is what the
frozen SmolLM2 reader rewards most, +1.7 nats a span against +0.2). Scoring candidates with the
reader costs seconds a query on a CPU; checking whether a candidate holds the span costs a string
search. `answer_records` builds, for any chunk ids, records of the same form as
`ralm.realm.inference.diagnose.diagnose`'s (the top `depth` dense candidates of the masked query, source chunk
excluded, and the null document), with each candidate's target log-likelihood `nats` if the span
occurs in it (case-folded, as the diagnosis's `has_answer`) and 0 if not, the null document's 0.
`ralm.realm.training.cached_distill.distill_query_tower` learns from them like from the reader's scores: the
target softmax(lp / tau) puts the mass on the chunks that hold the span. This is distant supervision
(as DPR's, with the masked span as the answer) applied to REALM's own masked queries: it needs no
labelled questions and no reader pass, so every training chunk can be a query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.models.precision import autocast_context
from ralm.realm.data import answer_query_ids, example_rngs
from ralm.realm.modeling.answer_target import ANSWER_NATS, answer_target
from ralm.realm.training.heldout import heldout_batches

if TYPE_CHECKING:
    from ralm.realm.config import PretrainConfig
    from ralm.realm.modeling.model import RealmModel
    from ralm.realm.training.run import LoadedRun

__all__ = ["answer_query_objective", "answer_records"]


@torch.inference_mode()
def answer_records(
    run: LoadedRun,
    ids: Sequence[int],
    *,
    depth: int = 8,
    nats: float = ANSWER_NATS,
    batch_size: int = 16,
    skip_uniform: bool = True,
) -> list[dict[str, Any]]:
    """Records of the masked queries of chunk `ids` (one seeded mask per chunk, as `diagnose` masks
    them) for `distill_query_tower`: `chunk`, `span`, `reader_docs` (the top `depth` dense chunks and
    -1, the null document, when the run has one), `candidates` and `has_answer` (the diagnosis's
    layout, the dense source only), `lp_content` = `lp_all` (`answer_target`'s: `nats` times the
    share of the query's spans a chunk holds, 0 for the null; one span a query as the held-out
    chunks are masked, so `nats` or 0). `skip_uniform` leaves out the spans whose `depth` chunks all
    hold the span or all miss it (the null document aside): their target ranks no chunk."""
    model = run.model
    if not model.retrieval or not model.causal:
        raise RalmError(f"{run.cfg.out}: answer records need a REALM run with a causal reader")
    if run.refresher is None:
        raise RalmError(f"{run.cfg.out}: no index to search the candidates in")
    if depth < 2:
        raise RalmError(f"depth={depth}: at least 2 candidates to rank")
    has_null = model.null_doc != "none"
    out: list[dict[str, Any]] = []
    for batch in heldout_batches(run, np.asarray(ids, dtype=np.int64), batch_size):
        batch = {k: v.to(run.device) for k, v in batch.items()}
        qn = model.embed_queries(batch).float().cpu().numpy()
        src = batch["source_ids"].cpu().numpy()
        cands = np.asarray(run.search(qn, src, depth), dtype=np.int64).tolist()
        rows = [[*docs, -1] if has_null else docs for docs in cands]
        target, _ = answer_target(model.reader, batch, rows, nats)
        spans = model.reader.span_texts(batch)
        for b, docs in enumerate(cands):
            lp = target[b].tolist()
            holds = [v > 0 for v in lp[:depth]]
            if skip_uniform and len(set(holds)) < 2:
                continue
            out.append(
                {
                    "chunk": int(src[b]),
                    "span": spans[b][0] if spans[b] else "",
                    "candidates": {"dense": docs},
                    "has_answer": {"dense": holds},
                    "reader_docs": rows[b],
                    "lp_content": lp,
                    "lp_all": list(lp),
                }
            )
    return out


def answer_query_objective(
    model: RealmModel,
    collator,
    train_ids: np.ndarray,
    cfg: PretrainConfig,
    step: int,
    search,
    dev: torch.device,
    ac: torch.dtype | None,
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """Step `step`'s `answer_queries` objective (`RealmModel.answer_query_loss`): `answer_weight`
    times their mean KL over the live queries, to back-propagate into the gradients of the step's
    reader batch (None when no query is live). Their masks draw from the generators of micro-batch
    `grad_accum` (one past the reader's). `collator`: the run's `CausalMaskingCollator`. Also
    returns the step's answer_kl (mean over the live queries) and answer_live (their share)."""
    ids = answer_query_ids(train_ids, cfg, step)
    batch = collator(ids, rngs=example_rngs(cfg.seed, step, cfg.grad_accum, range(len(ids))))
    batch = {k: v.to(dev) for k, v in batch.items()}
    with autocast_context(dev, ac):
        kl, live = model.answer_query_loss(batch, search, cfg.answer_negatives)
    n_live = int(live.sum())
    if n_live:
        loss = (kl * live.to(kl.dtype)).sum() / n_live
        return loss * cfg.answer_weight, {"answer_kl": float(loss.detach()), "answer_live": n_live / len(ids)}
    return None, {"answer_kl": 0.0, "answer_live": 0.0}
