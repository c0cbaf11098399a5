"""The sliding-window grid of HF's perplexity recipe, cut into blocks of `stride` tokens.

HF's recipe (`max_length` L, `stride` s): windows begin at 0, s, 2s, ...; a window ends at
min(begin + L, N) and scores the tokens after the previous window's end, so every token is
scored once. The first window scores tokens 1..L-1 (token 0 has no context), each later one the
s tokens (fewer at the end) before its end, with the L - s tokens before them as context.

Here a block is a run of targets [first, end) scored with one forward pass. The LM input of a
block is [document] + the text tokens c .. end - 2 (token end - 1 is only a label), at most
`max_length` tokens in all: c = max(0, end - 1 - budget) with budget = L without retrieval and
L - m behind an m-token document (the document takes the place of the oldest context tokens, as
in In-Context RALM's code). Each target t is predicted from tokens c .. t - 1 (and the document).
Two differences from HF's loop, both so that every token 1..N-1 is scored exactly once with the
longest context L input positions allow: HF feeds the window's last token too (its logit is
unused) and so sees one context token less; and with stride == max_length HF never scores the
first token of a window (the label shift drops it), here it is scored from the token before it.
The last block also looks back the full budget (HF's last window begins on the stride grid).

`window_blocks(..., split_first=True)` also cuts the first window into blocks of s tokens
([0, s), [s, 2s), ...), so retrieval happens every s tokens from the start; a block's query is
the `query_tokens` tokens before its `start` (none for the block at 0). Without retrieval the
cut changes nothing: every token of the first window has its whole prefix as context either way.

Example: N = 20, L = 8, s = 3 -> blocks [0,3) [3,6) [6,8) | [8,11) [11,14) [14,17) [17,20);
block [11, 14) scores tokens 11..13 from input tokens 5..12 without a document, 7..12 behind a
2-token document; with query_tokens = 4 its query is tokens 7..10.
"""

from __future__ import annotations

from dataclasses import dataclass

from ralm.errors import RalmError

__all__ = ["Block", "context_start", "query_range", "window_blocks"]


@dataclass(frozen=True)
class Block:
    """Targets max(start, 1) .. end - 1; `start` is where the block's retrieval looks back from."""

    start: int
    end: int

    @property
    def first(self) -> int:
        """The first scored token (token 0 is never scored)."""
        return max(self.start, 1)

    @property
    def n_targets(self) -> int:
        return self.end - self.first


def window_blocks(n_tokens: int, max_length: int, stride: int, *, split_first: bool = True) -> list[Block]:
    """The blocks of the HF grid over `n_tokens` tokens (see the module docstring), in order."""
    if max_length < 2:
        raise RalmError(f"max length {max_length}: must be at least 2 tokens")
    if not 1 <= stride <= max_length:
        raise RalmError(f"stride {stride}: must be between 1 and the max length {max_length}")
    blocks: list[Block] = []
    prev_end = 0
    for begin in range(0, max(n_tokens, 1), stride):
        end = min(begin + max_length, n_tokens)
        if prev_end == 0 and split_first:
            blocks.extend(Block(g, min(g + stride, end)) for g in range(0, end, stride))
        else:
            blocks.append(Block(prev_end, end))
        prev_end = end
        if end >= n_tokens:
            break
    return [b for b in blocks if b.n_targets > 0]


def context_start(block: Block, budget: int) -> int:
    """First text token c of the block's input when `budget` text tokens fit: the input holds
    tokens c .. end - 2, and always the token before the first target."""
    if budget < block.n_targets:
        raise RalmError(f"a context budget of {budget} tokens cannot hold a block of {block.n_targets}")
    return max(0, block.end - 1 - budget)


def query_range(block: Block, query_tokens: int) -> tuple[int, int]:
    """Tokens [lo, hi) that form the block's retrieval query: the last `query_tokens` before `start`."""
    return max(0, block.start - query_tokens), block.start
