"""Text analysis for sparse retrieval: normalise, split into words, drop stopwords, stem.

One `Analyzer` describes the whole pipeline, and BM25 runs the same one over chunks and queries:

1. Unicode NFKC normalisation and case folding (`normalize`);
2. runs of word characters, `TOKEN_PATTERN` (`\\w+` plus combining diacritics, so one-letter
   words such as Norwegian "å" and Russian "в" stay, and decomposed "på" stays one word);
3. stopword removal, matched on the normalised, *unstemmed* word (a list from bm25s, or your own);
4. Snowball stemming with PyStemmer (`Stemmer.Stemmer(algorithm)`), so Danish "pivottabeller",
   "pivottabellen" and "pivottabel" all become "pivottabel".

`Analyzer.resolve(lang=..., stopwords=..., stemmer=...)` builds one from what a user asks for:
`lang` ("da", "nb", "no", "nn", "sv", "de", "en", "nl", "fr", "es", "pt", "it", "ru", "fi",
"tr", a Snowball name such as "danish" or "norwegian", or a region-tagged code such as "nb-NO")
implies both a stopword list (where bm25s ships one; none otherwise, e.g. Finnish) and a stemmer;
an explicit `stopwords` / `stemmer` overrides it ("none" or [] disables). Two analysers are equal
when they produce the same tokens (same stopwords and stemmer; the `lang` label is not compared).

Stems are cached per algorithm (a dict of up to `STEM_CACHE_SIZE` words), so a corpus costs
about one Snowball call per distinct word, not per token. Stemmer calls are serialised with a lock:
PyStemmer objects must not be used from two threads at once.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import bm25s.stopwords as bm25s_stopwords
import Stemmer

from ralm.errors import RalmError

TOKEN_PATTERN = r"[\w\u0300-\u036f]+"
STEM_CACHE_SIZE = 1 << 20  # distinct words remembered per stemming algorithm

# Stopword lists bm25s ships, by language code/name (and bm25s's "en_plus").
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

# Language codes -> Snowball algorithm; every name in Stemmer.algorithms() maps to itself.
_LANG_CODES = {
    "da": "danish",
    "nb": "norwegian",
    "nn": "norwegian",
    "no": "norwegian",
    "sv": "swedish",
    "de": "german",
    "en": "english",
    "nl": "dutch",
    "fr": "french",
    "es": "spanish",
    "pt": "portuguese",
    "it": "italian",
    "ru": "russian",
    "fi": "finnish",
    "tr": "turkish",
}
ALGORITHMS: tuple[str, ...] = tuple(sorted(Stemmer.algorithms()))
LANGUAGES: dict[str, str] = {**{a: a for a in ALGORITHMS}, **_LANG_CODES}

_NONE = "none"


def pystemmer_version() -> str:
    """The installed PyStemmer's version (recorded in index manifests), or "unknown"."""
    try:
        return importlib.metadata.version("PyStemmer")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def normalize(text: str) -> str:
    """NFKC and case folding: what both chunks and queries go through before splitting."""
    return unicodedata.normalize("NFKC", text).casefold()


_split = re.compile(TOKEN_PATTERN).findall


def split_words(text: str) -> list[str]:
    """The tokens of `text` (before stopword removal): normalised runs of word characters."""
    return _split(normalize(text))


def resolve_stopwords(stopwords: str | Sequence[str] | None) -> list[str]:
    """A sorted, normalised stopword list from a language name/code that bm25s ships a list for,
    a list of words, or None / "none" (no stopwords)."""
    if stopwords is None:
        return []
    if isinstance(stopwords, str):
        key = stopwords.strip().lower()
        if key == _NONE:
            return []
        name = _LISTS.get(key)
        if name is None:
            raise RalmError(
                f"no stopword list for {stopwords!r}; use one of {', '.join(sorted(_LISTS))}, "
                "a list of words, or none"
            )
        words: Sequence[str] = getattr(bm25s_stopwords, name)
    else:
        words = stopwords
    return sorted({normalize(w) for w in words if isinstance(w, str) and w.strip()})


def resolve_lang(lang: str) -> tuple[str, str]:
    """(language key, Snowball algorithm) for a code or name: "da" -> ("da", "danish"),
    "Norwegian" -> ("norwegian", "norwegian"), "nb-NO" -> ("nb", "norwegian").

    RalmError naming the value and listing the choices for anything else."""
    key = lang.strip().lower() if isinstance(lang, str) else ""
    if key not in LANGUAGES:
        base = re.split(r"[-_]", key, maxsplit=1)[0]
        key = base if len(base) in (2, 3) and base in LANGUAGES else key
    if key not in LANGUAGES:
        raise RalmError(
            f"unknown language {lang!r}; use one of {', '.join(sorted(_LANG_CODES))} "
            f"or a Snowball stemmer name: {', '.join(ALGORITHMS)}"
        )
    return key, LANGUAGES[key]


def resolve_stemmer(stemmer: str | None) -> str | None:
    """A Snowball algorithm name from a stemmer/language name or code; None or "none" -> None."""
    if stemmer is None or stemmer.strip().lower() == _NONE:
        return None
    key = stemmer.strip().lower()
    if key not in LANGUAGES:
        raise RalmError(
            f"unknown stemmer {stemmer!r}; use none, a language code "
            f"({', '.join(sorted(_LANG_CODES))}) or a Snowball name: {', '.join(ALGORITHMS)}"
        )
    return LANGUAGES[key]


def lang_stopwords(lang: str) -> list[str]:
    """The stopwords `lang` implies: bm25s's list for it, or [] where bm25s has none."""
    key, algorithm = resolve_lang(lang)
    for k in (key, algorithm):
        if k in _LISTS:
            return resolve_stopwords(k)
    return []


