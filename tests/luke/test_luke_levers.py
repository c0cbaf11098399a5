"""Issue 47's levers: separate softmaxes with a word-to-entity gate (the word stream kept whole at
initialisation), the paper's separate terms against a naive implementation, the entity-first stage,
and the entity vocabulary's minimum mention count."""

from __future__ import annotations

import math

import pytest
import torch
from test_luke_model import assert_close, randomise

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("le", [32, 16])
def test_gate_at_start_keeps_word_outputs_whatever_the_entities(tiny_luke_config, le):
    """With the gates at 0 the word states equal the plain encoder's (E = 0) to 1e-5, however many
    entity tokens of whatever ids and positions come with the words."""
    from ralm.luke.model import EntityAwareModel

    cfg = tiny_luke_config(entity_hidden_size=le, entity_attention="separate")
    torch.manual_seed(0)
    model = randomise(EntityAwareModel(cfg)).eval()
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.self.word_entity_gate.zero_()
    ids = torch.randint(3, 100, (2, 9))
    plain, _ = model(ids, None, None, None, None)
    for E in (1, 5, 40):
        ents = torch.randint(1, 20, (2, E))
        pos = torch.randint(0, 9, (2, E, cfg.max_mention_length))
        with torch.no_grad():
            words, entities = model(ids, None, ents, None, pos)
        assert_close(words, plain, tol=1e-5)
        assert entities.shape == (2, E, le)
    # once a gate opens, the entities move the words
    with torch.no_grad():
        model.encoder.layer[0].attention.self.word_entity_gate.fill_(1.0)
        moved, _ = model(ids, None, ents, None, pos)
    assert not torch.allclose(moved, plain, atol=1e-3)


def naive_separate(att, words, entities, key_mask, heads):
    """The seed's x' = A V W + tanh(g) A_w2e V_e2w E and e' = A_e2w V_w2e W + A_e2e V_e2e E, each A its
    own softmax over the real keys of its kind, one token and head at a time."""
    lin = lambda m, x: m.weight @ x + m.bias  # noqa: E731
    L, le = words.shape[-1], entities.shape[-1]
    dL, dl = L // heads, le // heads
    T, E = words.shape[1], entities.shape[1]
    w, e = words[0], entities[0]
    gate = math.tanh(float(att.word_entity_gate))
    out_w, out_e = torch.zeros(T, L), torch.zeros(E, le)

    def block(q, keys, vals, scale):
        if not keys:
            return 0.0
        a = torch.softmax(torch.stack([q @ k for k in keys]) / scale, 0)
        return sum(ai * v for ai, v in zip(a, vals, strict=True))

    real_w = [k for k in range(T) if key_mask[0, k]]
    real_e = [k for k in range(E) if key_mask[0, T + k]]
    for h in range(heads):
        sw, se = slice(h * dL, (h + 1) * dL), slice(h * dl, (h + 1) * dl)
        kw = [lin(att.key, w[k])[sw] for k in real_w]
        ke = [lin(att.entity_key, e[k])[se] for k in real_e]
        for i in range(T):
            ww = block(
                lin(att.query, w[i])[sw], kw, [lin(att.value, w[k])[sw] for k in real_w], math.sqrt(dL)
            )
            we = block(
                lin(att.w2e_query, w[i])[se],
                ke,
                [lin(att.e2w_value, e[k])[sw] for k in real_e],
                math.sqrt(dl),
            )
            out_w[i, sw] = ww + gate * we
        for j in range(E):
            ew = block(
                lin(att.e2w_query, e[j])[sw],
                kw,
                [lin(att.w2e_value, w[k])[se] for k in real_w],
                math.sqrt(dL),
            )
            ee = block(
                lin(att.e2e_query, e[j])[se],
                ke,
                [lin(att.e2e_value, e[k])[se] for k in real_e],
                math.sqrt(dl),
            )
            out_e[j, se] = ew + ee
    return out_w, out_e


