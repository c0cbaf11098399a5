"""Perplexity of the frozen LM against naive loops: no retrieval, In-Context RALM, REPLUG, reranking."""

from __future__ import annotations

import math

import numpy as np
import pytest
from frozen_ref import ARTICLES, StubRetriever, StubStore, eval_text, grid, naive_logprobs

from ralm.errors import RalmError
from ralm.frozen.evaluate import EvalConfig, Retrieval, evaluate
from ralm.frozen.retrieve import DocTokens
from ralm.frozen.text import tokenize_eval_text

DOCS = [(t, x) for t, x in ARTICLES[:3]]  # Oslo, Bergen, Albedo


def _text(lm, max_tokens=None):
    return tokenize_eval_text(eval_text(), lm.tokenizer, max_tokens)


def _retrieval(lm, table, doc_tokens):
    ret = StubRetriever(table)
    return ret, Retrieval(ret, DocTokens(StubStore(DOCS), lm.encode, doc_tokens))


def _doc(lm, i, doc_tokens):
    """Document i as the LM sees it, written out: "title\\ntext" cut, then the "\\n\\n" separator."""
    sep = lm.encode(["\n\n"])[0]
    t, x = DOCS[i]
    return lm.encode([f"{t}\n{x}"])[0][: doc_tokens - len(sep)] + sep


@pytest.mark.parametrize("max_length, stride", [(16, 4), (16, 16), (12, 5), (32, 7), (128, 8), (128, 128)])
def test_none_equals_naive_sliding_window(llama, max_length, stride):
    text = _text(llama)
    n = len(text)
    assert n == len(eval_text().split()) == 84  # word vocabulary: one token per word
    res = evaluate(llama, text, EvalConfig(mode="none", max_length=max_length, stride=stride))
    ref = naive_logprobs(llama.model, text.ids, max_length, stride)
    assert res.tokens == n - 1 and res.words == 84
    np.testing.assert_allclose(res.per_token[1:], ref[1:], rtol=0, atol=2e-5)
    assert res.nll == pytest.approx(-ref[1:].sum(), abs=1e-4)
    assert res.token_ppl == pytest.approx(math.exp(-ref[1:].sum() / (n - 1)), rel=1e-5)
    assert res.word_ppl == pytest.approx(math.exp(-ref[1:].sum() / 84), rel=1e-5)


@pytest.mark.parametrize("max_length, stride", [(24, 6), (24, 24), (96, 16)])
def test_none_equals_naive_on_gpt2(gpt2, max_length, stride):
    text = _text(gpt2, max_tokens=150)
    res = evaluate(gpt2, text, EvalConfig(mode="none", max_length=max_length, stride=stride))
    ref = naive_logprobs(gpt2.model, text.ids, max_length, stride)
    np.testing.assert_allclose(res.per_token[1:], ref[1:], rtol=0, atol=2e-5)
    assert res.words == len(text.text.split())


def test_batching_does_not_change_scores(llama):
    text = _text(llama)
    one = evaluate(llama, text, EvalConfig(mode="none", max_length=16, stride=3, batch_tokens=1))
    many = evaluate(llama, text, EvalConfig(mode="none", max_length=16, stride=3, batch_tokens=10_000))
    np.testing.assert_allclose(one.per_token[1:], many.per_token[1:], rtol=0, atol=1e-5)


def test_in_context_with_no_document_equals_no_retrieval(llama):
    text = _text(llama)
    ret, retrieval = _retrieval(llama, lambda q: ([-1], [0.0]), doc_tokens=8)  # finds nothing
    cfg = dict(max_length=20, stride=4, doc_tokens=8)  # the document budget is unused
    ic = evaluate(llama, text, EvalConfig(mode="in-context", **cfg), retrieval)
    none = evaluate(llama, text, EvalConfig(mode="none", max_length=20, stride=4))
    assert len(ret.queries) == ic.blocks - 1 and ic.blocks_with_docs == 0
    np.testing.assert_allclose(ic.per_token[1:], none.per_token[1:], rtol=0, atol=1e-5)
    assert ic.nll == pytest.approx(none.nll, abs=1e-4)


