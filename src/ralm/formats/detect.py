"""Which reader a dataset file needs: `detect_format(path, task)` from the task, the name and the head.

    hf      a Parquet or Arrow table (by name or first bytes), any task; JSON lines or a JSON list of
            rows for ner, pos and extractive-qa (datasets' column names, `formats.hf`)
    squad   extractive-qa and open-qa: a JSON object with a "data" list
    conllu  ner/pos: a `.conllu` name or 10 tab-separated columns
    conll   ner/pos: token and tag columns
    text    classify: label lines, TSV, JSONL or a JSON list (`formats.text`)
    openqa  open-qa: JSONL, a JSON list or DPR TSV (`formats.openqa`)

A file that fits none of its task's formats gets one line naming the formats tried.

Deliberately left out: reading (the format modules) and directories (`ralm.tasks.datasets`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ralm.errors import RalmError
from ralm.formats.common import check_file
from ralm.formats.conll import first_token_columns
from ralm.formats.hf import is_table, looks_like_records
from ralm.formats.squad import looks_like_squad
from ralm.formats.types import TASKS

FORMATS = ("squad", "conllu", "conll", "text", "openqa", "hf")
TASK_FORMATS: dict[str, tuple[str, ...]] = {
    "extractive-qa": ("squad", "hf"),
    "ner": ("conllu", "conll", "hf"),
    "pos": ("conllu", "conll", "hf"),
    "classify": ("text", "hf"),
    "open-qa": ("openqa", "squad", "hf"),
}
# What each format looks like, for the message on a file that fits none.
_LOOKS = {
    "squad": 'SQuAD JSON (an object with a "data" list)',
    "conllu": "CoNLL-U (10 tab-separated columns)",
    "conll": "CoNLL (a token and a tag column)",
    "hf": "Hugging Face rows (Parquet, Arrow, or JSON lines with datasets' columns)",
}
_HEAD_BYTES = 1 << 16


def check_task(task: str) -> None:
    if task not in TASKS:
        raise RalmError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def check_format(task: str, fmt: str) -> str:
    if fmt not in FORMATS:
        raise RalmError(f"unknown dataset format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt not in TASK_FORMATS[task]:
        raise RalmError(f"format {fmt!r} does not fit task {task!r}; use {' or '.join(TASK_FORMATS[task])}")
    return fmt


def _head(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(_HEAD_BYTES).decode("utf-8", errors="replace").lstrip("\ufeff")
    except OSError as exc:
        raise RalmError(f"{path}: cannot read ({exc.strerror}); check the file") from None


def _none_fits(path: Path, task: str, found: str) -> RalmError:
    tried = "; ".join(_LOOKS[f] for f in TASK_FORMATS[task] if f in _LOOKS)
    return RalmError(
        f"{path}: cannot read it as {task} data ({found}); tried {tried}; convert the file or pass --format"
    )


def _columns(head: str) -> int:
    """Columns (tab-separated, else whitespace) of the first non-blank, non-comment line."""
    tabs = first_token_columns(head)
    if tabs != 1:
        return tabs
    line = next((ln for ln in head.split("\n") if ln.strip() and not ln.startswith("#")), "")
    return len(line.split())


def detect_format(path: str | os.PathLike, task: str) -> str:
    """The reader for `path` and `task`: `detect_format("wnut17train.conll", "ner") == "conll"`,
    `detect_format("train.parquet", "ner") == "hf"`, `detect_format("dane.jsonl", "ner") == "hf"`."""
    check_task(task)
    path = Path(path)
    check_file(path)
    if is_table(path):
        return "hf"
    head = _head(path)
    if task == "classify":
        return "text"
    if task in ("open-qa", "extractive-qa") and looks_like_squad(head):
        return "squad"
    if task == "open-qa":
        return "openqa"
    if looks_like_records(head):
        return "hf"
    if task == "extractive-qa":
        raise _none_fits(path, task, "it is not JSON")
    if path.suffix.lower() == ".conllu" or first_token_columns(head) == 10:
        return "conllu"
    if _columns(head) < 2:
        raise _none_fits(path, task, "its first line has one column")
    return "conll"
