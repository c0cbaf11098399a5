"""Hard negatives mined with BM25, as DPR trains its retriever: top-ranked passages without the answer.

For each training question, BM25 ranks the passages; a passage is a usable negative when it is
none of the question's positives and (when the answers are known) holds none of its answers as
whole normalised tokens (`ralm.retrieval.eval.evaluate.has_answer`, the rule `eval-retrieval` judges
hits by). The first `depth` such passages are kept, best first; a training step draws its hard
negatives from them. DPR used the single top one; drawing among the top few (Tevatron, RocketQA)
gives each epoch other negatives.

    mined = mine_negatives(pairs, bm25, depth=10, lang="nb")   # list of id lists, one per question

Left out: negatives mined with the dense retriever being trained (ANCE), which needs a
re-index during training (REALM's refresh does that for pre-training).
"""

from __future__ import annotations

from collections.abc import Sequence

from ralm.answers import has_answer
from ralm.retrieval.training.data import PairSet


def mine_negatives(
    pairs: PairSet,
    bm25,
    *,
    depth: int = 10,
    lang: str = "en",
    search_depth: int | None = None,
    batch: int = 256,
) -> list[list[int]]:
    """Up to `depth` BM25 hard negatives per question of `pairs`, best first (given negatives first).

    search_depth: BM25 results looked at per question (default 3 x depth + positives, at most the
    number of passages).
    """
    examples = pairs.examples
    n = len(pairs.passages)
    out: list[list[int]] = []
    for s in range(0, len(examples), batch):
        part = examples[s : s + batch]
        k = min(n, search_depth or (3 * depth + max(len(e.positives) for e in part)))
        top = bm25.search_text([e.query for e in part], k).ids
        for ex, row in zip(part, top, strict=True):
            out.append(_usable(ex.negatives, row, ex.positives, ex.answers, pairs, depth, lang))
    return out


def _usable(
    given: Sequence[int], ranked, positives, answers, pairs: PairSet, depth: int, lang: str
) -> list[int]:
    pos = set(positives)
    keep: list[int] = []
    for cid in list(given) + [int(c) for c in ranked]:
        if len(keep) == depth:
            break
        if cid < 0 or cid in pos or cid in keep:
            continue
        if answers and has_answer(pairs.passages.text(cid), answers, lang):
            continue
        keep.append(cid)
    return keep
