"""Plain records that flow between corpus readers, chunking and the DocStore.

Offsets are Python string indices (code points) into the text they belong to,
half-open: `text[start:end]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LinkSpan:
    """An internal link: `text[start:end]` is the anchor text, `target` the linked title.

    `target` is normalised the MediaWiki way: underscores become spaces, the first letter is
    upper-cased, a `#section` suffix is dropped (see `ralm.corpus.wikitext.normalize_title`).
    """

    start: int
    end: int
    target: str


@dataclass
class Article:
    """One document of a source corpus, before chunking.

    source_id: the id the source gave it (a wiki page id, a JSONL "id"), or "" when it had none.
    """

    title: str
    text: str
    source_id: str = ""
    links: list[LinkSpan] = field(default_factory=list)


@dataclass(frozen=True)
class Span:
    """A salient span in character coordinates of some text.

    source: where it came from: "link", "auto" (entity-vocabulary string match), "ner", "date".
    label: the entity title for link/auto spans, the NER label for ner spans, "DATE" for dates.
    """

    start: int
    end: int
    source: str
    label: str
