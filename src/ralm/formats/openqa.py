"""Open-QA files: questions with answer lists, read as OpenQAExamples (SQuAD files: `squad`).

JSONL {"question", "answer"|"answers"} (NQ-open; answers also as datasets' {"text": [...]}), a JSON array {"qText"|"question", "answers"}
(WebQuestions), DPR TSV `question<TAB>["a1", "a2"]` (JSON; DPR's Python-style `['a1', "a2's"]`
lists are read with ast.literal_eval, which parses literals only).

Answers are strings or regular expressions (CuratedTREC's patterns), per example (`regex`).
`answers="auto"` decides as the file says: a JSON/JSONL record with "answer_type": "regex" (or
"string") is that; otherwise the whole file is regex when its name or its folder's name contains
"curatedtrec", any case (DPR's `curatedtrec-test.qa.csv`, FlashRAG's `curatedtrec/test.jsonl`),
else string. `answers="string"`/`"regex"` applies to every example. Every pattern is compiled on
reading: one that does not is a RalmError naming the file, the line (or item) and the pattern.
Questions read with regex answers are counted into a note (`counts["regex"]`).

Deliberately left out: passages or gold contexts in these files, and any download or Hugging Face
`datasets` loading.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path
from typing import Any

from ralm.answers import ANSWER_MODES, check_answer_patterns
from ralm.errors import RalmError
from ralm.formats.common import load_records, native_id, numbered_lines
from ralm.formats.types import OpenQAExample

REGEX_NAME = "curatedtrec"  # a file (or folder) name holding this is read as regex answers by "auto"


def regex_file(path: Path) -> bool:
    """The "auto" rule for a whole file: `regex_file(Path("dpr/curatedtrec-test.qa.csv")) is True`."""
    return REGEX_NAME in path.name.lower() or REGEX_NAME in path.parent.name.lower()


def check_answer_mode(answers: str) -> str:
    if answers not in ANSWER_MODES:
        raise RalmError(f"--answers {answers!r}: choose one of {', '.join(ANSWER_MODES)}")
    return answers


def _is_regex(obj: dict, default: bool, answers: str, where: str) -> bool:
    """Whether a record's answers are patterns: the --answers mode, else its "answer_type", else `default`."""
    kind = obj.get("answer_type")
    if kind is not None and kind not in ("string", "regex"):
        raise RalmError(f'{where}: "answer_type" is {kind!r}; use "string" or "regex"')
    if answers != "auto":
        return answers == "regex"
    return default if kind is None else kind == "regex"


def _example(id_: str, question: str, answers: list[str], regex: bool, where: str) -> OpenQAExample:
    if regex:
        check_answer_patterns(answers, where)
    return OpenQAExample(id_, question, answers, regex)


def _answer_list(value: Any, where: str) -> list[str]:
    """Answer strings from a list, one string or datasets' {"text": [...]}: `_answer_list(["a", 1], "x") == ["a", "1"]`."""
    if isinstance(value, dict) and "text" in value:
        value = value["text"]
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(a, (str, int, float)) for a in value):
        return [str(a) for a in value]
    raise RalmError(f'{where}: "answers" (or "answer") must be a list of strings')


def openqa_from_records(records: list[tuple[str, dict]], default: bool, mode: str) -> list[OpenQAExample]:
    out = []
    for where, obj in records:
        question = obj.get("question", obj.get("qText"))
        answers = obj.get("answers", obj.get("answer"))
        if not isinstance(question, str) or answers is None:
            raise RalmError(f'{where}: needs a string "question" (or "qText") and "answers" (or "answer")')
        regex = _is_regex(obj, default, mode, where)
        id_ = native_id(obj, "id", "qId", "example_id")
        out.append(_example(id_, question, _answer_list(answers, where), regex, where))
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


def _openqa_from_tsv(path: Path, text: str, regex: bool) -> list[OpenQAExample]:
    out = []
    for lineno, line in numbered_lines(text):
        if not line.strip():
            continue
        cols = line.split("\t")
        where = f"{path}:{lineno}"
        if len(cols) < 2:
            raise RalmError(f'{where}: expected question<TAB>["answer", ...]; found no tab')
        out.append(_example("", cols[0].strip(), _parse_answer_cell(cols[1], where), regex, where))
    return out


def read_openqa(path: Path, text: str, task: str, counts: Counter, answers: str = "auto") -> list:
    """The questions of one open-QA file; `answers` is auto, string or regex (see the module doc)."""
    default = regex_file(path) if check_answer_mode(answers) == "auto" else answers == "regex"
    if text.lstrip()[:1] in ("[", "{"):
        out = openqa_from_records(load_records(path, text), default, answers)
    else:
        out = _openqa_from_tsv(path, text, default)
    counts["regex"] += sum(ex.regex for ex in out)
    return out
