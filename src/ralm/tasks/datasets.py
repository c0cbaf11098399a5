"""Read task datasets from files into the examples of `ralm.formats.types`, split by file names.

`read_file` reads one file, `load_task_data` a file or a directory (train/dev/test decided from
file names, see `split_of`), `check_label_sets` refuses dev/test labels the train split lacks
and `detect_format` (`formats.detect`) picks the reader from the task, the name and the file's head. The readers
live in `ralm.formats`, one module per format family:

    squad   SQuAD v1.1 JSON, answer offsets repaired (`formats.squad`)
    conllu  CoNLL-U and NorNE's NDT files (`formats.conll`)
    conll   `token<TAB>tag` or whitespace-separated columns (`formats.conll`)
    text    classification: `<label> <text>` lines, TSV, JSONL or JSON list (`formats.text`)
    openqa  open QA: JSONL, JSON list, DPR TSV (`formats.openqa`)
    hf      Hugging Face rows: a save_to_disk folder's Arrow files, Parquet, JSON lines (`formats.hf`)

Every example gets a unique string id: the file's own ids when all are present and unique,
else the example's position in the file; files concatenated into one split get their file name
as a prefix when ids collide. Bad input ends in a one-line `RalmError` naming the file (and line).
What the readers repaired or dropped, and questions without answers dropped from train, become
notes (`read_file(..., notes=)`, `TaskData.notes`). Open-QA answers are strings or regular
expressions per example; `answers=` ("auto", "string", "regex") picks how (`formats.openqa`).

Deliberately left out: parsing the formats (`ralm.formats`), SQuAD 2 no-answer training
(such questions are kept in dev/test with no answers and dropped from train), grouping questions
by context when dev is carved out of train, and any download (Hugging Face data is read from disk with
pyarrow; the `datasets` package is not needed).
"""

from __future__ import annotations

import os
import random
import re
from collections import Counter
from pathlib import Path

from ralm.errors import RalmError
from ralm.formats.common import format_notes
from ralm.formats.detect import FORMATS, TASK_FORMATS, check_format, check_task, detect_format
from ralm.formats.hf import META_FILES
from ralm.formats.openqa import check_answer_mode
from ralm.formats.read import PathArg, _label_names, _read_one, read_file
from ralm.formats.types import (
    SPLITS,
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
    if path.name in META_FILES or (path.suffix == ".arrow" and path.name.startswith("cache-")):
        return False  # save_to_disk's bookkeeping and datasets' cache files
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


def _read_split(
    files: list[Path],
    task: str,
    fmt: str | None,
    data: TaskData,
    answers: str = "auto",
    labels: list[str] | None = None,
) -> tuple[list, list[str]]:
    """One split's examples (files concatenated) and the formats used; notes go to `data`."""
    parts, formats, counts = [], [], Counter()
    for f in files:
        examples, used, file_counts = _read_one(f, task, fmt, answers, labels)
        parts.append((f, examples))
        formats.append(used)
        counts.update(file_counts)
    data.notes.extend(format_notes(counts, _describe(files)))
    return _concat(parts), formats


def _drop_unanswered(data: TaskData) -> None:
    """Questions without answers cannot be trained on: drop them from train with a note."""
    train = data.splits.get("train", [])
    kept = [ex for ex in train if not isinstance(ex, (QAExample, OpenQAExample)) or ex.answers]
    if len(kept) == len(train):
        return
    where = _describe([Path(s) for s in data.sources["train"]])
    data.notes.extend(format_notes(Counter(unanswered=len(train) - len(kept)), where))
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
    answers: str = "auto",
    labels: PathArg | list[str] | None = None,
) -> TaskData:
    """All splits of a dataset: `path` a file (-> used as train) or a directory; train/dev/test override.

    Example: `load_task_data("data/wnut17", "ner").splits["test"][0].labels[:2] == ["O", "O"]`.
    A directory is scanned recursively; each file's split comes from its name (`split_of`), else
    from its nearest folder's name; files naming no split are train when no file names train
    (NorNE's ndt/ files), else ignored with a note. Several files of one split are concatenated in
    sorted path order. `train=`/`dev=`/`test=` (a file, or a directory whose data files all belong
    to that split) replace what the scan found. Without a dev split, `dev_fraction` of train
    (seeded shuffle; 0 turns this off) becomes dev; likewise `test_fraction` (default 0) carves a
    test split, first, when the dataset has none. A missing train split is allowed. `answers`
    ("auto", "string", "regex") says how open-QA answers match (`ralm.formats.openqa`).
    Hugging Face data: a `save_to_disk` folder (a DatasetDict's train/validation/test folders give
    the splits), Parquet or Arrow files, JSON lines with datasets' columns (`ralm.formats.hf`);
    `labels` (a list, or a file of one name a line) names class ids the files do not name.
    """
    check_task(task)
    check_answer_mode(answers)
    if fmt is not None:
        check_format(task, fmt)
    for name, frac in (("dev_fraction", dev_fraction), ("test_fraction", test_fraction)):
        if not 0 <= frac < 1:
            raise RalmError(f"{name} must be in [0, 1), not {frac}")
    names = _label_names(labels)
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
            data.splits[split], used = _read_split(files[split], task, fmt, data, answers, names)
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
