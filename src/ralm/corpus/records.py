"""One article record ({"title", "text", "id"?, "links"?}: a JSONL line or a table row) checked and
turned into an `Article`; shared by the JSONL reader (`ralm.corpus.readers`) and the table reader
(`ralm.corpus.tables`)."""

from __future__ import annotations

import json
from typing import Any

from ralm.corpus.types import Article, LinkSpan
from ralm.corpus.wikitext import normalize_title
from ralm.errors import CorpusError

__all__ = ["record_article"]


def _scalar_id(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise CorpusError(f'{where}: "id" must be a string or a number, not {type(value).__name__}')


def _parse_links(value: Any, text: str, where: str) -> list[LinkSpan]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CorpusError(f'{where}: "links" must be a list of {{"start", "end", "target"}} objects')
    links = []
    for i, link in enumerate(value):
        if not isinstance(link, dict):
            raise CorpusError(f'{where}: links[{i}] must be an object with "start", "end", "target"')
        start, end, target = link.get("start"), link.get("end"), link.get("target")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            raise CorpusError(f'{where}: links[{i}] needs integer "start" and "end"')
        if not isinstance(target, str):
            raise CorpusError(f'{where}: links[{i}] needs a string "target"')
        if not 0 <= start < end <= len(text):
            raise CorpusError(
                f"{where}: links[{i}] span [{start}, {end}) is out of bounds for a text of "
                f"{len(text)} characters; offsets are code-point indices with 0 <= start < end <= len(text)"
            )
        links.append(LinkSpan(start, end, normalize_title(target)))
    return links


def record_article(obj: dict[str, Any], where: str) -> Article | None:
    """The `Article` of one record {"title", "text", "id"?, "links"?} (a JSONL line or a table row),
    None when its text is blank; CorpusError naming `where` for a malformed record."""
    text = obj.get("text")
    if not isinstance(text, str):
        what = "missing" if text is None else f"a {type(text).__name__}, not a string"
        raise CorpusError(f'{where}: "text" is {what}; every record needs a string "text"')
    title = obj.get("title")
    if title is None:
        title = ""
    elif not isinstance(title, str):
        raise CorpusError(f'{where}: "title" must be a string, not {type(title).__name__}')
    links = _parse_links(obj.get("links"), text, where)
    if not text.strip():
        return None
    return Article(title=title, text=text, source_id=_scalar_id(obj.get("id"), where), links=links)
