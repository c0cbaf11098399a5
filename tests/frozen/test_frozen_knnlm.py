"""kNN-LM for a frozen LM: the data store's entries against a naive forward pass, the kNN mixture
against a brute-force search, lambda 0 equal to no retrieval, exclusion, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from frozen_ref import ARTICLES, EVAL_ARTICLE, eval_text

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.frozen.datastore import Datastore, article_texts, build_datastore, knn_label_probs
from ralm.frozen.evaluate import EvalConfig, evaluate
from ralm.frozen.text import tokenize_eval_text
from testkit import run_ralm as run


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory, llama, corpus):
    out = tmp_path_factory.mktemp("knn") / "ds"
    build_datastore(llama, DocStore(corpus), out, max_length=16, stride=8, log=lambda m: None)
    return out


def _naive_hidden(lm, ids: list[int], max_length: int, stride: int) -> np.ndarray:
    """(n-1, H): the context vector predicting each token 1..n-1, by a plain loop over the HF grid:
    windows end at min(begin + L, n) for begin = 0, s, 2s, ...; each scores the tokens after the
    previous window's end, every one from the window's context start c = max(0, end - 1 - L)."""
    out = np.zeros((len(ids) - 1, lm.hidden_size), dtype=np.float32)
    prev_end = 0
    for begin in range(0, len(ids), stride):
        end = min(begin + max_length, len(ids))
        c = max(0, end - 1 - max_length)
        for t in range(max(prev_end, 1), end):
            with torch.no_grad():
                hs = lm.model(input_ids=torch.tensor([ids[c:t]]), output_hidden_states=True).hidden_states[-1]
            out[t - 1] = hs[0, -1].float().numpy()
        prev_end = end
        if end >= len(ids):
            break
    return out


def test_entries_are_the_lm_context_vectors(llama, corpus, store_dir):
    ds = Datastore(store_dir)
    store = DocStore(corpus)
    arts = article_texts(store)
    toks = llama.encode([t for _, t in arts])
    assert len(ds) == sum(len(t) - 1 for t in toks) == ds.meta["entries"]
    at = 0
    for (art, _), ids in zip(arts, toks, strict=True):
        n = len(ids) - 1
        assert (ds.values[at : at + n] == np.asarray(ids[1:])).all()
        assert (ds.articles[at : at + n] == art).all()
        ref = _naive_hidden(llama, ids, 16, 8)
        np.testing.assert_allclose(
            np.asarray(ds.keys[at : at + n], dtype=np.float32), ref, atol=2e-3, rtol=2e-3
        )
        at += n
    assert at == len(ds)


def test_label_probs_by_hand():
    dist = np.array([[0.0, 1.0, 2.0], [4.0, 4.0, 4.0]])
    match = np.array([[True, False, True], [False, False, False]])
    w = np.exp([0.0, -0.5, -1.0])  # temperature 2
    expect = (w[0] + w[2]) / w.sum()
    np.testing.assert_allclose(knn_label_probs(dist, match, 2.0), [expect, 0.0])


def _brute_force_logp(
    lm, ds: Datastore, ids: np.ndarray, lam: float, k: int, temp: float, excluded
) -> np.ndarray:
    """log p of tokens 1..n-1 with the whole text as context: numpy distances to every allowed entry."""
    with torch.no_grad():
        out = lm.model(input_ids=torch.tensor(ids[None]), output_hidden_states=True)
    h = out.hidden_states[-1][0, :-1].float().numpy()
    lp_lm = torch.log_softmax(out.logits[0, :-1].float(), -1).numpy()[np.arange(len(ids) - 1), ids[1:]]
    allowed = ~np.isin(ds.articles, excluded)
    keys = np.asarray(ds.keys, dtype=np.float32)[allowed]
    vals = ds.values[allowed]
    d = ((h[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    dk = np.take_along_axis(d, order, 1)
    p_knn = knn_label_probs(dk, vals[order] == ids[1:, None], temp)
    return np.log(lam * p_knn + (1 - lam) * np.exp(lp_lm))


def test_knnlm_mixture_equals_brute_force_and_lambda_zero_equals_none(llama, corpus, store_dir):
    ds = Datastore(store_dir)
    store = DocStore(corpus)
    text = tokenize_eval_text(eval_text(), llama.tokenizer)
    n = len(text)
    river = [
        a
        for a, t in zip(*store.articles(["article", "title"]).to_pydict().values(), strict=True)
        if t == "River"
    ]
    cfg = EvalConfig(mode="knnlm", max_length=n, stride=n, knn_k=5, knn_lambda=0.3, knn_temperature=2.0)
    res = evaluate(llama, text, cfg, datastore=ds, exclude_articles=river)
    ref = _brute_force_logp(llama, ds, np.asarray(text.ids), 0.3, 5, 2.0, river)
    np.testing.assert_allclose(res.per_token[1:], ref, atol=2e-4)
    # lambda 0 is the LM alone, token for token, on the same grid as mode none
    short = EvalConfig(mode="knnlm", max_length=16, stride=4, knn_k=3, knn_lambda=0.0)
    none = evaluate(llama, text, EvalConfig(mode="none", max_length=16, stride=4))
    zero = evaluate(llama, text, short, datastore=ds, exclude_articles=river)
    np.testing.assert_array_equal(zero.per_token[1:], none.per_token[1:])
    assert zero.nll == none.nll
    np.testing.assert_allclose(
        zero.knn.logp(0.3)[:3], np.log(0.3 * zero.knn.p_knn[:3] + 0.7 * np.exp(zero.knn.lm_logp[:3]))
    )


def test_excluded_articles_are_never_neighbours(llama, corpus, store_dir):
    ds = Datastore(store_dir)
    store = DocStore(corpus)
    river = int(
        store.articles(["article", "title"]).to_pandas().set_index("title").loc[EVAL_ARTICLE, "article"]
    )
    others = np.flatnonzero(ds.articles != river)
    h = np.asarray(ds.keys[ds.articles == river][:6], dtype=np.float32)  # the River's own contexts
    d_all, _ = ds.search(h, 1)
    assert np.allclose(d_all[:, 0], 0.0, atol=1e-3)  # found themselves when not excluded
    d, v = ds.search(h, len(others) + 10, exclude_articles=[river])
    assert d.shape == (6, len(others))  # k capped at the entries left
    ref = ((h[:, None] - np.asarray(ds.keys, dtype=np.float32)[others][None]) ** 2).sum(-1)
    np.testing.assert_allclose(np.sort(d, 1), np.sort(ref, 1), rtol=1e-4, atol=1e-4)
    assert (d > 1e-3).all()


def test_cli_datastore_and_knnlm_rows(capsys, tmp_path, llama_dir, gpt2_dir, corpus):
    text = tmp_path / "river.txt"
    text.write_text(eval_text() + "\n", encoding="utf-8")
    ds = tmp_path / "ds"
    code, out, _ = run(
        capsys,
        "lm-datastore",
        llama_dir,
        "--corpus",
        corpus,
        "--out",
        ds,
        "--max-length",
        "16",
        "--stride",
        "8",
        "--autocast",
        "off",
        "--device",
        "cpu",
    )
    assert code == 0 and "entries" in out
    assert run(capsys, "lm-datastore", llama_dir, "--corpus", corpus, "--out", ds)[2] == [
        f"ralm: error: {ds}: exists; pass --overwrite to replace it"
    ]
    code, out, err = run(
        capsys,
        "lm-eval",
        llama_dir,
        text,
        "--datastore",
        ds,
        "--mode",
        "none",
        "knnlm",
        "--stride",
        "8",
        "--max-length",
        "16",
        "--knn-k",
        "4",
        "--json",
        "--autocast",
        "off",
        "--device",
        "cpu",
    )
    assert code == 0, err
    res = json.loads(out)
    assert [r["mode"] for r in res["rows"]] == ["none", "knnlm"]
    assert res["datastore_excluded_articles"] == 1  # the River shares 13-grams with the text
    assert res["rows"][0]["tokens"] == res["rows"][1]["tokens"]
    assert res["rows"][1]["knn_k"] == 4 and res["rows"][1]["knn_lambda"] == 0.25
    # the wrong LM for the store, no store, a bad lambda: one line each, exit 2
    code, _, err = run(
        capsys, "lm-eval", gpt2_dir, text, "--datastore", ds, "--mode", "knnlm", "--device", "cpu"
    )
    assert (
        code == 2 and len(err) == 1 and "built with" in err[0] and "build a data store with this LM" in err[0]
    )
    code, _, err = run(capsys, "lm-eval", llama_dir, text, "--mode", "knnlm")
    assert code == 2 and err == [
        "ralm: error: mode knnlm needs --datastore DIR (build one with `ralm lm-datastore`)"
    ]
    code, _, err = run(
        capsys, "lm-eval", llama_dir, text, "--datastore", ds, "--mode", "knnlm", "--knn-lambda", "2"
    )
    assert code == 2 and len(err) == 1 and "0 <= lambda <= 1" in err[0]
    code, _, err = run(capsys, "lm-eval", llama_dir, text, "--datastore", tmp_path, "--mode", "knnlm")
    assert code == 2 and err == [
        f"ralm: error: {tmp_path}: not a kNN-LM data store (no datastore.json); build one "
        "with `ralm lm-datastore`"
    ]


def test_damaged_store_is_one_error(tmp_path, store_dir):
    import shutil

    bad = tmp_path / "ds"
    shutil.copytree(store_dir, bad)
    with open(bad / "values.npy", "ab") as f:
        f.write(b"x")
    with pytest.raises(RalmError, match="values.npy: .* bytes, expected .*; rebuild the data store"):
        Datastore(bad)
    assert Datastore(store_dir).meta["articles"] == len(ARTICLES)


def test_knn_scores_at_another_temperature():
    from ralm.frozen.datastore import KnnScores

    dist = np.array([[0.0, 2.0], [1.0, 3.0]], dtype=np.float32)
    match = np.array([[False, True], [True, True]])
    s = KnnScores(np.log([0.5, 0.25]), knn_label_probs(dist, match, 1.0), 1.0, dist, match)
    t = s.at_temperature(4.0)
    np.testing.assert_allclose(t.p_knn, [np.exp(-0.5) / (1 + np.exp(-0.5)), 1.0])
    np.testing.assert_allclose(t.logp(0.5), np.log(0.5 * t.p_knn + 0.5 * np.array([0.5, 0.25])))
