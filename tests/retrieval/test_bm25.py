"""BM25Searcher: a hand-checked ranking, exclusion and always-k, Nordic/Cyrillic tokens, save/load,
Danish stemming (checked against a naive BM25), the analysis in the manifest (v2, and v1 still loads)."""

from __future__ import annotations

import importlib.metadata
import json
import math
import shutil
import unicodedata
from collections import Counter

import numpy as np
import pytest

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.analysis import Analyzer
from ralm.retrieval.base import Searcher
from ralm.retrieval.bm25 import FORMAT_VERSION, BM25Searcher, resolve_stopwords, split_words, store_analyzer

DOCS = [
    ("Oslo", "Oslo is the capital of Norway."),  # 0
    ("Fjords", "The fjords of Norway attract many tourists every summer."),  # 1
    ("Nobel", "The city of Oslo hosts the Nobel Peace Prize ceremony every December."),  # 2
    ("Bergen", "Bergen is a rainy city on the west coast."),  # 3
    ("Stockholm", "Stockholm is the capital of Sweden."),  # 4
    ("Copenhagen", "Copenhagen is the capital of Denmark."),  # 5
    # Decomposed (NFD) Norwegian, as some sources deliver it, a one-letter word, and Russian.
    (
        "Syltetøy",
        unicodedata.normalize("NFD", "Blåbærsyltetøy fra Ålesund smaker godt på brødskiva, å ja."),
    ),  # 6
    ("Москва", "Москва — столица России и крупнейший город Европы."),  # 7
]


# Danish: only chunk 0 has a "pivottabel" form, and only as "pivottabeller".
DA_DOCS = [
    ("Excel", "Sådan opretter du pivottabeller i Excel."),  # 0
    ("Word", "Tabeller og diagrammer i Word."),  # 1
    ("Regneark", "Formler og funktioner i et regneark, og en tabel med summer."),  # 2
    ("Diagrammer", "Diagrammet viser summen af rækkerne i tabellen, og summen af summerne."),  # 3
]


def make_store(d, docs, lang="en"):
    src = d / "docs.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for title, text in docs:
            f.write(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")
    cfg = BuildConfig(chunk_size=64, lang=lang)
    s = build_docstore([src], d / "store", cfg, progress=False, log=lambda m: None)
    assert len(s) == len(docs)  # one chunk per document, ids in file order
    return s


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("bm25"), DOCS)


@pytest.fixture(scope="module")
def da_store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("bm25_da"), DA_DOCS, lang="da")


@pytest.fixture(scope="module")
def bm25_da(da_store):
    return BM25Searcher.build(da_store, lang="da", include_title=False)


PLAIN = {"stopwords": "none", "stemmer": "none"}  # overrides the DocStore's language


@pytest.fixture(scope="module")
def bm25(store):
    return BM25Searcher.build(store, include_title=False, **PLAIN)


def test_hand_made_ranking(bm25):
    """'capital of Norway' (idf: norway > capital > of):
    0 has all three terms -> first; 1 has norway + of -> second (norway's idf outweighs capital's
    although 1 is longer); 4 and 5 have capital + of and the same length -> an exact tie, the
    lower id 4 comes third."""
    res = bm25.search_text(["capital of Norway"], 3)
    assert res.ids.tolist() == [[0, 1, 4]]
    assert res.scores[0, 0] > res.scores[0, 1] > res.scores[0, 2] > 0
    full = bm25.scores("capital of Norway")
    assert full[4] == full[5]
    backend: Searcher = bm25  # the protocol (checked statically; it is not runtime_checkable)
    assert backend.search_text(["Norway"], 1).ids[0, 0] in (0, 1)


def test_exclusion_and_always_k(bm25):
    res = bm25.search_text(["capital of Norway", "capital of Norway"], 3, exclude_ids=[0, [0, 1]])
    assert res.ids.tolist() == [[1, 4, 5], [4, 5, 2]]  # 2 is the best of the rest ("of")
    # k + |excluded| == N: everything else, including zero-score chunks, lower ids first on ties.
    res = bm25.search_text(["Oslo"], 7, exclude_ids=[[2]])
    assert sorted(res.ids[0].tolist()) == [0, 1, 3, 4, 5, 6, 7] and res.ids[0, 0] == 0
    assert res.ids[0, 1:].tolist() == [1, 3, 4, 5, 6, 7] and (res.scores[0, 1:] == 0).all()
    with pytest.raises(RalmError, match="k=8 is more than the 7 chunks left for query 0"):
        bm25.search_text(["Oslo"], 8, exclude_ids=[2])


