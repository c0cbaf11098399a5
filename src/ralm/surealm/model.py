"""SUREALM: a causal LM that attends to retrieved prefix (key) and suffix (value) embeddings.

For a sentence W = w_1..w_N the model reads ``[BOS] w_1 .. w_N`` (positions t = 0..N) and
predicts ``w_1 .. w_N [EOS]``: position t predicts w_{t+1} from the prefix w_1..w_t. Retrieval
happens every `delta` positions: block j = 1, 2, ... is fetched at position t = j*delta with
the query w_1..w_{j*delta} and holds K data-store entries (prefix embedding as key, suffix
embedding as value). Position t may attend to the tokens 0..t and to every block fetched so far,
j <= floor(t / delta). This is equation 6 of the paper with i = t + 1 and |Q| = N + 1:
K * (ceil(i / delta) - 1) = K * floor(t / delta) memory slots visible (`memory_mask`; the memory
is placed before the tokens here, which only permutes the key axis).

The retrieved embeddings (sentence-transformer space, d_mem) are mapped to the LM's hidden size
by a learned linear map and a LayerNorm (one for keys, one for values). Two pathways take them
from there (`pathway`):

* "cross" (`ralm surealm train`'s default; the authors' configuration behind the paper's Table 2): after every
  backbone layer a gated cross-attention block of its own attends to the memory slots and the
  token states (`ralm.surealm.cross_attention`). Its tanh gates start at 0, so at step 0 the model
  computes exactly what the backbone does: the memory is inert until training opens a gate.
* "self": the slots go into every layer's own self-attention: each layer projects them with its
  key/value weights (`ralm.surealm.backbone.MemoryAdapter`) into its cache, ahead of the tokens.
  With zero LayerNorm gains (`memory_init = "zero"`) the slots hold zero keys and values but still
  take softmax weight, so they dilute the backbone at step 0 (SmolLM2: perplexity 602 -> 633);
  `memory_bias` (e.g. -30) adds a learned offset to every slot's attention logit, which keeps them
  out of the softmax at the start (inert; but a slot that takes e^-30 of the weight also gets
  next to no gradient, so start it near the tokens' logits to learn).

With `retrieval=False` the same backbone runs as a plain causal LM: the no-retrieval baseline.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn

from ralm.errors import RalmError
from ralm.models.causal import load_as_causal_lm
from ralm.models.tokenizers import load_lm_tokenizer
from ralm.surealm.backbone import MemoryAdapter
from ralm.surealm.options import DEFAULT_PATHWAY, NEIGHBOURS, PATHWAYS

MODEL_FILE = "surealm.json"
WEIGHTS_FILE = "model.safetensors"


__all__ = ["SurealmConfig", "SurealmLM", "memory_mask"]


@dataclass
class SurealmConfig:
    """What a SUREALM model is (saved as surealm.json next to its weights)."""

    lm: str = "minilm"  # backbone spec (see ralm.surealm.backbone)
    retrieval: bool = True  # False: the same backbone as a plain causal LM (the baseline)
    k: int = 8  # entries per retrieval (SUREALM: 8)
    delta: int = 1  # retrieve every delta positions (SUREALM: 1)
    mem_dim: int = 384  # sentence-transformer dimension
    # how the memory maps start: "zero" (inert: zero-gain LayerNorms, the backbone starts as itself)
    # or "identity" (the paper's eqs. 4-5: the embeddings enter every layer as they are, LayerNorm'd;
    # needs mem_dim == the LM's hidden size, e.g. a MiniLM backbone with MiniLM embeddings)
    memory_init: str = "zero"
    # the memory LayerNorms' starting gain; None = what memory_init implies (0 for zero, 1 for identity).
    # A small gain (e.g. 0.1) lets the projections learn from the first step while the memory is still quiet
    memory_gain: float | None = None
    # None: position t sees every block fetched so far (eq. 6); W: only the latest W blocks. A
    # backbone without relative positions (BERT) cannot tell a stale block from the latest one
    # except by content; a window removes the stale ones
    memory_window: int | None = None
    # where the memory enters: "cross" (a gated cross-attention block after every layer, gates from 0:
    # inert at step 0; what `ralm surealm train` builds by default) or "self" (slots in every layer's
    # self-attention; models saved before the cross pathway existed are "self")
    pathway: str = DEFAULT_PATHWAY
    # "self" pathway: a learned offset on every memory slot's attention logit, starting here (None: none)
    memory_bias: float | None = None
    # what fills the memory: "retrieved" (the data store's top K), "random" (K random training entries,
    # never of the query's own sentence: the control for retrieval itself) or "null" (the slots are
    # there but their embeddings are zero: the control for extra slots)
    neighbours: str = "retrieved"
    datastore_fingerprint: str = ""
    encoder_fingerprint: str = ""
    lm_tokenizer_sha256: str = ""

    def __post_init__(self) -> None:
        if self.k < 1:
            raise RalmError(f"K={self.k}: must be >= 1")
        if self.delta < 1:
            raise RalmError(f"delta={self.delta}: must be >= 1")
        if self.memory_window is not None and self.memory_window < 1:
            raise RalmError(f"memory_window={self.memory_window}: must be >= 1 (or None for every block)")
        if self.memory_init not in ("zero", "identity"):
            raise RalmError(f"memory_init={self.memory_init!r}: use 'zero' or 'identity'")
        if self.neighbours not in NEIGHBOURS:
            raise RalmError(f"neighbours={self.neighbours!r}: use {', '.join(repr(n) for n in NEIGHBOURS)}")
        if self.pathway not in PATHWAYS:
            raise RalmError(f"pathway={self.pathway!r}: use {' or '.join(repr(p) for p in PATHWAYS)}")
        if self.memory_bias is not None and self.pathway != "self":
            raise RalmError(
                "memory_bias is for the 'self' pathway (the 'cross' pathway starts inert by its gates)"
            )

    @classmethod
    def from_dict(cls, d: dict) -> SurealmConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{"pathway": "self", **{k: v for k, v in d.items() if k in names}})


def memory_mask(
    attention_mask: torch.Tensor,
    mem_block: torch.Tensor,
    delta: int,
    *,
    window: int | None = None,
    additive_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The (B, 1, T, J + T) attention mask: memory slots first, then the tokens.

    attention_mask: (B, T) 1 for real tokens, 0 for right padding.
    mem_block: (B, J) block number j >= 1 of each memory slot, 0 for padding slots.
    window: None (eq. 6: every block fetched so far) or W (only the latest W blocks).
    Returns a bool mask (True = may attend), or an additive one (0 / dtype min) when
    `additive_dtype` is given (for eager attention).

    Example: T = 3, delta = 1, one block of K = 1 slot fetched at t = 1 (mem_block [[1]]) ->
    row t=0: [0 | 1 0 0], t=1: [1 | 1 1 0], t=2: [1 | 1 1 1].
    """
    B, T = attention_mask.shape
    dev = attention_mask.device
    t = torch.arange(T, device=dev)
    seen_blocks = torch.div(t, delta, rounding_mode="floor")  # (T,) blocks fetched by position t
    blk = mem_block.to(dev)
    mem_ok = (blk[:, None, :] >= 1) & (blk[:, None, :] <= seen_blocks[None, :, None])  # (B, T, J)
    if window is not None:
        mem_ok &= blk[:, None, :] > (seen_blocks - window)[None, :, None]
    causal = t[None, :] <= t[:, None]  # (T, T)
    tok_ok = causal[None] & attention_mask.bool()[:, None, :]  # (B, T, T)
    mask = torch.cat([mem_ok, tok_ok], dim=-1)[:, None]  # (B, 1, T, J+T)
    if additive_dtype is None:
        return mask
    return torch.zeros(mask.shape, dtype=additive_dtype, device=dev).masked_fill(
        ~mask, torch.finfo(additive_dtype).min
    )


