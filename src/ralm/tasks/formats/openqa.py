"""Open-QA files: questions with answer lists, read as OpenQAExamples (SQuAD files: `squad`).

JSONL {"question", "answer"|"answers"} (NQ-open), a JSON array {"qText"|"question", "answers"}
(WebQuestions), DPR TSV `question<TAB>["a1", "a2"]` (JSON; DPR's Python-style `['a1', "a2's"]`
lists are read with ast.literal_eval, which parses literals only).

Deliberately left out: passages or gold contexts in these files, and any download or Hugging Face
`datasets` loading.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path
from typing import Any

from ralm.errors import RalmError
from ralm.tasks.formats.common import load_records, native_id, numbered_lines
from ralm.tasks.types import OpenQAExample


def _answer_list(value: Any, where: str) -> list[str]:
    """Answer strings from a list (or one string): `_answer_list(["a", 1], "x") == ["a", "1"]`."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(a, (str, int, float)) for a in value):
        return [str(a) for a in value]
    raise RalmError(f'{where}: "answers" (or "answer") must be a list of strings')


def _openqa_from_records(records: list[tuple[str, dict]]) -> list[OpenQAExample]:
    out = []
    for where, obj in records:
        question = obj.get("question", obj.get("qText"))
        answers = obj.get("answers", obj.get("answer"))
        if not isinstance(question, str) or answers is None:
            raise RalmError(f'{where}: needs a string "question" (or "qText") and "answers" (or "answer")')
        out.append(
            OpenQAExample(native_id(obj, "id", "qId", "example_id"), question, _answer_list(answers, where))
        )
    return out


def _parse_answer_cell(cell: str, where: str) -> list[str]:
    """A DPR answer cell: a JSON list, else a Python-literal list (DPR writes `['a', "b's"]`), else one answer."""
    cell = cell.strip()
    if not cell.startswith("["):
        return [cell]
    try:
        value = json.loads(cell)
    except json.JSONDecodeError:
        try:
            value = ast.literal_eval(cell)  # literals only: never evaluates code
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise RalmError(f'{where}: the answer column is not a list such as ["a1", "a2"]') from None
    return _answer_list(value, where)


def _openqa_from_tsv(path: Path, text: str) -> list[OpenQAExample]:
    out = []
    for lineno, line in numbered_lines(text):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise RalmError(f'{path}:{lineno}: expected question<TAB>["answer", ...]; found no tab')
        out.append(OpenQAExample("", cols[0].strip(), _parse_answer_cell(cols[1], f"{path}:{lineno}")))
    return out


def read_openqa(path: Path, text: str, task: str, counts: Counter) -> list:
    if text.lstrip()[:1] in ("[", "{"):
        return _openqa_from_records(load_records(path, text))
    return _openqa_from_tsv(path, text)
