"""Neural LMs: normalised outputs, hand-checked perplexity, learning, causality, save/load."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ralm.errors import RalmError
from ralm.lm import NGramLM, word_tokenize
from ralm.lm.counts import BOS_ID, EOS_ID
from ralm.lm.neural import (
    TrainConfig,
    build_capped_vocab,
    encode_sentences,
    length_batches,
    load_lm,
    next_token_probs,
    perplexity,
    save_lm,
    sequence_nll,
    train_lm,
)
from ralm.lm.neural_models import MODELS, build_model, n_params

KINDS = sorted(MODELS)
SMALL = {
    "ffnn": {"order": 3, "emb_dim": 16, "hidden": 32, "direct": True},
    "lstm": {"emb_dim": 32, "hidden": 32, "layers": 2},
    "transformer": {"d_model": 32, "n_heads": 2, "d_ff": 64, "n_layers": 2, "max_len": 32},
}


pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py


def small(kind: str, vocab_size: int = 20, **kw) -> torch.nn.Module:
    return build_model(kind, vocab_size=vocab_size, seed=0, **{**SMALL[kind], **kw}).eval()


def test_capped_vocab_and_batches():
    v = build_capped_vocab([["b", "a", "a", "c", "b", "a"]], max_size=5)
    assert v.id_to_token == ["<unk>", "<s>", "</s>", "a", "b"]  # c dropped by the cap
    assert build_capped_vocab([["x", "y", "y"]], min_count=2).id_to_token[3:] == ["y"]
    enc = encode_sentences(v, [["a", "c"]])
    assert enc[0].tolist() == [BOS_ID, 3, 0, EOS_ID]  # c -> <unk>
    with pytest.raises(RalmError, match="reserved"):
        build_capped_vocab([["<s>"]])
    batches = length_batches(np.array([3, 9, 4]), 8)  # the docstring's example
    assert [b.tolist() for b in batches] == [[0, 2], [1]]


@pytest.mark.parametrize("kind", KINDS)
def test_next_token_distribution_sums_to_one(kind):
    m = small(kind)
    for ctx in ([BOS_ID], [BOS_ID, 5, 7, 3], [BOS_ID, 4, 4, 4, 4, 4, 9]):
        p = next_token_probs(m, ctx)
        assert p.shape == (20,) and bool((p > 0).all())
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-5)
    logits = m(torch.tensor([[BOS_ID, 5, 6, 7]]))
    assert torch.allclose(torch.softmax(logits, -1).sum(-1), torch.ones(1, 4), atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_perplexity_is_exp_mean_nll_by_hand(kind):
    """Two sentences, `<s> 5 6 </s>` and `<s> 7 </s>`: 3 + 2 = 5 predictions (</s> counted, <s>
    not). By hand: NLL_t = log(sum_v exp(z_t,v)) - z_t,target from each sentence's own logits,
    ppl = exp((sum of the 5 NLLs) / 5). The batched scorer pads the second sentence; padding
    must change nothing."""
    m = small(kind)
    sents = [np.array([BOS_ID, 5, 6, EOS_ID]), np.array([BOS_ID, 7, EOS_ID])]
    nll = []
    for s in sents:
        with torch.no_grad():
            z = m(torch.tensor([s[:-1].tolist()]))[0].double().tolist()  # (len-1, V)
        for t, target in enumerate(s[1:].tolist()):
            lse = math.log(sum(math.exp(x) for x in z[t]))
            nll.append(lse - z[t][target])
    assert len(nll) == 5
    total, count = sequence_nll(m, sents)
    assert count == 5
    assert total == pytest.approx(sum(nll), rel=1e-5)
    assert perplexity(m, sents) == pytest.approx(math.exp(sum(nll) / 5), rel=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_causal_future_token_does_not_change_the_past(kind):
    m = small(kind)
    a = torch.tensor([[BOS_ID, 5, 6, 7, 8, 9, 10]])
    b = a.clone()
    b[0, 4] = 15  # change the 5th input token
    with torch.no_grad():
        la, lb = m(a), m(b)
    assert torch.allclose(la[0, :4], lb[0, :4], atol=1e-6)  # positions before it: unchanged
    assert not torch.allclose(la[0, 4], lb[0, 4])  # its own position: changed


def test_ffnn_window_is_fixed():
    m = small("ffnn")  # order 3: position t sees tokens t-1 and t only
    a = torch.tensor([[BOS_ID, 5, 6, 7, 8]])
    b = a.clone()
    b[0, 1] = 11
    with torch.no_grad():
        la, lb = m(a), m(b)
    assert torch.allclose(la[0, 3:], lb[0, 3:])  # token 1 is out of the window of positions 3, 4


def test_transformer_rejects_too_long_input():
    with pytest.raises(RalmError, match="max_len"):
        small("transformer")(torch.zeros(1, 40, dtype=torch.long))


CORPUS = ["the cat sat on the mat .", "the dog sat on the log .", "a cat saw a dog ."] * 20


@pytest.mark.parametrize("kind", KINDS)
def test_learns_a_repetitive_corpus_better_than_unigram(kind):
    sents = [word_tokenize(s) for s in CORPUS]
    vocab = build_capped_vocab(sents)
    enc = encode_sentences(vocab, sents)
    unigram = NGramLM.fit(sents, order=1, estimator="laplace").perplexity(sents)
    m = build_model(kind, vocab_size=len(vocab), seed=0, **SMALL[kind], dropout=0.0)
    before = perplexity(m, enc)
    res = train_lm(
        m,
        enc,
        enc,
        TrainConfig(
            lr=1e-2,
            max_epochs=200,
            max_steps=120,
            warmup_steps=5,
            batch_tokens=256,
            patience=100,
            autocast="off",
        ),
    )
    after = perplexity(m, enc)
    assert res.steps == 120 and res.stopped_by == "steps"
    assert after < before and after < unigram / 2, (kind, before, after, unigram)
    assert res.best_valid_ppl == pytest.approx(after, rel=1e-6)  # best weights restored


def test_training_is_seeded_and_bf16_runs():
    sents = [word_tokenize(s) for s in CORPUS[:6]]
    vocab = build_capped_vocab(sents)
    enc = encode_sentences(vocab, sents)
    ppl = []
    for _ in range(2):
        m = build_model("lstm", vocab_size=len(vocab), seed=3, **SMALL["lstm"])
        train_lm(m, enc, None, TrainConfig(max_steps=3, seed=3, autocast="off"))
        ppl.append(perplexity(m, enc))
    assert ppl[0] == ppl[1]
    m = build_model("transformer", vocab_size=len(vocab), seed=0, **SMALL["transformer"])
    res = train_lm(m, enc, enc, TrainConfig(max_steps=2, autocast="bf16", eval_every=1))
    assert res.steps == 2 and len(res.history) == 2 and math.isfinite(res.best_valid_ppl)


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(tmp_path, kind):
    sents = [word_tokenize(s) for s in CORPUS[:3]]
    vocab = build_capped_vocab(sents)
    m = build_model(kind, vocab_size=len(vocab), seed=1, **SMALL[kind])
    save_lm(m, vocab, tmp_path / kind)
    assert {p.name for p in (tmp_path / kind).iterdir()} == {"model.safetensors", "lm.json"}
    m2, v2 = load_lm(tmp_path / kind)
    assert v2.id_to_token == vocab.id_to_token and n_params(m2) == n_params(m)
    ids = torch.tensor([encode_sentences(vocab, sents[:1])[0][:-1].tolist()])
    m.eval()
    with torch.no_grad():
        assert torch.equal(m(ids), m2(ids))
    if kind != "ffnn":  # tied embeddings stay tied after loading
        emb = m2.emb if kind == "lstm" else m2.tok
        assert m2.out.weight.data_ptr() == emb.weight.data_ptr()


def test_load_errors(tmp_path):
    with pytest.raises(RalmError, match="no such file"):
        load_lm(tmp_path)
    with pytest.raises(RalmError, match="unknown neural LM"):
        build_model("rnn")
    with pytest.raises(RalmError, match="no field"):
        build_model("lstm", hiddn=3)
