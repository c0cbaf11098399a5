"""Extractive QA (SQuAD v1.1) features and span decoding; the span model and training live elsewhere.

`qa_features` turns (question, context) examples into fixed-length windows the Hugging Face way:
the question (cut to `max_query_length` tokens) comes first, the context is split into windows of
at most `max_length` tokens that overlap by `doc_stride` tokens, and each window carries the
character offsets of its context tokens. The training target of a window is the token span of
the first gold answer when that answer lies wholly inside the window, else (0, 0) -- the [CLS]
position, the usual "not in this window" label.

`decode_predictions` takes start/end logits of every window, picks for each example the
highest-scoring span (start logit + end logit, end >= start, at most `max_answer_len` tokens,
context tokens only) over all of its windows, and maps it back to the context's characters.
`span_log_probs` gives the per-window log-softmax over context positions, for marginalising over
retrieved documents.

Left out: SQuAD v2 no-answer prediction, n-best lists, and answers that start or end inside a
token (their span is widened to whole tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.formats.types import QAExample

# Windows decoded together: a chunk's (B, L, L) score tensor at L=384 is B * 0.6 MB.
_DECODE_CHUNK = 128


@dataclass
class QAFeatures:
    """The windows of a list of QA examples (F windows, padded to L tokens).

    input_ids, attention_mask, token_type_ids: (F, L) long.
    example_index: (F,) int64 numpy, the index into the example list each window comes from.
    offsets: F lists of L entries: (start_char, end_char) into the example's context for a context
    token, None for question, special and padding tokens.
    start_positions, end_positions: (F,) long, the first gold answer's token span when it lies
    wholly inside the window, else 0 (the [CLS] index).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor
    example_index: np.ndarray
    offsets: list[list[tuple[int, int] | None]]
    start_positions: torch.Tensor
    end_positions: torch.Tensor

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def context_mask(self) -> torch.Tensor:
        """(F, L) bool: True on context tokens (those with offsets), the positions a span may use."""
        if not self.offsets:
            return torch.zeros(self.input_ids.shape, dtype=torch.bool)
        return torch.tensor([[o is not None for o in row] for row in self.offsets], dtype=torch.bool)


def _truncate_questions(tokenizer, questions: list[str], max_query_length: int) -> list[str]:
    """Questions cut after their `max_query_length`-th token: ("who was ...", 2) -> "who was"."""
    enc = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for q, ids, offs in zip(questions, enc["input_ids"], enc["offset_mapping"], strict=True):
        k = max_query_length
        while len(ids) > max_query_length and k > 0:
            # Cut at the end of token k; re-tokenising a cut word may give more pieces, so re-check.
            q = q[: offs[k - 1][1]]
            ids = tokenizer(q, add_special_tokens=False)["input_ids"]
            k -= 1
        out.append(q)
    return out


def _answer_span(offs: list[tuple[int, int] | None], start_char: int, end_char: int) -> tuple[int, int]:
    """Token span of characters [start_char, end_char) if the window's context covers it, else (0, 0).

    Example: _answer_span([None, (0, 3), (4, 9), None], 4, 9) -> (2, 2).
    """
    ctx = [t for t, o in enumerate(offs) if o is not None]
    if not ctx or end_char <= start_char:
        return 0, 0
    if not (offs[ctx[0]][0] <= start_char and offs[ctx[-1]][1] >= end_char):
        return 0, 0
    s = next((t for t in ctx if offs[t][1] > start_char), None)
    e = next((t for t in reversed(ctx) if offs[t][0] < end_char), None)
    if s is None or e is None or e < s:
        return 0, 0
    return s, e