@pytest.mark.parametrize(
    "fixture, max_length, stride, doc_tokens", [("llama", 32, 4, 12), ("gpt2", 48, 8, 20)]
)
def test_in_context_equals_naive_loop_with_a_document_per_block(
    request, fixture, max_length, stride, doc_tokens
):
    lm = request.getfixturevalue(fixture)
    text = _text(lm, max_tokens=120)
    n = len(text)
    ret, retrieval = _retrieval(lm, lambda q: ([q % 3], [1.0]), doc_tokens)  # query q gets document q % 3
    cfg = EvalConfig(
        mode="in-context", max_length=max_length, stride=stride, query_tokens=6, doc_tokens=doc_tokens
    )
    res = evaluate(lm, text, cfg, retrieval)
    starts = [s for s, _ in grid(n, max_length, stride, split_first=True)]
    docs = {s: ([] if j == 0 else _doc(lm, (j - 1) % 3, doc_tokens)) for j, s in enumerate(starts)}
    ref = naive_logprobs(lm.model, text.ids, max_length, stride, docs.__getitem__, split_first=True)
    np.testing.assert_allclose(res.per_token[1:], ref[1:], rtol=0, atol=2e-5)
    assert res.block_docs == [[]] + [[(j - 1) % 3] for j in range(1, len(starts))]
    assert ret.queries == [text.span(max(0, s - 6), s) for s in starts[1:]]
    if fixture == "gpt2":
        assert len(lm.encode(["\n\n"])[0]) >= 1  # the separator is really there on byte-level BPE


def test_query_tokens_and_served_tokens_are_exact(llama):
    """Words w0..w63 are one token each: query and targets of every block, written out."""
    from frozen_ref import GRID_WORDS

    text = tokenize_eval_text(" ".join(GRID_WORDS[:40]), llama.tokenizer)
    ret, retrieval = _retrieval(llama, lambda q: ([0], [1.0]), doc_tokens=4)
    cfg = EvalConfig(mode="in-context", max_length=16, stride=5, query_tokens=7, doc_tokens=4)
    res = evaluate(llama, text, cfg, retrieval)
    blocks = [(b.start, b.end) for b in res.block_list]
    assert blocks == [(0, 5), (5, 10), (10, 15), (15, 16), (16, 21), (21, 26), (26, 31), (31, 36), (36, 40)]
    assert ret.queries == [
        "w0 w1 w2 w3 w4",  # before block 5..9: only 5 tokens exist
        "w3 w4 w5 w6 w7 w8 w9",  # tokens 3..9 serve block 10..14
        "w8 w9 w10 w11 w12 w13 w14",
        "w9 w10 w11 w12 w13 w14 w15",  # the first window's last (short) block
        "w14 w15 w16 w17 w18 w19 w20",
        "w19 w20 w21 w22 w23 w24 w25",
        "w24 w25 w26 w27 w28 w29 w30",
        "w29 w30 w31 w32 w33 w34 w35",
    ]
    assert res.block_docs[0] == [] and all(d == [0] for d in res.block_docs[1:])


def test_replug_mixture_equals_hand_computation(llama):
    text = _text(llama)
    max_length, stride, doc_tokens, temp = 32, 6, 10, 0.5
    ret, retrieval = _retrieval(llama, lambda q: ([0, 1], [2.0, 0.5]), doc_tokens)
    cfg = EvalConfig(
        mode="replug", max_length=max_length, stride=stride, k=2, temperature=temp, doc_tokens=doc_tokens
    )
    res = evaluate(llama, text, cfg, retrieval)
    n = len(text)
    first_block_end = stride
    lp = [
        naive_logprobs(
            llama.model, text.ids, max_length, stride, lambda s, i=i: _doc(llama, i, doc_tokens), True
        )
        for i in (0, 1)
    ]
    plain = naive_logprobs(llama.model, text.ids, max_length, stride)
    w0 = math.exp(2.0 / temp) / (math.exp(2.0 / temp) + math.exp(0.5 / temp))  # softmax(s / T), by hand
    for t in range(1, n):
        if t < first_block_end:  # the first block has no query: plain LM
            assert res.per_token[t] == pytest.approx(plain[t], abs=2e-5)
        else:
            want = math.log(w0 * math.exp(lp[0][t]) + (1 - w0) * math.exp(lp[1][t]))
            assert res.per_token[t] == pytest.approx(want, abs=2e-5), t
    assert all(d == [0, 1] for d in res.block_docs[1:])


