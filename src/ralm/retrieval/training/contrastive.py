"""The contrastive step of dual-encoder training: in-batch and hard negatives, with gradient caching.

A step scores B queries against N documents: each query's positive, the other queries' positives
(in-batch negatives) and any hard negatives (DPR: one BM25 negative per question, so N = 2B):

    logits[i, j] = score(q_i, d_j) / temperature          (B, N); score = the encoder's `score`
    loss         = mean_i -log softmax(logits[i])[target_i]

`mask[i, j] = True` removes document j from query i's softmax: a document that is another
positive of query i (two questions about one passage in a batch, a passage holding the answer)
would otherwise be pushed away as a false negative. With unit vectors and temperature 0.05
this is sentence-transformers' MultipleNegativesRankingLoss (cosine x 20). The trainer keeps the
temperature in the encoder (`EncoderConfig.score_scale` = 1/temperature) and steps at 1.

Gradient caching (Gao et al. 2021, "GradCache"; sentence-transformers'
CachedMultipleNegativesRankingLoss) makes the batch independent of memory: the towers run in
mini-batches of `chunk` rows without autograd to get every vector, the loss and its gradient
with respect to the vectors are computed on the whole batch, then each mini-batch runs again
with autograd and back-propagates its slice of that gradient. Activations of one mini-batch
live at a time, so batch 256 needs the memory of a `chunk`-row forward; the price is one extra
forward pass. Dropout draws the same masks in both passes (the generator state of each
mini-batch is replayed), so the gradients equal the uncached step's to float tolerance. Two
savings: each tower's first mini-batch runs with autograd in the first pass and keeps its graph
(one forward fewer per tower; a batch that fits one mini-batch costs what the uncached step
does), and rows go into mini-batches longest first, so each pads to lengths near its own.

Left out: a cross-device all-gather of vectors (multi-GPU in-batch negatives).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ralm.models.precision import autocast_context
from ralm.retrieval.encoders import DualEncoder, Tower
from ralm.train.loop import backpropagate

Rows = list[tuple[list, list]]  # per sequence (token ids, token type ids), specials included


def contrastive_loss(
    scores: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None, temperature: float = 1.0
) -> torch.Tensor:
    """Mean cross-entropy of each query's target document among all documents.

    scores: (B, N) query-document scores; targets: (B,) column of each query's positive;
    mask: (B, N) bool, True = leave that document out of that query's softmax (never the target).
    Example: scores [[1, 0, 1]], target [0], temperature 1 -> -log(e / (e + 1 + e)) = 0.8620.
    """
    logits = scores.float() / temperature
    if mask is not None:
        keep_target = torch.zeros_like(mask)
        keep_target[torch.arange(len(targets)), targets] = True
        logits = logits.masked_fill(mask & ~keep_target, float("-inf"))
    return F.cross_entropy(logits, targets)


@dataclass
class StepResult:
    """What a step reports: the loss value and the in-batch accuracy (target ranked first)."""

    loss: float
    accuracy: float


@contextlib.contextmanager
def _replay(state: dict | None):
    """Run the block with the generator states in `state` (CPU and CUDA), then restore the current ones."""
    if state is None:
        yield
        return
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if state.get("cuda") is not None else None
    torch.set_rng_state(state["cpu"])
    if cuda is not None:
        torch.cuda.set_rng_state_all(state["cuda"])
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _rng_state(device: torch.device) -> dict:
    return {
        "cpu": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if device.type == "cuda" else None,
    }


def _forward(tower: Tower, rows: Rows, device: torch.device, amp) -> torch.Tensor:
    """(len(rows), dim) float32 vectors of one padded mini-batch."""
    inputs = tower.template.collate(rows, tower.uses_token_types)
    with autocast_context(device, amp):
        return tower(**{k: v.to(device) for k, v in inputs.items()}).float()


def _slices(n: int, chunk: int) -> list[slice]:
    return [slice(s, min(n, s + chunk)) for s in range(0, n, chunk)]


def _by_length(rows: Rows) -> list[int]:
    """Row indices, longest first (stable), so each mini-batch pads to lengths close to its own."""
    return sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))


def contrastive_step(
    encoder: DualEncoder,
    q_rows: Rows,
    d_rows: Rows,
    targets: Sequence[int],
    mask: torch.Tensor | None = None,
    **options: Any,
) -> StepResult:
    """Forward and backward of one contrastive batch; gradients accumulate in the encoder's .grad.

    q_rows: B query inputs (query tower), d_rows: N document inputs (doc tower), built with the
    towers' `template.build`; targets: B columns; mask: (B, N) bool (see `contrastive_loss`).
    options: `contrastive_losses`' temperature, chunk (0 = one forward/backward of the whole
    batch; > 0 = gradient caching with mini-batches of that many rows), amp and device. The caller
    zeroes gradients and steps the optimiser (or hands `contrastive_losses` to
    `ralm.train.loop.optimizer_step`, which does both).
    """
    result, losses = contrastive_losses(encoder, q_rows, d_rows, targets, mask, **options)
    backpropagate(losses)
    return result


def contrastive_losses(
    encoder: DualEncoder,
    q_rows: Rows,
    d_rows: Rows,
    targets: Sequence[int],
    mask: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    chunk: int = 0,
    amp: torch.dtype | None = None,
    device: torch.device | None = None,
) -> tuple[StepResult, Iterator[torch.Tensor]]:
    """The batch's loss and accuracy, and the losses whose back-propagation gives the batch's
    gradients (rows, targets and mask as `contrastive_step`; temperature as `contrastive_loss`;
    amp: the towers' autocast dtype; device: the encoder's by default). chunk <= 0: the loss itself. chunk > 0 (gradient
    caching): every vector is computed first (pass 1) and the loss's gradient with respect to the
    vectors taken; the losses then come one mini-batch at a time, each the sum of its vectors times
    their gradient (the surrogate whose gradient with respect to the tower's weights is that
    mini-batch's share of the loss's), a replayed mini-batch's forward running only when its loss
    is asked for, so one mini-batch's graph lives at a time."""
    device = device or next(encoder.parameters()).device
    tgt = torch.as_tensor(list(targets), dtype=torch.long, device=device)
    m = None if mask is None else mask.to(device)
    qt, dt = encoder.query_tower, encoder.doc_tower
    if chunk <= 0:
        scores = encoder.score(_forward(qt, q_rows, device, amp), _forward(dt, d_rows, device, amp))
        loss = contrastive_loss(scores, tgt, m, temperature)
        return _result(loss, scores, m, tgt), iter([loss])

    # pass 1: every vector, mini-batch by mini-batch, rows sorted longest first (less padding);
    # each tower's first (longest) mini-batch with autograd, its graph kept for pass 2 (pass 2's
    # peak is that mini-batch anyway), the others without, remembering their generator states
    plans = []
    parts = []
    for tower, rows in ((qt, q_rows), (dt, d_rows)):
        order = _by_length(rows) if len(rows) > chunk else list(range(len(rows)))
        srows = [rows[i] for i in order]
        slices = _slices(len(srows), chunk)
        kept = _forward(tower, srows[slices[0]], device, amp)
        vecs, states = [kept.detach()], []
        for sl in slices[1:]:
            states.append(_rng_state(device))
            with torch.no_grad():
                vecs.append(_forward(tower, srows[sl], device, amp))
        order_t = torch.as_tensor(order, device=device)
        plans.append((tower, srows, slices, states, kept, order_t))
        parts.append(torch.cat(vecs)[torch.argsort(order_t)])  # back in the caller's row order
    q = parts[0].requires_grad_(True)
    d = parts[1].requires_grad_(True)
    scores = encoder.score(q, d)
    loss = contrastive_loss(scores, tgt, m, temperature)
    q_grad, d_grad = torch.autograd.grad(loss, [q, d])  # the loss's gradient for every vector
    grads = [g[order_t] for g, (*_, order_t) in zip((q_grad, d_grad), plans, strict=True)]

    def surrogates() -> Iterator[torch.Tensor]:
        # pass 2: the kept graphs first (freeing them), then each other mini-batch again with
        # autograd and the same dropout, carrying its slice of the vectors' gradient
        for (_, _, slices, _, kept, _), g in zip(plans, grads, strict=True):
            yield (kept * g[slices[0]]).sum()
        for (tower, srows, slices, states, _, _), g in zip(plans, grads, strict=True):
            for sl, state in zip(slices[1:], states, strict=True):
                with _replay(state):
                    v = _forward(tower, srows[sl], device, amp)
                yield (v * g[sl]).sum()

    return _result(loss, scores, m, tgt), surrogates()


def _result(
    loss: torch.Tensor, scores: torch.Tensor, mask: torch.Tensor | None, tgt: torch.Tensor
) -> StepResult:
    """The batch's loss and in-batch accuracy (each query's best unmasked document is its target)."""
    acc = (scores.detach().masked_fill(_off_target(mask, tgt), float("-inf")).argmax(1) == tgt).float()
    return StepResult(float(loss.detach()), float(acc.mean().item()))


def _off_target(mask: torch.Tensor | None, targets: torch.Tensor) -> torch.Tensor:
    """The mask without each row's target column (all False when there is no mask)."""
    if mask is None:
        return torch.zeros((len(targets), 1), dtype=torch.bool, device=targets.device)
    out = mask.clone()
    out[torch.arange(len(targets)), targets] = False
    return out
