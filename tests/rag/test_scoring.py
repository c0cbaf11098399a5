"""EM / F1 / regex / contains per answer, and the aggregates with answer recall@k."""

from __future__ import annotations

import pytest

from ralm.rag.scoring import aggregate, recall_hits, score_answer


def test_string_answers():
    assert score_answer("Paris", ["paris"]) == {"em": 1.0, "f1": 1.0, "contains": 1.0}
    s = score_answer("It is Paris.", ["Paris"])
    assert s["em"] == 0.0 and s["contains"] == 1.0
    assert s["f1"] == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))  # "it is paris" vs "paris": P 1/3, R 1
    assert score_answer("Parisian food", ["Paris"])["contains"] == 0.0  # whole tokens only
    assert score_answer("the Eiffel Tower", ["Eiffel Tower", "tower"])["em"] == 1.0


def test_norwegian_normalisation():
    assert score_answer("Kong Harald", ["kong Harald."], lang="nb")["em"] == 1.0


def test_regex_answers():
    s = score_answer("1809 in Kentucky", [r"18\d\d"], regex=True)
    assert s == {"em": 1.0, "contains": 1.0}
    s = score_answer("born 1809", [r"18\d\d"], regex=True)
    assert s == {"em": 0.0, "contains": 1.0}


def test_recall_hits_and_aggregate():
    hits = recall_hits(["Oslo is big", "Bergen", "oslo!"], ["Oslo"])
    assert hits == [True, False, True]
    agg = aggregate(
        [
            {"em": 1.0, "f1": 1.0, "contains": 1.0},
            {"em": 0.0, "f1": 0.5, "contains": 0.0},
            {"em": 1.0, "contains": 1.0},
        ],
        [[False, True, False], [False, False, False], [True, False, False]],
    )
    assert agg["questions"] == 3.0
    assert agg["em"] == pytest.approx(200 / 3) and agg["f1"] == pytest.approx(75.0)
    assert agg["recall@1"] == pytest.approx(100 / 3) and agg["recall@3"] == pytest.approx(200 / 3)
    assert "recall@5" not in agg
