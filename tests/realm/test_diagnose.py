"""score_utility_agreement: the retriever's ranking of a span's chunks against the reader's."""

import numpy as np
import pytest
from scipy.stats import spearmanr

from ralm.errors import RalmError
from ralm.realm.inference.diagnose import score_utility_agreement


def test_hand_computed_case():
    s = np.array([[0.0, -1.0, -2.0], [0.0, -1.0, -2.0]])
    u = np.array([[-1.0, -2.0, -3.0], [-3.0, -2.0, -1.0]])
    got = score_utility_agreement(s, u)
    assert got["spearman"] == pytest.approx(0.0)
    assert got["spans"] == 2
    assert got["top_agreement"] == 0.5
    assert got["top_chance"] == pytest.approx(1 / 3)
    assert got["spearman_low"] == pytest.approx(-1.0) and got["spearman_high"] == pytest.approx(1.0)


def test_matches_scipy_per_span_and_drops_rows_without_a_ranking():
    rng = np.random.default_rng(3)
    s = rng.normal(size=(40, 8)).round(1)  # rounding makes ties inside rows
    u = rng.normal(size=(40, 8)).round(1)
    s[5] = 0.7  # every score equal: no ranking, left out
    u[9] = -2.0
    got = score_utility_agreement(s, u)
    ref = [spearmanr(a, b).statistic for i, (a, b) in enumerate(zip(s, u, strict=True)) if i not in (5, 9)]
    assert got["spans"] == 38
    assert got["spearman"] == pytest.approx(float(np.mean(ref)), abs=1e-12)
    assert got["spearman_low"] < got["spearman"] < got["spearman_high"]
    top = np.mean([int(np.argmax(a) == np.argmax(b)) for a, b in zip(s, u, strict=True)])
    assert got["top_agreement"] == pytest.approx(top)


def test_identical_rankings_give_one():
    s = np.array([[3.0, 1.0, 2.0], [0.5, 0.1, 0.9]])
    got = score_utility_agreement(s, 10 * s - 4)
    assert got == {
        "top_agreement": 1.0,
        "top_chance": pytest.approx(1 / 3),
        "spans": 2,
        "spearman": pytest.approx(1.0),
        "spearman_low": pytest.approx(1.0),
        "spearman_high": pytest.approx(1.0),
    }


def test_shapes_are_checked():
    with pytest.raises(RalmError, match=r"\(N, R>=2\)"):
        score_utility_agreement(np.zeros((3, 4)), np.zeros((3, 5)))
    with pytest.raises(RalmError, match=r"\(N, R>=2\)"):
        score_utility_agreement(np.zeros((3, 1)), np.zeros((3, 1)))


def test_query_signal_hand_computed():
    from ralm.realm.inference.diagnose import query_signal

    recs = [
        # the docstring's case: chunk 0 holds the span; the prior ranks it second
        {
            "has_answer": {"dense": [True, False, False]},
            "lp_content": [-1.0, -5.0, -3.0, -9.0],
            "log_p_z_r": [-2.0, -1.0, -3.0, -4.0],
        },
        # every chunk holds it: a right chunk (ranked first) but no signal
        {
            "has_answer": {"dense": [True, True, True]},
            "lp_content": [-1.0, -2.0, -3.0, -9.0],
            "log_p_z_r": [-1.0, -2.0, -3.0, -4.0],
        },
        # none holds it
        {
            "has_answer": {"dense": [False, False, False]},
            "lp_content": [-1.0, -2.0, -3.0, -9.0],
            "log_p_z_r": [-1.0, -2.0, -3.0, -4.0],
        },
    ]
    got = query_signal(recs, has_null=True)
    assert got == {
        "mixed": pytest.approx(1 / 3),
        "signal_nats": pytest.approx(3.0),
        "with_right": pytest.approx(2 / 3),
        "right_rank": pytest.approx(1.5),
        "right_top": pytest.approx(0.5),
    }
