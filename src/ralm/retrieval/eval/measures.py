"""Rank metrics, hubness and TREC/BEIR files for retrieval runs judged by answer matching.

Open-domain QA sets give answers, not relevance labels. A chunk is judged relevant to a
question when it contains one of its answers (`ralm.retrieval.eval.evaluate.hit_matrix`, the
ORQA/REALM weak supervision), and judgments are *pooled* as in TREC: only the chunks some
evaluated retriever put in its top k are judged, the rest count as not relevant. So nDCG and
MRR compare retrievers evaluated together; recall-over-all-relevant is left out, because the
pool does not hold every relevant chunk of the store.

The measures come from ir-measures (pytrec_eval, i.e. trec_eval, underneath), named as that
library names them: "nDCG@10", "RR@10", "Success@5" ... Success@k is answer recall@k. Every
question counts: one with no relevant chunk in the pool scores 0 (trec_eval would drop it).
Runs are passed to trec_eval with scores that follow our rank order, so ties are broken as
ralm breaks them (lower chunk id first), not by trec_eval's document-name order.

Hubness (Radovanovic et al. 2010) of top-k lists over Q questions, with N_k(c) the number of
questions whose top k holds chunk c:
- hub_share@k = max_c N_k(c) / Q: how often the most retrieved chunk appears (1.0: in every list);
- top1_share = the same for rank 1 alone ("one chunk first for 11 of 15 questions" = 0.73);
- distinct@k = distinct chunks / (Q k): 1.0 when no chunk repeats.
Example: ids [[4, 5], [4, 6]] -> hub_share@2 1.0, top1_share 1.0, distinct@2 0.75.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ralm.atomic import write_text_atomic
from ralm.errors import RalmError

DEFAULT_MEASURES = ("nDCG@10", "RR@10")


def hubness(ids: np.ndarray, k: int | None = None) -> dict[str, float | int]:
    """Hubness of (Q, K) top-k chunk ids (-1 = padding), over the first k columns (all by default).

    Returns hub_share, top1_share, distinct (see the module docstring), hub_id (the most
    retrieved chunk; lowest id on ties) and hub_count (its N_k).
    """
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 2 or ids.shape[0] == 0:
        raise RalmError(f"hubness needs a (questions, k) id matrix, got shape {ids.shape}")
    k = ids.shape[1] if k is None else k
    top = ids[:, :k]
    q = len(top)
    # N_k(c): questions whose list holds c (a chunk counted once per list)
    per_list = [np.unique(row[row >= 0]) for row in top]
    flat = np.concatenate(per_list) if per_list else np.empty(0, np.int64)
    if len(flat) == 0:
        return {"hub_share": 0.0, "top1_share": 0.0, "distinct": 0.0, "hub_id": -1, "hub_count": 0}
    uniq, counts = np.unique(flat, return_counts=True)
    best = int(np.argmax(counts))  # np.unique sorts ids, argmax takes the first: lowest id on ties
    first = top[:, 0][top[:, 0] >= 0]
    _, c1 = np.unique(first, return_counts=True)
    return {
        "hub_share": float(counts[best] / q),
        "top1_share": float(c1.max() / q) if len(c1) else 0.0,
        "distinct": float(len(uniq) / int((top >= 0).sum())),
        "hub_id": int(uniq[best]),
        "hub_count": int(counts[best]),
    }


def pooled_qrels(runs: Mapping[str, np.ndarray], hits: Mapping[str, np.ndarray]) -> dict[int, dict[int, int]]:
    """question index -> {chunk id: 1 or 0} over every chunk some run retrieved for it.

    runs: name -> (Q, K) ids; hits: name -> (Q, K) bool (that chunk contains an answer).
    """
    qrels: dict[int, dict[int, int]] = {}
    for name, ids in runs.items():
        h = hits[name]
        for qi, (row, hrow) in enumerate(zip(ids, h, strict=True)):
            judged = qrels.setdefault(qi, {})
            for cid, rel in zip(row.tolist(), hrow.tolist(), strict=True):
                if cid >= 0:
                    judged[cid] = max(judged.get(cid, 0), int(rel))
    return qrels


def rank_measures(
    ids: np.ndarray, qrels: Mapping[int, Mapping[int, int]], measures: Sequence[str] = DEFAULT_MEASURES
) -> dict[str, float]:
    """Mean of each ir-measures measure over all Q questions of a (Q, K) ranking (best first).

    A question with no relevant judged chunk scores 0 on every measure.
    """
    import ir_measures

    try:
        parsed = [ir_measures.parse_measure(m) for m in measures]
    except (ValueError, NameError, SyntaxError) as exc:
        raise RalmError(
            f"measures {list(measures)}: {exc}; use ir-measures names such as nDCG@10, RR@10"
        ) from None
    ids = np.asarray(ids, dtype=np.int64)
    q, kk = ids.shape
    qrel_rows = [
        ir_measures.Qrel(str(qi), str(cid), int(rel))
        for qi, judged in qrels.items()
        for cid, rel in judged.items()
    ]
    run_rows = [
        ir_measures.ScoredDoc(str(qi), str(int(cid)), float(kk - r))  # scores in our rank order
        for qi in range(q)
        for r, cid in enumerate(ids[qi])
        if cid >= 0
    ]
    totals = {str(m): 0.0 for m in parsed}
    for metric in ir_measures.iter_calc(parsed, qrel_rows, run_rows):
        totals[str(metric.measure)] += float(metric.value)
    return {name: v / q if q else 0.0 for name, v in totals.items()}


def write_trec_run(
    path: str | os.PathLike, ids: np.ndarray, scores: np.ndarray, tag: str, qids: Sequence[str]
) -> Path:
    """A TREC run file: `qid Q0 docid rank score tag` per line, best first (written atomically)."""
    lines = [
        f"{qids[qi]} Q0 {int(cid)} {r} {float(s):.6g} {tag}"
        for qi in range(len(ids))
        for r, (cid, s) in enumerate(zip(ids[qi], scores[qi], strict=True), start=1)
        if cid >= 0
    ]
    return _write_lines(Path(path), lines)


def write_qrels(
    path: str | os.PathLike, qrels: Mapping[int, Mapping[int, int]], qids: Sequence[str], beir: bool = False
) -> Path:
    """Judgments as TREC qrels (`qid 0 docid rel`) or BEIR's TSV (`query-id corpus-id score`, header)."""
    rows = [(qids[qi], cid, rel) for qi in sorted(qrels) for cid, rel in sorted(qrels[qi].items())]
    if beir:
        lines = ["query-id\tcorpus-id\tscore", *(f"{q}\t{c}\t{r}" for q, c, r in rows)]
    else:
        lines = [f"{q} 0 {c} {r}" for q, c, r in rows]
    return _write_lines(Path(path), lines)


def _write_lines(path: Path, lines: list[str]) -> Path:
    write_text_atomic(path, "".join(line + "\n" for line in lines))
    return path
