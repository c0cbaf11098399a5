"""The Debian Edu manual (HTML) as articles for nordic_corpus.py: one per h2/h3/h4 section, the
heading without its number as title, the section's paragraphs as text."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from html.parser import HTMLParser

# ---------------------------------------------------------------------------------------------
# HTML manual -> sections
# ---------------------------------------------------------------------------------------------

MIN_WORDS = 5  # manual sections with fewer words of text are skipped

_BLOCK = {
    "p",
    "div",
    "li",
    "dt",
    "dd",
    "pre",
    "tr",
    "table",
    "ul",
    "ol",
    "dl",
    "h1",
    "h5",
    "h6",
    "blockquote",
    "hr",
    "br",
}
_SKIP_CLASSES = {"toc", "navheader", "navfooter", "list-of-tables", "list-of-figures"}
_SECTION_NO = re.compile(r"^\s*(\d+(?:\.\d+)*)\.?\s+")


class _ManualParser(HTMLParser):
    """Splits a DocBook HTML manual into (level, heading, [paragraphs]) at h2/h3/h4 titles."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.sections: list[tuple[int, str, list[str]]] = []
        self.skip_tag: str | None = None
        self.skip_depth = 0
        self.heading: list[str] | None = None
        self.heading_tag = ""
        self.level = 0
        self.title = ""
        self.paras: list[str] = []
        self.block: list[str] = []
        self.pre = 0
        self.in_cell = 0  # inside <td>/<th>: blocks do not break the row's line
        self.cells = 0  # cells seen in the current <tr>

    # text of the current block
    def _flush(self) -> None:
        raw = html.unescape("".join(self.block))
        self.block = []
        if self.pre:
            lines = [ln.rstrip() for ln in raw.split("\n")]
            while lines and not lines[0].strip():
                lines.pop(0)
            while lines and not lines[-1].strip():
                lines.pop()
            text = "\n".join(lines)
        else:
            text = " ".join(raw.split())
        if text.strip():
            self.paras.append(text)

    def _end_section(self) -> None:
        self._flush()
        if self.level:
            self.sections.append((self.level, self.title, self.paras))
        self.paras = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth += 1
            return
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag in ("head", "style", "script") or classes & _SKIP_CLASSES:
            self.skip_tag, self.skip_depth = tag, 1
            return
        if tag in ("h2", "h3", "h4") and "title" in classes:
            self._end_section()
            self.heading, self.heading_tag = [], tag
            return
        if self.heading is not None:
            return
        if tag in ("td", "th"):
            self.cells += 1
            self.block.append(" | " if self.cells > 1 else " ")
            self.in_cell += 1
            return
        if tag == "tr":
            self._flush()
            self.cells = 0
            return
        self._block_edge(tag)
        if tag == "pre":
            self.pre += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip_tag is None and self.heading is None:
            self._block_edge(tag)

    def _block_edge(self, tag: str) -> None:
        """A block element starts or ends: a paragraph break, or a space inside a table cell."""
        if tag in _BLOCK:
            if self.in_cell:
                self.block.append(" ")
            else:
                self._flush()

    def handle_endtag(self, tag: str) -> None:
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth -= 1
                if self.skip_depth == 0:
                    self.skip_tag = None
            return
        if self.heading is not None:
            if tag == self.heading_tag:
                self.title = " ".join(html.unescape("".join(self.heading)).split())
                self.level = int(tag[1])
                self.heading = None
            return
        if tag in ("td", "th"):
            self.in_cell = max(0, self.in_cell - 1)
            self.block.append(" ")
            return
        if tag == "tr":
            self._flush()
            return
        self._block_edge(tag)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)

    def handle_data(self, data: str) -> None:
        if self.skip_tag is not None:
            return
        (self.heading if self.heading is not None else self.block).append(data)

    def handle_entityref(self, name: str) -> None:
        self.handle_data(f"&{name};")

    def handle_charref(self, name: str) -> None:
        self.handle_data(f"&#{name};")

    def close(self) -> None:
        super().close()
        self._end_section()


def manual_articles(html_text: str, lang: str, min_words: int = MIN_WORDS) -> Iterator[dict]:
    """One article per numbered h2/h3/h4 section of the manual with at least `min_words` words."""
    parser = _ManualParser()
    parser.feed(html_text)
    parser.close()
    seen: dict[str, int] = {}
    for _level, heading, paras in parser.sections:
        m = _SECTION_NO.match(heading)
        if not m:
            continue  # the document title page
        number = m.group(1)
        title = heading[m.end() :].strip()
        text = "\n\n".join(paras)
        if len(text.split()) < min_words:
            continue
        seen[title] = seen.get(title, 0) + 1
        if seen[title] > 1:
            title = f"{title} ({number})"
        yield {"id": f"edu-{lang}-{number}", "title": title, "text": text}
