"""Stream articles out of MediaWiki XML dumps and turn wikitext into plain text with link spans.

`iter_wiki_dump` reads a `pages-articles` export (`.xml`, or bzip2/gzip compressed, detected by
magic bytes) with `xml.etree.ElementTree.iterparse`, clearing every finished `<page>` so memory
stays flat on multi-GB dumps. It yields one `Article` per main-namespace page, skips redirects
(optionally recording them) and pages whose text cleans to nothing.

`wikitext_to_text` walks the mwparserfromhell node tree (not `strip_code`, which loses link
offsets) and keeps what a reader sees as running prose: plain text, the display text of internal
links (each recorded as a `LinkSpan`, link trail included), formatting-tag contents, external-link
labels and heading titles. The whitespace is normalised while keeping every span exact.

Deliberately left out:
  * templates are dropped, never expanded (`{{convert|5|km}}` yields nothing): expanding needs
    the template namespace and a Lua runtime;
  * tables, galleries, math, references, File/Category/interlanguage links are dropped whole,
    including captions;
  * links into other namespaces or wikis (`[[Wikipedia:Foo|x]]`, `[[wikt:foo|x]]`) keep their
    text but get no `LinkSpan` (their targets are not articles);
  * title case rules other than MediaWiki's default "first-letter" are not modelled;
  * page revisions other than the one in the dump (only the first `<revision>` is read).
"""

from __future__ import annotations

import bz2
import gzip
import html
import os
import re
import xml.etree.ElementTree as ET
from bisect import bisect_right
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import BinaryIO

import mwparserfromhell
from mwparserfromhell.nodes import (
    Argument,
    Comment,
    ExternalLink,
    Heading,
    HTMLEntity,
    Tag,
    Template,
    Text,
    Wikilink,
)
from mwparserfromhell.wikicode import Wikicode

from ralm.corpus.types import Article, LinkSpan
from ralm.errors import CorpusError

__all__ = [
    "DEFAULT_DROP_PREFIXES",
    "DEFAULT_DROP_SECTIONS",
    "DEFAULT_NAMESPACE_PREFIXES",
    "NORDIC_DROP_SECTIONS",
    "iter_wiki_dump",
    "normalize_title",
    "open_binary",
    "wikitext_to_text",
]

# Link prefixes whose links are dropped whole (caption included): media and category links.
# Canonical English names; `iter_wiki_dump` adds the dump's localised names from <siteinfo>.
DEFAULT_DROP_PREFIXES: frozenset[str] = frozenset({"file", "image", "media", "category"})

# Prefixes of other namespaces and sister projects: such links keep their text, get no LinkSpan.
DEFAULT_NAMESPACE_PREFIXES: frozenset[str] = frozenset(
    {
        "talk", "user", "user talk", "wikipedia", "wikipedia talk", "project", "project talk",
        "wp", "file talk", "image talk", "mediawiki", "mediawiki talk", "template",
        "template talk", "help", "help talk", "category talk", "portal", "portal talk", "book",
        "book talk", "draft", "draft talk", "module", "module talk", "timedtext",
        "timedtext talk", "special", "education program", "gadget", "gadget definition",
        "topic", "wikt", "wiktionary", "wikisource", "s", "commons", "c", "q", "wikiquote", "b",
        "wikibooks", "n", "wikinews", "v", "wikiversity", "voy", "wikivoyage", "species",
        "wikispecies", "d", "wikidata", "m", "meta", "metawikipedia", "mw", "w", "wikimedia",
        "foundation", "wmf", "phab", "simple",
    }
)  # fmt: skip

# Trailing boilerplate sections dropped by default (compared case-insensitively).
DEFAULT_DROP_SECTIONS: frozenset[str] = frozenset(
    {"references", "external links", "see also", "further reading", "notes", "sources", "bibliography"}
)
# Norwegian (bokmål/nynorsk) and Danish equivalents, for `drop_sections=` on those wikis.
NORDIC_DROP_SECTIONS: frozenset[str] = frozenset(
    {
        "referanser", "eksterne lenker", "eksterne lenkjer", "se også", "sjå òg", "kilder",
        "kjelder", "litteratur", "eksterne henvisninger", "fodnoter", "noter", "referencer",
    }
)  # fmt: skip

