"""Analyzer: language resolution, Snowball stems (checked against PyStemmer), stopwords before stems."""

from __future__ import annotations

import importlib.metadata

import pytest
import Stemmer

from ralm.errors import RalmError
from ralm.retrieval import analysis
from ralm.retrieval.analysis import (
    ALGORITHMS,
    Analyzer,
    CachedStemmer,
    pystemmer_version,
    resolve_stopwords,
    split_words,
)

DANISH = (
    "Sådan opretter du PIVOTTABELLER i Excel, og alle diagrammerne opdateres. Pivottabellen "
    "viser summer; pivottabel-feltlisten ændrer rækkerne. Huset, husene og husets tage."
)


def test_languages_resolve():
    norwegian = Analyzer.resolve(lang="no")
    for code in ("nb", "nn", "no", "norwegian", "Norwegian", "nb-NO", "nn_NO"):
        a = Analyzer.from_lang(code)
        assert a.stemmer == "norwegian", code
        assert a.stopwords == tuple(resolve_stopwords("no")) and a == norwegian, code
    assert Analyzer.from_lang("nb-NO").lang == "nb" and Analyzer.from_lang("Norwegian").lang == "norwegian"
    for code, algorithm in (
        ("da", "danish"),
        ("sv", "swedish"),
        ("de", "german"),
        ("en", "english"),
        ("nl", "dutch"),
        ("fr", "french"),
        ("es", "spanish"),
        ("pt", "portuguese"),
        ("it", "italian"),
        ("ru", "russian"),
        ("fi", "finnish"),
        ("tr", "turkish"),
    ):
        a = Analyzer.from_lang(code)
        assert a.stemmer == algorithm and a.lang == code, code
        assert a == Analyzer.from_lang(algorithm), code  # the name gives the same analysis
    assert Analyzer.from_lang("da").stopwords == tuple(resolve_stopwords("da"))
    assert Analyzer.from_lang("en").stopwords == tuple(resolve_stopwords("en"))
    assert Analyzer.from_lang("fi").stopwords == ()  # bm25s has no Finnish list
    assert tuple(sorted(Stemmer.algorithms())) == ALGORITHMS
    for name in Stemmer.algorithms():  # every Snowball name is a language
        assert Analyzer.from_lang(name).stemmer == name
    assert Analyzer.resolve() == Analyzer() and Analyzer().stemmer is None and Analyzer().stopwords == ()


def test_unknown_values():
    codes = "da, de, en, es, fi, fr, it, nb, nl, nn, no, pt, ru, sv, tr"
    names = ", ".join(sorted(Stemmer.algorithms()))
    with pytest.raises(RalmError) as e:
        Analyzer.from_lang("xx")
    assert str(e.value) == f"unknown language 'xx'; use one of {codes} or a Snowball stemmer name: {names}"
    with pytest.raises(RalmError, match="unknown language 'klingon'; use one of da, de,"):
        Analyzer.resolve(lang="klingon", stemmer="danish")
    with pytest.raises(RalmError, match=r"unknown stemmer 'xx'; use none, a language code \(da, de,"):
        Analyzer.resolve(stemmer="xx")
    with pytest.raises(RalmError, match="no stopword list for 'xx'"):
        Analyzer.resolve(stopwords="xx")
    with pytest.raises(RalmError, match="stemmer 'Danish' is not a Snowball algorithm"):
        Analyzer(stemmer="Danish")  # the dataclass takes exact names; resolve() maps codes
    with pytest.raises(RalmError, match="give a list of words"):
        Analyzer(stopwords="en")  # type: ignore[arg-type]


def test_explicit_settings_override_lang():
    da = Analyzer.from_lang("da")
    assert Analyzer.resolve(lang="da", stopwords="none") == Analyzer((), "danish")
    assert Analyzer.resolve(lang="da", stopwords=[]) == Analyzer((), "danish")
    assert Analyzer.resolve(lang="da", stemmer="none") == Analyzer(da.stopwords, None)
    assert Analyzer.resolve(lang="da", stemmer="NONE", stopwords="None") == Analyzer()
    assert Analyzer.resolve(lang="da", stopwords=["Og", " ", "OG"]) == Analyzer(("og",), "danish")
    assert Analyzer.resolve(lang="da", stopwords="en", stemmer="sv") == Analyzer(
        tuple(resolve_stopwords("en")), "swedish"
    )
    assert Analyzer.resolve(stemmer="da") == Analyzer(stemmer="danish")  # codes name stemmers too
    assert Analyzer.resolve(stemmer="Danish").lang is None
    assert Analyzer.resolve(stopwords="no").stemmer is None


