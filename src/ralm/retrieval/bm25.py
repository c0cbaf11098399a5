"""BM25 over a DocStore with bm25s: the sparse baseline next to the dense retriever.

Scoring is bm25s's "lucene" variant with its defaults k1=1.5, b=0.75:
idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)), tf part = tf / (tf + k1 * (1 - b + b * |d| / avgdl)).
Each chunk is indexed as its article title followed by its text (`include_title=False` for
the text alone), read from the DocStore in batches; `BM25Searcher.from_texts` indexes a list of
strings instead (e.g. chunks as a tower tokenizer decodes them).

Analysis (`ralm.retrieval.analysis.Analyzer`, the same for chunks and queries): Unicode NFKC
normalisation, case folding, runs of word characters (`\\w+`, plus combining diacritics), stopword
removal on the unstemmed word, then Snowball stemming (PyStemmer). bm25s's default pattern
`\\b\\w\\w+\\b` already matches æøå and Cyrillic, but it drops one-letter words (Norwegian "å",
"ø", "i"; Russian "в", "с") and splits decomposed (NFD) text: "på" written as "pa" + U+030A
became "pa". By default neither stopwords nor stemming (the corpus may be in any language);
`lang="da"` (or "nb"/"nn"/"no", "sv", "de", "en", "fi", ..., any Snowball name) sets both
bm25s's stopword list for that language (none where bm25s has no list) and the Snowball stemmer,
so "pivottabel" finds "pivottabeller". `stopwords=` ("en", a list, or "none") and `stemmer=`
("danish", "da", or "none") override what `lang` implies. The analysis is recorded in the manifest
and queries always go through the one the index was built with (`retriever.analyzer`;
`retriever.matches(lang=..., stopwords=..., stemmer=...)` or `== Analyzer.resolve(...)` tells
whether an index suits a request, `retriever.describe()` says what it uses).

Search is exhaustive (every chunk gets a score), so the k results are exact, ties go to the
lower id, and excluded ids (REALM's trivial retrievals) never come back; the exclusion and
validation rules are those of `DenseIndex.search` (`prepare_exclude`, `filter_excluded`).

Saved as bm25s's own files (npy arrays written without pickle, vocab and params as JSON) plus
`bm25.json`, a manifest with the DocStore fingerprint, the analysis and each file's size and
XXH3-128 digest (`files`, ralm.integrity; format version 3). `load` checks the sizes, then the
digests (the files are hashed, then bm25s reads them again from the page cache: they are a small
part of an index); with mmap=True only the sizes (`ralm index verify` hashes them). Version-2
manifests (sizes only) load with the size check; version-1 ones, from before stemming, load as
"no stemmer". Left out: building without the tokenised corpus in memory (bm25s holds all token
ids while it builds the sparse matrix).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from bm25s.tokenization import Tokenizer

from ralm.atomic import move_into_place, temp_sibling
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.integrity import DIGEST, digest, records
from ralm.retrieval.analysis import TOKEN_PATTERN, Analyzer, normalize, resolve_stopwords, split_words
from ralm.retrieval.base import ExcludeIds, SearchResult, check_queries
from ralm.retrieval.exclusion import filter_excluded, prepare_exclude
from ralm.retrieval.index.io import IndexFileError, check_fingerprints, damaged, read_manifest

__all__ = [
    "FORMAT_VERSION",
    "TOKEN_PATTERN",
    "Analyzer",
    "BM25Searcher",
    "normalize",
    "resolve_stopwords",
    "split_words",
]

MANIFEST_FILE = "bm25.json"
FORMAT = "ralm-bm25"
FORMAT_VERSION = 3  # 2: Snowball stemming and `lang`, `stemmer`, `pystemmer_version` in the manifest;
# 3: `files` maps each file to {"size", "xxh3_128"} (was: to its size)
BM25S_FILES = (
    "data.csc.index.npy",
    "indices.csc.index.npy",
    "indptr.csc.index.npy",
    "vocab.index.json",
    "params.index.json",
)


class BM25Searcher:
    """BM25 search over the chunks of one DocStore (ids = chunk ids); a `Searcher` (ralm.retrieval.base).

    `BM25Searcher.build(store, lang="da")` indexes a DocStore; `search_text(queries, k,
    exclude_ids)` ranks. `analyzer` is the text analysis of the index (queries go through it too).
    """

    def __init__(self, model: bm25s.BM25, manifest: dict[str, Any]) -> None:
        self.model = model
        self.manifest = manifest
        self.analyzer: Analyzer = Analyzer.from_manifest(manifest)
        self.stopwords: list[str] = list(self.analyzer.stopwords)
        self.count: int = int(model.scores["num_docs"])

    def __len__(self) -> int:
        return self.count

    @property
    def docstore_fingerprint(self) -> str | None:
        """The DocStore the index was built from (None for `from_texts` without one)."""
        return self.manifest.get("docstore_fingerprint")

    @property
    def stemmer(self) -> str | None:
        """The Snowball algorithm of the index, or None (no stemming)."""
        return self.analyzer.stemmer

    def describe(self) -> str:
        """The index's analysis in one line, e.g. "da: 122 stopwords, danish stemmer"."""
        return self.analyzer.describe()

    def matches(
        self,
        lang: str | None = None,
        stopwords: str | Sequence[str] | None = None,
        stemmer: str | None = None,
        analyzer: Analyzer | None = None,
    ) -> bool:
        """Whether the index's analysis gives the same terms as the one requested (the options
        of `build`; all None = plain: no stopwords, no stemming). RalmError for unknown values."""
        return _pick_analyzer(analyzer, lang, stopwords, stemmer) == self.analyzer

    def check_analyzer(self, requested: Analyzer) -> None:
        """RalmError unless `requested` gives the same terms as the index's analysis."""
        if requested != self.analyzer:
            raise RalmError(
                f"the BM25 index was built with {self.describe()}, not {requested.describe()}; "
                "rebuild it with those settings, or leave them out to use the index's own"
            )

    def __repr__(self) -> str:
        return (
            f"BM25Searcher(count={self.count}, vocab={len(self.model.vocab_dict)}, "
            f"analysis={self.describe()!r})"
        )

    # -- build
    @classmethod
    def build(
        cls,
        store: DocStore,
        *,
        lang: str | None = None,
        stopwords: str | Sequence[str] | None = None,
        stemmer: str | None = None,
        analyzer: Analyzer | None = None,
        include_title: bool = True,
        k1: float = 1.5,
        b: float = 0.75,
        batch_size: int = 4096,
    ) -> BM25Searcher:
        """Index every chunk of `store` ("title\\ntext", or the text alone).

        The analysis is `Analyzer.resolve(lang, stopwords, stemmer)` (explicit stopwords/stemmer
        override what lang implies, "none" disables), or a ready `analyzer` (then
        lang/stopwords/stemmer must be left out). With none of them given it is the DocStore's own
        language (`store_analyzer`): `ralm corpus build --lang da` gives Danish stopwords and stemming.
        """
        n = len(store)
        if n == 0:
            raise RalmError(f"{store.root}: the DocStore has no chunks to index")
        if analyzer is None and lang is None and stopwords is None and stemmer is None:
            analyzer = store_analyzer(store)
        analyzer = _pick_analyzer(analyzer, lang, stopwords, stemmer)
        columns = ["title", "text"] if include_title else ["text"]
        batches = (
            [f"{t}\n{x}" for t, x in zip(batch["title"], batch["text"], strict=True)]
            if include_title
            else batch["text"]
            for batch in store.iter_batches(batch_size, columns=columns)
        )
        model, count = _index(batches, analyzer, k1, b)
        if count != n:
            raise RalmError(f"{store.root}: read {count} chunks but the manifest says {n}; rebuild it")
        return cls(model, _manifest(n, store.fingerprint, analyzer, k1, b, include_title))

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str],
        *,
        docstore_fingerprint: str | None = None,
        lang: str | None = None,
        stopwords: str | Sequence[str] | None = None,
        stemmer: str | None = None,
        analyzer: Analyzer | None = None,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> BM25Searcher:
        """Index a list of texts (ids = positions), e.g. chunks as a tokenizer decodes them.

        The analysis options are those of `build`; `docstore_fingerprint` (the DocStore the texts
        come from, if any) is recorded in the manifest for `load` to check.
        """
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise RalmError("from_texts: give a list of strings")
        if len(texts) == 0:
            raise RalmError("from_texts: no texts to index")
        analyzer = _pick_analyzer(analyzer, lang, stopwords, stemmer)
        model, count = _index([list(texts)], analyzer, k1, b)
        return cls(model, _manifest(count, docstore_fingerprint, analyzer, k1, b, None))

    # -- search
    def tokenize_query(self, query: str) -> list[int]:
        """Vocabulary ids of the query's terms (the index's analysis; unseen terms dropped)."""
        vocab = self.model.vocab_dict
        return [vocab[t] for t in self.analyzer.analyze(query) if t in vocab]

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
        tmp = temp_sibling(d / "bm25")
        try:
            self.model.save(tmp, corpus=None, allow_pickle=False, show_progress=False)
            manifest = {**self.manifest, "version": FORMAT_VERSION, "files": records(tmp, BM25S_FILES)}
            (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
            for name in (*BM25S_FILES, MANIFEST_FILE):
                move_into_place(tmp / name, d / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.manifest = manifest
        return d

    @classmethod
    def load(
        cls, directory: str | os.PathLike, *, docstore_fingerprint: str | None = None, mmap: bool = False
    ) -> BM25Searcher:
        """Read a saved BM25 index; with a fingerprint given, check it was built from that DocStore.

        The files are checked against the sizes and digests in bm25.json (sizes only with mmap).
        """
        d = Path(directory)
        mpath = d / MANIFEST_FILE
        for p in (mpath, *(d / f for f in BM25S_FILES)):
            if not p.is_file():
                raise RalmError(f"{p}: no such file; build the BM25 index with `ralm index build`")
        manifest = read_manifest(mpath, FORMAT, FORMAT_VERSION, "BM25 index")
        check_fingerprints(d, manifest, docstore_fingerprint, None)
        recorded = recorded_files(manifest)
        for name, rec in recorded.items():
            size = os.path.getsize(d / name) if (d / name).is_file() else 0
            if size != int(rec["size"]):
                raise IndexFileError(
                    f"{d / name}: {size} bytes, {MANIFEST_FILE} says {int(rec['size'])} "
                    "(truncated, or an interrupted save)"
                )
        if not mmap:
            for name, rec in recorded.items():
                if DIGEST in rec and digest(d / name) != rec[DIGEST]:
                    raise IndexFileError(damaged(d / name))
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


def recorded_files(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{file: {"size", "xxh3_128"}} from a bm25.json; {file: {"size"}} from a version-2 one."""
    return {
        name: dict(rec) if isinstance(rec, dict) else {"size": int(rec)}
        for name, rec in manifest.get("files", {}).items()
    }


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


def store_analyzer(store: DocStore) -> Analyzer:
    """The analysis a DocStore's recorded language implies (stopwords + Snowball stemmer); plain
    (neither) when it records none, or one Snowball does not know."""
    if store.lang is None:
        return Analyzer.resolve()
    try:
        return Analyzer.resolve(lang=store.lang)
    except RalmError:
        return Analyzer.resolve()


def _pick_analyzer(
    analyzer: Analyzer | None, lang: str | None, stopwords: str | Sequence[str] | None, stemmer: str | None
) -> Analyzer:
    """`analyzer` as given, or the one lang/stopwords/stemmer resolve to (not both)."""
    if analyzer is None:
        return Analyzer.resolve(lang=lang, stopwords=stopwords, stemmer=stemmer)
    if lang is not None or stopwords is not None or stemmer is not None:
        raise RalmError("give either analyzer or lang/stopwords/stemmer, not both")
    return analyzer


def _index(
    batches: Iterable[Sequence[str]], analyzer: Analyzer, k1: float, b: float
) -> tuple[bm25s.BM25, int]:
    """A lucene bm25s model over the texts of `batches` (analysed), and how many texts it holds."""
    # The analyser does all of it (stopwords, stemming): bm25s only maps terms to ids.
    tokenizer = Tokenizer(lower=False, splitter=analyzer.analyze, stopwords=[])
    corpus_ids: list[list[int]] = []
    for texts in batches:
        corpus_ids.extend(tokenizer.streaming_tokenize(texts, update_vocab=True, allow_empty=True))
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index((corpus_ids, dict(tokenizer.get_vocab_dict())), show_progress=False)
    return model, len(corpus_ids)


def _manifest(
    n: int,
    docstore_fingerprint: str | None,
    analyzer: Analyzer,
    k1: float,
    b: float,
    include_title: bool | None,
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "count": n,
        "docstore_fingerprint": docstore_fingerprint,
        "method": "lucene",
        "k1": k1,
        "b": b,
        "include_title": include_title,
        "normalization": "NFKC+casefold",
        "token_pattern": TOKEN_PATTERN,
        **analyzer.to_manifest(),
        "bm25s_version": getattr(bm25s, "__version__", "unknown"),
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
