"""The evaluated text's own article is never retrieved; the n-gram rule on hand-made corpora."""

from __future__ import annotations

import json

import numpy as np
import pytest
from frozen_ref import ARTICLES, EVAL_ARTICLE, eval_text

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.frozen.evaluate import EvalConfig, Retrieval, evaluate
from ralm.frozen.exclusion import (
    article_chunk_ids,
    article_titles,
    articles_by_title,
    overlapping_articles,
    word_ngrams,
)
from ralm.frozen.retrieve import DocTokens, open_retriever
from ralm.frozen.text import tokenize_eval_text


def _build(tmp_path, docs):
    from ralm.corpus.build import BuildConfig, build_docstore

    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"title": t, "text": x}) + "\n" for t, x in docs), encoding="utf-8")
    return build_docstore(
        [src], tmp_path / "store", BuildConfig(chunk_size=32), progress=False, log=lambda m: None
    )


def test_word_ngrams_are_normalised_word_runs():
    assert word_ngrams("The  River, runs!", 2) == {"the river", "river runs"}
    assert word_ngrams("one two", 3) == set()


def test_thirteen_shared_words_exclude_an_article_twelve_do_not(tmp_path):
    words = eval_text().split()
    quote13 = " ".join(words[20:33])  # 13 consecutive words of the evaluated text
    quote12 = " ".join(words[40:52])
    docs = [
        ("Quoter", f"A travel guide says: {quote13.upper()} and nothing more."),  # case does not matter
        ("Near miss", f"Another guide says: {quote12} and stops there."),
        *ARTICLES[:2],
    ]
    store = _build(tmp_path, docs)
    found = overlapping_articles(store, eval_text())
    assert article_titles(store, found) == ["Quoter"]
    assert overlapping_articles(store, eval_text(), n=12) == [0, 1]  # at n=12 the near miss counts
    assert overlapping_articles(store, "Bergen is a city", n=13) == [3]  # a 4-word text: all 4 words


def test_titles_and_chunk_ids(corpus):
    store = DocStore(corpus)
    river = articles_by_title(store, [EVAL_ARTICLE])
    assert river == [5]
    ids = article_chunk_ids(store, river)
    assert len(ids) >= 3  # the River article spans several 32-token chunks
    assert {store.get(int(i))["title"] for i in ids} == {EVAL_ARTICLE}
    assert {store.get(i)["title"] for i in range(len(store)) if i not in set(ids.tolist())} == {
        t for t, _ in ARTICLES[:5]
    }
    with pytest.raises(RalmError, match="no article titled 'Nowhere'"):
        articles_by_title(store, ["Nowhere"])


@pytest.mark.parametrize("mode", ["in-context", "replug"])
def test_the_evaluated_article_is_never_retrieved(corpus, llama, mode):
    store, bm25, _ = open_retriever(corpus=corpus, kind="bm25", lang="en")
    text = tokenize_eval_text(eval_text(), llama.tokenizer)
    arts = overlapping_articles(store, text.text)
    assert article_titles(store, arts) == [EVAL_ARTICLE]
    excluded = article_chunk_ids(store, arts)
    cfg = EvalConfig(mode=mode, max_length=32, stride=2, query_tokens=8, doc_tokens=12, k=3)
    res = evaluate(llama, text, cfg, Retrieval(bm25, DocTokens(store, llama.encode, 12), excluded))
    got = {i for d in res.block_docs for i in d}
    assert got and not got & set(excluded.tolist())
    # without the exclusion the River chunks are what BM25 finds first: the test has teeth
    leak = evaluate(llama, text, cfg, Retrieval(bm25, DocTokens(store, llama.encode, 12), None))
    firsts = [d[0] for d in leak.block_docs if d]
    assert np.mean([i in set(excluded.tolist()) for i in firsts]) > 0.8
