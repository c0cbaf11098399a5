"""The answer-only loss, generator fine-tuning and saving, and REPLUG LSR's loss on a hand-computed case."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ralm.rag.data import RagQuestion
from ralm.rag.finetune import (
    GeneratorTrainConfig,
    answer_loss,
    model_answer_loss,
    save_generator,
    train_generator,
    training_examples,
)
from ralm.rag.lsr import lsr_loss
from ralm.rag.prompt import PromptBuilder
from ralm.retrieval.base import Hit


def test_answer_loss_counts_only_labelled_positions():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 7)
    labels = torch.tensor([[-100, -100, 3, 5], [-100, 6, -100, -100]])
    loss, n = answer_loss(logits, labels)
    lp = torch.log_softmax(logits, -1)
    want = -(lp[0, 1, 3] + lp[0, 2, 5] + lp[1, 0, 6]) / 3
    assert n == 3
    assert float(loss) == pytest.approx(float(want), rel=1e-6)


def test_model_answer_loss_runs_the_head_on_answer_positions_only(chat_lm_dir):
    """The same loss and gradient as the full logits, plain and under a peft LoRA wrapper."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    x = torch.randint(3, 60, (2, 9))
    mask = torch.ones_like(x)
    mask[1, 7:] = 0
    y = torch.full_like(x, -100)
    y[0, 5:8], y[1, 3:5] = x[0, 5:8], x[1, 3:5]
    for wrap in (False, True):
        model = AutoModelForCausalLM.from_pretrained(chat_lm_dir)
        if wrap:
            model = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM"))
        want, n0 = answer_loss(model(input_ids=x, attention_mask=mask).logits, y)
        got, n = model_answer_loss(model, x, mask, y)
        assert n == n0 == 5 and float(got) == pytest.approx(float(want), rel=1e-5)
        g_want = torch.autograd.grad(want, [p for p in model.parameters() if p.requires_grad][:3])
        g_got = torch.autograd.grad(got, [p for p in model.parameters() if p.requires_grad][:3])
        for a, b in zip(g_want, g_got, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_lsr_loss_hand_computed():
    loss = lsr_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, math.log(3.0)]]))
    want = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert float(loss) == pytest.approx(want, rel=1e-6)
    # temperatures: gamma scales the retrieval scores, beta the LM's log-likelihoods
    s, lm = torch.tensor([[1.0, 0.0, -1.0]]), torch.tensor([[-2.0, -1.0, -4.0]])
    p = torch.softmax(s / 0.5, -1)
    q = torch.softmax(lm / 2.0, -1)
    assert float(lsr_loss(s, lm, gamma=0.5, beta=2.0)) == pytest.approx(
        float((p * (p / q).log()).sum()), rel=1e-6
    )
    assert float(lsr_loss(lm, lm)) == pytest.approx(0.0, abs=1e-7)  # P_R = Q: no loss


def _questions():
    return [
        RagQuestion("1", "Hva er hovedstaden i Norge?", ["Oslo"], gold="Oslo er hovedstaden i Norge."),
        RagQuestion(
            "2",
            "Who was the 16th president?",
            ["Abraham Lincoln"],
            gold="Abraham Lincoln was the 16th president.",
        ),
        RagQuestion("3", "Regex?", [r"\d+"], regex=True),
    ]


def test_training_examples_closed_book_rag_and_gold_mixing(chat_lm):
    b = PromptBuilder(chat_lm.tokenizer, 400)
    qs = _questions()
    ps = [
        [Hit(7, 1.0, "", "København er Danmarks hovedstad.", 1)],
        [Hit(8, 1.0, "", "Det bor mange mennesker der.", 1)],
        [],
    ]
    closed = training_examples(b, qs, None, 3)
    assert len(closed) == 2  # the regex question has no answer string to train on
    assert closed[0].input_ids == b.training_example(qs[0].question, [], "Oslo").input_ids
    rag = training_examples(b, qs, ps, 3)
    assert (
        rag[1].input_ids
        == b.training_example(qs[1].question, ["Det bor mange mennesker der."], "Abraham Lincoln").input_ids
    )
    mixed = training_examples(b, qs, ps, 3, gold="mix", gold_rate=1.0)
    assert mixed[0].input_ids == b.training_example(qs[0].question, [qs[0].gold], "Oslo").input_ids


def test_fine_tuning_lowers_the_answer_loss_and_saves_a_loadable_model(chat_lm_dir, tmp_path):
    from ralm.frozen.lm import load_frozen_lm
    from ralm.rag.generate import greedy

    lm = load_frozen_lm(chat_lm_dir, device="cpu", autocast="off")
    b = PromptBuilder(lm.tokenizer, 400)
    examples = training_examples(b, _questions(), None, 3)
    cfg = GeneratorTrainConfig(epochs=100, lr=1e-2, batch_size=2, warmup=0.0)
    model, stats = train_generator(
        lm.model, lm.tokenizer, examples, cfg, device=torch.device("cpu"), autocast=None, log=lambda m: None
    )
    assert stats["steps"] == 100 and stats["final_loss"] < 0.05 * stats["first_loss"]
    save_generator(model, lm.tokenizer, tmp_path / "gen")
    again = load_frozen_lm(tmp_path / "gen", device="cpu", autocast="off")
    for a, c in zip(model.state_dict().values(), again.model.state_dict().values(), strict=True):
        assert torch.equal(a, c)
    prompt = b.ids(_questions()[0].question, [])
    answer = b.answer_ids(_questions()[0].question, [], "Oslo")
    assert greedy(again, [prompt], max_new_tokens=8)[0] == answer[:-1]  # learnt: "Oslo", then the stop


def test_lora_fine_tuning_merges_into_plain_weights(chat_lm_dir):
    pytest.importorskip("peft")
    from ralm.frozen.lm import load_frozen_lm

    lm = load_frozen_lm(chat_lm_dir, device="cpu", autocast="off")
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    examples = training_examples(PromptBuilder(lm.tokenizer, 400), _questions(), None, 3)
    cfg = GeneratorTrainConfig(epochs=5, lr=1e-2, batch_size=2, lora_r=4)
    model, stats = train_generator(
        lm.model, lm.tokenizer, examples, cfg, device=torch.device("cpu"), autocast=None, log=lambda m: None
    )
    after = model.state_dict()
    assert set(after) == set(before)  # merged: no lora_ parameters left
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)
    assert not any("embed" in k or "norm" in k for k in changed)
    assert np.isfinite(stats["final_loss"])
