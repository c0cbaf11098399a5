"""Compare retrievers on one question set: what `ralm eval-retrieval` computes and prints.

For each retriever, on the same (question, answers) pairs: answer recall@k, ir-measures rank
metrics over pooled answer judgments, and hubness of its top-k lists (see
`ralm.retrieval.eval.measures`). The raw rankings are kept so they can be written as TREC runs.

Question sets: "trivia" (the bundled trivia pairs, filtered to those whose answer occurs in
the store), "triviaqa" (the TriviaQA sample), or a question file read as `ralm finetune open-qa`
reads one (JSONL {"question", "answers"}, a JSON list, DPR TSV `question<TAB>["a1", ...]`; see
`ralm.formats.openqa`). Each pair says whether its answers are regular expressions
(`QAPair.regex`: CuratedTREC's patterns, chosen per file or by `answers=`), and hits follow it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.base import Searcher, SearchResult
from ralm.retrieval.eval.evaluate import QAPair, hit_matrix, qa_pair, recall_at_k
from ralm.retrieval.eval.measures import DEFAULT_MEASURES, hubness, pooled_qrels, rank_measures


def load_qa(spec: str, store, answers: str = "auto") -> list[QAPair]:
    """Question/answer pairs: 'trivia' (filtered to those answerable in `store`), 'triviaqa' or a
    question file (JSONL, JSON list or DPR TSV); answers: "auto" (the file says), "string" or "regex".

    Example: load_qa("curatedtrec-test.qa.csv", store)[0] -> QAPair("...", ["19(6|7)\\d"], regex=True).
    """
    from ralm.retrieval.eval.evaluate import answerable
    from ralm.samples import trivia_qa_pairs

    if spec in ("trivia", "triviaqa"):
        if answers == "regex":
            raise RalmError(f"--answers regex: the {spec} sample's answers are strings; drop it")
        if spec == "trivia":
            texts = [t for b in store.iter_batches(4096, columns=["text"]) for t in b["text"]]
            return [QAPair(q, a) for q, a in answerable(trivia_qa_pairs(), texts)]
        from ralm.samples import triviaqa_qa_pairs

        return [QAPair(q, list(a)) for q, a in triviaqa_qa_pairs()]
    from ralm.formats.read import read_file

    path = Path(spec)
    if not path.is_file():
        raise RalmError(
            f"{path}: no such QA file; pass 'trivia', 'triviaqa' or a file of questions with answers "
            '(JSONL {"question", "answers"} or DPR TSV)'
        )
    examples, _ = read_file(path, "open-qa", "openqa", answers=answers)
    return [QAPair(ex.question, ex.answers, ex.regex) for ex in examples]


@dataclass
class RetrieverReport:
    """One retriever's results on a question set."""

    recall: dict[int, float]  # k -> answer recall@k
    measures: dict[str, float] = field(default_factory=dict)  # ir-measures name -> mean over questions
    hubness: dict[str, float | int] = field(default_factory=dict)  # see ralm.retrieval.eval.measures.hubness
    result: SearchResult | None = None  # (Q, kmax) ids and scores
    hits: np.ndarray | None = None  # (Q, kmax) bool


def compare_retrievers(
    store,
    pairs: Sequence[QAPair | tuple[str, Sequence[str]]],
    retrievers: Mapping[str, Searcher],
    ks: Sequence[int],
    *,
    measures: Sequence[str] = DEFAULT_MEASURES,
    lang: str = "en",
) -> dict[str, RetrieverReport]:
    """Run every retriever to depth max(ks) and score it; judgments are pooled over all of them.

    pairs: QAPairs (regex answers are matched as patterns) or (question, answers) string pairs.
    """
    from ralm.retrieval.retriever import top_texts

    kmax = max(ks)
    qa = [qa_pair(p) for p in pairs]
    questions = [p.question for p in qa]
    answers = [p.answers for p in qa]
    regex = [p.regex for p in qa]
    reports: dict[str, RetrieverReport] = {}
    for name, retriever in retrievers.items():
        res = retriever.search_text(questions, kmax)
        hits = hit_matrix(res.ids, top_texts(store, res), answers, lang, regex)
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
