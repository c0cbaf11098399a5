"""Hugging Face `datasets` rows: Arrow (`save_to_disk`), Parquet, and JSON lines with datasets' column names.

    ner, pos       "tokens" (or "words") and the task's tag column: ner "ner_tags"/"tags"/"ner",
                   pos "upos"/"pos_tags"/"tags"/"pos"; each tag a name ("B-PER") or a ClassLabel id (1)
    extractive-qa  "question", "context", "answers" = {"text": [...], "answer_start": [...]} (the
                   layout of datasets' SQuAD), "id" and "title" optional
    open-qa        "question" and "answers" (a list, or {"text": [...]}) or "answer"
    classify       "text" (or "sentence") and "label" (a name, or a ClassLabel id)

Ids become names through the dataset's features (`ClassLabel` "names"): the schema metadata that
`datasets` writes into every Arrow and Parquet file, else a `dataset_info.json` beside the file (a
`save_to_disk` folder has one), else the names a user gives (`read_label_names`). Arrow and Parquet
are read with pyarrow, so `datasets` is not needed at run time. Answer offsets are checked and
repaired as SQuAD's are (`formats.squad.answer_start`).

Deliberately left out: the Hub (no downloads), loading scripts, streaming, and columns under other
names (rename them with datasets' `rename_column` first).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from ralm.errors import RalmError
from ralm.formats.common import load_records, native_id, read_text
from ralm.formats.conll import check_iob2
from ralm.formats.openqa import openqa_from_records
from ralm.formats.squad import answer_start
from ralm.formats.types import QAExample, TaggingExample, TextExample

TABLE_SUFFIXES = (".parquet", ".arrow")
TOKEN_COLUMNS = ("tokens", "words")
TAG_COLUMNS = {"ner": ("ner_tags", "tags", "ner"), "pos": ("upos", "pos_tags", "tags", "pos")}
TEXT_COLUMNS = ("text", "sentence")
LABEL_COLUMNS = ("label", "labels")
INFO_FILE = "dataset_info.json"  # written by save_to_disk beside the Arrow shards
META_FILES = frozenset({INFO_FILE, "state.json", "dataset_dict.json"})  # save_to_disk's bookkeeping


def is_table(path: Path) -> bool:
    """A Parquet or Arrow file, by name or by its first bytes: `is_table(Path("train.parquet")) is True`."""
    if path.suffix.lower() in TABLE_SUFFIXES:
        return True
    try:
        with path.open("rb") as f:
            magic = f.read(8)
    except OSError:
        return False
    # Parquet starts with PAR1; the Arrow file format with ARROW1; datasets' Arrow stream with 0xFFFFFFFF
    return magic[:4] == b"PAR1" or magic[:6] == b"ARROW1" or magic[:4] == b"\xff\xff\xff\xff"


def looks_like_records(head: str) -> bool:
    """JSON lines or a JSON list of objects (not a CoNLL file whose first token is "["):
    `looks_like_records('{"tokens": ["Hej"]}') is True`, `looks_like_records("[\\tO") is False`."""
    text = head.lstrip()
    return text.startswith("{") or (text.startswith("[") and text[1:].lstrip().startswith("{"))


# ----------------------------------------------------------------------------- features


def _features_of_metadata(metadata: dict[bytes, bytes] | None) -> dict | None:
    """The features datasets stores in a table's schema metadata (b"huggingface"), None when absent."""
    raw = (metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    try:
        info = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    features = (info.get("info") or {}).get("features") if isinstance(info, dict) else None
    return features if isinstance(features, dict) else None


def _features_beside(path: Path) -> dict | None:
    """The features of the `dataset_info.json` beside `path` (save_to_disk writes one), if any."""
    info = path.parent / INFO_FILE
    if not info.is_file():
        return None
    try:
        features = json.loads(info.read_text(encoding="utf-8")).get("features")
    except (OSError, ValueError, AttributeError):
        return None
    return features if isinstance(features, dict) else None


def class_names(feature: Any) -> list[str] | None:
    """The ClassLabel names inside a serialized feature, through lists and sequences, else None.

    Example: `class_names({"feature": {"names": ["O", "B-PER"], "_type": "ClassLabel"}, "_type": "List"})
    == ["O", "B-PER"]`.
    """
    if isinstance(feature, list) and len(feature) == 1:
        return class_names(feature[0])
    if not isinstance(feature, dict):
        return None
    if feature.get("_type") == "ClassLabel" and isinstance(feature.get("names"), list):
        return [str(n) for n in feature["names"]]
    return class_names(feature.get("feature")) if "feature" in feature else None


def read_label_names(path: str | Path) -> list[str]:
    """Label names from a file: one name a line (id = line number from 0), a JSON list of names, or a
    `dataset_info.json` (its first ClassLabel column). Example: a file "O\\nB-PER\\nI-PER\\n" ->
    ["O", "B-PER", "I-PER"]."""
    path = Path(path)
    text = read_text(path, Counter()).strip()
    if not text:
        raise RalmError(f"{path}: the labels file is empty; give one label name a line")
    if text[0] in "[{":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RalmError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg}); fix the labels file") from None
        if isinstance(obj, dict):
            features = obj.get("features", obj)
            found = [class_names(f) for f in features.values()] if isinstance(features, dict) else []
            names = next((n for n in found if n), None)
        else:
            names = [str(n) for n in obj] if isinstance(obj, list) else None
        if not names:
            raise RalmError(
                f"{path}: no label names found (expected a JSON list of names or a dataset_info.json "
                "with a ClassLabel feature); give one label name a line"
            )
        return names
    return [line.strip() for line in text.splitlines() if line.strip()]