def test_nordic_and_cyrillic_tokens(bm25):
    # NFD input is composed, one-letter words kept, case folded; bm25s's default pattern would
    # give "bla", "bærsyltetøy", "pa", "lesund" and drop "å".
    assert split_words(DOCS[6][1]) == [
        "blåbærsyltetøy",
        "fra",
        "ålesund",
        "smaker",
        "godt",
        "på",
        "brødskiva",
        "å",
        "ja",
    ]
    assert split_words("МОСКВА — столица") == ["москва", "столица"]
    for query, want in (
        ("ÅLESUND", 6),
        ("blåbærsyltetøy", 6),
        ("å", 6),
        ("москва", 7),
        ("СТОЛИЦА России", 7),
    ):
        assert bm25.search_text([query], 1).ids[0, 0] == want, query
        assert bm25.search_text([query], 1).scores[0, 0] > 0


def test_title_is_indexed_by_default(store, bm25):
    with_title = BM25Searcher.build(store, **PLAIN)
    assert with_title.search_text(["Stockholm"], 1).ids[0, 0] == 4
    assert with_title.scores("Fjords")[1] > 0 and bm25.scores("Bergen")[3] > 0
    assert with_title.scores("Copenhagen")[5] > bm25.scores("Copenhagen")[5]  # title + text


def test_stopwords(store):
    assert resolve_stopwords(None) == []
    assert (
        "the" in resolve_stopwords("en")
        and "og" in resolve_stopwords("no")
        and "и" in resolve_stopwords("ru")
    )
    with pytest.raises(RalmError, match="no stopword list for 'xx'"):
        resolve_stopwords("xx")
    en = BM25Searcher.build(store, include_title=False, stopwords="en")
    assert en.tokenize_query("the of is") == []
    assert (en.scores("the") == 0).all()  # only stopwords: every chunk scores 0, k still come back
    assert en.search_text(["the"], 3).ids.tolist() == [[0, 1, 2]]
    mine = BM25Searcher.build(store, include_title=False, stopwords=["Oslo"])
    assert (mine.scores("oslo") == 0).all()


def test_query_errors(bm25):
    with pytest.raises(RalmError, match="empty query batch"):
        bm25.search_text([], 3)
    with pytest.raises(RalmError, match="query 1 is empty"):
        bm25.search_text(["Oslo", "   "], 3)
    with pytest.raises(RalmError, match="single string"):
        bm25.search_text("Oslo", 3)
    with pytest.raises(RalmError, match="k=9 is more than the N=8"):
        bm25.search_text(["Oslo"], 9)


def test_save_load_round_trip(tmp_path, store, bm25):
    queries = ["capital of Norway", "Oslo", "ålesund", "москва"]
    before = bm25.search_text(queries, 5, exclude_ids=[0, None, [6], 1])
    bm25.save(tmp_path / "bm25")
    files = sorted(p.name for p in (tmp_path / "bm25").iterdir())
    assert "bm25.json" in files and not [f for f in files if f.endswith((".pkl", ".pickle")) or "tmp" in f]
    for npy in (tmp_path / "bm25").glob("*.npy"):
        np.load(npy, allow_pickle=False)  # plain arrays, no pickles
    loaded = BM25Searcher.load(tmp_path / "bm25", docstore_fingerprint=store.fingerprint)
    after = loaded.search_text(queries, 5, exclude_ids=[0, None, [6], 1])
    np.testing.assert_array_equal(before.ids, after.ids)
    np.testing.assert_array_equal(before.scores, after.scores)
    with pytest.raises(RalmError, match=r"built from another corpus \(docstore fingerprint .*; rebuild it"):
        BM25Searcher.load(tmp_path / "bm25", docstore_fingerprint="f" * 64)
    with pytest.raises(RalmError, match="nothing/bm25.json: no such file"):
        BM25Searcher.load(tmp_path / "nothing")
    (tmp_path / "bm25" / "vocab.index.json").unlink()
    with pytest.raises(RalmError, match="vocab.index.json: no such file"):
        BM25Searcher.load(tmp_path / "bm25")


def test_default_analysis_is_unchanged(bm25):
    """No lang: no stopwords, no stemming (the terms are the normalised words), recorded so."""
    assert bm25.analyzer == Analyzer() and bm25.stemmer is None and bm25.stopwords == []
    assert bm25.describe() == "no stopwords, no stemmer"
    assert bm25.manifest["version"] == FORMAT_VERSION == 3
    assert {k: bm25.manifest[k] for k in ("lang", "stopwords", "stemmer", "pystemmer_version")} == {
        "lang": None,
        "stopwords": [],
        "stemmer": None,
        "pystemmer_version": None,
    }
    assert bm25.scores("fjord")[1] == 0 and bm25.scores("fjords")[1] > 0  # no stemming


