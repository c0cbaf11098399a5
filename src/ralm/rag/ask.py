"""One question at a time, for `ralm serve`'s Ask page and `/api/ask`: retrieve, prompt, generate.

`Asker(lm, retriever, k=3, mode="rag")` with a `ralm.Retriever` (or `Asker(lm, backend, store)`: a
retriever backend and its DocStore); `asker.ask("Who ...?")` returns an `Answer`: the
generated text, the passages the LM was given (chunk id, score, title, text, in rank order), the
prompt as the LM saw it, and the seconds spent retrieving and generating. Modes: "rag" (top-k in
one prompt), "replug" (one prompt per passage, mixed), "closed-book" (no retrieval).
`ask` is `retrieve` then `answer`; a server calls the two apart, so that the retriever and the
LM are each held only for their own step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ralm.errors import RalmError
from ralm.rag.evaluate import RagConfig, prompt_budget
from ralm.rag.generate import answer_text, greedy, passage_weights, replug
from ralm.rag.prompt import PromptBuilder, passage_text
from ralm.rag.retrieved import retrieve
from ralm.retrieval.base import Hit
from ralm.retrieval.retriever import Retriever

__all__ = ["MAX_K", "Answer", "Asker"]

MAX_K = 20  # passages one question may ask for


@dataclass
class Answer:
    """What `Asker.ask` gives back (JSON-ready through `as_dict`)."""

    question: str
    answer: str
    passages: list[Hit] = field(default_factory=list)
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
        if retriever is not None and not isinstance(
            retriever, Retriever
        ):  # a backend: usable with its DocStore
            retriever = None if store is None else Retriever(store, retriever, "given")
        if mode != "closed-book" and retriever is None:
            raise RalmError(f"mode {mode} needs a retriever and its DocStore")
        self.lm, self.retriever, self.store = lm, retriever, store if retriever is None else retriever.store
        self.builder = PromptBuilder(lm.tokenizer, prompt_budget(lm, self.cfg))

    def retrieve(self, question: str, k: int | None = None) -> list[Hit]:
        """The passages `ask` gives the LM for `question`, in rank order (none in closed-book mode);
        `k` overrides the number of passages for this call. RalmError for an empty question or k
        outside 1..20."""
        question = (question or "").strip()
        if not question:
            raise RalmError("empty question; type a question")
        k = self.cfg.k if k is None else int(k)
        if not 1 <= k <= MAX_K:
            raise RalmError(f"k={k}: choose 1 to {MAX_K} passages")
        if self.cfg.mode == "closed-book":
            return []
        return retrieve([_Q(question)], self.retriever, k)[0]

    def answer(self, question: str, passages: list[Hit], retrieve_seconds: float = 0.0) -> Answer:
        """Generate the answer to `question` from `passages` (what `retrieve` gave for it)."""
        question = (question or "").strip()
        if not question:
            raise RalmError("empty question; type a question")
        t0 = time.perf_counter()
        texts = [passage_text(p.title, p.text) for p in passages]
        if self.cfg.mode == "replug" and passages:
            group = [self.builder.ids(question, [t]) for t in texts]
            w = passage_weights([p.score for p in passages], self.cfg.replug_temperature)
            ids = replug(self.lm, [group], [w], max_new_tokens=self.cfg.max_new_tokens)[0]
            prompt = group[0]
        else:
            prompt = self.builder.ids(question, texts)
            ids = greedy(self.lm, [prompt], max_new_tokens=self.cfg.max_new_tokens, first_line=True)[0]
        took = time.perf_counter() - t0
        return Answer(
            question,
            answer_text(self.lm.tokenizer, ids),
            list(passages),
            self.lm.tokenizer.decode(prompt),
            self.cfg.mode,
            retrieve_seconds,
            took,
        )

    def ask(self, question: str, k: int | None = None) -> Answer:
        """Answer one question (`retrieve`, then `answer`); `k` overrides the number of passages."""
        t0 = time.perf_counter()
        passages = self.retrieve(question, k)
        return self.answer(question, passages, time.perf_counter() - t0)
