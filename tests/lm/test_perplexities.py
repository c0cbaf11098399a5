"""`ralm.lm.perplexity.Perplexities` on hand-computed cases, and the two result classes using it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from ralm.lm.perplexity import Perplexities


@dataclass
class Scored(Perplexities):
    nll: float
    tokens: int
    words: int


def test_token_and_word_perplexity_of_a_summed_nll():
    s = Scored(nll=6 * math.log(2), tokens=6, words=3)  # 2 per token, 4 per word
    assert s.token_ppl == pytest.approx(2.0) and s.word_ppl == pytest.approx(4.0)
    assert s.perplexity_fields() == {
        "token_ppl": pytest.approx(2.0),
        "word_ppl": pytest.approx(4.0),
        "nll": 6 * math.log(2),
        "tokens": 6,
        "words": 3,
    }
    assert list(s.perplexity_fields()) == ["token_ppl", "word_ppl", "nll", "tokens", "words"]


def test_no_tokens_or_words_is_nan():
    empty = Scored(nll=0.0, tokens=0, words=0)
    assert math.isnan(empty.token_ppl) and math.isnan(empty.word_ppl)


def test_surealm_counts_keep_their_row():
    from ralm.surealm.data import PerplexityCounts

    c = PerplexityCounts(nll=2 * math.log(3), tokens=2, words=1, sentences=1)
    assert c.as_dict() == {
        "token_ppl": pytest.approx(3.0),
        "word_ppl": pytest.approx(9.0),
        "nll": 2 * math.log(3),
        "tokens": 2,
        "words": 1,
        "sentences": 1,
    }
