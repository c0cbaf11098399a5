"""SQuAD v1.1 JSON (NorQuAD's flattened files too): QAExample, or OpenQAExample for open-qa.

Offsets are checked for extractive QA; an answer whose text occurs elsewhere in its context is moved
to the occurrence nearest its answer_start (NorQuAD train has 7) and counted as "repaired".
`is_impossible` questions (SQuAD 2) get no answers. `looks_like_squad` tells a SQuAD file from open-QA
JSONL or JSON lists for `ralm.tasks.datasets.detect_format`.

Deliberately left out: SQuAD 2 no-answer training (such questions are kept with no answers;
`ralm.tasks.datasets` drops them from train), and any download or Hugging Face `datasets` loading.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from ralm.errors import RalmError
from ralm.formats.common import load_json, native_id
from ralm.formats.types import OpenQAExample, QAExample


def looks_like_squad(head: str) -> bool:
    """True for a JSON object with a "data" key (SQuAD), False for JSONL, a JSON list or TSV."""
    text = head.lstrip()
    if not text.startswith("{"):
        return False
    first_line = text.split("\n", 1)[0]
    try:
        obj = json.loads(first_line)
    except json.JSONDecodeError:  # an indented or long single-line document
        return re.search(r'"data"\s*:', text[:4096]) is not None
    return isinstance(obj, dict) and "data" in obj and "question" not in obj


def _field(obj: Any, key: str, kind: type, where: str) -> Any:
    """obj[key], checked to be a `kind`: `_field({"qas": []}, "qas", list, "x") == []`."""
    if not isinstance(obj, dict):
        raise RalmError(f"{where}: expected a JSON object, found a {type(obj).__name__}")
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        what = "missing" if value is None else f"a {type(value).__name__}"
        raise RalmError(f'{where}: "{key}" is {what}; SQuAD needs a {kind.__name__} here')
    return value


def _occurrences(text: str, context: str) -> list[int]:
    """Start offsets of every (possibly overlapping) occurrence of `text` in `context`."""
    starts, i = [], context.find(text)
    while i >= 0:
        starts.append(i)
        i = context.find(text, i + 1)
    return starts


def answer_start(context: str, text: str, start: int, qid: str, path: Path, counts: Counter) -> int:
    """`start` when it points at `text`, else the nearest occurrence (counted as a repair)."""
    if start >= 0 and context[start : start + len(text)] == text:
        return start
    hits = _occurrences(text, context)
    if not hits:
        raise RalmError(
            f"{path}: question {qid}: answer {text[:60]!r} does not occur in its context; "
            "correct the answer text or remove the question"
        )
    counts["repaired"] += 1
    return min(hits, key=lambda h: (abs(h - start), h))


def _squad_answers(qa: dict, context: str, qid: str, where: str, path: Path, counts: Counter, check: bool):
    """(answer texts, answer starts) of one SQuAD question; starts are checked when `check`."""
    if qa.get("is_impossible") is True:
        return [], []
    answers, starts = [], []
    for a_i, ans in enumerate(_field(qa, "answers", list, where)):
        text = _field(ans, "text", str, f"{where}.answers[{a_i}]")
        if not text:
            raise RalmError(f"{path}: question {qid}: answer {a_i} is empty; give its text or remove it")
        answers.append(text)
        if check:
            start = _field(ans, "answer_start", int, f"{where}.answers[{a_i}]")
            starts.append(answer_start(context, text, start, qid, path, counts))
    return answers, starts


def read_squad(path: Path, text: str, task: str, counts: Counter) -> list:
    doc = load_json(path, text)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise RalmError(f'{path}: not SQuAD JSON: expected an object with a "data" list of articles')
    out: list = []
    for a_i, article in enumerate(doc["data"]):
        where = f"{path}: data[{a_i}]"
        paragraphs = _field(article, "paragraphs", list, where)
        title = article.get("title") if isinstance(article.get("title"), str) else ""
        for p_i, para in enumerate(paragraphs):
            pwhere = f"{where}.paragraphs[{p_i}]"
            context = _field(para, "context", str, pwhere)
            for q_i, qa in enumerate(_field(para, "qas", list, pwhere)):
                qwhere = f"{pwhere}.qas[{q_i}]"
                question = _field(qa, "question", str, qwhere)
                qid = native_id(qa, "id")
                shown = qid or f"#{len(out)}"
                check = task == "extractive-qa"
                answers, starts = _squad_answers(qa, context, shown, qwhere, path, counts, check)
                if check:
                    out.append(QAExample(qid, question, context, answers, starts, title))
                else:
                    out.append(OpenQAExample(qid, question, list(dict.fromkeys(answers))))
    return out
