"""The block grid: HF's sliding windows, the first window cut every stride, contexts and queries."""

from __future__ import annotations

import pytest
from frozen_ref import grid

from ralm.errors import RalmError
from ralm.frozen.windows import Block, context_start, query_range, window_blocks


def test_docstring_example_by_hand():
    blocks = window_blocks(20, 8, 3)
    assert [(b.start, b.end) for b in blocks] == [
        (0, 3),
        (3, 6),
        (6, 8),
        (8, 11),
        (11, 14),
        (14, 17),
        (17, 20),
    ]
    b = Block(11, 14)
    assert context_start(b, 8) == 5  # input tokens 5..12: 8 tokens, predicting 11, 12, 13
    assert context_start(b, 8 - 2) == 7  # behind a 2-token document
    assert query_range(b, 4) == (7, 11)
    assert query_range(Block(3, 6), 4) == (0, 3)  # fewer tokens than query_tokens before the block
    assert query_range(Block(0, 3), 4) == (0, 0)  # the first block has no query
    assert Block(0, 3).first == 1 and Block(0, 3).n_targets == 2


@pytest.mark.parametrize(
    "n, max_length, stride",
    [(40, 8, 3), (40, 16, 16), (40, 16, 1), (10, 16, 4), (17, 16, 4), (16, 16, 16), (2, 4, 4), (33, 12, 5)],
)
@pytest.mark.parametrize("split_first", [False, True])
def test_every_token_scored_once_on_hf_grid(n, max_length, stride, split_first):
    blocks = window_blocks(n, max_length, stride, split_first=split_first)
    assert [(b.start, b.end) for b in blocks] == grid(n, max_length, stride, split_first)
    covered = [t for b in blocks for t in range(b.first, b.end)]
    assert covered == list(range(1, n))  # 1..N-1, in order, once each
    for b in blocks:
        c = context_start(b, max_length)
        assert c <= b.first - 1  # the token before the first target is in the input
        assert (b.end - 1) - c <= max_length  # input tokens c .. end-2
        if not split_first and b.end > max_length:  # HF's later windows: context back to end - 1 - L
            assert c == b.end - 1 - max_length


def test_split_first_only_cuts_the_first_window():
    plain = window_blocks(40, 16, 4, split_first=False)
    cut = window_blocks(40, 16, 4, split_first=True)
    assert (plain[0].start, plain[0].end) == (0, 16)
    assert [(b.start, b.end) for b in cut[:4]] == [(0, 4), (4, 8), (8, 12), (12, 16)]
    assert plain[1:] == cut[4:]
    assert all(context_start(b, 16) == 0 for b in cut[:4])  # same context as the whole first window


def test_bad_grid_options():
    with pytest.raises(RalmError, match="stride 9"):
        window_blocks(20, 8, 9)
    with pytest.raises(RalmError, match="stride 0"):
        window_blocks(20, 8, 0)
    with pytest.raises(RalmError, match="budget of 2 tokens cannot hold a block of 3"):
        context_start(Block(11, 14), 2)
