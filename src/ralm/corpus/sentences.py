"""A sentence splitter that works for any language written with sentence punctuation.

It is rule-based on purpose: no model, no language pack, so it runs on a Norwegian, Danish or
Bulgarian dump the same way as on English. A boundary falls
- at every line break (paragraphs and list items in cleaned wikitext are lines), and
- after `.`, `!`, `?`, `…` (or the CJK/Devanagari/Arabic full stops) plus any closing quotes or
  brackets, when whitespace follows and the next word does not start with a lower-case letter,
  unless the token before the full stop is a known abbreviation or a single capital initial.

Deliberately left out: statistical disambiguation (Punkt), and splitting of text with no
sentence punctuation at all. Both the chunker and ICT (pseudo-query = one sentence) use this.

Example: split_sentences("Dr. Who left. Then rain fell!\\nNew line") ->
    [(0, 13), (14, 29), (30, 38)]
"""

from __future__ import annotations

import re

# Abbreviations after which a full stop does not end a sentence (lower-cased, without the
# final "."). English, Norwegian and Danish; extend freely, it only makes splits rarer.
ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "mt",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "cf",
        "al",
        "approx",
        "no",
        "nos",
        "vol",
        "fig",
        "ca",
        "c",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "inc",
        "ltd",
        "co",
        "corp",
        "gen",
        "col",
        "lt",
        "sgt",
        "capt",
        "rev",
        "hon",
        "bl.a",
        "f.eks",
        "dvs",
        "osv",
        "mfl",
        "m.fl",
        "nr",
        "pga",
        "iht",
        "jf",
        "ev",
        "evt",
        "ifm",
        "kl",
        "ca.",
        "mv",
        "m.v",
        "s.k",
        "skr",
        "t.o.m",
        "o.l",
        "bla",
        "f.eks.",
        "ang",
        "hhv",
        "dsb",
        "fx",
        "mht",
        "bl.a.",
        "el",
    ]
)

_END = r"[.!?…]+|[。！？।؟]"
_CLOSE = r"[\"'”’»)\]]*"
# A candidate boundary: end punctuation, closing marks, then whitespace (not a newline).
_WORD_BEFORE = re.compile(r"(\S+)$")
_CANDIDATE = re.compile(rf"(?:{_END}){_CLOSE}(?=[ \t\u00a0]+(\S))")
# The first non-space character of every line (lines are boundaries on their own).
_LINE_START = re.compile(r"^[^\S\n]*(\S)", re.MULTILINE)


def _is_abbreviation(text: str, dot_pos: int) -> bool:
    """True if the word ending at `dot_pos` (the index of a '.') is an abbreviation or initial."""
    # abbreviations are short: look back at most 40 chars (a longer word is never one)
    m = _WORD_BEFORE.search(text, max(0, dot_pos - 40), dot_pos)
    if m is None:
        return False
    word = m.group(1).lstrip("(\"'“‘«[")
    if len(word) == 1 and word.isalpha() and word.isupper():
        return True  # an initial: "J. R. R. Tolkien"
    return word.lower() in ABBREVIATIONS


def sentence_boundaries(text: str) -> list[int]:
    """Character positions where a new sentence starts (always includes the first non-space char).

    The positions point at the first non-whitespace character of each sentence.
    """
    starts = [m.start(1) for m in _LINE_START.finditer(text)]
    for m in _CANDIDATE.finditer(text):
        if m.group(1)[0].islower():
            continue
        if text[m.start()] == "." and m.end() - m.start() == 1 and _is_abbreviation(text, m.start()):
            continue
        starts.append(m.start(1))  # the next sentence starts at the next non-space character
    starts.sort()
    return starts


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Half-open (start, end) character spans of the sentences of `text`, trailing space excluded."""
    starts = sentence_boundaries(text)
    spans = []
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else len(text)
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            spans.append((s, e))
    return spans
