"""The target of REALM's answer objective, a pure function of a batch and its candidates: which
candidate chunks hold the masked spans (distant supervision, as DPR's with the masked span as the
answer). `RealmModel.answer_query_loss` trains the query tower towards it; the reader-free records
of `ralm.realm.training.answer_queries` and the diagnosis's `has_answer` read it too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ralm.errors import RalmError
from ralm.realm.masking.causal import SPAN_KINDS
from ralm.realm.options import ANSWER_SPANS

__all__ = ["ANSWER_NATS", "answer_target", "span_in_chunk"]

ANSWER_NATS = 5.0


def span_in_chunk(reader, cid: int, span: str) -> bool:
    """Whether chunk `cid` (a real chunk, not the null document -1) holds `span`, case-folded: a
    diagnosis record's `has_answer`."""
    return cid >= 0 and bool(span) and span.casefold() in reader.doc_text(cid).casefold()


def answer_target(
    reader,
    batch: Mapping[str, torch.Tensor],
    rows: Sequence[Sequence[int]],
    nats: float = ANSWER_NATS,
    spans: str = "all",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target of `retriever_loss = "answer"` for a batch of masked queries and their rows of
    chunk ids (B, K; -1 the null document): (B, K) `nats` times the share of the query's masked spans
    (the causal reader's `span_texts`) each chunk holds, 0 for the null document, and (B,) whether
    the row ranks anything (its values are not all equal: with the null document in the row, some
    chunk holds a span).

    Example: spans ["Oslo"] and ["1040", "Harald"], rows [[a, b, -1], [c, d, -1]] where only a holds
    "Oslo" and c holds "Harald" -> [[5, 0, 0], [2.5, 0, 0]], live [True, True].

    `spans = "salient"` counts only the salient spans (`batch["lm_span_kind"]` not "random"): a
    randomly masked word ("the", "first") is in most chunks, so it ranks nothing and dilutes the
    share; a query with no salient span ranks nothing."""
    if spans not in ANSWER_SPANS:
        raise RalmError(f"answer_spans {spans!r}: choose one of {', '.join(ANSWER_SPANS)}")
    texts_of = reader.span_texts(batch)
    if spans == "salient":
        kinds = batch["lm_span_kind"].cpu().tolist()
        rand = SPAN_KINDS.index("random")
        texts_of = [[t for j, t in enumerate(row) if kinds[b][j] != rand] for b, row in enumerate(texts_of)]
    t = torch.zeros(len(rows), len(rows[0]))
    for b, row in enumerate(rows):
        texts = [s for s in texts_of[b] if s]
        if not texts:
            continue
        for j, cid in enumerate(row):
            held = sum(span_in_chunk(reader, int(cid), s) for s in texts)
            t[b, j] = nats * held / len(texts)
    return t, t.amax(1) > t.amin(1)
