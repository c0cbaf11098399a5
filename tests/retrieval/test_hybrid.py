"""Hybrid retrieval: RRF and weighted fusion checked by hand and against a naive loop, on real BM25 + dense."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.errors import RalmError
from ralm.retrieval.bm25 import BM25Searcher
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.hybrid import HybridSearcher, fuse_rankings
from ralm.retrieval.index.open import dense_retriever_for


def test_rrf_by_hand():
    """BM25 [7, 3], dense [3, 9]: 3 = 1/62 + 1/61, 7 = 1/61, 9 = 1/62."""
    ids, sc = fuse_rankings(
        [np.array([7, 3]), np.array([3, 9])], [np.array([2.0, 1.0]), np.array([0.9, 0.5])], 3
    )
    assert ids.tolist() == [3, 7, 9]
    assert sc.tolist() == pytest.approx([1 / 62 + 1 / 61, 1 / 61, 1 / 62], rel=1e-6)
    ids, _ = fuse_rankings([np.array([7, 3]), np.array([3, 9])], [np.zeros(2), np.zeros(2)], 2)
    assert ids.tolist() == [3, 7]  # k cuts the fused list


def test_weighted_by_hand():
    """Min-max per list: BM25 [7: 4 -> 1, 3: 2 -> 0.5, 5: 0 -> 0]; dense [3: .8 -> 1, 9: .4 -> 0].
    Weights .3/.7: 3 = .3*.5 + .7*1 = .85, 7 = .3, 9 = 0, 5 = 0 (tie: lower id 5 first)."""
    ids, sc = fuse_rankings(
        [np.array([7, 3, 5]), np.array([3, 9])],
        [np.array([4.0, 2.0, 0.0]), np.array([0.8, 0.4])],
        4,
        method="weighted",
        weights=[0.3, 0.7],
    )
    assert ids.tolist() == [3, 7, 5, 9]
    assert sc.tolist() == pytest.approx([0.85, 0.3, 0.0, 0.0])
    # equal scores normalise to 1, padding (-1) is ignored
    ids, sc = fuse_rankings(
        [np.array([2, -1]), np.array([1])], [np.array([5.0, 0.0]), np.array([3.0])], 3, method="weighted"
    )
    assert ids.tolist() == [1, 2] and sc.tolist() == [1.0, 1.0]


def _naive_rrf(lists, k, rrf_k=60.0, weights=None):
    scores = {}
    for r, row in enumerate(lists):
        w = 1.0 if weights is None else weights[r]
        for rank, cid in enumerate(row, start=1):
            scores[cid] = scores.get(cid, 0.0) + w / (rrf_k + rank)
    return [c for c, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))][:k]


def test_rrf_matches_a_naive_loop():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lists = [rng.permutation(30)[: rng.integers(1, 20)] for _ in range(rng.integers(2, 4))]
        w = rng.random(len(lists)).tolist()
        k = int(rng.integers(1, 25))
        ids, _ = fuse_rankings(lists, [np.zeros(len(x)) for x in lists], k, weights=w, rrf_k=10.0)
        assert ids.tolist() == _naive_rrf([x.tolist() for x in lists], k, 10.0, w)


def test_bad_fusion_arguments():
    with pytest.raises(RalmError, match="fusion 'max'"):
        fuse_rankings([np.array([1])], [np.array([1.0])], 1, method="max")
    with pytest.raises(RalmError, match="2 fusion weights for 1"):
        fuse_rankings([np.array([1])], [np.array([1.0])], 1, weights=[1, 1])


DOCS = [
    ("Oslo", "Oslo er hovedstaden i Norge. Byen ligger innerst i Oslofjorden."),
    ("Bergen", "Bergen er en by på vestkysten av Norge. Det regner mye i Bergen."),
    ("Snø", "Snø har høy albedo og reflekterer mye av sollyset."),
    ("Ibsen", "Henrik Ibsen skrev Et dukkehjem og Peer Gynt."),
    ("Grieg", "Edvard Grieg skrev musikken til Peer Gynt."),
    ("Tromsø", "Tromsø ligger nord for polarsirkelen og har midnattssol om sommeren."),
]


@pytest.fixture(scope="module")
def parts(tmp_path_factory, tiny_dir, one_thread):
    d = tmp_path_factory.mktemp("hybrid")
    src = d / "docs.jsonl"
    src.write_text("\n".join(json.dumps({"title": t, "text": x}, ensure_ascii=False) for t, x in DOCS) + "\n")
    store = build_docstore([src], d / "store", BuildConfig(chunk_size=64), progress=False, log=lambda m: None)
    assert len(store) == len(DOCS)
    bm25 = BM25Searcher.build(store)
    dense = dense_retriever_for(store, DualEncoder.from_pretrained(tiny_dir), d / "dense", progress=False)
    return store, bm25, dense


QUERIES = ["hvem skrev Peer Gynt", "hovedstaden i Norge", "midnattssol i nord"]


def test_hybrid_equals_fusing_the_two_lists_by_hand(parts):
    store, bm25, dense = parts
    hyb = HybridSearcher([bm25, dense], len(store), depth=4)
    res = hyb.search_text(QUERIES, 3)
    a, b = bm25.search_text(QUERIES, 4), dense.search_text(QUERIES, 4)
    for i in range(len(QUERIES)):
        assert res.ids[i].tolist() == _naive_rrf([a.ids[i].tolist(), b.ids[i].tolist()], 3)
    # a query BM25 answers alone: its first hit stays among the fused top 2
    assert 3 in res.ids[0, :2].tolist() or 4 in res.ids[0, :2].tolist()


def test_hybrid_excludes_and_returns_k(parts):
    store, bm25, dense = parts
    hyb = HybridSearcher([bm25, dense], len(store), method="weighted", weights=[0.5, 0.5], depth=2)
    res = hyb.search_text(QUERIES, 4, exclude_ids=[[3, 4], None, 5])
    assert res.ids.shape == (3, 4)
    assert not {3, 4} & set(res.ids[0].tolist()) and 5 not in res.ids[2].tolist()
    assert all(len(set(row)) == 4 for row in res.ids.tolist())  # depth is raised to k
    with pytest.raises(RalmError, match="k=5"):  # 6 chunks, 2 excluded from the first query
        hyb.search_text(QUERIES, 5, exclude_ids=[[3, 4], None, None])
    with pytest.raises(RalmError, match="at least two"):
        HybridSearcher([bm25], len(store))
    with pytest.raises(RalmError, match="fusion weights"):
        HybridSearcher([bm25, dense], len(store), weights=[1.0])