def test_separate_terms_match_the_seed_equations(tiny_luke_config):
    from ralm.luke.attention import EntityAwareSelfAttention

    cfg = tiny_luke_config(
        hidden_size=16, entity_hidden_size=8, num_attention_heads=2, entity_attention="separate"
    )
    torch.manual_seed(0)
    att = randomise(EntityAwareSelfAttention(cfg))
    with torch.no_grad():
        att.word_entity_gate.fill_(0.6)
    words, entities = torch.randn(1, 4, 16), torch.randn(1, 3, 8)
    key_mask = torch.tensor([[True, True, True, False, True, True, False]])
    with torch.no_grad():
        w, e = att(words, entities, key_mask)
        rw, re_ = naive_separate(att, words, entities, key_mask, heads=2)
    assert_close(w[0], rw)
    assert_close(e[0], re_)
    # every entity padded: the words get the word term alone (no NaN from an empty softmax)
    none = torch.tensor([[True, True, True, False, False, False, False]])
    with torch.no_grad():
        w0, _ = att(words, entities, none)
        rw0, _ = naive_separate(att, words, entities, none, heads=2)
    assert torch.isfinite(w0).all()
    assert_close(w0[0], rw0)


def test_separate_models_refuse_hf_export(tiny_luke_config):
    from ralm.errors import RalmError
    from ralm.luke.export import to_hf_state_dict
    from ralm.luke.model import EntityAwareModel

    cfg = tiny_luke_config(entity_attention="separate")
    assert cfg.is_luke and not cfg.hf_luke
    with pytest.raises(RalmError, match="joint softmax"):
        to_hf_state_dict(EntityAwareModel(cfg))
    with pytest.raises(RalmError, match="entity_attention"):
        tiny_luke_config(entity_attention="both")


def test_entity_vocabulary_min_mentions():
    from ralm.errors import RalmError
    from ralm.luke.vocab import EntityVocabulary

    v = EntityVocabulary.from_counts({"Oslo": 3, "Bergen": 1, "Norway": 2}, size=10, min_count=2)
    assert v.titles == ["Oslo", "Norway"] and v.counts == [3, 2]
    assert "Bergen" not in v and "Oslo" in v and "Norway" in v and len(v) == 5
    with pytest.raises(RalmError, match="entity_min_mentions"):
        EntityVocabulary.from_counts({"Oslo": 3}, size=10, min_count=0)


def test_entity_side_names():
    from ralm.luke.stages import entity_side

    assert entity_side("luke.encoder.layer.0.attention.self.w2e_query.weight")
    assert entity_side("luke.encoder.layer.3.attention.self.word_entity_gate")
    assert entity_side("luke.entity_embeddings.entity_embeddings.weight") and entity_side(
        "lm_head.dense.bias"
    )
    assert entity_side("luke.encoder.layer.1.entity_output.dense.weight")
    assert not entity_side("luke.encoder.layer.0.attention.self.query.weight")
    assert not entity_side("luke.encoder.layer.0.output.dense.weight")
    assert not entity_side("luke.embeddings.word_embeddings.weight")


def test_threshold_decoding_on_a_toy_case():
    """Five words; spans with (O, PER, LOC) probabilities; by hand: argmax keeps (0,1) PER only; at
    threshold 0.3 the spans with 1 - P(O) > 0.3 are (0,1) .9, (0,2) .45, (2,3) .4, (3,5) .35; greedy by
    score keeps (0,1) PER, then (2,3) LOC (.4), then (3,5) PER (.35); (0,2) overlaps (0,1)."""
    import numpy as np

    from ralm.luke.ner_model import decode_tags
    from ralm.luke.spans import SentenceSpans

    spans = [(0, 1), (0, 2), (2, 3), (3, 5), (4, 5)]
    p = np.array([[0.1, 0.8, 0.1], [0.55, 0.4, 0.05], [0.6, 0.1, 0.3], [0.65, 0.3, 0.05], [0.9, 0.05, 0.05]])
    x = SentenceSpans([0] * 7, spans, np.zeros((5, 2), dtype=np.int64), np.zeros(5, dtype=np.int64), 5)
    classes = ["O", "PER", "LOC"]
    assert decode_tags([x], [p], classes) == [["B-PER", "O", "O", "O", "O"]]
    assert decode_tags([x], [p], classes, threshold=0.3) == [["B-PER", "O", "B-LOC", "B-PER", "I-PER"]]
    assert decode_tags([x], [p], classes, threshold=0.95) == [["O"] * 5]


