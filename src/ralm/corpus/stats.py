"""Chunk-length statistics of a DocStore, computed from its token offsets (no text is read).

Lengths are text tokens (no special tokens), `DocStore.lengths()`: one `np.diff` over the
offsets of tokens/input_ids.idx. Bins double from 8 up to the text budget:

Example: budget 126 -> bins 0 | 1-7 | 8-15 | 16-31 | 32-63 | 64-126 | 127+ (the first and last
are for lengths that a build never writes, 0 and over the budget, and are shown only when used).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def length_bin_edges(budget: int) -> np.ndarray:
    """(B+1,) int64 left edges of the length bins: 0, 1, 8, 16, 32, ... (powers of two <= budget),
    budget + 1. Bin i holds lengths in [edges[i], edges[i+1]); the last bin, everything longer."""
    if budget < 1:
        raise ValueError(f"budget must be >= 1 token, got {budget}")
    edges = [0, 1]
    p = 8
    while p <= budget:
        edges.append(p)
        p *= 2
    edges.append(budget + 1)
    return np.asarray(edges, dtype=np.int64)


def length_histogram(lengths: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(len(edges),) int64 count of `lengths` in each bin of `length_bin_edges` (vectorised)."""
    idx = np.searchsorted(edges, np.asarray(lengths, dtype=np.int64), side="right") - 1
    return np.bincount(idx, minlength=len(edges)).astype(np.int64)


def sole_chunk_mask(first_chunk: np.ndarray, n_chunks: np.ndarray, n: int) -> np.ndarray:
    """(n,) bool: True for the chunks that are the only chunk of their article."""
    mask = np.zeros(n, dtype=bool)
    first_chunk, n_chunks = np.asarray(first_chunk, dtype=np.int64), np.asarray(n_chunks)
    mask[first_chunk[n_chunks == 1]] = True
    return mask


@dataclass
class ChunkLengthStats:
    """Summary of chunk lengths in text tokens.

    bins: (lo, hi, count) with hi inclusive, None for the open last bin.
    short: chunks with fewer than `min_tokens` tokens (0 when min_tokens is 0);
    short_sole: how many of those are the only chunk of their article (a whole short article).
    """

    n: int
    min: int
    median: float
    mean: float
    max: int
    budget: int
    min_tokens: int
    short: int
    short_sole: int | None
    bins: list[tuple[int, int | None, int]]


def chunk_length_stats(
    lengths: np.ndarray, budget: int, min_tokens: int = 0, sole: np.ndarray | None = None
) -> ChunkLengthStats:
    """Histogram and summary of (N,) chunk `lengths` for a text `budget`.

    sole: optional (N,) bool, True where a chunk is its article's only chunk (`sole_chunk_mask`).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    edges = length_bin_edges(budget)
    counts = length_histogram(lengths, edges)
    bins = [
        (int(lo), int(edges[i + 1]) - 1 if i + 1 < len(edges) else None, int(counts[i]))
        for i, lo in enumerate(edges)
    ]
    short_mask = lengths < min_tokens
    empty = len(lengths) == 0
    return ChunkLengthStats(
        n=len(lengths),
        min=0 if empty else int(lengths.min()),
        median=0.0 if empty else float(np.median(lengths)),
        mean=0.0 if empty else float(lengths.mean()),
        max=0 if empty else int(lengths.max()),
        budget=budget,
        min_tokens=min_tokens,
        short=int(short_mask.sum()),
        short_sole=None if sole is None else int((short_mask & sole).sum()),
        bins=bins,
    )


def format_length_stats(s: ChunkLengthStats, indent: str = "  ") -> list[str]:
    """The lines `ralm corpus info` prints for `s`."""
    label = f"{indent}{{:<13}}"
    shown = [
        (lo, hi, c)
        for i, (lo, hi, c) in enumerate(s.bins)
        if c or 0 < i < len(s.bins) - 1  # the 0 and over-budget bins only when used
    ]
    hist = "  ".join(
        f"{lo if hi == lo else f'{lo}-{hi}' if hi is not None else f'{lo}+'}: {c}" for lo, hi, c in shown
    )
    lines = [
        label.format("chunk tokens")
        + f"min {s.min}  median {s.median:g}  mean {s.mean:.1f}  max {s.max}  (text tokens, budget {s.budget})",
        label.format("length hist") + hist,
    ]
    if s.min_tokens:
        sole = f", {s.short_sole} of them whole short articles" if s.short_sole is not None else ""
        lines.append(
            label.format("short chunks")
            + f"{s.short} < {s.min_tokens} tokens ({100 * s.short / max(1, s.n):.1f}%){sole}"
        )
    else:
        lines.append(label.format("short chunks") + "n/a (min chunk 0)")
    return lines