class CachedStemmer:
    """One Snowball stemmer with its stems in a dict keyed by word (cleared when it passes
    `STEM_CACHE_SIZE` words); Snowball calls go through a lock."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._stemmer = Stemmer.Stemmer(algorithm, 0)  # PyStemmer's own cache off: ours is in front
        self._lock = threading.Lock()
        self._cache: dict[str, str] = {}

    def stem(self, word: str) -> str:
        """The stem of one (normalised) word."""
        return self.stem_words([word])[0]

    def stem_words(self, words: Sequence[str]) -> list[str]:
        """The stems of `words`, in order; Snowball runs once per word not yet in the cache."""
        cache = self._cache
        try:
            return list(map(cache.__getitem__, words))
        except KeyError:
            pass
        new = [w for w in dict.fromkeys(words) if w not in cache]
        if len(cache) + len(new) > STEM_CACHE_SIZE:
            cache.clear()
            new = list(dict.fromkeys(words))
        with self._lock:
            stems = self._stemmer.stemWords(new)
        cache.update(zip(new, stems, strict=True))
        try:
            return list(map(cache.__getitem__, words))
        except KeyError:  # another thread cleared the cache after our update
            with self._lock:
                return self._stemmer.stemWords(list(words))


@functools.cache
def cached_stemmer(algorithm: str) -> CachedStemmer:
    """The shared `CachedStemmer` of a Snowball algorithm."""
    return CachedStemmer(algorithm)


@dataclass(frozen=True, repr=False)
class Analyzer:
    """How text becomes index terms: normalise, split, drop `stopwords`, stem with `stemmer`.

    stopwords: normalised (NFKC + casefold), deduplicated and sorted on construction; matched
    against the unstemmed word. stemmer: a Snowball algorithm name (`Stemmer.algorithms()`) or
    None. lang: a label for messages and manifests only (not compared: two analysers that give
    the same tokens are equal). Build one with `Analyzer.resolve(...)` or `Analyzer.from_lang(...)`.
    """

    stopwords: tuple[str, ...] = ()
    stemmer: str | None = None
    lang: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.stopwords, str):
            raise RalmError(
                f"Analyzer(stopwords={self.stopwords!r}): give a list of words; "
                "Analyzer.resolve(stopwords=...) accepts a language name"
            )
        object.__setattr__(self, "stopwords", tuple(resolve_stopwords(list(self.stopwords))))
        if self.stemmer is not None and self.stemmer not in ALGORITHMS:
            raise RalmError(
                f"stemmer {self.stemmer!r} is not a Snowball algorithm of this PyStemmer "
                f"({pystemmer_version()}); one of {', '.join(ALGORITHMS)}"
            )

    # -- construction
    @classmethod
    def resolve(
        cls,
        lang: str | None = None,
        stopwords: str | Sequence[str] | None = None,
        stemmer: str | None = None,
    ) -> Analyzer:
        """The analyser for a language plus overrides.

        lang: a code or name (see `LANGUAGES`) setting both stopwords and stemmer, or None
        (neither). stopwords: None = what lang implies; "none" or [] = no stopwords; a language
        name/code = bm25s's list for it; a list = those words. stemmer: None = what lang implies;
        "none" = no stemming; a language code or Snowball name.
        """
        key: str | None = None
        words: list[str] = []
        algorithm: str | None = None
        if lang is not None:
            key, algorithm = resolve_lang(lang)
            words = lang_stopwords(key)
        if stopwords is not None:
            words = resolve_stopwords(stopwords)
        if stemmer is not None:
            algorithm = resolve_stemmer(stemmer)
        return cls(tuple(words), algorithm, key)

    @classmethod
    def from_lang(cls, lang: str) -> Analyzer:
        """The analyser a language implies: its bm25s stopword list (if any) and its stemmer."""
        return cls.resolve(lang=lang)

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> Analyzer:
        """The analyser recorded in an index manifest (version-1 manifests: no stemmer, no lang)."""
        return cls(tuple(manifest.get("stopwords") or ()), manifest.get("stemmer"), manifest.get("lang"))

    def to_manifest(self) -> dict[str, Any]:
        """The manifest fields that describe this analysis (inverse of `from_manifest`)."""
        return {
            "lang": self.lang,
            "stopwords": list(self.stopwords),
            "stemmer": self.stemmer,
            "pystemmer_version": pystemmer_version() if self.stemmer else None,
        }

    # -- use
    def stem_words(self, words: Sequence[str]) -> list[str]:
        """`words` stemmed (cached per word), or unchanged without a stemmer."""
        if self.stemmer is None:
            return list(words)
        return cached_stemmer(self.stemmer).stem_words(words)

    def analyze(self, text: str) -> list[str]:
        """The index terms of `text`: normalised words, stopwords dropped, then stemmed."""
        words = split_words(text)
        if self.stopwords:
            stop = self._stopset
            words = [w for w in words if w not in stop]
        return self.stem_words(words)

    __call__ = analyze

    @functools.cached_property
    def _stopset(self) -> frozenset[str]:
        return frozenset(self.stopwords)

    def __repr__(self) -> str:
        return f"Analyzer({self.describe()})"

    def describe(self) -> str:
        """A one-line summary, e.g. "da: 122 stopwords, danish stemmer"."""
        n = len(self.stopwords)
        words = "no stopwords" if n == 0 else f"{n} stopword" + ("" if n == 1 else "s")
        stem = f"{self.stemmer} stemmer" if self.stemmer else "no stemmer"
        return (f"{self.lang}: " if self.lang else "") + f"{words}, {stem}"
