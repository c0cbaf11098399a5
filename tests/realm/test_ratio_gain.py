"""ratio_gain_interval: how much a perplexity ratio fell between two evaluations, with a paired bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ralm.errors import RalmError
from ralm.realm.inference.evaluate import paired_ratio_interval, ratio_gain_interval


def test_hand_computed_case_has_no_spread():
    got = ratio_gain_interval(([2, 2], [3, 3]), ([2, 2], [2, 2]), [1, 1])
    assert got == pytest.approx((math.exp(-1) - 1,) * 3)


def test_gain_and_interval_match_a_naive_bootstrap():
    rng = np.random.default_rng(3)
    n = 200
    tokens = rng.integers(1, 6, n)
    closed0, closed1 = rng.gamma(2.0, 1.5, n) * tokens, rng.gamma(2.0, 1.2, n) * tokens
    realm0 = closed0 - rng.normal(0.4, 1.0, n) * tokens
    realm1 = closed1 - rng.normal(0.2, 1.0, n) * tokens
    gain, low, high = ratio_gain_interval((realm0, closed0), (realm1, closed1), tokens)
    r0 = paired_ratio_interval(realm0, closed0, tokens)[0]
    r1 = paired_ratio_interval(realm1, closed1, tokens)[0]
    assert gain == pytest.approx(r0 - r1, abs=1e-12)
    # the reference: resample the spans by hand, the four scores of a span together
    boot = np.random.default_rng(0).integers(0, n, (20000, n))
    t = tokens[boot].sum(1)
    g = np.exp((realm0[boot].sum(1) - closed0[boot].sum(1)) / t) - np.exp(
        (realm1[boot].sum(1) - closed1[boot].sum(1)) / t
    )
    ref_low, ref_high = np.percentile(g, [2.5, 97.5])
    width = ref_high - ref_low
    assert low < gain < high
    assert low == pytest.approx(ref_low, abs=0.05 * width)
    assert high == pytest.approx(ref_high, abs=0.05 * width)


def test_different_examples_are_refused():
    with pytest.raises(RalmError, match="not scored on the same examples"):
        ratio_gain_interval(([1, 2], [1, 2]), ([1, 2, 3], [1, 2, 3]), [1, 1])
