"""Wikitext to plain text with link spans: what a reader of a MediaWiki article sees as prose.

`wikitext_to_text` walks the mwparserfromhell node tree (not `strip_code`, which loses link
offsets) and keeps plain text, the display text of internal links (each recorded as a
`LinkSpan`, link trail included), formatting-tag contents, external-link labels and heading
titles. The whitespace is normalised while keeping every span exact. `normalize_title` puts link
targets and titles in MediaWiki's canonical form. Dump files are read by `ralm.corpus.wiki`.

Deliberately left out:
  * templates are dropped, never expanded (`{{convert|5|km}}` yields nothing): expanding needs
    the template namespace and a Lua runtime;
  * tables, galleries, math, references, File/Category/interlanguage links are dropped whole,
    including captions;
  * links into other namespaces or wikis (`[[Wikipedia:Foo|x]]`, `[[wikt:foo|x]]`) keep their
    text but get no `LinkSpan` (their targets are not articles);
  * title case rules other than MediaWiki's default "first-letter" are not modelled.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from collections.abc import Collection
from itertools import accumulate

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

from ralm.corpus.types import LinkSpan

__all__ = [
    "DEFAULT_DROP_PREFIXES",
    "DEFAULT_DROP_SECTIONS",
    "DEFAULT_NAMESPACE_PREFIXES",
    "NORDIC_DROP_SECTIONS",
    "normalize_title",
    "prefix_key",
    "wikitext_to_text",
]

# Link prefixes whose links are dropped whole (caption included): media and category links.
# Canonical English names; `iter_wiki_dump` adds the dump's localised names from <siteinfo>.
DEFAULT_DROP_PREFIXES: frozenset[str] = frozenset({"file", "image", "media", "category"})

# Prefixes of other namespaces and sister projects: such links keep their text, get no LinkSpan.
DEFAULT_NAMESPACE_PREFIXES: frozenset[str] = frozenset(
    {
        "talk",
        "user",
        "user talk",
        "wikipedia",
        "wikipedia talk",
        "project",
        "project talk",
        "wp",
        "file talk",
        "image talk",
        "mediawiki",
        "mediawiki talk",
        "template",
        "template talk",
        "help",
        "help talk",
        "category talk",
        "portal",
        "portal talk",
        "book",
        "book talk",
        "draft",
        "draft talk",
        "module",
        "module talk",
        "timedtext",
        "timedtext talk",
        "special",
        "education program",
        "gadget",
        "gadget definition",
        "topic",
        "wikt",
        "wiktionary",
        "wikisource",
        "s",
        "commons",
        "c",
        "q",
        "wikiquote",
        "b",
        "wikibooks",
        "n",
        "wikinews",
        "v",
        "wikiversity",
        "voy",
        "wikivoyage",
        "species",
        "wikispecies",
        "d",
        "wikidata",
        "m",
        "meta",
        "metawikipedia",
        "mw",
        "w",
        "wikimedia",
        "foundation",
        "wmf",
        "phab",
        "simple",
    }
)
# Trailing boilerplate sections dropped by default (compared case-insensitively).
DEFAULT_DROP_SECTIONS: frozenset[str] = frozenset(
    {"references", "external links", "see also", "further reading", "notes", "sources", "bibliography"}
)
# Norwegian (bokmål/nynorsk) and Danish equivalents, for `drop_sections=` on those wikis.
NORDIC_DROP_SECTIONS: frozenset[str] = frozenset(
    {
        "referanser",
        "eksterne lenker",
        "eksterne lenkjer",
        "se også",
        "sjå òg",
        "kilder",
        "kjelder",
        "litteratur",
        "eksterne henvisninger",
        "fodnoter",
        "noter",
        "referencer",
    }
)
# Tags dropped with their contents.
_DROP_TAGS = frozenset(
    {
        "ref",
        "references",
        "gallery",
        "math",
        "timeline",
        "score",
        "chem",
        "ce",
        "graph",
        "mapframe",
        "maplink",
        "templatedata",
        "templatestyles",
        "imagemap",
        "hiero",
        "inputbox",
        "categorytree",
        "includeonly",
        "syntaxhighlight",
        "source",
        "table",
        "indicator",
        "section",
        "charinsert",
        "style",
        "script",
        "img",
    }
)
# Tags whose contents start on a fresh line.
_BLOCK_TAGS = frozenset(
    {
        "p",
        "div",
        "blockquote",
        "center",
        "poem",
        "pre",
        "ul",
        "ol",
        "dl",
        "li",
        "dt",
        "dd",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
    }
)
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


def prefix_key(prefix: str) -> str:
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
            prefix = prefix_key(title.split(":", 1)[0])
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
        frozenset(prefix_key(p) for p in drop_prefixes),
        frozenset(prefix_key(p) for p in namespace_prefixes),
        frozenset(s.strip().casefold() for s in (drop_sections or ())),
    )
    builder.walk(mwparserfromhell.parse(_prestrip(wikitext), skip_style_tags=True))
    return _normalize_whitespace("".join(builder.parts), builder.links)