# Tags dropped with their contents.
_DROP_TAGS = frozenset(
    {
        "ref", "references", "gallery", "math", "timeline", "score", "chem", "ce", "graph",
        "mapframe", "maplink", "templatedata", "templatestyles", "imagemap", "hiero",
        "inputbox", "categorytree", "includeonly", "syntaxhighlight", "source", "table",
        "indicator", "section", "charinsert", "style", "script", "img",
    }
)  # fmt: skip
# Tags whose contents start on a fresh line.
_BLOCK_TAGS = frozenset(
    {
        "p", "div", "blockquote", "center", "poem", "pre", "ul", "ol", "dl", "li", "dt", "dd",
        "h1", "h2", "h3", "h4", "h5", "h6",
    }
)  # fmt: skip
# Markup tags that stand for a line break.
_BREAK_TAGS = frozenset({"br", "hr"})

_MAGIC_WORD_RE = re.compile(r"__[A-Z]+__")
_APOSTROPHES_RE = re.compile(r"'{2,}")
_STRAY_TAG_RE = re.compile(
    r"</?(?:div|span|center|small|big|font|p|br|ref|references|sup|sub|u|s|i|b|em|strong|"
    r"blockquote|poem|code|tt|abbr|cite|nowiki|onlyinclude|noinclude|includeonly|gallery|"
    r"table|tr|td|th|li|ul|ol|dl|dt|dd|del|ins|mark|q|var|kbd|samp|bdi|bdo|wbr|hr)\b[^<>]*>",
    re.IGNORECASE,
)
_LANG_PREFIX_RE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]+)*")
_WS_RE = re.compile(r"\s+")
_WS_SPLIT_RE = re.compile(r"(\s+)")
_REDIRECT_RE = re.compile(
    r"\s*#\s*(?:REDIRECT|ПРЕНАСОЧВАНЕ|OMDIRIGERING|VIDERESTILLING|WEITERLEITUNG|REDIRECTION)"
    r"\s*:?\s*\[\[([^\]|]+)",
    re.IGNORECASE,
)


_COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)
_SELF_CLOSING_REF_RE = re.compile(r"<ref\b[^>]*/\s*>", re.IGNORECASE)
_PAIRED_DROP_TAG_RE = re.compile(
    r"<(ref|math|chem|ce|syntaxhighlight|source|score|timeline|gallery|graph|imagemap|templatedata|"
    r"mapframe|hiero)\b[^>]*>.*?</\1\s*>",
    re.IGNORECASE | re.DOTALL,
)
_BRACE_RE = re.compile(r"\{\{|\}\}")
_TABLE_RE = re.compile(r"^[ \t:]*(\{\||\|\})", re.MULTILINE)


def _strip_balanced(text: str, pattern: re.Pattern[str], opener: str) -> str:
    """Remove the outermost balanced opener...closer regions; unbalanced ones stay put."""
    if opener not in text:
        return text
    keep: list[str] = []
    depth = 0
    pos = 0  # start of the text not yet copied to `keep`
    region_start = 0
    for m in pattern.finditer(text):
        if m.group(m.lastindex or 0) == opener:
            if depth == 0:
                region_start = m.start()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                keep.append(text[pos:region_start])
                pos = m.end()
    keep.append(text[pos:])
    return "".join(keep)


def _prestrip(wikitext: str) -> str:
    """Cut what is dropped anyway (comments, refs, math, templates, tables) before parsing.

    Only a speed-up: mwparserfromhell would drop the same nodes, but building template and
    table nodes is most of its time. Unbalanced markup is left to the parser.
    """
    if "<!--" in wikitext:
        wikitext = _COMMENT_RE.sub("", wikitext)
    if "<" in wikitext:
        # an empty comment, not "", so that a following ";" or "*" does not start a list
        wikitext = _SELF_CLOSING_REF_RE.sub("<!---->", wikitext)
        wikitext = _PAIRED_DROP_TAG_RE.sub("<!---->", wikitext)
    wikitext = _strip_balanced(wikitext, _BRACE_RE, "{{")
    return _strip_balanced(wikitext, _TABLE_RE, "{|")


