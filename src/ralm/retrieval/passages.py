"""The passages a retriever is trained and evaluated on: a DocStore's chunks, or passages held in memory.

Retriever training sees passages by integer id 0..N-1 through one small interface:

    p = StorePassages(DocStore("corpora/nowiki"))       # chunks, inputs from the stored token ids
    p = ListPassages(["Oslo"], ["Oslo er hovedstaden."], ["d1"])   # DPR/BEIR passages, in memory
    p.text(3), p.title(3), p.doc_rows(encoder, [3, 7])  # (ids, types) rows for the doc tower
    p.bm25(lang="nb")                                   # a BM25Searcher over the same ids

`StorePassages` builds doc-tower inputs exactly as `ralm index build` does
(`ralm.retrieval.embed.DocInputs`: `[CLS] title [SEP] chunk [SEP]` from the stored token ids), so
what the towers train on is what the index will hold. `ContextLocator` finds where a passage
given as text (a SQuAD context, a DPR positive) lies in a DocStore, comparing texts with all
whitespace and accents removed (`squeeze`) (the DocStore keeps each chunk as a slice of its article's text; only the
whitespace between chunks is not in any chunk).

Left out: passages too many for memory in `ListPassages` (build a DocStore from them instead).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.encoders import DualEncoder

_WS = re.compile(r"\s+")


def squeeze(text: str) -> str:
    """`text` without whitespace and accents, for comparing a text with its cleaned copy in a DocStore.

    Example: "Сове́тских  Oslo\\nér" -> "СоветскихOsloer" (NFKD, combining marks and whitespace dropped).
    """
    decomposed = unicodedata.normalize("NFKD", text)
    return _WS.sub("", "".join(c for c in decomposed if not unicodedata.combining(c)))


class StorePassages:
    """The chunks of a DocStore as passages (ids = chunk ids)."""

    def __init__(self, store: DocStore) -> None:
        self.store = store
        self._inputs: dict[int, object] = {}  # id(doc tower) -> DocInputs

    def __len__(self) -> int:
        return len(self.store)

    @property
    def fingerprint(self) -> str:
        return self.store.fingerprint

    def describe(self) -> str:
        return f"{self.store.root} ({len(self.store)} chunks)"

    def text(self, i: int) -> str:
        return self.store.get(int(i))["text"]

    def title(self, i: int) -> str:
        return self.store.get(int(i))["title"] or ""

    def token_ids(self, i: int) -> np.ndarray:
        """The chunk's token ids (no special tokens), as the DocStore stores them."""
        return self.store.input_ids(int(i))

    def doc_rows(self, encoder: DualEncoder, ids: Sequence[int]) -> list[tuple[list, list]]:
        """Doc-tower inputs of passages `ids`, as `ralm index build` makes them."""
        from ralm.retrieval.embed import DocInputs
        from ralm.retrieval.store_tokenizer import tokenizes_like

        key = id(encoder.doc_tower)
        if key not in self._inputs:
            retok = not tokenizes_like(encoder.doc_tower.tokenizer, self.store)
            self._inputs[key] = DocInputs(
                encoder.doc_tower, self.store, encoder.config.max_length, retokenize=retok
            )
        return self._inputs[key].rows(np.asarray(ids, dtype=np.int64))  # type: ignore[attr-defined]

    def lengths(self) -> np.ndarray:
        """(N,) token counts of the passages (for length-sorted batches)."""
        return self.store.lengths()

    def bm25(self, **options):
        from ralm.retrieval.bm25 import BM25Searcher

        return BM25Searcher.build(self.store, **options)


