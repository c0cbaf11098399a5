"""Dates for salient-span masking: rule-based, language-aware (BRENT finds dates "with a simple
parsing algorithm", section 3.6).

`find_dates(text, lang)` gives the date spans of a text (source "date"); see `DateLanguage` for
the table of month names and how to add a language. Part of `ralm.corpus.salient`, which
re-exports everything here.
"""

from __future__ import annotations

import bisect
import datetime
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ralm.corpus.types import Span
from ralm.errors import CorpusError

__all__ = ["DATE_LANGUAGES", "DateLanguage", "find_dates", "register_date_language"]


@dataclass(frozen=True)
class DateLanguage:
    """How dates are written in one language.

    months: 12 tuples (January first) of the ways to write that month. A name ending in "."
        is an abbreviation whose dot is optional in text ("Sept." matches "Sept" and "Sept.").
    case_sensitive: match month names only as written in the table. English sets it, with
        capitalised names, so the verb "may" is never a month ("May 1861" is); the other
        languages write months in lower case and match them in any case.
    day_dot: the day may carry an ordinal dot ("12. april 1861").
    ordinal_suffixes: suffixes a day may carry ("12th April 1861").
    day_of: "12th of April 1861" is allowed.
    month_first: "April 12, 1861" and "April 12" are allowed besides "12 April 1861".
    decade_suffixes: suffixes that belong to a year span ("1860s", "1800-tallet").
    numeric_dates: day-first numeric dates "31.01.2024", "1.2.2024", "17/4 1974", "17/4-1974"
        (Danish and Norwegian; off for English, where 4/5 may be April 5 or May 4).
    year_words: the words (lower case, any case in text) that may stand right before a bare
        year, "in 1865": prepositions typical before years and date words ("år", "året",
        "anno", seasons). A bare year with none of them before it is no date ("fejl 1004").
    year_links: words that join a second year to a date right before them ("1861 and 1865",
        "i 1940 og 1945").

    To add a language, build one and call `register_date_language("sv", DateLanguage(...))`
    (or add it to `DATE_LANGUAGES` below); `find_dates(text, "sv")` then uses it.
    """

    months: tuple[tuple[str, ...], ...]
    case_sensitive: bool = False
    day_dot: bool = False
    ordinal_suffixes: tuple[str, ...] = ()
    day_of: bool = False
    month_first: bool = False
    decade_suffixes: tuple[str, ...] = ()
    numeric_dates: bool = False
    year_words: tuple[str, ...] = ()
    year_links: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.months) != 12 or not all(self.months):
            raise ValueError("DateLanguage.months needs 12 non-empty tuples of names")


# English words before a bare year: prepositions and date words (see DateLanguage.year_words).
_EN_YEAR_WORDS = (
    "in",
    "from",
    "since",
    "until",
    "till",
    "before",
    "after",
    "around",
    "circa",
    "ca",
    "ca.",
    "c.",
    "during",
    "between",
    "year",
    "anno",
    "spring",
    "summer",
    "autumn",
    "fall",
    "winter",
)
# Bokmål and Nynorsk ("frå", "sidan", "hausten").
_NO_YEAR_WORDS = (
    "i",
    "fra",
    "frå",
    "til",
    "siden",
    "sidan",
    "etter",
    "før",
    "innen",
    "inntil",
    "omkring",
    "rundt",
    "ca",
    "ca.",
    "cirka",
    "år",
    "året",
    "anno",
    "våren",
    "sommeren",
    "sommaren",
    "høsten",
    "hausten",
    "vinteren",
)
# Danish.
_DA_YEAR_WORDS = (
    "i",
    "fra",
    "til",
    "siden",
    "efter",
    "før",
    "inden",
    "indtil",
    "omkring",
    "ca",
    "ca.",
    "cirka",
    "år",
    "året",
    "anno",
    "foråret",
    "sommeren",
    "efteråret",
    "vinteren",
    "medio",
    "primo",
    "ultimo",
)
_ENGLISH = DateLanguage(
    months=(
        ("January", "Jan."),
        ("February", "Feb."),
        ("March", "Mar."),
        ("April", "Apr."),
        ("May",),
        ("June", "Jun."),
        ("July", "Jul."),
        ("August", "Aug."),
        ("September", "Sept.", "Sep."),
        ("October", "Oct."),
        ("November", "Nov."),
        ("December", "Dec."),
    ),
    case_sensitive=True,
    ordinal_suffixes=("st", "nd", "rd", "th"),
    day_of=True,
    month_first=True,
    decade_suffixes=("s", "'s", "\u2019s"),
    year_words=_EN_YEAR_WORDS,
    year_links=("and", "or", "to"),
)

