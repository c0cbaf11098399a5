import random

from ralm.tasks.tagging import IGNORE_INDEX, align_labels, encode_words, word_predictions

WORDS = ["Tromsø", "ligger", "nord", "for", "hovedstaden", ",", "og", "pivottabeller", "er", "nyttige", "."]


def test_align_labels_first_subword_only():
    assert align_labels([None, 0, 0, 1, None], [3, 5]) == [-100, 3, -100, 5, -100]
    assert align_labels([None, 0, 1, 1, 1, None, None], [7, 2], ignore=-1) == [-1, 7, 2, -1, -1, -1, -1]


def test_word_predictions_reads_first_subword_and_fills_missing_words():
    assert word_predictions([0, 3, 9, 5, 0], [None, 0, 0, 1, None], 3, fill=0) == [3, 5, 0]
    assert word_predictions([8, 8, 8], [None, None, None], 2, fill=4) == [4, 4]


def test_round_trip_recovers_word_labels_with_multi_piece_words(bert_tokenizer):
    pieces = {w: len(bert_tokenizer.tokenize(w)) for w in ("Tromsø", "hovedstaden", "pivottabeller")}
    assert all(n > 1 for n in pieces.values()), pieces  # the test needs words that split
    rng = random.Random(0)
    batch = [WORDS, WORDS[:3], ["pivottabeller"]]
    labels = [[rng.randrange(9) for _ in words] for words in batch]
    enc, word_ids = encode_words(bert_tokenizer, batch, max_length=64)
    L = enc["input_ids"].shape[1]
    assert enc["attention_mask"].shape == (3, L)
    for words, gold, wid in zip(batch, labels, word_ids, strict=True):
        assert len(wid) == L  # padded to the longest sentence
        aligned = align_labels(wid, gold)
        assert len(aligned) == L
        assert sum(a != IGNORE_INDEX for a in aligned) == len(words)  # one labelled token per word
        # gold ids as predictions, junk on every non-first sub-word: reading back gives the labels
        preds = [a if a != IGNORE_INDEX else 99 for a in aligned]
        assert word_predictions(preds, wid, len(words), fill=-1) == gold
    # "Tromsø" = tr ##oms ##ø: label on "tr" only
    assert align_labels(word_ids[0], labels[0])[:5] == [-100, labels[0][0], -100, -100, labels[0][1]]


def test_truncated_words_are_predicted_fill(bert_tokenizer):
    # max_length 8: [CLS] tr ##oms ##ø li ##gger nord [SEP] -> words 0-2 kept, 3-10 cut off
    enc, word_ids = encode_words(bert_tokenizer, [WORDS], max_length=8)
    assert word_ids[0] == [None, 0, 0, 0, 1, 1, 2, None]
    gold = list(range(1, len(WORDS) + 1))
    preds = [a if a != IGNORE_INDEX else 99 for a in align_labels(word_ids[0], gold)]
    out = word_predictions(preds, word_ids[0], len(WORDS), fill=0)
    assert out == [1, 2, 3] + [0] * (len(WORDS) - 3)
