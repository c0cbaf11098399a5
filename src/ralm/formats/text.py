"""Classification files: `<label> <text>` lines, TSV, JSONL or a JSON list, read as TextExamples.

`<label> <text>` lines are SST-2's stsa files; fastText `__label__pos` labels lose the prefix, as in
gensim's pang_lee_polarity.cor. A TSV has a header naming text/sentence and label (id/sent_id
optional), or two unnamed columns (the label column is the one with fewer distinct values). JSON
objects are {"text"|"sentence", "label"}. A file whose labels are mostly distinct is refused.

Deliberately left out: CSV quoting, and nested or multi-label annotations.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ralm.errors import RalmError
from ralm.formats.common import load_records, native_id, numbered_lines
from ralm.formats.types import TextExample


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
        out.append(TextExample(native_id(obj, "id", "sent_id"), text, str(label)))
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


def read_text_examples(path: Path, text: str, task: str, counts: Counter) -> list:
    start = text.lstrip()[:1]
    if start in ("[", "{"):
        return _text_from_records(load_records(path, text))
    lines = [(lineno, line) for lineno, line in numbered_lines(text) if line.strip()]
    if "\t" in lines[0][1]:
        return _text_from_tsv(path, lines)
    return _text_from_label_first(path, lines)
