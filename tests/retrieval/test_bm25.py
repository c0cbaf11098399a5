"""BM25Retriever: a hand-checked ranking, exclusion and always-k, Nordic/Cyrillic tokens, save/load."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.errors import RalmError
from ralm.retrieval.base import Retriever
from ralm.retrieval.bm25 import BM25Retriever, resolve_stopwords, split_words

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


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("bm25")
    src = d / "docs.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for title, text in DOCS:
            f.write(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")
    s = build_docstore([src], d / "store", BuildConfig(chunk_size=64), progress=False, log=lambda m: None)
    assert len(s) == len(DOCS)  # one chunk per document, ids in file order
    return s


@pytest.fixture(scope="module")
def bm25(store):
    return BM25Retriever.build(store, include_title=False)


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
    retriever: Retriever = bm25  # the protocol (checked statically; it is not runtime_checkable)
    assert retriever.search_text(["Norway"], 1).ids[0, 0] in (0, 1)


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
        "blåbærsyltetøy", "fra", "ålesund", "smaker", "godt", "på", "brødskiva", "å", "ja",
    ]  # fmt: skip
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
    with_title = BM25Retriever.build(store)
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
    en = BM25Retriever.build(store, include_title=False, stopwords="en")
    assert en.tokenize_query("the of is") == []
    assert (en.scores("the") == 0).all()  # only stopwords: every chunk scores 0, k still come back
    assert en.search_text(["the"], 3).ids.tolist() == [[0, 1, 2]]
    mine = BM25Retriever.build(store, include_title=False, stopwords=["Oslo"])
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
    loaded = BM25Retriever.load(tmp_path / "bm25", docstore_fingerprint=store.fingerprint)
    after = loaded.search_text(queries, 5, exclude_ids=[0, None, [6], 1])
    np.testing.assert_array_equal(before.ids, after.ids)
    np.testing.assert_array_equal(before.scores, after.scores)
    with pytest.raises(RalmError, match=r"built from another corpus \(docstore fingerprint .*; rebuild it"):
        BM25Retriever.load(tmp_path / "bm25", docstore_fingerprint="f" * 64)
    with pytest.raises(RalmError, match="nothing/bm25.json: no such file"):
        BM25Retriever.load(tmp_path / "nothing")
    (tmp_path / "bm25" / "vocab.index.json").unlink()
    with pytest.raises(RalmError, match="vocab.index.json: no such file"):
        BM25Retriever.load(tmp_path / "bm25")
