"""Read task datasets from files into the examples of `ralm.tasks.types`, split by file names.

`read_file` reads one file, `load_task_data` a file or a directory (train/dev/test decided from
file names, see `split_of`), `check_label_sets` refuses dev/test labels the train split lacks
and `detect_format` picks the reader from the task, the extension and the file's head:

    squad   SQuAD v1.1 JSON (NorQuAD's flattened files too): QAExample, or OpenQAExample for open-qa.
            Offsets are checked; an answer whose text occurs elsewhere in its context is moved to the
            occurrence nearest its answer_start (NorQuAD train has 7) and noted.
    conllu  CoNLL-U (10 tab-separated columns; multiword-token and empty-node lines skipped), and
            NorNE's NDT-format `.conll` train files. POS labels are UPOS (column 4), NER labels
            the MISC item `name=B-PER` (column 10, "O" without one). NDT files (column 4 holds NDT
            tags such as `subst`) are refused for POS; for NER their paragraph tokens `|` are dropped.
    conll   `token<TAB>tag` (WNUT-17) or whitespace-separated columns (CoNLL-2003): token first,
            tag last, one column count per file, `-DOCSTART-` lines skipped. NER tags must be IOB2.
    text    classification: `<label> <text>` lines (SST-2 stsa files; fastText `__label__pos` labels
            lose the prefix, as in gensim's pang_lee_polarity.cor), TSV (header naming text/sentence
            and label, or two unnamed columns), JSONL or a JSON list of {"text"|"sentence", "label"}.
    openqa  JSONL {"question", "answer"|"answers"} (NQ-open), a JSON array {"qText"|"question",
            "answers"} (WebQuestions), DPR TSV `question<TAB>["a1", "a2"]` (JSON; DPR's Python-style
            `['a1', "a2's"]` lists are read with ast.literal_eval, which parses literals only).

Every example gets a unique string id: the file's own ids when all are present and unique,
else the example's position in the file; files concatenated into one split get their file name
as a prefix when ids collide. Files are UTF-8 (a BOM is dropped); a file that is not valid UTF-8
is read as cp1252 with a note. Bad input ends in a one-line `RalmError` naming the file (and line).

Deliberately left out: compressed files, CSV quoting, XPOS/features/lemmas/trees, nested or
multi-label annotations, tag-sequence (IOB2 transition) checks, SQuAD 2 no-answer training (such
questions are kept in dev/test with no answers and dropped from train), grouping questions by
context when dev is carved out of train, and any download or Hugging Face `datasets` loading.
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ralm.errors import RalmError
from ralm.tasks.types import (
    SPLITS,
    TASKS,
    OpenQAExample,
    QAExample,
    TaggingExample,
    TaskData,
    TextExample,
)

__all__ = [
    "FORMATS",
    "TASK_FORMATS",
    "check_label_sets",
    "detect_format",
    "load_task_data",
    "read_file",
    "split_of",
]

FORMATS = ("squad", "conllu", "conll", "text", "openqa")
TASK_FORMATS: dict[str, tuple[str, ...]] = {
    "extractive-qa": ("squad",),
    "ner": ("conllu", "conll"),
    "pos": ("conllu", "conll"),
    "classify": ("text",),
    "open-qa": ("openqa", "squad"),
}
# UD v2 UPOS tags, plus v1's CONJ and "_" (multiword tokens in some treebanks).
UPOS = frozenset(
    {"ADJ", "ADP", "ADV", "AUX", "CCONJ", "CONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN"}
    | {"PUNCT", "SCONJ", "SYM", "VERB", "X", "_"}
)
_IOB2 = re.compile(r"O|[BI]-\S+")
_HEAD_BYTES = 1 << 16

PathArg = str | os.PathLike


# ----------------------------------------------------------------------------- files and text


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise RalmError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def _check_format(task: str, fmt: str) -> str:
    if fmt not in FORMATS:
        raise RalmError(f"unknown dataset format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt not in TASK_FORMATS[task]:
        raise RalmError(f"format {fmt!r} does not fit task {task!r}; use {' or '.join(TASK_FORMATS[task])}")
    return fmt


def _check_file(path: Path) -> None:
    if not path.exists():
        raise RalmError(f"{path}: no such file; check the path")
    if path.is_dir():
        raise RalmError(f"{path}: is a directory; pass a data file (or use load_task_data for a directory)")


def _read_text(path: Path, counts: Counter) -> str:
    """The file's text: UTF-8 (BOM dropped), else cp1252 (counted in `counts["cp1252"]`)."""
    _check_file(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RalmError(f"{path}: cannot read ({exc.strerror}); check the file") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start]
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        raise RalmError(f"{path}: not valid UTF-8 (byte 0x{bad:02x}); re-save the file as UTF-8") from None
    counts["cp1252"] += 1
    return text


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its line break) for every line, `\\r\\n` endings too."""
    for lineno, line in enumerate(text.split("\n"), 1):
        yield lineno, line.rstrip("\r")


def _blocks(text: str) -> Iterator[list[tuple[int, str]]]:
    """Blank-line separated blocks of numbered lines (sentences of CoNLL files)."""
    block: list[tuple[int, str]] = []
    for lineno, line in _lines(text):
        if line.strip():
            block.append((lineno, line))
        elif block:
            yield block
            block = []
    if block:
        yield block


def _load_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RalmError(
            f"{path}:{exc.lineno}: malformed JSON ({exc.msg}, column {exc.colno}); fix the file"
        ) from None


def _json_records(path: Path, text: str) -> list[tuple[str, dict]]:
    """(where, object) for each item of a JSON list of objects."""
    doc = _load_json(path, text)
    if not isinstance(doc, list):
        raise RalmError(f"{path}: expected a JSON list of objects, found a {type(doc).__name__}")
    out = []
    for i, obj in enumerate(doc):
        if not isinstance(obj, dict):
            raise RalmError(f"{path}: item {i} is a {type(obj).__name__}; expected a JSON object")
        out.append((f"{path}: item {i}", obj))
    return out


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def _jsonl_records(path: Path, text: str) -> list[tuple[str, dict]]:
    """(where, object) for each non-blank line of a JSONL file."""
    out = []
    for lineno, line in _lines(text):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if not out and _is_json_object(text):
                raise RalmError(
                    f"{path}: one JSON object, not JSON lines or a JSON list of examples; convert the file"
                ) from None
            raise RalmError(
                f"{path}:{lineno}: malformed JSON line ({exc.msg}, column {exc.colno}); "
                "each line must be one JSON object"
            ) from None
        if not isinstance(obj, dict):
            raise RalmError(f"{path}:{lineno}: expected a JSON object, found a {type(obj).__name__}")
        out.append((f"{path}:{lineno}", obj))
    return out


def _records(path: Path, text: str) -> list[tuple[str, dict]]:
    """A JSON list (text starts with `[`) or JSONL file as (where, object) pairs."""
    if text.lstrip().startswith("["):
        return _json_records(path, text)
    return _jsonl_records(path, text)


def _native_id(obj: dict, *keys: str) -> str:
    """The first present id field as a string, "" when none: `_native_id({"qId": 7}, "id", "qId") == "7"`."""
    for key in keys:
        value = obj.get(key)
        if value is not None:
            return str(value)
    return ""


def _ensure_unique_ids(examples: list) -> None:
    """Keep the file's ids when all are present and unique, else number examples by position."""
    ids = [ex.id for ex in examples]
    if "" in ids or len(set(ids)) != len(ids):
        for i, ex in enumerate(examples):
            ex.id = str(i)


