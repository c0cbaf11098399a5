"""Which corpus articles hold the evaluated text: they are never retrieved.

The rule (`overlapping_articles`, "auto"): an article of the DocStore is excluded when one of its
chunks shares a word n-gram (n = 13 by default, the contamination test of GPT-3; words = runs
of word characters after NFKC and case folding, as BM25 analyses text) with the evaluated text;
then every chunk of that article is excluded, for every query. A corpus built from the evaluated
text itself loses the articles it came from (their other chunks included: the neighbouring
paragraphs of the evaluated passage are as much a leak), and nothing else unless another article
quotes 13 words of it verbatim. Articles named by title (`--exclude-article`) are excluded too,
like In-Context RALM's forbidden titles. The check reads the corpus once (chunk texts only).
A text of fewer than n words is matched on all its words (n = its word count).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.analysis import split_words

DEFAULT_NGRAM = 13

__all__ = [
    "DEFAULT_NGRAM",
    "article_chunk_ids",
    "article_titles",
    "articles_by_title",
    "overlapping_articles",
    "word_ngrams",
]


def word_ngrams(text: str, n: int) -> set[str]:
    """The word n-grams of `text`, each as its words joined by single spaces."""
    words = split_words(text)
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def overlapping_articles(
    store: DocStore, text: str, n: int = DEFAULT_NGRAM, batch_size: int = 1024
) -> list[int]:
    """Sorted article indices with a chunk sharing a word n-gram with `text` (see the docstring)."""
    if n < 1:
        raise RalmError(f"overlap n-gram length {n}: must be at least 1")
    n = min(n, max(1, len(split_words(text))))
    grams = word_ngrams(text, n)
    if not grams:
        return []
    found: set[int] = set()
    for batch in store.iter_batches(batch_size, columns=["article", "text"]):
        for art, chunk in zip(batch["article"], batch["text"], strict=True):
            if art in found:
                continue
            words = split_words(chunk)
            if any(" ".join(words[i : i + n]) in grams for i in range(len(words) - n + 1)):
                found.add(int(art))
    return sorted(found)


def articles_by_title(store: DocStore, titles: Sequence[str]) -> list[int]:
    """Article indices of the given titles (exact match); RalmError naming a title not found."""
    if not titles:
        return []
    table = store.articles(["article", "title"]).to_pydict()
    index: dict[str, list[int]] = {}
    for a, t in zip(table["article"], table["title"], strict=True):
        index.setdefault(t, []).append(int(a))
    out: list[int] = []
    for t in titles:
        if t not in index:
            raise RalmError(f"{store.root}: no article titled {t!r}; check --exclude-article")
        out.extend(index[t])
    return sorted(set(out))


def article_chunk_ids(store: DocStore, articles: Iterable[int]) -> np.ndarray:
    """(E,) int64 ids of every chunk of the given articles, sorted."""
    arts = sorted(set(int(a) for a in articles))
    if not arts:
        return np.empty(0, dtype=np.int64)
    table = store.articles(["article", "first_chunk", "n_chunks"]).to_pydict()
    span = {
        int(a): (int(f), int(c))
        for a, f, c in zip(table["article"], table["first_chunk"], table["n_chunks"], strict=True)
    }
    parts = [np.arange(span[a][0], span[a][0] + span[a][1], dtype=np.int64) for a in arts if a in span]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def article_titles(store: DocStore, articles: Iterable[int]) -> list[str]:
    """Titles of the given article indices, in the order given."""
    table = store.articles(["article", "title"]).to_pydict()
    title = dict(zip(table["article"], table["title"], strict=True))
    return [str(title.get(int(a), "")) for a in articles]