def test_weighted_cross_entropy_by_hand():
    from ralm.luke.model import weighted_cross_entropy

    logits = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    labels = torch.tensor([[0, 1, -100]])
    ce0 = -torch.log_softmax(logits[0, 0], 0)[0]
    ce1 = -torch.log_softmax(logits[0, 1], 0)[1]
    got = weighted_cross_entropy(logits, labels, torch.tensor([0.25, 1.0]))
    assert float(got) == pytest.approx(float((0.25 * ce0 + ce1) / 1.25), abs=1e-6)


def test_words_only_span_classifier_reads_no_entities(tiny_luke_config):
    from ralm.luke.model import LukeForSpanClassification

    torch.manual_seed(0)
    model = LukeForSpanClassification(tiny_luke_config(), num_labels=3, words_only=True).eval()
    assert model.classifier.in_features == 2 * 32
    words = torch.randint(5, 100, (1, 7))
    pos = torch.tensor([[[1, 2, -1, -1, -1, -1], [3, -1, -1, -1, -1, -1]]])
    args = (torch.ones(1, 2, dtype=torch.long), pos, torch.tensor([[1, 3]]), torch.tensor([[2, 3]]))
    with torch.no_grad():
        a = model(words, None, torch.tensor([[2, 2]]), *args)["logits"]
        b = model(words, None, torch.tensor([[5, 7]]), *args)["logits"]  # other entity ids: same words
        h, _ = model.luke(words, None, None, None, None)
    torch.testing.assert_close(a, b)
    want = model.classifier(torch.cat([h[0, [1, 3]], h[0, [2, 3]]], dim=-1))
    torch.testing.assert_close(a[0], want)


def test_context_words_and_spans_inside_the_sentence(bert_tokenizer):
    from types import SimpleNamespace

    from ralm.luke.spans import context_words, encode_sentences

    exs = [
        SimpleNamespace(id=str(i), tokens=t, labels=["O"] * len(t))
        for i, t in enumerate([["a", "b"], ["oslo", "is"], ["cold", "now", "here"]])
    ]
    exs[1].labels = ["B-LOC", "O"]
    assert context_words(exs, 2) == [
        ([], ["oslo", "is"]),
        (["a", "b"], ["cold", "now"]),
        (["oslo", "is"], []),
    ]
    assert context_words(exs, 3)[2] == (["b", "oslo", "is"], [])

    def encode(max_length, **context):
        return encode_sentences(
            bert_tokenizer, exs[1:2], ["O", "LOC"], max_length=max_length, max_span_length=2, **context
        )[0]

    around = [(["a", "b"], ["cold", "now"])]
    plain, ctx = encode(64), encode(64, context=around)
    assert plain[0].spans == ctx[0].spans == [(0, 1), (0, 2), (1, 2)] and ctx[0].n_words == 2
    assert ctx[0].labels.tolist() == plain[0].labels.tolist() == [1, 0, 0]
    assert len(ctx[0].input_ids) == len(plain[0].input_ids) + 4  # a b ... cold now
    assert ctx[0].bounds.tolist() == [[b + 2 for b in r] for r in plain[0].bounds.tolist()]
    tight = encode(6, context=around)
    assert len(tight[0].input_ids) <= 6 and tight[0].spans == plain[0].spans  # context dropped to fit


def test_entity_attention_has_one_default_for_python_toml_and_cli(tiny_luke_config):
    """LukeConfig, `from_bert` and `ralm luke pretrain`'s config read the same default ("separate":
    the word stream untouched at init); a config file from before the setting stays joint."""
    import dataclasses
    import inspect

    from ralm.luke.config import DEFAULT_ENTITY_ATTENTION, LukeConfig
    from ralm.luke.init import from_bert
    from ralm.luke.pretrain_config import LukePretrainConfig

    assert DEFAULT_ENTITY_ATTENTION == "separate"
    fields = {f.name: f.default for f in dataclasses.fields(LukeConfig)}
    assert fields["entity_attention"] == DEFAULT_ENTITY_ATTENTION
    assert inspect.signature(from_bert).parameters["entity_attention"].default == DEFAULT_ENTITY_ATTENTION
    assert LukePretrainConfig().entity_attention == DEFAULT_ENTITY_ATTENTION
    # a config file written before the setting existed: every key but entity_attention
    d = {
        k: v
        for k, v in tiny_luke_config(entity_attention="separate").to_dict().items()
        if k != "entity_attention"
    }
    assert LukeConfig.from_dict(d).entity_attention == "joint"
    assert LukeConfig.from_dict({**d, "entity_attention": "separate"}).entity_attention == "separate"
