import numpy as np
import pytest

from ralm.corpus.chunking import Chunker, _word_starts, balance_tail, token_ranges
from ralm.corpus.sentences import sentence_boundaries
from ralm.corpus.types import Article, LinkSpan


def test_token_ranges_docstring_example():
    assert token_ranges(9, np.array([0, 3]), np.ones(9, bool), 4) == [(0, 3), (3, 7), (7, 9)]


def test_token_ranges_packs_whole_sentences_greedily():
    # sentences of 2, 2, 3, 1 tokens, budget 5 -> [2+2] [3+1]
    assert token_ranges(8, np.array([0, 2, 4, 7]), np.ones(8, bool), 5) == [(0, 4), (4, 8)]


def test_token_ranges_cuts_long_sentence_at_word_starts():
    # one 7-token sentence, words [0 1] [2 3 4] [5] [6] (1, 3, 4 are ## continuations), budget 3:
    # cut before the last word start that fits: (0,2); from 2 the next fitting start is 5: (2,5)
    ws = np.array([1, 0, 1, 0, 0, 1, 1], bool)
    assert token_ranges(7, np.array([0]), ws, 3) == [(0, 2), (2, 5), (5, 7)]
    # no word start at all: hard cuts at the budget
    assert token_ranges(7, np.array([0]), np.zeros(7, bool), 3) == [(0, 3), (3, 6), (6, 7)]


def test_token_ranges_empty_and_bad_budget():
    assert token_ranges(0, np.array([0]), np.zeros(0, bool), 3) == []
    assert token_ranges(0, np.array([0]), np.zeros(0, bool), 3, 2) == []
    with pytest.raises(ValueError):
        token_ranges(3, np.array([0]), np.ones(3, bool), 0)
    with pytest.raises(ValueError):
        token_ranges(3, np.array([0]), np.ones(3, bool), 3, -1)


# ---------------------------------------------------------------- min_tokens: no tiny last chunk
def _greedy_reference(n_tokens, unit_starts, word_starts, budget):
    """token_ranges as it was before min_tokens existed (same logic), for the 0 = off check."""
    bounds = sorted({0, *(int(u) for u in unit_starts if 0 <= u < n_tokens)}) + [n_tokens]
    ranges, c0 = [], 0
    for u0, u1 in zip(bounds[:-1], bounds[1:], strict=True):
        if u1 - c0 <= budget:
            continue
        if u0 > c0:
            ranges.append((c0, u0))
            c0 = u0
        while u1 - c0 > budget:
            limit = c0 + budget
            cands = np.flatnonzero(word_starts[c0 + 1 : limit + 1]) + c0 + 1
            cut = int(cands[-1]) if len(cands) else limit
            ranges.append((c0, cut))
            c0 = cut
    if c0 < n_tokens:
        ranges.append((c0, n_tokens))
    return ranges


def test_token_ranges_min_tokens_docstring_examples():
    # module docstring: "A. B. C" with budget 4 -> [A . B .] [C]; min 2 -> [A .] [B . C]
    assert token_ranges(5, np.array([0, 2, 4]), np.ones(5, bool), 4) == [(0, 4), (4, 5)]
    assert token_ranges(5, np.array([0, 2, 4]), np.ones(5, bool), 4, 2) == [(0, 2), (2, 5)]
    # "A b. C d e f g." with budget 4: the tail [g .] already has 4 // 2 tokens, so no change
    assert token_ranges(9, np.array([0, 3]), np.ones(9, bool), 4, 32) == [(0, 3), (3, 7), (7, 9)]
    # balance_tail docstring
    ranges = [(0, 4), (4, 8), (8, 9)]
    assert balance_tail(ranges, [0, 4, 8], np.ones(9, bool), 4, 2) == [(0, 4), (4, 7), (7, 9)]


