"""Issue 46's memory pathways: inert at step 0 (outputs, not keys), the gated cross-attention against a
naive per-position loop, equation 6 through the new pathway, and the learned memory-logit offset."""

from __future__ import annotations

import math

import pytest
import torch
from test_surealm_model import _bert, _llama, _memory

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(kind, tiny_dir, **cfg):
    from ralm.surealm.model import SurealmConfig, SurealmLM

    bb = _bert(tiny_dir) if kind == "bert" else _llama()
    torch.manual_seed(1)
    return SurealmLM(bb, SurealmConfig(k=2, delta=cfg.pop("delta", 1), mem_dim=16, **cfg)).eval()


@pytest.mark.parametrize("kind", ["bert", "llama"])
@pytest.mark.parametrize("pathway", [dict(pathway="cross"), dict(pathway="self", memory_bias=-30.0)])
def test_step0_outputs_equal_the_baseline(kind, pathway, tiny_dir):
    """At step 0 the logits with retrieved memory equal the backbone's own, to 1e-5 (not just zero keys)."""
    m = _model(kind, tiny_dir, **pathway)
    with torch.no_grad():  # memory that would matter if it were let in
        m.key_norm.weight.uniform_(0.5, 1.5)
        m.value_norm.weight.uniform_(0.5, 1.5)
    ids = torch.randint(5, 100, (2, 7))
    keys, values, blk = _memory(2, 6, 2)
    with torch.no_grad():
        got = m(ids, None, keys * 5, values * 5, blk)
        want = m.backbone(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_today_self_pathway_is_not_inert(tiny_dir):
    """The self pathway without the offset dilutes the backbone at step 0: the reason for the others."""
    m = _model("llama", tiny_dir, pathway="self")
    ids = torch.randint(5, 100, (1, 7))
    keys, values, blk = _memory(1, 6, 2)
    with torch.no_grad():
        assert not torch.allclose(
            m(ids, None, keys, values, blk), m.backbone(input_ids=ids).logits, atol=1e-3
        )


def test_cross_attention_equals_a_naive_loop():
    """One block with random weights and an open gate against attention written out position by position."""
    from ralm.surealm.cross_attention import GatedCrossAttention
    from ralm.surealm.model import memory_mask

    torch.manual_seed(0)
    H, heads, T, K, delta = 8, 2, 6, 2, 2
    blk_n = (T - 1) // delta
    block = GatedCrossAttention(H, heads).eval()
    with torch.no_grad():
        block.gate.fill_(0.7)
    h = torch.randn(1, T, H)
    mk, mv = torch.randn(1, blk_n * K, H), torch.randn(1, blk_n * K, H)
    blk = torch.arange(1, blk_n + 1).repeat_interleave(K)[None]
    mask = memory_mask(torch.ones(1, T, dtype=torch.long), blk, delta)
    with torch.no_grad():
        got = block(h, mk, mv, mask)
        x = block.norm(h)[0]
        d = H // heads
        want = torch.zeros(T, H)
        for t in range(T):
            slots = [j for j in range(blk_n * K) if 1 <= int(blk[0, j]) <= t // delta]
            keys = [block.k(mk[0, j]) for j in slots] + [block.k(x[s]) for s in range(t + 1)]
            vals = [block.v(mv[0, j]) for j in slots] + [block.v(x[s]) for s in range(t + 1)]
            q = block.q(x[t])
            out = []
            for hd in range(heads):
                sl = slice(hd * d, (hd + 1) * d)
                w = torch.softmax(torch.stack([q[sl] @ k[sl] for k in keys]) / math.sqrt(d), 0)
                out.append(sum(wi * v[sl] for wi, v in zip(w, vals, strict=True)))
            want[t] = h[0, t] + math.tanh(0.7) * block.o(torch.cat(out))
    torch.testing.assert_close(got[0], want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_equation_6_holds_through_the_cross_pathway(kind, tiny_dir):
    """delta=2, gates open: changing block 2 moves positions >= 4 only; no position sees a neighbour
    fetched for a prefix longer than its own."""
    m = _model(kind, tiny_dir, pathway="cross", delta=2)
    with torch.no_grad():
        for b in m.cross:
            b.gate.fill_(1.0)
    ids = torch.randint(5, 100, (1, 7))
    keys, values, blk = _memory(1, 3, 2)
    with torch.no_grad():
        base = m(ids, None, keys, values, blk)
        k2, v2 = keys.clone(), values.clone()
        k2[:, 2:4] += 3.0
        v2[:, 2:4] -= 3.0
        moved = m(ids, None, k2, v2, blk)
    diff = (base - moved).abs().amax(-1)[0]
    assert float(diff[:4].max()) == 0.0 and bool((diff[4:] > 1e-4).all())


def test_cross_gates_and_memory_bias_learn(tiny_dir):
    m = _model("llama", tiny_dir, pathway="cross").train()
    ids = torch.randint(5, 100, (2, 5))
    keys, values, blk = _memory(2, 4, 2)
    m(ids, None, keys, values, blk).logsumexp(-1).sum().backward()
    assert all(float(b.gate.grad.abs()) > 0 for b in m.cross) and m.gates() == [0.0, 0.0]
    s = _model("llama", tiny_dir, pathway="self", memory_bias=-2.0).train()
    s(ids, None, keys, values, blk).logsumexp(-1).sum().backward()
    assert s.memory_bias.grad is not None and float(s.memory_bias.grad.abs()) > 0


def test_cross_pathway_saves_and_loads(tmp_path, tiny_dir):
    from ralm.models.tokenizers import load_lm_tokenizer
    from ralm.surealm.model import SurealmLM

    tok, _ = load_lm_tokenizer(str(tiny_dir))
    m = _model("bert", tiny_dir, pathway="cross")
    with torch.no_grad():
        for b in m.cross:
            b.gate.fill_(0.5)
    m.save(tmp_path / "m", tok)
    m2, _ = SurealmLM.load(tmp_path / "m")
    assert m2.config.pathway == "cross" and m2.gates() == pytest.approx([math.tanh(0.5)] * len(m.cross))
    ids = torch.randint(5, 100, (1, 4))
    keys, values, blk = _memory(1, 3, 2)
    with torch.no_grad():
        torch.testing.assert_close(m(ids, None, keys, values, blk), m2(ids, None, keys, values, blk))


def test_memory_bias_is_for_the_self_pathway():
    from ralm.errors import RalmError
    from ralm.surealm.model import SurealmConfig

    with pytest.raises(RalmError, match="memory_bias"):
        SurealmConfig(pathway="cross", memory_bias=-30.0)
    with pytest.raises(RalmError, match="pathway"):
        SurealmConfig(pathway="both")


def test_random_neighbours_come_from_training_entries_never_the_own_sentence(tiny_store, tiny_dir):
    import numpy as np

    from ralm.models.tokenizers import load_lm_tokenizer
    from ralm.surealm.data import SentenceBatcher
    from ralm.surealm.datastore import Datastore

    store = Datastore(tiny_store)
    tok, _ = load_lm_tokenizer(str(tiny_dir))
    train_sids = set(store.split_ids("train").tolist())
    rnd = SentenceBatcher(store, tok, k=3, delta=1, neighbours="random")
    ret = SentenceBatcher(store, tok, k=3, delta=1)
    null = SentenceBatcher(store, tok, k=3, delta=1, neighbours="null")
    drawn = []
    for split in ("train", "valid", "test"):
        for sid in store.split_ids(split).tolist():
            a, b = rnd.batch([sid]), rnd.batch([sid])
            ent = a["mem_entries"][0]
            real = ent[ent >= 0].numpy()
            assert len(real) == 3 * len(store.tokens(sid))  # K per block, one block per word
            sents = np.asarray(store.entry_sid)[real]
            assert (sents != sid).all() and set(sents.tolist()) <= train_sids
            assert torch.equal(a["mem_entries"], b["mem_entries"])  # the same draw every time
            assert torch.equal(a["mem_block"], ret.batch([sid])["mem_block"])
            drawn.append(real)
    assert len({int(e) for r in drawn for e in r}) > 3  # not a fixed handful
    n = null.batch(store.split_ids("valid")[:2].tolist())
    r = ret.batch(store.split_ids("valid")[:2].tolist())
    assert not n["mem_keys"].any() and not n["mem_values"].any() and r["mem_keys"].any()
    assert torch.equal(n["mem_block"], r["mem_block"])


def test_whole_suffix_pools_its_first_m_tokens_read_in_context(tiny_dir):
    """The authors' suffix encoding: the encoder reads w_{i+1}..w_N, the first m tokens are pooled."""
    import numpy as np

    from ralm.surealm.embedder import SpanEmbedder

    emb = SpanEmbedder(str(tiny_dir), autocast="off")
    text = "i would like to book a room"
    enc = emb.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    al = emb.align(text, np.asarray(enc["offset_mapping"]))  # one tokenizer: LM tokens = encoder tokens
    tok, pos, pooled = al.suffix_whole(2, 3)  # i = 2: reads w_3..w_7, pools w_3..w_5
    assert tok == ids[2:] and pos == list(range(3, len(ids) + 1)) and pooled == 3
    got = emb.embed([(tok, pos, pooled)])[0]
    with torch.no_grad():
        x = torch.tensor([[emb.cls_id, *tok, emb.sep_id]])
        p = torch.tensor([[0, *pos, pos[-1] + 1]])
        h = emb.tower.model(input_ids=x, attention_mask=torch.ones_like(x), position_ids=p).last_hidden_state[
            0
        ]
        want = h[1:4].mean(0)
        if emb.tower.normalize:
            want = torch.nn.functional.normalize(want, dim=-1)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
    short = emb.embed([al.suffix(2, 3)])[0]  # today's: the encoder reads w_3..w_5 alone
    assert not np.allclose(got, short, atol=1e-4)
    mixed = emb.embed([al.suffix(2, 3), (tok, pos, pooled)])  # rows with and without a pool count
    np.testing.assert_allclose(mixed[0], short, atol=1e-5)
    np.testing.assert_allclose(mixed[1], got, atol=1e-5)


def test_datastore_with_whole_suffixes(tmp_path, tiny_dir, dialogue_file, tiny_store):
    import numpy as np

    from ralm.surealm.datastore import Datastore
    from ralm.surealm.datastore_build import DatastoreConfig, build_datastore
    from ralm.surealm.sentences import read_sentences

    sents = read_sentences([dialogue_file], fractions=(0.2, 0.2), seed=0)
    cfg = DatastoreConfig(lm=str(tiny_dir), encoder=str(tiny_dir), m=3, k=3, suffix="whole", autocast="off")
    whole = Datastore(build_datastore(sents, tmp_path / "w", cfg, progress=False, log=lambda m: None))
    plain = Datastore(tiny_store)
    assert whole.manifest["suffix"] == "whole" and whole.fingerprint != plain.fingerprint
    assert np.array_equal(np.asarray(whole.keys), np.asarray(plain.keys))  # prefixes as before
    assert not np.allclose(
        np.asarray(whole.values, dtype=np.float32), np.asarray(plain.values, dtype=np.float32)
    )


def test_exact_topk_torch_equals_the_faiss_search_with_exclusions():
    import numpy as np

    from ralm.retrieval.index.dense import DenseIndex
    from ralm.surealm.datastore_build import exact_topk_torch

    rng = np.random.default_rng(0)
    keys = rng.standard_normal((300, 16)).astype(np.float32)
    q = rng.standard_normal((40, 16)).astype(np.float32)
    ex = np.full((40, 5), -1, dtype=np.int64)
    for i in range(40):
        ex[i, : i % 6] = rng.choice(300, size=i % 6, replace=False)[: min(5, i % 6)]
    index = DenseIndex.build(keys, kind="flat", docstore_fingerprint="x", encoder_fingerprint="y")
    want = index.search(q, 7, exclude_ids=ex).ids
    got = exact_topk_torch(torch.from_numpy(keys), q, 7, ex, chunk=16)
    assert np.array_equal(got, want)


def test_slot_dropout_nulls_training_slots_anew_at_each_read_and_never_evaluation_ones(tiny_store, tiny_dir):
    import numpy as np

    from ralm.errors import RalmError
    from ralm.models.tokenizers import load_lm_tokenizer
    from ralm.surealm.data import SentenceBatcher
    from ralm.surealm.datastore import Datastore
    from ralm.surealm.train import TrainConfig

    store = Datastore(tiny_store)
    tok, _ = load_lm_tokenizer(str(tiny_dir))
    sids = store.split_ids("train").tolist()
    plain = SentenceBatcher(store, tok, k=3, delta=1)
    drop = SentenceBatcher(store, tok, k=3, delta=1, slot_dropout=0.5)
    ref = plain.batch(sids)
    for key in ("mem_keys", "mem_values", "mem_entries", "mem_block"):  # evaluation batches: untouched
        assert torch.equal(drop.batch(sids)[key], ref[key])
    real = ref["mem_entries"] >= 0
    a, b = drop.batch(sids, train=True), drop.batch(sids, train=True)
    for got in (a, b):
        gone = got["mem_entries"] == -2
        assert not (gone & ~real).any()  # padding slots stay padding
        assert torch.equal(got["mem_entries"][real & ~gone], ref["mem_entries"][real & ~gone])
        assert not got["mem_keys"][gone].any() and not got["mem_values"][gone].any()
        assert torch.equal(got["mem_keys"][~gone], ref["mem_keys"][~gone])
        assert torch.equal(got["mem_block"], ref["mem_block"])  # a dropped slot keeps its block
        share = float(gone.sum() / real.sum())
        n = int(real.sum())
        assert abs(share - 0.5) < 4 * np.sqrt(0.25 / n), (share, n)
    assert not torch.equal(a["mem_entries"], b["mem_entries"])  # drawn anew at every read
    assert torch.equal(plain.batch(sids, train=True)["mem_entries"], ref["mem_entries"])  # p = 0
    with pytest.raises(RalmError, match="must be in"):
        SentenceBatcher(store, tok, k=3, delta=1, slot_dropout=1.0)
    with pytest.raises(RalmError, match="memory_dropout=-0.1"):
        TrainConfig(memory_dropout=-0.1).check()


def test_pathway_has_one_default_and_old_configs_stay_self():
    """SurealmConfig, TrainConfig and `ralm surealm train` read one default (cross: inert at step 0);
    a config saved before the setting existed has no `pathway` and loads as self."""
    import dataclasses

    from ralm.cli import build_parser
    from ralm.surealm.model import SurealmConfig
    from ralm.surealm.options import DEFAULT_PATHWAY
    from ralm.surealm.train import TrainConfig

    assert DEFAULT_PATHWAY == "cross"
    assert SurealmConfig().pathway == DEFAULT_PATHWAY
    assert {f.name: f.default for f in dataclasses.fields(TrainConfig)}["pathway"] == DEFAULT_PATHWAY
    args = build_parser().parse_args(["surealm", "train", "STORE", "--out", "OUT"])
    assert args.pathway == DEFAULT_PATHWAY
    old = {k: v for k, v in dataclasses.asdict(SurealmConfig()).items() if k != "pathway"}
    assert SurealmConfig.from_dict(old).pathway == "self"
    assert SurealmConfig.from_dict({**old, "pathway": "cross"}).pathway == "cross"
