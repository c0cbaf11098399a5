"""Word-level tagging on sub-word models: encoding, first-sub-word label alignment, read-back.

A tagging example is a list of words with one label each; the model sees sub-words. Each word's
label goes on its first sub-word; later sub-words and special tokens get the ignore index
(-100, what `torch.nn.CrossEntropyLoss` skips). At prediction time a word's tag is its first
sub-word's. Words that truncation cut off (or that the tokenizer turns into no sub-word at all)
have no prediction; they are reported as the caller's `fill` tag, so the evaluation always covers
every gold word instead of silently dropping the tail of long sentences.

Left out: the model and training loop, label averaging over all sub-words, sliding windows over
sentences longer than `max_length`.
"""

from __future__ import annotations

from collections.abc import Sequence

IGNORE_INDEX = -100


def encode_words(tokenizer, words_batch: Sequence[Sequence[str]], max_length: int):
    """Tokenise pre-split sentences: (encoding of (B, L) long tensors, word_ids per sentence).

    Example: encode_words(tok, [["Tromsø", "er", "fin"]], 32) -> (enc, [[None, 0, 0, 0, 1, 2, None]]).
    `enc` holds input_ids, attention_mask (and token_type_ids for BERT-like tokenizers), padded to
    the longest sentence; word_ids[b][t] is the word index of token t, None for special/pad tokens.
    Needs a fast tokenizer (word_ids come from its alignment).
    """
    enc = tokenizer(
        [list(w) for w in words_batch],
        is_split_into_words=True,
        truncation=True,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )
    word_ids = [enc.word_ids(i) for i in range(len(words_batch))]
    return enc, word_ids


def encode_words_by_offsets(
    tokenizer, words_batch: Sequence[Sequence[str]], max_length: int
) -> tuple[list[list[int]], list[list[int | None]]]:
    """Tokenise pre-split sentences as running text: (input ids per sentence, word_ids per sentence).

    For tokenizers that mark a word boundary inside the token (SentencePiece's "▁", byte-level
    BPE's "Ġ": Gemma, Llama, Qwen): `is_split_into_words` tokenises every word as if it started a
    text, which splits it differently from the running text the LM was trained on ("St", "ol",
    "tenberg" instead of "▁Stol", "tenberg"). Here the words are joined by single spaces and each
    token is assigned to the word holding its first non-space character (None for special tokens).

    Example, with Gemma-3's tokenizer: encode_words_by_offsets(tok, [["Jens", "Stoltenberg", "bor"]], 32)
    -> ([[2, 236863, 832, 114167, 164849, 15561]], [[None, 0, 0, 1, 1, 2]]), the tokens being
    <bos> "J" "ens" "▁Stol" "tenberg" "▁bor".
    """
    from bisect import bisect_right

    texts, starts, ends = [], [], []
    for words in words_batch:
        s, e, pos = [], [], 0
        for w in words:
            s.append(pos)
            e.append(pos + len(w))
            pos += len(w) + 1
        texts.append(" ".join(words))
        starts.append(s)
        ends.append(e)
    enc = tokenizer(texts, truncation=True, max_length=max_length, return_offsets_mapping=True)
    ids_out, wids_out = [], []
    for i, text in enumerate(texts):
        wids: list[int | None] = []
        for a, b in enc["offset_mapping"][i]:
            c = a
            while c < b and text[c].isspace():
                c += 1
            w = bisect_right(starts[i], c) - 1 if c < b else -1
            wids.append(w if w >= 0 and c < ends[i][w] else None)
        ids_out.append(list(enc["input_ids"][i]))
        wids_out.append(wids)
    return ids_out, wids_out


def align_labels(
    word_ids: Sequence[int | None], labels: Sequence[int], ignore: int = IGNORE_INDEX
) -> list[int]:
    """Per-token labels (L,): each word's label on its first sub-word, `ignore` elsewhere.

    Example: align_labels([None, 0, 0, 1, None], [3, 5]) -> [-100, 3, -100, 5, -100].
    """
    out: list[int] = []
    previous: int | None = None
    for w in word_ids:
        if w is None:
            out.append(ignore)
            continue
        out.append(int(labels[w]) if w != previous else ignore)
        previous = w
    return out


def word_predictions(
    pred_ids: Sequence[int], word_ids: Sequence[int | None], n_words: int, fill: int
) -> list[int]:
    """Per-word predictions (n_words,): the prediction on each word's first sub-word.

    Example: word_predictions([0, 3, 9, 5, 0], [None, 0, 0, 1, None], 3, fill=0) -> [3, 5, 0].
    pred_ids: one id per token position (may be longer than word_ids, e.g. padded, or a tensor).
    A word with no token (cut off by truncation) is predicted `fill` (the caller passes "O" or the
    most frequent tag), so the result always has one entry per gold word.
    """
    out = [fill] * n_words
    seen: set[int] = set()
    for t, w in enumerate(word_ids):
        if w is None or w in seen:
            continue
        seen.add(w)
        out[w] = int(pred_ids[t])
    return out
