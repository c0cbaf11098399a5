"""SUREALM's memory pathway of its own: a gated cross-attention block after every backbone layer.

The authors' configuration behind the SUREALM paper's Table 2 adds, in every layer, a new
cross-attention over the token states and the retrieved embeddings, with its own softmax, rather
than putting the retrieved slots into the layer's self-attention (ralm's "self" pathway, closest to
their single-attention variant). Here, after backbone layer l has produced h (B, T, H):

    x  = LayerNorm_l(h)
    a  = MultiHead_l(query = x, keys/values = [memory keys/values (B, J, H) ; x (B, T, H)])
    h' = h + tanh(g_l) * a

The memory slots are visible as equation 6 says (a slot fetched at block j only from position
j * delta on, `ralm.surealm.model.memory_mask`) and the tokens causally; the tokens give the
softmax somewhere to go when no slot helps (and where none is visible yet). g_l starts at 0
(Flamingo's tanh gate), so the model starts exactly as the backbone: at step 0 its perplexity is
the baseline's, and the first step trains g_l, after which the block's own weights learn.
The memory keys and values (the prefix and suffix embeddings mapped to the hidden size) are
shared by all layers; each block projects them with its own key/value weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GatedCrossAttention"]


class GatedCrossAttention(nn.Module):
    """One layer's block: `forward(h, mem_k, mem_v, mask)` -> h + tanh(gate) * attention.

    hidden: the backbone's hidden size H; heads: attention heads (H must divide by it).
    h: (B, T, H); mem_k, mem_v: (B, J, H); mask: (B, 1, T, J + T) bool, True = may attend
    (memory slots first, as `memory_mask` makes it).
    """

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")
        self.heads = heads
        self.norm = nn.LayerNorm(hidden)
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.o = nn.Linear(hidden, hidden)
        self.gate = nn.Parameter(torch.zeros(()))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, L, H = x.shape
        return x.view(B, L, self.heads, H // self.heads).transpose(1, 2)  # (B, heads, L, d)

    def attend(self, h: torch.Tensor, mem_k: torch.Tensor, mem_v: torch.Tensor, mask: torch.Tensor):
        """(B, T, H) the block's attention output, before the gate."""
        x = self.norm(h)
        keys = torch.cat([mem_k.to(x.dtype), x], dim=1)
        values = torch.cat([mem_v.to(x.dtype), x], dim=1)
        q, k, v = self._split(self.q(x)), self._split(self.k(keys)), self._split(self.v(values))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.device))
        B, _, T, _ = a.shape
        return self.o(a.transpose(1, 2).reshape(B, T, -1))

    def forward(self, h: torch.Tensor, mem_k: torch.Tensor, mem_v: torch.Tensor, mask: torch.Tensor):
        return h + torch.tanh(self.gate).to(h.dtype) * self.attend(h, mem_k, mem_v, mask)

    def attention_weights(self, h, mem_k, mem_v, mask) -> torch.Tensor:
        """(B, heads, T, J + T) the softmax weights (for the memory-share diagnostic), eager math."""
        x = self.norm(h)
        keys = torch.cat([mem_k.to(x.dtype), x], dim=1)
        q, k = self._split(self.q(x)), self._split(self.k(keys))
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        return torch.softmax(s.masked_fill(~mask.to(s.device), float("-inf")), dim=-1)
