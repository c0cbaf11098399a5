"""Reference pieces of the frozen-LM tests: the corpus texts, stub retrievers, naive loops."""

from __future__ import annotations

import numpy as np
import torch

from ralm.retrieval.base import SearchResult

ARTICLES = [
    (
        "Oslo",
        "Oslo is the capital of Norway . The city lies at the end of the fjord and many ships sail "
        "into the harbour every day while the old fortress watches over the water .",
    ),
    (
        "Bergen",
        "Bergen is a city on the west coast of Norway . It rains a lot in Bergen and the fish "
        "market by the harbour sells salmon and crab to visitors from many countries .",
    ),
    (
        "Albedo",
        "Albedo is the fraction of sunlight that a surface reflects . Snow has a high albedo and "
        "dark forests have a low albedo so they warm faster in the summer sun .",
    ),
    (
        "Lincoln",
        "Abraham Lincoln was the president of the United States during the civil war . He was "
        "born in a small cabin in Kentucky and later worked as a lawyer in Illinois .",
    ),
    (
        "Aristotle",
        "Aristotle was a Greek philosopher and a student of Plato . He wrote about logic and "
        "biology and physics and he taught the young Alexander in Macedonia .",
    ),
    (
        "River",
        "The river starts high in the mountains where snow melts in spring . It runs through deep "
        "valleys and green farms and past the old mill where the miller grinds wheat into flour . "
        "Near the coast the river grows wide and slow and boats carry timber and grain down to the "
        "harbour where the ships wait for the tide . In winter the river freezes and children skate "
        "on the ice while the farmers cut holes to catch fish for their families .",
    ),
]
EVAL_ARTICLE = "River"
GRID_WORDS = [f"w{i}" for i in range(64)]  # "w0 w1 ... w63": one token each under the word vocabulary


def eval_text() -> str:
    return dict(ARTICLES)[EVAL_ARTICLE]


class StubStore:
    """Stands in for a DocStore: get_many over fixed (title, text) documents."""

    def __init__(self, docs: list[tuple[str, str]]) -> None:
        self.docs = docs

    def get_many(self, ids):
        return [{"title": self.docs[i][0], "text": self.docs[i][1]} for i in ids]


class StubRetriever:
    """Answers query q (0-based, in call order) with `table(q)` = (ids, scores); records the queries."""

    def __init__(self, table) -> None:
        self.table = table
        self.queries: list[str] = []

    def search_text(self, queries, k, exclude_ids=None):
        rows = [self.table(len(self.queries) + i) for i in range(len(queries))]
        self.queries.extend(queries)
        ids = np.array([list(r[0])[:k] for r in rows], dtype=np.int64)
        scores = np.array([list(r[1])[:k] for r in rows], dtype=np.float32)
        return SearchResult(ids=ids, scores=scores)


def grid(n: int, max_length: int, stride: int, split_first: bool) -> list[tuple[int, int]]:
    """(start, end) of each block, written out from HF's loop (reference for ralm.frozen.windows)."""
    out, prev_end = [], 0
    for begin in range(0, n, stride):
        end = min(begin + max_length, n)
        if prev_end == 0 and split_first:
            g = 0
            while g < end:
                out.append((g, min(g + stride, end)))
                g += stride
        else:
            out.append((prev_end, end))
        prev_end = end
        if end == n:
            break
    return [(s, e) for s, e in out if e > max(s, 1)]


@torch.inference_mode()
def naive_logprobs(model, ids, max_length, stride, doc_for_block=None, split_first=False) -> np.ndarray:
    """log p(token t) for t = 1..N-1, one model call per block, full logits, no batching: block
    (start, end) is scored from doc + tokens max(0, end - 1 - (max_length - len(doc))) .. end - 2."""
    n = len(ids)
    lp = np.full(n, np.nan)
    for start, end in grid(n, max_length, stride, split_first):
        doc = list(doc_for_block(start)) if doc_for_block else []
        c = max(0, end - 1 - (max_length - len(doc)))
        x = torch.tensor([doc + list(ids[c : end - 1])])
        assert x.shape[1] <= max_length
        logp = torch.log_softmax(model(x).logits[0].double(), -1)
        for t in range(max(start, 1), end):
            assert np.isnan(lp[t]), f"token {t} scored twice"
            lp[t] = float(logp[len(doc) + t - 1 - c, ids[t]])
    return lp
