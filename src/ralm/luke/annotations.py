"""Entity spans of a DocStore for LUKE/DaLUKE, and how densely a corpus is annotated.

Entity spans come from the DocStore's `salient` column (computed once at corpus-build time):
source "link" (the article authors' links, label = the canonical link target) and "auto"
(DaLUKE's auto-annotation, label = the matched entity's title). `EntitySpans.from_docstore`
reads them once per run for the chosen sources, so switching sources (the paper's "+auto"
ablation) needs no rebuild; the spans of a chunk never overlap (the build merged them).
`annotation_stats` counts words, tokens and spans per source (DaLUKE reports 1 entity per 200
words from links alone). Masking and batches are in ralm.luke.data.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError


class TitleIds(Protocol):
    """What `EntitySpans.vocab_ids` needs of a vocabulary (`ralm.luke.vocab.EntityVocabulary`)."""

    def ids(self, titles: Iterable[str]) -> list[int]: ...


__all__ = [
    "ENTITY_SOURCES",
    "AnnotationStats",
    "EntitySpans",
    "annotation_rate",
    "annotation_stats",
    "check_sources",
    "open_store",
]

ENTITY_SOURCES = ("link", "auto")  # salient sources whose label is an entity title


def check_sources(sources: Sequence[str]) -> tuple[str, ...]:
    """`sources` as a tuple without repeats; RalmError for none or one that is no entity source."""
    out = tuple(dict.fromkeys(sources))
    bad = [s for s in out if s not in ENTITY_SOURCES]
    if bad or not out:
        what = f"unknown entity source(s) {', '.join(map(repr, bad))}" if bad else "no entity source"
        raise RalmError(f"{what}; choose from {', '.join(ENTITY_SOURCES)}")
    return out


def open_store(store: DocStore | str | os.PathLike) -> DocStore:
    """A DocStore, opened from its directory if need be (CorpusError, a RalmError, if it is not one)."""
    return store if isinstance(store, DocStore) else DocStore(store)


# ----------------------------------------------------------------------------- spans of a store
@dataclass
class EntitySpans:
    """The entity spans of every chunk of a DocStore for some sources, in token coordinates.

    Chunk i's spans are rows offsets[i]:offsets[i+1] of starts/ends/labels (half-open token spans
    into `store.input_ids(i)`, no special tokens; `labels` index `titles`). `source_counts` counts
    the spans of every entity source, chosen or not; `words` counts whitespace-separated words
    of the chunk texts (None unless read with `words=True`), `tokens` the chunks' tokens.
    """

    root: str
    sources: tuple[str, ...]
    offsets: np.ndarray  # (N+1,) int64
    starts: np.ndarray  # (S,) int32
    ends: np.ndarray  # (S,) int32
    labels: np.ndarray  # (S,) int32 index into titles
    titles: list[str]
    source_counts: dict[str, int]
    tokens: int
    words: int | None = None

    @classmethod
    def from_docstore(
        cls, store: DocStore | str | os.PathLike, sources: Sequence[str], *, words: bool = False
    ) -> EntitySpans:
        """Read the spans of `sources` from the `salient` column, one streaming pass in id order."""
        store = open_store(store)
        sources = check_sources(sources)
        keep = set(sources)
        counts = dict.fromkeys(ENTITY_SOURCES, 0)
        offsets = [0]
        starts: list[int] = []
        ends: list[int] = []
        labels: list[int] = []
        index: dict[str, int] = {}
        n_words = 0
        columns = ["salient", "text"] if words else ["salient"]
        for batch in store.iter_batches(1024, columns):
            for spans in batch["salient"]:
                for s in spans:
                    src = s["source"]
                    if src in counts:
                        counts[src] += 1
                    if src in keep and s["token_end"] > s["token_start"] >= 0:
                        starts.append(s["token_start"])
                        ends.append(s["token_end"])
                        labels.append(index.setdefault(s["label"], len(index)))
                offsets.append(len(starts))
            if words:
                n_words += sum(len(t.split()) for t in batch["text"])
        return cls(
            root=str(store.root),
            sources=sources,
            offsets=np.asarray(offsets, dtype=np.int64),
            starts=np.asarray(starts, dtype=np.int32),
            ends=np.asarray(ends, dtype=np.int32),
            labels=np.asarray(labels, dtype=np.int32),
            titles=list(index),
            source_counts=counts,
            tokens=int(store.manifest["counts"].get("tokens", int(store.lengths().sum()))),
            words=n_words if words else None,
        )

    def __len__(self) -> int:
        return int(self.starts.shape[0])

    @property
    def n_chunks(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def require_spans(self) -> None:
        """RalmError naming the store and the sources when they gave no entity span."""
        if len(self):
            return
        src = ", ".join(self.sources)
        if "auto" not in self.sources and self.source_counts.get("auto"):
            fix = "set auto_annotation = true to use its auto-annotated spans"
        elif "auto" in self.sources:
            fix = "build the corpus from input with links (auto-annotation needs their entity vocabulary)"
        else:
            fix = "build the corpus from input with links (a wiki dump, or JSONL with a 'links' list)"
        raise RalmError(f"{self.root}: no entity spans from source(s) {src}; {fix}")

    def title_counts(self) -> dict[str, int]:
        """title -> number of spans with that label."""
        n = np.bincount(self.labels, minlength=len(self.titles))
        return {t: int(c) for t, c in zip(self.titles, n.tolist(), strict=True)}

    def vocab_ids(self, vocab: TitleIds) -> np.ndarray:
        """(S,) int64 vocabulary id of every span (1 = [UNK] for titles outside `vocab`)."""
        table = np.asarray(vocab.ids(self.titles), dtype=np.int64)
        return table[self.labels] if len(self) else np.zeros(0, dtype=np.int64)

    def chunk(self, i: int, vocab_ids: np.ndarray) -> np.ndarray:
        """(S_i, 3) int64 rows (token_start, token_end, vocabulary id) of chunk `i`."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return np.stack([self.starts[a:b], self.ends[a:b], vocab_ids[a:b]], axis=1).astype(np.int64)


