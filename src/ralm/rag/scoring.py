"""Scores of generated answers: EM, F1, regex match, "answer contained", and passages' answer recall.

Per question (`score_answer`), in [0, 1]:
  em        SQuAD exact match after ralm's answer normalisation (language-aware, `lang`), max
            over the gold answers; for regex answers DrQA's match at the start of the answer;
  f1        SQuAD token F1, max over the answers (absent for regex answers);
  contains  a gold answer, normalised, occurs in the normalised output as whole tokens (FlashRAG's
            "acc"); for regex answers, a pattern is found anywhere in it.
`recall_hits(passages, answers)`: per rank, whether the passage holds an answer (as
`ralm eval-retrieval` judges it). `aggregate` gives percentages over a question set.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ralm.answers import has_answer, normalize_answer, regex_em, regex_hit, squad_scores

__all__ = ["aggregate", "recall_hits", "score_answer"]


def score_answer(prediction: str, answers: Sequence[str], *, regex: bool = False, lang: str = "en") -> dict:
    """{"em", "contains"} (+ "f1" for string answers) of one prediction, each in [0, 1].

    Example: score_answer("It is Paris.", ["Paris"]) -> {"em": 0.0, "f1": 0.5, "contains": 1.0}.
    """
    if regex:
        return {"em": regex_em(prediction, answers), "contains": float(regex_hit(prediction, answers))}
    em, f1 = squad_scores(prediction, answers, lang)
    pred = f" {normalize_answer(prediction, lang)} "
    contains = any((g := normalize_answer(a, lang)) and f" {g} " in pred for a in answers)
    return {"em": em, "f1": f1, "contains": float(contains)}


def recall_hits(
    texts: Sequence[str], answers: Sequence[str], *, regex: bool = False, lang: str = "en"
) -> list[bool]:
    """Per passage (in rank order): whether it holds one of the answers."""
    return [has_answer(t, answers, lang, regex) for t in texts]


def aggregate(
    scores: Sequence[dict], hits: Sequence[Sequence[bool]] | None = None, ks=(1, 3, 5, 10, 20)
) -> dict:
    """Percentages over questions: em, f1 (string-answer questions), contains, and recall@k of the
    passages for each k no larger than the passages given (`hits` per question, None = none)."""
    out: dict[str, float] = {"questions": float(len(scores))}
    if not scores:
        return out
    for m in ("em", "f1", "contains"):
        vals = [s[m] for s in scores if m in s]
        if vals:
            out[m] = 100.0 * float(np.mean(vals))
    if hits:
        depth = min(len(h) for h in hits)
        for k in ks:
            if k <= depth:
                out[f"recall@{k}"] = 100.0 * float(np.mean([any(h[:k]) for h in hits]))
    return out
