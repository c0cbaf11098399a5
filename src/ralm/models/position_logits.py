"""A causal LM's logits at chosen positions only: its output layer split from its body.

A 262k-token vocabulary (Gemma-3) makes full logits (B, T, V) cost gigabytes while a scorer needs
a few positions a row: `position_logits` (REALM's causal reader, RAG fine-tuning) and FrozenLM
run the output layer on those positions alone where `output_head` allows it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["output_head", "position_logits"]


def output_head(lm: Any) -> tuple[Any, Any, float | None] | None:
    """(body, output layer, final logit softcap) of a causal LM (or a peft wrapper of one) when its
    output layer is one Linear over the body's last hidden state, so that it can run on chosen
    positions alone; None where the head does more (a logit scale, a head that is not a Linear)."""
    import torch

    hf = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    head, base, cfg = hf.get_output_embeddings(), getattr(hf, "base_model", None), hf.config
    if (
        not isinstance(head, torch.nn.Linear)
        or base is None
        or base is hf
        or getattr(cfg, "logit_scale", None) is not None
        or getattr(cfg, "logits_scaling", None) is not None
    ):
        return None
    return base, head, getattr(cfg, "final_logit_softcapping", None)


def position_logits(lm: Any, input_ids: Any, attention_mask: Any, rows: Any, cols: Any, **kw: Any) -> Any:
    """(M, V) float32 logits of `lm` at positions (rows[m], cols[m]) of the (N, L) batch, i.e. its
    prediction of token cols[m] + 1: the output layer on those positions only where `output_head`
    allows (the softcap applied as the model would), else sliced from the full logits. `kw` goes to
    the model (e.g. position_ids with a 4D attention mask)."""
    split = output_head(lm)
    if split is None:
        return (
            lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kw)
            .logits[rows, cols]
            .float()
        )
    import torch

    base, head, cap = split
    hidden = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kw).last_hidden_state
    logits = head(hidden[rows, cols]).float()
    return torch.tanh(logits / cap) * cap if cap else logits
