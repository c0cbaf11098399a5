"""SUREALM's model: equation 6's mask, memory through the cache, BERT and Llama backbones, save/load.
The memory here is the self pathway's (slots in every layer's self-attention, pathway="self")."""

from __future__ import annotations

import math

import pytest
import torch

from testkit import TINY_DECODER

pytestmark = pytest.mark.usefixtures("one_thread")


def naive_eq6(n_q: int, n_blocks: int, K: int, delta: int) -> torch.Tensor:
    """Equation 6 as printed, 1-based: (|Q|, |Q| + J) with memory after the tokens."""
    J = n_blocks * K
    M = torch.zeros((n_q, n_q + J), dtype=torch.bool)
    for i in range(1, n_q + 1):
        for j in range(1, n_q + J + 1):
            M[i - 1, j - 1] = j <= i or (j > n_q and (j - n_q) <= K * (math.ceil(i / delta) - 1))
    return M


@pytest.mark.parametrize(("N", "K", "delta"), [(1, 1, 1), (5, 2, 1), (6, 3, 2), (7, 2, 3), (4, 1, 5)])
def test_mask_equals_equation_6(N, K, delta):
    from ralm.surealm.model import memory_mask

    T = N + 1  # [BOS] w_1..w_N
    n_blocks = N // delta
    blk = torch.arange(1, n_blocks + 1).repeat_interleave(K)[None]
    got = memory_mask(torch.ones((1, T), dtype=torch.long), blk, delta)[0, 0]
    J = n_blocks * K
    want = naive_eq6(T, n_blocks, K, delta)
    want = torch.cat([want[:, T:], want[:, :T]], dim=1)  # memory first here
    assert got.shape == (T, J + T)
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("N", "K", "delta", "window"), [(5, 2, 1, 1), (7, 2, 1, 3), (8, 1, 2, 2), (6, 3, 3, 1)]
)
def test_memory_window_keeps_only_the_latest_blocks(N, K, delta, window):
    from ralm.surealm.model import memory_mask

    T = N + 1
    n_blocks = N // delta
    blk = torch.arange(1, n_blocks + 1).repeat_interleave(K)[None]
    got = memory_mask(torch.ones((1, T), dtype=torch.long), blk, delta, window=window)[0, 0]
    full = memory_mask(torch.ones((1, T), dtype=torch.long), blk, delta)[0, 0]
    for t in range(T):
        for slot in range(n_blocks * K):
            b = slot // K + 1
            assert bool(got[t, slot]) == (b <= t // delta and b > t // delta - window), (t, slot)
    assert torch.equal(got[:, n_blocks * K :], full[:, n_blocks * K :])  # tokens as before
    assert torch.equal(got & full, got)  # never more than eq. 6


def test_mask_padding_and_additive_form():
    from ralm.surealm.model import memory_mask

    am = torch.tensor([[1, 1, 1], [1, 1, 0]])
    blk = torch.tensor([[1, 2], [1, 0]])  # second row: one padding slot
    m = memory_mask(am, blk, 1)
    assert m[1, 0, 2].tolist() == [True, False, True, True, False]  # pad slot and pad token hidden
    assert m[0, 0, 0, :2].tolist() == [False, False] and m[0, 0, 1, :2].tolist() == [True, False]
    add = memory_mask(am, blk, 1, additive_dtype=torch.float32)
    assert torch.equal(add == 0, m) and float(add.min()) == torch.finfo(torch.float32).min


def _bert(tiny_dir):
    from ralm.models.causal import load_as_causal_lm

    torch.manual_seed(0)
    return load_as_causal_lm(str(tiny_dir))


def _llama():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(_llama_config()).eval()


def _llama_config(**sizes):
    """The config of a random Llama (testkit's TINY_DECODER, `sizes` overriding) on 120 tokens, 64 positions."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=120, **{**TINY_DECODER, **sizes}, max_position_embeddings=64, attn_implementation="sdpa"
    )


@pytest.fixture(params=["bert", "llama"])
def model(request, tiny_dir):
    from ralm.surealm.model import SurealmConfig, SurealmLM

    bb = _bert(tiny_dir) if request.param == "bert" else _llama()
    torch.manual_seed(1)
    return _awake(SurealmLM(bb, SurealmConfig(pathway="self", k=2, delta=2, mem_dim=16)).eval())


def _awake(m):
    """Give the memory norms random gains (they start at 0: memory inert) so memory content matters."""
    with torch.no_grad():
        m.key_norm.weight.uniform_(0.5, 1.5)
        m.value_norm.weight.uniform_(0.5, 1.5)
    return m


def _memory(B, n_blocks, K, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn((B, n_blocks * K, d), generator=g)
    values = torch.randn((B, n_blocks * K, d), generator=g)
    blk = torch.arange(1, n_blocks + 1).repeat_interleave(K)[None].repeat(B, 1)
    return keys, values, blk


def test_without_memory_the_model_is_its_plain_causal_backbone(model):
    ids = torch.randint(5, 100, (2, 6))
    am = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    with torch.no_grad():
        got = model(ids, am)
        want = model.backbone(input_ids=ids, attention_mask=am).logits
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1, :4], want[1, :4], atol=1e-5, rtol=1e-5)


def test_each_position_sees_exactly_the_blocks_fetched_so_far(model):
    """delta=2: position t may use blocks j <= t // 2; changing block 2 moves positions >= 4 only."""
    ids = torch.randint(5, 100, (1, 7))  # N = 6 words -> 3 blocks
    keys, values, blk = _memory(1, 3, 2)
    with torch.no_grad():
        base = model(ids, None, keys, values, blk)
        k2, v2 = keys.clone(), values.clone()
        k2[:, 2:4] += 3.0  # block 2 (slots 2, 3)
        v2[:, 2:4] -= 3.0
        moved = model(ids, None, k2, v2, blk)
        no_mem = model(ids, None)
    diff = (moved - base).abs().amax(-1)[0]
    assert torch.all(diff[:4] < 1e-5) and torch.all(diff[4:] > 1e-4)
    d0 = (base - no_mem).abs().amax(-1)[0]
    assert torch.all(d0[:2] < 1e-5) and torch.all(d0[2:] > 1e-4)  # block 1 arrives at t = 2


def test_with_a_window_of_one_a_position_reads_only_its_latest_block():
    """One-layer Llama (nothing passes between positions after the memory), delta=2: block 2
    reaches positions 4..7 under eq. 6, but only 4 and 5 with a window of 1 (block 3 arrives at 6)."""
    from transformers import LlamaForCausalLM

    from ralm.surealm.model import SurealmConfig, SurealmLM

    torch.manual_seed(0)
    cfg = _llama_config(num_hidden_layers=1)
    ids = torch.randint(5, 100, (1, 8))  # N = 7 words -> 3 blocks (t = 2, 4, 6)
    keys, values, blk = _memory(1, 3, 2)
    k2, v2 = keys.clone(), values.clone()
    k2[:, 2:4] += 3.0  # block 2
    v2[:, 2:4] -= 3.0
    reach = {}
    for window in (None, 1):
        m = _awake(
            SurealmLM(
                LlamaForCausalLM(cfg).eval(),
                SurealmConfig(pathway="self", k=2, delta=2, mem_dim=16, memory_window=window),
            )
        )
        with torch.no_grad():
            diff = (m(ids, None, k2, v2, blk) - m(ids, None, keys, values, blk)).abs().amax(-1)[0]
        reach[window] = [t for t in range(8) if diff[t] > 1e-5]
    assert reach == {None: [4, 5, 6, 7], 1: [4, 5]}


def test_memory_order_within_visible_blocks_does_not_matter(model):
    ids = torch.randint(5, 100, (1, 5))
    keys, values, blk = _memory(1, 2, 2)
    perm = torch.tensor([1, 0, 3, 2])
    with torch.no_grad():
        a = model(ids, None, keys, values, blk)
        b = model(ids, None, keys[:, perm], values[:, perm], blk[:, perm])
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_memory_starts_with_zero_keys_and_values(tiny_dir):
    from ralm.surealm.model import SurealmConfig, SurealmLM

    m = SurealmLM(_llama(), SurealmConfig(pathway="self", k=2, delta=1, mem_dim=16)).eval()
    keys, values, blk = _memory(1, 2, 2)
    cache = m.memory_cache(keys, values, blk)
    for i in range(len(m.adapter)):
        k, v = cache.layers[i].keys, cache.layers[i].values
        assert k.shape == (1, 2, 4, 8) and not k.any() and not v.any()
    m.train()
    ids = torch.randint(5, 100, (1, 5))
    m(ids, None, keys, values, blk).logsumexp(-1).sum().backward()
    assert m.key_norm.weight.grad.abs().sum() > 0 and m.value_norm.weight.grad.abs().sum() > 0


def test_gradients_reach_memory_projections_and_backbone(model):
    ids = torch.randint(5, 100, (2, 5))
    keys, values, blk = _memory(2, 2, 2)
    model.train()
    model(ids, None, keys, values, blk).logsumexp(-1).sum().backward()
    for name in ("key_proj.weight", "value_proj.weight", "key_norm.weight", "value_norm.weight"):
        assert dict(model.named_parameters())[name].grad.abs().sum() > 0, name
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.backbone.parameters())


