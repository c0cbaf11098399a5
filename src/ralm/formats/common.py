"""What the format readers share: decoding a file, numbered lines and blocks, JSON records, ids, notes.

Files are UTF-8 (a BOM is dropped); a file that is not valid UTF-8 is read as cp1252 and counted,
which becomes a note. Every example gets a unique string id: the file's own ids when all are present
and unique, else the example's position in the file (`ensure_unique_ids`). Bad input ends in a
one-line `RalmError` naming the file (and line).

Deliberately left out: compressed files, encodings other than UTF-8 and cp1252, and anything
specific to one format (the `squad`, `conll`, `text` and `openqa` modules).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ralm.errors import RalmError, check_json_text


def check_file(path: Path) -> None:
    if not path.exists():
        raise RalmError(f"{path}: no such file; check the path")
    if path.is_dir():
        raise RalmError(f"{path}: is a directory; pass a data file (or use load_task_data for a directory)")


def read_text(path: Path, counts: Counter) -> str:
    """The file's text: UTF-8 (BOM dropped), else cp1252 (counted in `counts["cp1252"]`)."""
    check_file(path)
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


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its line break) for every line, `\\r\\n` endings too."""
    for lineno, line in enumerate(text.split("\n"), 1):
        yield lineno, line.rstrip("\r")


def blocks(text: str) -> Iterator[list[tuple[int, str]]]:
    """Blank-line separated blocks of numbered lines (sentences of CoNLL files)."""
    block: list[tuple[int, str]] = []
    for lineno, line in numbered_lines(text):
        if line.strip():
            block.append((lineno, line))
        elif block:
            yield block
            block = []
    if block:
        yield block


def load_json(path: Path, text: str) -> Any:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RalmError(
            f"{path}:{exc.lineno}: malformed JSON ({exc.msg}, column {exc.colno}); fix the file"
        ) from None
    check_json_text(obj, text, str(path))
    return obj


def _json_records(path: Path, text: str) -> list[tuple[str, dict]]:
    """(where, object) for each item of a JSON list of objects."""
    doc = load_json(path, text)
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
    for lineno, line in numbered_lines(text):
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
        check_json_text(obj, line, f"{path}:{lineno}")
        out.append((f"{path}:{lineno}", obj))
    return out


def load_records(path: Path, text: str) -> list[tuple[str, dict]]:
    """A JSON list (text starts with `[`) or JSONL file as (where, object) pairs."""
    if text.lstrip().startswith("["):
        return _json_records(path, text)
    return _jsonl_records(path, text)


def native_id(obj: dict, *keys: str) -> str:
    """The first present id field as a string, "" when none: `native_id({"qId": 7}, "id", "qId") == "7"`."""
    for key in keys:
        value = obj.get(key)
        if value is not None:
            return str(value)
    return ""


def ensure_unique_ids(examples: list) -> None:
    """Keep the file's ids when all are present and unique, else number examples by position."""
    ids = [ex.id for ex in examples]
    if "" in ids or len(set(ids)) != len(ids):
        for i, ex in enumerate(examples):
            ex.id = str(i)


_NOTES = {
    "repaired": "{n} answer offsets repaired in {where} (moved to the answer text's occurrence nearest "
    "the given answer_start)",
    "pipes": "{n} NDT paragraph tokens '|' (tagged O) dropped in {where}",
    "cp1252": "{n} file(s) read as cp1252 (not valid UTF-8): {where}",
    "unanswered": "{n} questions without answers skipped in train ({where})",
    "regex": "{n} questions with regular-expression answers in {where}, matched as patterns "
    "(--answers string matches them as text)",
}


def format_notes(counts: Counter, where: str) -> list[str]:
    return [_NOTES[k].format(n=n, where=where) for k, n in counts.items() if n]
