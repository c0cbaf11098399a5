"""REALM marginal likelihood: log p(y|x) = log Σ_z p(y|z,x) p(z|x), its gradient r(z), the null doc."""

from __future__ import annotations

import math

import pytest
import torch

from ralm.realm.modeling.marginal import doc_log_probs, marginal_log_likelihood, retrieval_utility

torch.set_num_threads(1)


def _random(B=3, K=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, K, generator=g, dtype=torch.float64) * 3
    null = torch.randn(B, generator=g, dtype=torch.float64)
    # log p(y|z,x) of a few masked tokens: negative, spread out
    log_py = -torch.rand(B, K + 1, generator=g, dtype=torch.float64) * 10
    return scores, null, log_py


def test_doc_log_probs_null_last():
    scores, null, _ = _random()
    lp = doc_log_probs(scores, null)
    assert lp.shape == (3, 6)
    torch.testing.assert_close(lp.exp().sum(1), torch.ones(3, dtype=torch.float64))
    full = torch.cat([scores, null[:, None]], 1)
    torch.testing.assert_close(lp, full - full.exp().sum(1, keepdim=True).log())
    assert doc_log_probs(torch.zeros(1, 3), torch.zeros(1)).exp().allclose(torch.full((1, 4), 0.25))
    assert doc_log_probs(scores).shape == (3, 5)
    with pytest.raises(ValueError):
        doc_log_probs(scores, null[:2])


@pytest.mark.parametrize("with_null", [False, True])
def test_marginal_matches_naive_loop(with_null):
    scores, null, log_py = _random(seed=1)
    log_pz = doc_log_probs(scores, null if with_null else None)
    log_py = log_py[:, : log_pz.shape[1]]
    got = marginal_log_likelihood(log_pz, log_py)
    for b in range(scores.shape[0]):
        z_scores = scores[b].tolist() + ([null[b].item()] if with_null else [])
        norm = sum(math.exp(s) for s in z_scores)
        p_y = sum(math.exp(s) / norm * math.exp(log_py[b, z].item()) for z, s in enumerate(z_scores))
        assert got[b].item() == pytest.approx(math.log(p_y), abs=1e-12)


@pytest.mark.parametrize("with_null", [False, True])
def test_gradient_is_realm_r_z(with_null):
    """d log p(y|x) / d f(x,z) = r(z) = [p(y|z,x)/p(y|x) - 1] p(z|x) (REALM §3.3)."""
    scores, null, log_py = _random(seed=2)
    scores.requires_grad_(True)
    null.requires_grad_(True)
    log_pz = doc_log_probs(scores, null if with_null else None)
    log_py = log_py[:, : log_pz.shape[1]]
    log_y = marginal_log_likelihood(log_pz, log_py)
    log_y.sum().backward()  # queries are independent: each row's gradient is its own

    with torch.no_grad():
        r = (log_py.exp() / log_y.exp()[:, None] - 1) * log_pz.exp()
    K = scores.shape[1]
    torch.testing.assert_close(scores.grad, r[:, :K], atol=1e-10, rtol=0)
    if with_null:
        torch.testing.assert_close(null.grad, r[:, K], atol=1e-10, rtol=0)
    else:
        assert null.grad is None
    # r(z) sums to zero over documents (softmax invariance to a shift of all scores)
    torch.testing.assert_close(r.sum(1), torch.zeros(3, dtype=torch.float64), atol=1e-12, rtol=0)


def test_retrieval_utility():
    _, _, log_py = _random(seed=3)
    ru = retrieval_utility(log_py)  # null last
    assert ru.shape == log_py.shape
    assert (ru[:, -1] == 0).all()
    torch.testing.assert_close(ru[:, :-1], log_py[:, :-1] - log_py[:, -1:])
    ru0 = retrieval_utility(log_py, null_index=0)
    assert (ru0[:, 0] == 0).all()
    torch.testing.assert_close(ru0[:, 1:], log_py[:, 1:] - log_py[:, :1])
    # exactly zero even when the null document gives y probability 0
    inf = torch.tensor([[-1.0, -float("inf")]])
    assert retrieval_utility(inf)[0, 1].item() == 0.0
    assert retrieval_utility(torch.tensor([[-1.0, -3.0]])).tolist() == [[2.0, 0.0]]
