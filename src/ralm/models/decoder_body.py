"""A decoder-only LM's body used as an encoder: loading, bidirectional attention, positions, pooling.

Task heads (`ralm.tasks.causal_heads`) and dual-encoder towers (`ralm.retrieval.towers`) both run
a causal LM without its next-token layer (Gemma-3, Llama, Qwen, SmolLM2), as Qwen3-Embedding,
EmbeddingGemma and NV-Embed do. What they share (whether a model argument names such an LM at
all is `ralm.models.names.is_decoder_spec`):

* `load_decoder_body(spec, bidirectional=...)`: (body, fast tokenizer), float32, GGUF markers
  dropped so the body saves with `save_pretrained`. ``bidirectional=True`` rebuilds the model
  with transformers' ``use_bidirectional_attention`` (Gemma, Gemma-2, Gemma-3); a config without
  that switch is refused in one line;
* `is_decoder_body(config)`: whether a loaded model is a decoder body (its positions must be
  counted from the attention mask, see `mask_positions`);
* `mask_positions(mask)`: position ids (B, L) counted over real tokens, so left and right padding
  give the same outputs; `last_token(h, mask)`: the hidden state of each row's last real token.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ralm.errors import RalmError
from ralm.models.causal import load_causal_lm
from ralm.models.names import ENCODER_TYPES

__all__ = [
    "is_decoder_body",
    "last_token",
    "load_decoder_body",
    "mask_positions",
    "supports_bidirectional",
]


def is_decoder_body(config: Any) -> bool:
    """Whether a loaded model (its config) is a decoder-only LM's body rather than an encoder."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    mt = getattr(config, "model_type", None)
    if getattr(config, "is_encoder_decoder", False) or mt in ENCODER_TYPES:
        return False
    return mt in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def supports_bidirectional(config: Any) -> bool:
    """Whether the config class has transformers' `use_bidirectional_attention` switch."""
    fields = getattr(type(config), "__dataclass_fields__", None) or {}
    return "use_bidirectional_attention" in fields or hasattr(config, "use_bidirectional_attention")


def load_decoder_body(spec: str | os.PathLike, *, bidirectional: bool = False, what: str = "backbone"):
    """(body of the causal LM `spec` in float32, its fast tokenizer with right padding)."""
    lm, tok, _ = load_causal_lm(spec, what=what)
    cfg = lm.config
    if bidirectional:
        if not supports_bidirectional(cfg):
            raise RalmError(
                f"{spec}: {cfg.model_type} has no bidirectional-attention switch in transformers "
                "(Gemma, Gemma-2 and Gemma-3 have one); drop --bidirectional"
            )
        d = cfg.to_dict()  # to_dict gives the sliding window before the bidirectional halving
        d["use_bidirectional_attention"] = True
        for k in ("gguf_file", "quantization_config", "_name_or_path", "transformers_version"):
            d.pop(k, None)
        state = lm.state_dict()
        lm = type(lm)(type(cfg).from_dict(d))
        lm.load_state_dict(state)
        lm = lm.to(torch.float32)
    body = getattr(lm, "base_model", None)
    if body is None or body is lm:
        raise RalmError(f"{spec}: {type(lm).__name__} has no separate body under its output layer")
    bc = body.config
    if getattr(bc, "quantization_config", None) is not None:
        del bc.quantization_config  # a GGUF load's marker; the weights are float32 now
    if hasattr(bc, "gguf_file"):
        bc.gguf_file = None
    for m in (lm, body):
        if hasattr(m, "hf_quantizer"):
            m.hf_quantizer = None
        if getattr(m, "is_quantized", False):
            m.is_quantized = False
    tok.padding_side = "right"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token  # padded positions are masked; any id will do
    return body, tok


def mask_positions(mask: torch.Tensor) -> torch.Tensor:
    """(B, L) position ids counted over real tokens (mask 1): 0, 1, 2, ... whatever the padding side."""
    m = mask.long()
    return (m.cumsum(-1) - 1).clamp(min=0)


def last_token(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, H) hidden states of each row's last real token; h (B, L, H), mask (B, L)."""
    idx = (mask.long() * torch.arange(mask.shape[1], device=mask.device)).argmax(-1)
    return h[torch.arange(h.shape[0], device=h.device), idx]
