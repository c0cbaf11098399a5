import dataclasses
import math

import pytest
import torch

from ralm.errors import RalmError
from ralm.formats.types import QAExample
from ralm.tasks.extractive_qa import best_span, decode_predictions, qa_features, span_log_probs


def brute_force(start, end, allowed, max_answer_len):
    best = (-1, -1, float("-inf"))
    L = len(start)
    for s in range(L):
        for e in range(s, min(L, s + max_answer_len)):
            if allowed[s] and allowed[e] and float(start[s] + end[e]) > best[2]:
                best = (s, e, float(start[s] + end[e]))
    return best


def test_best_span_docstring_example():
    ok = torch.ones(3, dtype=torch.bool)
    assert best_span(torch.tensor([0.0, 5, 0]), torch.tensor([0.0, 0, 3]), ok) == (1, 2, 8.0)
    # end may not come before start: the best end for start 1 is 1 itself here
    assert best_span(torch.tensor([0.0, 5, 0]), torch.tensor([9.0, 1, 0]), ok) == (0, 0, 9.0)


def test_best_span_matches_brute_force():
    n_none = 0
    for seed in range(300):
        g = torch.Generator().manual_seed(seed)
        L = int(torch.randint(1, 40, (1,), generator=g))
        max_len = [1, 2, 3, 7, 30][seed % 5]
        start = torch.randn(L, generator=g)
        end = torch.randn(L, generator=g)
        allowed = torch.rand(L, generator=g) < [0.1, 0.5, 0.9][seed % 3]
        got = best_span(start, end, allowed, max_answer_len=max_len)
        want = brute_force(start.tolist(), end.tolist(), allowed.tolist(), max_len)
        assert got[:2] == want[:2], (seed, got, want)
        if want[0] >= 0:
            assert got[2] == pytest.approx(want[2])
        else:
            assert got[2] == float("-inf")
        n_none += want[0] < 0
    assert 0 < n_none < 100  # the random masks include examples with no allowed position


def test_best_span_with_minus_inf_logits_stays_allowed():
    start = torch.tensor([float("-inf")] * 4)
    allowed = torch.tensor([False, False, True, True])
    assert best_span(start, torch.zeros(4), allowed)[:2] == (2, 2)
    assert best_span(torch.zeros(4), torch.zeros(4), torch.zeros(4, dtype=torch.bool)) == (
        -1,
        -1,
        float("-inf"),
    )


FILLER = "Sentence number {k} talks about something unrelated to the question."
ANSWER = "Ada Lovelace"


def make_examples():
    parts = [FILLER.format(k=k) for k in range(12)]
    parts.insert(6, f"{ANSWER} wrote the first published program for the Analytical Engine.")
    long_ctx = " ".join(parts)
    short_ctx = "Tromsø er en by i Nord-Norge."
    return [
        QAExample("long", "Who wrote the first program?", long_ctx, [ANSWER], [long_ctx.index(ANSWER)]),
        QAExample("short", "Hvilken by?", short_ctx, ["Tromsø"], [0]),
    ]


def test_qa_features_windows_and_gold_positions(bert_tokenizer):
    examples = make_examples()
    feats = qa_features(bert_tokenizer, examples, max_length=48, doc_stride=16, max_query_length=16)
    F, L = feats.input_ids.shape
    assert feats.attention_mask.shape == feats.token_type_ids.shape == (F, L)
    assert L <= 48 and len(feats.offsets) == F and all(len(o) == L for o in feats.offsets)
    idx = feats.example_index.tolist()
    assert idx == sorted(idx) and idx.count(1) == 1
    long_windows = [f for f in range(F) if idx[f] == 0]
    assert len(long_windows) >= 5
    inside = 0
    for f in range(F):
        ex = examples[idx[f]]
        offs = feats.offsets[f]
        ctx = [o for o in offs if o is not None]
        s, e = int(feats.start_positions[f]), int(feats.end_positions[f])
        a0 = ex.answer_starts[0]
        covered = ctx[0][0] <= a0 and ctx[-1][1] >= a0 + len(ex.answers[0])
        if covered:
            inside += 1
            assert ex.context[offs[s][0] : offs[e][1]] == ex.answers[0]
        else:
            assert (s, e) == (0, 0)
    assert inside >= 2  # the short example and at least one window of the long one
    assert any(int(feats.start_positions[f]) == 0 for f in long_windows)  # and some windows miss it
    # consecutive windows of the long context share exactly doc_stride tokens
    for a, b in zip(long_windows, long_windows[1:], strict=False):
        ctx_a = [o for o in feats.offsets[a] if o is not None]
        ctx_b = [o for o in feats.offsets[b] if o is not None]
        assert ctx_a[-16:] == ctx_b[:16]