# ----------------------------------------------------------------------------- format detection


def _head(path: Path) -> str:
    _check_file(path)
    try:
        with path.open("rb") as f:
            return f.read(_HEAD_BYTES).decode("utf-8", errors="replace").lstrip("\ufeff")
    except OSError as exc:
        raise RalmError(f"{path}: cannot read ({exc.strerror}); check the file") from None


def _looks_like_squad(head: str) -> bool:
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


def _first_token_columns(head: str) -> int:
    """Tab-separated columns of the first non-blank, non-comment line (0 when there is none)."""
    for line in head.split("\n"):
        if line.strip() and not line.startswith("#"):
            return len(line.rstrip("\r").split("\t"))
    return 0


def detect_format(path: PathArg, task: str) -> str:
    """The reader for `path` and `task`: `detect_format("wnut17train.conll", "ner") == "conll"`.

    Tagging files with 10 tab-separated columns (or a `.conllu` name) are CoNLL-U, other tagging
    files CoNLL; open-qa files that are a JSON object with "data" are SQuAD, others openqa.
    """
    _check_task(task)
    path = Path(path)
    choices = TASK_FORMATS[task]
    if len(choices) == 1:
        _check_file(path)
        return choices[0]
    head = _head(path)
    if task == "open-qa":
        return "squad" if _looks_like_squad(head) else "openqa"
    if path.suffix.lower() == ".conllu" or _first_token_columns(head) == 10:
        return "conllu"
    return "conll"


