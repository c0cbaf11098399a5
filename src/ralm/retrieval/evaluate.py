"""Retrieval evaluation: answer matching and recall@k over (question, answers) pairs.

A retrieved chunk is a hit when it contains one of the question's answers after SQuAD-style
normalisation (Unicode NFD then recomposed, lower-case, punctuation removed, English articles
removed, whitespace collapsed), matched on whole tokens: the answer's token sequence must occur
contiguously in the chunk's tokens, so "1963" is found in "in 1963," but "196" is not. This is
the weak supervision ORQA and REALM use for open-domain QA retrieval.

recall@k is the fraction of questions with at least one hit among the top k chunks.
Left out: regex answers (CuratedTREC) and title matching.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence

import numpy as np

# Articles dropped by the normalisation, per language. SQuAD drops English "a/an/the"; the
# Scandinavian indefinite articles are also numerals ("en" = one), so they are kept.
ARTICLES = {"en": ("a", "an", "the")}
_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "«", "»", "–", "—", "…", "´"}
_TOKEN = re.compile(r"\w+", re.UNICODE)


def normalize_answer(s: str, lang: str = "en") -> str:
    """SQuAD normalisation: "The  Beatles!" -> "beatles"; "Tromsø" stays "tromsø"."""
    s = unicodedata.normalize("NFC", unicodedata.normalize("NFD", s)).lower()
    s = "".join(" " if ch in _PUNCT else ch for ch in s)
    articles = ARTICLES.get(lang.split("-")[0], ())
    words = [w for w in s.split() if w not in articles]
    return " ".join(words)


def answer_tokens(s: str, lang: str = "en") -> list[str]:
    """The normalised word tokens of `s`: "Sputnik-1." -> ["sputnik", "1"]."""
    return _TOKEN.findall(normalize_answer(s, lang))


def token_string(s: str, lang: str = "en") -> str:
    """Normalised tokens joined and framed by spaces: "Sputnik-1." -> " sputnik 1 ".

    Tokens hold no spaces, so `needle in haystack` on two such strings is exactly a whole-token
    contiguous match (and far faster than comparing token lists).
    """
    return " " + " ".join(answer_tokens(s, lang)) + " "


def has_answer(text: str, answers: Sequence[str], lang: str = "en") -> bool:
    """True if `text` contains any of `answers` as a whole-token sequence after normalisation."""
    hay = token_string(text, lang)
    return any(n.strip() and n in hay for n in (token_string(a, lang) for a in answers))


def hit_matrix(
    ids: np.ndarray, texts: dict[int, str], answers: Sequence[Sequence[str]], lang: str = "en"
) -> np.ndarray:
    """(Q, K) bool: hit[q, j] = chunk ids[q, j] contains an answer of question q.

    texts: chunk id -> chunk text for every id in `ids` (e.g. from DocStore.get_many).
    """
    cache: dict[int, str] = {}
    out = np.zeros(ids.shape, dtype=bool)
    for q, row in enumerate(ids):
        needles = [n for n in (token_string(a, lang) for a in answers[q]) if n.strip()]
        for j, cid in enumerate(row):
            cid = int(cid)
            if cid < 0:
                continue
            hay = cache.get(cid)
            if hay is None:
                hay = cache[cid] = token_string(texts[cid], lang)
            out[q, j] = any(n in hay for n in needles)
    return out


def answerable(
    pairs: Sequence[tuple[str, Sequence[str]]], texts: Sequence[str], lang: str = "en"
) -> list[tuple[str, list[str]]]:
    """The (question, answers) pairs with an answer somewhere in `texts` (e.g. all chunks of a store)."""
    hays = [token_string(t, lang) for t in texts]
    keep = []
    for q, answers in pairs:
        needles = [n for n in (token_string(a, lang) for a in answers) if n.strip()]
        if any(n in h for h in hays for n in needles):
            keep.append((q, list(answers)))
    return keep


def recall_at_k(hits: np.ndarray, ks: Sequence[int] = (1, 5, 10, 20)) -> dict[int, float]:
    """Fraction of rows of `hits` (Q, K) with a hit in the first k columns, for each k <= K.

    Example: hits [[0, 1], [0, 0]] -> {1: 0.0, 2: 0.5}.
    """
    hits = np.asarray(hits, dtype=bool)
    return {k: float(hits[:, :k].any(axis=1).mean()) if len(hits) else 0.0 for k in ks if k <= hits.shape[1]}
