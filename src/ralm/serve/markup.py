"""Where to highlight a corpus text: query terms (Search) and salient spans by source (Corpus).

Both return plain offsets or pieces of text, never HTML: the templates escape every piece
(Jinja2 autoescape) and the browser code builds text nodes, so a chunk holding `<script>` stays
text. Offsets are Python `str` indices (Unicode code points).
Left out: phrase matching (each word is highlighted on its own).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ralm.corpus.docstore import SALIENT_SOURCES
from ralm.retrieval.analysis import TOKEN_PATTERN, Analyzer

__all__ = ["Segment", "highlight_spans", "salient_segments"]

_WORD = re.compile(TOKEN_PATTERN)
SOURCE_ORDER = ("link", "ner", "date", "auto")  # which colour wins where spans of two sources overlap


def highlight_spans(text: str, terms: Iterable[str], analyzer: Analyzer) -> list[tuple[int, int]]:
    """[start, end) of every word of `text` whose analysed form is one of `terms`.

    terms: the query's terms under the same analyzer (`analyzer.analyze(query)`).
    Example (no stemming): highlight_spans("Oslo is in Norway", ["norway"], Analyzer()) -> [(11, 17)].
    """
    wanted = set(terms)
    if not wanted:
        return []
    seen: dict[str, bool] = {}
    spans = []
    for m in _WORD.finditer(text):
        w = m.group()
        hit = seen.get(w)
        if hit is None:
            hit = seen[w] = bool(wanted.intersection(analyzer.analyze(w)))
        if hit:
            spans.append((m.start(), m.end()))
    return spans


@dataclass(frozen=True)
class Segment:
    """A piece of a chunk's text and the salient spans covering it (sources in SOURCE_ORDER)."""

    text: str
    sources: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()  # "link: Norway", one per covering span

    @property
    def source(self) -> str | None:
        """The source whose colour the piece gets (the first of `sources`)."""
        return self.sources[0] if self.sources else None


def salient_segments(text: str, spans: Iterable[Mapping]) -> list[Segment]:
    """`text` cut at every salient span boundary; each piece lists the spans covering it.

    spans: dicts with start, end (character offsets into `text`), source and label.
    Example: salient_segments("Oslo is in Norway", [{"start": 11, "end": 17, "source": "link",
    "label": "Norway"}]) -> [Segment("Oslo is in "), Segment("Norway", ("link",), ("link: Norway",))].
    """
    n = len(text)
    spans = [s for s in spans if 0 <= int(s["start"]) < int(s["end"])]
    cuts = sorted({0, n, *(min(int(s["start"]), n) for s in spans), *(min(int(s["end"]), n) for s in spans)})
    rank = {
        s: i for i, s in enumerate(SOURCE_ORDER + tuple(x for x in SALIENT_SOURCES if x not in SOURCE_ORDER))
    }
    out: list[Segment] = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        if a >= b:
            continue
        cover = [s for s in spans if int(s["start"]) <= a and b <= int(s["end"])]
        cover.sort(key=lambda s: (rank.get(s["source"], len(rank)), int(s["start"])))
        sources = tuple(dict.fromkeys(s["source"] for s in cover))
        labels = tuple(
            dict.fromkeys(
                f"{s['source']}: {s.get('label') or text[int(s['start']) : int(s['end'])]}" for s in cover
            )
        )
        out.append(Segment(text[a:b], sources, labels))
    return out