@dataclass(frozen=True)
class AnnotationStats:
    """How densely a DocStore is annotated with entities (DaLUKE: 1 per 200 words from links alone)."""

    words: int
    tokens: int
    spans: dict[str, int]  # entity source -> spans

    def per_1k_words(self, sources: Sequence[str]) -> float:
        """Entity spans of `sources` per 1,000 whitespace-separated words."""
        return 1000.0 * sum(self.spans.get(s, 0) for s in sources) / max(self.words, 1)

    def per_1k_tokens(self, sources: Sequence[str]) -> float:
        """Entity spans of `sources` per 1,000 tokens (wordpieces)."""
        return 1000.0 * sum(self.spans.get(s, 0) for s in sources) / max(self.tokens, 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "words": self.words,
            "tokens": self.tokens,
            "spans": dict(self.spans),
            "entities_per_1k_words": {
                "link": self.per_1k_words(["link"]),
                "link+auto": self.per_1k_words(["link", "auto"]),
            },
            "entities_per_1k_tokens": {
                "link": self.per_1k_tokens(["link"]),
                "link+auto": self.per_1k_tokens(["link", "auto"]),
            },
        }


def annotation_stats(store: DocStore | str | os.PathLike | EntitySpans) -> AnnotationStats:
    """Words, tokens and entity spans per source of a DocStore (or of spans read with words=True)."""
    spans = (
        store if isinstance(store, EntitySpans) else EntitySpans.from_docstore(store, ["link"], words=True)
    )
    if spans.words is None:
        raise ValueError("annotation_stats needs EntitySpans read with words=True")
    return AnnotationStats(words=spans.words, tokens=spans.tokens, spans=dict(spans.source_counts))


def annotation_rate(store: DocStore | str | os.PathLike, sources: Sequence[str]) -> float:
    """Entity annotations of `sources` per 1,000 words of a DocStore, e.g. ["link"] or ["link", "auto"]."""
    return annotation_stats(store).per_1k_words(check_sources(sources))
