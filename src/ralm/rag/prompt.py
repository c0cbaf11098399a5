"""Prompts for RAG QA: passages and a question in one prompt, cut to fit the LM's context.

`PromptBuilder(tokenizer, max_prompt_tokens)` turns (question, passages, few-shot examples) into
token ids. Instruct models get the tokenizer's chat template (a user turn with the passages and
the question; few-shot examples as earlier user/assistant turns); base LMs get plain text that
ends in "Answer:". The user turn reads

    Answer the question with a short answer, using the passages.
    Passage 1: <title>
    <text>
    ...
    Question: <question>

(closed-book: the first line without its ", using the passages" and no passages). When the
prompt is longer than `max_prompt_tokens`, the passages are cut to one common token budget
(water-filling: short passages stay whole, long ones are cut at a token boundary) and the
builder counts it in `truncated`; a question too long for the budget even with empty passages is
a RalmError. `training_example` gives the prompt plus the answer turn, with the positions whose
loss counts (the answer and the end-of-turn token after it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ralm.errors import RalmError

__all__ = ["INSTRUCTION", "PromptBuilder", "TrainingExample", "passage_text"]

INSTRUCTION = "Answer the question with a short answer"
_FITS = 4  # re-cuts after a cut that still overflows by a token or two (tokens merging at the cut)


def passage_text(title: str | None, text: str) -> str:
    """A passage as the prompt shows it: its title on the first line when it has one."""
    title = (title or "").strip()
    return f"{title}\n{text.strip()}" if title else text.strip()


@dataclass
class TrainingExample:
    """input_ids (T,) = prompt + answer turn; labels (T,) = the token ids where the loss counts, else -100."""

    input_ids: list[int]
    labels: list[int]


class PromptBuilder:
    """Token ids of RAG prompts for one tokenizer; `chat` None = use the chat template when there is one."""

    def __init__(
        self,
        tokenizer,
        max_prompt_tokens: int,
        *,
        chat: bool | None = None,
        instruction: str = INSTRUCTION,
        fewshot: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.tok = tokenizer
        self.chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
        if self.chat and not getattr(tokenizer, "chat_template", None):
            raise RalmError("the tokenizer has no chat template; pass --no-chat for a base LM")
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.instruction = instruction
        self.fewshot = list(fewshot)
        self.truncated = 0  # prompts whose passages were cut

    # -- text
    def user_text(self, question: str, passages: Sequence[str]) -> str:
        """The user turn: instruction, numbered passages, question."""
        lines = [self.instruction + (", using the passages." if passages else ".")]
        for i, p in enumerate(passages, start=1):
            lines.append(f"Passage {i}: {p}")
        lines.append(f"Question: {question.strip()}")
        return "\n".join(lines)

    def _messages(self, question: str, passages: Sequence[str]) -> list[dict[str, str]]:
        msgs: list[dict[str, str]] = []
        for q, a in self.fewshot:
            msgs += [{"role": "user", "content": self.user_text(q, [])}, {"role": "assistant", "content": a}]
        return msgs + [{"role": "user", "content": self.user_text(question, passages)}]

    def text(self, question: str, passages: Sequence[str]) -> str:
        """The whole prompt as text, ending where the answer begins."""
        if self.chat:
            return self.tok.apply_chat_template(
                self._messages(question, passages), tokenize=False, add_generation_prompt=True
            )
        shots = "".join(f"{self.user_text(q, [])}\nAnswer: {a}\n\n" for q, a in self.fewshot)
        return f"{shots}{self.user_text(question, passages)}\nAnswer:"

    def _ids(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=not self.chat)["input_ids"])

    # -- ids, cut to fit
    def ids(self, question: str, passages: Sequence[str]) -> list[int]:
        """Prompt token ids, passages cut to one budget when the whole would exceed max_prompt_tokens."""
        ids = self._ids(self.text(question, passages))
        if len(ids) <= self.max_prompt_tokens:
            return ids
        base = len(self._ids(self.text(question, [""] * len(passages))))
        room = self.max_prompt_tokens - base
        if room < len(passages):
            raise RalmError(
                f"a question of {base} prompt tokens leaves no room for passages in "
                f"{self.max_prompt_tokens} tokens; raise --max-prompt-tokens or shorten the question"
            )
        enc = self.tok(list(passages), add_special_tokens=False, return_offsets_mapping=True)
        lengths = [len(x) for x in enc["input_ids"]]
        budget = _water_level(lengths, room)
        for _ in range(_FITS):
            cut = [
                p if n <= budget else p[: offs[budget - 1][1]] if budget > 0 else ""
                for p, n, offs in zip(passages, lengths, enc["offset_mapping"], strict=True)
            ]
            ids = self._ids(self.text(question, cut))
            if len(ids) <= self.max_prompt_tokens:
                self.truncated += 1
                return ids
            budget = max(
                0, budget - max(1, (len(ids) - self.max_prompt_tokens + len(passages) - 1) // len(passages))
            )
        raise RalmError(
            f"could not fit the prompt into {self.max_prompt_tokens} tokens; raise --max-prompt-tokens"
        )

    def answer_ids(self, question: str, passages: Sequence[str], answer: str) -> list[int]:
        """Token ids of the answer turn that follows the prompt: the answer and its end-of-turn token."""
        if self.chat:
            msgs = self._messages(question, passages)
            head = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            full = self.tok.apply_chat_template(
                msgs + [{"role": "assistant", "content": answer}], tokenize=False
            )
            if not full.startswith(head):
                raise RalmError(
                    "the chat template renders the answer turn apart from the prompt; use --no-chat"
                )
            tail = full[len(head) :].rstrip()
        else:
            tail = " " + answer.strip() + (self.tok.eos_token or "\n")
        return list(self.tok(tail, add_special_tokens=False)["input_ids"])

    def training_example(self, question: str, passages: Sequence[str], answer: str) -> TrainingExample:
        """Prompt + answer turn, the loss on the answer turn's tokens only."""
        prompt = self.ids(question, passages)
        answer_ids = self.answer_ids(question, passages, answer)
        return TrainingExample(prompt + answer_ids, [-100] * len(prompt) + answer_ids)


def _water_level(lengths: Sequence[int], room: int) -> int:
    """The largest b with sum(min(n, b) for n in lengths) <= room (each passage keeps up to b tokens).

    Example: _water_level([10, 100, 100], 110) -> 50 (10 + 50 + 50).
    """
    lo, hi = 0, max(lengths, default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in lengths) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo
