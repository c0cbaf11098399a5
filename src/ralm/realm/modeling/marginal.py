"""REALM's marginal likelihood over retrieved documents (pure tensor math, no models).

REALM §2–3: p(y|x) = Σ_z p(y|z,x) p(z|x), with p(z|x) a softmax of the relevance scores f(x, z)
over the top-k retrieved documents plus, optionally, the null document ∅ (an empty document that
absorbs credit when no retrieval is needed). Everything is computed in log space.

The scores are taken as given: the retriever is responsible for any scaling (BRENT §3 divides the
inner product by sqrt(h)). The gradient of log p(y|x) with respect to a score f(x, z) is REALM's
r(z) = [p(y|z,x)/p(y|x) − 1] p(z|x); autograd through these functions gives exactly that.
"""

from __future__ import annotations

import torch

__all__ = [
    "distillation_loss",
    "doc_log_probs",
    "marginal_log_likelihood",
    "posterior",
    "retrieval_utility",
    "span_marginal_log_likelihood",
]


def doc_log_probs(scores: torch.Tensor, null_score: torch.Tensor | None = None) -> torch.Tensor:
    """log p(z|x): log-softmax of the retrieval scores, with the null document appended LAST.

    Args:
        scores: (B, K) relevance scores f(x, z) of the K retrieved documents.
        null_score: (B,) score of the null document, or None for no null document.

    Returns:
        (B, K) log-probabilities, or (B, K+1) when `null_score` is given (null in column K).

    Example: ``doc_log_probs(torch.zeros(1, 3), torch.zeros(1)).exp()`` -> ``[[0.25] * 4]``.
    """
    if scores.dim() != 2:
        raise ValueError(f"scores must be (B, K), got shape {tuple(scores.shape)}")
    if null_score is not None:
        if null_score.shape != scores.shape[:1]:
            raise ValueError(
                f"null_score must be (B,)={tuple(scores.shape[:1])}, got {tuple(null_score.shape)}"
            )
        scores = torch.cat([scores, null_score.to(scores.dtype).unsqueeze(1)], dim=1)
    return torch.log_softmax(scores, dim=1)


def marginal_log_likelihood(log_p_z: torch.Tensor, log_p_y_given_z: torch.Tensor) -> torch.Tensor:
    """log p(y|x) = logsumexp_z [log p(z|x) + log p(y|z,x)].

    Args:
        log_p_z: (B, Z) log p(z|x), e.g. from `doc_log_probs`.
        log_p_y_given_z: (B, Z) log p(y|z,x), same document order (e.g. `Reader.log_p_y_given_z`).

    Returns:
        (B,) log p(y|x); the training loss is ``-marginal_log_likelihood(...).mean()``.

    Example: ``marginal_log_likelihood(torch.tensor([[0.5, 0.5]]).log(), torch.tensor([[0.2, 0.4]]).log()).exp()`` -> ``[0.3]``.
    """
    if log_p_z.shape != log_p_y_given_z.shape or log_p_z.dim() != 2:
        raise ValueError(
            f"log_p_z and log_p_y_given_z must both be (B, Z), got {tuple(log_p_z.shape)} "
            f"and {tuple(log_p_y_given_z.shape)}"
        )
    return torch.logsumexp(log_p_z + log_p_y_given_z, dim=1)


