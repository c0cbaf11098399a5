"""BM25 over a DocStore with bm25s: the sparse baseline next to the dense retriever.

Scoring is bm25s's "lucene" variant with its defaults k1=1.5, b=0.75:
idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)), tf part = tf / (tf + k1 * (1 - b + b * |d| / avgdl)).
Each chunk is indexed as its article title followed by its text (`include_title=False` for
the text alone), read from the DocStore in batches.

Tokenisation (the same for chunks and queries): Unicode NFKC normalisation, case folding,
then runs of word characters (`\\w+`, plus combining diacritics). bm25s's default pattern
`\\b\\w\\w+\\b` already matches æøå and Cyrillic, but it drops one-letter words (Norwegian
"å", "ø", "i"; Russian "в", "с") and splits decomposed (NFD) text: "på" written as
"pa" + U+030A became "pa". Stopwords: none by default (the corpus may be in any language);
`stopwords="en"` (or "no", "da", "sv", "de", "ru", ... any list bm25s ships) or your own list.

Search is exhaustive (every chunk gets a score), so the k results are exact, ties go to the
lower id, and excluded ids (REALM's trivial retrievals) never come back; the exclusion and
validation rules are those of `DenseIndex.search` (`prepare_exclude`, `filter_excluded`).

Saved as bm25s's own files (npy arrays written without pickle, vocab and params as JSON) plus
`bm25.json`, a manifest with the DocStore fingerprint and the tokenisation. Left out:
stemming (PyStemmer is not a dependency), and building without the tokenised corpus in
memory (bm25s holds all token ids while it builds the sparse matrix).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s
import bm25s.stopwords as bm25s_stopwords
import numpy as np
from bm25s.tokenization import Tokenizer

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, SearchResult, check_queries
from ralm.retrieval.index import check_fingerprints, filter_excluded, prepare_exclude, read_manifest

MANIFEST_FILE = "bm25.json"
FORMAT = "ralm-bm25"
FORMAT_VERSION = 1
TOKEN_PATTERN = r"[\w\u0300-\u036f]+"
BM25S_FILES = (
    "data.csc.index.npy",
    "indices.csc.index.npy",
    "indptr.csc.index.npy",
    "vocab.index.json",
    "params.index.json",
)

_LISTS = {
    "en": "STOPWORDS_EN",
    "english": "STOPWORDS_EN",
    "en_plus": "STOPWORDS_EN_PLUS",
    "english_plus": "STOPWORDS_EN_PLUS",
    "de": "STOPWORDS_GERMAN",
    "german": "STOPWORDS_GERMAN",
    "nl": "STOPWORDS_DUTCH",
    "dutch": "STOPWORDS_DUTCH",
    "fr": "STOPWORDS_FRENCH",
    "french": "STOPWORDS_FRENCH",
    "es": "STOPWORDS_SPANISH",
    "spanish": "STOPWORDS_SPANISH",
    "pt": "STOPWORDS_PORTUGUESE",
    "portuguese": "STOPWORDS_PORTUGUESE",
    "it": "STOPWORDS_ITALIAN",
    "italian": "STOPWORDS_ITALIAN",
    "ru": "STOPWORDS_RUSSIAN",
    "russian": "STOPWORDS_RUSSIAN",
    "sv": "STOPWORDS_SWEDISH",
    "swedish": "STOPWORDS_SWEDISH",
    "no": "STOPWORDS_NORWEGIAN",
    "nb": "STOPWORDS_NORWEGIAN",
    "nn": "STOPWORDS_NORWEGIAN",
    "norwegian": "STOPWORDS_NORWEGIAN",
    "da": "STOPWORDS_DANISH",
    "danish": "STOPWORDS_DANISH",
    "tr": "STOPWORDS_TURKISH",
    "turkish": "STOPWORDS_TURKISH",
}


def normalize(text: str) -> str:
    """NFKC and case folding: what both chunks and queries go through before splitting."""
    return unicodedata.normalize("NFKC", text).casefold()


_split = re.compile(TOKEN_PATTERN).findall


def split_words(text: str) -> list[str]:
    """The tokens of `text` (before stopword removal): normalised runs of word characters."""
    return _split(normalize(text))


def resolve_stopwords(stopwords: str | Sequence[str] | None) -> list[str]:
    """A stopword list from a language name/code that bm25s ships a list for, a list, or None."""
    if stopwords is None:
        return []
    if isinstance(stopwords, str):
        name = _LISTS.get(stopwords.lower())
        if name is None:
            raise RalmError(
                f"no stopword list for {stopwords!r}; use one of {', '.join(sorted(_LISTS))}, "
                "a list of words, or None"
            )
        words: Sequence[str] = getattr(bm25s_stopwords, name)
    else:
        words = stopwords
    return sorted({normalize(w) for w in words if isinstance(w, str) and w.strip()})


class BM25Retriever:
    """BM25 search over the chunks of one DocStore (ids = chunk ids); implements `Retriever`.

    `BM25Retriever.build(store)` indexes a DocStore; `search_text(queries, k, exclude_ids)` ranks.
    """

    def __init__(self, model: bm25s.BM25, manifest: dict[str, Any]) -> None:
        self.model = model
        self.manifest = manifest
        self.stopwords: list[str] = list(manifest["stopwords"])
        self._stopset = frozenset(self.stopwords)
        self.count: int = int(model.scores["num_docs"])

    def __len__(self) -> int:
        return self.count

    @property
    def docstore_fingerprint(self) -> str:
        return self.manifest["docstore_fingerprint"]

    def __repr__(self) -> str:
        return f"BM25Retriever(count={self.count}, vocab={len(self.model.vocab_dict)})"

    # -- build
    @classmethod
    def build(
        cls,
        store: DocStore,
        *,
        include_title: bool = True,
        stopwords: str | Sequence[str] | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        batch_size: int = 4096,
    ) -> BM25Retriever:
        """Index every chunk of `store` ("title\\ntext", or the text alone)."""
        n = len(store)
        if n == 0:
            raise RalmError(f"{store.root}: the DocStore has no chunks to index")
        words = resolve_stopwords(stopwords)
        tokenizer = Tokenizer(lower=False, splitter=split_words, stopwords=words)
        columns = ["title", "text"] if include_title else ["text"]
        corpus_ids: list[list[int]] = []
        for batch in store.iter_batches(batch_size, columns=columns):
            texts = (
                [f"{t}\n{x}" for t, x in zip(batch["title"], batch["text"], strict=True)]
                if include_title
                else batch["text"]
            )
            corpus_ids.extend(tokenizer.streaming_tokenize(texts, update_vocab=True, allow_empty=True))
        if len(corpus_ids) != n:
            raise RalmError(
                f"{store.root}: read {len(corpus_ids)} chunks but the manifest says {n}; rebuild it"
            )
        model = bm25s.BM25(k1=k1, b=b, method="lucene")
        model.index((corpus_ids, dict(tokenizer.get_vocab_dict())), show_progress=False)
        del corpus_ids
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "count": n,
            "docstore_fingerprint": store.fingerprint,
            "method": "lucene",
            "k1": k1,
            "b": b,
            "include_title": include_title,
            "normalization": "NFKC+casefold",
            "token_pattern": TOKEN_PATTERN,
            "stopwords": words,
            "bm25s_version": getattr(bm25s, "__version__", "unknown"),
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        return cls(model, manifest)

    # -- search
    def tokenize_query(self, query: str) -> list[int]:
        """Vocabulary ids of the query's tokens (stopwords and unseen words dropped)."""
        vocab = self.model.vocab_dict
        return [vocab[w] for w in split_words(query) if w not in self._stopset and w in vocab]

    def scores(self, query: str) -> np.ndarray:
        """(N,) float32 BM25 score of every chunk for one query."""
        ids = self.tokenize_query(query)
        if not ids:
            return np.zeros(self.count, dtype=np.float32)
        return np.asarray(self.model.get_scores_from_ids(ids), dtype=np.float32)

    def search_text(self, queries: Sequence[str], k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Top-k chunk ids and BM25 scores per query, best first (ties: lower id first).

        Always k results; RalmError for an empty batch, an empty query, or k larger than the
        chunks left after exclusion.
        """
        queries = check_queries(queries)
        excl = prepare_exclude(exclude_ids, len(queries), self.count, k)
        out_ids = np.empty((len(queries), k), dtype=np.int64)
        out_scores = np.empty((len(queries), k), dtype=np.float32)
        for i, q in enumerate(queries):
            s = self.scores(q)
            row_excl = None if excl is None else excl[i : i + 1]
            n_excl = 0 if row_excl is None else int((row_excl >= 0).sum())
            cand = _candidates(s, min(self.count, k + n_excl), n_excl)
            ids, sc, _ = filter_excluded(cand[None, :], s[cand][None, :], row_excl, k)
            out_ids[i], out_scores[i] = ids[0], sc[0]
        return SearchResult(ids=out_ids, scores=out_scores)

    # -- persistence
    def save(self, directory: str | os.PathLike) -> Path:
        """Write bm25s's files and `bm25.json` into `directory` (each file replaced atomically)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".bm25-tmp-{os.getpid()}"
        try:
            self.model.save(tmp, corpus=None, allow_pickle=False, show_progress=False)
            sizes = {name: os.path.getsize(tmp / name) for name in BM25S_FILES}
            manifest = {**self.manifest, "files": sizes}
            (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
            for name in (*BM25S_FILES, MANIFEST_FILE):
                os.replace(tmp / name, d / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.manifest = manifest
        return d

    @classmethod
    def load(
        cls, directory: str | os.PathLike, *, docstore_fingerprint: str | None = None, mmap: bool = False
    ) -> BM25Retriever:
        """Read a saved BM25 index; with a fingerprint given, check it was built from that DocStore."""
        d = Path(directory)
        mpath = d / MANIFEST_FILE
        for p in (mpath, *(d / f for f in BM25S_FILES)):
            if not p.is_file():
                raise RalmError(f"{p}: no such file; build the BM25 index with `ralm index build`")
        manifest = read_manifest(mpath, FORMAT, FORMAT_VERSION, "BM25 index")
        check_fingerprints(d, manifest, docstore_fingerprint, None)
        for name, size in manifest.get("files", {}).items():
            if os.path.getsize(d / name) != size:
                raise RalmError(
                    f"{d / name} does not match {MANIFEST_FILE} (an interrupted save?); "
                    "rebuild it with `ralm index build`"
                )
        try:
            model = bm25s.BM25.load(d, mmap=mmap, allow_pickle=False, load_corpus=False, show_progress=False)
        except (ValueError, OSError, KeyError) as exc:
            raise RalmError(
                f"{d}: bm25s cannot read the index ({exc}); rebuild it with `ralm index build`"
            ) from None
        if int(model.scores["num_docs"]) != manifest["count"]:
            raise RalmError(
                f"{d}: the index holds {model.scores['num_docs']} chunks, the manifest {manifest['count']}"
            )
        return cls(model, manifest)


def _candidates(s: np.ndarray, kp: int, n_excl: int) -> np.ndarray:
    """Ids of the kp best scores plus enough of the ids tied with the kp-th (lowest ids first)
    that, after dropping up to n_excl excluded ids, the best k are all there."""
    n = len(s)
    if kp >= n:
        return np.arange(n)
    t = s[np.argpartition(-s, kp - 1)[kp - 1]]
    above = np.flatnonzero(s > t)
    tied = np.flatnonzero(s == t)[: kp - len(above) + n_excl]
    return np.concatenate([above, tied])
