"""Greedy decoding for RAG QA: batched prompts with the KV cache, and REPLUG's per-passage ensemble.

`greedy(lm, prompts)`: prompts (token id lists) are sorted by length and decoded in batches,
left-padded with an attention mask, through the model's own `generate` (greedy, KV cache), so
a batch gives what each prompt gives alone. Decoding of a row stops at any of `stop_ids` (the
end-of-sequence and end-of-turn tokens) or after `max_new_tokens`; the returned ids exclude the
stop token.

`replug(lm, groups, weights)`: REPLUG (Shi et al. 2023, eq. 1) for generation. A question's group
holds one prompt per passage; at every step each prompt's next-token distribution is computed
(one forward per passage, all passages of a batch of questions in one forward with the cache),
the distributions are mixed with the passage weights (softmax of the retrieval scores), and the
arg-max token is appended to every prompt of the group.

`answer_text(tokenizer, ids)` decodes and applies the stop rule: the first line, stripped.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

__all__ = ["answer_text", "cut_when", "first_line_done", "greedy", "replug", "stop_token_ids"]


def stop_token_ids(tokenizer) -> list[int]:
    """End-of-sequence plus the chat template's end-of-turn tokens that the vocabulary holds."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    for t in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"):
        if t in vocab and vocab[t] not in ids:
            ids.append(int(vocab[t]))
    return ids


def _generated_text(tokenizer, ids: Sequence[int]) -> str:
    """The generated ids as text, special tokens dropped, leading space stripped: what both the
    answer (`answer_text`) and the first-line stop (`first_line_done`) read."""
    return tokenizer.decode(list(ids), skip_special_tokens=True).lstrip()


def answer_text(tokenizer, ids: Sequence[int]) -> str:
    """The generated answer: decoded without special tokens, cut at the first line break, stripped."""
    return _generated_text(tokenizer, ids).split("\n", 1)[0].strip()


def _stop_and_pad(tokenizer, stop_ids: Sequence[int] | None) -> tuple[list[int], int]:
    """The stop ids (given, or `stop_token_ids`) and the padding id (the tokenizer's, else a stop id)."""
    stop = list(stop_ids) if stop_ids is not None else stop_token_ids(tokenizer)
    if tokenizer.pad_token_id is not None:
        return stop, int(tokenizer.pad_token_id)
    return stop, int(stop[0]) if stop else 0


