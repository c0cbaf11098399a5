"""The three neural LM architectures of the lecture, and `build_model` to make one by name.

Every model maps `ids (B, T)` = `<s> w1 ... w_{T-1}` to `logits (B, T, V)`, position t
predicting token t+1, and is causal: position t never sees a later token.

    FeedForwardLM    Bengio et al. (2003): the n-1 previous words' embeddings concatenated ->
                     tanh hidden -> softmax; optional direct embedding -> output connections.
                     Positions before `<s>` are padded with `<s>`.
    LSTMLM           embeddings -> LSTM layers -> softmax; dropout; optionally tied
                     input/output embeddings (Press & Wolf 2017; Inan et al. 2017).
    TransformerLM    pre-LN decoder (GPT-2 style): learned positions, causal self-attention via
                     `scaled_dot_product_attention(is_causal=True)`, GELU MLP, tied output.

Data, scoring, training and saving: `ralm.lm.neural`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from ralm.errors import RalmError
from ralm.lm.counts import BOS_ID

__all__ = ["MODELS", "FeedForwardLM", "LSTMLM", "TransformerLM", "build_model", "n_params"]


@dataclass
class FeedForwardConfig:
    """Bengio et al. (2003) fixed-window LM."""

    vocab_size: int = 10_000  # |V| incl. <unk>, <s>, </s>
    order: int = 5  # n: predict from the n-1 previous words (Bengio et al. used n = 5 and 6)
    emb_dim: int = 64  # m: size of each word's feature vector
    hidden: int = 256  # h: tanh hidden units
    direct: bool = False  # Bengio's W: direct linear connections from embeddings to output
    dropout: float = 0.35  # on the concatenated embeddings and the hidden layer (small corpora)


@dataclass
class LSTMConfig:
    """Embeddings -> LSTM -> softmax."""

    vocab_size: int = 10_000  # |V| incl. <unk>, <s>, </s>
    emb_dim: int = 256  # input embedding size
    hidden: int = 256  # LSTM hidden size
    layers: int = 2  # stacked LSTM layers
    dropout: float = 0.3  # on embeddings, between layers and on the output (Zaremba et al. 2014)
    tie: bool = True  # share input and output embeddings (adds hidden -> emb_dim if they differ)


@dataclass
class TransformerConfig:
    """Pre-LN causal transformer (GPT-2 layout, nanoGPT-sized down)."""

    vocab_size: int = 10_000  # |V| incl. <unk>, <s>, </s>
    max_len: int = 128  # learned positions: the longest input sequence (<s> + words)
    d_model: int = 128  # residual stream width
    n_layers: int = 2  # transformer blocks
    n_heads: int = 4  # attention heads (d_model must divide)
    d_ff: int = 512  # MLP hidden size (4 x d_model)
    dropout: float = 0.2  # on embeddings, attention weights and residual branches
    tie: bool = True  # output layer shares the token embedding matrix


class FeedForwardLM(nn.Module):
    """y = softmax(b + U tanh(d + H [e(w_{t-n+1}); ...; e(w_{t-1})]) (+ W [...] if direct))."""

    kind = "ffnn"

    def __init__(self, config: FeedForwardConfig) -> None:
        super().__init__()
        if config.order < 2:
            raise RalmError(f"feed-forward LM order {config.order}: must be >= 2 (one context word)")
        self.config = config
        ctx = (config.order - 1) * config.emb_dim
        self.emb = nn.Embedding(config.vocab_size, config.emb_dim)
        self.hidden = nn.Linear(ctx, config.hidden)
        self.out = nn.Linear(config.hidden, config.vocab_size)
        self.direct = nn.Linear(ctx, config.vocab_size, bias=False) if config.direct else None
        self.drop = nn.Dropout(config.dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> logits (B, T, V); position t sees ids[t-n+2 .. t] only."""
        n1 = self.config.order - 1
        x = F.pad(ids, (n1 - 1, 0), value=BOS_ID)  # (B, T + n - 2): <s> before the start
        windows = x.unfold(1, n1, 1)  # (B, T, n-1), oldest word first
        e = self.drop(self.emb(windows).flatten(2))  # (B, T, (n-1) m)
        logits = self.out(self.drop(torch.tanh(self.hidden(e))))
        if self.direct is not None:
            logits = logits + self.direct(e)
        return logits


