import numpy as np
import pytest

from ralm.corpus.chunking import Chunker, token_ranges
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
    with pytest.raises(ValueError):
        token_ranges(3, np.array([0]), np.ones(3, bool), 0)


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


@pytest.mark.parametrize("chunk_size", [16, 128, 288])
@pytest.mark.parametrize("tok_name", ["bert_tokenizer", "bpe_tokenizer"])
def test_chunk_invariants_real_tokenizers(request, tok_name, chunk_size):
    tok = request.getfixturevalue(tok_name)
    chunker = Chunker(tok, chunk_size)
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
        # too long, so the chunk before it holds no sentence start after its own first character
        for prev, c in zip(chunks, chunks[1:], strict=False):
            if c.char_start not in sent_starts:
                assert not any(prev.char_start < s < c.char_start for s in sent_starts)


def test_chunks_stop_at_sentence_boundaries(bert_tokenizer):
    text = "One two three. Four five six. Seven eight nine. Ten."
    # budget 8 text tokens (10 incl. [CLS]/[SEP]): whole sentences of 4 tokens each pack in pairs
    chunks = Chunker(bert_tokenizer, 10).chunk([Article("t", text)])[0]
    assert [c.text for c in chunks] == ["One two three. Four five six.", "Seven eight nine. Ten."]


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
