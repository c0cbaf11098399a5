"""Entity vocabulary from link targets, and DaLUKE-style auto-annotation of entity mentions.

`EntityVocab` is built once per corpus from link-target counts and the wiki's redirects.
`AutoAnnotator` then finds further mentions of vocabulary entities in plain text the way
DaLUKE does (Nielsen et al., "DaLUKE", "Auto-annotated entities"): at every word start the
next n characters, n from `max_chars` down to `min_chars`, are compared case-insensitively
with the entity names; a match covers every word those characters touch, and the cursor
jumps to the next word start after it. The spans are precomputed at corpus-build time, so
salient-span masking never runs string matching or NER inside the training loop.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from ralm.atomic import write_text_atomic
from ralm.corpus.types import LinkSpan, Span
from ralm.errors import CorpusError

__all__ = [
    "AutoAnnotator",
    "EntityVocab",
    "auto_annotate",
    "drop_overlapping",
    "entity_name",
    "fold_case",
    "link_spans",
    "resolve_redirect",
]

MAX_REDIRECT_DEPTH = 10

# A word start: an alphanumeric character (str.isalnum) whose predecessor is not one, or
# the text's first character when it is alphanumeric. `[^\W_]` is exactly str.isalnum.
_WORD_START = re.compile(r"(?<![^\W_])[^\W_]")
# A trailing disambiguation: "Mercury (planet)" -> "Mercury".
_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")

_VOCAB_HEADER = ("id", "title", "count", "alias_of")


# --------------------------------------------------------------------------- helpers


def _fold_char(c: str) -> str:
    low = c.lower()
    return low if len(low) == 1 else c


def fold_case(s: str) -> str:
    """Lower-case `s` without changing its length, so offsets into the folded text are offsets
    into `s`. Characters whose lower case is longer ("İ") are kept as they are, and the
    context-dependent final sigma is folded to "σ"."""
    low = s.lower()
    if len(low) != len(s):
        low = "".join(_fold_char(c) for c in s)
    if "ς" in low:
        low = low.replace("ς", "σ")
    return low


def entity_name(title: str) -> str:
    """The surface name matched for an entity title: the title without a trailing
    parenthesised disambiguation ("Mercury (planet)" -> "Mercury"), stripped."""
    stripped = _DISAMBIGUATION.sub("", title).strip()
    return stripped if stripped else title.strip()


def resolve_redirect(title: str, redirects: Mapping[str, str], max_depth: int = MAX_REDIRECT_DEPTH) -> str:
    """Follow `redirects` from `title` to the title that is no redirect.

    A chain longer than `max_depth` stops at the title reached after `max_depth` hops. A cycle
    (A -> B -> A) has no article at its end; every title on it, and every title that leads
    into it, resolves to the lexicographically smallest title on the cycle, so all of them
    share one canonical title whatever the starting point.
    """
    path = [title]
    seen = {title: 0}
    cur = title
    for _ in range(max_depth):
        nxt = redirects.get(cur)
        if nxt is None or nxt == cur:
            return cur
        if nxt in seen:
            return min(path[seen[nxt] :])
        seen[nxt] = len(path)
        path.append(nxt)
        cur = nxt
    return cur


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


_UNESCAPE = re.compile(r"\\(.)")
_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    return _UNESCAPE.sub(lambda m: _UNESCAPES.get(m.group(1), m.group(0)), s)


# --------------------------------------------------------------------------- vocabulary


class EntityVocab:
    """Entities (canonical, redirect-resolved link targets) with ids, counts and aliases.

    titles: canonical titles in id order (descending count, then title).
    counts: canonical title -> summed link count.
    aliases: redirect title -> canonical title, for redirects that lead to a kept entity.
    """

    def __init__(self, titles: Iterable[str], counts: Mapping[str, int], aliases: Mapping[str, str]):
        self.titles: list[str] = list(titles)
        self.counts: dict[str, int] = {t: int(counts[t]) for t in self.titles}
        self._ids: dict[str, int] = {t: i for i, t in enumerate(self.titles)}
        if len(self._ids) != len(self.titles):
            raise ValueError("EntityVocab titles must be unique")
        self.aliases: dict[str, str] = {
            a: c for a, c in sorted(aliases.items()) if c in self._ids and a not in self._ids
        }

    @classmethod
    def build(
        cls, counts: Mapping[str, int], redirects: Mapping[str, str], *, min_count: int = 1
    ) -> EntityVocab:
        """Resolve each link target in `counts` through `redirects` (chains followed, cycles
        stopped, see `resolve_redirect`), sum the counts per canonical title, keep those with a
        sum >= `min_count`, and number them by descending count, then title."""
        summed: dict[str, int] = {}
        for target, n in counts.items():
            canon = resolve_redirect(target, redirects)
            summed[canon] = summed.get(canon, 0) + int(n)
        kept = sorted((t for t, n in summed.items() if n >= min_count), key=lambda t: (-summed[t], t))
        kept_set = set(kept)
        aliases: dict[str, str] = {}
        for source in redirects:
            if source in kept_set:
                continue
            canon = resolve_redirect(source, redirects)
            if canon in kept_set and canon != source:
                aliases[source] = canon
        return cls(kept, summed, aliases)

    def __len__(self) -> int:
        return len(self.titles)

    def __contains__(self, title: object) -> bool:
        return isinstance(title, str) and (title in self._ids or title in self.aliases)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EntityVocab):
            return NotImplemented
        return self.titles == other.titles and self.counts == other.counts and self.aliases == other.aliases

    def __repr__(self) -> str:
        return f"EntityVocab({len(self.titles)} entities, {len(self.aliases)} aliases)"

    def resolve(self, title: str) -> str:
        """The canonical title of an entity or of one of its aliases; any other title unchanged."""
        return self.aliases.get(title, title)

    def id_of(self, title: str) -> int | None:
        """The id of an entity, looked up by its canonical title or an alias; None if unknown."""
        return self._ids.get(self.aliases.get(title, title))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write a UTF-8 TSV with the header `id title count alias_of`: one row per entity in id
        order (alias_of empty), then one row per alias (id of its entity, count empty). Tabs,
        newlines and backslashes in titles are backslash-escaped. The write is atomic."""
        path = Path(path)
        lines = ["\t".join(_VOCAB_HEADER)]
        for i, t in enumerate(self.titles):
            lines.append(f"{i}\t{_escape(t)}\t{self.counts[t]}\t")
        for a, c in self.aliases.items():
            lines.append(f"{self._ids[c]}\t{_escape(a)}\t\t{_escape(c)}")
        write_text_atomic(path, "\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EntityVocab:
        """Read a file written by `save`; a missing or malformed file raises CorpusError."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CorpusError(f"entity vocabulary {path} does not exist; build it first") from None
        except (OSError, UnicodeDecodeError) as e:
            raise CorpusError(f"cannot read entity vocabulary {path}: {e}") from None
        rows = text.split("\n")
        if rows and rows[-1] == "":
            rows.pop()
        if not rows or tuple(rows[0].split("\t")) != _VOCAB_HEADER:
            raise CorpusError(
                f"{path} is not an entity vocabulary (expected the header {' '.join(_VOCAB_HEADER)!r})"
            )
        titles: list[str] = []
        counts: dict[str, int] = {}
        aliases: dict[str, str] = {}
        for lineno, row in enumerate(rows[1:], start=2):
            fields = row.split("\t")
            try:
                if len(fields) != 4:
                    raise ValueError(f"{len(fields)} fields instead of 4")
                id_, title, count, alias_of = int(fields[0]), _unescape(fields[1]), fields[2], fields[3]
                if alias_of:
                    canon = _unescape(alias_of)
                    if id_ >= len(titles) or titles[id_] != canon:
                        raise ValueError(f"alias of {canon!r} has id {id_}, which is not that entity")
                    aliases[title] = canon
                else:
                    if aliases:
                        raise ValueError("entity row after alias rows")
                    if id_ != len(titles):
                        raise ValueError(f"entity id {id_} out of order (expected {len(titles)})")
                    if title in counts:
                        raise ValueError(f"duplicate entity {title!r}")
                    titles.append(title)
                    counts[title] = int(count)
            except ValueError as e:
                raise CorpusError(f"{path}:{lineno}: malformed entity vocabulary row ({e})") from None
        return cls(titles, counts, aliases)


# --------------------------------------------------------------------------- auto-annotation


class AutoAnnotator:
    """DaLUKE auto-annotation: case-insensitive longest-first string matching at word starts.

    Names: every canonical title and, with `include_aliases`, every alias, each without a
    trailing parenthesised disambiguation; names whose length is outside
    [`min_chars`, `max_chars`] are never matched. When several entities share a (lower-cased)
    name, a canonical title beats an alias and then the lower entity id (more links) wins.

    `annotate(text)`: at each word start i (an alphanumeric char not preceded by one), for n
    from `max_chars` down to `min_chars`, if `text[i:i+n]` lower-cased is a name, the span
    starts at i and ends at the end of the word holding the last matched char ("Danmark"
    annotates "Danmarks"), and the scan continues at the first word start at or after the span
    end; without a match it continues at the next word start. Spans have source "auto" and the
    canonical title as label.

    Speed: a set of the names' `min_chars`-prefixes rejects most word starts with one lookup,
    and only name lengths that occur with that prefix are tried, longest first.
    """

    def __init__(
        self, vocab: EntityVocab, *, min_chars: int = 5, max_chars: int = 48, include_aliases: bool = True
    ):
        if min_chars < 1 or max_chars < min_chars:
            raise ValueError(f"need 1 <= min_chars <= max_chars, got {min_chars}, {max_chars}")
        self.vocab = vocab
        self.min_chars = min_chars
        self.max_chars = max_chars
        self.include_aliases = include_aliases
        # folded name -> (rank, canonical title); rank orders titles before aliases, then by id.
        best: dict[str, tuple[tuple[int, int], str]] = {}

        def add(name_source: str, canon: str, is_alias: bool) -> None:
            name = fold_case(entity_name(name_source))
            if not (min_chars <= len(name) <= max_chars):
                return
            rank = (int(is_alias), vocab._ids[canon])
            cur = best.get(name)
            if cur is None or rank < cur[0]:
                best[name] = (rank, canon)

        for t in vocab.titles:
            add(t, t, False)
        if include_aliases:
            for a, c in vocab.aliases.items():
                add(a, c, True)
        self.names: dict[str, str] = {name: canon for name, (_, canon) in best.items()}
        lengths: dict[str, set[int]] = {}
        for name in self.names:
            lengths.setdefault(name[:min_chars], set()).add(len(name))
        # prefix -> the name lengths that start with it, longest first
        self._lengths: dict[str, tuple[int, ...]] = {
            p: tuple(sorted(ls, reverse=True)) for p, ls in lengths.items()
        }

    def __len__(self) -> int:
        return len(self.names)

    def annotate(self, text: str) -> list[Span]:
        """Auto-annotated entity spans of `text`, sorted and non-overlapping."""
        if not self.names or len(text) < self.min_chars:
            return []
        low = fold_case(text)
        size = len(text)
        k = self.min_chars
        lengths = self._lengths
        names = self.names
        spans: list[Span] = []
        resume = 0  # the scan position: word starts before it are skipped
        for m in _WORD_START.finditer(text):
            i = m.start()
            if i < resume:
                continue
            cands = lengths.get(low[i : i + k])
            if cands is None:
                continue
            for n in cands:
                end = i + n
                if end > size:
                    continue
                canon = names.get(low[i:end])
                if canon is None:
                    continue
                if text[end - 1].isalnum():
                    while end < size and text[end].isalnum():
                        end += 1
                spans.append(Span(i, end, "auto", canon))
                resume = end
                break
        return spans

    __call__ = annotate


def drop_overlapping(spans: Iterable[Span], existing: Iterable[Span]) -> list[Span]:
    """The spans of `spans` (in their order) that overlap none of `existing` (half-open)."""
    ex = sorted((s.start, s.end) for s in existing if s.end > s.start)
    if not ex:
        return list(spans)
    starts = [s for s, _ in ex]
    # max_end[j]: the largest end among the first j+1 existing spans (sorted by start)
    max_end: list[int] = []
    top = -1
    for _, e in ex:
        top = max(top, e)
        max_end.append(top)
    out = []
    for sp in spans:
        j = bisect.bisect_left(starts, sp.end) - 1  # existing spans starting before sp.end
        if j >= 0 and max_end[j] > sp.start:
            continue
        out.append(sp)
    return out


def auto_annotate(text: str, annotator: AutoAnnotator, *, existing: Iterable[Span] = ()) -> list[Span]:
    """`annotator.annotate(text)` without the spans that overlap an `existing` span: gold
    link spans win over auto-annotation. The existing spans are not included in the result."""
    return drop_overlapping(annotator.annotate(text), existing)


def link_spans(links: Iterable[LinkSpan]) -> list[Span]:
    """`LinkSpan`s as `Span`s with source "link" and the link target as label."""
    return [Span(lk.start, lk.end, "link", lk.target) for lk in links]