# ----------------------------------------------------------------------------- squad


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


def _answer_start(context: str, text: str, start: int, qid: str, path: Path, counts: Counter) -> int:
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
            starts.append(_answer_start(context, text, start, qid, path, counts))
    return answers, starts


def _read_squad(path: Path, text: str, task: str, counts: Counter) -> list:
    doc = _load_json(path, text)
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
                qid = _native_id(qa, "id")
                shown = qid or f"#{len(out)}"
                check = task == "extractive-qa"
                answers, starts = _squad_answers(qa, context, shown, qwhere, path, counts, check)
                if check:
                    out.append(QAExample(qid, question, context, answers, starts, title))
                else:
                    out.append(OpenQAExample(qid, question, list(dict.fromkeys(answers))))
    return out


# ----------------------------------------------------------------------------- conllu


def _misc_name(misc: str) -> str | None:
    """The NER tag in a MISC column: `_misc_name("SpaceAfter=No|name=B-PER") == "B-PER"`."""
    for item in misc.split("|"):
        if item.startswith("name="):
            return item[len("name=") :]
    return None


def _check_iob2(tag: str, where: str) -> str:
    if not _IOB2.fullmatch(tag):
        raise RalmError(f"{where}: tag {tag!r} is not IOB2 (O, B-TYPE or I-TYPE); NER needs IOB2 tags")
    return tag


def _conllu_rows(path: Path, block: list[tuple[int, str]]) -> tuple[str, list[tuple[int, list[str]]]]:
    """(sent_id, [(lineno, 10 columns)]) of one sentence block, comment and multiword lines left out."""
    sent_id, rows = "", []
    for lineno, line in block:
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            if key.strip() == "sent_id":
                sent_id = value.strip()
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise RalmError(
                f"{path}:{lineno}: expected 10 tab-separated columns (CoNLL-U), found {len(cols)}; "
                "fix the line or use the conll format (token<TAB>tag)"
            )
        if "-" in cols[0] or "." in cols[0]:
            continue
        rows.append((lineno, cols))
    return sent_id, rows


def _pos_labels(path: Path, rows: list[tuple[int, list[str]]]) -> list[str]:
    for lineno, cols in rows:
        if cols[3] not in UPOS:
            raise RalmError(
                f"{path}:{lineno}: column 4 holds {cols[3]!r}, not a UPOS tag (an NDT-format file carries "
                "NDT tags such as subst/verb there); POS needs a CoNLL-U file with UPOS in column 4"
            )
    return [cols[3] for _, cols in rows]


def _read_conllu(path: Path, text: str, task: str, counts: Counter) -> list:
    sentences = [_conllu_rows(path, block) for block in _blocks(text)]
    sentences = [(sid, rows) for sid, rows in sentences if rows]
    if task == "pos":
        return [
            TaggingExample(sid, [c[1] for _, c in rows], _pos_labels(path, rows)) for sid, rows in sentences
        ]
    ndt = any(cols[3] not in UPOS for _, rows in sentences for _, cols in rows)
    out, named = [], False
    for sid, rows in sentences:
        tokens, labels = [], []
        for lineno, cols in rows:
            tag = _misc_name(cols[9])
            named = named or tag is not None
            tag = _check_iob2(tag or "O", f"{path}:{lineno}")
            if ndt and cols[1] == "|" and tag == "O":
                counts["pipes"] += 1
                continue
            tokens.append(cols[1])
            labels.append(tag)
        if tokens:
            out.append(TaggingExample(sid, tokens, labels))
    if not named:
        raise RalmError(
            f"{path}: no name=... entity tags in column 10 (MISC); NER on CoNLL-U needs NorNE-style "
            "tags such as name=B-PER, or use a token<TAB>tag file"
        )
    return out


