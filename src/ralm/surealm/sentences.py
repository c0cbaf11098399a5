"""Sentences for SUREALM: read, clean, de-duplicate, id and split them by group.

SUREALM (Wang & Tam) treats every dialogue turn as an independent sentence, keeps unique
sentences only and gives each one an id so the data store can tell its own entries apart.
Sources:

* ``--sample chitchat``: the chitchat-dataset conversations; every message is a sentence and
  its conversation is its group.
* JSONL: one object per line with ``text`` and optionally ``group`` (a conversation, a document)
  and ``split`` (``train`` / ``valid`` / ``test``, to keep a split of your own).
* Plain text: one sentence per line; a blank line starts a new group (so a file of
  paragraphs or dialogues separated by blank lines splits by paragraph or dialogue).

An empty JSONL text is an error (it names the line); blank lines in a text file separate groups.

Splits are drawn per group (seeded), so no conversation has sentences in two splits: valid and
test get `fractions` of the groups (rounded; at least one group each from 3 groups up), train the
rest (`SPLITS_HOW`). A text file without blank lines is a single group, so all of it is train and
valid/test are empty; `ralm surealm datastore` warns about an empty valid or test split, `train`
refuses a data store without valid sentences and `evaluate` an empty split. Duplicates
are removed globally after grouping: the first occurrence (in file order) keeps the sentence and
its group, so a sentence never appears in two splits either. Whitespace is normalised
(runs of spaces become one; leading/trailing space is dropped).

Left out: sentence splitting inside a turn (a turn is one sentence, as in the paper) and
language-specific normalisation (case is kept; the tokenizer decides).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ralm.errors import RalmError, check_json_text

SPLITS = ("train", "valid", "test")
_SPACE = re.compile(r"\s+")

# How sentences fall into groups and groups into splits: in `--help`, warnings and errors.
SPLITS_HOW = (
    "splits are drawn by whole groups: --valid-frac and --test-frac of the groups (rounded; at least "
    "one group each from 3 groups up), the rest train; a text file starts a new group at each blank "
    "line, so a file without blank lines is one group; a JSONL line is a group of its own unless "
    'lines share a "group", and its "split" fixes its split; --sample chitchat: one group per '
    "conversation"
)
# What fills an empty valid or test split.
FILL_SPLITS = (
    'separate dialogues or paragraphs by blank lines, give JSONL with "group" or "split" fields, '
    "or raise --valid-frac/--test-frac"
)

__all__ = [
    "FILL_SPLITS",
    "SPLITS",
    "SPLITS_HOW",
    "SentenceSet",
    "empty_split",
    "read_sentences",
    "split_groups",
]


def empty_split(split: str, sources: Iterable[str], groups: int) -> str:
    """The start of a message about an empty `split` of sentences read from `sources` in `groups` groups."""
    src = ", ".join(str(s) for s in sources) or "the input"
    return (
        f"the {split} split is empty: {src} gave {groups} group{'' if groups == 1 else 's'} and {SPLITS_HOW}"
    )


@dataclass
class SentenceSet:
    """Unique sentences with their group and split; sentence id = position in `texts`."""

    texts: list[str]
    groups: list[str]
    splits: list[str]
    sources: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def ids(self, split: str) -> np.ndarray:
        """Sentence ids of one split, ascending."""
        return np.asarray([i for i, s in enumerate(self.splits) if s == split], dtype=np.int64)

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for x in self.splits if x == s) for s in SPLITS}

    def empty_split(self, split: str) -> str:
        """The start of a message saying that `split` is empty, how groups and splits are formed."""
        return empty_split(split, self.sources, len(set(self.groups)))


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _from_chitchat() -> Iterator[tuple[str, str, str | None]]:
    from ralm.samples import sample_path

    data = json.loads(sample_path("chitchat").read_text(encoding="utf-8"))
    for conv_id in sorted(data):
        for turn in data[conv_id]["messages"]:
            for m in turn:
                yield str(m.get("text", "")), conv_id, None


def _from_jsonl(path: Path) -> Iterator[tuple[str, str, str | None]]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RalmError(f"{path}:{n}: not JSON ({exc.msg}); write one object per line") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise RalmError(f'{path}:{n}: needs a "text" string (optional "group", "split")')
            check_json_text(obj, line, f"{path}:{n}")
            if not obj["text"].strip():
                raise RalmError(f'{path}:{n}: empty "text"; drop the line or give the sentence')
            split = obj.get("split")
            if split is not None and split not in SPLITS:
                raise RalmError(f"{path}:{n}: split {split!r}: use one of {', '.join(SPLITS)}")
            group = obj.get("group")
            yield obj["text"], f"{path.name}:{group if group is not None else n}", split


def _from_text(path: Path) -> Iterator[tuple[str, str, str | None]]:
    group = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                group += 1
                continue
            yield line, f"{path.name}:{group}", None


def _records(sources: Iterable[str | os.PathLike]) -> Iterator[tuple[str, str, str | None]]:
    for src in sources:
        if str(src) == "chitchat":
            yield from _from_chitchat()
            continue
        p = Path(src)
        if not p.is_file():
            raise RalmError(
                f"{p}: no such file; give a JSONL or text file of sentences, or --sample chitchat"
            )
        try:
            if p.suffix in (".jsonl", ".json"):
                yield from _from_jsonl(p)
            else:
                yield from _from_text(p)
        except UnicodeDecodeError as exc:
            raise RalmError(f"{p}: not UTF-8 text (byte {exc.start}); convert it to UTF-8") from None


def split_groups(
    groups: list[str], fractions: tuple[float, float] = (0.05, 0.05), seed: int = 0
) -> dict[str, str]:
    """Assign each distinct group to a split: valid and test get `fractions` of the groups.

    The assignment is a seeded permutation of the sorted distinct groups, so it does not depend
    on the order the sentences came in. Example: 100 groups, (0.05, 0.05) -> 90/5/5 groups.
    """
    distinct = sorted(set(groups))
    n = len(distinct)
    n_valid = int(round(fractions[0] * n))
    n_test = int(round(fractions[1] * n))
    if n >= 3 and fractions[0] > 0 and n_valid == 0:
        n_valid = 1
    if n >= 3 and fractions[1] > 0 and n_test == 0:
        n_test = 1
    order = np.random.default_rng([seed, 17]).permutation(n)
    out = {}
    for rank, i in enumerate(order):
        out[distinct[i]] = "valid" if rank < n_valid else "test" if rank < n_valid + n_test else "train"
    return out


def read_sentences(
    sources: Iterable[str | os.PathLike],
    *,
    fractions: tuple[float, float] = (0.05, 0.05),
    seed: int = 0,
    limit_groups: int | None = None,
) -> SentenceSet:
    """Unique, cleaned sentences from `sources` ("chitchat" names the sample), split by group.

    limit_groups: keep only the first N groups in source order (a smaller sample for a laptop).
    Raises RalmError when a source holds no sentence.
    """
    sources = [str(s) for s in sources]
    texts: list[str] = []
    groups: list[str] = []
    fixed: list[str | None] = []
    seen: set[str] = set()
    kept_groups: dict[str, None] = {}
    for raw, group, split in _records(sources):
        if limit_groups is not None and group not in kept_groups and len(kept_groups) >= limit_groups:
            continue
        kept_groups.setdefault(group)
        text = _clean(raw)
        if not text or text in seen:
            continue
        seen.add(text)
        texts.append(text)
        groups.append(group)
        fixed.append(split)
    if not texts:
        raise RalmError(f"{', '.join(sources)}: no sentences found; give non-empty lines or JSONL texts")
    assign = split_groups(groups, fractions, seed)
    splits = [f if f is not None else assign[g] for g, f in zip(groups, fixed, strict=True)]
    return SentenceSet(texts, groups, splits, sources)