def test_stems_match_pystemmer():
    """The reference: stems are exactly `Stemmer.Stemmer('danish').stemWords` of the words."""
    words = split_words(DANISH)
    reference = Stemmer.Stemmer("danish").stemWords(words)
    a = Analyzer(stemmer="danish")
    assert a.analyze(DANISH) == reference
    assert a.analyze(DANISH) == reference  # again, now from the cache
    assert a.stem_words(["pivottabel", "pivottabeller", "pivottabellen"]) == ["pivottabel"] * 3
    assert a.analyze("PIVOTTABELLER") == a.analyze("pivottabel") == ["pivottabel"]
    assert a.stem_words([]) == [] and a.analyze("  ,. ") == []
    for lang in ("nb", "sv", "de", "en", "fi", "ru"):
        text = "Hovedstaden fjordene huvudstäderna Hauptstädte capitals pääkaupungit столицами"
        b = Analyzer.resolve(stemmer=lang)
        assert b.analyze(text) == Stemmer.Stemmer(b.stemmer).stemWords(split_words(text)), lang
    assert Analyzer().analyze(DANISH) == words  # no stemmer: the normalised words
    assert pystemmer_version() == importlib.metadata.version("PyStemmer")


def test_stem_cache_clears_when_full(monkeypatch):
    monkeypatch.setattr(analysis, "STEM_CACHE_SIZE", 4)
    s = CachedStemmer("danish")
    words = split_words(DANISH)
    assert s.stem_words(words) == Stemmer.Stemmer("danish").stemWords(words)
    assert len(s._cache) == len(set(words))  # one batch may overshoot; the next one clears first
    assert s.stem_words(["husene", "bilerne", "bilen"]) == ["hus", "bil", "bil"] and len(s._cache) == 3
    assert s.stem("pivottabellen") == "pivottabel"


def test_stopwords_are_dropped_before_stemming():
    """'have' is a Danish stopword (stem 'hav'); 'havet' and 'haven' are not and stem to 'hav':
    matching stopwords on stems would drop them too."""
    da = Analyzer.from_lang("da")
    assert "have" in da.stopwords and "havet" not in da.stopwords
    assert da.analyze("Vi have havet og haven") == ["hav", "hav"]
    en = Analyzer(stopwords=("Running",), stemmer="english")
    assert en.stopwords == ("running",)
    assert en.analyze("RUNNING runs Run running") == ["run", "run"]
    assert da.analyze(DANISH) == [
        "opret",
        "pivottabel",
        "excel",
        "diagram",
        "opdat",
        "pivottabel",
        "vis",
        "sum",
        "pivottabel",
        "feltlist",
        "ændr",
        "ræk",
        "hus",
        "hus",
        "hus",
        "tag",
    ]


def test_equality_describe_and_manifest():
    da = Analyzer.from_lang("da")
    n = len(resolve_stopwords("da"))
    assert da.describe() == f"da: {n} stopwords, danish stemmer" and repr(da) == f"Analyzer({da.describe()})"
    assert Analyzer().describe() == "no stopwords, no stemmer"
    assert Analyzer(("x",), "english").describe() == "1 stopword, english stemmer"
    assert Analyzer.from_lang("fi").describe() == "fi: no stopwords, finnish stemmer"
    # lang is a label: the same stopwords and stemmer are the same analysis (and hash alike)
    same = Analyzer.resolve(stopwords="danish", stemmer="danish")
    assert same == da and same.lang is None and hash(same) == hash(da) and len({same, da}) == 1
    assert da != Analyzer.resolve(lang="da", stemmer="none") and da != Analyzer.from_lang("no")
    m = da.to_manifest()
    assert m == {
        "lang": "da",
        "stopwords": list(resolve_stopwords("da")),
        "stemmer": "danish",
        "pystemmer_version": pystemmer_version(),
    }
    back = Analyzer.from_manifest(m)
    assert back == da and back.lang == "da" and back.describe() == da.describe()
    assert Analyzer().to_manifest() == {
        "lang": None,
        "stopwords": [],
        "stemmer": None,
        "pystemmer_version": None,
    }
    assert Analyzer.from_manifest({"stopwords": ["og"]}) == Analyzer(("og",))  # a version-1 manifest
