"""Reader-free training records for the query tower: which candidates hold the masked span.

REALM's salient-span masking hides a named entity or date; a retrieved chunk that holds the same
string is the one the reader can copy it from (`realm_learns.py explain`: holding the span is what the
frozen SmolLM2 reader rewards most, +1.7 nats a span against +0.2). Scoring candidates with the
reader costs seconds a query on a CPU; checking whether a candidate holds the span costs a string
search. `answer_records` builds, for any chunk ids, records of the same form as
`ralm.realm.diagnose.diagnose`'s (the top `depth` dense candidates of the masked query, source chunk
excluded, and the null document), with each candidate's target log-likelihood `nats` if the span
occurs in it (case-folded, as the diagnosis's `has_answer`) and 0 if not, the null document's 0.
`ralm.realm.cached_distill.distill_query_tower` learns from them like from the reader's scores: the
target softmax(lp / tau) puts the mass on the chunks that hold the span. This is distant supervision
(as DPR's, with the masked span as the answer) applied to REALM's own masked queries: it needs no
labelled questions and no reader pass, so every training chunk can be a query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.realm.diagnose import span_in_chunk
from ralm.realm.evaluate import heldout_batches
from ralm.realm.run import LoadedRun

__all__ = ["ANSWER_NATS", "answer_records"]

ANSWER_NATS = 5.0


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
    layout, the dense source only), `lp_content` = `lp_all`
    (`nats` for a chunk that holds the span, 0 otherwise and for the null). `skip_uniform` leaves out
    the spans whose `depth` chunks all hold the span or all miss it: their target ranks nothing."""
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
        cands = np.asarray(run.refresher.search(qn, src, depth), dtype=np.int64)
        spans = model.reader.span_texts(batch)
        for b in range(len(src)):
            span = spans[b][0] if spans[b] else ""
            docs = cands[b].tolist()
            holds = [span_in_chunk(model.reader, c, span) for c in docs]
            if skip_uniform and len(set(holds)) < 2:
                continue
            lp = [nats * float(h) for h in holds] + ([0.0] if has_null else [])
            out.append(
                {
                    "chunk": int(src[b]),
                    "span": span,
                    "candidates": {"dense": docs},
                    "has_answer": {"dense": holds},
                    "reader_docs": docs + ([-1] if has_null else []),
                    "lp_content": lp,
                    "lp_all": list(lp),
                }
            )
    return out
