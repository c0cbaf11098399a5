import numpy as np
import pytest

from ralm.corpus.stats import (
    chunk_length_stats,
    format_length_stats,
    length_bin_edges,
    length_histogram,
    sole_chunk_mask,
)


def test_bin_edges_docstring_example():
    assert length_bin_edges(126).tolist() == [0, 1, 8, 16, 32, 64, 127]
    assert length_bin_edges(128).tolist() == [0, 1, 8, 16, 32, 64, 128, 129]
    assert length_bin_edges(22).tolist() == [0, 1, 8, 16, 23]
    assert length_bin_edges(5).tolist() == [0, 1, 6]
    with pytest.raises(ValueError):
        length_bin_edges(0)


def test_histogram_and_stats_against_a_naive_loop():
    rng = np.random.default_rng(0)
    for _ in range(50):
        budget = int(rng.integers(1, 300))
        lengths = rng.integers(0, budget + 5, size=int(rng.integers(1, 400)))
        min_tokens = int(rng.integers(0, budget + 1))
        sole = rng.random(len(lengths)) < 0.3
        edges = length_bin_edges(budget).tolist()
        naive = [0] * len(edges)
        for n in lengths.tolist():
            i = max(j for j, e in enumerate(edges) if e <= n)  # the last bin is open-ended
            naive[i] += 1
        assert length_histogram(lengths, np.asarray(edges)).tolist() == naive
        s = chunk_length_stats(lengths, budget, min_tokens, sole)
        assert [c for _, _, c in s.bins] == naive and sum(naive) == s.n == len(lengths)
        assert [lo for lo, _, _ in s.bins] == edges
        assert [hi for _, hi, _ in s.bins] == [e - 1 for e in edges[1:]] + [None]
        assert (s.min, s.max) == (min(lengths.tolist()), max(lengths.tolist()))
        srt, h = sorted(lengths.tolist()), len(lengths) // 2
        assert s.median == (srt[h] if len(srt) % 2 else (srt[h - 1] + srt[h]) / 2)
        assert s.mean == pytest.approx(sum(lengths.tolist()) / len(lengths))
        assert s.short == sum(1 for n in lengths.tolist() if n < min_tokens)
        assert s.short_sole == sum(
            1 for n, o in zip(lengths.tolist(), sole, strict=True) if n < min_tokens and o
        )


def test_sole_chunk_mask():
    # articles of 2, 1, 0 and 1 chunks: chunks 0-1, 2, (none), 3
    assert sole_chunk_mask(np.array([0, 2, 3, 3]), np.array([2, 1, 0, 1]), 4).tolist() == [
        False,
        False,
        True,
        True,
    ]


def test_format_hides_unused_edge_bins():
    s = chunk_length_stats(np.array([3, 9, 20, 22, 22]), 22, 11, np.array([1, 0, 0, 0, 0], bool))
    assert format_length_stats(s) == [
        "  chunk tokens min 3  median 20  mean 15.2  max 22  (text tokens, budget 22)",
        "  length hist  1-7: 1  8-15: 1  16-22: 3",
        "  short chunks 2 < 11 tokens (40.0%), 1 of them whole short articles",
    ]
    s = chunk_length_stats(np.array([0, 23, 1]), 22)
    assert format_length_stats(s)[1] == "  length hist  0: 1  1-7: 1  8-15: 0  16-22: 0  23+: 1"
    assert format_length_stats(s)[2] == "  short chunks n/a (min chunk 0)"
    assert chunk_length_stats(np.array([], dtype=np.int64), 22).n == 0