def test_replug_with_one_document_equals_in_context(llama):
    text = _text(llama)
    cfg = dict(max_length=32, stride=4, doc_tokens=10)
    _, r1 = _retrieval(llama, lambda q: ([q % 3, 0], [1.0, 0.0]), 10)
    _, r2 = _retrieval(llama, lambda q: ([q % 3, 0], [1.0, 0.0]), 10)
    rep = evaluate(llama, text, EvalConfig(mode="replug", k=1, **cfg), r1)
    ic = evaluate(llama, text, EvalConfig(mode="in-context", **cfg), r2)
    np.testing.assert_allclose(rep.per_token[1:], ic.per_token[1:], rtol=0, atol=1e-5)


def test_rerank_keeps_the_document_the_lm_likes_best(llama):
    text = _text(llama)
    n = len(text)
    max_length, stride, doc_tokens, rt = 40, 5, 12, 4
    _, retrieval = _retrieval(llama, lambda q: ([0, 1, 2], [3.0, 2.0, 1.0]), doc_tokens)
    cfg = EvalConfig(
        mode="in-context",
        max_length=max_length,
        stride=stride,
        doc_tokens=doc_tokens,
        rerank=3,
        rerank_tokens=rt,
    )
    res = evaluate(llama, text, cfg, retrieval)
    docs = [_doc(llama, i, doc_tokens) for i in range(3)]
    full = [naive_logprobs(llama.model, text.ids, max_length, stride, lambda s, d=d: d, True) for d in docs]
    import torch

    chosen = []
    for j, (start, end) in enumerate(grid(n, max_length, stride, split_first=True)):
        if j == 0:
            continue
        cs = [max(0, end - 1 - (max_length - len(d))) for d in docs]
        lo = max(start - rt, max(cs) + 1)
        scores = []
        for d, c in zip(docs, cs, strict=True):  # log p(tokens lo..start-1 | doc + context), one call each
            x = torch.tensor([d + list(text.ids[c : end - 1])])
            with torch.inference_mode():
                logp = torch.log_softmax(llama.model(x).logits[0].double(), -1)
            scores.append(sum(float(logp[len(d) + t - 1 - c, text.ids[t]]) for t in range(lo, start)))
        best = int(np.argmax(scores))
        chosen.append(best)
        assert res.block_docs[j] == [best]
        np.testing.assert_allclose(
            res.per_token[max(start, 1) : end], full[best][max(start, 1) : end], atol=2e-5
        )
    assert len(set(chosen)) > 1  # the LM's choice is not always the retriever's top-1


def test_bad_options_are_one_line_errors(llama):
    text = _text(llama)
    _, retrieval = _retrieval(llama, lambda q: ([0], [1.0]), 8)
    short = tokenize_eval_text("Oslo is the capital", llama.tokenizer)
    with pytest.raises(RalmError, match="not more than one stride"):
        evaluate(
            llama, short, EvalConfig(mode="in-context", stride=4, max_length=16, doc_tokens=8), retrieval
        )
    with pytest.raises(RalmError, match="--doc-tokens 13 leaves no room"):
        evaluate(
            llama, text, EvalConfig(mode="in-context", stride=4, max_length=16, doc_tokens=13), retrieval
        )
    with pytest.raises(RalmError, match="rerank"):
        evaluate(
            llama, text, EvalConfig(mode="replug", stride=4, max_length=32, doc_tokens=8, rerank=2), retrieval
        )
    with pytest.raises(RalmError, match="needs a retriever"):
        evaluate(llama, text, EvalConfig(mode="in-context", stride=4, max_length=32, doc_tokens=8))
    with pytest.raises(RalmError, match="the LM has 128 positions"):
        evaluate(llama, text, EvalConfig(mode="none", max_length=256))
    with pytest.raises(RalmError, match="empty text"):
        tokenize_eval_text(" \n ", llama.tokenizer)
