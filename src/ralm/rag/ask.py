"""One question at a time, for `ralm serve`'s Ask page and `/api/ask`: retrieve, prompt, generate.

`Asker(lm, retriever, store, k=3, mode="rag")`; `asker.ask("Who ...?")` returns an `Answer`: the
generated text, the passages the LM was given (chunk id, score, title, text, in rank order), the
prompt as the LM saw it, and the seconds spent retrieving and generating. Modes: "rag" (top-k in
one prompt), "replug" (one prompt per passage, mixed), "closed-book" (no retrieval).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ralm.errors import RalmError
from ralm.rag.evaluate import RagConfig, prompt_budget
from ralm.rag.generate import answer_text, greedy, passage_weights, replug
from ralm.rag.prompt import PromptBuilder, passage_text
from ralm.rag.retrieved import Passage, retrieve

__all__ = ["Answer", "Asker"]


@dataclass
class Answer:
    """What `Asker.ask` gives back (JSON-ready through `as_dict`)."""

    question: str
    answer: str
    passages: list[Passage] = field(default_factory=list)
    prompt: str = ""
    mode: str = "rag"
    retrieve_seconds: float = 0.0
    generate_seconds: float = 0.0

    def as_dict(self) -> dict:
        """Plain dict for the JSON API."""
        return {
            "question": self.question,
            "answer": self.answer,
            "mode": self.mode,
            "passages": [
                {"id": p.id, "score": p.score, "title": p.title, "text": p.text} for p in self.passages
            ],
            "prompt": self.prompt,
            "retrieve_seconds": self.retrieve_seconds,
            "generate_seconds": self.generate_seconds,
        }


class _Q:
    def __init__(self, question: str) -> None:
        self.question = question


class Asker:
    """A generator and a retriever answering single questions (see the module docstring)."""

    def __init__(
        self, lm, retriever=None, store=None, *, k: int = 3, mode: str = "rag", max_new_tokens: int = 32
    ) -> None:
        self.cfg = RagConfig(mode=mode, k=k, max_new_tokens=max_new_tokens, batch_size=max(k, 1))
        self.cfg.check()
        if mode == "oracle":
            raise RalmError("the Ask page has no gold passages: choose rag, replug or closed-book")
        if mode != "closed-book" and (retriever is None or store is None):
            raise RalmError(f"mode {mode} needs a retriever and its DocStore")
        self.lm, self.retriever, self.store = lm, retriever, store
        self.builder = PromptBuilder(lm.tokenizer, prompt_budget(lm, self.cfg))

    def ask(self, question: str, k: int | None = None) -> Answer:
        """Answer one question; `k` overrides the number of passages for this call."""
        question = (question or "").strip()
        if not question:
            raise RalmError("empty question; type a question")
        k = self.cfg.k if k is None else int(k)
        if not 1 <= k <= 20:
            raise RalmError(f"k={k}: choose 1 to 20 passages")
        t0 = time.perf_counter()
        ps: list[Passage] = []
        if self.cfg.mode != "closed-book":
            ps = retrieve([_Q(question)], self.retriever, self.store, k)[0]
        t1 = time.perf_counter()
        texts = [passage_text(p.title, p.text) for p in ps]
        if self.cfg.mode == "replug" and ps:
            group = [self.builder.ids(question, [t]) for t in texts]
            w = passage_weights([p.score for p in ps], self.cfg.replug_temperature)
            ids = replug(self.lm, [group], [w], max_new_tokens=self.cfg.max_new_tokens)[0]
            prompt = group[0]
        else:
            prompt = self.builder.ids(question, texts)
            ids = greedy(self.lm, [prompt], max_new_tokens=self.cfg.max_new_tokens)[0]
        t2 = time.perf_counter()
        return Answer(question, answer_text(self.lm.tokenizer, ids), ps, self.lm.tokenizer.decode(prompt),
                      self.cfg.mode, t1 - t0, t2 - t1)  # fmt: skip
