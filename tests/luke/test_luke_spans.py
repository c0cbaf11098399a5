"""Span enumeration, word -> token spans, IOB2 <-> spans and greedy decoding (ralm.luke.spans)."""

from __future__ import annotations

import itertools
import random

import pytest

from ralm.errors import RalmError
from ralm.luke.spans import (
    decode_spans,
    enumerate_spans,
    iob2_spans,
    span_count,
    spans_to_iob2,
    token_spans,
    word_token_bounds,
)


@pytest.mark.parametrize("n,m", [(1, 16), (5, 1), (5, 5), (16, 16), (20, 16), (40, 3), (0, 4), (3, 7)])
def test_span_counts(n, m):
    spans = enumerate_spans(n, m)
    # every (s, e) with 1 <= e - s <= m, counted by hand
    expected = sum(n - k + 1 for k in range(1, min(n, m) + 1))
    if n >= m:
        assert len(spans) == sum(n - k + 1 for k in range(1, m + 1))
    assert len(spans) == expected == span_count(n, m)
    assert len(set(spans)) == len(spans)
    assert all(0 <= s < e <= n and e - s <= m for s, e in spans)
    assert spans == sorted(spans)


def test_enumerate_example_and_bad_length():
    assert enumerate_spans(3, 2) == [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)]
    with pytest.raises(RalmError, match="at least 1"):
        enumerate_spans(3, 0)


def test_word_token_bounds_with_tokenizer(bert_tokenizer):
    words = ["Tromsø", "is", "unbelievably", "cold"]
    enc = bert_tokenizer(words, is_split_into_words=True)
    wids = enc.word_ids()
    first, last = word_token_bounds(wids, len(words))
    ids = enc["input_ids"]
    for w, word in enumerate(words):
        alone = bert_tokenizer(word, add_special_tokens=False)["input_ids"]
        assert ids[first[w] : last[w] + 1] == alone
    # a truncated sentence: the cut word and the ones after it have no bounds
    cut = bert_tokenizer(words, is_split_into_words=True, truncation=True, max_length=5)
    n_full = [wids.count(w) for w in range(len(words))]
    cw = cut.word_ids()
    complete = [cw.count(w) == n_full[w] for w in range(len(words))]
    first, last = word_token_bounds(cw, len(words), complete)
    assert complete[0] and not complete[-1]
    assert first[-1] is None and last[-1] is None
    keep, toks = token_spans(enumerate_spans(len(words), 4), first, last)
    assert all(e <= complete.index(False) for s, e in (enumerate_spans(len(words), 4)[i] for i in keep))
    assert all(a <= b < 4 for a, b in toks)


def test_token_spans_example():
    assert token_spans([(0, 1), (0, 2), (1, 3)], [1, 3, None], [2, 3, None]) == ([0, 1], [(1, 2), (1, 3)])


def test_iob2_spans_and_round_trip():
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG"]
    spans = iob2_spans(tags)
    assert spans == [(0, 2, "PER"), (3, 4, "LOC"), (4, 6, "LOC"), (6, 7, "ORG")]
    assert spans_to_iob2(spans, len(tags)) == tags
    rng = random.Random(0)
    for _ in range(300):  # random consistent IOB2 sequences survive BIO -> spans -> BIO exactly
        n = rng.randint(0, 12)
        seq: list[str] = []
        for _ in range(n):
            prev = seq[-1] if seq else "O"
            choices = ["O", "B-A", "B-B"] + ([f"I-{prev[2:]}"] if prev != "O" else [])
            seq.append(rng.choice(choices))
        assert spans_to_iob2(iob2_spans(seq), n) == seq


@pytest.mark.parametrize(
    "tags,bad",
    [(["O", "I-PER"], "word 2 is tagged 'I-PER' after 'O'"), (["B-PER", "I-LOC"], "'I-LOC' after 'B-PER'")]
    + [(["I-MISC"], "word 1 is tagged 'I-MISC' after 'the sentence start'")],
)
def test_iob1_rejected(tags, bad):
    with pytest.raises(RalmError) as exc:
        iob2_spans(tags, "data/train.conll: sentence 7")
    msg = str(exc.value)
    assert msg.startswith("data/train.conll: sentence 7: ") and bad in msg and "\n" not in msg


def _brute_force(spans, labels, scores):
    """The greedy choice, defined without greed: with distinct scores, greedy-by-score keeps the
    independent set that maximises sum of 2**rank (a span outweighs every lower-ranked one together)."""
    cands = [i for i, lab in enumerate(labels) if lab != "O"]
    rank = {i: r for r, i in enumerate(sorted(cands, key=lambda i: scores[i]))}
    best, best_w = (), -1
    for r in range(len(cands) + 1):
        for subset in itertools.combinations(cands, r):
            words = [k for i in subset for k in range(*spans[i])]
            if len(words) != len(set(words)):
                continue
            w = sum(2 ** rank[i] for i in subset)
            if w > best_w:
                best, best_w = subset, w
    return sorted((spans[i][0], spans[i][1], labels[i]) for i in best)


def test_decode_against_brute_force():
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randint(1, 6)
        spans = enumerate_spans(n, rng.randint(1, 4))
        labels = [rng.choice(["O", "O", "PER", "LOC"]) for _ in spans]
        scores = rng.sample(range(1000), len(spans))  # distinct
        got = decode_spans(spans, labels, [s / 1000 for s in scores])
        assert got == _brute_force(spans, labels, scores)
        tags = spans_to_iob2(got, n)
        assert iob2_spans(tags) == got  # decoded tags are consistent IOB2


def test_decode_examples():
    assert decode_spans([(0, 2), (1, 2)], ["PER", "LOC"], [0.9, 0.95]) == [(1, 2, "LOC")]
    assert decode_spans([(0, 1), (1, 2)], ["PER", "PER"], [0.5, 0.5]) == [(0, 1, "PER"), (1, 2, "PER")]
    assert decode_spans([(0, 2), (1, 3)], ["A", "B"], [0.5, 0.5]) == [(0, 2, "A")]  # tie: earlier span
    assert decode_spans([(0, 2)], ["O"], [0.99]) == []