# ----------------------------------------------------------------------------- conll


def _read_conll(path: Path, text: str, task: str, counts: Counter) -> list:
    tabs = "\t" in text
    width, width_line = 0, 0
    out = []
    for block in _blocks(text):
        tokens, labels = [], []
        for lineno, line in block:
            cols = line.split("\t") if tabs else line.split()
            if cols[0] == "-DOCSTART-":
                continue
            if not width:
                width, width_line = len(cols), lineno
                if width < 2:
                    raise RalmError(f"{path}:{lineno}: expected a token and a tag column, found one column")
            elif len(cols) != width:
                raise RalmError(
                    f"{path}:{lineno}: found {len(cols)} columns where line {width_line} has {width}; "
                    "every line needs the same columns (token first, tag last)"
                )
            tag = cols[-1].strip()
            tokens.append(cols[0])
            labels.append(_check_iob2(tag, f"{path}:{lineno}") if task == "ner" else tag)
        if tokens:
            out.append(TaggingExample("", tokens, labels))
    return out


# ----------------------------------------------------------------------------- text classification


def _check_label_count(path: Path, labels: list[str], layout: str) -> None:
    """Refuse a file whose 'labels' are mostly distinct: it is not in `layout`."""
    distinct = len(set(labels))
    if distinct > max(50, len(labels) // 2):
        raise RalmError(
            f"{path}: {distinct} distinct labels in {len(labels)} examples: not {layout}; "
            "check the file or give a TSV header naming the text and label columns"
        )


def _text_from_records(records: list[tuple[str, dict]]) -> list[TextExample]:
    out = []
    for where, obj in records:
        text = obj.get("text", obj.get("sentence"))
        label = obj.get("label")
        if not isinstance(text, str) or label is None or isinstance(label, (dict, list)):
            raise RalmError(f'{where}: needs a string "text" (or "sentence") and a scalar "label"')
        out.append(TextExample(_native_id(obj, "id", "sent_id"), text, str(label)))
    return out


def _text_from_label_first(path: Path, lines: list[tuple[int, str]]) -> list[TextExample]:
    out = []
    for lineno, line in lines:
        parts = line.split(maxsplit=1)
        if len(parts) < 2:
            raise RalmError(
                f"{path}:{lineno}: expected '<label> <text>' (a one-word label, a space, the text)"
            )
        out.append(TextExample("", parts[1].strip(), parts[0].removeprefix("__label__")))
    _check_label_count(path, [ex.label for ex in out], "'<label> <text>' lines")
    return out


def _tsv_columns(path: Path, rows: list[tuple[int, list[str]]]) -> tuple[int, int, int | None, int]:
    """(text column, label column, id column or None, first data row) of a classification TSV."""
    header = [c.strip().lower() for c in rows[0][1]]
    text_col = next((header.index(n) for n in ("text", "sentence") if n in header), None)
    if text_col is not None and "label" in header:
        id_col = next((header.index(n) for n in ("id", "sent_id") if n in header), None)
        return text_col, header.index("label"), id_col, 1
    for lineno, cols in rows:
        if len(cols) != 2:
            raise RalmError(
                f"{path}:{lineno}: expected 2 tab-separated columns (label and text) or a header "
                f"naming the text/sentence and label columns; found {len(cols)}"
            )
    first, second = ({cols[i] for _, cols in rows} for i in (0, 1))
    return (1, 0, None, 0) if len(first) <= len(second) else (0, 1, None, 0)


def _text_from_tsv(path: Path, lines: list[tuple[int, str]]) -> list[TextExample]:
    rows = [(lineno, line.split("\t")) for lineno, line in lines]
    text_col, label_col, id_col, start = _tsv_columns(path, rows)
    need = max(text_col, label_col, id_col or 0) + 1
    out = []
    for lineno, cols in rows[start:]:
        if len(cols) < need:
            raise RalmError(
                f"{path}:{lineno}: found {len(cols)} tab-separated columns, the header names {need}"
            )
        native = cols[id_col].strip() if id_col is not None else ""
        out.append(TextExample(native, cols[text_col].strip(), cols[label_col].strip()))
    _check_label_count(path, [ex.label for ex in out], "a label/text TSV")
    return out


def _read_text_examples(path: Path, text: str, task: str, counts: Counter) -> list:
    start = text.lstrip()[:1]
    if start in ("[", "{"):
        return _text_from_records(_records(path, text))
    lines = [(lineno, line) for lineno, line in _lines(text) if line.strip()]
    if "\t" in lines[0][1]:
        return _text_from_tsv(path, lines)
    return _text_from_label_first(path, lines)


# ----------------------------------------------------------------------------- open QA


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
            OpenQAExample(_native_id(obj, "id", "qId", "example_id"), question, _answer_list(answers, where))
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
    for lineno, line in _lines(text):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise RalmError(f'{path}:{lineno}: expected question<TAB>["answer", ...]; found no tab')
        out.append(OpenQAExample("", cols[0].strip(), _parse_answer_cell(cols[1], f"{path}:{lineno}")))
    return out


def _read_openqa(path: Path, text: str, task: str, counts: Counter) -> list:
    if text.lstrip()[:1] in ("[", "{"):
        return _openqa_from_records(_records(path, text))
    return _openqa_from_tsv(path, text)


# ----------------------------------------------------------------------------- one file

_READERS = {
    "squad": _read_squad,
    "conllu": _read_conllu,
    "conll": _read_conll,
    "text": _read_text_examples,
    "openqa": _read_openqa,
}
_NOTES = {
    "repaired": "{n} answer offsets repaired in {where} (moved to the answer text's occurrence nearest "
    "the given answer_start)",
    "pipes": "{n} NDT paragraph tokens '|' (tagged O) dropped in {where}",
    "cp1252": "{n} file(s) read as cp1252 (not valid UTF-8): {where}",
    "unanswered": "{n} questions without answers skipped in train ({where})",
}


def _notes(counts: Counter, where: str) -> list[str]:
    return [_NOTES[k].format(n=n, where=where) for k, n in counts.items() if n]


def _read_one(path: Path, task: str, fmt: str | None) -> tuple[list, str, Counter]:
    _check_task(task)
    fmt = _check_format(task, fmt) if fmt is not None else detect_format(path, task)
    counts: Counter = Counter()
    text = _read_text(path, counts)
    if not text.strip():
        raise RalmError(f"{path}: the file is empty; give a file with examples")
    examples = _READERS[fmt](path, text, task, counts)
    if not examples:
        raise RalmError(
            f"{path}: no examples found (read as {fmt} for task {task}); check the file and format"
        )
    _ensure_unique_ids(examples)
    return examples, fmt, counts


def read_file(
    path: PathArg, task: str, fmt: str | None = None, *, notes: list[str] | None = None
) -> tuple[list, str]:
    """Read one file of examples for `task` (one of types.TASKS); returns (examples, format name).

    Example: `read_file("stsa.binary.dev", "classify")` -> ([TextExample("0", "...", "1"), ...], "text").
    What the reader did (offsets repaired, tokens dropped) is appended to `notes` when given.
    """
    path = Path(path)
    examples, fmt, counts = _read_one(path, task, fmt)
    if notes is not None:
        notes.extend(_notes(counts, str(path)))
    return examples, fmt


# ----------------------------------------------------------------------------- splits

_DEV_WORD = re.compile(r"(?<![a-z])(devtest|devset|dev|validation|valid|val|testa)(?![a-z])")
_TEST_WORD = re.compile(r"(?<![a-z])(testing|testset|testb|test)(?![a-z])")
_DOC_NAME = re.compile(r"(readme|licen[cs]e|copying|notice|citation|changelog|authors)", re.IGNORECASE)
_SKIP_SUFFIXES = frozenset(
    {".md", ".rst", ".html", ".htm", ".pdf", ".py", ".sh", ".ipynb", ".yml", ".yaml", ".toml", ".cfg"}
    | {".ini", ".gz", ".bz2", ".xz", ".zip", ".tar", ".tgz", ".7z", ".pkl", ".pickle", ".bin", ".npy"}
    | {".npz", ".pt", ".pth", ".safetensors", ".lock", ".log"}
)


def split_of(name: str) -> str | None:
    """The split a file name names, None when none: `split_of("wnut17train.conll") == "train"`.

    dev: a word dev/devtest/devset/val/valid/validation (or CoNLL-2003's testa); train: "train"
    anywhere (training, trainmodel); test: a word test/testing/testset (or testb). Words are
    delimited by anything but letters, so `emerging.test.annotated` is test and `devtest` dev.
    """
    lowered = name.lower()
    if _DEV_WORD.search(lowered):
        return "dev"
    if "train" in lowered:
        return "train"
    if _TEST_WORD.search(lowered):
        return "test"
    return None


def _is_data_file(path: Path, root: Path) -> bool:
    rel = path.relative_to(root)
    if any(part.startswith(".") for part in rel.parts) or not path.is_file():
        return False
    return not _DOC_NAME.match(path.name) and path.suffix.lower() not in _SKIP_SUFFIXES


def _data_files(path: Path) -> list[Path]:
    """A file itself, or a directory's data files (recursive, sorted; docs and licences left out)."""
    if not path.exists():
        raise RalmError(f"{path}: no such file or directory; check the path")
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if _is_data_file(p, path))
    if not files:
        raise RalmError(
            f"{path}: no data files found (README, licence and documentation files are skipped); "
            "pass a data file or a directory holding train/dev/test files"
        )
    return files