def test_qa_features_truncates_the_question(bert_tokenizer):
    q = " ".join(["why"] * 40) + "?"
    ex = QAExample("q", q, "Because it is so.", ["so"], [14])
    feats = qa_features(bert_tokenizer, [ex], max_length=48, doc_stride=8, max_query_length=8)
    n_first_segment = int(((feats.token_type_ids[0] == 0) & (feats.attention_mask[0] == 1)).sum())
    assert n_first_segment == 8 + 2  # [CLS] + 8 question tokens + [SEP]
    s, e = int(feats.start_positions[0]), int(feats.end_positions[0])
    assert ex.context[feats.offsets[0][s][0] : feats.offsets[0][e][1]] == "so"


def test_qa_features_rejects_stride_without_room(bert_tokenizer):
    with pytest.raises(RalmError, match="doc_stride"):
        qa_features(bert_tokenizer, make_examples(), max_length=32, doc_stride=16, max_query_length=16)


def test_decode_predictions_returns_gold_text(bert_tokenizer):
    examples = make_examples()
    feats = qa_features(bert_tokenizer, examples, max_length=48, doc_stride=16, max_query_length=16)
    F, L = feats.input_ids.shape
    start = torch.zeros(F, L)
    end = torch.zeros(F, L)
    f = next(f for f in range(F) if feats.example_index[f] == 0 and feats.start_positions[f] > 0)
    start[f, feats.start_positions[f]] = 10.0
    end[f, feats.end_positions[f]] = 10.0
    # the question and [CLS] score highest but are never part of an answer
    start[:, 0] = end[:, 0] = 100.0
    preds = decode_predictions(feats, examples, start, end)
    assert preds["long"] == ANSWER
    # all-equal context scores: the first context token of the first window wins the tie
    assert preds["short"] == "Tr"  # "Tromsø" = tr ##oms ##ø
    # an example whose windows hold no context token predicts ""
    no_ctx = [row if feats.example_index[i] == 0 else [None] * L for i, row in enumerate(feats.offsets)]
    preds = decode_predictions(dataclasses.replace(feats, offsets=no_ctx), examples, start, end)
    assert preds == {"long": ANSWER, "short": ""}


def test_span_log_probs_normalise_over_allowed_positions():
    g = torch.Generator().manual_seed(0)
    start, end = torch.randn(3, 6, generator=g), torch.randn(3, 6, generator=g)
    allowed = torch.tensor([[0, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    lp_s, lp_e = span_log_probs(start, end, allowed)
    for lp, logits in ((lp_s, start), (lp_e, end)):
        assert lp.shape == (3, 6)
        assert not torch.isnan(lp).any()
        assert torch.isinf(lp[~allowed]).all() and (lp[~allowed] < 0).all()
        assert torch.logsumexp(lp[:2], dim=-1).tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
        want = logits[0, 1:4] - torch.logsumexp(logits[0, 1:4], dim=0)
        assert lp[0, 1:4].tolist() == pytest.approx(want.tolist(), abs=1e-6)
        assert math.isinf(lp[2].max().item())