def test_min_tokens_rebalances_at_the_latest_sentence_start():
    # sentences [0,4) [4,6) [6,7), budget 6: greedy [0,6) [6,7) leaves a 1-token tail.
    # min 3: the last chunk must start in [max(0+1, 7-6), 7-3] = [1, 4]; the latest sentence
    # start there is 4 -> [0,4) [4,7) (3 tokens)
    units, ws = np.array([0, 4, 6]), np.ones(7, bool)
    assert token_ranges(7, units, ws, 6) == [(0, 6), (6, 7)]
    assert token_ranges(7, units, ws, 6, 3) == [(0, 4), (4, 7)]
    # min 2: window [1, 5]; the latest sentence start is still 4 (sentence starts beat the
    # later word start 5)
    assert token_ranges(7, units, ws, 6, 2) == [(0, 4), (4, 7)]
    # asking for more than budget // 2 = 3 is clamped to 3
    assert token_ranges(7, units, ws, 6, 100) == [(0, 4), (4, 7)]
    # earlier chunks are untouched: the same shape after a first full chunk [0,6)
    units2 = np.array([0, 6, 10, 12])
    assert token_ranges(13, units2, np.ones(13, bool), 6) == [(0, 6), (6, 12), (12, 13)]
    assert token_ranges(13, units2, np.ones(13, bool), 6, 3) == [(0, 6), (6, 10), (10, 13)]


def test_min_tokens_rebalances_at_the_latest_word_start():
    # sentences [0,4) [4,8) [8,9), budget 4: greedy [0,4) [4,8) [8,9). min 2: the last chunk
    # must start in [max(4+2, 9-4), 9-2] = [6, 7] (both sides keep 2): no sentence start there
    units = np.array([0, 4, 8])
    assert token_ranges(9, units, np.ones(9, bool), 4) == [(0, 4), (4, 8), (8, 9)]
    assert token_ranges(9, units, np.ones(9, bool), 4, 2) == [(0, 4), (4, 7), (7, 9)]  # word start 7
    ws = np.ones(9, bool)
    ws[7] = False  # token 7 continues a word: the latest word start in [6, 7] is 6
    assert token_ranges(9, units, ws, 4, 2) == [(0, 4), (4, 6), (6, 9)]
    # the callable form of word_starts gives the same, and is asked only about the window
    asked = []

    def ws_fn(lo, hi):
        asked.append((lo, hi))
        return ws[lo:hi]

    assert token_ranges(9, units, ws_fn, 4, 2) == [(0, 4), (4, 6), (6, 9)]
    assert asked == [(6, 8)]
    # no word start in [6, 7]: left as it is
    ws[6:8] = False
    assert token_ranges(9, units, ws, 4, 2) == [(0, 4), (4, 8), (8, 9)]


def test_min_tokens_merge_branch_of_balance_tail():
    # greedy packing never leaves a mergeable tail (see the property test); ranges that come
    # from elsewhere can: [0,3) [3,5) fit together in budget 6 -> [0,5)
    assert balance_tail([(0, 3), (3, 5)], [0, 3], np.ones(5, bool), 6, 3) == [(0, 5)]
    assert balance_tail([(0, 2), (2, 3), (3, 5)], [0, 2, 3], np.ones(5, bool), 6, 3) == [(0, 2), (2, 5)]
    # a tail with enough tokens, a single range, or min_tokens 0: unchanged
    assert balance_tail([(0, 3), (3, 6)], [0, 3], np.ones(6, bool), 6, 3) == [(0, 3), (3, 6)]
    assert balance_tail([(0, 2)], [0], np.ones(2, bool), 6, 3) == [(0, 2)]
    assert balance_tail([(0, 3), (3, 5)], [0, 3], np.ones(5, bool), 6, 0) == [(0, 3), (3, 5)]
    with pytest.raises(ValueError, match="contiguous"):
        balance_tail([(0, 3), (4, 5)], [0, 3], np.ones(5, bool), 6, 3)


def test_min_tokens_article_shorter_than_min_stays_one_chunk():
    assert token_ranges(3, np.array([0, 2]), np.ones(3, bool), 8, 4) == [(0, 3)]
    assert token_ranges(1, np.array([0]), np.ones(1, bool), 8, 4) == [(0, 1)]


def test_min_tokens_zero_reproduces_greedy_packing_exactly():
    rng = np.random.default_rng(1)
    for _ in range(500):
        n = int(rng.integers(0, 80))
        budget = int(rng.integers(1, 20))
        units = np.sort(rng.choice(max(n, 1), size=int(rng.integers(0, max(n, 1) + 1)), replace=False))
        ws = rng.random(n) < rng.random()
        want = _greedy_reference(n, units, ws, budget)
        assert token_ranges(n, units, ws, budget) == want
        assert token_ranges(n, units, ws, budget, 0) == want