def _batches(lengths: Sequence[int], batch_size: int, batch_tokens: int, order: np.ndarray):
    i = 0
    while i < len(order):
        width = lengths[order[i]]
        n = max(1, min(batch_size, batch_tokens // max(width, 1), len(order) - i))
        yield order[i : i + n]
        i += n


def _left_pad(rows: Sequence[Sequence[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    x = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            x[i, width - len(r) :] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return x.to(device), mask.to(device)


def _trim(ids: list[int], stop: set[int]) -> list[int]:
    for j, t in enumerate(ids):
        if t in stop:
            return ids[:j]
    return ids


def first_line_done(tokenizer) -> Callable[[Sequence[int]], bool]:
    """done(ids): whether the text of `ids` already holds its first line whole (a line break after
    its first non-space character). `answer_text` keeps that line alone, so decoding may stop there
    and the answer is the same."""

    def done(ids: Sequence[int]) -> bool:
        return "\n" in _generated_text(tokenizer, ids)

    return done


def cut_when(ids: list[int], done: Callable[[Sequence[int]], bool] | None) -> list[int]:
    """The shortest prefix of `ids` for which `done` holds (all of `ids` when none does)."""
    if done is None:
        return ids
    for j in range(1, len(ids) + 1):
        if done(ids[:j]):
            return ids[:j]
    return ids


class _StopWhen:
    """A transformers stopping criterion: a row is finished once `done(its new ids)` holds."""

    def __init__(self, done: Callable[[Sequence[int]], bool], start: int) -> None:
        self.done, self.start = done, start

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        rows = input_ids[:, self.start :].tolist()
        return torch.tensor([self.done(r) for r in rows], dtype=torch.bool, device=input_ids.device)


@torch.inference_mode()
def greedy(
    lm,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int = 20,
    stop_ids: Sequence[int] | None = None,
    batch_size: int = 32,
    batch_tokens: int = 32768,
    progress=None,
    first_line: bool = False,
) -> list[list[int]]:
    """Greedy continuations (new ids, stop token excluded) of each prompt, in the order given.

    lm: a `ralm.frozen.lm.FrozenLM` (model, tokenizer, device, autocast); when it carries a
    `decoder` (another backend, `ralm.frozen.backends`) the decoding is that decoder's. `progress(n)`
    is called after each batch with the number of prompts it held. `first_line`: stop a row once
    its first line is whole (`first_line_done`) and return the ids up to there: `answer_text` gives
    the same answer, without the tokens after the line break being generated.
    """
    from transformers import StoppingCriteriaList

    from ralm.models.precision import autocast_context

    tok = lm.tokenizer
    stop, pad = _stop_and_pad(tok, stop_ids)
    done = first_line_done(tok) if first_line else None
    if hasattr(lm, "announce_backend"):
        lm.announce_backend()
    decoder = getattr(lm, "decoder", None)
    if getattr(decoder, "torch_lm", None) is not None:  # torch-int8: PyTorch's decoding, another model
        kw = {"batch_size": batch_size, "batch_tokens": batch_tokens, "progress": progress}
        return greedy(
            decoder.torch_lm,
            prompts,
            max_new_tokens=max_new_tokens,
            stop_ids=stop,
            first_line=first_line,
            **kw,
        )
    if decoder is not None and len(prompts) > 1 and getattr(decoder, "batches_in_torch", False):
        decoder = None  # "auto" with several prompts: torch's batched generate
    if decoder is not None:  # a faster backend (ralm.frozen.backends): its own batching
        out = [cut_when(ids, done) for ids in decoder.greedy(prompts, max_new_tokens, stop, done)]
        if progress is not None:
            progress(len(prompts))
        return out
    lengths = [len(p) for p in prompts]
    order = np.argsort([-n for n in lengths], kind="stable")
    out: list[list[int]] = [[] for _ in prompts]
    for batch in _batches(lengths, batch_size, batch_tokens, order):
        x, mask = _left_pad([prompts[i] for i in batch], pad, lm.device)
        criteria = StoppingCriteriaList([_StopWhen(done, x.shape[1])]) if done is not None else None
        with autocast_context(lm.device, lm.decoding_autocast(len(batch))):
            y = lm.model.generate(
                input_ids=x,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                eos_token_id=stop,
                pad_token_id=pad,
                temperature=None,
                top_p=None,
                top_k=None,
                stopping_criteria=criteria,
            )
        new = y[:, x.shape[1] :].tolist()
        for r, i in enumerate(batch):
            out[i] = cut_when(_trim(new[r], set(stop)), done)
        if progress is not None:
            progress(len(batch))
    return out


def passage_weights(scores: Sequence[float], temperature: float = 1.0) -> np.ndarray:
    """REPLUG's passage weights: softmax(score / temperature) over a question's passages, float64."""
    s = np.asarray(scores, dtype=np.float64) / float(temperature)
    s = s - s.max()
    w = np.exp(s)
    return w / w.sum()


@torch.inference_mode()
def replug(
    lm,
    groups: Sequence[Sequence[Sequence[int]]],
    weights: Sequence[Sequence[float]],
    *,
    max_new_tokens: int = 20,
    stop_ids: Sequence[int] | None = None,
    batch_size: int = 32,
    batch_tokens: int = 32768,
    progress=None,
) -> list[list[int]]:
    """REPLUG ensemble decoding: per question, mix its passages' next-token distributions.

    groups[q]: the prompt ids of question q, one per passage; weights[q]: their mixture weights
    (summing to 1). `batch_size` counts prompts (passages), so a batch holds whole questions.
    """
    from ralm.models.precision import autocast_context
    from ralm.models.quiet import quiet_transformers

    stop, pad = _stop_and_pad(lm.tokenizer, stop_ids)
    stop_set = set(stop)
    k = max(len(g) for g in groups) if groups else 1
    lengths = [max(len(p) for p in g) * len(g) // k for g in groups]
    order = np.argsort([-n for n in lengths], kind="stable")
    out: list[list[int]] = [[] for _ in groups]
    for batch in _batches(lengths, max(1, batch_size // k), batch_tokens // k, order):
        rows = [p for q in batch for p in groups[q]]
        owner = torch.as_tensor([j for j, q in enumerate(batch) for _ in groups[q]], device=lm.device)
        w = torch.as_tensor(
            np.concatenate([np.asarray(weights[q], dtype=np.float64) for q in batch]),
            dtype=torch.float32,
            device=lm.device,
        )
        x, mask = _left_pad(rows, pad, lm.device)
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        done = torch.zeros(len(batch), dtype=torch.bool, device=lm.device)
        gen: list[list[int]] = [[] for _ in batch]
        cache = None
        inp, inp_pos = x, pos
        for _ in range(max_new_tokens):
            with (
                autocast_context(lm.device, lm.decoding_autocast(len(rows))),
                warnings.catch_warnings(),
                quiet_transformers(),
            ):
                warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)
                res = lm.model(
                    input_ids=inp,
                    attention_mask=mask,
                    position_ids=inp_pos,
                    past_key_values=cache,
                    use_cache=True,
                )
            cache = res.past_key_values
            p = torch.softmax(res.logits[:, -1].float(), dim=-1) * w[:, None]
            mixed = torch.zeros((len(batch), p.shape[1]), dtype=p.dtype, device=p.device).index_add_(
                0, owner, p
            )
            nxt = mixed.argmax(dim=-1)
            for j, t in enumerate(nxt.tolist()):
                if not done[j]:
                    if t in stop_set:
                        done[j] = True
                    else:
                        gen[j].append(t)
            if bool(done.all()):
                break
            inp = nxt[owner][:, None]
            inp_pos = inp_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=mask.device)], dim=1)
        for j, q in enumerate(batch):
            out[q] = gen[j]
        if progress is not None:
            progress(len(batch))
    return out
