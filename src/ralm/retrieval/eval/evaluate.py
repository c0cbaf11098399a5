"""Retrieval evaluation: recall@k over (question, answers) pairs.

A retrieved chunk is a hit when it holds one of the question's answers (ralm.answers: whole-token
match after SQuAD normalisation, or DPR's regex match for a question whose `regex` flag is set,
see `QAPair`). recall@k is the fraction of questions with at least one hit among the top k chunks.
Left out: title matching.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ralm.answers import (
    compile_answer,
    token_string,
)


class QAPair(NamedTuple):
    """A question, its answers, and whether those answers are regular expressions.

    Example: QAPair("when did apollo 11 land", ["19(6|7)\\d"], regex=True). Plain
    (question, answers) tuples are read as string answers wherever pairs are taken.
    """

    question: str
    answers: list[str]
    regex: bool = False


def qa_pair(pair: Sequence) -> QAPair:
    """A (question, answers) or (question, answers, regex) tuple as a QAPair."""
    return pair if isinstance(pair, QAPair) else QAPair(pair[0], list(pair[1]), *pair[2:3])


def hit_matrix(
    ids: np.ndarray,
    texts: dict[int, str],
    answers: Sequence[Sequence[str]],
    lang: str = "en",
    regex: Sequence[bool] | None = None,
) -> np.ndarray:
    """(Q, K) bool: hit[q, j] = chunk ids[q, j] contains an answer of question q.

    texts: chunk id -> chunk text for every id in `ids` (e.g. from DocStore.get_many).
    regex: per question, True when its answers are patterns (None: all strings).
    """
    tokens: dict[int, str] = {}
    nfd: dict[int, str] = {}
    out = np.zeros(ids.shape, dtype=bool)
    for q, row in enumerate(ids):
        if regex is not None and regex[q]:
            pats = [compile_answer(a) for a in answers[q]]
            for j, cid in enumerate(row):
                cid = int(cid)
                if cid >= 0:
                    hay = nfd.get(cid)
                    if hay is None:
                        hay = nfd[cid] = unicodedata.normalize("NFD", texts[cid])
                    out[q, j] = any(p.search(hay) is not None for p in pats)
            continue
        needles = [n for n in (token_string(a, lang) for a in answers[q]) if n.strip()]
        for j, cid in enumerate(row):
            cid = int(cid)
            if cid < 0:
                continue
            hay = tokens.get(cid)
            if hay is None:
                hay = tokens[cid] = token_string(texts[cid], lang)
            out[q, j] = any(n in hay for n in needles)
    return out


def answerable(pairs: Sequence[Sequence], texts: Sequence[str], lang: str = "en") -> list:
    """The pairs with an answer somewhere in `texts` (e.g. all chunks of a store).

    pairs: (question, answers) tuples, kept as (question, list(answers)), or QAPairs, kept as they are.
    """
    hays: list[str] | None = None
    nfds: list[str] | None = None
    keep = []
    for pair in pairs:
        p = qa_pair(pair)
        if p.regex:
            nfds = nfds if nfds is not None else [unicodedata.normalize("NFD", t) for t in texts]
            pats = [compile_answer(a) for a in p.answers]
            found = any(pat.search(h) is not None for h in nfds for pat in pats)
        else:
            hays = hays if hays is not None else [token_string(t, lang) for t in texts]
            needles = [n for n in (token_string(a, lang) for a in p.answers) if n.strip()]
            found = any(n in h for h in hays for n in needles)
        if found:
            keep.append(pair if isinstance(pair, QAPair) else (p.question, p.answers))
    return keep


def recall_at_k(hits: np.ndarray, ks: Sequence[int] = (1, 5, 10, 20)) -> dict[int, float]:
    """Fraction of rows of `hits` (Q, K) with a hit in the first k columns, for each k <= K.

    Example: hits [[0, 1], [0, 0]] -> {1: 0.0, 2: 0.5}.
    """
    hits = np.asarray(hits, dtype=bool)
    return {k: float(hits[:, :k].any(axis=1).mean()) if len(hits) else 0.0 for k in ks if k <= hits.shape[1]}
