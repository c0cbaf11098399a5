"""Dev evaluation of a dual encoder while it trains: recall@k, nDCG@10, MRR@10 and hubness.

The measures are `ralm eval-retrieval`'s: every passage of the dev set is embedded with the doc
tower (inputs as the index builds them), each question is searched exactly (inner product) and
a retrieved passage is relevant when it is one of the question's known positives or, when the
answers are known, holds one of them as whole normalised tokens (`has_answer`). recall@k is the
share of questions with a relevant passage in the top k; nDCG@10 and RR@10 come from
ir-measures over the judged top lists; hub@k is the share of top-k lists holding the most
retrieved passage (`ralm.retrieval.eval.measures.hubness`).

    metrics = evaluate_pairs(encoder, dev, ks=(1, 5, 20), lang="nb")
    # {"recall@1": 0.41, "recall@5": 0.70, "recall@20": 0.88, "nDCG@10": ..., "RR@10": ..., "hub@20": 0.02}
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ralm.answers import has_answer
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.eval.measures import hubness, rank_measures
from ralm.retrieval.training.data import PairSet


def embed_passages(
    encoder: DualEncoder,
    passages,
    ids: Sequence[int] | None = None,
    *,
    batch_size: int = 64,
    autocast: str = "auto",
    progress: bool = False,
) -> np.ndarray:
    """(len(ids), dim) float32 doc vectors of passages `ids` (all by default), length-sorted batches."""
    ids = np.arange(len(passages)) if ids is None else np.asarray(ids, dtype=np.int64)
    rows = passages.doc_rows(encoder, ids)
    order = np.argsort([-len(r[0]) for r in rows], kind="stable")
    tpl, types = encoder.doc_tower.template, encoder.doc_tower.uses_token_types

    def batches():
        for s in range(0, len(rows), batch_size):
            part = order[s : s + batch_size]
            yield part, tpl.collate([rows[i] for i in part], types)

    return encoder._encode(encoder.doc_tower, batches(), len(rows), None, autocast, progress)


def search_exact(q: np.ndarray, d: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (ids, scores) of each query row by inner product (ties: lower id first)."""
    import faiss

    index = faiss.IndexFlatIP(d.shape[1])
    index.add(np.ascontiguousarray(d, dtype=np.float32))
    scores, ids = index.search(np.ascontiguousarray(q, dtype=np.float32), min(k, len(d)))
    return ids.astype(np.int64), scores


def judge(pairs: PairSet, ids: np.ndarray, lang: str) -> np.ndarray:
    """(Q, K) bool: passage ids[q, j] is a positive of question q or holds one of its answers."""
    hits = np.zeros(ids.shape, dtype=bool)
    texts: dict[int, str] = {}
    for q, (ex, row) in enumerate(zip(pairs.examples, ids, strict=True)):
        pos = set(ex.positives)
        for j, cid in enumerate(row.tolist()):
            if cid < 0:
                continue
            if cid in pos:
                hits[q, j] = True
            elif ex.answers:
                if cid not in texts:
                    texts[cid] = pairs.passages.text(cid)
                hits[q, j] = has_answer(texts[cid], ex.answers, lang)
    return hits


def evaluate_pairs(
    encoder: DualEncoder,
    pairs: PairSet,
    *,
    ks: Sequence[int] = (1, 5, 20),
    lang: str = "en",
    measures: Sequence[str] = ("nDCG@10", "RR@10"),
    autocast: str = "auto",
    batch_size: int = 64,
    progress: bool = False,
) -> dict[str, float]:
    """recall@k, ir-measures and hub@max(k) of `encoder` on the questions of `pairs` over its passages."""
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.inference_mode():
            d = embed_passages(
                encoder, pairs.passages, autocast=autocast, batch_size=batch_size, progress=progress
            )
            q = encoder.encode_queries([e.query for e in pairs.examples], autocast=autocast)
    finally:
        encoder.train(was_training)
    kmax = max(max(ks), 10)
    ids, _ = search_exact(q, d, kmax)
    hits = judge(pairs, ids, lang)
    out = {f"recall@{k}": float(hits[:, :k].any(axis=1).mean()) for k in ks}
    if measures:
        qrels: dict[int, dict[int, int]] = {}
        for qi, (row, hit) in enumerate(zip(ids, hits, strict=True)):
            judged = {int(c): 1 for c, h in zip(row, hit, strict=True) if h}
            judged.update({int(c): 1 for c in pairs.examples[qi].positives})
            qrels[qi] = judged
        out.update(rank_measures(ids, qrels, list(measures)))
    out[f"hub@{max(ks)}"] = float(hubness(ids, max(ks))["hub_share"])
    return out


def heldout_recall(
    encoder: DualEncoder,
    q_rows: list,
    ids: np.ndarray,
    passages,
    *,
    ks: Sequence[int] = (1, 5, 20),
    autocast: str = "auto",
) -> dict[str, float]:
    """recall@k of each held-out chunk `ids[i]` for its own query row `q_rows[i]` (built by the query
    tower's template) among all the held-out chunks: {"heldout_recall@k": ...}."""
    was = encoder.training
    encoder.eval()
    try:
        with torch.inference_mode():
            d = embed_passages(encoder, passages, ids, autocast=autocast)
            tpl, types = encoder.query_tower.template, encoder.query_tower.uses_token_types

            def batches():
                for s in range(0, len(q_rows), 64):
                    yield np.arange(s, min(len(q_rows), s + 64)), tpl.collate(q_rows[s : s + 64], types)

            q = encoder._encode(encoder.query_tower, batches(), len(q_rows), None, autocast, False)
    finally:
        encoder.train(was)
    top, _ = search_exact(q, d, max(ks))
    own = top == np.arange(len(ids))[:, None]  # the right chunk of query i is held-out chunk i
    return {f"heldout_recall@{k}": float(own[:, :k].any(axis=1).mean()) for k in ks}
