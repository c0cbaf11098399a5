"""The LUKE/DaLUKE model against references: HF LukeModel (l = L), a naive loop of the seed's
equations (l < L), BERT (E = 0), the matrix table's parameter count; masks; init; save/load."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import LukeConfig as HFLukeConfig
from transformers import LukeForMaskedLM, LukeModel

from ralm.errors import RalmError
from ralm.luke.attention import EntityAwareSelfAttention
from ralm.luke.config import LukeConfig
from ralm.luke.export import from_hf
from ralm.luke.io import load_model, save_model
from ralm.luke.model import (
    EntityAwareModel,
    LukeForPretraining,
    LukeForSpanClassification,
    masked_cross_entropy,
)

pytestmark = pytest.mark.usefixtures("one_thread")

TOL = 1e-5


def tiny_hf_config(**kw) -> HFLukeConfig:
    base = dict(
        vocab_size=100,
        entity_vocab_size=20,
        hidden_size=32,
        entity_emb_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=65,
        type_vocab_size=2,
        use_entity_aware_attention=True,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    base.update(kw)
    return HFLukeConfig(**base)


def randomise(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter (biases and LayerNorms too) random, so no mapping error can hide behind a 0 or 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def batch(
    vocab=100, n_ent=20, lengths=(9, 6, 4), spans=((0, 2), (3, 5), (1, 1), (4, 8)), n_real=(4, 2, 1), M=6
):
    """Right-padded words (ids >= 1, pad 0) and entities; entity j of row b is real iff j < n_real[b]."""
    g = torch.Generator().manual_seed(1)
    B, T, E = len(lengths), max(lengths), len(spans)
    ids = torch.randint(1, vocab, (B, T), generator=g)
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, n:] = 0
        mask[b, :n] = 1
    ent = torch.randint(3, n_ent, (B, E), generator=g)
    ent_mask = torch.zeros(B, E, dtype=torch.long)
    pos = torch.full((B, E, M), -1)
    for b in range(B):
        for j, (s, e) in enumerate(spans):
            if j < n_real[b]:
                s, e = min(s, lengths[b] - 1), min(e, lengths[b] - 1)
                ent_mask[b, j] = 1
                pos[b, j, : e - s + 1] = torch.arange(s, e + 1)
            else:
                ent[b, j] = 0
    return ids, mask, ent, ent_mask, pos


def assert_close(a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> None:
    diff = (a - b).abs().max().item()
    assert diff <= tol, f"max abs diff {diff}"


# ---------------------------------------------------------------- HF equivalence (l = L)


def test_word_and_entity_outputs_equal_hf_luke_model():
    hf = randomise(LukeModel(tiny_hf_config()))
    ours = from_hf(hf).eval()
    assert isinstance(ours, EntityAwareModel) and ours.config.is_luke
    ids, mask, ent, ent_mask, pos = batch()
    ett = torch.tensor([[0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]])  # entity token types too
    tt = torch.zeros_like(ids)
    tt[0, 5:] = 1
    with torch.no_grad():
        ref = hf(
            input_ids=ids,
            attention_mask=mask,
            token_type_ids=tt,
            entity_ids=ent,
            entity_attention_mask=ent_mask,
            entity_position_ids=pos,
            entity_token_type_ids=ett,
        )
        w, e = ours(ids, mask, ent, ent_mask, pos, token_type_ids=tt, entity_token_type_ids=ett)
    real_w, real_e = mask.bool(), ent_mask.bool()
    assert w.shape == (3, 9, 32) and e.shape == (3, 4, 32)
    assert_close(w[real_w], ref.last_hidden_state[real_w])
    assert_close(e[real_e], ref.entity_last_hidden_state[real_e])
    assert w.abs().max() > 0.1  # not a degenerate all-zero comparison


def test_no_entities_equals_hf_word_only():
    hf = randomise(LukeModel(tiny_hf_config()), seed=3)
    ours = from_hf(hf).eval()
    ids, mask, *_ = batch()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        w, e = ours(
            ids, mask, torch.zeros(3, 0, dtype=torch.long), None, torch.zeros(3, 0, 6, dtype=torch.long)
        )
        w2, _ = ours(ids, mask, None, None, None)
    assert e.shape == (3, 0, 32)
    assert_close(w[mask.bool()], ref[mask.bool()])
    assert torch.equal(w, w2)


def test_masked_lm_logits_and_losses_equal_hf():
    hf = randomise(LukeForMaskedLM(tiny_hf_config()), seed=5)
    with torch.no_grad():  # HF keeps its decoders untied after randomise; tie them as ours always are
        hf.lm_head.decoder.weight.copy_(hf.luke.embeddings.word_embeddings.weight)
        hf.lm_head.decoder.bias.copy_(hf.lm_head.bias)
        hf.entity_predictions.decoder.weight.copy_(hf.luke.entity_embeddings.entity_embeddings.weight)
    ours = from_hf(hf).eval()
    assert isinstance(ours, LukeForPretraining)
    ids, mask, ent, ent_mask, pos = batch()
    mlm = torch.full_like(ids, -100)
    mlm[0, 2], mlm[1, 0], mlm[2, 3] = 7, 8, 9
    ent_labels = torch.where(ent_mask.bool(), ent, torch.full_like(ent, -100))
    with torch.no_grad():
        ref = hf(
            input_ids=ids,
            attention_mask=mask,
            entity_ids=ent,
            entity_attention_mask=ent_mask,
            entity_position_ids=pos,
            labels=mlm,
            entity_labels=ent_labels,
        )
        out = ours(ids, mask, ent, ent_mask, pos, mlm_labels=mlm, entity_labels=ent_labels)
    assert out["mlm_logits"].shape == (3, 9, 100) and out["entity_logits"].shape == (3, 4, 20)
    assert_close(out["mlm_logits"][mask.bool()], ref.logits[mask.bool()], 1e-4)
    assert_close(out["entity_logits"][ent_mask.bool()], ref.entity_logits[ent_mask.bool()], 1e-4)
    assert_close(out["mlm_loss"], ref.mlm_loss)
    assert_close(out["mep_loss"], ref.mep_loss)
    assert_close(out["loss"], ref.loss)
    with torch.no_grad():  # scoring only the labelled positions: the same rows, the same losses
        sparse = ours(
            ids, mask, ent, ent_mask, pos, mlm_labels=mlm, entity_labels=ent_labels, only_labelled=True
        )
    assert sparse["mlm_logits"].shape == (3, 100) and sparse["entity_logits"].shape == (7, 20)
    assert_close(sparse["mlm_logits"], out["mlm_logits"][mlm != -100])
    assert_close(sparse["entity_logits"], out["entity_logits"][ent_labels != -100])
    assert_close(sparse["loss"], out["loss"])


# ---------------------------------------------------------------- l < L: the seed's equations by hand


def naive_attention(att: EntityAwareSelfAttention, words, entities, key_mask, heads):
    """The module docstring's four score equations and two output equations, one token and head at a time."""
    lin = lambda m, x: m.weight @ x + m.bias  # noqa: E731
    L, le = words.shape[-1], entities.shape[-1]
    dL, dl = L // heads, le // heads
    T, E = words.shape[1], entities.shape[1]
    out_w, out_e = torch.zeros(T, L), torch.zeros(E, le)
    w, e = words[0], entities[0]
    for h in range(heads):
        sw, se = slice(h * dL, (h + 1) * dL), slice(h * dl, (h + 1) * dl)
        for i in range(T + E):
            is_word = i < T
            x = w[i] if is_word else e[i - T]
            scores, values = [], []
            for k in range(T + E):
                if not key_mask[0, k]:
                    continue
                if k < T:
                    key = lin(att.key, w[k])[sw]
                    q = lin(att.query, x)[sw] if is_word else lin(att.e2w_query, x)[sw]
                    scores.append(q @ key / math.sqrt(dL))
                    values.append(lin(att.value, w[k])[sw] if is_word else lin(att.w2e_value, w[k])[se])
                else:
                    key = lin(att.entity_key, e[k - T])[se]
                    q = lin(att.w2e_query, x)[se] if is_word else lin(att.e2e_query, x)[se]
                    scores.append(q @ key / math.sqrt(dl))
                    values.append(
                        lin(att.e2w_value, e[k - T])[sw] if is_word else lin(att.e2e_value, e[k - T])[se]
                    )
            a = torch.softmax(torch.stack(scores), 0)
            ctx = sum(ai * v for ai, v in zip(a, values, strict=True))
            if is_word:
                out_w[i, sw] = ctx
            else:
                out_e[i - T, se] = ctx
    return out_w, out_e