def _naive_balance(greedy, bounds, ws, budget, m):
    """The chunk minimum by plain loops: short inner ranges take the start of the next one
    (earliest sentence start, else word start, leaving the next >= m), then a short last range
    takes the end of the one before (latest sentence start, else word start)."""
    out = list(greedy)
    for i in range(len(out) - 1):
        (a, c), (_, n) = out[i], out[i + 1]
        if c - a >= m:
            continue
        window = range(a + m, min(a + budget, n - m) + 1)
        cut = ([t for t in window if t in bounds] or [t for t in window if ws[t]] or [None])[0]
        if cut is not None:
            out[i], out[i + 1] = (a, cut), (cut, n)
        elif i > 0:
            p = out[i - 1][0]
            window = range(max(p + m, c - budget), c - m + 1)
            cut = ([t for t in window if t in bounds] or [t for t in window if ws[t]] or [None])[-1]
            if cut is not None:
                out[i - 1], out[i] = (p, cut), (cut, c)
    if len(out) >= 2 and out[-1][1] - out[-1][0] < m:
        (p0, _), (_, end) = out[-2], out[-1]
        if end - p0 <= budget:
            return [*out[:-2], (p0, end)]
        window = range(max(p0 + m, end - budget), end - m + 1)
        cut = ([t for t in window if t in bounds] or [t for t in window if ws[t]] or [None])[-1:]
        if cut and cut[0] is not None:
            out[-2:] = [(p0, cut[0]), (cut[0], end)]
    return out


