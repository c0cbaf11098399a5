"""The Ask page (ralm.rag.ask.Asker, behind `ralm serve --generator`) and `ralm rag eval` (run_rag)
build their prompts with one PromptBuilder and decode alike: the same question and passages give
the same prompt and the same answer in every mode the Ask page offers."""

from __future__ import annotations

import pytest

from ralm.rag.ask import Asker
from ralm.rag.data import RagQuestion
from ralm.rag.evaluate import RagConfig, run_rag
from ralm.retrieval.base import Hit

PASSAGES = [
    Hit(0, 2.5, "Oslo", "Oslo is the capital of Norway . The city lies at the end of the fjord .", 1),
    Hit(3, 1.0, "Bergen", "Bergen is a city on the west coast of Norway . It rains a lot in Bergen .", 2),
]


@pytest.mark.parametrize("mode", ["rag", "replug", "closed-book"])
def test_asker_and_run_rag_agree(chat_lm, mode):
    q = RagQuestion("q1", "What is the capital of Norway ?", ["Oslo"])
    given = [] if mode == "closed-book" else PASSAGES
    run = run_rag(chat_lm, [q], [PASSAGES], RagConfig(mode=mode, k=2, max_new_tokens=6, batch_size=2))
    asker = Asker(chat_lm, retriever=object(), store=object(), k=2, mode=mode, max_new_tokens=6)
    answer = asker.answer(q.question, given)
    rec = run.records[0]
    assert answer.prompt == rec["prompt"]
    assert answer.answer == rec["prediction"]
    assert ("Oslo is the capital" in answer.prompt) is (mode != "closed-book")