def test_reduced_attention_matches_the_seed_equations(tiny_luke_config):
    cfg = tiny_luke_config(hidden_size=16, entity_hidden_size=8, num_attention_heads=2)
    torch.manual_seed(0)
    att = randomise(EntityAwareSelfAttention(cfg))
    words, entities = torch.randn(1, 4, 16), torch.randn(1, 3, 8)
    key_mask = torch.tensor([[True, True, True, False, True, True, False]])
    with torch.no_grad():
        w, e = att(words, entities, key_mask)
        rw, re_ = naive_attention(att, words, entities, key_mask, heads=2)
    assert w.shape == (1, 4, 16) and e.shape == (1, 3, 8)
    assert_close(w[0], rw)
    assert_close(e[0], re_)


# ---------------------------------------------------------------- parameter counts


def table_param_count(V, P, Tt, L, le, H, I, Ie, Ne, emb, layers):  # noqa: E741
    """The seed's matrix table (each matrix with its bias) plus the rest of the model, by hand."""
    attention = (
        (L * L + L)  # Q
        + (L * le + le)  # Q_w2e: L x l
        + (le * L + L)  # Q_e2w: l x L
        + (le * le + le)  # Q_e2e: l x l
        + (L * L + L)  # K
        + (le * le + le)  # K_e: l x l
        + (L * L + L)  # V
        + (L * le + le)  # V_w2e: L x l
        + (le * L + L)  # V_e2w: l x L
        + (le * le + le)  # V_e2e: l x l
    )
    word_rest = (L * L + L + 2 * L) + (L * I + I + I * L + L + 2 * L)  # attention output + LN, FFN + LN
    entity_rest = (le * le + le + 2 * le) + (le * Ie + Ie + Ie * le + le + 2 * le)
    per_layer = attention + word_rest + entity_rest
    word_emb = V * L + P * L + Tt * L + 2 * L
    entity_emb = Ne * emb + (emb * le if emb != le else 0) + P * le + Tt * le + 2 * le
    mlm_head = L * L + L + 2 * L + V  # decoder tied to the word embeddings
    entity_head = le * emb + emb + 2 * emb + Ne  # decoder tied to the entity table
    return layers * per_layer + word_emb + entity_emb + mlm_head + entity_head