def qa_features(
    tokenizer,
    examples: Sequence[QAExample],
    max_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
) -> QAFeatures:
    """Doc-stride windows of `examples` (question first, context cut into overlapping windows).

    Example: qa_features(tok, [QAExample("q1", "Who?", long_text, ["Ada"], [120])], 64, 16).
    Consecutive windows of one context share `doc_stride` tokens. Leading whitespace of a question
    is dropped (it only wastes tokens). Needs a fast tokenizer with a padding token.
    """
    specials = tokenizer.num_special_tokens_to_add(pair=True)
    if max_query_length < 1:
        raise RalmError(f"max_query_length={max_query_length}: must be at least 1")
    if max_length - max_query_length - specials <= doc_stride:
        raise RalmError(
            f"max_length={max_length} leaves at most {max_length - max_query_length - specials} context "
            f"tokens per window after a {max_query_length}-token question, not more than "
            f"doc_stride={doc_stride}; raise max_length or lower doc_stride/max_query_length"
        )
    if not examples:
        none = torch.zeros(0, dtype=torch.long)
        empty = torch.zeros((0, 0), dtype=torch.long)
        return QAFeatures(empty, empty, empty, np.zeros(0, dtype=np.int64), [], none, none)
    questions = _truncate_questions(tokenizer, [ex.question.lstrip() for ex in examples], max_query_length)
    enc = tokenizer(
        questions,
        [ex.context for ex in examples],
        truncation="only_second",
        max_length=max_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="longest",
    )
    sample = np.asarray(enc["overflow_to_sample_mapping"], dtype=np.int64)
    offsets: list[list[tuple[int, int] | None]] = []
    starts: list[int] = []
    ends: list[int] = []
    for i, ex_i in enumerate(sample):
        seq = enc.sequence_ids(i)
        offs = [
            (int(o[0]), int(o[1])) if s == 1 else None
            for o, s in zip(enc["offset_mapping"][i], seq, strict=True)
        ]
        offsets.append(offs)
        ex = examples[int(ex_i)]
        s = e = 0
        if ex.answers and ex.answer_starts:
            a = ex.answer_starts[0]
            s, e = _answer_span(offs, a, a + len(ex.answers[0]))
        starts.append(s)
        ends.append(e)
    input_ids = torch.tensor(enc["input_ids"], dtype=torch.long)
    tti = enc.get("token_type_ids")
    return QAFeatures(
        input_ids=input_ids,
        attention_mask=torch.tensor(enc["attention_mask"], dtype=torch.long),
        token_type_ids=torch.tensor(tti, dtype=torch.long)
        if tti is not None
        else torch.zeros_like(input_ids),
        example_index=sample,
        offsets=offsets,
        start_positions=torch.tensor(starts, dtype=torch.long),
        end_positions=torch.tensor(ends, dtype=torch.long),
    )