def normalize_title(title: str) -> str:
    """MediaWiki-normalise a page title: `"_anarchism#History"` -> `"Anarchism"`.

    Underscores become spaces, whitespace runs collapse, a leading ':' and a `#fragment` are
    dropped, and the first character is upper-cased (the default "first-letter" case rule).
    """
    title = title.replace("_", " ").strip()
    if title.startswith(":"):
        title = title[1:]
    title = title.split("#", 1)[0]
    title = _WS_RE.sub(" ", title).strip()
    if title:
        title = title[0].upper() + title[1:]
    return title


def _prefix_key(prefix: str) -> str:
    return _WS_RE.sub(" ", prefix.replace("_", " ")).strip().casefold()


class _TextBuilder:
    """Accumulates raw text and raw link spans while walking a parse tree."""

    def __init__(
        self,
        drop_prefixes: frozenset[str],
        namespace_prefixes: frozenset[str],
        drop_sections: frozenset[str],
    ) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.links: list[tuple[int, int, str]] = []
        self.drop_prefixes = drop_prefixes
        self.namespace_prefixes = namespace_prefixes
        self.drop_sections = drop_sections
        self.skip_level: int | None = None  # inside a dropped section of this heading level
        self.in_link = False

    def emit(self, s: str) -> None:
        if s:
            self.parts.append(s)
            self.length += len(s)

    def emit_text(self, s: str) -> None:
        """Emit a Text node's value: leftover markup removed, then entities decoded."""
        if "<" in s:
            s = _STRAY_TAG_RE.sub("", s)
        if "__" in s:
            s = _MAGIC_WORD_RE.sub("", s)
        if "''" in s:
            s = _APOSTROPHES_RE.sub("", s)
        if "&" in s:  # last, so that an escaped "&lt;b&gt;" stays text
            s = html.unescape(s)
        self.emit(s.replace("\u00a0", " "))

    def walk(self, code: Wikicode) -> None:
        nodes = code.nodes
        trail_used = 0  # characters of the next Text node already emitted as a link trail
        for i, node in enumerate(nodes):
            if self.skip_level is not None:
                if isinstance(node, Heading) and node.level <= self.skip_level:
                    self.skip_level = None
                else:
                    continue
            if isinstance(node, Text):
                value = node.value[trail_used:] if trail_used else node.value
                trail_used = 0
                self.emit_text(value)
            elif isinstance(node, Wikilink):
                nxt = nodes[i + 1] if i + 1 < len(nodes) else None
                trail_used = self.wikilink(node, nxt.value if isinstance(nxt, Text) else "")
            elif isinstance(node, Tag):
                self.tag(node)
            elif isinstance(node, Heading):
                self.heading(node)
            elif isinstance(node, ExternalLink):
                if node.brackets and node.title is not None:
                    self.walk(node.title)
            elif isinstance(node, HTMLEntity):
                try:
                    ch = node.normalize()
                except ValueError:  # unknown entity: MediaWiki shows it literally
                    ch = str(node)
                self.emit(" " if ch == "\u00a0" else ch)
            elif isinstance(node, (Template, Argument, Comment)):
                continue
            # any other node type (none known today) is dropped

    def wikilink(self, node: Wikilink, next_text: str) -> int:
        """Emit one internal link; return how many characters of `next_text` it used as trail."""
        raw_title = html.unescape(str(node.title)).strip()
        forced = raw_title.startswith(":")  # [[:Category:X]] is an inline link, not a category tag
        title = raw_title[1:].lstrip() if forced else raw_title
        linkable = True
        if ":" in title:
            prefix = _prefix_key(title.split(":", 1)[0])
            is_lang = prefix == "simple" or _LANG_PREFIX_RE.fullmatch(prefix) is not None
            if not forced and prefix in self.drop_prefixes:
                return 0
            if not forced and is_lang and node.text is None:
                return 0  # interlanguage link: shown in the sidebar, not in the text
            if is_lang or prefix in self.namespace_prefixes or prefix in self.drop_prefixes:
                linkable = False
        target = normalize_title(title)
        if not target:  # [[#Section|text]]: a link into the same page
            linkable = False
        start, first_part = self.length, len(self.parts)
        if node.text is not None:
            was_in_link, self.in_link = self.in_link, True
            self.walk(node.text)
            self.in_link = was_in_link
        else:
            self.emit_text(title)
        if not any(not p.isspace() for p in self.parts[first_part:]):
            return 0  # nothing visible: no span, and no link trail either
        used = 0
        if next_text:
            while used < len(next_text) and next_text[used].isalpha() and next_text[used].islower():
                used += 1
            self.emit(next_text[:used])
        if linkable and not self.in_link:
            self.links.append((start, self.length, target))
        return used

    def tag(self, node: Tag) -> None:
        name = str(node.tag).strip().lower()
        if name in _DROP_TAGS:
            return
        if node.wiki_markup and name in {"li", "dt", "dd"}:
            self.emit(" ")  # list/indent markup at line start: the marker itself is dropped
            return
        if name in _BREAK_TAGS:
            self.emit("\n")
            return
        if node.self_closing or node.contents is None:
            return
        block = name in _BLOCK_TAGS
        if block:
            self.emit("\n")
        self.walk(node.contents)
        if block:
            self.emit("\n")

    def heading(self, node: Heading) -> None:
        title = node.title.strip_code().strip().casefold()
        if title in self.drop_sections:
            self.skip_level = node.level
            return
        self.emit("\n\n")
        self.walk(node.title)
        self.emit("\n")