@pytest.mark.parametrize(
    "L,le,H,I,Ie,emb",
    [(32, 16, 4, 64, 24, 16), (48, 12, 6, 96, 40, 20)],
)
def test_reduced_parameter_count_is_the_table_formula(tiny_luke_config, L, le, H, I, Ie, emb):  # noqa: E741
    cfg = tiny_luke_config(
        hidden_size=L,
        entity_hidden_size=le,
        num_attention_heads=H,
        intermediate_size=I,
        entity_intermediate_size=Ie,
        entity_emb_size=emb,
        num_hidden_layers=3,
    )
    n = sum(p.numel() for p in LukeForPretraining(cfg).parameters())
    assert n == table_param_count(100, 64, 2, L, le, H, I, Ie, 20, emb, 3)


def test_luke_parameter_count_equals_hf():
    hc = tiny_hf_config()
    hf = sum(p.numel() for p in LukeModel(hc, add_pooling_layer=False).parameters())
    ours = sum(p.numel() for p in from_hf(LukeModel(hc)).parameters())
    assert ours == hf - 2 * 1 * 32  # HF's word and entity position tables each have pad + 1 = 1 extra row


# ---------------------------------------------------------------- masks


@pytest.mark.parametrize("le", [32, 16])
def test_padding_entities_and_words_change_nothing(tiny_luke_config, le):
    torch.manual_seed(0)
    model = randomise(EntityAwareModel(tiny_luke_config(entity_hidden_size=le)))
    ids, mask, ent, ent_mask, pos = batch()
    with torch.no_grad():
        w, e = model(ids, mask, ent, ent_mask, pos)
        ent2, pos2, ids2 = ent.clone(), pos.clone(), ids.clone()
        ent2[1, 2:] = torch.tensor([5, 17])  # padded entities of row 1 get real ids and positions
        pos2[1, 2:, :3] = torch.tensor([0, 1, 2])
        ids2[2, 4:] = 42  # padded words of row 2 get a real id
        w2, e2 = model(ids2, mask, ent2, ent_mask, pos2)
        ent3 = ent.clone()
        ent3[1, 0] = 11  # a real entity: must change the words (the test can fail)
        w3, _ = model(ids, mask, ent3, ent_mask, pos)
    real = ent_mask.bool()
    assert torch.allclose(w[mask.bool()], w2[mask.bool()], atol=1e-6)
    assert torch.allclose(e[real], e2[real], atol=1e-6)
    assert (w3[1, :6] - w[1, :6]).abs().max() > 1e-4


