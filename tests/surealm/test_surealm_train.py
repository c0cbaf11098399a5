"""Training, perplexity (hand-computed case), kNN-LM and generation on the tiny store."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from testkit import CPU_RUN

pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(store, out, **kw):
    from ralm.surealm.train import TrainConfig

    base = dict(
        datastore=str(store),
        out=str(out),
        lm=str(kw.pop("lm")),
        k=3,
        delta=1,
        steps=12,
        batch_size=6,
        lr=1e-3,
        warmup_steps=2,
        eval_every=6,
        **CPU_RUN,
    )
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def trained(tiny_store, tiny_dir, tmp_path_factory):
    from ralm.surealm.train import train

    root = tmp_path_factory.mktemp("surealm-runs")
    torch.set_num_threads(1)
    sure = train(_cfg(tiny_store, root / "sure", lm=tiny_dir), progress=False)
    base = train(_cfg(tiny_store, root / "base", lm=tiny_dir, retrieval=False), progress=False)
    return sure, base


def test_training_writes_the_best_model_and_lowers_the_loss(trained):
    sure, base = trained
    for run in (sure, base):
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(1, 13))
        assert rows[-1]["loss"] < rows[0]["loss"]
        evals = [r for r in rows if "valid_token_ppl" in r]
        assert [r["step"] for r in evals] == [6, 12]
        info = json.loads((run / "train.json").read_text())
        best = min(evals, key=lambda r: r["valid_token_ppl"])
        assert info["best_step"] == best["step"]
        assert info["valid"]["token_ppl"] == pytest.approx(best["valid_token_ppl"])
    assert json.loads((sure / "surealm.json").read_text())["retrieval"] is True
    assert json.loads((base / "surealm.json").read_text())["retrieval"] is False


def test_saved_model_reproduces_its_validation_perplexity(trained):
    from ralm.surealm.train import evaluate, load_trained

    for run in trained:
        model, _tok, store, batcher = load_trained(run, device="cpu")
        info = json.loads((run / "train.json").read_text())
        c = evaluate(model, batcher, store.split_ids("valid"), autocast="off")
        assert c.token_ppl == pytest.approx(info["valid"]["token_ppl"], rel=1e-4)


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size(trained):
    """Hand-computed case: all-zero output weights and bias give p = 1/V for every token."""
    from ralm.surealm.train import evaluate, load_trained

    model, _tok, store, batcher = load_trained(trained[0], device="cpu")
    head = model.backbone.get_output_embeddings()
    with torch.no_grad():
        head.weight.zero_()
        bias = getattr(head, "bias", None)
        if bias is not None:
            bias.zero_()
    ids = store.split_ids("test")
    c = evaluate(model, batcher, ids, autocast="off")
    V = model.vocab_size
    toks = sum(len(store.tokens(s)) + 1 for s in ids)  # every word and the end, never the start
    words = sum(len(store.text(s).split()) + 1 for s in ids)
    assert (c.tokens, c.words, c.sentences) == (toks, words, len(ids))
    assert c.token_ppl == pytest.approx(V, rel=1e-6)
    assert c.word_ppl == pytest.approx(math.exp(toks * math.log(V) / words), rel=1e-6)


def test_knnlm_scores_match_a_naive_computation(trained):
    from ralm.surealm.knnlm import KnnLM
    from ralm.surealm.train import evaluate, load_trained

    model, _tok, store, batcher = load_trained(trained[1], device="cpu")
    knn = KnnLM(model, batcher, k=4, autocast="off")
    size = knn.build(store.split_ids("train"))
    assert size == sum(len(store.tokens(s)) + 1 for s in store.split_ids("train"))
    sc = knn.scores(store.split_ids("test"))
    lm = evaluate(model, batcher, store.split_ids("test"), autocast="off")
    assert sc.perplexity(0.0, 1.0).token_ppl == pytest.approx(lm.token_ppl, rel=1e-5)
    # lambda = 0.3, T = 2 by hand for the first token
    d, match, lp = sc.dist[0], sc.match[0], sc.lm_logp[0]
    w = np.exp(-d / 2.0) / np.exp(-d / 2.0).sum()
    p = 0.3 * w[match].sum() + 0.7 * math.exp(lp)
    one = sc.perplexity(0.3, 2.0)
    rest = -np.log(
        0.3
        * ((np.exp(-sc.dist[1:] / 2) / np.exp(-sc.dist[1:] / 2).sum(1, keepdims=True)) * sc.match[1:]).sum(1)
        + 0.7 * np.exp(sc.lm_logp[1:])
    ).sum()
    assert one.nll == pytest.approx(-math.log(p) + rest, rel=1e-6)
    lam, temp, _ = KnnLM.tune(knn.scores(store.split_ids("valid")))
    assert lam in (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5) and temp > 0


def test_generation_retrieves_every_delta_tokens_and_matches_the_forward_pass(tiny_store, tiny_dir, tmp_path):
    from ralm.surealm.generate import _memory_for_rows, describe_retrievals, generate
    from ralm.surealm.train import load_trained, train

    run = train(
        _cfg(tiny_store, tmp_path / "d2", lm=tiny_dir, delta=2, steps=2, eval_every=2), progress=False
    )
    model, tok, store, _ = load_trained(run, device="cpu")
    prompt = "i would like"
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    res = generate(model, tok, store, prompt, max_new_tokens=5, min_new_tokens=5)
    r = res.retriever
    # forward calls see 1 + n_prompt .. 1 + n_prompt + 4 tokens; blocks at prefix lengths 2, 4, ...
    assert sorted(len(p) for p in r.cache) == list(range(2, n_prompt + 4 + 1, 2))
    # the hook path gives the same greedy tokens as the training forward with the same memory
    full = tok(prompt, add_special_tokens=False)["input_ids"] + res.token_ids[0]
    assert len(res.token_ids[0]) == 5
    seq = torch.tensor([[tok.cls_token_id, *full[: n_prompt + 4]]])
    keys, values, blk = _memory_for_rows(model, r, seq)
    with torch.no_grad():
        logits = model(seq, None, keys, values, blk)
    assert logits[0, n_prompt:].argmax(-1).tolist() == full[n_prompt : n_prompt + 5]  # t predicts w_{t+1}
    lines = describe_retrievals(r, tok, 2)
    assert lines[0].startswith("query ") and "word" in lines[1] and "suffix" in lines[1]
    for strategy in ("top-p", "beam"):
        out = generate(model, tok, store, prompt, strategy=strategy, max_new_tokens=3, num_return_sequences=2)
        assert len(out.texts) == len(out.token_ids) == 2


def test_overwrite_replaces_an_interrupted_run_but_not_a_foreign_directory(tiny_store, tiny_dir, tmp_path):
    from ralm.errors import RalmError
    from ralm.surealm.train import train

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(RalmError, match="not a SUREALM training run"):
        train(_cfg(tiny_store, foreign, lm=tiny_dir, steps=1, eval_every=1), overwrite=True, progress=False)
    assert (foreign / "notes.txt").read_text() == "mine"
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(RalmError) as exc:
        train(_cfg(tiny_store, tmp_path / "a-file", lm=tiny_dir, steps=1), overwrite=True, progress=False)
    assert str(exc.value) == f"{tmp_path / 'a-file'}: exists and is not a directory; choose another --out"
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    (interrupted / "metrics.jsonl").write_text('{"step": 1, "loss": 9.0}\n')  # killed before train.json
    with pytest.raises(RalmError, match="pass --overwrite"):
        train(_cfg(tiny_store, interrupted, lm=tiny_dir, steps=1, eval_every=1), progress=False)
    train(_cfg(tiny_store, interrupted, lm=tiny_dir, steps=1, eval_every=1), overwrite=True, progress=False)
    rows = [json.loads(x) for x in (interrupted / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] and rows[0]["loss"] != 9.0
    assert (interrupted / "train.json").is_file()


def test_init_from_a_trained_run_starts_from_its_backbone(trained, tiny_store, tiny_dir, tmp_path):
    """With lr 0 the run's saved backbone is the source run's, tensor for tensor; memory maps start fresh."""
    from ralm.errors import RalmError
    from ralm.surealm.model import SurealmLM
    from ralm.surealm.train import train

    _sure, base = trained
    cfg = _cfg(
        tiny_store,
        tmp_path / "two",
        lm=tiny_dir,
        steps=2,
        eval_every=2,
        lr=0.0,
        lr_memory=0.0,
        pathway="self",
    )
    cfg.init_from = str(base)
    got, _ = SurealmLM.load(train(cfg, progress=False))
    src, _ = SurealmLM.load(base)
    fresh = SurealmLM.from_backbone(got.config)
    want = src.backbone.state_dict()
    have = got.backbone.state_dict()
    assert have.keys() == want.keys()
    for name, t in want.items():
        assert torch.equal(have[name], t), name
    changed = [n for n, t in fresh.backbone.state_dict().items() if not torch.equal(t, want[n])]
    assert changed  # the source run really differs from a fresh backbone
    assert torch.count_nonzero(got.value_norm.weight) == 0  # memory maps as initialised, not copied
    cross = _cfg(tiny_store, tmp_path / "cross", lm=tiny_dir, steps=2, eval_every=2, lr=0.0, lr_memory=0.0)
    cross.init_from = str(base)
    got_cross, _ = SurealmLM.load(train(cross, progress=False))
    assert got_cross.gates() == [0.0] * len(got_cross.cross)  # the cross blocks as initialised: gates shut
    for name, t in want.items():
        assert torch.equal(got_cross.backbone.state_dict()[name], t), name
    bad = _cfg(tiny_store, tmp_path / "bad", lm=tiny_dir, steps=1, eval_every=1)
    bad.init_from = str(tmp_path)
    with pytest.raises(RalmError, match="not a SUREALM model"):
        train(bad, progress=False)
    assert not (tmp_path / "bad").exists()
