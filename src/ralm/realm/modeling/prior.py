"""p(z|x): from the towers' relevance scores to a distribution over the K retrieved documents and ∅.

REALM takes p(z|x) = softmax_z f(x, z) over the top k. How sharp that softmax can get is set by
the scale of f: REALM's unnormalised 128-d inner products can grow during training, but towers
that give unit vectors times a fixed factor (ralm's DPR recipe: 20 x cosine) or q.d / sqrt(d) are
stuck at the sharpness they start with. Two learnable scalars undo that:

* ``scale = "learned"``: f'(x, z) = exp(s) * f(x, z), one log-scale s starting at 0 (today's
  scores), trained with its own learning rate and no weight decay (Atlas divides by a tuned
  temperature instead; a learned one finds its own). ``"fixed"`` keeps f as the towers give it.
* ``null = "logit"``: the null document's score is the mean of the query's retrieved scores
  plus one learned offset b (starting at `null_logit_init`). With b = 0 the null document starts
  level with a typical retrieved chunk, so it can win where no chunk helps; b's gradient is
  posterior minus prior mass of ∅, summed over the batch. p(z|x) does not change when every score
  moves by the same amount, and neither can a gradient move them so: the null's mass is b's to
  set. (Until 2026-11-29 the mean was detached; then a loss that wanted less null mass pushed
  every retrieved score up, without end: in the `answer` arm the query vectors' norm grew 4x, they
  turned to one direction (mean cosine 0.06 -> 0.995), and every held-out query retrieved the same
  3 chunks.) The other null documents
  ("empty": the doc tower's [CLS][SEP]; "zeros": a learned vector) score on the towers' scale,
  which measured at 0.05% of p(z|x) after training (issue 45); their scores still go through
  the scale here.

Shapes: scores (B, K); the null document is appended last, as `doc_log_probs` does.
"""

from __future__ import annotations

import torch
from torch import nn

from ralm.errors import RalmError
from ralm.realm.modeling.marginal import doc_log_probs

SCALES = ("fixed", "learned")

__all__ = ["SCALES", "RetrievalPrior"]


class RetrievalPrior(nn.Module):
    """log p(z|x) from scores, with an optional learned log-scale and null-document logit.

    scale: "fixed" or "learned" (see the module docstring). null_logit: True for ``null_doc =
    "logit"``; `null_logit_init` is b's starting value. With ``scale="fixed"`` and no null logit
    the module holds no parameters, so a run saved before it existed loads unchanged.
    """

    def __init__(
        self, scale: str = "fixed", *, null_logit: bool = False, null_logit_init: float = 0.0
    ) -> None:
        super().__init__()
        if scale not in SCALES:
            raise RalmError(f"score_scale {scale!r}: choose {' or '.join(SCALES)}")
        self.log_scale = nn.Parameter(torch.zeros(())) if scale == "learned" else None
        self.null_logit = nn.Parameter(torch.tensor(float(null_logit_init))) if null_logit else None

    @property
    def scale(self) -> float:
        """The current multiplier exp(s) on the towers' scores (1.0 when fixed)."""
        return 1.0 if self.log_scale is None else float(self.log_scale.detach().exp())

    def scaled(self, scores: torch.Tensor) -> torch.Tensor:
        """f'(x, z) = exp(s) * f(x, z) (the scores unchanged when the scale is fixed); any shape."""
        if self.log_scale is None:
            return scores
        return scores * self.log_scale.exp().to(scores.dtype)

    def log_probs(
        self,
        scores: torch.Tensor,
        null_score: torch.Tensor | None = None,
        null_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """log p(z|x): (B, K) scaled scores -> (B, K) log-probabilities, or (B, K+1) with the null
        document last: the learned logit when this prior has one, else `null_score` (B,), already
        scaled, or None for no null document. `null_from` (B, k): the scores whose mean sets the
        learned null's score, when not all of `scores` (a query's own k candidates, where `scores`
        also holds in-batch negatives, some of them -inf)."""
        if self.null_logit is not None:
            # not detached: a shift of every score moves the null with them, so no loss can push
            # every score (and the query vector's norm) up to take mass from the null
            base = scores if null_from is None else null_from
            null_score = base.mean(1) + self.null_logit.to(scores.dtype)
        return doc_log_probs(scores, null_score)

    def extra_repr(self) -> str:
        return f"scale={'learned' if self.log_scale is not None else 'fixed'}, null_logit={self.null_logit is not None}"
