"""Two-stage LUKE pre-training: the entity side first, then everything with the learning rate warmed up again.

LUKE trains only the entity embeddings and the entity head first, with the encoder frozen; DaLUKE
freezes the base weights for the first half of pre-training and re-warms the learning rate when it
unfreezes them. Here, for `entity_first_steps` steps, only the entity side learns
(`entity_side`): the entity embedding table and its projection, the entity prediction head, every
layer's entity-side attention (the w2e/e2w/e2e queries, and with l < L the entity keys, values,
output and feed-forward), the word-to-entity gates, and the word MLM head (MiniLM ships none, so it
starts random); it learns at `entity_first_lr`, warmed up over the first tenth of the stage. The
word side has requires_grad off meanwhile, so no gradient is computed for it and AdamW leaves it
bit-identical. From step entity_first_steps + 1 on every parameter trains at `lr`, warmed up again
over `warmup_steps` and decayed over the remaining steps.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["entity_side", "set_stage", "staged_schedule"]

_ENTITY_LAYER_PARTS = (
    ".attention.self.w2e_query.",
    ".attention.self.e2w_query.",
    ".attention.self.e2e_query.",
    ".attention.self.entity_key.",
    ".attention.self.w2e_value.",
    ".attention.self.e2w_value.",
    ".attention.self.e2e_value.",
    ".attention.self.word_entity_gate",
    ".attention.entity_output.",
    ".entity_intermediate.",
    ".entity_output.",
)


def entity_side(name: str) -> bool:
    """Whether parameter `name` of a LukeForPretraining trains in the entity-first stage.

    Example: "luke.encoder.layer.0.attention.self.w2e_query.weight" -> True;
    "luke.encoder.layer.0.attention.self.query.weight" -> False.
    """
    if name.startswith(("luke.entity_embeddings.", "entity_predictions.", "lm_head.")):
        return True
    return name.startswith("luke.encoder.layer.") and any(p in name for p in _ENTITY_LAYER_PARTS)


def set_stage(model: nn.Module, step: int, entity_first_steps: int) -> bool:
    """requires_grad for optimiser step `step` (1-based): the word side is frozen while
    step <= entity_first_steps. Returns whether the step is in the entity-first stage."""
    first = step <= entity_first_steps
    for name, p in model.named_parameters():
        p.requires_grad_(entity_side(name) or not first)
    return first


def staged_schedule(
    optimizer: torch.optim.Optimizer,
    *,
    first_steps: int,
    first_lr: float,
    lr: float,
    warmup_steps: int,
    total_steps: int,
    kind: str = "linear",
) -> torch.optim.lr_scheduler.LambdaLR:
    """Multipliers of each group's base lr (`lr`): during the first stage first_lr / lr (warmed up
    over a tenth of the stage) for the groups named "entity*", 0 for the others; then for all
    groups a fresh warm-up over `warmup_steps` and `kind` decay (linear, cosine or constant) to 0
    at `total_steps`. With first_steps = 0 it is the one-stage warm-up and decay.

    Example (first_steps 2, first_lr = 10 x lr, warmup 2, total 6, linear; optimiser steps 1..6 use
    the multipliers at scheduler steps 0..5): the entity groups get 10, 10, then 0, 0.5 (warmed up
    again), 1, 0.5; the others 0, 0, then the same 0, 0.5, 1, 0.5.
    """
    if kind not in ("linear", "cosine", "constant"):
        raise ValueError(f"unknown schedule {kind!r}; choose linear, cosine or constant")
    ratio = first_lr / lr
    first_warm = max(1, first_steps // 10)

    def second(step: int) -> float:
        s = step - first_steps
        if warmup_steps and s < warmup_steps:
            return s / warmup_steps
        if kind == "constant":
            return 1.0
        rest = max(1, total_steps - first_steps - warmup_steps)
        progress = min(1.0, (s - warmup_steps) / rest)
        return 1.0 - progress if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    def entity(step: int) -> float:
        if step < first_steps:
            return ratio * min(1.0, (step + 1) / first_warm)
        return second(step)

    def rest(step: int) -> float:
        return 0.0 if step < first_steps else second(step)

    lambdas = [
        entity if str(g.get("name", "")).startswith("entity") else rest for g in optimizer.param_groups
    ]
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
