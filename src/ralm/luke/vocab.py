"""The entity vocabulary of a LUKE/DaLUKE run: the ids its entity embedding table and prediction head use.

Ids 0, 1, 2 are [PAD], [UNK] and [MASK] (Hugging Face LUKE's convention, so an export is a
weight renaming); ids 3.. are the most frequent entities of a DocStore, counted over the entity
spans of the chosen sources ("link": the article authors' links, "auto": DaLUKE's string-match
annotation; both stored per chunk at corpus-build time with the entity title as the span label),
ordered by count (descending), then title, so the same store and sources always give the same ids.

`name_ids()` maps each entity's surface name, case-folded as DaLUKE's auto-annotation folds it
(`ralm.corpus.entities.fold_case` of `entity_name`: no parenthesised disambiguation), to its id, so
`ralm luke ner --link-entities` gives a candidate span the id of the entity its words name.

Saved with the run as entity_vocab.tsv: a header `id title count`, one row per id, the three
special tokens first (count 0); tabs, newlines and backslashes in titles are backslash-escaped as
in the corpus's entities.tsv. Left out: redirects and aliases (the DocStore build already
resolved link targets to canonical titles) and multilingual entity ids (mLUKE).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ralm.atomic import write_text_atomic
from ralm.corpus.entities import _escape, _unescape, entity_name, fold_case
from ralm.errors import RalmError

__all__ = ["MASK_ID", "PAD_ID", "SPECIAL_TOKENS", "UNK_ID", "VOCAB_FILE", "EntityVocabulary"]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[MASK]")
PAD_ID, UNK_ID, MASK_ID = 0, 1, 2
VOCAB_FILE = "entity_vocab.tsv"  # in every `ralm luke pretrain` run directory
_HEADER = ("id", "title", "count")


class EntityVocabulary:
    """[PAD]/[UNK]/[MASK], then entities by descending count and title.

    `titles`: the entities (without the special tokens) in id order, ids 3, 4, ...;
    `counts`: their counts (same order). `id(title)` gives 1 ([UNK]) for an unknown title.
    Example: from_counts({"Oslo": 3, "Bergen": 3, "Norway": 5}, size=5) -> ids
    [PAD]=0 [UNK]=1 [MASK]=2 Norway=3 Bergen=4 (Oslo dropped: size counts the special tokens).
    """

    def __init__(self, titles: Iterable[str], counts: Iterable[int] | None = None) -> None:
        self._titles: list[str] = list(SPECIAL_TOKENS) + list(titles)
        n = len(self._titles) - len(SPECIAL_TOKENS)
        self._counts: list[int] = [0] * len(SPECIAL_TOKENS) + (
            [int(c) for c in counts] if counts is not None else [0] * n
        )
        if len(self._counts) != len(self._titles):
            raise ValueError(f"{n} titles but {len(self._counts) - len(SPECIAL_TOKENS)} counts")
        self._ids: dict[str, int] = {t: i for i, t in enumerate(self._titles)}
        if len(self._ids) != len(self._titles):
            raise ValueError("entity titles must be unique and differ from [PAD], [UNK], [MASK]")

    # -- building
    @classmethod
    def from_counts(cls, counts: Mapping[str, int], size: int, min_count: int = 1) -> EntityVocabulary:
        """The `size - 3` most frequent titles of `counts` (count desc, then title) after the specials.

        size: the whole vocabulary's size, special tokens included (the entity embedding table's
        rows); fewer entities than that gives a smaller vocabulary. min_count: only titles with at
        least this many mentions (an entity seen once a corpus cannot be learned from it). Titles
        spelled like a special token are left out (they would be ambiguous in the saved file).
        Example: from_counts({"Oslo": 3, "Bergen": 1}, size=10, min_count=2) -> [PAD] [UNK] [MASK] Oslo.
        """
        if min_count < 1:
            raise RalmError(f"entity_min_mentions={min_count}: must be >= 1")
        if size <= len(SPECIAL_TOKENS):
            raise RalmError(
                f"entity_vocab_size={size}: must be > {len(SPECIAL_TOKENS)} ([PAD], [UNK], [MASK] + entities)"
            )
        special = set(SPECIAL_TOKENS)
        ranked = sorted(
            ((t, int(c)) for t, c in counts.items() if t not in special and int(c) >= min_count),
            key=lambda tc: (-tc[1], tc[0]),
        )[: size - len(SPECIAL_TOKENS)]
        return cls([t for t, _ in ranked], [c for _, c in ranked])

    @classmethod
    def from_docstore(cls, store, size: int, sources: Sequence[str]) -> EntityVocabulary:
        """The vocabulary of a DocStore (a `DocStore` or its directory) over the spans of `sources`.

        RalmError (one line naming the store and the sources) when it has no such span.
        """
        from ralm.luke.annotations import EntitySpans

        spans = EntitySpans.from_docstore(store, sources)
        spans.require_spans()
        return cls.from_counts(spans.title_counts(), size)

    # -- lookup
    def __len__(self) -> int:
        return len(self._titles)

    def id(self, title: str) -> int:
        """The id of `title`; UNK_ID (1) when it is not in the vocabulary."""
        return self._ids.get(title, UNK_ID)

    def ids(self, titles: Iterable[str]) -> list[int]:
        """`id` of each title."""
        get = self._ids.get
        return [get(t, UNK_ID) for t in titles]

    def title(self, i: int) -> str:
        """The title (or special token) with id `i`."""
        return self._titles[int(i)]

    def __contains__(self, title: object) -> bool:
        return isinstance(title, str) and title in self._ids and self._ids[title] >= len(SPECIAL_TOKENS)

    def name_ids(self) -> dict[str, int]:
        """Folded surface name -> entity id, for exact-match entity linking of word spans.

        The key of a title is `fold_case(entity_name(title))`, the name `ralm.corpus.entities.AutoAnnotator`
        matches (case-insensitive, "Mercury (planet)" named "Mercury"); when two titles share a name the
        lower id (the more frequent entity) wins, as in the auto-annotator. Special tokens are left out.
        Example: EntityVocabulary(["Oslo", "oslo (city)", "Bergen"]).name_ids() -> {"oslo": 3, "bergen": 5}.
        """
        out: dict[str, int] = {}
        for i, title in enumerate(self.titles, start=len(SPECIAL_TOKENS)):
            out.setdefault(fold_case(entity_name(title)), i)
        return out

    @property
    def titles(self) -> list[str]:
        """The entities in id order, without the special tokens."""
        return self._titles[len(SPECIAL_TOKENS) :]

    @property
    def counts(self) -> list[int]:
        """The entities' counts in id order, without the special tokens."""
        return self._counts[len(SPECIAL_TOKENS) :]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EntityVocabulary):
            return NotImplemented
        return self._titles == other._titles and self._counts == other._counts

    def __repr__(self) -> str:
        return f"EntityVocabulary({len(self)} ids: 3 special + {len(self) - 3} entities)"

    def difference(self, other: EntityVocabulary) -> str | None:
        """None when equal, else a short phrase saying where `other` first differs from this one."""
        if self == other:
            return None
        if len(self) != len(other):
            return f"{len(other)} ids instead of {len(self)}"
        for i, (a, b) in enumerate(zip(self._titles, other._titles, strict=True)):
            if a != b:
                return f"id {i} is {b!r} instead of {a!r}"
        i = next(i for i, (a, b) in enumerate(zip(self._counts, other._counts, strict=True)) if a != b)
        return f"the count of {self._titles[i]!r} is {other._counts[i]} instead of {self._counts[i]}"

    # -- files
    def save(self, path: str | os.PathLike) -> None:
        """Write the TSV (see the module docstring) atomically: a temp file renamed into place."""
        path = Path(path)
        lines = ["\t".join(_HEADER)]
        lines += [
            f"{i}\t{_escape(t)}\t{c}" for i, (t, c) in enumerate(zip(self._titles, self._counts, strict=True))
        ]
        write_text_atomic(path, "\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> EntityVocabulary:
        """Read a file written by `save`; RalmError naming the file (and line) when it is not one."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise RalmError(
                f"{path}: no such entity vocabulary; it is written by `ralm luke pretrain`"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RalmError(f"{path}: cannot read the entity vocabulary ({exc})") from None
        rows = text.split("\n")
        if rows and rows[-1] == "":
            rows.pop()
        if not rows or tuple(rows[0].split("\t")) != _HEADER:
            raise RalmError(f"{path}: not an entity vocabulary (expected the header {' '.join(_HEADER)!r})")
        titles: list[str] = []
        counts: list[int] = []
        for lineno, row in enumerate(rows[1:], start=2):
            fields = row.split("\t")
            try:
                if len(fields) != 3:
                    raise ValueError(f"{len(fields)} fields instead of 3")
                i, title, count = int(fields[0]), _unescape(fields[1]), int(fields[2])
                if i != len(titles):
                    raise ValueError(f"id {i} out of order (expected {len(titles)})")
                if i < len(SPECIAL_TOKENS) and title != SPECIAL_TOKENS[i]:
                    raise ValueError(f"id {i} must be {SPECIAL_TOKENS[i]}, not {title!r}")
            except ValueError as exc:
                raise RalmError(f"{path}:{lineno}: malformed entity vocabulary row ({exc})") from None
            titles.append(title)
            counts.append(count)
        if len(titles) < len(SPECIAL_TOKENS):
            raise RalmError(f"{path}: the entity vocabulary lacks the rows {', '.join(SPECIAL_TOKENS)}")
        try:
            return cls(titles[len(SPECIAL_TOKENS) :], counts[len(SPECIAL_TOKENS) :])
        except ValueError as exc:
            raise RalmError(f"{path}: {exc}") from None
