"""Which masked spans retrieval can help with: the salient spans whose tokens occur in another chunk
of the knowledge corpus.

REALM learns its retriever from how much a retrieved chunk raises the reader's likelihood of the
masked span. A span that occurs nowhere else in the corpus (after the query's own chunk is
excluded) gets no help from any chunk, so its query carries no signal for the retriever, only
noise. `retrievable_spans` marks, for every salient span of a query DocStore, whether its token ids
occur contiguously in a corpus chunk other than the query's own (`masking.spans = "retrievable"`
masks only those); `retrievable_share` says what fraction of a store's spans qualify.

Matching is on the DocStores' token ids (both stores share a tokenizer, as every REALM run does),
through a 64-bit polynomial hash of every window of the corpus, one length at a time, vectorised
over the whole corpus. Left out: matches across chunk boundaries, and any normalisation beyond the
tokenizer's own (an uncased tokenizer folds case; a cased one does not).

Example: a query chunk "Lincoln was born in [Hodgenville]" with a corpus chunk, not its own, that
says "... near Hodgenville, Kentucky" -> that span is retrievable.
"""

from __future__ import annotations

import numpy as np

from ralm.corpus.docstore import DocStore, RaggedArray

__all__ = ["retrievable_share", "retrievable_spans"]

_BASE = np.uint64(1_000_003)


def _salient(store: DocStore) -> RaggedArray:
    return RaggedArray(store.root / "tokens" / "salient", "int32", 3)


def _tokens(store: DocStore) -> RaggedArray:
    return RaggedArray(store.root / "tokens" / "input_ids", "int32", 1)


def _window_hashes(ids: np.ndarray, length: int) -> np.ndarray:
    """(len(ids) - length + 1,) uint64 hashes of every window of `length` ids (wrapping arithmetic).

    Example: ids [1, 2, 3], length 2 -> [h(1, 2), h(2, 3)] with h(a, b) = (a + 1) * B + (b + 1)."""
    x = ids.astype(np.uint64) + np.uint64(1)  # 0 is a token id too: shift so it weighs
    n = len(x) - length + 1
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in range(length):
            h = h * _BASE + x[i : i + n]
    return h


def retrievable_spans(queries: DocStore, corpus: DocStore, *, same_corpus: bool) -> np.ndarray:
    """(S,) bool, one flag per salient span of `queries` in stored order (`tokens/salient`): whether
    the span's token ids occur in a chunk of `corpus` other than the query's own chunk
    (`same_corpus`: the queries are the corpus's chunks, so chunk c of the queries is chunk c of the
    corpus) or, for another query store, in any chunk of the corpus."""
    sal = _salient(queries)
    spans = np.asarray(sal.data, dtype=np.int64).reshape(-1, 3)
    out = np.zeros(len(spans), dtype=bool)
    if not len(spans):
        return out
    owner = np.repeat(np.arange(len(sal), dtype=np.int64), np.diff(sal.offsets))
    qtok, ctok = _tokens(queries), _tokens(corpus)
    cflat = np.asarray(ctok.data, dtype=np.int64).reshape(-1)
    cchunk = np.repeat(np.arange(len(ctok), dtype=np.int64), np.diff(ctok.offsets))
    lengths = spans[:, 1] - spans[:, 0]
    span_hash = np.zeros(len(spans), dtype=np.uint64)
    for i, (c, s, e) in enumerate(
        zip(owner.tolist(), spans[:, 0].tolist(), spans[:, 1].tolist(), strict=True)
    ):
        if e > s:
            span_hash[i] = _window_hashes(np.asarray(qtok[c][s:e]), e - s)[0]
    for length in np.unique(lengths[lengths > 0]).tolist():
        if length > len(cflat):
            continue
        h = _window_hashes(cflat, length)
        ch = cchunk[: len(h)]
        valid = ch == cchunk[length - 1 :]  # the window lies inside one chunk
        h, ch = h[valid], ch[valid]
        order = np.lexsort((ch, h))
        h, ch = h[order], ch[order]
        uniq, first = np.unique(h, return_index=True)
        lo = ch[first]  # the lowest and highest chunk holding each distinct window
        hi = np.maximum.reduceat(ch, first)
        sel = np.flatnonzero(lengths == length)
        pos = np.searchsorted(uniq, span_hash[sel])
        pos_c = np.minimum(pos, len(uniq) - 1)
        found = (pos < len(uniq)) & (uniq[pos_c] == span_hash[sel])
        if same_corpus:  # some chunk other than the query's own holds it: the lowest or the highest
            own = owner[sel]
            found &= (lo[pos_c] != own) | (hi[pos_c] != own)
        out[sel] = found
    return out


def retrievable_share(queries: DocStore, corpus: DocStore, *, same_corpus: bool) -> dict[str, float]:
    """{"spans", "retrievable", "share"}: how many salient spans `queries` holds and how many of them
    are retrievable from `corpus` (`retrievable_spans`)."""
    flags = retrievable_spans(queries, corpus, same_corpus=same_corpus)
    n = int(len(flags))
    return {"spans": float(n), "retrievable": float(flags.sum()), "share": float(flags.mean()) if n else 0.0}