def test_save_and_load_give_the_same_logits(tmp_path, tiny_dir):
    from ralm.models.tokenizers import load_lm_tokenizer
    from ralm.surealm.model import SurealmConfig, SurealmLM

    tok, _ = load_lm_tokenizer(str(tiny_dir))
    m = _awake(SurealmLM(_bert(tiny_dir), SurealmConfig(pathway="self", k=2, delta=1, mem_dim=16)).eval())
    m.save(tmp_path / "m", tok)
    m2, tok2 = SurealmLM.load(tmp_path / "m")
    ids = torch.randint(5, 100, (1, 4))
    keys, values, blk = _memory(1, 3, 2)
    with torch.no_grad():
        torch.testing.assert_close(m(ids, None, keys, values, blk), m2(ids, None, keys, values, blk))
    assert tok2("hello world")["input_ids"] == tok("hello world")["input_ids"]


def test_identity_memory_init_feeds_the_layer_normed_embeddings(tiny_dir):
    from ralm.errors import RalmError
    from ralm.surealm.model import SurealmConfig, SurealmLM

    bb = _llama()  # hidden size 32
    m = SurealmLM(bb, SurealmConfig(pathway="self", k=2, delta=1, mem_dim=32, memory_init="identity")).eval()
    x = torch.randn(2, 3, 32)
    ref = torch.nn.functional.layer_norm(x, (32,), eps=m.key_norm.eps)  # gain 1, bias 0
    torch.testing.assert_close(m.key_norm(m.key_proj(x)), ref)
    torch.testing.assert_close(m.value_norm(m.value_proj(x)), ref)
    with pytest.raises(RalmError, match="embedding size \\(16\\) to equal the LM's hidden size \\(32\\)"):
        SurealmLM(_llama(), SurealmConfig(pathway="self", k=2, delta=1, mem_dim=16, memory_init="identity"))
    with pytest.raises(RalmError, match="memory_init='ones'"):
        SurealmConfig(memory_init="ones")


def test_memory_gain_sets_the_starting_gain_of_both_memory_norms():
    from ralm.surealm.model import SurealmConfig, SurealmLM

    x = torch.randn(2, 3, 32)
    for init, gain, want in (
        ("zero", None, 0.0),
        ("identity", None, 1.0),
        ("zero", 0.1, 0.1),
        ("identity", 0.5, 0.5),
    ):
        torch.manual_seed(0)
        m = SurealmLM(
            _llama(), SurealmConfig(pathway="self", k=2, mem_dim=32, memory_init=init, memory_gain=gain)
        )
        for norm, proj in ((m.key_norm, m.key_proj), (m.value_norm, m.value_proj)):
            assert torch.equal(norm.weight, torch.full((32,), want))
            ref = want * torch.nn.functional.layer_norm(proj(x), (32,), eps=norm.eps)
            torch.testing.assert_close(norm(proj(x)), ref)


def test_cache_argument_follows_the_backbone_forward_signature():
    from ralm.surealm.model import cache_argument

    class Old(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None):
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, cache=None, use_cache=None):
            return input_ids

    assert cache_argument(Old()) == "past_key_values"
    assert cache_argument(New()) == "cache"