def test_danish_stemming_finds_inflections(da_store, bm25_da):
    """The issue: "pivottabel" finds the chunk that only says "pivottabeller" with lang="da"."""
    plain = BM25Searcher.build(da_store, include_title=False, **PLAIN)
    assert (plain.scores("pivottabel") == 0).all()
    assert plain.scores("pivottabeller")[0] > 0
    s = bm25_da.scores("pivottabel")
    assert s[0] > 0 and (s[1:] == 0).all()
    assert bm25_da.search_text(["pivottabel"], 1).ids.tolist() == [[0]]
    np.testing.assert_array_equal(bm25_da.scores("PIVOTTABELLEN"), s)  # any inflection, any case
    # "tabel": "Tabeller" (1), "tabel" (2) and "tabellen" (3) all match; chunk 0 does not.
    t = bm25_da.scores("tabel")
    assert t[0] == 0 and (t[1:] > 0).all()
    assert bm25_da.analyzer == Analyzer.from_lang("da") and bm25_da.stemmer == "danish"
    assert bm25_da.describe() == f"da: {len(resolve_stopwords('da'))} stopwords, danish stemmer"
    assert bm25_da.tokenize_query("og i du") == []  # stopwords
    assert (bm25_da.scores("og") == 0).all()
    # Explicit settings override what lang implies.
    no_stem = BM25Searcher.build(da_store, lang="da", stemmer="none", include_title=False)
    assert (no_stem.scores("pivottabel") == 0).all() and no_stem.stopwords == bm25_da.stopwords
    no_stop = BM25Searcher.build(da_store, lang="da", stopwords="none", include_title=False)
    assert no_stop.scores("og")[1] > 0 and no_stop.scores("pivottabel")[0] > 0
    assert no_stop.describe() == "da: no stopwords, danish stemmer"
    stem_only = BM25Searcher.build(da_store, stemmer="danish", include_title=False)
    assert stem_only.analyzer == Analyzer(stemmer="danish") and stem_only.scores("pivottabel")[0] > 0
    given = BM25Searcher.build(da_store, analyzer=Analyzer.from_lang("da"), include_title=False)
    np.testing.assert_array_equal(given.scores("tabel summer"), bm25_da.scores("tabel summer"))
    with pytest.raises(RalmError, match="either analyzer or lang/stopwords/stemmer"):
        BM25Searcher.build(da_store, analyzer=Analyzer(), lang="da")
    with pytest.raises(RalmError, match="unknown language 'xx'"):
        BM25Searcher.build(da_store, lang="xx")


