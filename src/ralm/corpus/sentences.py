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
_CANDIDATE = re.compile(rf"(?:{_END}){_CLOSE}(?=[ \t\u00a0]+(\S))")


def _is_abbreviation(text: str, dot_pos: int) -> bool:
    """True if the word ending at `dot_pos` (the index of a '.') is an abbreviation or initial."""
    k = dot_pos
    while k > 0 and not text[k - 1].isspace():  # back to the start of the word (words are short)
        k -= 1
    if k == dot_pos:
        return False
    word = text[k:dot_pos].lstrip("(\"'“‘«[")
    if len(word) == 1 and word.isalpha() and word.isupper():
        return True  # an initial: "J. R. R. Tolkien"
    return word.lower() in ABBREVIATIONS


def sentence_boundaries(text: str) -> list[int]:
    """Character positions where a new sentence starts (always includes the first non-space char).

    The positions point at the first non-whitespace character of each sentence.
    """
    starts: list[int] = []
    pos = 0
    for line in text.split("\n"):
        line_start = pos
        pos += len(line) + 1
        stripped = line.lstrip()
        if not stripped:
            continue
        starts.append(line_start + len(line) - len(stripped))
        for m in _CANDIDATE.finditer(line):
            nxt = m.group(1)
            if nxt[0].islower():
                continue
            if line[m.start()] == "." and m.end() - m.start() == 1 and _is_abbreviation(line, m.start()):
                continue
            # the next sentence starts at the next non-space character
            j = m.end()
            while j < len(line) and line[j] in " \t\u00a0":
                j += 1
            starts.append(line_start + j)
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
