"""Hubness by hand, pooled qrels, ir-measures rank metrics against hand values and recall@k, TREC files."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ralm.errors import RalmError
from ralm.retrieval.eval.evaluate import recall_at_k
from ralm.retrieval.eval.measures import hubness, pooled_qrels, rank_measures, write_qrels, write_trec_run


def test_hubness_by_hand():
    h = hubness(np.array([[4, 5], [4, 6]]))
    assert h == {"hub_share": 1.0, "top1_share": 1.0, "distinct": 0.75, "hub_id": 4, "hub_count": 2}
    # 15 questions, one chunk first for 11 of them (the Danish case)
    ids = np.array([[9, i + 100] for i in range(11)] + [[i + 200, i + 300] for i in range(4)])
    h = hubness(ids)
    assert h["top1_share"] == pytest.approx(11 / 15) and h["hub_id"] == 9 and h["hub_count"] == 11
    assert h["distinct"] == pytest.approx((1 + 11 + 8) / 30)
    # a chunk twice in one list counts once; ties go to the lower id; k limits the columns
    h = hubness(np.array([[3, 3, 8], [8, 3, 1]]), k=1)
    assert h["hub_id"] == 3 and h["hub_share"] == 0.5 and h["distinct"] == 1.0
    with pytest.raises(RalmError, match="shape"):
        hubness(np.zeros((0, 3)))


def test_pooled_qrels_take_every_judged_chunk():
    runs = {"a": np.array([[1, 2], [5, 6]]), "b": np.array([[2, 3], [6, -1]])}
    hits = {"a": np.array([[False, True], [False, False]]), "b": np.array([[True, False], [False, False]])}
    assert pooled_qrels(runs, hits) == {0: {1: 0, 2: 1, 3: 0}, 1: {5: 0, 6: 0}}


def test_rank_measures_by_hand_and_against_recall():
    qrels = {0: {1: 0, 2: 1, 3: 0}, 1: {5: 1}, 2: {7: 0}}
    ids = np.array([[1, 2, 3], [5, 8, 9], [7, 4, 6]])
    m = rank_measures(ids, qrels, ["RR@10", "nDCG@10", "Success@1", "Success@3", "P@2"])
    # q0: first relevant at rank 2 (RR .5, nDCG 1/log2(3)); q1: rank 1; q2: none -> 0 (kept in the mean)
    assert m["RR@10"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert m["nDCG@10"] == pytest.approx((1 / math.log2(3) + 1 + 0) / 3)
    assert m["P@2"] == pytest.approx((0.5 + 0.5 + 0) / 3)
    hits = np.array([[False, True, False], [True, False, False], [False, False, False]])
    rec = recall_at_k(hits, (1, 3))
    assert m["Success@1"] == pytest.approx(rec[1]) and m["Success@3"] == pytest.approx(rec[3])


def test_rank_measures_follow_our_order_on_ties():
    """Equal retrieval scores: trec_eval would order by document name; we keep our ranking."""
    qrels = {0: {10: 0, 9: 1}}
    assert rank_measures(np.array([[10, 9]]), qrels, ["RR@10"])["RR@10"] == 0.5
    assert rank_measures(np.array([[9, 10]]), qrels, ["RR@10"])["RR@10"] == 1.0
    with pytest.raises(RalmError, match="measures"):
        rank_measures(np.array([[1]]), {}, ["NotAMeasure@3"])


def test_trec_files(tmp_path):
    run = write_trec_run(
        tmp_path / "r.trec",
        np.array([[4, 2], [7, -1]]),
        np.array([[1.5, 0.25], [3, 0]]),
        "bm25",
        ["q1", "q2"],
    )
    assert run.read_text().splitlines() == ["q1 Q0 4 1 1.5 bm25", "q1 Q0 2 2 0.25 bm25", "q2 Q0 7 1 3 bm25"]
    qrels = {0: {4: 1, 2: 0}, 1: {7: 0}}
    assert write_qrels(tmp_path / "q.trec", qrels, ["q1", "q2"]).read_text().splitlines() == [
        "q1 0 2 0",
        "q1 0 4 1",
        "q2 0 7 0",
    ]
    beir = write_qrels(tmp_path / "q.tsv", qrels, ["q1", "q2"], beir=True).read_text().splitlines()
    assert beir[0] == "query-id\tcorpus-id\tscore" and beir[2] == "q1\t4\t1"
    # the run file scores the same in ir-measures read back from disk
    import ir_measures

    got = ir_measures.calc_aggregate(
        [ir_measures.RR @ 10],
        ir_measures.read_trec_qrels(str(tmp_path / "q.trec")),
        ir_measures.read_trec_run(str(run)),
    )
    assert got[ir_measures.RR @ 10] == 0.5  # q1 1.0, q2 0.0 (judged, nothing relevant)
    assert not list(tmp_path.glob(".*tmp*"))