# the names transformers has given the key/value cache argument of a model's forward: `cache` in
# recent releases (5.24 here; `past_key_values` is then a deprecated alias), `past_key_values` before
CACHE_ARGUMENTS = ("cache", "past_key_values", "cache_params")


def cache_argument(backbone: nn.Module) -> str:
    """The name under which `backbone.forward` takes a key/value cache in this transformers version."""
    import inspect

    return "cache" if "cache" in inspect.signature(backbone.forward).parameters else "past_key_values"


class SurealmLM(nn.Module):
    """Backbone causal LM + memory projections. `forward` returns (B, T, V) next-token logits."""

    def __init__(self, backbone: nn.Module, config: SurealmConfig) -> None:
        super().__init__()
        self.backbone = backbone
        self.config = config
        self.adapter = MemoryAdapter(backbone)
        self.cache_arg = cache_argument(backbone)
        H = self.adapter.hidden
        self.cross = None
        self.memory_bias = None
        self._cross_ctx: tuple | None = None
        if config.retrieval:
            self.key_proj = nn.Linear(config.mem_dim, H)
            self.value_proj = nn.Linear(config.mem_dim, H)
            self.key_norm = nn.LayerNorm(H)
            self.value_norm = nn.LayerNorm(H)
            if config.pathway == "cross":
                from ralm.surealm.cross_attention import GatedCrossAttention

                heads = int(backbone.config.num_attention_heads)
                self.cross = nn.ModuleList(GatedCrossAttention(H, heads) for _ in range(len(self.adapter)))
                for i, layer in enumerate(self.adapter.layers):
                    layer.register_forward_hook(self._cross_hook(i))
            elif config.memory_bias is not None:
                self.memory_bias = nn.Parameter(torch.tensor(float(config.memory_bias)))
            # self pathway: zero keys and values (the norms' gains are learned from 0), so a pretrained
            # backbone starts close to itself; measured on SmolLM2-135M, random memory projections took
            # a validation perplexity of 602 to 1.3M before any training, zero ones to 633
            if config.pathway == "cross":
                pass  # inert by its gates; the memory maps start as usual
            elif config.memory_init == "zero":
                nn.init.zeros_(self.key_norm.weight)
                nn.init.zeros_(self.value_norm.weight)
            else:
                if config.mem_dim != H:
                    raise RalmError(
                        f"memory_init='identity' needs the embedding size ({config.mem_dim}) to equal the "
                        f"LM's hidden size ({H}); use memory_init='zero'"
                    )
                for lin in (self.key_proj, self.value_proj):
                    nn.init.eye_(lin.weight)
                    nn.init.zeros_(lin.bias)
            if config.memory_gain is not None and config.pathway == "self":
                nn.init.constant_(self.key_norm.weight, config.memory_gain)
                nn.init.constant_(self.value_norm.weight, config.memory_gain)
        impl = getattr(backbone.config, "_attn_implementation", "eager") or "eager"
        if impl not in ("sdpa", "eager"):
            raise RalmError(
                f"attention implementation {impl!r} cannot take SUREALM's custom mask; load the backbone "
                "with attn_implementation='sdpa' or 'eager'"
            )
        self.attn_impl = impl

    def _cross_hook(self, i: int):
        """A forward hook on backbone layer i that adds cross-attention block i to its output."""

        def hook(_module, _args, output):
            ctx = self._cross_ctx
            if ctx is None:
                return output
            h = output[0] if isinstance(output, tuple) else output
            h = self.cross[i](h, *ctx)
            return (h, *output[1:]) if isinstance(output, tuple) else h

        return hook

    def memory_states(
        self, mem_keys: torch.Tensor, mem_values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values) (B, J, H): the prefix and suffix embeddings mapped and normalised."""
        dt = self.key_proj.weight.dtype
        return (
            self.key_norm(self.key_proj(mem_keys.to(dt))),
            self.value_norm(self.value_proj(mem_values.to(dt))),
        )

    @property
    def vocab_size(self) -> int:
        return int(self.backbone.get_output_embeddings().weight.shape[0])

    def memory_cache(self, mem_keys: torch.Tensor, mem_values: torch.Tensor, mem_block: torch.Tensor):
        """A DynamicCache holding every layer's keys/values of the memory slots (B, J, d_mem) each."""
        from transformers import DynamicCache

        k, v = self.memory_states(mem_keys, mem_values)  # (B, J, H)
        rope = None
        if self.adapter.kind == "llama":
            rope = self.adapter.rotary_embeddings(k, mem_block.to(k.device) * self.config.delta)
        cache = DynamicCache(config=self.backbone.config)
        for i in range(len(self.adapter)):
            ki, vi = self.adapter.key_value(i, k, v, rope)
            cache.update(ki, vi, i)
        return cache

    def backbone_inputs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        mem_keys: torch.Tensor | None = None,
        mem_values: torch.Tensor | None = None,
        mem_block: torch.Tensor | None = None,
    ) -> dict:
        """The backbone's keyword arguments besides input_ids (B, T): position ids 0..T-1, the memory
        in its KV cache (when retrieval is on and there are slots) and `memory_mask` with this
        model's delta and window, in the form its attention takes (bool for sdpa, additive for eager)."""
        B, T = input_ids.shape
        dev = input_ids.device
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        kw: dict = {"position_ids": torch.arange(T, device=dev).expand(B, T), "use_cache": False}
        self._cross_ctx = None
        has_memory = self.config.retrieval and mem_block is not None and mem_block.shape[1] > 0
        if has_memory and (mem_keys is None or mem_values is None):
            raise ValueError("memory keys and values are needed with mem_block")
        if has_memory and self.cross is not None:  # the cross pathway: the backbone sees the tokens alone
            mk, mv = self.memory_states(mem_keys, mem_values)
            mask = memory_mask(attention_mask, mem_block, self.config.delta, window=self.config.memory_window)
            self._cross_ctx = (mk, mv, mask)
            mem_block = torch.zeros((B, 0), dtype=torch.long, device=dev)
        elif has_memory:
            kw[self.cache_arg] = self.memory_cache(mem_keys, mem_values, mem_block)
        else:
            mem_block = torch.zeros((B, 0), dtype=torch.long, device=dev)
        additive = self.attn_impl != "sdpa" or (self.memory_bias is not None and mem_block.shape[1] > 0)
        mask = memory_mask(
            attention_mask,
            mem_block,
            self.config.delta,
            window=self.config.memory_window,
            additive_dtype=torch.float32 if additive else None,
        )
        if self.memory_bias is not None and mem_block.shape[1] > 0:
            J = mem_block.shape[1]
            offset = torch.zeros(mask.shape[-1], dtype=mask.dtype, device=dev)
            offset = offset.index_fill(0, torch.arange(J, device=dev), 1.0) * self.memory_bias.to(mask.dtype)
            mask = mask + offset  # masked slots stay at the dtype's minimum (or below)
        kw["attention_mask"] = mask
        return kw

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        mem_keys: torch.Tensor | None = None,
        mem_values: torch.Tensor | None = None,
        mem_block: torch.Tensor | None = None,
        return_hidden: bool = False,
    ):
        """Logits (B, T, V) for ``[BOS] w_1..`` (B, T); memory (B, J, d_mem) x 2 and block ids (B, J).

        return_hidden: also return what the output projection reads, (B, T, H): the last hidden
            states after any final norm/transform (kNN-LM's context vectors).
        """
        kw = self.backbone_inputs(input_ids, attention_mask, mem_keys, mem_values, mem_block)
        captured: list[torch.Tensor] = []
        handle = None
        if return_hidden:
            head = self.backbone.get_output_embeddings()
            handle = head.register_forward_hook(lambda _m, args, _out: captured.append(args[0]))
        try:
            logits = self.backbone(input_ids=input_ids, **kw).logits
        finally:
            self._cross_ctx = None
            if handle is not None:
                handle.remove()
        return (logits, captured[0]) if return_hidden else logits

    def gates(self) -> list[float]:
        """tanh(g_l) of every cross-attention block (the cross pathway), in layer order; [] otherwise."""
        return [] if self.cross is None else [float(torch.tanh(b.gate.detach())) for b in self.cross]

    # -- saving and loading
    def save(self, out: str | os.PathLike, tokenizer=None) -> Path:
        """Write surealm.json, the backbone's config.json, tokenizer files and model.safetensors."""
        from safetensors.torch import save_model

        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        (d / MODEL_FILE).write_text(json.dumps(asdict(self.config), indent=2) + "\n", encoding="utf-8")
        self.backbone.config.save_pretrained(str(d))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(d))
        save_model(self, str(d / WEIGHTS_FILE))
        return d

    @classmethod
    def load(cls, path: str | os.PathLike) -> tuple[SurealmLM, object]:
        """(model in eval mode, tokenizer) from a directory written by `save`."""
        from safetensors.torch import load_model

        d = Path(path)
        if not (d / MODEL_FILE).is_file():
            raise RalmError(
                f"{d}: not a SUREALM model (no {MODEL_FILE}); pass a `ralm surealm train` --out directory"
            )
        try:
            cfg = SurealmConfig.from_dict(json.loads((d / MODEL_FILE).read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as exc:
            raise RalmError(f"{d / MODEL_FILE}: unreadable ({exc}); re-save the model") from None
        backbone = load_as_causal_lm(d, config_only=True)
        model = cls(backbone, cfg)
        try:
            load_model(model, str(d / WEIGHTS_FILE), strict=True)
        except (OSError, RuntimeError) as exc:
            raise RalmError(
                f"{d / WEIGHTS_FILE}: cannot load ({str(exc).splitlines()[0][:200]}); re-save the model"
            ) from None
        tok, _ = load_lm_tokenizer(d)
        return model.eval(), tok

    @classmethod
    def from_backbone(cls, config: SurealmConfig) -> SurealmLM:
        return cls(load_as_causal_lm(config.lm), config)
