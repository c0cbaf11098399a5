"""`ralm finetune` on decoder-only LMs: tiny random Gemma-3 and Llama configs (`causal_dirs`)."""

from __future__ import annotations

import json

import pytest
import torch

from ralm.errors import RalmError
from ralm.tasks.causal_heads import (
    CausalTaskModel,
    is_causal_backbone,
    load_causal_task_model,
    load_saved_task_model,
)
from ralm.tasks.finetune import FinetuneConfig, finetune
from ralm.tasks.tagging import IGNORE_INDEX, encode_words_by_offsets

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = [["Oslo", "is", "the", "capital", "of", "Norway", "."], ["Bergen", "was", "founded"]]


def _batch(ids: list[list[int]], pad: int, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(map(len, ids))
    rows, masks = [], []
    for r in ids:
        fill = [pad] * (L - len(r))
        rows.append(r + fill if side == "right" else fill + r)
        m = [1] * len(r) + [0] * len(fill)
        masks.append(m if side == "right" else m[::-1])
    return torch.tensor(rows), torch.tensor(masks)


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_words_found_by_offsets_and_labelled_on_their_first_sub_token(name, causal_dirs):
    from ralm.formats.types import TaggingExample
    from ralm.tasks.adapters import make_adapter

    model, tok = load_causal_task_model("ner", causal_dirs[name], ["O", "B-LOC"])
    ids, wids = encode_words_by_offsets(tok, WORDS, 64)
    for words, row, w in zip(WORDS, ids, wids, strict=True):
        assert ids == [tok(" ".join(x))["input_ids"] for x in WORDS]  # the running text's tokens
        for i, word in enumerate(words):  # each word's tokens decode to the word
            assert tok.decode([t for t, k in zip(row, w, strict=True) if k == i]).strip() == word
        assert (w[0] is None) == (name == "gemma3")  # <bos> belongs to no word
    ex = TaggingExample("s0", WORDS[0], ["B-LOC", "O", "O", "O", "O", "B-LOC", "O"])
    item = make_adapter("ner", tok, model, ["O", "B-LOC"], max_length=64).encode([ex])[0]
    first = {}
    for t, k in enumerate(item.extra["wids"]):
        if k is not None:
            first.setdefault(k, t)
    expect = [IGNORE_INDEX] * len(item.ids)
    for k, t in first.items():
        expect[t] = 1 if ex.labels[k] == "B-LOC" else 0
    assert item.target == expect
    assert sorted(first) == list(range(len(WORDS[0])))


@pytest.mark.parametrize("name", ["llama", "gemma3"])
@pytest.mark.parametrize(
    ("task", "pooling"),
    [("ner", "last"), ("classify", "last"), ("classify", "mean"), ("extractive-qa", "last")],
)
def test_left_and_right_padding_give_the_same_outputs(name, task, pooling, causal_dirs):
    torch.manual_seed(0)
    model, tok = load_causal_task_model(task, causal_dirs[name], ["a", "b", "c"], pooling=pooling)
    model.eval()
    ids = [tok(" ".join(w))["input_ids"] for w in WORDS]
    outs = {}
    for side in ("right", "left"):
        x, m = _batch(ids, tok.pad_token_id, side)
        with torch.no_grad():
            o = model(x, m)
        if task == "classify":
            outs[side] = o.logits
        else:
            t = o.logits if task == "ner" else torch.stack([o.start_logits, o.end_logits], -1)
            outs[side] = [t[b][m[b].bool()] for b in range(len(ids))]  # real positions only
    if task == "classify":
        torch.testing.assert_close(outs["left"], outs["right"], atol=1e-5, rtol=1e-5)
        assert outs["left"].shape == (2, 3)
    else:
        for a, b in zip(outs["left"], outs["right"], strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_bidirectional_attention_is_applied_where_supported_and_refused_where_not(causal_dirs):
    def first_hidden(model, tail: int) -> torch.Tensor:
        x = torch.tensor([[1, 40, 41, 42, tail]])
        with torch.no_grad():
            return model.body(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state[0, 1]

    causal, _ = load_causal_task_model("ner", causal_dirs["gemma3"], ["O"])
    both, _ = load_causal_task_model("ner", causal_dirs["gemma3"], ["O"], bidirectional=True)
    assert not causal.bidirectional and both.bidirectional
    torch.testing.assert_close(first_hidden(causal, 50), first_hidden(causal, 60))  # left context only
    assert not torch.allclose(first_hidden(both, 50), first_hidden(both, 60), atol=1e-4)  # reads the right
    # same weights, only the attention changed: the last position sees everything either way
    x = torch.tensor([[1, 40, 41, 42, 50]])
    with torch.no_grad():
        assert torch.equal(causal.body.embed_tokens(x), both.body.embed_tokens(x))
    with pytest.raises(RalmError, match="no bidirectional-attention switch.*drop --bidirectional"):
        load_causal_task_model("ner", causal_dirs["llama"], ["O"], bidirectional=True)


def test_embeddings_frozen_by_default_and_lora_trains_adapters_only(causal_dirs):
    m, _ = load_causal_task_model("classify", causal_dirs["llama"], ["a", "b"])
    assert not m.body.get_input_embeddings().weight.requires_grad
    assert m.head.weight.requires_grad and m.body.layers[0].mlp.up_proj.weight.requires_grad
    m, _ = load_causal_task_model("classify", causal_dirs["llama"], ["a", "b"], train_embeddings=True)
    assert m.body.get_input_embeddings().weight.requires_grad
    m, _ = load_causal_task_model("classify", causal_dirs["llama"], ["a", "b"], lora_r=4)
    trained = {n for n, p in m.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n or n.startswith("head.") for n in trained)
    assert {"head.weight", "head.bias"} <= trained


@pytest.mark.parametrize(("name", "bidirectional"), [("llama", False), ("gemma3", False), ("gemma3", True)])
def test_saved_model_reloads_to_identical_predictions(name, bidirectional, causal_dirs, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModel

    torch.manual_seed(1)
    model, tok = load_causal_task_model(
        "ner", causal_dirs[name], ["O", "B-LOC", "B-PER"], bidirectional=bidirectional, lora_r=2
    )
    with torch.no_grad():
        model.head.weight.normal_()
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_()  # LoRA's B starts at zero; make the adapters matter before they are merged
    model.eval()
    x, m = _batch([tok(" ".join(w))["input_ids"] for w in WORDS], tok.pad_token_id, "right")
    with torch.no_grad():
        before = model(x, m).logits
    model.save_pretrained(tmp_path / "m", tokenizer=tok)  # folds LoRA in: float rounding moves
    with torch.no_grad():
        merged = model(x, m).logits
    torch.testing.assert_close(merged, before, atol=1e-4, rtol=1e-4)
    assert not [n for n, _ in model.named_parameters() if "lora_" in n]
    before = merged
    again, tok2 = load_saved_task_model(tmp_path / "m")
    assert again.bidirectional is bidirectional and again.config.id2label == {0: "O", 1: "B-LOC", 2: "B-PER"}
    assert tok2(" ".join(WORDS[0]))["input_ids"] == tok(" ".join(WORDS[0]))["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(again(x, m).logits, before, atol=1e-6, rtol=1e-6)
        assert torch.equal(again(x, m).logits.argmax(-1), before.argmax(-1))
        # the transformers route the model card shows: AutoModel + the head's state dict
        body = AutoModel.from_pretrained(tmp_path / "m").eval()
        head = torch.nn.Linear(body.config.hidden_size, 3)
        head.load_state_dict(load_file(str(tmp_path / "m" / "head.safetensors")))
        h = body(
            input_ids=x, attention_mask=m, position_ids=(m.cumsum(-1) - 1).clamp(min=0)
        ).last_hidden_state
        torch.testing.assert_close(head(h)[m.bool()], before[m.bool()], atol=1e-5, rtol=1e-5)
    meta = json.loads((tmp_path / "m" / "ralm_task.json").read_text())
    assert meta == {
        "task": "ner",
        "pooling": "last",
        "bidirectional": bidirectional,
        "labels": ["O", "B-LOC", "B-PER"],
        "head": {"in": 32, "out": 3},
    }
    card = (tmp_path / "m" / "README.md").read_text()
    assert ("left context" in card) is (not bidirectional)
    assert is_causal_backbone(tmp_path / "m") and isinstance(again, CausalTaskModel)


SMALL = dict(
    device="cpu", autocast="off", progress=False, max_length=64, eval_batch_size=8, max_steps=3, batch_size=4
)


@pytest.mark.parametrize(
    ("task", "sub", "metric"),
    [
        ("classify", "classify", "macro_f1"),
        ("ner", "ner", "f1"),
        ("pos", "pos", "accuracy"),
        ("extractive-qa", "qa", "f1"),
    ],
)
def test_finetune_end_to_end_on_a_causal_backbone(task, sub, metric, task_data, causal_dirs, tmp_path):
    out = tmp_path / "out"
    kw = dict(SMALL, max_length=96) if task == "extractive-qa" else SMALL
    cfg = FinetuneConfig(
        task=task,
        data=str(task_data / sub),
        out=str(out),
        model=str(causal_dirs["gemma3"]),
        seeds=[1, 2],
        lr=1e-3,
        **kw,
    )
    res = finetune(cfg, log=lambda m: None)
    assert [r["seed"] for r in res["seeds"]] == [1, 2] and res["primary"] == metric
    assert all(0.0 <= r["test"][metric] <= 100.0 for r in res["seeds"])
    assert res["config"]["bidirectional"] is False
    # the saved model is the evaluated one: `finetune --eval-only` on it scores dev and test the same
    again = finetune(
        FinetuneConfig(
            task=task,
            data=str(task_data / sub),
            out=str(tmp_path / "again"),
            model=str(out / "seed-1" / "model"),
            seeds=[1],
            eval_only=True,
            **kw,
        ),
        log=lambda m: None,
    )
    first = res["seeds"][0]
    assert again["seeds"][0]["steps"] == 0 and not (tmp_path / "again" / "seed-1" / "model").exists()
    assert again["seeds"][0]["test"] == pytest.approx(first["test"], abs=1e-9)
    assert again["seeds"][0]["dev"] == pytest.approx(first["dev"], abs=1e-9)
    assert (out / "seed-1" / "predictions.jsonl").read_text() == (
        tmp_path / "again" / "seed-1" / "predictions.jsonl"
    ).read_text()


def test_causal_backbone_refusals(task_data, causal_dirs, fact_store, tmp_path):
    base = dict(SMALL, out=str(tmp_path / "o"), model=str(causal_dirs["llama"]))
    with pytest.raises(RalmError, match="--retrieval needs an encoder reader"):
        finetune(
            FinetuneConfig(
                task="ner",
                data=str(task_data / "ner"),
                retrieval=True,
                index=str(fact_store / "index"),
                **base,
            )
        )
    with pytest.raises(RalmError, match="no bidirectional-attention switch"):
        finetune(FinetuneConfig(task="ner", data=str(task_data / "ner"), bidirectional=True, **base))


def test_bidirectional_refused_for_an_encoder(task_data, tiny_dir, tmp_path):
    c = FinetuneConfig(
        task="ner",
        data=str(task_data / "ner"),
        out=str(tmp_path / "o"),
        model=str(tiny_dir),
        bidirectional=True,
        **SMALL,
    )
    with pytest.raises(RalmError, match="--bidirectional is for decoder-only LMs"):
        finetune(c, log=lambda m: None)


def test_dev_fraction_zero_scores_no_dev_split(task_data, tiny_dir, tmp_path):
    files = dict(
        train=str(task_data / "pos" / "x-ud-train.conllu"), test=str(task_data / "pos" / "x-ud-test.conllu")
    )
    base = dict(SMALL, task="pos", data=None, model=str(tiny_dir), **files)
    carved = finetune(FinetuneConfig(out=str(tmp_path / "a"), **base), log=lambda m: None)["seeds"][0]
    none = finetune(FinetuneConfig(out=str(tmp_path / "b"), dev_fraction=0.0, **base), log=lambda m: None)[
        "seeds"
    ][0]
    assert (carved["train_examples"], carved["dev_examples"]) == (7, 1)  # 10% of 8 sentences, at least one
    assert (none["train_examples"], none["dev_examples"], none["dev"]) == (8, 0, {})
    assert none["test_examples"] == carved["test_examples"] == 8