# ---------------------------------------------------------------- from_bert on the bundled MiniLM


def test_from_bert_word_stream_is_exactly_bert(minilm_dir, bert_tokenizer):
    from transformers import AutoModel

    from ralm.luke.init import from_bert

    enc = bert_tokenizer(
        ["Oslo is the capital of Norway.", "A short one."], padding=True, return_tensors="pt"
    )
    bert = AutoModel.from_pretrained(str(minilm_dir), local_files_only=True).eval()
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        ref = bert(**enc).last_hidden_state
        for le in (384, 192):
            pre = from_bert(
                minilm_dir, entity_vocab_size=10, entity_hidden_size=le, entity_emb_size=64
            ).eval()
            w, e = pre.luke(enc["input_ids"], enc["attention_mask"], None, None, None, enc["token_type_ids"])
            assert_close(w[real], ref[real])
            assert e.shape == (2, 0, le)
            att = pre.luke.encoder.layer[3].attention.self
            if (
                le == 384
            ):  # LUKE's init: the extra queries are copies of Q, entity tables copies of the word ones
                for q in (att.w2e_query, att.e2w_query, att.e2e_query):
                    assert torch.equal(q.weight, att.query.weight) and torch.equal(q.bias, att.query.bias)
                assert torch.equal(
                    pre.luke.entity_embeddings.position_embeddings.weight,
                    bert.embeddings.position_embeddings.weight,
                )
            else:  # documented DaLUKE init: N(0, 0.02) matrices, zero biases, identity LayerNorms
                assert att.w2e_query.weight.shape == (192, 384) and att.e2w_query.weight.shape == (384, 192)
                assert abs(att.entity_key.weight.std().item() - 0.02) < 0.002
                assert torch.count_nonzero(att.e2w_value.bias) == 0
                ln = pre.luke.encoder.layer[0].entity_output.LayerNorm
                assert torch.equal(ln.weight, torch.ones(192)) and torch.equal(ln.bias, torch.zeros(192))
            table = pre.luke.entity_embeddings.entity_embeddings.weight
            assert torch.count_nonzero(table[0]) == 0 and torch.count_nonzero(table[1:]) == table[1:].numel()
    assert pre.ralm_meta["backbone"] == str(minilm_dir)


