import math

import pytest
import torch

from ralm.retrieval.encoders import DualEncoder, EncoderConfig
from ralm.retrieval.training.contrastive import contrastive_loss, contrastive_step


def test_loss_docstring_example():
    loss = contrastive_loss(torch.tensor([[1.0, 0.0, 1.0]]), torch.tensor([0]))
    assert loss.item() == pytest.approx(-math.log(math.e / (math.e + 1 + math.e)), abs=1e-6)
    assert loss.item() == pytest.approx(0.8620, abs=1e-4)


def test_in_batch_and_hard_negative_loss_equals_a_hand_computed_case():
    # 2 queries, 2 positives (columns 0, 1) and 2 hard negatives (columns 2, 3); temperature 0.5
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.5, 0.5], [1.0, 1.0]])
    scores = q @ d.T  # [[1, 0, .5, 1], [0, 2, .5, 1]]
    loss = contrastive_loss(scores, torch.tensor([0, 1]), temperature=0.5)
    row0 = -math.log(math.exp(2) / (math.exp(2) + math.exp(0) + math.exp(1) + math.exp(2)))
    row1 = -math.log(math.exp(4) / (math.exp(0) + math.exp(4) + math.exp(1) + math.exp(2)))
    assert loss.item() == pytest.approx((row0 + row1) / 2, abs=1e-6)


def test_mask_removes_false_negatives_but_never_the_target():
    scores = torch.tensor([[1.0, 3.0, 0.0], [2.0, 1.0, 0.0]])
    mask = torch.tensor([[False, True, False], [False, True, True]])  # row 1's target (1) stays
    loss = contrastive_loss(scores, torch.tensor([0, 1]), mask)
    row0 = -math.log(math.exp(1) / (math.exp(1) + math.exp(0)))
    row1 = -math.log(math.exp(1) / (math.exp(2) + math.exp(1)))
    assert loss.item() == pytest.approx((row0 + row1) / 2, abs=1e-6)


def test_loss_equals_sentence_transformers_multiple_negatives_ranking_loss():
    """Unit vectors at temperature 0.05 are MNRL's cosine x 20 (its own similarity and scale)."""
    from sentence_transformers.util import cos_sim

    torch.manual_seed(0)
    q, d = torch.randn(4, 8), torch.randn(6, 8)  # 4 queries, 4 positives + 2 hard negatives
    ours = contrastive_loss(
        torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(d, dim=-1).T,
        torch.arange(4),
        temperature=0.05,
    )
    ref = torch.nn.functional.cross_entropy(cos_sim(q, d) * 20.0, torch.arange(4))
    assert ours.item() == pytest.approx(ref.item(), rel=1e-5)


def _rows(enc, texts, doc=False):
    tower = enc.doc_tower if doc else enc.query_tower
    ids = tower.tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [tower.template.build(None, x, enc.config.max_length) for x in ids]


QUERIES = ["where is oslo", "who wrote hamlet", "what is albedo", "when did lincoln die", "why is snow white"]
DOCS = [
    f"a document about {w} and other things {i}"
    for i, w in enumerate(["oslo", "hamlet", "albedo", "lincoln", "snow"])
]
DOCS += ["an unrelated hard negative", "another one about rivers"]


def _grads(enc) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in enc.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_gradient_cache_equals_the_uncached_step(tiny_dir, one_thread, chunk):
    torch.manual_seed(0)
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="mean", proj_dim=16, normalize=True))
    enc.eval()  # no dropout: the two passes of the cached step see the same network
    q_rows, d_rows = _rows(enc, QUERIES), _rows(enc, DOCS, doc=True)
    mask = torch.zeros(5, 7, dtype=torch.bool)
    mask[0, 6] = True
    plain = contrastive_step(enc, q_rows, d_rows, range(5), mask, temperature=0.1)
    ref = _grads(enc)
    enc.zero_grad(set_to_none=True)
    cached = contrastive_step(enc, q_rows, d_rows, range(5), mask, temperature=0.1, chunk=chunk)
    got = _grads(enc)
    assert cached.loss == pytest.approx(plain.loss, rel=1e-5)
    assert cached.accuracy == plain.accuracy
    assert set(got) == set(ref) and len(ref) > 10
    for name, g in ref.items():
        # float32 sums in another order: an error bound relative to the largest entry (a summed
        # token-type row of size ~7 differs by ~3e-6 when the mini-batches are single rows)
        torch.testing.assert_close(got[name], g, rtol=1e-4, atol=1e-6 * (1 + float(g.abs().max())), msg=name)


def test_gradient_cache_replays_dropout(tiny_dir, one_thread):
    """With dropout on, one mini-batch per tower draws the uncached step's masks: equal gradients."""
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="cls"))
    enc.train()
    q_rows, d_rows = _rows(enc, QUERIES), _rows(enc, DOCS, doc=True)
    torch.manual_seed(5)
    plain = contrastive_step(enc, q_rows, d_rows, range(5))
    ref = _grads(enc)
    enc.zero_grad(set_to_none=True)
    torch.manual_seed(5)
    cached = contrastive_step(enc, q_rows, d_rows, range(5), chunk=8)
    assert cached.loss == pytest.approx(plain.loss, rel=1e-5)
    for name, g in ref.items():
        torch.testing.assert_close(_grads(enc)[name], g, rtol=1e-4, atol=1e-6, msg=name)
    # and dropout really is on: a second draw gives another loss
    enc.zero_grad(set_to_none=True)
    assert contrastive_step(enc, q_rows, d_rows, range(5)).loss != pytest.approx(plain.loss, rel=1e-6)


def test_gradient_cache_replays_dropout_across_mini_batches(tiny_dir, one_thread):
    """Dropout on, several mini-batches per tower: the gradients equal those of the same mini-batches
    (longest rows first) all run with autograd in the same order and kept, which draws the same
    masks; so each replayed mini-batch saw the dropout its vectors in the loss were made with."""
    from ralm.models.precision import autocast_context

    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="mean", normalize=True))
    enc.train()
    q_rows, d_rows = _rows(enc, QUERIES), _rows(enc, DOCS, doc=True)
    torch.manual_seed(7)
    cached = contrastive_step(enc, q_rows, d_rows, range(5), temperature=0.1, chunk=2)
    got = _grads(enc)
    enc.zero_grad(set_to_none=True)

    torch.manual_seed(7)
    vecs = []
    for tower, rows in ((enc.query_tower, q_rows), (enc.doc_tower, d_rows)):
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
        out = torch.empty(len(rows), enc.dim)
        parts = []
        for s in range(0, len(rows), 2):
            batch = tower.template.collate([rows[i] for i in order[s : s + 2]], tower.uses_token_types)
            with autocast_context(torch.device("cpu"), None):
                parts.append(tower(**batch).float())
        out = torch.cat(parts)[torch.as_tensor(sorted(range(len(rows)), key=lambda i: order[i]))]
        vecs.append(out)
    ref_loss = contrastive_loss(enc.score(*vecs), torch.arange(5), None, 0.1)
    ref_loss.backward()
    assert cached.loss == pytest.approx(ref_loss.item(), rel=1e-5)
    for name, g in _grads(enc).items():
        torch.testing.assert_close(got[name], g, rtol=1e-4, atol=1e-6, msg=name)
    assert len(got) > 10