def _separator(ws: str) -> str:
    newlines = ws.count("\n")
    return " " if newlines == 0 else ("\n" if newlines == 1 else "\n\n")


def _normalize_whitespace(raw: str, raw_links: list[tuple[int, int, str]]) -> tuple[str, list[LinkSpan]]:
    """Collapse whitespace (one space inside lines, at most one blank line) and remap spans.

    Only whitespace runs change, so every non-space character keeps its place relative to the
    start of its run of non-space characters; spans are trimmed to non-space ends and remapped.
    """
    parts = _WS_SPLIT_RE.split(raw)  # [word, ws, word, ws, ..., word]
    raw_offsets = [0, *accumulate(map(len, parts))]
    parts[1::2] = [_separator(ws) for ws in parts[1::2]]
    if len(parts) > 1:
        if not parts[0]:  # leading whitespace
            parts[1] = ""
        if not parts[-1]:  # trailing whitespace
            parts[-2] = ""
    out_offsets = [0, *accumulate(map(len, parts))]
    links: list[LinkSpan] = []
    for start, end, target in raw_links:
        while start < end and raw[start].isspace():
            start += 1
        while end > start and raw[end - 1].isspace():
            end -= 1
        if start < end:
            k = bisect_right(raw_offsets, start) - 1
            new_start = out_offsets[k] + start - raw_offsets[k]
            k = bisect_right(raw_offsets, end - 1) - 1
            links.append(LinkSpan(new_start, out_offsets[k] + end - raw_offsets[k], target))
    return "".join(parts), links


def wikitext_to_text(
    wikitext: str,
    *,
    drop_prefixes: Collection[str] = DEFAULT_DROP_PREFIXES,
    namespace_prefixes: Collection[str] = DEFAULT_NAMESPACE_PREFIXES,
    drop_sections: Collection[str] | None = DEFAULT_DROP_SECTIONS,
) -> tuple[str, list[LinkSpan]]:
    """Render wikitext as plain text; return it with the internal links as `LinkSpan`s.

    drop_prefixes: link prefixes (case-insensitive) whose links vanish whole, caption included:
        File/Image/Media/Category and their localised names.
    namespace_prefixes: prefixes of other namespaces and wikis: their links keep their display
        text but are not recorded. Two-or-three-letter language prefixes (`de:`, `zh-min-nan:`)
        are always treated as interwiki links (dropped when they have no display text).
    drop_sections: heading titles (case-insensitive) whose whole section, up to the next heading
        of the same or a higher level, is dropped; None keeps every section.

    Every returned span satisfies `text[s.start:s.end] == <the displayed anchor>` and is
    non-empty; `s.target` is `normalize_title` of the link target.
    """
    builder = _TextBuilder(
        frozenset(_prefix_key(p) for p in drop_prefixes),
        frozenset(_prefix_key(p) for p in namespace_prefixes),
        frozenset(s.strip().casefold() for s in (drop_sections or ())),
    )
    builder.walk(mwparserfromhell.parse(_prestrip(wikitext), skip_style_tags=True))
    return _normalize_whitespace("".join(builder.parts), builder.links)