def test_from_bert_is_deterministic_per_seed(tiny_dir):
    from ralm.luke.init import from_bert

    a = from_bert(tiny_dir, entity_vocab_size=12, entity_hidden_size=32, seed=1)
    b = from_bert(tiny_dir, entity_vocab_size=12, entity_hidden_size=32, seed=1)
    c = from_bert(tiny_dir, entity_vocab_size=12, entity_hidden_size=32, seed=2)
    ka = a.state_dict()
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in ka.items())
    key = "luke.encoder.layer.0.attention.self.entity_key.weight"
    assert not torch.equal(ka[key], c.state_dict()[key])
    assert a.config.entity_intermediate_size == 64  # 128 * 32 / 64


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_from_bert_copies_mlm_head_and_positions(tmp_path, family):
    """BERT-style and RoBERTa-style (positions from pad + 1, the copied table shifted) checkpoints with an
    MLM head: word states and MLM logits equal the original masked-LM model's."""
    from transformers import BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

    from ralm.luke.init import from_bert

    torch.manual_seed(0)
    sizes = dict(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    if family == "roberta":
        cls, hc, pad, P = (
            RobertaForMaskedLM,
            RobertaConfig(**sizes, max_position_embeddings=40, pad_token_id=1),
            1,
            38,
        )
    else:
        cls, hc, pad, P = (
            BertForMaskedLM,
            BertConfig(**sizes, max_position_embeddings=40, pad_token_id=0),
            0,
            40,
        )
    randomise(cls(hc)).save_pretrained(tmp_path / family)
    ref_model = cls.from_pretrained(tmp_path / family).eval()  # what was saved (its tied decoder included)
    pre = from_bert(tmp_path / family, entity_vocab_size=10, entity_emb_size=8).eval()
    assert pre.config.max_position_embeddings == P and pre.config.pad_token_id == pad
    ids = torch.randint(3, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    ids[1, 5:], mask[1, 5:] = pad, 0  # right padding
    with torch.no_grad():
        ref = ref_model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        out = pre(ids, mask, None, None, None)
        w, _ = pre.luke(ids, mask, None, None, None)
    real = mask.bool()
    assert_close(w[real], ref.hidden_states[-1][real])
    assert_close(out["mlm_logits"][real], ref.logits[real], 1e-4)


def test_from_bert_rejects_bad_dirs(tmp_path):
    from ralm.luke.init import from_bert

    with pytest.raises(RalmError, match="no such model directory"):
        from_bert(tmp_path / "nope", entity_vocab_size=10)
    with pytest.raises(RalmError, match="larger than"):
        from_bert(None, entity_vocab_size=10, entity_hidden_size=768)


# ---------------------------------------------------------------- config


def test_config_validation(tiny_luke_config):
    with pytest.raises(RalmError, match="larger than hidden_size"):
        tiny_luke_config(entity_hidden_size=64)
    with pytest.raises(RalmError, match="multiples of num_attention_heads"):
        tiny_luke_config(entity_hidden_size=18)
    with pytest.raises(RalmError, match="must equal intermediate_size"):
        tiny_luke_config(entity_intermediate_size=32)
    cfg = tiny_luke_config(entity_hidden_size=16)
    assert not cfg.is_luke and LukeConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(RalmError, match="unknown key"):
        LukeConfig.from_dict({**cfg.to_dict(), "bogus": 1})


# ---------------------------------------------------------------- losses and the span classifier


def test_masked_cross_entropy_matches_torch_and_is_zero_without_labels():
    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[1, -100, 4], [-100, 0, 2]])
    ref = torch.nn.functional.cross_entropy(logits.view(-1, 5), labels.view(-1), ignore_index=-100)
    assert_close(masked_cross_entropy(logits, labels), ref)
    assert masked_cross_entropy(logits, torch.full((2, 3), -100)).item() == 0.0


def test_span_classifier_features_and_loss(tiny_luke_config):
    torch.manual_seed(0)
    model = randomise(LukeForSpanClassification(tiny_luke_config(entity_hidden_size=16), num_labels=3))
    ids, mask, ent, ent_mask, pos = batch()
    starts = torch.tensor([[0, 3, 1, 4], [0, 3, 0, 0], [0, 0, 0, 0]])
    ends = torch.tensor([[2, 5, 1, 8], [2, 5, 0, 0], [2, 0, 0, 0]])
    labels = torch.tensor(
        [[1, 2, 0, -100], [0, 1, 2, 2], [2, 1, 1, 1]]
    )  # padded entities' labels are ignored
    with torch.no_grad():
        out = model(ids, mask, ent, ent_mask, pos, starts, ends, labels=labels)
        w, e = model.luke(ids, mask, ent, ent_mask, pos)
    b, j = 0, 1
    feat = torch.cat([w[b, starts[b, j]], w[b, ends[b, j]], e[b, j]])
    assert_close(out["logits"][b, j], model.classifier(feat))
    keep = ent_mask.bool() & (labels != -100)
    ref = torch.nn.functional.cross_entropy(out["logits"][keep], labels[keep])
    assert_close(out["loss"], ref)


