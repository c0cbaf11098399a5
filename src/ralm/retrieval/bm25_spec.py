"""A BM25 analysis spec as users write it (`--bm25 da`, `--lang nb`, `none`), turned into the
lang/stopwords/stemmer options of `BM25Searcher.build` and `BM25Searcher.matches`.

Free of numpy and bm25s, so a command can check its arguments before importing either.
"""

from __future__ import annotations

from ralm.errors import RalmError

__all__ = ["bm25_options"]


def bm25_options(spec: str) -> dict[str, str | None]:
    """BM25 analysis options of a spec: "none" (or "plain", "") -> no stopwords, no stemming
    (said explicitly, so that it overrides a DocStore's own language);
    "da" -> Danish stopwords and stemmer; "da:stop" -> stopwords only; "da:stem" -> stemmer only.

    Example: bm25_options("nb") -> {"lang": "nb", "stopwords": None, "stemmer": None}.
    """
    spec = spec.strip().lower()
    if spec in ("", "none", "plain"):
        return {"lang": None, "stopwords": "none", "stemmer": "none"}
    lang, _, part = spec.partition(":")
    if part == "":
        return {"lang": lang, "stopwords": None, "stemmer": None}
    if part == "stop":
        return {"lang": None, "stopwords": lang, "stemmer": None}
    if part == "stem":
        return {"lang": None, "stopwords": None, "stemmer": lang}
    raise RalmError(f"--bm25 {spec!r}: use none, LANG (stopwords + stemmer), LANG:stop or LANG:stem")
