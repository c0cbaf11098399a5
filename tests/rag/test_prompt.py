"""Prompt assembly: the chat template, passages in order, cutting to fit, the answer-only loss mask."""

from __future__ import annotations

import pytest
from rag_ref import chat_tokenizer

from ralm.errors import RalmError
from ralm.rag.prompt import PromptBuilder, _water_level


def test_water_level_keeps_short_passages_whole():
    assert _water_level([10, 100, 100], 110) == 50
    assert _water_level([10, 100, 100], 210) == 100
    assert _water_level([3, 3], 5) == 2
    assert _water_level([5], 0) == 0


def test_chat_prompt_holds_passages_and_question_in_order():
    tok = chat_tokenizer()
    b = PromptBuilder(tok, 1000)
    text = b.text("Who was president?", ["Abraham Lincoln", "Oslo er hovedstaden"])
    assert text == (
        "<|im_start|>user\nAnswer the question with a short answer, using the passages.\n"
        "Passage 1: Abraham Lincoln\nPassage 2: Oslo er hovedstaden\nQuestion: Who was president?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert (
        b.ids("Who was president?", ["Abraham Lincoln", "Oslo er hovedstaden"])
        == tok(text, add_special_tokens=False)["input_ids"]
    )
    assert b.text("Q?", []).startswith(
        "<|im_start|>user\nAnswer the question with a short answer.\nQuestion: Q?"
    )


def test_plain_prompt_for_base_lms_and_fewshot():
    tok = chat_tokenizer()
    b = PromptBuilder(tok, 1000, chat=False, fewshot=[("Capital of Norway?", "Oslo")])
    assert b.text("Q?", ["P"]) == (
        "Answer the question with a short answer.\nQuestion: Capital of Norway?\nAnswer: Oslo\n\n"
        "Answer the question with a short answer, using the passages.\nPassage 1: P\nQuestion: Q?\nAnswer:"
    )


def test_passages_are_cut_to_one_budget_and_counted():
    tok = chat_tokenizer()
    long = "Abraham Lincoln was the 16th president of the United States. " * 8
    short = "Oslo er hovedstaden i Norge."
    full = PromptBuilder(tok, 10_000).ids("Who?", [short, long, long])
    base = len(PromptBuilder(tok, 10_000).ids("Who?", ["", "", ""]))
    n_short = len(tok(short, add_special_tokens=False)["input_ids"])
    limit = base + n_short + 2 * 20
    b = PromptBuilder(tok, limit)
    ids = b.ids("Who?", [short, long, long])
    assert len(full) > limit >= len(ids) > limit - 6
    assert b.truncated == 1
    text = tok.decode(ids)
    assert f"Passage 1: {short}\n" in text  # the short passage stays whole
    assert "Passage 3: Abraham Lincoln was" in text and text.endswith(
        "Question: Who?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert b.ids("Who?", [short]) == PromptBuilder(tok, 10_000).ids("Who?", [short])
    assert b.truncated == 1


def test_a_question_too_long_for_the_budget_is_one_error():
    tok = chat_tokenizer()
    with pytest.raises(RalmError, match="leaves no room for passages"):
        PromptBuilder(tok, 20).ids("Abraham Lincoln was the 16th president " * 5, ["Oslo"])


def test_training_example_masks_everything_but_the_answer_turn():
    tok = chat_tokenizer()
    b = PromptBuilder(tok, 1000)
    ex = b.training_example("Who?", ["Abraham Lincoln"], "Lincoln")
    prompt = b.ids("Who?", ["Abraham Lincoln"])
    answer = tok("Lincoln<|im_end|>", add_special_tokens=False)["input_ids"]
    assert ex.input_ids == prompt + answer
    assert ex.labels == [-100] * len(prompt) + answer
    assert answer[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    plain = PromptBuilder(tok, 1000, chat=False).training_example("Who?", [], "Lincoln")
    tail = [t for t in plain.labels if t != -100]
    assert tok.decode(tail) == " Lincoln<|im_end|>"