def test_the_docstores_language_is_the_default(tmp_path, store, da_store, bm25_da):
    """A DocStore built with --lang da gets Danish stopwords and stemming unless told otherwise;
    one whose manifest records no language gets plain analysis."""
    assert (da_store.lang, store.lang) == ("da", "en")
    default = BM25Searcher.build(da_store, include_title=False)
    assert default.analyzer == Analyzer.from_lang("da") == bm25_da.analyzer
    np.testing.assert_array_equal(default.scores("pivottabel"), bm25_da.scores("pivottabel"))
    assert BM25Searcher.build(store).analyzer == Analyzer.from_lang("en")
    assert store_analyzer(store) == Analyzer.from_lang("en")
    legacy = tmp_path / "legacy"
    shutil.copytree(store.root, legacy)
    manifest = json.loads((legacy / "manifest.json").read_text(encoding="utf-8"))
    del manifest["config"]["lang"]
    (legacy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    old = DocStore(legacy)
    assert old.lang is None and store_analyzer(old) == Analyzer()
    assert BM25Searcher.build(old).describe() == "no stopwords, no stemmer"


def naive_bm25(docs: list[list[str]], query: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """The module docstring's lucene BM25, by hand: sum over the query's terms of
    idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl)), idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))."""
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    df = Counter(t for d in docs for t in set(d))
    out = []
    for d in docs:
        tf = Counter(d)
        score = 0.0
        for t in query:
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(score)
    return out


def test_stemmed_scores_equal_naive_bm25(bm25_da):
    da = Analyzer.from_lang("da")
    docs = [da.analyze(text) for _, text in DA_DOCS]
    assert docs[3] == ["diagram", "vis", "sum", "ræk", "tabel", "sum", "sum"]  # stemmed, stopwords out
    for query in (
        "pivottabel",
        "tabellerne",
        "Tabeller og diagrammer",
        "summer rækkerne formel",
        "sum summen",
    ):
        terms = da.analyze(query)
        assert terms, query
        np.testing.assert_allclose(bm25_da.scores(query), naive_bm25(docs, terms), rtol=1e-5, err_msg=query)
    res = bm25_da.search_text(["summer af tabellen"], 2)
    want = naive_bm25(docs, da.analyze("summer af tabellen"))
    assert res.ids[0].tolist() == sorted(range(4), key=lambda i: -want[i])[:2]


def test_analysis_survives_save_load(tmp_path, da_store, bm25_da):
    queries = ["pivottabel", "tabellen", "summer af rækkerne", "diagram"]
    before = bm25_da.search_text(queries, 3, exclude_ids=[None, 1, None, [3]])
    bm25_da.save(tmp_path / "bm25")
    m = json.loads((tmp_path / "bm25" / "bm25.json").read_text(encoding="utf-8"))
    assert m["version"] == 3 and m["lang"] == "da" and m["stemmer"] == "danish"
    assert m["stopwords"] == resolve_stopwords("da")
    assert m["pystemmer_version"] == importlib.metadata.version("PyStemmer")
    loaded = BM25Searcher.load(tmp_path / "bm25", docstore_fingerprint=da_store.fingerprint)
    assert loaded.analyzer == bm25_da.analyzer == Analyzer.resolve(lang="da")
    assert loaded.analyzer.lang == "da" and loaded.describe() == bm25_da.describe()
    after = loaded.search_text(queries, 3, exclude_ids=[None, 1, None, [3]])
    np.testing.assert_array_equal(before.ids, after.ids)
    np.testing.assert_array_equal(before.scores, after.scores)
    assert after.ids[0, 0] == 0 and after.scores[0, 0] > 0
    # A caller compares the index's analysis with a requested one.
    loaded.check_analyzer(Analyzer.resolve(stopwords="da", stemmer="danish"))  # same terms: fine
    with pytest.raises(RalmError) as e:
        loaded.check_analyzer(Analyzer.resolve(lang="da", stemmer="none"))
    n = len(resolve_stopwords("da"))
    assert str(e.value) == (
        f"the BM25 index was built with da: {n} stopwords, danish stemmer, not da: {n} stopwords, "
        "no stemmer; rebuild it with those settings, or leave them out to use the index's own"
    )
    m["version"] = 4
    (tmp_path / "bm25" / "bm25.json").write_text(json.dumps(m), encoding="utf-8")
    with pytest.raises(RalmError, match="BM25 index format v4 is newer than this ralm"):
        BM25Searcher.load(tmp_path / "bm25")
    m["version"], m["stemmer"] = 3, "klingon"
    (tmp_path / "bm25" / "bm25.json").write_text(json.dumps(m), encoding="utf-8")
    with pytest.raises(RalmError, match="stemmer 'klingon' is not a Snowball algorithm"):
        BM25Searcher.load(tmp_path / "bm25")


def test_version_1_manifest_loads_without_stemmer(tmp_path, store):
    """An index saved before stemming (format 1: no lang/stemmer keys) loads and searches as built."""
    mine = BM25Searcher.build(store, include_title=False, stopwords=["Oslo"])
    queries = ["capital of Norway", "Oslo Nobel", "ålesund"]
    before = mine.search_text(queries, 3)
    mine.save(tmp_path / "v1")
    mpath = tmp_path / "v1" / "bm25.json"
    m = json.loads(mpath.read_text(encoding="utf-8"))
    for key in ("lang", "stemmer", "pystemmer_version"):
        del m[key]
    m["version"] = 1
    mpath.write_text(json.dumps(m, indent=2), encoding="utf-8")
    old = BM25Searcher.load(tmp_path / "v1", docstore_fingerprint=store.fingerprint)
    assert old.manifest["version"] == 1 and "stemmer" not in old.manifest
    assert old.analyzer == Analyzer(("oslo",)) and old.stemmer is None and old.analyzer.lang is None
    assert old.describe() == "1 stopword, no stemmer" and old.stopwords == ["oslo"]
    after = old.search_text(queries, 3)
    np.testing.assert_array_equal(before.ids, after.ids)
    np.testing.assert_array_equal(before.scores, after.scores)
    assert (old.scores("oslo") == 0).all() and old.scores("fjords")[1] > 0


def test_matches_and_from_texts(da_store, bm25_da, bm25):
    """What a CLI needs: does a saved index suit --lang/--stopwords/--stemmer, and texts in memory."""
    assert bm25_da.matches(lang="da") and bm25_da.matches(lang="danish")
    assert bm25_da.matches(stopwords="da", stemmer="danish")  # same terms, whatever the label
    assert bm25_da.matches(analyzer=Analyzer.from_lang("da"))
    assert not bm25_da.matches() and not bm25_da.matches(lang="da", stemmer="none")
    assert not bm25_da.matches(lang="no")
    assert bm25.matches() and bm25.matches(lang=None, stopwords=None, stemmer=None)
    assert bm25.matches(stopwords="none", stemmer="none") and not bm25.matches(stemmer="en")
    with pytest.raises(RalmError, match="unknown language 'xx'"):
        bm25.matches(lang="xx")
    texts = [text for _, text in DA_DOCS]
    mem = BM25Searcher.from_texts(texts, docstore_fingerprint=da_store.fingerprint, lang="da")
    assert len(mem) == 4 and mem.analyzer == bm25_da.analyzer and mem.manifest["include_title"] is None
    for q in ("pivottabel", "summer af tabellen", "diagram"):
        np.testing.assert_array_equal(mem.scores(q), bm25_da.scores(q))
    plain = BM25Searcher.from_texts(texts)
    assert plain.manifest["docstore_fingerprint"] is None and (plain.scores("pivottabel") == 0).all()
    with pytest.raises(RalmError, match="from_texts: no texts"):
        BM25Searcher.from_texts([])
    with pytest.raises(RalmError, match="from_texts: give a list of strings"):
        BM25Searcher.from_texts("pivottabeller")


def test_checksums_recorded_and_damage_refused(tmp_path, store, bm25):
    from ralm.integrity import digest
    from ralm.retrieval.bm25 import BM25S_FILES

    d = bm25.save(tmp_path / "bm25")
    m = json.loads((d / "bm25.json").read_text())
    assert m["version"] == 3
    assert m["files"] == {n: {"size": (d / n).stat().st_size, "xxh3_128": digest(d / n)} for n in BM25S_FILES}
    path = d / "data.csc.index.npy"  # the scores: a flipped byte changes a ranking silently
    good = path.read_bytes()
    path.write_bytes(good[:-4] + bytes(b ^ 0xFF for b in good[-4:]))
    with pytest.raises(RalmError) as err:
        BM25Searcher.load(d)
    assert str(err.value) == (
        f"{path}: contents changed since it was saved (xxh3_128 checksum mismatch: a damaged disk or copy); "
        "rebuild it with `ralm index build`"
    )
    assert BM25Searcher.load(d, mmap=True).count == 8  # mmap: sizes only (`ralm index verify` hashes)
    # a version-2 manifest (sizes only, from before checksums) still loads, its sizes checked
    v2 = {**m, "version": 2, "files": {n: r["size"] for n, r in m["files"].items()}}
    (d / "bm25.json").write_text(json.dumps(v2))
    assert BM25Searcher.load(d).count == 8
    path.write_bytes(good[:-4])
    with pytest.raises(RalmError) as err:
        BM25Searcher.load(d)
    assert str(err.value) == (
        f"{path}: {len(good) - 4} bytes, bm25.json says {len(good)} (truncated, or an interrupted save); "
        "rebuild it with `ralm index build`"
    )


def test_public_retriever_open_and_matched_only(store, tmp_path):
    """`ralm.Retriever.open(corpus=...)` is what `rag --corpus` searches: in-memory BM25 over the
    DocStore; `matched_only` leaves out the chunks without a query term (score 0), which plain
    `search` returns to fill k."""
    from ralm import Retriever

    r = Retriever.open(corpus=store.root, kind="bm25", lang="en")
    assert r.kind == "bm25" and r.description.startswith("bm25 (") and str(store.root) in r.description
    full = r.search("Oslo", k=4)
    assert [h.id for h in full] == [0, 2, 1, 3] and [h.rank for h in full] == [1, 2, 3, 4]
    assert full[0].score > full[1].score > 0 == full[2].score == full[3].score
    matched = r.search(["Oslo", "Bergen rain"], k=4, matched_only=True)
    assert [[h.id for h in row] for row in matched] == [[0, 2], [3]]
    assert matched[0][1] == full[1] and matched[1][0].title == "Bergen"
    with pytest.raises(RalmError, match="--retriever dense needs an index directory"):
        Retriever.open(corpus=store.root, kind="dense")
    with pytest.raises(RalmError, match="retriever 'sparse': choose one of bm25, dense, hybrid"):
        Retriever.open(corpus=store.root, kind="sparse")
    with pytest.raises(RalmError, match="retrieval needs --index INDEX"):
        Retriever.open()