# ----------------------------------------------------------------------------- dump reading


def open_binary(path: str | os.PathLike[str]) -> BinaryIO:
    """Open `path` for binary reading, decompressing bzip2 (`BZh`) or gzip by magic bytes."""
    with open(path, "rb") as f:
        magic = f.read(3)
    if magic == b"BZh":
        return bz2.open(path, "rb")  # type: ignore[return-value]
    if magic[:2] == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _local(tag: str) -> str:
    """`{http://www.mediawiki.org/xml/export-0.10/}page` -> `page`."""
    return tag.rsplit("}", 1)[-1] if tag[:1] == "{" else tag


def _child(elem: ET.Element, name: str) -> ET.Element | None:
    for c in elem:
        if _local(c.tag) == name:
            return c
    return None


def _child_text(elem: ET.Element, name: str) -> str:
    c = _child(elem, name)
    return (c.text or "") if c is not None else ""


def _check_path(path: Path) -> None:
    if not path.exists():
        raise CorpusError(f"{path}: no such file or directory; check the path")
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory; expected a MediaWiki dump (.xml or .xml.bz2)")
    if path.stat().st_size == 0:
        raise CorpusError(f"{path}: the file is empty; download the dump again")


def _parse_error(path: Path, exc: ET.ParseError, started: bool) -> CorpusError:
    line, col = getattr(exc, "position", (0, 0))
    col += 1  # expat counts columns from 0
    msg = str(exc).split(":", 1)[0]
    if started and "invalid token" in msg:
        return CorpusError(
            f"{path}: not valid UTF-8/XML at line {line}, column {col} ({msg}); "
            "re-encode the dump as UTF-8 or download it again"
        )
    if started and ("no element found" in msg or "unclosed token" in msg):
        return CorpusError(
            f"{path}: the XML ends early at line {line}: the file is truncated; download it again"
        )
    return CorpusError(
        f"{path}: not a MediaWiki XML dump ({msg} at line {line}, column {col}); "
        "pass a pages-articles .xml or .xml.bz2 file"
    )


@dataclass
class WikiPage:
    """A main-namespace, non-redirect page as read from the dump, before wikitext conversion.

    Converting (`to_article`) is the expensive step; pages are small and picklable, so a build
    can convert them in worker processes while the main process keeps reading the dump.
    """

    title: str
    source_id: str
    wikitext: str
    drop_prefixes: frozenset[str]
    namespace_prefixes: frozenset[str]

    def to_article(self, drop_sections: Collection[str] | None = DEFAULT_DROP_SECTIONS) -> Article | None:
        """The cleaned article, or None when no text is left after cleaning."""
        text, links = wikitext_to_text(
            self.wikitext,
            drop_prefixes=self.drop_prefixes,
            namespace_prefixes=self.namespace_prefixes,
            drop_sections=drop_sections,
        )
        if not text:
            return None
        return Article(title=self.title, text=text, source_id=self.source_id, links=links)


def iter_wiki_dump(
    path: str | os.PathLike[str],
    *,
    redirects: dict[str, str] | None = None,
    namespaces: tuple[int, ...] = (0,),
    drop_sections: Collection[str] | None = DEFAULT_DROP_SECTIONS,
) -> Iterator[Article]:
    """Yield the articles of a MediaWiki XML dump, one `Article` per non-redirect page.

    path: `.xml`, `.xml.bz2` or gzip; compression is detected from the magic bytes.
    redirects: when given, filled with `normalize_title(redirect) -> normalize_title(target)`
        for every redirect page in `namespaces`; redirects are never yielded.
    namespaces: page namespaces (`<ns>`) to read; main namespace only by default.
    drop_sections: passed to `wikitext_to_text`.

    Raises CorpusError for a missing, truncated, non-XML or non-UTF-8 file, and at the end
    when no article was found.
    """
    n_yielded = 0
    pages = iter_wiki_pages(path, redirects=redirects, namespaces=namespaces)
    for page in pages:
        article = page.to_article(drop_sections)
        if article is not None:
            n_yielded += 1
            yield article
    if n_yielded == 0:
        raise no_articles_error(path, namespaces, pages_read=None)


