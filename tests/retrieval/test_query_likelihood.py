"""Query likelihood: hand-computed Dirichlet and JM scores, exclusion, ties, mu -> 0, save/load."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.errors import RalmError
from ralm.retrieval.base import Searcher
from ralm.retrieval.query_likelihood import QueryLikelihoodSearcher, analyze_text, top_k_exact

DOCS = [
    ("Fruit one", "apple banana apple"),  # 0: |d| = 3
    ("Fruit two", "banana cherry"),  # 1: |d| = 2
    ("Fruit three", "apple, cherry cherry cherry!"),  # 2: |d| = 4 (punctuation dropped)
    ("Fruit four", "date"),  # 3: |d| = 1
]
# Collection (text only): apple 3, banana 2, cherry 4, date 1; |C| = 10.
# p_c: apple .3, banana .2, cherry .4, date .1


def make_store(tmp_path, docs):
    src = tmp_path / "docs.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for title, text in docs:
            f.write(json.dumps({"title": title, "text": text}) + "\n")
    store = build_docstore(
        [src], tmp_path / "store", BuildConfig(chunk_size=64), progress=False, log=lambda m: None
    )
    assert len(store) == len(docs)
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("ql"), DOCS)


@pytest.fixture()
def ql(store):
    return QueryLikelihoodSearcher.build(store, include_title=False, smoothing="dirichlet", mu=2.0)


def test_dirichlet_by_hand(ql):
    """q = "apple cherry", mu = 2: log p(t|d) = log((tf + mu p_c) / (|d| + mu)); mu p_c = .6, .8."""
    ln = math.log
    expected = [
        ln((2 + 0.6) / (3 + 2)) + ln((0 + 0.8) / (3 + 2)),  # d0: -2.4865
        ln((0 + 0.6) / (2 + 2)) + ln((1 + 0.8) / (2 + 2)),  # d1: -2.6956
        ln((1 + 0.6) / (4 + 2)) + ln((3 + 0.8) / (4 + 2)),  # d2: -1.7786
        ln((0 + 0.6) / (1 + 2)) + ln((0 + 0.8) / (1 + 2)),  # d3: -2.9312
    ]
    assert ql.scores(["apple cherry"])[0] == pytest.approx(expected, abs=1e-12)
    res = ql.search_text(["apple cherry"], 4)
    assert res.ids.tolist() == [[2, 0, 1, 3]]
    assert res.scores.dtype == np.float32 and res.ids.dtype == np.int64
    assert res.scores[0] == pytest.approx(sorted(expected, reverse=True), abs=1e-6)
    backend: Searcher = ql
    assert backend.search_text(["apple"], 1).ids.tolist() == [[0]]


def test_jelinek_mercer_by_hand(ql):
    """lam = 0.5: p(t|d) = .5 tf/|d| + .5 p_c; .5 p_c = .15 (apple), .2 (cherry), .05 (date)."""
    ln = math.log
    ql.set_smoothing("jm", lam=0.5)
    expected = [
        ln(0.5 * 2 / 3 + 0.15) + ln(0.5 * 0 / 3 + 0.2),  # d0: -2.3365
        ln(0.5 * 0 / 2 + 0.15) + ln(0.5 * 1 / 2 + 0.2),  # d1: -2.6956
        ln(0.5 * 1 / 4 + 0.15) + ln(0.5 * 3 / 4 + 0.2),  # d2: -1.8444
        ln(0.15) + ln(0.2),  # d3: -3.5066
    ]
    assert ql.scores(["apple cherry"])[0] == pytest.approx(expected, abs=1e-12)
    assert ql.search_text(["apple cherry"], 4).ids.tolist() == [[2, 0, 1, 3]]
    # "date": d0, d1, d2 all score log(.05) exactly -> tie, lower id first
    res = ql.search_text(["date"], 4)
    assert res.ids.tolist() == [[3, 0, 1, 2]]
    assert res.scores[0, 1] == res.scores[0, 2] == res.scores[0, 3] == pytest.approx(ln(0.05))


def test_query_terms_repeats_unknown_and_title(store, ql):
    # a repeated term counts twice; an unseen term is skipped; punctuation is not a term
    s = ql.scores(["apple apple cherry", "apple cherry kiwi ?", "apple"])
    a = ql.scores(["apple"])[0]
    assert s[0] == pytest.approx(ql.scores(["apple cherry"])[0] + a)
    assert s[1] == pytest.approx(ql.scores(["apple cherry"])[0])
    ids, qtf, skipped = ql.analyze("Apple apple kiwi?")
    assert [ql.terms[i] for i in ids] == ["apple"] and qtf.tolist() == [2.0] and skipped == ["kiwi"]
    assert ql.search_text(["kiwi"], 2).ids.tolist() == [[0, 1]]  # nothing known: all 0, by id
    assert analyze_text("The Iliad, by Homer.") == ["the", "iliad", "by", "homer"]
    titled = QueryLikelihoodSearcher.build(store)  # title + text
    assert titled.search_text(["four"], 1).ids.tolist() == [[3]]


def test_exclusion_and_always_k(ql):
    res = ql.search_text(["apple cherry", "apple cherry", "apple cherry"], 3, exclude_ids=[2, None, [3, 3]])
    assert res.ids.tolist() == [[0, 1, 3], [2, 0, 1], [2, 0, 1]]
    with pytest.raises(RalmError, match="chunks left"):
        ql.search_text(["apple cherry"], 3, exclude_ids=[[0, 1]])
    two = ql.search_text(["apple cherry"], 2, exclude_ids=[[0, 1]])
    assert two.ids.tolist() == [[2, 3]]
    with pytest.raises(RalmError, match="more than"):
        ql.search_text(["apple"], 5)
    with pytest.raises(RalmError, match="empty"):
        ql.search_text(["  "], 1)
    with pytest.raises(RalmError, match="single string"):
        ql.search_text("apple", 1)
    with pytest.raises(RalmError, match="mu"):
        ql.set_smoothing("dirichlet", mu=0)


def test_top_k_exact_ties_and_exclusion():
    s = np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    ids, sc = top_k_exact(s, 2, None)
    assert ids.tolist() == [[1, 2], [0, 1]]
    ids, sc = top_k_exact(s, 3, np.array([[2, -1], [0, 3]]))
    assert ids.tolist() == [[1, 4, 3], [1, 2, 4]]
    assert sc.tolist() == [[3.0, 3.0, 2.0], [0.0, 0.0, 0.0]]


def test_dirichlet_small_mu_ranks_like_mle(tmp_path):
    """As mu -> 0, p(t|d) -> tf/|d|: docs with every query term rank first, in MLE order."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(8)]
    docs = [(f"D{i}", " ".join(rng.choice(words, size=rng.integers(3, 12)))) for i in range(30)]
    store = make_store(tmp_path, docs)
    ql = QueryLikelihoodSearcher.build(store, include_title=False, mu=1e-7)
    for query in (["w1", "w2"], ["w3", "w3", "w5"], ["w0"]):
        mle = {}
        for i, (_, text) in enumerate(docs):
            toks = text.split()
            if all(t in toks for t in query):
                mle[i] = sum(math.log(toks.count(t) / len(toks)) for t in query)
        m = len(mle)
        assert m >= 1
        res = ql.search_text([" ".join(query)], m)
        expected = sorted(mle, key=lambda i: (-round(mle[i], 9), i))
        assert res.ids[0].tolist() == expected
        assert res.scores[0] == pytest.approx([mle[i] for i in expected], abs=1e-4)