def _split_of_path(rel: Path) -> str | None:
    """The file name's split, else the nearest parent folder's (inside the scanned directory)."""
    for part in reversed(rel.parts):
        split = split_of(part)
        if split is not None:
            return split
    return None


def _describe(files: list[Path]) -> str:
    """One file's path, or "N files under DIR" ("" for none)."""
    if not files:
        return ""
    if len(files) == 1:
        return str(files[0])
    return f"{len(files)} files under {os.path.commonpath([str(f.parent) for f in files])}"


def _scan(path: Path) -> tuple[dict[str, list[Path]], list[str]]:
    """Split -> files of a file (train) or a directory, plus notes on unassigned files."""
    files = _data_files(path)
    if path.is_file():
        return {"train": files}, []
    found: dict[str, list[Path]] = {}
    loose: list[Path] = []
    for f in files:
        split = _split_of_path(f.relative_to(path))
        if split is None:
            loose.append(f)
        else:
            found.setdefault(split, []).append(f)
    if not loose:
        return found, []
    if "train" not in found:
        found["train"] = loose
        return found, [f"train: {_describe(loose)} whose names name no split (there is no train file)"]
    return found, [
        f"ignored {_describe(loose)} whose names name no split: {', '.join(f.name for f in loose[:5])}"
    ]


