"""Retrieval for fine-tuning: the marginal over chunks against naive loops, the joined reader rows,
and the retriever's p(z|x) against FAISS and hand-computed inner products."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from ralm.tasks.retrieval import doc_vectors, join_docs, marginalize

pytestmark = pytest.mark.usefixtures("one_thread")


def test_marginalize_equals_a_naive_sum_over_documents():
    g = torch.Generator().manual_seed(0)
    B, K, L, C = 3, 4, 5, 6
    lpz = torch.randn(B, K, generator=g).log_softmax(1)
    lp = torch.randn(B, K, L, C, generator=g).log_softmax(-1)
    got = marginalize(lpz, lp)
    for b in range(B):
        for t in range(L):
            for c in range(C):
                want = sum(math.exp(lpz[b, k]) * math.exp(lp[b, k, t, c]) for k in range(K))
                assert math.exp(got[b, t, c]) == pytest.approx(want, rel=1e-5)
    # documented example
    ex = marginalize(torch.tensor([[0.5, 0.5]]).log(), torch.tensor([[[0.2, 0.8], [0.6, 0.4]]]).log())
    assert torch.allclose(ex.exp(), torch.tensor([[0.4, 0.6]]))
    with pytest.raises(ValueError):
        marginalize(torch.zeros(2, 3), torch.zeros(3, 2, 4))


def test_join_docs_layout():
    docs = [[([5], [1, 2]), ([], [])], [([6], [3, 4, 5]), ([], [])]]
    out = join_docs([[101, 7, 102], [101, 8, 9, 102]], [[0, 0, 0], [0, 0, 0, 0]], docs, 102, 0, 8)
    ids = out["input_ids"].tolist()
    assert ids == [
        [101, 7, 102, 5, 102, 1, 2, 102],
        [101, 7, 102, 102, 102, 0, 0, 0],
        [101, 8, 9, 102, 6, 102, 3, 102],  # body cut to fit 8 tokens, x kept whole
        [101, 8, 9, 102, 102, 102, 0, 0],
    ]
    assert out["token_type_ids"].tolist()[2] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert out["attention_mask"].tolist()[1] == [1, 1, 1, 1, 1, 0, 0, 0]
    with pytest.raises(ValueError, match="no room"):
        join_docs([[101] * 7], None, [[([], [])]], 102, 0, 8)


def _retriever(fact_store, **kw):
    from ralm.tasks.models import InitSpec, load_retriever_parts

    spec = InitSpec(
        reader=str(fact_store),
        source="x",
        encoder=str(fact_store / "index" / "encoder"),
        index=str(fact_store / "index" / "dense"),
        docstore=str(fact_store / "store"),
    )
    from ralm.models.tokenizers import load_tokenizer

    tok = load_tokenizer(fact_store / "index" / "encoder" / "query")
    return load_retriever_parts(spec, reader_tokenizer=tok, **kw)


def test_retriever_scores_are_inner_products_and_null_is_last(fact_store):
    r = _retriever(fact_store, k=4, tune=False)
    qs = ["when was Oslo founded", "a city in Denmark"]
    got = r(qs)
    enc = r.encoder
    q = enc.encode_queries(qs, autocast="off")
    # brute force over the stored vectors

    allv = doc_vectors(r.index, np.arange(len(r.store)))
    scores = q @ allv.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :3]
    assert got.ids.tolist() == top.tolist()
    null = q @ r._null.numpy()
    scale = math.sqrt(enc.dim) if enc.config.scale_by_sqrt_dim else 1.0
    want = np.concatenate([np.take_along_axis(scores, top, 1), null[:, None]], 1) / scale
    want = want - np.log(np.exp(want).sum(1, keepdims=True))
    assert got.log_p_z.shape == (2, 4)
    np.testing.assert_allclose(got.log_p_z.detach().numpy(), want, rtol=1e-4, atol=1e-5)


def test_reader_docs_and_frozen_vs_tuned_gradients(fact_store):
    frozen = _retriever(fact_store, k=3, tune=False)
    res = frozen(["Oslo"])
    docs = frozen.reader_docs(res.ids)
    assert len(docs[0]) == 3 and docs[0][-1] == ([], [])
    i = int(res.ids[0, 0])
    assert docs[0][0][1] == frozen.store.input_ids(i).tolist()
    assert not res.log_p_z.requires_grad
    tuned = _retriever(fact_store, k=3, tune=True)
    out = tuned(["Oslo"])
    out.log_p_z[0, 0].backward()
    assert all(p.grad is None for p in tuned.encoder.doc_tower.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in tuned.encoder.query_tower.parameters())


@pytest.mark.parametrize("task", ["classify", "ner"])
def test_adapter_marginal_equals_one_document_at_a_time(task, fact_store, tiny_dir):
    """p(y|x) from the batched, padded B*K rows equals a loop that runs the model on each
    unpadded ``x title [SEP] body [SEP]`` row alone and sums p(z|x) p(y|z,x) by hand."""
    from ralm.formats.types import TaggingExample, TextExample
    from ralm.tasks.adapters import make_adapter
    from ralm.tasks.models import load_task_model

    labels = ["0", "1"] if task == "classify" else ["B-LOC", "O"]
    model, tok = load_task_model(task, tiny_dir, labels)
    model.eval()
    r = _retriever(fact_store, k=3, tune=False)
    ad = make_adapter(task, tok, model, labels, max_length=32, doc_length=24)
    if task == "classify":
        examples = [
            TextExample("a", "Oslo is old", "1"),
            TextExample("b", "a city in Denmark by the sea", "0"),
        ]
    else:
        examples = [TaggingExample("a", ["Oslo", "is", "old"], ["B-LOC", "O", "O"])]
    items = ad.encode(examples)
    marg, ids = ad.marginal(items, r)
    res = r([it.query for it in items])
    docs = r.reader_docs(res.ids)
    sep = tok.sep_token_id
    for b, it in enumerate(items):
        total = 0.0
        for k, (title, body) in enumerate(docs[b]):
            d = [*title, sep, *body, sep]
            assert len(it.ids) + len(d) <= 32 + 24  # nothing cut: the rows are the whole documents
            row = torch.tensor([it.ids + d])
            types = torch.tensor([it.types + [1] * len(d)])
            with torch.no_grad():
                logits = model(input_ids=row, token_type_ids=types).logits[0]
            p = logits.float().softmax(-1)
            if task == "ner":
                p = p[: len(it.ids)]
            total = total + res.log_p_z[b, k].exp() * p
        got = marg[b].exp()
        if task == "ner":
            got = got[: len(it.ids)]
        torch.testing.assert_close(got, total, rtol=1e-4, atol=1e-5)


def test_init_json_names_the_final_paths(tmp_path):
    """init.json is written inside the temporary output; its paths must hold after the rename."""
    from ralm.tasks.models import INIT_FILE, InitSpec, write_init

    tmp, final = tmp_path / ".out.partial-1", tmp_path / "out"
    tmp.mkdir()
    spec = InitSpec(reader=str(tmp / "init" / "reader"), source="/runs/r1")
    spec.encoder = str(tmp / "init" / "retriever")
    spec.index = "/runs/r1/checkpoints/step-1/index"
    write_init(spec, tmp, final=final)
    got = json.loads((tmp / INIT_FILE).read_text())
    assert got["reader"] == str(final / "init" / "reader") and got["encoder"] == str(
        final / "init" / "retriever"
    )
    assert got["index"] == "/runs/r1/checkpoints/step-1/index" and got["source"] == "/runs/r1"
