"""Answer matching: is a gold answer in a text, does a predicted answer match it.

Used by retrieval evaluation (answer recall), open-QA fine-tuning, RAG scoring, REALM's held-out
span table and the data formats, so it sits below all of them. `squad_scores` is SQuAD v1.1's exact
match and token F1 of a predicted answer.

A text holds an answer when it contains one of the answers after SQuAD-style normalisation
(Unicode NFD then recomposed, lower-case, punctuation removed, English articles removed,
whitespace collapsed), matched on whole tokens: the answer's token sequence must occur
contiguously in the text's tokens, so "1963" is found in "in 1963," but "196" is not. This is
the weak supervision ORQA and REALM use for open-domain QA retrieval.

Regex answers (CuratedTREC, TREC QA patterns) are matched as DPR's `has_answer(...,
match_type="regex")` does: pattern and text are both Unicode NFD-normalised, the pattern is
compiled with IGNORECASE | UNICODE | MULTILINE and searched anywhere in the text (so "19(6|7)\\d"
finds "in 1969,"). NFD is kept so numbers compare with DPR's; it splits an accented letter into
base letter + combining mark in text and pattern alike, so "[eé]" in a pattern no longer matches
"é" as one letter. Exact match of a predicted answer against patterns (`regex_em`) is DrQA's
`regex_match_score`: the raw pattern, same flags, must match at the start of the prediction.
Left out: the extra syntax of the third-party `regex` module DPR compiles with (patterns here are
Python `re`; classes, groups, alternation and quantifiers read the same).
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

from ralm.errors import RalmError

__all__ = [
    "ANSWER_MODES",
    "ARTICLES",
    "answer_tokens",
    "check_answer_patterns",
    "compile_answer",
    "has_answer",
    "normalize_answer",
    "regex_em",
    "regex_hit",
    "squad_scores",
    "token_string",
]
# Articles dropped by the normalisation, per language. SQuAD drops English "a/an/the"; the
# Scandinavian indefinite articles are also numerals ("en" = one), so they are kept.
ARTICLES = {"en": ("a", "an", "the")}
_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "«", "»", "–", "—", "…", "´"}
_TOKEN = re.compile(r"\w+", re.UNICODE)
# how the answers of a question file match: auto (the file says, see
# ralm.formats.openqa), string (normalised whole tokens) or regex (DPR's patterns)
ANSWER_MODES = ("auto", "string", "regex")
_REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE


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


@functools.lru_cache(maxsize=65536)
def compile_answer(pattern: str, nfd: bool = True) -> re.Pattern:
    """A regex answer compiled with IGNORECASE | UNICODE | MULTILINE, NFD-normalised first when
    `nfd` (passage search, as DPR) or as written (exact match, as DrQA); RalmError if invalid.

    Example: compile_answer("19(6|7)\\d").search("in 1969,") -> a match of "1969".
    """
    try:
        return re.compile(unicodedata.normalize("NFD", pattern) if nfd else pattern, _REGEX_FLAGS)
    except re.error as exc:
        raise RalmError(
            f"answer pattern {pattern!r} is not a valid regular expression ({exc}); "
            "fix it, or match the answers as text (--answers string)"
        ) from None


def check_answer_patterns(patterns: Iterable[str], where: str) -> None:
    """RalmError naming `where` (file:line) and the pattern when one of `patterns` does not compile
    (as written or NFD-normalised: `[é-z]` decomposes into a reversed range)."""
    for p in patterns:
        try:
            compile_answer(p, nfd=False)
            compile_answer(p, nfd=True)
        except RalmError as exc:
            raise RalmError(f"{where}: {exc}") from None


def regex_hit(text: str, patterns: Sequence[str]) -> bool:
    """True if one of `patterns` is found in `text` (DPR's regex has_answer).

    Example: regex_hit("Apollo 11 landed in 1969.", ["19(6|7)\\d"]) -> True.
    """
    hay = unicodedata.normalize("NFD", text)
    return any(compile_answer(p).search(hay) is not None for p in patterns)


def regex_em(prediction: str, patterns: Sequence[str]) -> float:
    """1.0 if one of `patterns` matches at the start of `prediction` (taken as is), else 0.0.

    Example: regex_em("1969", ["19(6|7)\\d"]) -> 1.0; regex_em("in 1969", [...]) -> 0.0.
    """
    return float(any(compile_answer(p, nfd=False).match(prediction) is not None for p in patterns))


def has_answer(text: str, answers: Sequence[str], lang: str = "en", regex: bool = False) -> bool:
    """True if `text` contains any of `answers` as a whole-token sequence after normalisation, or,
    with `regex`, if one of the answer patterns is found in it (`regex_hit`)."""
    if regex:
        return regex_hit(text, answers)
    hay = token_string(text, lang)
    return any(n.strip() and n in hay for n in (token_string(a, lang) for a in answers))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    """Token-bag F1 of two token lists: (["a", "b"], ["b"]) -> 0.667; two empty lists -> 1.0."""
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(prediction: str, answers: Sequence[str], lang: str = "en") -> tuple[float, float]:
    """SQuAD v1.1 (exact match, token F1) in [0, 1], each the max over `answers`.

    Example: squad_scores("the Eiffel Tower", ["Eiffel Tower"]) -> (1.0, 1.0).
    A prediction or answer that normalises to nothing scores F1 1 only against another such one.
    No answers at all gives (0.0, 0.0).
    """
    if not answers:
        return 0.0, 0.0
    pred = normalize_answer(prediction, lang)
    pred_tokens = pred.split()
    em = f1 = 0.0
    for answer in answers:
        gold = normalize_answer(answer, lang)
        em = max(em, float(pred == gold))
        f1 = max(f1, _f1(pred_tokens, gold.split()))
    return em, f1
