"""Inverse Cloze Task (Lee et al. 2019): the retriever warm start used by REALM and BRENT.

A pseudo-query is one random sentence of a chunk; its pseudo-document is the chunk (with its
title) with that sentence removed 90% of the time, so the retriever learns both lexical
matching and context beyond it. `ict_pair` makes one such pair; `ict_loss` is the in-batch
softmax loss over (query, title, document) examples. Training runs through the one retriever
training loop (`ralm retriever train ict`, i.e. contrastive views with the ICT recipe in
`ralm.retrieval.training.views`); `ralm ict` is an alias of that command.

Left out: ICT on article introductions only (BRENT used 68k intros; pass a DocStore of intros
for that).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ralm.corpus.sentences import split_sentences
from ralm.models.precision import autocast_context
from ralm.retrieval.encoders import DualEncoder

__all__ = ["ict_loss", "ict_pair"]


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