def span_marginal_log_likelihood(
    log_p_z: torch.Tensor, log_p_span: torch.Tensor, span_mask: torch.Tensor
) -> torch.Tensor:
    """log p(y|x) ≈ Σ_s logsumexp_z [log p(z|x) + log p(y_s|z,x)]: one marginal per span, then a sum.

    REALM's and BRENT's code marginalise per masked token; the joint marginal
    (`marginal_log_likelihood` over Σ_s log p(y_s|z,x)) asks one document to explain every span
    of the target, so a span no chunk holds drags down the chunk that holds the others.

    Args:
        log_p_z: (B, Z) log p(z|x).
        log_p_span: (B, Z, S) log p(y_s|z,x) per span s (with a causal reader, y_s given the
            earlier spans' gold tokens, as it is scored).
        span_mask: (B, S) 1 for a real span, 0 for padding (its column is ignored).

    Returns:
        (B,) the summed per-span marginals.

    Example: p(z|x) = (.5, .5), p(y_1|z) = (.8, .2), p(y_2|z) = (.1, .9): the joint marginal is
    .5 * .08 + .5 * .18 = .13, the per-span one .5 * .5 = .25.
    """
    if log_p_span.dim() != 3 or log_p_span.shape[:2] != log_p_z.shape:
        raise ValueError(
            f"log_p_span must be (B, Z, S) with (B, Z) = {tuple(log_p_z.shape)}, got {tuple(log_p_span.shape)}"
        )
    if span_mask.shape != (log_p_span.shape[0], log_p_span.shape[2]):
        raise ValueError(f"span_mask must be (B, S), got {tuple(span_mask.shape)}")
    per_span = torch.logsumexp(log_p_z.unsqueeze(2) + log_p_span, dim=1)  # (B, S)
    return (per_span * span_mask.to(per_span.dtype)).sum(1)


def posterior(log_p_z: torch.Tensor, log_p_y_given_z: torch.Tensor) -> torch.Tensor:
    """(B, Z) p(z|x, y) ∝ p(z|x) p(y|z,x): which documents explain the target.

    Example: ``posterior(torch.tensor([[0.5, 0.5]]).log(), torch.tensor([[0.3, 0.1]]).log())`` -> ``[[0.75, 0.25]]``.
    """
    return torch.softmax(log_p_z + log_p_y_given_z, dim=1)


def distillation_loss(log_p_z: torch.Tensor, log_p_y_given_z: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Atlas's perplexity distillation: KL(softmax(log p(y|z,x) / tau) || p(z|x)) per query.

    The target is detached: the gradient reaches the retriever (the towers, the score scale and
    the null logit through `log_p_z`), never the reader. An alternative to the marginal's gradient
    for the retriever (Izacard et al., 2022, "PDist").

    Args:
        log_p_z: (B, Z) log p(z|x), with gradient.
        log_p_y_given_z: (B, Z) log p(y|z,x) (only its values are used).
        tau: temperature of the target.

    Returns:
        (B,) KL divergences in nats.

    Example: p(z|x) = (.5, .5) and log p(y|z,x) = (0, -inf) at tau = 1: the target is (1, 0) and
    the KL is ln 2.
    """
    if tau <= 0:
        raise ValueError(f"tau must be > 0, not {tau}")
    target = torch.log_softmax(log_p_y_given_z.detach().to(log_p_z.dtype) / tau, dim=1)
    p = target.exp()
    # 0 * log 0 counts as 0 (a document the reader gives probability 0)
    return torch.where(p > 0, p * (target - log_p_z), torch.zeros_like(p)).sum(1)


def retrieval_utility(log_p_y_given_z: torch.Tensor, null_index: int = -1) -> torch.Tensor:
    """Retrieval utility RU(z) = log p(y|z,x) − log p(y|∅,x) (REALM's diagnostic).

    Positive when document z helps predict y more than the null document does.

    Args:
        log_p_y_given_z: (B, Z) log p(y|z,x), including the null document's column.
        null_index: column of the null document (default -1: last, as `doc_log_probs` puts it).

    Returns:
        (B, Z) utilities; the null column is exactly zero.

    Example: ``retrieval_utility(torch.tensor([[-1.0, -3.0]]))`` -> ``[[2.0, 0.0]]``.
    """
    if log_p_y_given_z.dim() != 2:
        raise ValueError(f"log_p_y_given_z must be (B, Z), got shape {tuple(log_p_y_given_z.shape)}")
    z = log_p_y_given_z.shape[1]
    if not -z <= null_index < z:
        raise IndexError(f"null_index {null_index} out of range for {z} documents")
    null = log_p_y_given_z.select(1, null_index).unsqueeze(1)
    is_null = torch.zeros(z, dtype=torch.bool, device=log_p_y_given_z.device)
    is_null[null_index] = True
    # torch.where makes the null column exactly zero (also when log p(y|∅,x) = -inf)
    return torch.where(is_null, torch.zeros_like(log_p_y_given_z), log_p_y_given_z - null)
