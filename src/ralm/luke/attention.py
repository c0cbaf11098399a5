r"""Entity-aware self-attention (LUKE) with DaLUKE's reduced entity dimension, and the transformer block.

Words x_i have width L (`hidden_size`), entities e_j width l (`entity_hidden_size`); H heads split
L into d_L = L/H and l into d_l = l/H. Every matrix is a Linear with a bias; a matrix named x2y
maps an x-width vector to the y side's width (w: L, e: l), which is how the seed's matrix table
(shared/seeds/daluke-entity-aware-danish-lm.tex, Table "mats") reads:

    Q, K, V: L -> L      Q_w2e, V_w2e: L -> l      Q_e2w, V_e2w: l -> L      Q_e2e, K_e, V_e2e: l -> l

Per head, with one softmax per query over all T + E keys (padding keys masked out; the "joint"
`entity_attention`, LUKE's and Hugging Face's):

    word query x_i:    s(x_i, x_k) = (Q x_i)     . (K x_k)   / sqrt(d_L)     (the seed's A)
                       s(x_i, e_k) = (Q_w2e x_i) . (K_e e_k) / sqrt(d_l)     (A_w2e)
    entity query e_j:  s(e_j, x_k) = (Q_e2w e_j) . (K x_k)   / sqrt(d_L)     (A_e2w)
                       s(e_j, e_k) = (Q_e2e e_j) . (K_e e_k) / sqrt(d_l)     (A_e2e)
    outputs:           x_i' = sum_k a(x_i, x_k) V x_k     + sum_k a(x_i, e_k) V_e2w e_k      (width L)
                       e_j' = sum_k a(e_j, x_k) V_w2e x_k + sum_k a(e_j, e_k) V_e2e e_k      (width l)

Reading the seed: its A = softmax(W^T K^T Q W / sqrt(L)) is the transpose of the usual score
matrix (its footnote says as much: "self-attention breaks from the needed transposition"); we read
each A as queries (the Q side) over keys (the K side). In its A_w2e and A_e2w the key matrices K
and K_e are swapped: A_w2e scales by sqrt(l), so its dot product lives in l and its keys must be
K_e E; A_e2w scales by sqrt(L), so its keys are K W. That is the only reading in which the table's
shapes, the four scalings and the two output equations (V_e2w carries entity values into word
outputs, V_w2e word values into entity outputs) all type-check; sqrt(L)/sqrt(l) become the
per-head sqrt(d_L)/sqrt(d_l) of multi-head attention.

With `entity_attention = "separate"` each of the four score blocks gets its own softmax, as the
seed's A, A_w2e, A_e2w and A_e2e are written (padding keys masked; a query with no real key of a
kind gets nothing from that kind):

    x_i' = A(x_i) V W + tanh(g) A_w2e(x_i) V_e2w E        e_j' = A_e2w(e_j) V_w2e W + A_e2e(e_j) V_e2e E

with one learned gate g per layer starting at 0: at initialisation the word stream is exactly the
plain encoder's, however many entity tokens come with it (in the joint softmax, 84 [MASK] spans of
an NER sentence took 29-76% of the word queries' attention at initialisation, issue 47).

With l == L (LUKE; the table's empty cells) K_e = K and V_w2e = V_e2w = V_e2e = V are the same
modules, which is exactly Hugging Face's `LukeSelfAttention` with use_entity_aware_attention
(query = Q, w2e_query, e2w_query, e2e_query; shared key and value).

The block (`EntityAwareLayer`) is BERT's post-LayerNorm block per stream: attention output dense +
residual + LayerNorm, then feed-forward + residual + LayerNorm. With l == L the entity stream uses
the word stream's modules (LUKE, HF); with l < L it has its own of width l (`entity_*`).
Left out: relative positions, cross-attention, caching, attention-probability outputs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from transformers.activations import ACT2FN

from ralm.luke.config import LukeConfig

__all__ = ["EntityAwareSelfAttention", "EntityAwareLayer", "DenseAddNorm"]


def _heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, N, H*d) -> (B, H, N, d)."""
    b, n, d = x.shape
    return x.view(b, n, n_heads, d // n_heads).transpose(1, 2)


def _either(own: nn.Module | None, shared: nn.Module) -> nn.Module:
    """The entity stream's own module when it has one (l < L), else the shared word module (LUKE)."""
    return shared if own is None else own


def _merge(x: Tensor) -> Tensor:
    """(B, H, N, d) -> (B, N, H*d)."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


class EntityAwareSelfAttention(nn.Module):
    """The equations of the module docstring; returns the per-stream contexts (before the output dense)."""

    def __init__(self, config: LukeConfig):
        super().__init__()
        L, le = config.hidden_size, config.entity_hidden_size
        self.n_heads = config.num_attention_heads
        self.scale_w = 1.0 / math.sqrt(L // self.n_heads)  # 1/sqrt(d_L)
        self.scale_e = 1.0 / math.sqrt(le // self.n_heads)  # 1/sqrt(d_l)
        self.query, self.key, self.value = nn.Linear(L, L), nn.Linear(L, L), nn.Linear(L, L)
        self.w2e_query = nn.Linear(L, le)
        self.e2w_query = nn.Linear(le, L)
        self.e2e_query = nn.Linear(le, le)
        if config.is_luke:  # the table's empty LUKE cells: K_e = K, V_* = V
            self.entity_key = self.w2e_value = self.e2w_value = self.e2e_value = None
        else:
            self.entity_key = nn.Linear(le, le)
            self.w2e_value = nn.Linear(L, le)
            self.e2w_value = nn.Linear(le, L)
            self.e2e_value = nn.Linear(le, le)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.separate = config.entity_attention == "separate"
        # the gate on the entity term of the word outputs (separate softmaxes only): tanh(g), g from 0
        self.word_entity_gate = nn.Parameter(torch.zeros(())) if self.separate else None

    def _attend_part(self, scores: Tensor, key_mask: Tensor, values: Tensor) -> Tensor:
        """One block's own softmax over its keys (B, H, N, K) with padding keys (B, K) masked, times
        (B, H, K, d); a query row with no real key gets zeros."""
        if scores.shape[-1] == 0:
            return scores.new_zeros((*scores.shape[:-1], values.shape[-1]))
        ctx = self._attend(scores, key_mask, values)
        return ctx * key_mask.any(-1)[:, None, None, None].to(ctx.dtype)

    def _attend(self, scores: Tensor, key_mask: Tensor, values: Tensor) -> Tensor:
        """softmax over the keys of (B, H, N, T+E) scores, padding keys masked; times (B, H, T+E, d)."""
        scores = scores.masked_fill(~key_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        probs = self.dropout(torch.softmax(scores, dim=-1))
        return probs @ values

    def forward(self, words: Tensor, entities: Tensor, key_mask: Tensor) -> tuple[Tensor, Tensor]:
        """words (B, T, L), entities (B, E, l), key_mask (B, T+E) bool (True = may be attended).

        Returns the word contexts (B, T, L) and entity contexts (B, E, l). E may be 0.
        """
        h = self.n_heads
        k_w = _heads(self.key(words), h)  # (B, H, T, d_L)
        k_e = _heads(_either(self.entity_key, self.key)(entities), h)  # (B, H, E, d_l)
        v_w = self.value(words)
        if self.entity_key is None:  # LUKE: one V for both streams, as values of either kind of query
            v_e = self.value(entities)
            v_for_words = v_for_entities = _heads(torch.cat([v_w, v_e], dim=1), h)
        else:
            v_for_words = _heads(torch.cat([v_w, self.e2w_value(entities)], dim=1), h)  # (B, H, T+E, d_L)
            v_for_entities = _heads(torch.cat([self.w2e_value(words), self.e2e_value(entities)], dim=1), h)

        q_ww = _heads(self.query(words), h)
        q_we = _heads(self.w2e_query(words), h)
        q_ew = _heads(self.e2w_query(entities), h)
        q_ee = _heads(self.e2e_query(entities), h)
        if self.separate:
            T = words.shape[1]
            wmask, emask = key_mask[:, :T], key_mask[:, T:]
            vw_w, ve_w = v_for_words[:, :, :T], v_for_words[:, :, T:]
            vw_e, ve_e = v_for_entities[:, :, :T], v_for_entities[:, :, T:]
            gate = torch.tanh(self.word_entity_gate).to(q_ww.dtype)
            word_ctx = self._attend_part(q_ww @ k_w.transpose(-1, -2) * self.scale_w, wmask, vw_w)
            word_ctx = word_ctx + gate * self._attend_part(
                q_we @ k_e.transpose(-1, -2) * self.scale_e, emask, ve_w
            )
            entity_ctx = self._attend_part(q_ew @ k_w.transpose(-1, -2) * self.scale_w, wmask, vw_e)
            entity_ctx = entity_ctx + self._attend_part(
                q_ee @ k_e.transpose(-1, -2) * self.scale_e, emask, ve_e
            )
            return _merge(word_ctx), _merge(entity_ctx)
        word_scores = torch.cat(
            [q_ww @ k_w.transpose(-1, -2) * self.scale_w, q_we @ k_e.transpose(-1, -2) * self.scale_e], dim=-1
        )  # (B, H, T, T+E)
        word_ctx = self._attend(word_scores, key_mask, v_for_words)

        entity_scores = torch.cat(
            [q_ew @ k_w.transpose(-1, -2) * self.scale_w, q_ee @ k_e.transpose(-1, -2) * self.scale_e], dim=-1
        )  # (B, H, E, T+E)
        entity_ctx = self._attend(entity_scores, key_mask, v_for_entities)
        return _merge(word_ctx), _merge(entity_ctx)


class DenseAddNorm(nn.Module):
    """LayerNorm(x + dropout(dense(h))): BERT's attention-output and feed-forward-output sublayer."""

    def __init__(self, d_in: int, d_out: int, config: LukeConfig):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self.LayerNorm = nn.LayerNorm(d_out, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, h: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(h)) + residual)