def _concat(parts: list[tuple[Path, list]]) -> list:
    """The files' examples in order; ids get a file prefix when two files share one."""
    out = [ex for _, examples in parts for ex in examples]
    if len({ex.id for ex in out}) < len(out):
        names = [f.name for f, _ in parts]
        unique_names = len(set(names)) == len(names)
        for f, examples in parts:
            for ex in examples:
                ex.id = f"{f.name if unique_names else f}:{ex.id}"
    return out


def _read_split(files: list[Path], task: str, fmt: str | None, data: TaskData) -> tuple[list, list[str]]:
    """One split's examples (files concatenated) and the formats used; notes go to `data`."""
    parts, formats, counts = [], [], Counter()
    for f in files:
        examples, used, file_counts = _read_one(f, task, fmt)
        parts.append((f, examples))
        formats.append(used)
        counts.update(file_counts)
    data.notes.extend(_notes(counts, _describe(files)))
    return _concat(parts), formats


def _drop_unanswered(data: TaskData) -> None:
    """Questions without answers cannot be trained on: drop them from train with a note."""
    train = data.splits.get("train", [])
    kept = [ex for ex in train if not isinstance(ex, (QAExample, OpenQAExample)) or ex.answers]
    if len(kept) == len(train):
        return
    where = _describe([Path(s) for s in data.sources["train"]])
    data.notes.extend(_notes(Counter(unanswered=len(train) - len(kept)), where))
    if not kept:
        raise RalmError(f"{where}: no train question has an answer; give a train file with answers")
    data.splits["train"] = kept