def no_articles_error(
    path: str | os.PathLike[str], namespaces: tuple[int, ...], pages_read: int | None
) -> CorpusError:
    """The error for a dump in which no page gave an article."""
    ns_list = ", ".join(str(n) for n in sorted(set(namespaces)))
    read = f" ({pages_read} pages read)" if pages_read is not None else ""
    return CorpusError(
        f"{path}: no articles in namespace {ns_list}{read}; pass a pages-articles dump or other namespaces"
    )


def iter_wiki_pages(
    path: str | os.PathLike[str],
    *,
    redirects: dict[str, str] | None = None,
    namespaces: tuple[int, ...] = (0,),
) -> Iterator[WikiPage]:
    """Stream the pages of a dump that are in `namespaces` and not redirects (see iter_wiki_dump).

    Memory stays flat: each `<page>` element and the root's children are cleared once read.
    Raises CorpusError for a missing, truncated, non-XML or non-UTF-8 file, and for a dump
    with no page to read at all.
    """
    path = Path(path)
    _check_path(path)
    wanted = set(namespaces)
    drop_prefixes = set(DEFAULT_DROP_PREFIXES)
    namespace_prefixes = set(DEFAULT_NAMESPACE_PREFIXES)
    frozen: tuple[frozenset[str], frozenset[str]] | None = None
    n_pages = n_yielded = 0
    try:
        stream = open_binary(path)
    except OSError as exc:
        raise CorpusError(f"{path}: cannot open ({exc.strerror or exc}); check the permissions") from exc
    with stream:
        events = ET.iterparse(stream, events=("start", "end"))
        root: ET.Element | None = None
        while True:
            try:
                event, elem = next(events)
            except StopIteration:
                break
            except ET.ParseError as exc:
                raise _parse_error(path, exc, started=root is not None) from exc
            except EOFError as exc:
                raise CorpusError(
                    f"{path}: compressed stream ended early: the file is truncated; download it again"
                ) from exc
            except OSError as exc:
                raise CorpusError(
                    f"{path}: cannot decompress ({exc}); the file is corrupt or truncated; download it again"
                ) from exc
            if event == "start":
                if root is None:
                    root = elem
                    if _local(elem.tag) != "mediawiki":
                        raise CorpusError(
                            f"{path}: not a MediaWiki XML dump (root element <{_local(elem.tag)}>); "
                            "pass a pages-articles .xml or .xml.bz2 file"
                        )
                continue
            name = _local(elem.tag)
            if name == "namespaces":
                for ns_elem in elem:
                    ns_name = (ns_elem.text or "").strip()
                    if not ns_name:
                        continue
                    key = ns_elem.get("key")
                    if key in {"6", "14", "-2"}:
                        drop_prefixes.add(_prefix_key(ns_name))
                    else:
                        namespace_prefixes.add(_prefix_key(ns_name))
                continue
            if name != "page":
                continue
            n_pages += 1
            if frozen is None:
                frozen = (frozenset(drop_prefixes), frozenset(namespace_prefixes))
            page = _read_page(elem, wanted, redirects, *frozen)
            elem.clear()
            if root is not None:
                root.clear()
            if page is not None:
                n_yielded += 1
                yield page
    if n_yielded == 0:
        raise no_articles_error(path, namespaces, n_pages)


def _read_page(
    page: ET.Element,
    wanted: set[int],
    redirects: dict[str, str] | None,
    drop_prefixes: frozenset[str],
    namespace_prefixes: frozenset[str],
) -> WikiPage | None:
    """The page of one finished `<page>` element, or None for a skipped page or a redirect."""
    ns_text = _child_text(page, "ns").strip()
    try:
        ns = int(ns_text) if ns_text else 0
    except ValueError:
        ns = 0
    if ns not in wanted:
        return None
    title = _child_text(page, "title")
    revision = _child(page, "revision")
    wikitext = _child_text(revision, "text") if revision is not None else ""
    redirect = _child(page, "redirect")
    target: str | None = None
    if redirect is not None:
        target = redirect.get("title", "")
    else:
        m = _REDIRECT_RE.match(wikitext)
        if m:
            target = m.group(1)
    if target is not None:
        if redirects is not None and normalize_title(target):
            redirects[normalize_title(title)] = normalize_title(target)
        return None
    return WikiPage(title, _child_text(page, "id").strip(), wikitext, drop_prefixes, namespace_prefixes)