def _best_spans(
    start_logits: torch.Tensor, end_logits: torch.Tensor, allowed: torch.Tensor, max_answer_len: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batched best_span: (B, L) inputs -> starts (B,), ends (B,), scores (B,); -1/-1/-inf if none allowed.

    Example: _best_spans(s[None], e[None], ok[None], 30) -> (tensor([4]), tensor([6]), tensor([9.1])).
    """
    if max_answer_len < 1:
        raise ValueError(f"max_answer_len={max_answer_len}: must be at least 1")
    start_logits = start_logits.float()
    end_logits = end_logits.float()
    allowed = allowed.to(device=start_logits.device, dtype=torch.bool)
    B, L = start_logits.shape
    ones = torch.ones(L, L, dtype=torch.bool, device=start_logits.device)
    band = torch.triu(ones) & ~torch.triu(ones, diagonal=max_answer_len)  # s <= e < s + max_answer_len
    mask = (band[None] & allowed[:, :, None] & allowed[:, None, :]).flatten(1)  # (B, L*L)
    scores = (start_logits[:, :, None] + end_logits[:, None, :]).flatten(1).masked_fill(~mask, float("-inf"))
    best = scores.argmax(dim=1)
    any_ok = mask.any(dim=1)
    # When every allowed span scores -inf, argmax may land on a forbidden cell: take the first allowed.
    hit = mask.gather(1, best[:, None]).squeeze(1)
    best = torch.where(hit | ~any_ok, best, mask.to(torch.uint8).argmax(dim=1))
    score = scores.gather(1, best[:, None]).squeeze(1)
    none = torch.full_like(best, -1)
    return (
        torch.where(any_ok, best // L, none),
        torch.where(any_ok, best % L, none),
        torch.where(any_ok, score, torch.full_like(score, float("-inf"))),
    )


def best_span(
    start_logits: torch.Tensor, end_logits: torch.Tensor, allowed: torch.Tensor, max_answer_len: int = 30
) -> tuple[int, int, float]:
    """The span maximising start_logits[s] + end_logits[e] with s <= e < s + max_answer_len.

    Example: best_span(torch.tensor([0., 5, 0]), torch.tensor([0., 0, 3]), torch.ones(3, dtype=bool))
    -> (1, 2, 8.0).
    start_logits, end_logits, allowed: (L,); both ends must be allowed positions. Computed on the
    (L, L) score matrix under a band mask. Returns (-1, -1, -inf) when no position is allowed.
    """
    s, e, score = _best_spans(start_logits[None], end_logits[None], allowed[None], max_answer_len)
    return int(s[0]), int(e[0]), float(score[0])


def decode_predictions(
    features: QAFeatures,
    examples: Sequence[QAExample],
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    max_answer_len: int = 30,
) -> dict[str, str]:
    """example id -> answer text: the best span over all of the example's windows.

    Example: decode_predictions(feats, examples, start (F, L), end (F, L)) -> {"q1": "Ada Lovelace"}.
    Spans use context tokens only and are compared across windows by raw start + end logit; the
    text is the context's characters from the span's first token start to its last token end.
    An example whose windows hold no context token predicts "".
    """
    if start_logits.shape != end_logits.shape or start_logits.shape != features.input_ids.shape:
        raise ValueError(
            f"logits {tuple(start_logits.shape)}/{tuple(end_logits.shape)} do not match the "
            f"features' {tuple(features.input_ids.shape)}"
        )
    allowed = features.context_mask()
    best: dict[int, tuple[float, int, int, int]] = {}  # example index -> (score, feature, start, end)
    with torch.no_grad():
        for c in range(0, len(features), _DECODE_CHUNK):
            sl = slice(c, c + _DECODE_CHUNK)
            s, e, sc = _best_spans(
                start_logits[sl].detach().cpu(), end_logits[sl].detach().cpu(), allowed[sl], max_answer_len
            )
            for j, (sj, ej, scj) in enumerate(zip(s.tolist(), e.tolist(), sc.tolist(), strict=True)):
                if sj < 0:
                    continue
                f = c + j
                ex_i = int(features.example_index[f])
                if ex_i not in best or scj > best[ex_i][0]:
                    best[ex_i] = (scj, f, sj, ej)
    out: dict[str, str] = {}
    for i, ex in enumerate(examples):
        if i not in best:
            out[ex.id] = ""
            continue
        _, f, s, e = best[i]
        out[ex.id] = ex.context[features.offsets[f][s][0] : features.offsets[f][e][1]]
    return out


def _masked_log_softmax(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """log-softmax over the allowed positions of the last dim; -inf elsewhere and on empty rows."""
    allowed = allowed.to(device=logits.device, dtype=torch.bool)
    lp = logits.float().masked_fill(~allowed, float("-inf")).log_softmax(dim=-1)
    return torch.where(allowed, lp, torch.full_like(lp, float("-inf")))


def span_log_probs(
    start_logits: torch.Tensor, end_logits: torch.Tensor, allowed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(start), log p(end)), each (F, L): log-softmax over the allowed positions only.

    Example: span_log_probs(s, e, feats.context_mask()) -> rows that logsumexp to 0 over context.
    Positions not allowed get -inf; a row with no allowed position is all -inf (never NaN).
    """
    return _masked_log_softmax(start_logits, allowed), _masked_log_softmax(end_logits, allowed)