class LSTMLM(nn.Module):
    """Embeddings -> dropout -> LSTM (layers) -> dropout -> (projection) -> softmax."""

    kind = "lstm"

    def __init__(self, config: LSTMConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.emb = nn.Embedding(c.vocab_size, c.emb_dim)
        self.lstm = nn.LSTM(
            c.emb_dim, c.hidden, c.layers, batch_first=True, dropout=c.dropout if c.layers > 1 else 0.0
        )
        self.drop = nn.Dropout(c.dropout)
        out_dim = c.emb_dim if c.tie else c.hidden
        self.proj = nn.Linear(c.hidden, out_dim, bias=False) if out_dim != c.hidden else None
        self.out = nn.Linear(out_dim, c.vocab_size)
        if c.tie:
            self.out.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> logits (B, T, V), left-to-right (causal by construction)."""
        h, _ = self.lstm(self.drop(self.emb(ids)))  # (B, T, hidden)
        h = self.drop(h)
        if self.proj is not None:
            h = self.proj(h)
        return self.out(h)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t attends to positions <= t only."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if config.d_model % config.n_heads:
            raise RalmError(f"d_model {config.d_model} is not divisible by n_heads {config.n_heads}")
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.dropout = config.dropout
        self.resid_drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, D) -> (B, T, D)."""
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        # (B, T, D) -> (B, heads, T, D / heads)
        q, k, v = (t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).reshape(B, T, D)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    """Pre-LN block: x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff),
            nn.GELU(),
            nn.Linear(config.d_ff, config.d_model),
            nn.Dropout(config.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TransformerLM(nn.Module):
    """Token + learned position embeddings -> pre-LN blocks -> final LN -> (tied) softmax."""

    kind = "transformer"

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.tok = nn.Embedding(c.vocab_size, c.d_model)
        self.pos = nn.Embedding(c.max_len, c.d_model)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model)
        self.out = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.apply(self._init)
        if c.tie:
            self.out.weight = self.tok.weight
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T), T <= max_len -> logits (B, T, V)."""
        T = ids.shape[1]
        if self.config.max_len < T:
            raise RalmError(
                f"sequence of {T} tokens is longer than the transformer's max_len {self.config.max_len}; "
                "split long sentences or raise max_len"
            )
        x = self.drop(self.tok(ids) + self.pos(torch.arange(T, device=ids.device)))  # (B, T, D)
        for block in self.blocks:
            x = block(x)
        return self.out(self.ln_f(x))


MODELS: dict[str, tuple[type, type[nn.Module]]] = {
    "ffnn": (FeedForwardConfig, FeedForwardLM),
    "lstm": (LSTMConfig, LSTMLM),
    "transformer": (TransformerConfig, TransformerLM),
}


def build_model(kind: str, config: object | dict | None = None, seed: int = 0, **overrides) -> nn.Module:
    """A freshly initialised model of `kind` ("ffnn", "lstm", "transformer"), seeded.

    `config`: the kind's config dataclass, a dict of its fields, or None (defaults);
    `overrides`: fields to change. Example: `build_model("lstm", vocab_size=len(vocab))`.
    """
    if kind not in MODELS:
        raise RalmError(f"unknown neural LM {kind!r}; choose one of {', '.join(MODELS)}")
    cfg_cls, model_cls = MODELS[kind]
    if config is None:
        config = {}
    d = asdict(config) if not isinstance(config, dict) else dict(config)
    d.update(overrides)
    names = {f.name for f in fields(cfg_cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise RalmError(
            f"{kind} config has no field(s) {', '.join(unknown)} (valid: {', '.join(sorted(names))})"
        )
    with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG
        torch.manual_seed(seed)
        return model_cls(cfg_cls(**d))


def n_params(model: nn.Module) -> int:
    """Number of distinct trainable parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters())
