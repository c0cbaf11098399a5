"""Questions for RAG QA, read from the open-QA formats ralm knows, with the gold passage where one exists.

`read_questions(path)` reads NQ-open JSONL, DPR TSV, WebQuestions JSON and SQuAD v1.1 (through
`ralm.tasks.datasets.read_file`); answers are strings or regular expressions (`answers=`).
SQuAD files also give each question its context: with a DocStore built from those contexts
(`gold_chunks`), the oracle passage is the chunk of the context that holds the answer, as
retriever training picks positives; without one it is the context itself.

A file in which no question has an answer is refused (RAG QA scores against gold answers);
questions without answers in a file that has others are dropped with a note.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from ralm.errors import RalmError

__all__ = ["RagQuestion", "gold_chunks", "read_questions", "split_questions"]


@dataclass
class RagQuestion:
    """One question: `answers` gold strings (or patterns when `regex`), `gold` its gold passage text or None."""

    id: str
    question: str
    answers: list[str]
    regex: bool = False
    gold: str | None = None
    context: str | None = None
    answer_starts: list[int] | None = None


def read_questions(
    path: str | os.PathLike, *, answers: str = "auto", notes: list[str] | None = None
) -> list[RagQuestion]:
    """Questions of one file, in file order. RalmError (one line) for a file without any answers."""
    from ralm.formats.detect import detect_format
    from ralm.formats.read import read_file

    path = Path(path)
    if not path.is_file():
        raise RalmError(f"{path}: no such question file")
    fmt = detect_format(path, "open-qa")
    examples, _ = read_file(path, "open-qa", fmt, notes=notes, answers=answers)
    contexts: dict[str, tuple[str, list[int]]] = {}
    if fmt == "squad":
        qa, _ = read_file(path, "extractive-qa", "squad")
        contexts = {ex.id: (ex.context, list(ex.answer_starts)) for ex in qa}
    out = []
    for ex in examples:
        ctx, starts = contexts.get(ex.id, (None, None))
        out.append(RagQuestion(ex.id, ex.question, list(ex.answers), bool(ex.regex), ctx, ctx, starts))
    kept = [q for q in out if q.answers]
    if not kept:
        raise RalmError(
            f"{path}: no question has an answer; RAG QA scores against gold answers "
            '(NQ-open JSONL {"question", "answer": [...]}, DPR TSV, WebQuestions or SQuAD v1.1)'
        )
    if len(kept) < len(out) and notes is not None:
        notes.append(f"{path}: {len(out) - len(kept)} questions without answers dropped")
    return kept


def gold_chunks(questions: list[RagQuestion], store, lang: str = "en") -> int:
    """Replace each SQuAD question's `gold` (its context) by the DocStore chunk that holds its answer.

    Returns how many questions got a chunk; the others keep their context as the gold passage.
    `store` is a DocStore built from the contexts (one article per context).
    """
    from ralm.answers import has_answer
    from ralm.retrieval.passages import ContextLocator

    where = ContextLocator(store)
    found = 0
    for q in questions:
        if q.context is None or not q.answer_starts:
            continue
        art = where.article(q.context)
        if art is None:
            continue
        for a, s in zip(q.answers, q.answer_starts, strict=False):
            first = where.chunk_at(art, q.context, s)
            hit = None
            for cid in (first, first + 1):
                if cid < len(store) and has_answer(store.get(cid)["text"], [a], lang):
                    hit = cid
                    break
            if hit is not None:
                row = store.get(hit)
                q.gold = f"{row['title']}\n{row['text']}" if row.get("title") else row["text"]
                found += 1
                break
    return found


def split_questions(questions: list[RagQuestion], train_fraction: float, seed: int) -> tuple[list, list]:
    """(train, test) by a seeded shuffle: for question sets that come without a train split."""
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    n = int(round(train_fraction * len(order)))
    return [questions[i] for i in sorted(order[:n])], [questions[i] for i in sorted(order[n:])]
