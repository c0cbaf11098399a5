"""Vocabulary, tokenisation and n-gram counting in compact numpy arrays.

Every sentence is encoded as `<s> w1 ... wk </s>` (one `<s>`, as KenLM does) and the whole
corpus becomes one int32 array of word ids. N-grams are never materialised as Python tuples:
an order-k n-gram is the int64 key `prefix_index * V + last_word_id`, where `prefix_index`
is the row of its (k-1)-word prefix in the sorted order-(k-1) table and V the vocabulary
size (a trie flattened into sorted arrays). Counting is one `np.unique` per order; lookups
are `np.searchsorted`. Orders whose keys would overflow int64 are refused.

Left out: pruning, count cut-offs, vocabulary limits, on-disk (out-of-core) counting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat

import numpy as np

from ralm.errors import RalmError
from ralm.text import word_tokenize

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
SPECIALS = (UNK, BOS, EOS)


def whitespace_tokenize(text: str, lowercase: bool = False) -> list[str]:
    """Split on whitespace only (text that is already tokenised)."""
    if lowercase:
        text = text.lower()
    return text.split()


TOKENIZERS = {"word": word_tokenize, "whitespace": whitespace_tokenize}


class Vocab:
    """Token <-> int32 id. Ids 0, 1, 2 are always `<unk>`, `<s>`, `</s>` (KenLM's numbering).

    Other tokens follow in order of first appearance. Unknown tokens map to `<unk>` (id 0).
    """

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        self.id_to_token: list[str] = list(dict.fromkeys(chain(SPECIALS, tokens)))  # first appearance
        self.token_to_id: dict[str, int] = {t: i for i, t in enumerate(self.id_to_token)}

    def __len__(self) -> int:
        return len(self.id_to_token)

    def __contains__(self, token: object) -> bool:
        return token in self.token_to_id

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Ids of `tokens`, `<unk>` (0) for unknown ones."""
        get = self.token_to_id.get
        return [get(t, UNK_ID) for t in tokens]

    def encode_sentences(
        self, sentences: Sequence[Sequence[str]], bos: bool = True, eos: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """Flatten sentences into one id array with boundary markers.

        Returns `(flat, sentence_id)`, both int32 of shape (T,), T = sum(len(s) + bos + eos).
        `sentence_id[i]` is the index of the sentence position i belongs to.
        """
        n_words = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        ids = np.fromiter(
            map(self.token_to_id.get, chain.from_iterable(sentences), repeat(UNK_ID)),
            dtype=np.int32,
            count=int(n_words.sum()),
        )
        lengths = n_words + int(bos) + int(eos)
        starts = np.cumsum(lengths) - lengths  # first position of each sentence in flat
        flat = np.empty(int(lengths.sum()), dtype=np.int32)
        if bos:
            flat[starts] = BOS_ID
        if eos:
            flat[starts + lengths - 1] = EOS_ID
        # word j of sentence i (ids[first_word[i] + j]) goes to flat[starts[i] + bos + j]
        first_word = np.cumsum(n_words) - n_words
        flat[np.arange(len(ids)) + np.repeat(starts + int(bos) - first_word, n_words)] = ids
        sid = np.repeat(np.arange(len(sentences), dtype=np.int32), lengths)
        return flat, sid


@dataclass
class NGramCounts:
    """Raw counts of all orders 1..order of a corpus encoded as `<s> ... </s>` sentences.

    keys[k-1]: int64 (n_k,) sorted keys of the order-k n-grams; keys[0] = arange(V) (every
        vocabulary entry is a unigram, counted or not).
    counts[k-1]: (n_k,) raw occurrence counts (unigram `<s>` = number of sentences); int32,
        int64 for corpora of 2^31 or more tokens.
    suffix[k-1]: (n_k,) row in the order-(k-1) table of the n-gram without its first word
        (None for k = 1); int32 like counts.
    """

    vocab: Vocab
    order: int
    keys: list[np.ndarray] = field(default_factory=list)
    counts: list[np.ndarray] = field(default_factory=list)
    suffix: list[np.ndarray | None] = field(default_factory=list)
    n_sentences: int = 0
    n_tokens: int = 0

    @property
    def V(self) -> int:  # noqa: N802 - the usual name
        return len(self.vocab)

    def prefix(self, k: int) -> np.ndarray:
        """Row in the order-(k-1) table of each order-k n-gram's context (k >= 2)."""
        return self.keys[k - 1] // self.V

    def last(self, k: int) -> np.ndarray:
        """Last word id of each order-k n-gram."""
        return self.keys[k - 1] % self.V

    def first_word(self, k: int) -> np.ndarray:
        """First word id of each order-k n-gram."""
        first = self.keys[0]
        for j in range(2, k + 1):
            first = first[self.prefix(j)]
        return first

    def context_totals(self, k: int) -> np.ndarray:
        """Sum of raw counts of the order-k n-grams sharing each (k-1)-gram context.

        Shape (n_{k-1},) for k >= 2. For k = 1 a shape (1,) array: all tokens except `<s>`.
        """
        if k == 1:
            c = self.counts[0]
            return np.array([c.sum() - c[BOS_ID]], dtype=np.float64)
        return np.bincount(
            self.prefix(k), weights=self.counts[k - 1], minlength=len(self.keys[k - 2])
        ).astype(np.float64)


def check_order(order: int, max_order: int = 10) -> int:
    """Validate an n-gram order (1..max_order)."""
    if isinstance(order, bool) or not isinstance(order, int | np.integer):
        raise RalmError(f"n-gram order must be an integer from 1 to {max_order}, got {order!r}")
    if not 1 <= order <= max_order:
        raise RalmError(f"n-gram order must be from 1 to {max_order}, got {order}")
    return int(order)


def build_vocab(sentences: Sequence[Sequence[str]]) -> Vocab:
    """Vocabulary of a training corpus; rejects tokens an ARPA file cannot hold."""
    freq = Counter(chain.from_iterable(sentences))
    for tok in freq:
        if tok in SPECIALS:
            raise RalmError(
                f"training text contains the reserved token {tok!r}; ralm adds <s>, </s> and "
                "<unk> itself (KenLM refuses them too): remove or rename it"
            )
        if not isinstance(tok, str) or not tok or tok != "".join(tok.split()):
            raise RalmError(
                f"token {tok!r} is empty, not a string, or contains whitespace; "
                "n-gram tokens must be non-empty strings without whitespace"
            )
    return Vocab(freq)


def count_ngrams(sentences: Iterable[Sequence[str]], order: int) -> NGramCounts:
    """Count all n-grams of orders 1..order of `sentences` (lists of string tokens).

    Example: `count_ngrams([["a", "b"]], 2)` has bigram keys for `<s> a`, `a b`, `b </s>`.
    Raises RalmError for an empty corpus (no tokens at all).
    """
    order = check_order(order)
    if isinstance(sentences, str):
        raise RalmError("sentences must be lists of tokens, not one string (use word_tokenize)")
    sents = list(sentences)
    if any(isinstance(s, str) for s in sents):
        raise RalmError("sentences must be lists of tokens, not strings (use word_tokenize)")
    sents = [s if isinstance(s, list | tuple) else list(s) for s in sents]
    n_tokens = sum(len(s) for s in sents)
    if n_tokens == 0:
        raise RalmError("cannot fit an n-gram model on an empty corpus (no tokens)")
    vocab = build_vocab(sents)
    V = len(vocab)
    flat, _ = vocab.encode_sentences(sents)
    n_sentences = len(sents)
    T = len(flat)
    if order > 1 and (T + 1) * V >= 2**63:
        raise RalmError(f"corpus too large for int64 n-gram keys ({T} tokens, {V} types)")
    del sents
    small = np.int32 if T < 2**31 - 1 else np.int64  # counts and row numbers are <= T
    out = NGramCounts(vocab=vocab, order=order, n_sentences=n_sentences, n_tokens=n_tokens)
    out.keys.append(np.arange(V, dtype=np.int64))
    out.counts.append(np.bincount(flat, minlength=V).astype(small))
    out.suffix.append(None)
    is_eos = flat == EOS_ID
    pos_idx = flat.astype(np.int64)  # row of the (k-1)-gram starting at each position
    start_ok = np.ones(T, dtype=bool)
    for k in range(2, order + 1):
        n = T - k + 1
        ok = start_ok[:n] & ~is_eos[k - 2 : k - 2 + n]
        pos = np.flatnonzero(ok)
        keys = pos_idx[pos] * V + flat[pos + k - 1]
        uniq, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
        del keys
        inv = inv.reshape(-1)
        suf = np.empty(len(uniq), dtype=small)
        suf[inv] = pos_idx[pos + 1]
        out.keys.append(uniq)
        out.counts.append(cnt.astype(small))
        del cnt
        out.suffix.append(suf)
        new_idx = np.full(T, -1, dtype=np.int64)
        new_idx[pos] = inv
        pos_idx = new_idx
        start_ok = np.zeros(T, dtype=bool)
        start_ok[pos] = True
    return out
