"""Word tokenisation shared by the n-gram LMs (`ralm.lm`) and query-likelihood retrieval
(`ralm.retrieval.query_likelihood`), below both."""

from __future__ import annotations

import re

__all__ = ["word_tokenize"]

_WORD_RE = re.compile(r"\w+|[^\w\s]")


def word_tokenize(text: str, lowercase: bool = False) -> list[str]:
    """The default word tokenisation: runs of Unicode word characters, or single symbols.

    Example: `word_tokenize("Æble-tærte, 3.5 kr!", lowercase=True)`
    -> `['æble', '-', 'tærte', ',', '3', '.', '5', 'kr', '!']`.
    """
    if lowercase:
        text = text.lower()
    return _WORD_RE.findall(text)
