"""The passages retrieved for each question, kept as a portable file.

`retrieve(questions, retriever, k)` runs one batched search through `ralm.Retriever` (dense, BM25
with language analysis, hybrid) and returns, per question, its top-k `Hit`s (`ralm.retrieval.base`) with their ids,
scores and texts (fewer where BM25 matches fewer chunks). `write_retrieved`/`read_retrieved` keep them as JSONL, one line per
question (`{"id", "question", "passages": [{"id", "score", "title", "text"}]}`), so retrieval can
run once, on the machine that holds the index, and generation elsewhere (`--retrieved FILE`).

`rerank_by_lm(lm, questions, passages, k)`: zero-shot reranking by the LM's likelihood of the
question given each passage (UPR, Sachan et al. 2022): mean log p(question tokens | "Passage:
<text>\\nQuestion:"); the top k by that score are kept, in that order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from ralm.atomic import atomic_path
from ralm.errors import RalmError
from ralm.retrieval.base import Hit

__all__ = ["read_retrieved", "rerank_by_lm", "retrieve", "write_retrieved"]


def retrieve(questions, retriever, k: int) -> list[list[Hit]]:
    """Top-k passages of each question (fewer when the retriever finds fewer), one batched search.

    retriever: a `ralm.Retriever` (`Retriever.load(index, kind)` or `Retriever.open(...)`)."""
    if not questions:
        return []
    hits = retriever.search([q.question for q in questions], k, matched_only=True)
    return [[replace(h, title=h.title or "") for h in row] for row in hits]


def write_retrieved(path: str | os.PathLike, questions, passages: Sequence[Sequence[Hit]]) -> Path:
    """Write the retrieval file atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as f:
        for q, ps in zip(questions, passages, strict=True):
            f.write(
                json.dumps(
                    {"id": q.id, "question": q.question, "passages": [_record(p) for p in ps]},
                    ensure_ascii=False,
                )
                + "\n"
            )
    return path


def _record(p: Hit) -> dict:
    """A passage as a retrieval file stores it (its rank is its place in the list)."""
    return {"id": p.id, "score": p.score, "title": p.title, "text": p.text}


def read_retrieved(path: str | os.PathLike, questions) -> list[list[Hit]]:
    """Passages per question from a retrieval file; RalmError naming a question the file lacks."""
    path = Path(path)
    if not path.is_file():
        raise RalmError(f"{path}: no such retrieval file; write one with `ralm rag retrieve`")
    by_id: dict[str, list[Hit]] = {}
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                by_id[str(rec["id"])] = [
                    Hit(int(p["id"]), float(p["score"]), str(p.get("title") or ""), str(p["text"]), rank)
                    for rank, p in enumerate(rec["passages"], start=1)
                ]
            except (ValueError, KeyError, TypeError) as exc:
                raise RalmError(f"{path}:{n}: not a retrieval line ({type(exc).__name__}: {exc})") from None
    missing = [q.id for q in questions if q.id not in by_id]
    if missing:
        raise RalmError(
            f"{path}: has no passages for question {missing[0]!r} ({len(missing)} missing); "
            "retrieve for this question file with `ralm rag retrieve`"
        )
    return [by_id[q.id] for q in questions]


def rerank_by_lm(lm, questions, passages: Sequence[Sequence[Hit]], k: int, batch_tokens: int = 16384):
    """Each question's passages reordered by mean log p(question | passage) under `lm`, top k kept."""
    from ralm.frozen.lm import ScoreJob
    from ralm.rag.prompt import passage_text

    jobs, where = [], []
    for qi, (q, ps) in enumerate(zip(questions, passages, strict=True)):
        target = lm.encode([" " + q.question.strip()])[0]
        if not target:
            continue
        for pi, p in enumerate(ps):
            head = lm.encode([f"Passage: {passage_text(p.title, p.text)}\nQuestion:"])[0][-1536:]
            ids = np.asarray(head + target, dtype=np.int64)
            pos = np.arange(len(head) - 1, len(ids) - 1)
            jobs.append(ScoreJob(ids, pos, ids[pos + 1]))
            where.append((qi, pi))
    scores = lm.score(jobs, batch_tokens=batch_tokens)
    best: list[dict[int, float]] = [{} for _ in passages]
    for (qi, pi), s in zip(where, scores, strict=True):
        best[qi][pi] = float(np.mean(s))
    out = []
    for qi, ps in enumerate(passages):
        order = sorted(range(len(ps)), key=lambda i: (-best[qi].get(i, -np.inf), i))[:k]
        out.append(
            [replace(ps[i], score=best[qi].get(i, ps[i].score), rank=r) for r, i in enumerate(order, start=1)]
        )
    return out