class ListPassages:
    """Passages held in memory (titles, texts, the source's ids), e.g. a DPR file's or a BEIR corpus."""

    def __init__(
        self, titles: Sequence[str], texts: Sequence[str], ids: Sequence[str], source: str = ""
    ) -> None:
        if not (len(titles) == len(texts) == len(ids)):
            raise ValueError("titles, texts and ids must have the same length")
        self.titles, self.texts, self.ids = list(titles), list(texts), list(ids)
        self.source = source
        self.by_id = {k: i for i, k in enumerate(self.ids)}

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def fingerprint(self) -> str:
        import hashlib

        h = hashlib.sha256()
        for t, x in zip(self.titles, self.texts, strict=True):
            h.update(t.encode() + b"\x00" + x.encode() + b"\x01")
        return h.hexdigest()

    def describe(self) -> str:
        return f"{self.source or 'passages'} ({len(self)} passages)"

    def text(self, i: int) -> str:
        return self.texts[int(i)]

    def title(self, i: int) -> str:
        return self.titles[int(i)]

    def doc_rows(self, encoder: DualEncoder, ids: Sequence[int]) -> list[tuple[list, list]]:
        return encoder.doc_rows([self.titles[int(i)] or None for i in ids], [self.texts[int(i)] for i in ids])

    def lengths(self) -> np.ndarray:
        return np.array(
            [len(t) + len(x) for t, x in zip(self.titles, self.texts, strict=True)], dtype=np.int64
        )

    def bm25(self, **options):
        from ralm.retrieval.bm25 import BM25Searcher

        return BM25Searcher.from_texts(
            [f"{t}\n{x}" if t else x for t, x in zip(self.titles, self.texts, strict=True)], **options
        )


class ContextLocator:
    """Where a text (a SQuAD context, a passage) lies in a DocStore, by whitespace-free comparison.

    `article(context)` -> the article whose text is `context`, or None; `chunk_at(article, context,
    char)` -> the chunk holding character `char` of `context`; `chunk_of(text)` -> the chunk whose
    own text is `text`, or None. Texts are held as hashes, so memory is a few dozen bytes a chunk.
    """

    def __init__(self, store: DocStore) -> None:
        self.store = store
        arts = store.articles(["first_chunk", "n_chunks"])
        self.first = np.asarray(arts.column("first_chunk").to_numpy(), dtype=np.int64)
        self.count = np.asarray(arts.column("n_chunks").to_numpy(), dtype=np.int64)
        self._article: dict[int, int] = {}  # hash of the squeezed article text -> article
        self._chunk: dict[int, int] = {}  # hash of a squeezed chunk text -> first chunk with it
        self._bounds: dict[int, list[int]] = {}  # article -> cumulative squeezed lengths of its chunks
        texts = (t for b in store.iter_batches(4096, columns=["text"]) for t in b["text"])
        a, pieces, bounds = 0, [], []
        for cid, text in enumerate(texts):
            while a < len(self.first) and cid >= self.first[a] + self.count[a]:
                self._close(a, pieces, bounds)
                a, pieces, bounds = a + 1, [], []
            s = squeeze(text)
            self._chunk.setdefault(hash(s), cid)
            pieces.append(s)
            bounds.append((bounds[-1] if bounds else 0) + len(s))
        if pieces:
            self._close(a, pieces, bounds)

    def _close(self, a: int, pieces: list[str], bounds: list[int]) -> None:
        self._article.setdefault(hash("".join(pieces)), a)
        self._bounds[a] = bounds

    def article(self, context: str) -> int | None:
        return self._article.get(hash(squeeze(context)))

    def chunk_at(self, article: int, context: str, char: int) -> int:
        """Chunk id of the article's chunk that holds non-space character `char` of `context`."""
        pos = len(squeeze(context[:char]))  # the character's index in the squeezed text
        j = bisect.bisect_right(self._bounds[article], pos)
        return int(self.first[article] + min(j, int(self.count[article]) - 1))

    def chunk_of(self, text: str) -> int | None:
        cid = self._chunk.get(hash(squeeze(text)))
        if cid is not None and squeeze(self.store.get(cid)["text"]) != squeeze(text):
            return None  # a hash collision
        return cid


def check_nonempty(title: str, text: str, where: str) -> None:
    """RalmError for a passage with no text."""
    if not (text or "").strip():
        raise RalmError(f"{where}: the passage is empty; give it text or remove the pair")
