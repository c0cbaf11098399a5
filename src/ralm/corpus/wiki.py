"""Stream articles out of MediaWiki XML dumps.

`iter_wiki_dump` reads a `pages-articles` export (`.xml`, or bzip2/gzip compressed, detected by
magic bytes) with `xml.etree.ElementTree.iterparse`, clearing every finished `<page>` so memory
stays flat on multi-GB dumps. It yields one `Article` per main-namespace page, skips redirects
(optionally recording them) and pages whose text cleans to nothing; the text comes from
`ralm.corpus.wikitext.wikitext_to_text`. Left out: page revisions other than the one in the dump
(only the first `<revision>` is read).
"""

from __future__ import annotations

import bz2
import gzip
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ralm.corpus.types import Article
from ralm.corpus.wikitext import (
    DEFAULT_DROP_PREFIXES,
    DEFAULT_DROP_SECTIONS,
    DEFAULT_NAMESPACE_PREFIXES,
    normalize_title,
    prefix_key,
    wikitext_to_text,
)
from ralm.errors import CorpusError

__all__ = ["WikiPage", "iter_wiki_dump", "iter_wiki_pages", "no_articles_error", "open_binary"]

_REDIRECT_RE = re.compile(
    r"\s*#\s*(?:REDIRECT|ПРЕНАСОЧВАНЕ|OMDIRIGERING|VIDERESTILLING|WEITERLEITUNG|REDIRECTION)"
    r"\s*:?\s*\[\[([^\]|]+)",
    re.IGNORECASE,
)


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
                        drop_prefixes.add(prefix_key(ns_name))
                    else:
                        namespace_prefixes.add(prefix_key(ns_name))
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
