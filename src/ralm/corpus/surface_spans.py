"""Names and numbers by their surface form: salient spans where no NER pipeline installs.

REALM and BRENT mask named entities found by a tagger; for Danish and Norwegian none installs
offline here, and dates alone rarely recur across a small corpus, so retrieval has little to
find for them. Two language-independent detectors for Latin-script text fill the gap:

* `find_names`: runs of capitalised words ("Harald Hårfagre", "Statens vegvesen" is one word
  "Statens", "NRK"), with lower-case particles between two capitalised words ("Ludwig van
  Beethoven", "Olav den hellige" is "Olav"). A capitalised word that starts a sentence is a name
  word only when the same word is also capitalised somewhere mid-sentence in the text (so "Etter
  krigen" is no name, "Oslo er ... i Oslo" is). One-letter words are left out.
* `find_numbers`: numbers of two or more digits, with thousands separators (a space, a no-break
  space, a dot or a comma between groups of three) and a decimal part ("1 500", "2,5",
  "3.14", "17"); not inside a word ("B52", "x2").

Both give `Span`s (source "name" / "number", empty label). Left out: scripts without case
(CJK), honorifics, and telling a name from a capitalised common noun (German nouns are all names
here); use NER where a pipeline exists.
"""

from __future__ import annotations

import re

from ralm.corpus.types import Span

__all__ = ["PARTICLES", "find_names", "find_numbers"]

# lower-case words that may stand between two capitalised words of one name
PARTICLES = frozenset(
    {
        "van",
        "von",
        "der",
        "den",
        "de",
        "del",
        "della",
        "di",
        "da",
        "du",
        "la",
        "le",
        "af",
        "av",
        "zu",
        "y",
        "bin",
        "ibn",
    }
)
_WORD = re.compile(r"[^\W\d_](?:[\w'’-]*\w)?")
_SENTENCE_END = re.compile(r"(?:^|[.!?:;…\n]|[.!?]['\"»”’)])[\s'\"«“‘(\[-]*$")
_NUMBER = re.compile(
    r"(?<![\w.,])[-+−]?(?:\d{1,3}(?:(?:[ \u00a0.,])\d{3})+|\d+)(?:[.,]\d+)?(?![\w])(?![.,]\d)"
)


def _capitalised(w: str) -> bool:
    return len(w) > 1 and w[0].isupper()


def find_names(text: str) -> list[Span]:
    """Name spans of `text` (see the module docstring), sorted by start.

    Example: find_names("Etter krigen flyttet Harald Hårfagre til Oslo.") ->
    [Span(21, 36, "name", ""), Span(41, 45, "name", "")]  ("Harald Hårfagre", "Oslo").
    """
    words = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(text)]
    initial = [bool(_SENTENCE_END.search(text[:s])) for s, _, _ in words]
    mid_caps = {w for (_, _, w), first in zip(words, initial, strict=True) if not first and _capitalised(w)}
    is_name = [
        _capitalised(w) and (not first or w in mid_caps)
        for (_, _, w), first in zip(words, initial, strict=True)
    ]
    spans: list[Span] = []
    i = 0
    while i < len(words):
        if not is_name[i]:
            i += 1
            continue
        j = i  # the last name word of the run
        k = i + 1
        while k < len(words):
            gap = text[words[k - 1][1] : words[k][0]]
            if gap not in (" ", "\u00a0", "-"):
                break
            if is_name[k] and not initial[k]:
                j = k
                k += 1
                continue
            if words[k][2] in PARTICLES and k + 1 < len(words) and is_name[k + 1]:
                gap2 = text[words[k][1] : words[k + 1][0]]
                if gap2 == " ":
                    k += 1
                    continue
            break
        spans.append(Span(words[i][0], words[j][1], "name", ""))
        i = j + 1
    return spans


def find_numbers(text: str) -> list[Span]:
    """Number spans of two or more digits (see the module docstring), sorted by start.

    Example: find_numbers("Det bor 1 500 mennesker der, 2,5 prosent av 60.") ->
    [Span(8, 13, "number", ""), Span(29, 32, "number", ""), Span(44, 46, "number", "")].
    """
    out = []
    for m in _NUMBER.finditer(text):
        s = m.group()
        if sum(c.isdigit() for c in s) >= 2:
            out.append(Span(m.start(), m.end(), "number", ""))
    return out