# ----------------------------------------------------------------------------- rows


def _table_rows(path: Path) -> tuple[list[tuple[str, dict]], dict | None]:
    """(where, row) pairs and features of a Parquet or Arrow (stream or file format) table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if path.suffix.lower() == ".parquet" or path.read_bytes()[:4] == b"PAR1":
            table = pq.read_table(path)
        else:
            with pa.memory_map(str(path)) as source:
                try:
                    table = pa.ipc.open_stream(source).read_all()
                except pa.ArrowInvalid:
                    source.seek(0)
                    table = pa.ipc.open_file(source).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise RalmError(
            f"{path}: not a readable Parquet or Arrow table ({str(exc).splitlines()[0]}); check the file"
        ) from None
    features = _features_of_metadata(table.schema.metadata) or _features_beside(path)
    return [(f"{path}: row {i}", row) for i, row in enumerate(table.to_pylist())], features


def read_rows(path: Path, text: str | None = None) -> tuple[list[tuple[str, dict]], dict | None]:
    """(where, row) pairs and the features (None when unknown) of a table or a JSON/JSONL file."""
    if is_table(path):
        return _table_rows(path)
    if text is None:
        text = read_text(path, Counter())
    return load_records(path, text), _features_beside(path)


def _column(rows: list[tuple[str, dict]], names: tuple[str, ...], path: Path, task: str, what: str) -> str:
    """The first of `names` that the first row holds; RalmError naming the columns found otherwise."""
    first = rows[0][1]
    for name in names:
        if name in first:
            return name
    found = ", ".join(repr(k) for k in list(first)[:12]) or "none"
    raise RalmError(
        f"{path}: read as Hugging Face rows for {task}, which need a {what} column ({' or '.join(map(repr, names))}); "
        f"the rows have {found}; rename the column (datasets' rename_column) or give another file"
    )


def _namer(names: list[str] | None, column: str, path: Path):
    """A function mapping one label (a name, or a ClassLabel id) to its name; ids need `names`,
    except classification labels, which stay as written ("0") without them."""

    def by_id(i: int, where: str) -> str:
        if not 0 <= i < len(names):
            raise RalmError(f'{where}: "{column}" id {i} is not one of the {len(names)} label names')
        return names[i]

    def name(value: Any, where: str) -> str:
        if isinstance(value, str):
            return by_id(int(value), where) if names and value.isdigit() else value
        if not isinstance(value, int) or isinstance(value, bool):
            raise RalmError(f'{where}: "{column}" holds {value!r}; expected a label name or a class id')
        if names:
            return by_id(value, where)
        if column in LABEL_COLUMNS:
            return str(value)
        raise RalmError(
            f'{path}: "{column}" holds class ids ({value}) and the file names no labels; pass '
            "--labels FILE (one name a line, in id order) or write the names instead of the ids"
        )

    return name


def _tagging(path, rows, features, task: str, labels: list[str] | None) -> list:
    tok_col = _column(rows, TOKEN_COLUMNS, path, task, "token list")
    tag_col = _column(rows, TAG_COLUMNS[task], path, task, "tag list")
    name = _namer(labels or class_names((features or {}).get(tag_col)), tag_col, path)
    out = []
    for where, row in rows:
        tokens, tags = row.get(tok_col), row.get(tag_col)
        if not isinstance(tokens, list) or not isinstance(tags, list):
            raise RalmError(f'{where}: "{tok_col}" and "{tag_col}" must be lists')
        if len(tokens) != len(tags):
            raise RalmError(f"{where}: {len(tokens)} tokens but {len(tags)} tags; give one tag per token")
        names = [name(t, where) for t in tags]
        if task == "ner":
            names = [check_iob2(t, where) for t in names]
        if tokens:
            out.append(TaggingExample(native_id(row, "id"), [str(t) for t in tokens], names))
    return out


def _answers(where: str, row: dict) -> tuple[list[str], list[int]]:
    """(texts, starts) of a datasets SQuAD "answers" value: a dict of lists, or a list of dicts."""
    value = row.get("answers")
    if isinstance(value, dict):
        texts, starts = value.get("text") or [], value.get("answer_start") or []
    elif isinstance(value, list) and all(isinstance(a, dict) for a in value):
        texts = [a.get("text") for a in value]
        starts = [a.get("answer_start") for a in value]
    else:
        raise RalmError(f'{where}: "answers" must be {{"text": [...], "answer_start": [...]}} (SQuAD layout)')
    if len(texts) != len(starts) or not all(isinstance(t, str) and t for t in texts):
        raise RalmError(f'{where}: "answers" needs one non-empty "text" per "answer_start"')
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in starts):
        raise RalmError(f'{where}: "answer_start" must hold integer character offsets')
    return texts, starts


def _extractive(path, rows, counts: Counter) -> list:
    for col, what in (("question", "question"), ("context", "context"), ("answers", "answers")):
        _column(rows, (col,), path, "extractive-qa", what)
    out = []
    for where, row in rows:
        question, context = row.get("question"), row.get("context")
        if not isinstance(question, str) or not isinstance(context, str):
            raise RalmError(f'{where}: "question" and "context" must be strings')
        texts, starts = _answers(where, row)
        qid = native_id(row, "id")
        starts = [
            answer_start(context, t, s, qid or where, path, counts)
            for t, s in zip(texts, starts, strict=True)
        ]
        title = row.get("title") if isinstance(row.get("title"), str) else ""
        out.append(QAExample(qid, question, context, texts, starts, title))
    return out


def _classify(path, rows, features, labels: list[str] | None) -> list:
    text_col = _column(rows, TEXT_COLUMNS, path, "classify", "text")
    label_col = _column(rows, LABEL_COLUMNS, path, "classify", "label")
    name = _namer(labels or class_names((features or {}).get(label_col)), label_col, path)
    out = []
    for where, row in rows:
        if not isinstance(row.get(text_col), str):
            raise RalmError(f'{where}: "{text_col}" must be a string')
        out.append(
            TextExample(native_id(row, "id", "sent_id"), row[text_col], name(row.get(label_col), where))
        )
    return out


def read_hf(
    path: Path, text: str | None, task: str, counts: Counter, labels: list[str] | None = None
) -> list:
    """The examples of one Parquet/Arrow table or JSON-lines file with datasets' column names.

    labels: names for class ids (`read_label_names`), used before the file's own features.
    Example: a JSONL line {"tokens": ["Anne"], "ner_tags": [1]} with labels ["O", "B-PER"] ->
    [TaggingExample("", ["Anne"], ["B-PER"])].
    """
    rows, features = read_rows(path, text)
    if not rows:
        return []
    if task in TAG_COLUMNS:
        return _tagging(path, rows, features, task, labels)
    if task == "extractive-qa":
        return _extractive(path, rows, counts)
    if task == "classify":
        return _classify(path, rows, features, labels)
    _column(rows, ("question",), path, task, "question")
    return openqa_from_records(rows, False, "auto")


def name_class_ids(examples: list, labels: list[str], where: str) -> None:
    """Replace class-id labels ("0", "1") of other readers' TextExamples/TaggingExamples by `labels`
    names, in place (for `--labels` with a classification JSONL or TSV of ids)."""
    name = _namer(labels, "label", Path(where))
    for ex in examples:
        if isinstance(ex, TextExample):
            ex.label = name(ex.label, where)
        elif isinstance(ex, TaggingExample):
            ex.labels = [name(t, where) for t in ex.labels]