# ---------------------------------------------------------------- save / load


@pytest.mark.parametrize("le", [32, 16])
def test_save_load_round_trip(tmp_path, tiny_luke_config, le):
    torch.manual_seed(0)
    pre = randomise(LukeForPretraining(tiny_luke_config(entity_hidden_size=le)))
    span = LukeForSpanClassification.from_pretraining(pre, num_labels=5).eval()
    save_model(pre, tmp_path / "pre", extra={"step": 7})
    save_model(span, tmp_path / "span")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left behind
    ids, mask, ent, ent_mask, pos = batch()
    starts, ends = torch.zeros(3, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long)
    with torch.no_grad():
        pre2 = load_model(tmp_path / "pre")
        a, b = pre(ids, mask, ent, ent_mask, pos), pre2(ids, mask, ent, ent_mask, pos)
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert pre2.ralm_meta["step"] == 7 and pre2.config == pre.config
        span2 = load_model(tmp_path / "span", LukeForSpanClassification)
        x, y = (
            span(ids, mask, ent, ent_mask, pos, starts, ends),
            span2(ids, mask, ent, ent_mask, pos, starts, ends),
        )
        assert torch.equal(x["logits"], y["logits"]) and span2.num_labels == 5
        enc = load_model(tmp_path / "pre", EntityAwareModel)
        assert torch.equal(enc(ids, mask, ent, ent_mask, pos)[1], pre.luke(ids, mask, ent, ent_mask, pos)[1])
        fresh = load_model(tmp_path / "pre", LukeForSpanClassification, num_labels=4)
        assert fresh.classifier.out_features == 4
    with pytest.raises(RalmError, match="cannot be loaded as a LukeForPretraining"):
        load_model(tmp_path / "span", LukeForPretraining)
    wrapper = torch.nn.Module()
    wrapper.module = span  # as DistributedDataParallel holds it
    save_model(wrapper, tmp_path / "pre")  # unwrapped; an existing model dir is replaced
    assert type(load_model(tmp_path / "pre", LukeForSpanClassification)) is LukeForSpanClassification
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(RalmError, match="refusing to overwrite"):
        save_model(pre, tmp_path / "other")


def test_saved_dir_carries_the_tokenizer(tiny_luke_dir):
    from ralm.models.tokenizers import load_tokenizer

    assert load_tokenizer(tiny_luke_dir)("Oslo")["input_ids"][0] == 101


def test_bad_model_dirs(tmp_path, tiny_luke_dir):
    import shutil

    with pytest.raises(RalmError, match="no such model directory"):
        load_model(tmp_path / "missing")
    d = tmp_path / "d"
    d.mkdir()
    with pytest.raises(RalmError, match="config.json: missing"):
        load_model(d)
    (d / "config.json").write_text("{not json")
    with pytest.raises(RalmError, match="not valid JSON"):
        load_model(d)
    (d / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(RalmError, match="not a ralm LUKE model config"):
        load_model(d)
    shutil.rmtree(d)
    shutil.copytree(tiny_luke_dir, d)
    (d / "model.safetensors").unlink()
    with pytest.raises(RalmError, match="model.safetensors: missing"):
        load_model(d)
    data = (tiny_luke_dir / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(RalmError, match="unreadable weights"):
        load_model(d)
    info = json.loads((tiny_luke_dir / "config.json").read_text())
    info["config"]["entity_hidden_size"] = 64  # l > L
    (d / "config.json").write_text(json.dumps(info))
    with pytest.raises(RalmError, match="larger than hidden_size") as exc:
        load_model(d)
    assert "\n" not in str(exc.value)
    info["config"]["entity_hidden_size"] = 16  # valid, but not what the weights hold
    info["config"]["entity_intermediate_size"] = 32
    (d / "config.json").write_text(json.dumps(info))
    shutil.copyfile(tiny_luke_dir / "model.safetensors", d / "model.safetensors")
    with pytest.raises(RalmError, match="does not match its config.json"):
        load_model(d)
