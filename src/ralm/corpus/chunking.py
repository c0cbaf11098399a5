"""Split articles into token chunks with the model's own tokenizer.

Each article is tokenized once (a Hugging Face *fast* tokenizer, for its character offsets);
chunks are then cut in token space so that
- a chunk has at most `chunk_size` tokens *including* the special tokens the tokenizer adds to
  a single sequence ([CLS] ... [SEP] for BERT: 126 text tokens at the BRENT default of 128);
- a chunk never spans two articles (the last chunk of an article is simply shorter);
- chunks end at sentence boundaries when a sentence fits (greedy packing of whole sentences);
  a sentence longer than a chunk is cut at the last word start that fits, and only mid-word
  when a single word is longer than a chunk;
- `text[char_start:char_end]` of the article is exactly the chunk text, and the chunk's token
  ids are exactly the article's token ids in that range;
- an article's last chunk is not left as a tiny tail ("min_tokens", default 32 text tokens,
  clamped to budget // 2): if it has fewer than `min_tokens` tokens and a previous chunk, the
  two are merged when they fit in one chunk together; otherwise the cut between them moves
  earlier, to the latest sentence start (else the latest word start) that leaves the last chunk
  at least `min_tokens` and at most `budget` tokens (no such cut: left as is). Tiny chunks
  (article tails, headings) are hubs for mean-pooled dense retrieval: they match every query.
  A whole article shorter than `min_tokens` stays one short chunk; min_tokens=0 turns this off.
  A short chunk inside an article (a heading or the rest of a cut sentence before a sentence
  too long to join it) takes the start of the next chunk instead (`balance_inner`).

Link spans are carried into chunk coordinates; a link cut by a chunk boundary is dropped from
both chunks. Left out: overlapping (strided) chunks and padding, which belong to the models.

Example: with budget 4 text tokens, "A b. C d e f g." (one token per word/stop) ->
    chunks [A b .] [C d e f] [g .]
(the same with min_tokens: its tail [g .] already has 2 = 4 // 2 tokens), and, with sentences
[A .] [B .] [C], "A. B. C" ->
    chunks [A . B .] [C]        greedily (min_tokens 0)
    chunks [A .] [B . C]        with min_tokens 2 (or more, clamped to 4 // 2): [A . B . C] does
                                not fit, so the cut moves back to the latest sentence start
After greedy packing only the rebalancing happens in practice: greedy closes a chunk only when
what follows does not fit, so an article's last two chunks never fit in one (the merge rule is
for ranges from elsewhere, see `balance_tail`), and the number of chunks never changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
from tokenizers import Tokenizer

from ralm.corpus.sentences import sentence_boundaries
from ralm.corpus.types import Article, LinkSpan


@dataclass
class Chunk:
    """One chunk of an article, in the article's coordinates and its own.

    input_ids: (T,) int32 token ids without special tokens, T <= chunk_size - n_special.
    token_starts/token_ends: (T,) int32 character offsets of each token relative to `text`.
    links: link spans relative to `text`.
    """

    article: int
    title: str
    position: int
    char_start: int
    char_end: int
    text: str
    input_ids: np.ndarray
    token_starts: np.ndarray
    token_ends: np.ndarray
    links: list[LinkSpan] = field(default_factory=list)


WordStarts = np.ndarray | Callable[[int, int], np.ndarray]


def _word_starts_fn(word_starts: WordStarts) -> Callable[[int, int], np.ndarray]:
    if isinstance(word_starts, np.ndarray):
        ws_array = word_starts
        return lambda lo, hi: ws_array[lo:hi]
    return word_starts


def token_ranges(
    n_tokens: int,
    unit_starts: np.ndarray,
    word_starts: WordStarts,
    budget: int,
    min_tokens: int = 0,
) -> list[tuple[int, int]]:
    """Greedy packing of sentence units into half-open token ranges of at most `budget` tokens.

    unit_starts: sorted token indices where a sentence begins (0 is added if missing).
    word_starts: (n_tokens,) bool, True where a token begins a new word (safe cut points), or a
        function (lo, hi) -> that array's slice [lo:hi], asked only when a sentence is too long
        or the last range is rebalanced.
    min_tokens: the last range, when shorter and not the only one, is merged into or rebalanced
        with the one before it (see `balance_tail`); 0 = plain greedy packing.
    Example: n_tokens=9, unit_starts=[0, 3], all word starts, budget=4 -> [(0,3), (3,7), (7,9)].
    Example: n_tokens=5, unit_starts=[0, 2, 4], all word starts, budget=4 -> [(0,4), (4,5)];
        with min_tokens=2 -> [(0,2), (2,5)] (the cut moves back to the sentence start 2).
    """
    if budget < 1:
        raise ValueError(f"chunk budget must be >= 1 token, got {budget}")
    if min_tokens < 0:
        raise ValueError(f"min_tokens must be >= 0, got {min_tokens}")
    word_starts = _word_starts_fn(word_starts)
    bounds = sorted({0, *(int(u) for u in unit_starts if 0 <= u < n_tokens)}) + [n_tokens]
    ranges: list[tuple[int, int]] = []
    c0 = 0  # start of the chunk being filled
    for u0, u1 in zip(bounds[:-1], bounds[1:], strict=True):
        if u1 - c0 <= budget:
            continue  # the whole unit fits: keep filling
        if u0 > c0:  # close the current chunk before this unit
            ranges.append((c0, u0))
            c0 = u0
        while u1 - c0 > budget:  # the unit alone is too long: cut at word starts
            limit = c0 + budget
            cands = np.flatnonzero(word_starts(c0 + 1, limit + 1)) + c0 + 1
            cut = int(cands[-1]) if len(cands) else limit
            ranges.append((c0, cut))
            c0 = cut
    if c0 < n_tokens:
        ranges.append((c0, n_tokens))
    if min_tokens:
        ranges = balance_inner(ranges, bounds[:-1], word_starts, budget, min_tokens)
        ranges = balance_tail(ranges, bounds[:-1], word_starts, budget, min_tokens)
    return ranges


def balance_inner(
    ranges: list[tuple[int, int]],
    unit_starts: Sequence[int] | np.ndarray,
    word_starts: WordStarts,
    budget: int,
    min_tokens: int,
) -> list[tuple[int, int]]:
    """Give every range but the last at least `min_tokens` tokens by moving its end later.

    Greedy packing leaves a short range before a sentence too long to join it (a heading before
    a long paragraph, the short rest of a cut sentence before another long one). Such a range
    (a, c) followed by (c, n) takes the start of the next one: its end moves to the earliest
    sentence start in [a + min_tokens, min(a + budget, n - min_tokens)], else the earliest word
    start there; when there is none, its start moves earlier instead, to the latest sentence (else
    word) start in [max(p + min_tokens, c - budget), c - min_tokens] of the range (p, a) before it
    (no such cut either: left as is). min_tokens is clamped to budget // 2.
    Example: [(0, 1), (1, 5), (5, 7)], sentence starts [0, 1, 5], budget 4, min 2: window [2, 3],
        no sentence start, earliest word start 2 -> [(0, 2), (2, 5), (5, 7)].
    """
    min_tokens = min(min_tokens, budget // 2)
    if min_tokens <= 0 or len(ranges) < 2:
        return ranges
    starts = np.asarray(unit_starts, dtype=np.int64)
    ws = _word_starts_fn(word_starts)
    out = list(ranges)
    for i in range(len(out) - 1):
        (a, c), (c1, n) = out[i], out[i + 1]
        if c1 != c:
            raise ValueError(f"ranges must be contiguous, got {out[i]} then {out[i + 1]}")
        if c - a >= min_tokens:
            continue
        lo, hi = a + min_tokens, min(a + budget, n - min_tokens)
        cut = _first_cut(starts, ws, lo, hi)
        if cut is not None:
            out[i], out[i + 1] = (a, cut), (cut, n)
        elif i > 0:  # nothing to take from the next range: take the end of the previous one
            p = out[i - 1][0]
            cut = _last_cut(starts, ws, max(p + min_tokens, c - budget), c - min_tokens)
            if cut is not None:
                out[i - 1], out[i] = (p, cut), (cut, c)
    return out


def _first_cut(starts: np.ndarray, ws: Callable, lo: int, hi: int) -> int | None:
    """The earliest sentence start in [lo, hi], else the earliest word start there, else None."""
    if lo > hi:
        return None
    j = int(np.searchsorted(starts, lo, side="left"))
    if j < len(starts) and starts[j] <= hi:
        return int(starts[j])
    cands = np.flatnonzero(ws(lo, hi + 1))
    return lo + int(cands[0]) if len(cands) else None


def _last_cut(starts: np.ndarray, ws: Callable, lo: int, hi: int) -> int | None:
    """The latest sentence start in [lo, hi], else the latest word start there, else None."""
    if lo > hi:
        return None
    j = int(np.searchsorted(starts, hi, side="right")) - 1
    if j >= 0 and starts[j] >= lo:
        return int(starts[j])
    cands = np.flatnonzero(ws(lo, hi + 1))
    return lo + int(cands[-1]) if len(cands) else None


def balance_tail(
    ranges: list[tuple[int, int]],
    unit_starts: Sequence[int] | np.ndarray,
    word_starts: WordStarts,
    budget: int,
    min_tokens: int,
) -> list[tuple[int, int]]:
    """Give the last of an article's contiguous token ranges at least `min_tokens` tokens.

    min_tokens is clamped to budget // 2, so that a cut always exists in token space. When the
    last range (c, n) is shorter and a range (p, c) precedes it:
    - if n - p <= budget: they merge into (p, n);
    - else the cut moves earlier, to the latest sentence start (`unit_starts`) in
      [max(p + min_tokens, n - budget), n - min_tokens], else the latest word start there (so
      neither side ends up shorter than min_tokens);
    - else (no sentence or word start in that window) nothing changes.
    A single range (an article shorter than min_tokens) is left as it is. After greedy packing
    (`token_ranges`) the merge cannot happen: greedy closes (p, c) only because what follows
    did not fit, so n - p > budget; the branch is kept for ranges that come from elsewhere.
    Example: [(0, 4), (4, 8), (8, 9)], sentence starts [0, 4, 8], budget 4, min 2: window
        [6, 7], no sentence start there; latest word start 7 -> [(0, 4), (4, 7), (7, 9)].
    """
    min_tokens = min(min_tokens, budget // 2)
    if min_tokens <= 0 or len(ranges) < 2:
        return ranges
    (p0, c), (c1, n) = ranges[-2], ranges[-1]
    if c1 != c:
        raise ValueError(f"ranges must be contiguous, got {ranges[-2]} then {ranges[-1]}")
    if n - c >= min_tokens:
        return ranges
    if n - p0 <= budget:
        return [*ranges[:-2], (p0, n)]
    lo, hi = max(p0 + min_tokens, n - budget), n - min_tokens  # both sides keep >= min_tokens
    cut = _last_cut(np.asarray(unit_starts, dtype=np.int64), _word_starts_fn(word_starts), lo, hi)
    if cut is None:
        return ranges
    return [*ranges[:-2], (p0, cut), (cut, n)]


def _word_starts(text: str, starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """(hi-lo,) bool: token i starts a word unless it is glued to token i-1 letter to letter.

    Glued means no gap between them ("##ing" after "walk"); punctuation glued to a word is
    still a fine cut point, only a letter/digit piece continuing a letter/digit is not.
    """
    out = np.ones(hi - lo, dtype=bool)
    for j, i in enumerate(range(max(lo, 1), hi), start=max(lo, 1) - lo):
        s, e = int(starts[i]), int(ends[i - 1])
        if s <= e and text[e - 1].isalnum() and text[s].isalnum():
            out[j] = False
    return out


class Chunker:
    """Cuts articles into chunks of at most `chunk_size` tokens (special tokens included).

    tokenizer: a Hugging Face fast tokenizer (needs offsets); `chunk_size` counts the special
    tokens that `tokenizer` adds to one sequence.
    min_tokens: text tokens (no special tokens) an article's last chunk should have at least,
    when the article has more than one chunk (see the module docstring); clamped to half the
    text budget; `self.min_tokens` is the value in effect. 0 = plain greedy packing.
    """

    def __init__(self, tokenizer, chunk_size: int = 128, min_tokens: int = 32) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("chunking needs a fast (Rust) tokenizer for character offsets")
        n_special = tokenizer.num_special_tokens_to_add(pair=False)
        if chunk_size <= n_special:
            raise ValueError(f"chunk_size {chunk_size} leaves no room next to {n_special} special tokens")
        if min_tokens < 0:
            raise ValueError(f"min_tokens must be >= 0, got {min_tokens}")
        self.tokenizer = tokenizer
        self.chunk_size = chunk_size
        self.budget = chunk_size - n_special
        # text tokens; clamped so that a cut giving the last chunk this many always exists
        self.min_tokens = min(min_tokens, self.budget // 2)
        # a private copy without padding/truncation: tokenizer.json files often carry both
        # (MiniLM truncates at 128), and transformers toggles them on the shared object per call
        self._backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self._backend.no_padding()
        self._backend.no_truncation()
        self._pool: ThreadPoolExecutor | None = None

    def encode(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Tokenize whole texts in one batch: [(ids (T,), starts (T,), ends (T,)) int32 each]."""
        out = []
        for enc in self._backend.encode_batch(list(texts), add_special_tokens=False):
            ids = np.asarray(enc.ids, dtype=np.int32)
            n = len(ids)
            # fromiter over the flattened (start, end) pairs: ~3x faster than asarray(list of tuples)
            offs = np.fromiter(chain.from_iterable(enc.offsets), dtype=np.int32, count=2 * n).reshape(n, 2)
            out.append((ids, offs[:, 0].copy(), offs[:, 1].copy()))
        return out

    def chunk_encoded(
        self,
        article: Article,
        article_index: int,
        ids: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        sentence_starts: list[int] | None = None,
    ) -> list[Chunk]:
        """Chunks of one article given its full tokenization (see `encode`) and, optionally, its
        sentence starts (`sentence_boundaries(article.text)`, computed here when not given)."""
        keep = ends > starts  # tokens with empty offsets (rare normaliser artefacts) carry no text
        if not keep.all():
            ids, starts, ends = ids[keep], starts[keep], ends[keep]
        n = len(ids)
        if n == 0:
            return []
        text = article.text
        if sentence_starts is None:
            sentence_starts = sentence_boundaries(text)
        sent_starts = np.asarray(sentence_starts, dtype=np.int64)
        # the token holding a sentence's first char (byte-level BPE tokens start at the space before)
        unit_starts = np.searchsorted(ends, sent_starts, side="right")
        ranges = token_ranges(
            n,
            unit_starts,
            lambda lo, hi: _word_starts(text, starts, ends, lo, hi),
            self.budget,
            self.min_tokens,
        )
        chunks = []
        links = sorted(article.links, key=lambda s: s.start)
        link_starts = np.asarray([s.start for s in links], dtype=np.int64)
        for pos, (t0, t1) in enumerate(ranges):
            c0, c1 = int(starts[t0]), int(ends[t1 - 1])
            # byte-level BPE gives a token its leading space: keep chunk text free of edge spaces
            while c0 < c1 and text[c0].isspace():
                c0 += 1
            while c1 > c0 and text[c1 - 1].isspace():
                c1 -= 1
            rel_starts, rel_ends = starts[t0:t1] - c0, ends[t0:t1] - c0
            if c0 != starts[t0] or c1 != ends[t1 - 1]:  # edge spaces trimmed: keep offsets in the text
                rel_starts, rel_ends = np.clip(rel_starts, 0, c1 - c0), np.clip(rel_ends, 0, c1 - c0)
            lo = int(np.searchsorted(link_starts, c0, side="left"))
            hi = int(np.searchsorted(link_starts, c1, side="left"))
            chunk_links = [LinkSpan(s.start - c0, s.end - c0, s.target) for s in links[lo:hi] if s.end <= c1]
            chunks.append(
                Chunk(
                    article=article_index,
                    title=article.title,
                    position=pos,
                    char_start=c0,
                    char_end=c1,
                    text=text[c0:c1],
                    input_ids=ids[t0:t1],
                    token_starts=rel_starts,
                    token_ends=rel_ends,
                    links=chunk_links,
                )
            )
        return chunks

    def chunk(self, articles: Sequence[Article], first_index: int = 0) -> list[list[Chunk]]:
        """Chunk a batch of articles; article i gets index `first_index + i`.

        Sentence splitting runs in a helper thread while the tokenizer (which releases the GIL)
        encodes the batch: the two do not depend on each other.
        """
        texts = [a.text for a in articles]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ralm-sentences")
        bounds = self._pool.submit(lambda: [sentence_boundaries(t) for t in texts])
        encoded = self.encode(texts)
        return [
            self.chunk_encoded(a, first_index + i, *enc, sentence_starts=b)
            for i, (a, enc, b) in enumerate(zip(articles, encoded, bounds.result(), strict=True))
        ]
