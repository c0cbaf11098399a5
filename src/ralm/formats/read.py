"""Read one dataset file into examples (`ralm.formats.types`): the format picked from the task, the
name and the file's head (`detect`), or given; notes of what the reader repaired or dropped.

Below `ralm.tasks`, `ralm.retrieval` and `ralm.rag`, which all read question files with it;
splits and directories are `ralm.tasks.datasets`.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from ralm.errors import RalmError
from ralm.formats.common import ensure_unique_ids, format_notes, read_text
from ralm.formats.conll import read_conll, read_conllu
from ralm.formats.detect import check_format, check_task, detect_format
from ralm.formats.hf import is_table, name_class_ids, read_hf, read_label_names
from ralm.formats.openqa import check_answer_mode, read_openqa
from ralm.formats.squad import read_squad
from ralm.formats.text import read_text_examples

__all__ = ["read_file"]

PathArg = str | os.PathLike


_READERS = {
    "squad": read_squad,
    "conllu": read_conllu,
    "conll": read_conll,
    "text": read_text_examples,
    "openqa": read_openqa,
}


def _read_one(
    path: Path, task: str, fmt: str | None, answers: str = "auto", labels: list[str] | None = None
) -> tuple[list, str, Counter]:
    check_task(task)
    check_answer_mode(answers)
    fmt = check_format(task, fmt) if fmt is not None else detect_format(path, task)
    if fmt == "squad" and answers == "regex":
        raise RalmError(
            f"{path}: a SQuAD file's answers are spans of text, not patterns; drop --answers regex"
        )
    counts: Counter = Counter()
    text = None if fmt == "hf" and is_table(path) else read_text(path, counts)
    if text is not None and not text.strip():
        raise RalmError(f"{path}: the file is empty; give a file with examples")
    if fmt == "hf":
        examples = read_hf(path, text, task, counts, labels)
    elif fmt == "openqa":
        examples = read_openqa(path, text, task, counts, answers)
    else:
        examples = _READERS[fmt](path, text, task, counts)
        if labels and task in ("ner", "pos", "classify"):
            name_class_ids(examples, labels, str(path))
    if not examples:
        raise RalmError(
            f"{path}: no examples found (read as {fmt} for task {task}); check the file and format"
        )
    ensure_unique_ids(examples)
    return examples, fmt, counts


def _label_names(labels: PathArg | list[str] | None) -> list[str] | None:
    """Names for class ids: a list as given, or read from a file (`formats.hf.read_label_names`)."""
    if labels is None or isinstance(labels, list):
        return labels
    return read_label_names(labels)


def read_file(
    path: PathArg,
    task: str,
    fmt: str | None = None,
    *,
    notes: list[str] | None = None,
    answers: str = "auto",
    labels: PathArg | list[str] | None = None,
) -> tuple[list, str]:
    """Read one file of examples for `task` (one of types.TASKS); returns (examples, format name).

    Example: `read_file("stsa.binary.dev", "classify")` -> ([TextExample("0", "...", "1"), ...], "text").
    What the reader did (offsets repaired, tokens dropped) is appended to `notes` when given.
    answers: how open-QA answers match, "auto" (the file says), "string" or "regex".
    labels: names of class ids (a list, or a file of one name a line), for files that hold ids
    (Hugging Face ClassLabel columns) and do not name them in their features.
    """
    path = Path(path)
    examples, fmt, counts = _read_one(path, task, fmt, answers, _label_names(labels))
    if notes is not None:
        notes.extend(format_notes(counts, str(path)))
    return examples, fmt
