"""Compare retrievers on one question set: what `ralm eval-retrieval` computes and prints.

For each retriever, on the same (question, answers) pairs: answer recall@k, ir-measures rank
metrics over pooled answer judgments, and hubness of its top-k lists (see
`ralm.retrieval.measures`). The raw rankings are kept so they can be written as TREC runs.

Question sets: "trivia" (the bundled trivia pairs, filtered to those whose answer occurs in
the store), "triviaqa" (the TriviaQA sample), or a JSONL file of {"question", "answers"}.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ralm.errors import RalmError, check_json_text
from ralm.retrieval.base import Retriever, SearchResult
from ralm.retrieval.evaluate import hit_matrix, recall_at_k
from ralm.retrieval.measures import DEFAULT_MEASURES, hubness, pooled_qrels, rank_measures


def load_qa(spec: str, store) -> list[tuple[str, list[str]]]:
    """Question/answer pairs: 'trivia' (filtered to those answerable in `store`), 'triviaqa' or a JSONL file."""
    from ralm.retrieval.evaluate import answerable
    from ralm.samples import trivia_qa_pairs

    if spec == "trivia":
        texts = [t for b in store.iter_batches(4096, columns=["text"]) for t in b["text"]]
        return answerable(trivia_qa_pairs(), texts)
    if spec == "triviaqa":
        from ralm.samples import triviaqa_qa_pairs

        return triviaqa_qa_pairs()
    path = Path(spec)
    if not path.is_file():
        raise RalmError(f"{path}: no such QA file; pass 'trivia' or a JSONL file of {{question, answers}}")
    pairs = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise RalmError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            check_json_text(obj, line, f"{path}:{n}")
            answers = obj["answers"]
            if isinstance(answers, str) or not isinstance(answers, list):
                raise TypeError("answers must be a list of strings")
            pairs.append((str(obj["question"]), [str(a) for a in answers]))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise RalmError(f'{path}:{n}: expected {{"question": ..., "answers": [...]}} ({exc})') from None
    return pairs


@dataclass
class RetrieverReport:
    """One retriever's results on a question set."""

    recall: dict[int, float]  # k -> answer recall@k
    measures: dict[str, float] = field(default_factory=dict)  # ir-measures name -> mean over questions
    hubness: dict[str, float | int] = field(default_factory=dict)  # see ralm.retrieval.measures.hubness
    result: SearchResult | None = None  # (Q, kmax) ids and scores
    hits: np.ndarray | None = None  # (Q, kmax) bool


def compare_retrievers(
    store,
    pairs: Sequence[tuple[str, Sequence[str]]],
    retrievers: Mapping[str, Retriever],
    ks: Sequence[int],
    *,
    measures: Sequence[str] = DEFAULT_MEASURES,
    lang: str = "en",
) -> dict[str, RetrieverReport]:
    """Run every retriever to depth max(ks) and score it; judgments are pooled over all of them."""
    from ralm.retrieval.search import top_texts

    kmax = max(ks)
    questions = [q for q, _ in pairs]
    answers = [list(a) for _, a in pairs]
    reports: dict[str, RetrieverReport] = {}
    for name, retriever in retrievers.items():
        res = retriever.search_text(questions, kmax)
        hits = hit_matrix(res.ids, top_texts(store, res), answers, lang)
        reports[name] = RetrieverReport(recall_at_k(hits, ks), result=res, hits=hits)
    qrels = pooled_qrels(
        {n: r.result.ids for n, r in reports.items()},  # type: ignore[union-attr]
        {n: r.hits for n, r in reports.items()},  # type: ignore[misc]
    )
    for rep in reports.values():
        assert rep.result is not None
        if measures:
            rep.measures = rank_measures(rep.result.ids, qrels, measures)
        rep.hubness = hubness(rep.result.ids)
    return reports


def evaluate_retrievers(store, pairs, retrievers: dict, ks: list[int]) -> dict[str, dict[int, float]]:
    """recall@k per retriever name on the same questions (the recall column of `compare_retrievers`)."""
    reports = compare_retrievers(store, pairs, retrievers, ks, measures=())
    return {name: rep.recall for name, rep in reports.items()}


def report_json(reports: Mapping[str, RetrieverReport], **header: Any) -> dict[str, Any]:
    """The reports as plain JSON: recall (k as strings), measures and hubness per retriever."""
    return {
        **header,
        "recall": {n: {str(k): v for k, v in r.recall.items()} for n, r in reports.items()},
        "measures": {n: r.measures for n, r in reports.items()},
        "hubness": {n: r.hubness for n, r in reports.items()},
    }