_NORWEGIAN = DateLanguage(
    months=(
        ("januar", "jan."),
        ("februar", "feb."),
        ("mars", "mar."),
        ("april", "apr."),
        ("mai",),
        ("juni", "jun."),
        ("juli", "jul."),
        ("august", "aug."),
        ("september", "sept.", "sep."),
        ("oktober", "okt."),
        ("november", "nov."),
        ("desember", "des."),
    ),
    day_dot=True,
    # Bokmål "1800-tallet", "1860-årene"; Nynorsk "1800-talet", "1860-åra".
    decade_suffixes=("-tallet", "-talet", "-årene", "-åra"),
    numeric_dates=True,
    year_words=_NO_YEAR_WORDS,
    year_links=("og", "eller"),
)

_DANISH = DateLanguage(
    months=(
        ("januar", "jan."),
        ("februar", "feb."),
        ("marts", "mar."),
        ("april", "apr."),
        ("maj",),
        ("juni", "jun."),
        ("juli", "jul."),
        ("august", "aug."),
        ("september", "sept.", "sep."),
        ("oktober", "okt."),
        ("november", "nov."),
        ("december", "dec."),
    ),
    day_dot=True,
    decade_suffixes=("-tallet", "'erne", "\u2019erne", "erne"),
    numeric_dates=True,
    year_words=_DA_YEAR_WORDS,
    year_links=("og", "eller"),
)

# Language code (lower case, the part before "-"/"_") -> date conventions.
DATE_LANGUAGES: dict[str, DateLanguage] = {
    "en": _ENGLISH,
    "nb": _NORWEGIAN,
    "nn": _NORWEGIAN,
    "no": _NORWEGIAN,
    "da": _DANISH,
}

# Number boundaries: no alphanumeric character right before or after, and no digit group
# continuing through a "," or "." ("1,861", "1861.5").
_NUM_START = r"(?<![^\W_])(?<!\d[.,])"
_NUM_END = r"(?![^\W_])(?![.,]\d)"
_DAY = r"(?:3[01]|[12]\d|0?[1-9])"
_MONTH = r"(?:1[0-2]|0?[1-9])"
_YEAR = r"(?:1\d{3}|20\d{2})"  # 1000-2099
_SEP = r"[^\S\n]+"  # spaces (also no-break ones), not a line break
_ISO = rf"{_NUM_START}(?P<iso_y>{_YEAR})-(?P<iso_m>0[1-9]|1[0-2])-(?P<iso_d>3[01]|[12]\d|0[1-9]){_NUM_END}"
# day-first numeric dates (numeric_dates): "31.01.2024", "1.2.2024"; "17/4 1974", "17/4-1974"
_DOTTED = rf"{_NUM_START}(?P<dot_d>{_DAY})\.(?P<dot_m>{_MONTH})\.(?P<dot_y>{_YEAR}){_NUM_END}"
_SLASHED = rf"{_NUM_START}(?<!/)(?P<sl_d>{_DAY})/(?P<sl_m>{_MONTH})(?:-|{_SEP})(?P<sl_y>{_YEAR}){_NUM_END}"
_CALENDAR_GROUPS = (("iso_y", "iso_m", "iso_d"), ("dot_y", "dot_m", "dot_d"), ("sl_y", "sl_m", "sl_d"))
# A digit group next to a number: only spaces, or one of - – / : + (with optional spaces), between
# them ("1004 1252", "1004-1252", "12/4 1974 5566", "2024 10:30"). A "," or "." with a space after
# it does not join ("in 1861, 1862", "... 1861. 1862 ...").
_DIGIT_BEFORE = re.compile(r"\d[^\S\n]*(?:[-\u2013/:+][^\S\n]*)?$")
_DIGIT_AFTER = re.compile(r"[^\S\n]*(?:[-\u2013/:+][^\S\n]*)?\d")
# The word right before a position, spaces between ("in 1865", "ca. 1850").
_WORD_BEFORE = re.compile(r"(?<!\w)([^\W\d_]+\.?)[^\S\n]+$")