def test_min_tokens_property_random_inputs():
    rng = np.random.default_rng(0)
    n_moved = n_left = 0
    for _ in range(3000):
        n = int(rng.integers(1, 120))
        budget = int(rng.integers(1, 24))
        min_tokens = int(rng.integers(0, 40))
        units = np.sort(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False))
        ws = rng.random(n) < rng.random()
        got = token_ranges(n, units, ws, budget, min_tokens)
        greedy = token_ranges(n, units, ws, budget)
        # every chunk fits and the ranges tile [0, n) contiguously
        assert got[0][0] == 0 and got[-1][1] == n
        assert all(a < b and b - a <= budget for a, b in got)
        assert all(b == c for (_, b), (c, _) in zip(got, got[1:], strict=False))
        m = min(min_tokens, budget // 2)
        bounds = set(units.tolist()) | {0}
        assert got == _naive_balance(greedy, bounds, ws, budget, m)
        assert len(got) in (len(greedy), len(greedy) - 1)  # a shrunken tail may now join its neighbour
        if got != greedy:
            n_moved += 1
        elif m and any(b - a < m for a, b in greedy[: max(len(greedy) - 1, 1)] if len(greedy) > 1):
            n_left += 1
    assert n_moved > 300 and n_left > 10  # both branches were exercised


def _article(seed: int, n_sent: int = 60) -> Article:
    rng = np.random.default_rng(seed)
    words = [
        "the",
        "king",
        "of",
        "Norway",
        "lived",
        "in",
        "Oslo",
        "during",
        "1905",
        "and",
        "unbelievably",
        "extraordinary",
        "reforms",
        "followed",
    ]
    sents = []
    for _ in range(n_sent):
        k = int(rng.integers(3, 40))
        s = " ".join(rng.choice(words, size=k))
        sents.append(s[0].upper() + s[1:] + ".")
    # a paragraph break now and then, and one monster word
    text = (
        " ".join(sents[:20]) + "\n\n" + " ".join(sents[20:40]) + " " + "x" * 400 + " " + " ".join(sents[40:])
    )
    links = []
    for m in ("Oslo", "Norway"):
        start = 0
        while (i := text.find(m, start)) >= 0:
            links.append(LinkSpan(i, i + len(m), m))
            start = i + 1
    return Article(title=f"A{seed}", text=text, source_id=str(seed), links=links)


@pytest.mark.parametrize("min_tokens", [0, 32])
@pytest.mark.parametrize("chunk_size", [16, 128, 288])
@pytest.mark.parametrize("tok_name", ["bert_tokenizer", "bpe_tokenizer"])
def test_chunk_invariants_real_tokenizers(request, tok_name, chunk_size, min_tokens):
    tok = request.getfixturevalue(tok_name)
    chunker = Chunker(tok, chunk_size, min_tokens)
    assert chunker.min_tokens == min(min_tokens, chunker.budget // 2)
    arts = [_article(s) for s in range(3)]
    all_chunks = chunker.chunk(arts, first_index=10)
    for a_idx, (art, chunks) in enumerate(zip(arts, all_chunks, strict=True)):
        full = tok(art.text, add_special_tokens=False, return_offsets_mapping=True)
        ids = np.array(full["input_ids"])
        assert chunks, "every non-empty article gives chunks"
        joined = np.concatenate([c.input_ids for c in chunks])
        assert np.array_equal(joined, ids), "chunks partition the article's tokens in order"
        sent_starts = set(sentence_boundaries(art.text))
        for pos, c in enumerate(chunks):
            assert c.article == 10 + a_idx and c.position == pos and c.title == art.title
            assert len(c.input_ids) + tok.num_special_tokens_to_add(pair=False) <= chunk_size
            assert art.text[c.char_start : c.char_end] == c.text
            assert c.text == c.text.strip()
            # token offsets are relative to the chunk text and point at the token's text
            assert c.token_starts[0] == 0 and c.token_ends[-1] == len(c.text)
            for lk in c.links:
                assert c.text[lk.start : lk.end] == lk.target
        # greedy sentence packing: a chunk starts mid-sentence only when that sentence alone was
        # too long, so the chunk before it holds no sentence start after its own first character;
        # with min_tokens cuts may move to word starts instead (checked below)
        if not chunker.min_tokens:
            for prev, c in zip(chunks, chunks[1:], strict=False):
                if c.char_start not in sent_starts:
                    assert not any(prev.char_start < s < c.char_start for s in sent_starts)
        else:  # the chunker's cuts are the plain-loop reference's, on the real word starts
            enc = chunker.encode([art.text])[0]
            ws = np.concatenate([[True], _word_starts(art.text, enc[1], enc[2], 1, len(ids))])
            units = np.searchsorted(enc[2], np.asarray(sorted(sent_starts)), side="right")
            bounds = set(units.tolist()) | {0}
            greedy = token_ranges(len(ids), units, ws, chunker.budget)
            want = _naive_balance(greedy, bounds, ws, chunker.budget, chunker.min_tokens)
            assert [len(c.input_ids) for c in chunks] == [b - a for a, b in want]


def test_chunks_stop_at_sentence_boundaries(bert_tokenizer):
    text = "One two three. Four five six. Seven eight nine. Ten."
    # budget 8 text tokens (10 incl. [CLS]/[SEP]): whole sentences of 4 tokens each pack in pairs
    chunks = Chunker(bert_tokenizer, 10).chunk([Article("t", text)])[0]
    assert [c.text for c in chunks] == ["One two three. Four five six.", "Seven eight nine. Ten."]


def test_min_tokens_with_a_real_tokenizer(bert_tokenizer):
    # budget 8, min clamped to 4. Tokens: one two three . | four five six . | seven .
    text = "One two three. Four five six. Seven."
    assert [c.text for c in Chunker(bert_tokenizer, 10, 0).chunk([Article("t", text)])[0]] == [
        "One two three. Four five six.",
        "Seven.",
    ]
    chunks = Chunker(bert_tokenizer, 10).chunk([Article("t", text)])[0]
    assert [c.text for c in chunks] == ["One two three.", "Four five six. Seven."]
    assert [c.position for c in chunks] == [0, 1] and chunks[1].char_start == text.index("Four")
    # one long sentence (11 tokens): greedy cuts at the last word start that fits, 8 ("nine"),
    # leaving "nine ten ." (3); the last chunk must start in [11-8, 11-4] = [3, 7] -> 7 ("eight")
    text = "One two three four five six seven eight nine ten."
    assert [c.text for c in Chunker(bert_tokenizer, 10, 0).chunk([Article("t", text)])[0]] == [
        "One two three four five six seven eight",
        "nine ten.",
    ]
    assert [c.text for c in Chunker(bert_tokenizer, 10).chunk([Article("t", text)])[0]] == [
        "One two three four five six seven",
        "eight nine ten.",
    ]
    # an article shorter than min_tokens stays one chunk
    assert [c.text for c in Chunker(bert_tokenizer, 10).chunk([Article("t", "Ten.")])[0]] == ["Ten."]
    with pytest.raises(ValueError):
        Chunker(bert_tokenizer, 10, -1)


def test_min_tokens_issue_example_danish_tail(bert_tokenizer):
    # the issue's 9-token tail "Frys rækker og kolonner" (fry ##s r ##æ ##kker og ko ##lon ##ner);
    # sentences of 18, 11 and 9 tokens, budget 30: greedy packs 18 + 11 and leaves the tail alone.
    # min 15 (32 clamped to 30 // 2): the last chunk must start in [38-30, 38-15] = [8, 23];
    # the latest sentence start there is 18
    text = (
        "Marker cellen under rækken og til højre for kolonnen. Vælg Vis og Frys ruder. "
        "Frys rækker og kolonner"
    )
    greedy = Chunker(bert_tokenizer, 32, 0).chunk([Article("t", text)])[0]
    assert [len(c.input_ids) for c in greedy] == [29, 9]
    assert greedy[1].text == "Frys rækker og kolonner"
    chunks = Chunker(bert_tokenizer, 32).chunk([Article("t", text)])[0]
    assert [len(c.input_ids) for c in chunks] == [18, 20]
    assert [c.text for c in chunks] == [
        "Marker cellen under rækken og til højre for kolonnen.",
        "Vælg Vis og Frys ruder. Frys rækker og kolonner",
    ]


def test_links_cut_by_a_boundary_are_dropped(bert_tokenizer):
    text = "Alpha beta gamma. Delta epsilon zeta."
    g, e = text.index("gamma"), text.index("epsilon")  # 11, 24
    links = [LinkSpan(0, 5, "Alpha"), LinkSpan(g, g + 11, "Gamma. Delta"), LinkSpan(e, e + 7, "Epsilon")]
    chunks = Chunker(bert_tokenizer, 6).chunk([Article("t", text, links=links)])[0]
    assert [c.text for c in chunks] == ["Alpha beta gamma.", "Delta epsilon zeta."]
    assert chunks[0].links == [LinkSpan(0, 5, "Alpha")]
    assert chunks[1].links == [LinkSpan(6, 13, "Epsilon")]  # 24 - 18 (chunk start)


def test_empty_article_has_no_chunks_and_small_chunk_size_refused(bert_tokenizer):
    assert Chunker(bert_tokenizer, 8).chunk([Article("t", "   ")]) == [[]]
    with pytest.raises(ValueError):
        Chunker(bert_tokenizer, 2)


def test_balance_inner_by_hand():
    from ralm.corpus.chunking import balance_inner

    ws = np.ones(7, bool)
    # [(0,1) (1,5) (5,7)], sentences at 0, 1, 5, budget 4, min 2: (0,1) takes tokens up to the
    # earliest start in [0+2, min(0+4, 5-2)] = [2, 3]: no sentence start, word start 2
    assert balance_inner([(0, 1), (1, 5), (5, 7)], [0, 1, 5], ws, 4, 2) == [(0, 2), (2, 5), (5, 7)]
    # a sentence start in the window wins over an earlier word start
    assert balance_inner([(0, 1), (1, 5), (5, 7)], [0, 1, 3, 5], ws, 4, 2) == [(0, 3), (3, 5), (5, 7)]
    # nothing to take from the next range (it would drop under 2): take from the previous one,
    # its latest start in [max(0+2, 5-4), 5-2] = [2, 3] -> 3
    assert balance_inner([(0, 4), (4, 5), (5, 7)], [0, 4, 5], ws, 4, 2) == [(0, 3), (3, 5), (5, 7)]
    # no word start anywhere useful: unchanged
    none = np.zeros(7, bool)
    assert balance_inner([(0, 4), (4, 5), (5, 7)], [0, 4, 5], none, 4, 2) == [(0, 4), (4, 5), (5, 7)]