def test_vectorised_equals_naive(tmp_path):
    rng = np.random.default_rng(1)
    words = [f"v{i}" for i in range(12)]
    docs = [(f"D{i}", " ".join(rng.choice(words, size=rng.integers(1, 15)))) for i in range(20)]
    ql = QueryLikelihoodSearcher.build(make_store(tmp_path, docs), include_title=False, mu=7.0)
    toks = [d[1].split() for d in docs]
    C = sum(len(t) for t in toks)
    pc = {w: sum(t.count(w) for t in toks) / C for w in words}
    q = ["v1", "v4", "v4", "v9"]
    for smoothing in ("dirichlet", "jm"):
        ql.set_smoothing(smoothing, mu=7.0, lam=0.3)
        naive = []
        for t in toks:
            if smoothing == "dirichlet":
                naive.append(sum(math.log((t.count(w) + 7.0 * pc[w]) / (len(t) + 7.0)) for w in q))
            else:
                naive.append(sum(math.log(0.7 * t.count(w) / len(t) + 0.3 * pc[w]) for w in q))
        assert ql.scores([" ".join(q)])[0] == pytest.approx(naive, abs=1e-10)


def test_save_load(tmp_path, store, ql):
    ql.set_smoothing("jm", lam=0.3)
    d = ql.save(tmp_path / "ql")
    with np.load(d / "ql_counts.npz", allow_pickle=False) as z:
        assert set(z.files) == {"indptr", "indices", "data", "shape"}
    back = QueryLikelihoodSearcher.load(d, docstore_fingerprint=store.fingerprint)
    assert (back.smoothing, back.lam) == ("jm", 0.3)
    assert np.array_equal(back.scores(["apple cherry"]), ql.scores(["apple cherry"]))
    with pytest.raises(RalmError, match="another corpus"):
        QueryLikelihoodSearcher.load(d, docstore_fingerprint="0" * 64)
    with pytest.raises(RalmError, match="no such file"):
        QueryLikelihoodSearcher.load(tmp_path / "nothing")