@dataclass(frozen=True)
class _DatePatterns:
    """The compiled date forms of one language (see `find_dates`)."""

    dates: re.Pattern[str]  # dates with a day or a month; groups of _CALENDAR_GROUPS for numeric ones
    years: re.Pattern[str]  # bare-year candidates: y1, optional range "-"/"–" y2, or a decade suffix
    words: frozenset[str]
    links: frozenset[str]


_DATE_PATTERNS: dict[str, _DatePatterns] = {}


def register_date_language(code: str, language: DateLanguage) -> None:
    """Add or replace the date conventions of language `code` (see `DateLanguage`)."""
    code = _lang_key(code)
    DATE_LANGUAGES[code] = language
    _DATE_PATTERNS.pop(code, None)


def _lang_key(lang: str) -> str:
    return re.split(r"[-_]", lang.strip().lower(), maxsplit=1)[0]


def _alternation(items: Iterable[str]) -> str:
    return "|".join(sorted(set(items), key=lambda s: (-len(s), s)))


def _compile_dates(lang: DateLanguage) -> _DatePatterns:
    names = []
    for forms in lang.months:
        for form in forms:
            if form.endswith("."):
                names.append(re.escape(form[:-1]) + r"\.?")
            else:
                names.append(re.escape(form))
    month = rf"(?:{_alternation(names)})(?![^\W_])"
    day = _NUM_START + _DAY
    if lang.ordinal_suffixes:
        day += rf"(?:{_alternation(re.escape(s) for s in lang.ordinal_suffixes)})?"
    if lang.day_dot:
        day += r"\.?"
    day += r"(?![^\W_])"
    day_month = rf"{day}{_SEP}(?:of{_SEP})?{month}" if lang.day_of else rf"{day}{_SEP}{month}"
    year = _YEAR + _NUM_END
    forms = [_ISO]
    if lang.numeric_dates:
        forms += [_DOTTED, _SLASHED]
    forms.append(rf"{day_month},?{_SEP}{year}")
    if lang.month_first:
        forms.append(rf"{month}{_SEP}{day},?{_SEP}{year}")
    forms.append(rf"{month},?{_SEP}{year}")
    forms.append(day_month)
    if lang.month_first:
        forms.append(rf"{month}{_SEP}{day}")
    years = rf"{_NUM_START}(?P<y1>{_YEAR})(?:[^\S\n]?[-\u2013][^\S\n]?(?P<y2>{_YEAR}){_NUM_END}"
    if lang.decade_suffixes:
        years += rf"|(?P<decade>{_alternation(re.escape(s) for s in lang.decade_suffixes)})"
    years += rf")?{_NUM_END}"
    flags = 0 if lang.case_sensitive else re.IGNORECASE
    return _DatePatterns(
        dates=re.compile("|".join(f"(?:{f})" for f in forms), flags),
        years=re.compile(years, flags),
        words=frozenset(w.lower() for w in lang.year_words),
        links=frozenset(w.lower() for w in lang.year_links),
    )


def _date_pattern(lang: str) -> _DatePatterns:
    key = _lang_key(lang)
    pat = _DATE_PATTERNS.get(key)
    if pat is None:
        spec = DATE_LANGUAGES.get(key)
        if spec is None:
            raise CorpusError(
                f"no date patterns for language {lang!r} (known: {', '.join(sorted(DATE_LANGUAGES))}); "
                "add one with ralm.corpus.salient.register_date_language"
            )
        pat = _DATE_PATTERNS[key] = _compile_dates(spec)
    return pat


