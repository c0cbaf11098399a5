"""The knowledge-augmented reader: joined [CLS] x [SEP] title [SEP] body [SEP] inputs and log p(y|z,x)."""

from __future__ import annotations

import logging

import pytest
import torch

from ralm.realm.modeling.marginal import doc_log_probs, marginal_log_likelihood
from ralm.realm.readers.mlm import Reader, build_reader_inputs

torch.set_num_threads(1)

CLS, SEP, MASK, PAD = 101, 102, 103, 0
X = -100


def test_build_reader_inputs_layout():
    query_ids = torch.tensor([[CLS, 7, MASK, 9, SEP, PAD, PAD], [CLS, MASK, SEP, PAD, PAD, PAD, PAD]])
    query_labels = torch.tensor([[X, X, 8, X, X, X, X], [X, 5, X, X, X, X, X]])
    docs = [
        [([20], [21, 22, 23, 24]), ([], [])],  # body cut to fit; the null document
        [([30, 31], [32]), ([40], [])],
    ]
    out = build_reader_inputs(query_ids, query_labels, docs, sep_id=SEP, pad_id=PAD, max_length=10)
    assert out["input_ids"].tolist() == [
        [CLS, 7, MASK, 9, SEP, 20, SEP, 21, 22, SEP],
        [CLS, 7, MASK, 9, SEP, SEP, SEP, PAD, PAD, PAD],
        [CLS, MASK, SEP, 30, 31, SEP, 32, SEP, PAD, PAD],
        [CLS, MASK, SEP, 40, SEP, SEP, PAD, PAD, PAD, PAD],
    ]
    assert out["attention_mask"].tolist() == [
        [1] * 10,
        [1] * 7 + [0] * 3,
        [1] * 8 + [0] * 2,
        [1] * 6 + [0] * 4,
    ]
    assert out["token_type_ids"].tolist() == [
        [0, 0, 0, 0, 0, 1, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 1, 1, 0, 0, 0],
        [0, 0, 0, 1, 1, 1, 1, 1, 0, 0],
        [0, 0, 0, 1, 1, 1, 0, 0, 0, 0],
    ]
    assert out["labels"].tolist() == [
        [X, X, 8, X, X, X, X, X, X, X],
        [X, X, 8, X, X, X, X, X, X, X],
        [X, 5, X, X, X, X, X, X, X, X],
        [X, 5, X, X, X, X, X, X, X, X],
    ]
    assert all(v.dtype == torch.long for v in out.values())
    # the title is cut too when it alone does not fit; the query never is
    short = build_reader_inputs(query_ids[1:], query_labels[1:], [[([1, 2, 3, 4], [5])]], SEP, PAD, 6)
    assert short["input_ids"].tolist() == [[CLS, MASK, SEP, 1, SEP, SEP]]
    with pytest.raises(ValueError):
        build_reader_inputs(query_ids, query_labels, docs, SEP, PAD, max_length=6)


@pytest.fixture(scope="module")
def reader(tiny_dir):
    torch.manual_seed(0)
    return Reader.from_pretrained(tiny_dir).eval()


def _batch(B=2, K=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    Lq = 9
    query_ids = torch.full((B, Lq), PAD)
    query_labels = torch.full((B, Lq), X)
    for b, n in enumerate((7, 5)[:B]):  # query lengths (without [CLS]/[SEP])
        query_ids[b, 0], query_ids[b, n + 1] = CLS, SEP
        query_ids[b, 1 : n + 1] = torch.randint(1000, 2000, (n,), generator=g)
        masked = torch.tensor([2, 3]) if b == 0 else torch.tensor([1])
        query_labels[b, masked] = query_ids[b, masked]
        query_ids[b, masked] = MASK
    docs = [
        [
            (
                torch.randint(1000, 2000, (2,), generator=g).tolist(),
                torch.randint(1000, 2000, (6,), generator=g).tolist(),
            )
            for _ in range(K - 1)
        ]
        + [([], [])]
        for _ in range(B)
    ]
    return build_reader_inputs(query_ids, query_labels, docs, SEP, PAD, max_length=16)


def test_from_pretrained_logs_fresh_head(tiny_dir, caplog):
    with caplog.at_level(logging.INFO, logger="ralm.realm.readers.mlm"):
        r = Reader.from_pretrained(tiny_dir)
    assert type(r.mlm).__name__ == "BertForMaskedLM"
    assert "freshly initialised" in caplog.text


def test_log_p_y_given_z_matches_naive(reader):
    B, K = 2, 3
    batch = _batch(B, K)
    with torch.no_grad():
        got = reader.log_p_y_given_z(batch, B, K)
        logits = reader.mlm(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        ).logits
    assert got.shape == (B, K)
    full = torch.log_softmax(logits, dim=-1)  # naive: every position, whole vocabulary
    labels = batch["labels"]
    expected = torch.zeros(B * K)
    for i in range(B * K):
        for j in range(labels.shape[1]):
            if labels[i, j] != X:
                expected[i] += full[i, j, labels[i, j]]
    torch.testing.assert_close(got, expected.view(B, K), atol=1e-5, rtol=1e-5)
    assert (got < 0).all()
    # documents change the prediction: rows of one query differ
    assert not torch.allclose(got[0, 0], got[0, 2])


def test_gradient_reaches_reader(reader):
    B, K = 2, 3
    batch = _batch(B, K, seed=1)
    reader.zero_grad()
    scores = torch.randn(B, K - 1, requires_grad=True)
    null = torch.zeros(B, requires_grad=True)
    log_pz = doc_log_probs(scores, null)  # (B, K): K-1 documents + null (last, as in _batch)
    loss = -marginal_log_likelihood(log_pz, reader.log_p_y_given_z(batch, B, K)).mean()
    loss.backward()
    emb = reader.mlm.get_input_embeddings().weight.grad
    assert emb is not None and emb.abs().sum() > 0
    layer = next(p for n, p in reader.mlm.named_parameters() if "layer.0." in n and n.endswith("weight"))
    assert layer.grad is not None and layer.grad.abs().sum() > 0
    assert scores.grad is not None and scores.grad.abs().sum() > 0
    reader.zero_grad()


def test_masked_logits_equal_full_logits_at_those_positions(reader):
    """The head on masked positions only == the full model's logits there (BERT splits into bert + cls)."""
    assert reader._split() is not None and reader._split()[0] is reader.mlm.bert
    batch = _batch(B=2, K=2)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    rows, cols = (batch["labels"] != -100).nonzero(as_tuple=True)
    reader.eval()
    with torch.no_grad():
        full = reader.mlm(**inputs).logits[rows, cols]
        torch.testing.assert_close(reader.masked_logits(inputs, rows, cols), full, rtol=1e-5, atol=1e-5)


def test_masked_logits_fallback_for_models_without_one_head(reader):
    """A model that is not encoder + one head (here: the head wrapped away) uses the full logits."""
    r = Reader(reader.mlm)
    r._split_cache = None
    batch = _batch(B=1, K=2)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    rows, cols = (batch["labels"] != -100).nonzero(as_tuple=True)
    r.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            r.masked_logits(inputs, rows, cols),
            reader.masked_logits(inputs, rows, cols),
            rtol=1e-5,
            atol=1e-5,
        )