def _carve(data: TaskData, split: str, fraction: float, seed: int) -> None:
    """Move a seeded random `fraction` of train to `split` (order kept in both) when it is missing."""
    train = data.splits.get("train")
    if not train or split in data.splits or fraction <= 0:
        return
    if len(train) < 2:
        data.notes.append(f"no {split} split, and train has {len(train)} example: too few to carve one out")
        return
    n = min(max(1, round(len(train) * fraction)), len(train) - 1)
    order = list(range(len(train)))
    random.Random(f"{seed}-{split}" if split != "dev" else seed).shuffle(order)
    picked = set(order[:n])
    data.splits[split] = [ex for i, ex in enumerate(train) if i in picked]
    data.splits["train"] = [ex for i, ex in enumerate(train) if i not in picked]
    data.sources[split] = list(data.sources["train"])
    data.notes.append(
        f"no {split} split: {n} of {len(train)} train examples carved out as {split} "
        f"({split}_fraction={fraction}, seed={seed})"
    )


def load_task_data(
    path: PathArg | None,
    task: str,
    *,
    fmt: str | None = None,
    train: PathArg | None = None,
    dev: PathArg | None = None,
    test: PathArg | None = None,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.0,
    seed: int = 0,
) -> TaskData:
    """All splits of a dataset: `path` a file (-> used as train) or a directory; train/dev/test override.

    Example: `load_task_data("data/wnut17", "ner").splits["test"][0].labels[:2] == ["O", "O"]`.
    A directory is scanned recursively; each file's split comes from its name (`split_of`), else
    from its nearest folder's name; files naming no split are train when no file names train
    (NorNE's ndt/ files), else ignored with a note. Several files of one split are concatenated in
    sorted path order. `train=`/`dev=`/`test=` (a file, or a directory whose data files all belong
    to that split) replace what the scan found. Without a dev split, `dev_fraction` of train
    (seeded shuffle; 0 turns this off) becomes dev; likewise `test_fraction` (default 0) carves a
    test split, first, when the dataset has none. A missing train split is allowed.
    """
    _check_task(task)
    if fmt is not None:
        _check_format(task, fmt)
    for name, frac in (("dev_fraction", dev_fraction), ("test_fraction", test_fraction)):
        if not 0 <= frac < 1:
            raise RalmError(f"{name} must be in [0, 1), not {frac}")
    files, notes = _scan(Path(path)) if path is not None else ({}, [])
    for split, given in (("train", train), ("dev", dev), ("test", test)):
        if given is not None:
            files[split] = _data_files(Path(given))
    if not files:
        raise RalmError("no dataset given: pass a file or directory, or train=/dev=/test= files")
    data = TaskData(task=task, format="", notes=notes)
    formats: list[str] = []
    for split in SPLITS:
        if split in files:
            data.splits[split], used = _read_split(files[split], task, fmt, data)
            data.sources[split] = [str(f) for f in files[split]]
            formats.extend(used)
    data.format = "+".join(dict.fromkeys(formats))
    _drop_unanswered(data)
    _carve(data, "test", test_fraction, seed)
    _carve(data, "dev", dev_fraction, seed)
    return data


# ----------------------------------------------------------------------------- label sets


def _label_set(examples: list) -> set[str]:
    out: set[str] = set()
    for ex in examples:
        if isinstance(ex, TaggingExample):
            out.update(ex.labels)
        elif isinstance(ex, TextExample):
            out.add(ex.label)
    return out


def check_label_sets(data: TaskData) -> None:
    """RalmError when dev/test use a label that train lacks: `check_label_sets(load_task_data(...))`.

    Tagging compares tags (B-PER and I-PER separately), classification classes; QA tasks and
    datasets without a train split pass.
    """
    known = set(data.labels())
    if not known:
        return
    for split in ("dev", "test"):
        missing = sorted(_label_set(data.splits.get(split, [])) - known)
        if missing:
            shown = ", ".join(repr(m) for m in missing[:10]) + (", ..." if len(missing) > 10 else "")
            where = _describe([Path(s) for s in data.sources.get(split, [])]) or split
            raise RalmError(
                f"{where}: the {split} split uses label(s) {shown} that the train split lacks; "
                "use a train split with every label, or map or drop those examples"
            )