def _digit_next_to(text: str, start: int, end: int) -> bool:
    """True when a digit group joins text[start:end] on either side (see _DIGIT_BEFORE)."""
    return bool(_DIGIT_BEFORE.search(text, max(0, start - 8), start) or _DIGIT_AFTER.match(text, end))


def _real_day(m: re.Match[str]) -> bool:
    """False for a numeric date that is no calendar day ("31.02.2024", "2023-02-29")."""
    for y, mo, d in _CALENDAR_GROUPS:
        if (m.groupdict().get(y)) is not None:
            try:
                datetime.date(int(m.group(y)), int(m.group(mo)), int(m.group(d)))
            except ValueError:
                return False
    return True


def find_dates(text: str, lang: str = "en") -> list[Span]:
    """Date spans of `text` (source "date", label "DATE"), sorted and non-overlapping.

    Forms, the first one in this list that matches at a position winning: ISO "1861-04-12";
    day-first numeric dates in Danish and Norwegian ("31.01.2024", "1.2.2024", "17/4 1974",
    "17/4-1974"); day-month-year ("12 April 1861", "12th of April, 1861", "April 12, 1861" in
    English; "12. april 1861", "12 april 1861" in Norwegian and Danish); month-year ("April
    1861"); day-month ("12 April", "April 12", "12. april"). Numeric dates must be calendar days
    ("31.02.2024" and "2023-02-29" are not), and "17/4 1974" must not touch another digit group
    ("12/4 1974 5566" is a phone number).

    Bare years 1000-2099 need context, so error codes, counts and phone numbers are not dates:
    the word right before the year is one of the language's `year_words` ("in 1865", "fra 1849",
    "året 1864", "ca. 1850"), or one of its `year_links` right after a date ("between 1861 and
    1865", "i 1940 og 1945"); and no digit group joins the year ("1004 1252", "i 2024 10:30",
    "1861-65" are not years). A range "1861–1865" or "1861-1865" (the second year later) gives two
    year spans; it needs a year word before it or parentheses around it ("(1809–1865)"). A year
    with one of the language's decade suffixes ("1860s", "1800-tallet") needs no context.

    A year is never cut out of a longer number ("12345", "1,861", "1861.5", "3.11.2024.1").
    English month names match only capitalised, so the verb "may" is never a date.
    """
    pats = _date_pattern(lang)
    found: list[tuple[int, int]] = []
    pos = 0
    while (m := pats.dates.search(text, pos)) is not None:
        slashed = m.groupdict().get("sl_y") is not None
        if _real_day(m) and not (slashed and _digit_next_to(text, m.start(), m.end())):
            found.append(m.span())
            pos = m.end()
        else:
            pos = m.start() + 1
    starts = [s for s, _ in found]
    ends = [e for _, e in found]
    date_ends = set(ends)

    def overlaps(a: int, b: int) -> bool:
        i = bisect.bisect_right(ends, a)
        return i < len(starts) and starts[i] < b

    def in_context(start: int) -> bool:
        w = _WORD_BEFORE.search(text, max(0, start - 40), start)
        if w is None:
            return False
        word = w.group(1).lower()
        if word in pats.words:
            return True
        return word in pats.links and len(text[: w.start(1)].rstrip()) in date_ends

    years: list[tuple[int, int]] = []
    for m in pats.years.finditer(text):
        start, end = m.span()
        if overlaps(start, end) or _digit_next_to(text, start, end):
            continue
        if m.groupdict().get("decade"):
            got = [(start, end)]
        elif m.group("y2") is not None:
            in_parens = text[start - 1 : start] == "(" and text[end : end + 1] == ")"
            if int(m.group("y2")) <= int(m.group("y1")) or not (in_parens or in_context(start)):
                continue
            got = [m.span("y1"), m.span("y2")]
        elif in_context(start):
            got = [(start, end)]
        else:
            continue
        years += got
        date_ends.update(e for _, e in got)
    return [Span(s, e, "date", "DATE") for s, e in sorted(found + years)]
