"""Retrieval for the blocks of an evaluation: one batched search, chunks as LM tokens.

`open_retriever`: BM25, dense or hybrid from an existing index directory
(`ralm.Retriever.open`, which checks that the index was built from that
DocStore: fingerprints), or BM25 built in memory over a DocStore (`--corpus`). BM25 analysis:
`lang` picks stopwords and the Snowball stemmer where the language has one; with an index and no
`lang` its own BM25 analysis is used, over a bare corpus English ("en") is the default. The
corpus chunks were cut with some tokenizer (MiniLM's by default); the LM's tokenizer may differ
by design: chunks are re-tokenized from their text.

`search_blocks`: the queries of all blocks (text of the last l tokens before each block, None
where there is nothing to search for) go to the retriever in one `search_text` call, with the
excluded chunks (ralm.frozen.exclusion) removed from every query. Hits without a usable score are
dropped: missing ids (-1), non-finite scores, and BM25 scores of 0 (no query term in the chunk):
`ralm.retrieval.retriever.matched_mask`, what `Retriever.search(matched_only=True)` keeps.

`DocTokens`: a retrieved chunk as the LM sees it: "title\\ntext" tokenized with the LM tokenizer,
cut to `doc_tokens - len(sep)` tokens (its beginning kept), then the separator "\\n\\n"; cached
by chunk id and tokenized in batches.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError

SEPARATOR = "\n\n"
_WORD = re.compile(r"\w")

__all__ = [
    "DocTokens",
    "ScoredChunk",
    "open_retriever",
    "query_text",
    "search_blocks",
]


@dataclass(frozen=True)
class ScoredChunk:
    """A retrieved chunk id and its retrieval score (higher is better): the search's raw result,
    before texts are read (`ralm.Retriever`'s `Hit` adds rank, title and text)."""

    id: int
    score: float


def open_retriever(
    *,
    index: str | os.PathLike | None = None,
    corpus: str | os.PathLike | None = None,
    kind: str = "bm25",
    lang: str | None = None,
    log: Callable[[str], None] = print,
) -> tuple[DocStore, Any, str]:
    """(DocStore, retriever backend, one-line description): `ralm.Retriever.open` taken apart for the
    evaluation loop, which searches the backend with its exclusions."""
    from ralm.retrieval.retriever import Retriever

    r = Retriever.open(index=index, corpus=corpus, kind=kind, lang=lang, log=log)
    return r.store, r.backend, r.description


def query_text(text: str) -> str | None:
    """The query as given, or None when it holds no word character (nothing to search for)."""
    return text if _WORD.search(text) else None


def search_blocks(
    retriever: Any, queries: Sequence[str | None], k: int, exclude_ids: np.ndarray | None = None
) -> tuple[list[list[ScoredChunk]], float]:
    """Top-k usable hits per query (empty for None), from one batched search; and its seconds."""
    todo = [i for i, q in enumerate(queries) if q is not None]
    out: list[list[ScoredChunk]] = [[] for _ in queries]
    if not todo:
        return out, 0.0
    excl = None
    if exclude_ids is not None and len(exclude_ids):
        excl = np.broadcast_to(np.asarray(exclude_ids, dtype=np.int64), (len(todo), len(exclude_ids)))
    from ralm.retrieval.retriever import matched_mask

    t0 = time.perf_counter()
    res = retriever.search_text([queries[i] for i in todo], k, exclude_ids=excl)
    seconds = time.perf_counter() - t0
    keep = matched_mask(retriever, res)  # a chunk, a finite score, from BM25 a score > 0
    for row, i in enumerate(todo):
        for cid, sc, ok in zip(
            res.ids[row].tolist(), res.scores[row].tolist(), keep[row].tolist(), strict=True
        ):
            if ok:
                out[i].append(ScoredChunk(int(cid), float(sc)))
    return out, seconds


class DocTokens:
    """Chunk id -> (m,) int64 LM tokens of the chunk as a prepended document (see the docstring)."""

    def __init__(
        self, store: DocStore, encode: Callable[[list[str]], list[list[int]]], doc_tokens: int
    ) -> None:
        self.store = store
        self.encode = encode
        self.sep = list(encode([SEPARATOR])[0])
        if doc_tokens <= len(self.sep):
            raise RalmError(f"--doc-tokens {doc_tokens}: too few for a document and its separator")
        self.doc_tokens = doc_tokens
        self.cache: dict[int, np.ndarray] = {}
        self.seconds = 0.0

    def fetch(self, ids: Sequence[int]) -> None:
        """Tokenize every chunk of `ids` not cached yet (one tokenizer call)."""
        t0 = time.perf_counter()
        missing = sorted({int(i) for i in ids} - self.cache.keys())
        if missing:
            rows = self.store.get_many(missing)
            toks = self.encode([f"{r['title']}\n{r['text']}" for r in rows])
            body = self.doc_tokens - len(self.sep)
            for i, t in zip(missing, toks, strict=True):
                self.cache[i] = np.asarray(list(t[:body]) + self.sep, dtype=np.int64)
        self.seconds += time.perf_counter() - t0

    def __getitem__(self, i: int) -> np.ndarray:
        if i not in self.cache:
            self.fetch([i])
        return self.cache[i]