class Intermediate(nn.Module):
    """act(dense(x)): the first half of the feed-forward."""

    def __init__(self, d_in: int, d_ff: int, act: str):
        super().__init__()
        self.dense = nn.Linear(d_in, d_ff)
        self.act = ACT2FN[act]

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))


class AttentionBlock(nn.Module):
    """Self-attention plus its output sublayer(s): `output` (width L) and, for l < L, `entity_output`."""

    def __init__(self, config: LukeConfig):
        super().__init__()
        L, le = config.hidden_size, config.entity_hidden_size
        self.self = EntityAwareSelfAttention(config)
        self.output = DenseAddNorm(L, L, config)
        self.entity_output = None if config.is_luke else DenseAddNorm(le, le, config)

    def forward(self, words: Tensor, entities: Tensor, key_mask: Tensor) -> tuple[Tensor, Tensor]:
        ctx_w, ctx_e = self.self(words, entities, key_mask)
        return self.output(ctx_w, words), _either(self.entity_output, self.output)(ctx_e, entities)


class EntityAwareLayer(nn.Module):
    """One transformer block over both streams; parameter names follow HF `LukeLayer` for the word side."""

    def __init__(self, config: LukeConfig):
        super().__init__()
        L, le = config.hidden_size, config.entity_hidden_size
        self.attention = AttentionBlock(config)
        self.intermediate = Intermediate(L, config.intermediate_size, config.hidden_act)
        self.output = DenseAddNorm(config.intermediate_size, L, config)
        if config.is_luke:
            self.entity_intermediate = self.entity_output = None
        else:
            self.entity_intermediate = Intermediate(le, config.entity_intermediate_size, config.hidden_act)
            self.entity_output = DenseAddNorm(config.entity_intermediate_size, le, config)

    def forward(self, words: Tensor, entities: Tensor, key_mask: Tensor) -> tuple[Tensor, Tensor]:
        """words (B, T, L), entities (B, E, l), key_mask (B, T+E) bool -> same shapes."""
        words, entities = self.attention(words, entities, key_mask)
        words = self.output(self.intermediate(words), words)
        entities = _either(self.entity_output, self.output)(
            _either(self.entity_intermediate, self.intermediate)(entities), entities
        )
        return words, entities
