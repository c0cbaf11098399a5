"""`LukeConfig`: the sizes of a LUKE / DaLUKE model, validated, as a plain dict on disk.

Word tokens live in width L = `hidden_size`, entity tokens in width l = `entity_hidden_size`.
l == L is LUKE (Yamada et al. 2020; the entity stream shares the word stream's feed-forward and
LayerNorms, as Hugging Face's `LukeModel` does); l < L is DaLUKE's reduced entity dimension (the
seed's matrix table; the entity stream has its own attention output, feed-forward of width
`entity_intermediate_size` and LayerNorms of width l). Left out: anything about training (that
lives with the pre-training config) and relative/rotary position schemes.

Example:
    LukeConfig(vocab_size=30522, hidden_size=384, entity_hidden_size=192, entity_vocab_size=10_000,
               entity_emb_size=256, num_hidden_layers=6, num_attention_heads=12,
               intermediate_size=1536, entity_intermediate_size=768,
               max_position_embeddings=512, type_vocab_size=2)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ralm.errors import RalmError

__all__ = [
    "DEFAULT_ENTITY_ATTENTION",
    "ENTITY_ATTENTION",
    "LukeConfig",
    "ENTITY_PAD_ID",
    "ENTITY_UNK_ID",
    "ENTITY_MASK_ID",
]

ENTITY_PAD_ID, ENTITY_UNK_ID, ENTITY_MASK_ID = 0, 1, 2  # HF LUKE's conventions for the entity vocabulary

ENTITY_ATTENTION = ("joint", "separate")
# The one default of entity_attention, read by LukeConfig, `from_bert` and `ralm luke pretrain`'s
# config alike: "separate" leaves a checkpoint's word states untouched at initialisation (cosine
# 1.000 to the plain encoder on WNUT-17 rows), "joint" swamps them (0.486). A config file written
# before the setting existed was joint (`LukeConfig.from_dict`), and an imported HF LUKE is joint.
DEFAULT_ENTITY_ATTENTION = "separate"
ACTIVATIONS = ("gelu", "relu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "silu", "swish", "quick_gelu")


@dataclass
class LukeConfig:
    """The sizes of a LUKE (l == L) or DaLUKE (l < L) model; validated on creation (RalmError).

    Example (a tiny LUKE for tests; `ralm.luke.init` derives one from a BERT backbone):

    >>> cfg = LukeConfig(vocab_size=100, hidden_size=32, entity_hidden_size=32, entity_vocab_size=10,
    ...                  entity_emb_size=32, num_hidden_layers=1, num_attention_heads=2,
    ...                  intermediate_size=64, entity_intermediate_size=64, max_position_embeddings=64,
    ...                  type_vocab_size=2, max_mention_length=4)
    >>> cfg.is_luke
    True
    """

    vocab_size: int  # word vocabulary (the backbone tokenizer's)
    hidden_size: int  # L, the word width
    entity_hidden_size: int  # l; == L gives LUKE, < L DaLUKE (the seed: l = 252 < L = 768)
    entity_vocab_size: int  # entities incl. [PAD]=0, [UNK]=1, [MASK]=2
    entity_emb_size: int  # width of the entity embedding table, projected to l (DaLUKE: 256)
    num_hidden_layers: int
    num_attention_heads: int  # the same number of heads for words (L/H each) and entities (l/H each)
    intermediate_size: int  # word feed-forward width
    entity_intermediate_size: int  # entity feed-forward width; must equal intermediate_size when l == L
    max_position_embeddings: int  # word positions 0..P-1 (BERT-style, no padding offset)
    type_vocab_size: int
    hidden_act: str = "gelu"  # feed-forward and head activation (transformers' ACT2FN names)
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_mention_length: int = 30  # M, the last dimension of entity_position_ids
    pad_token_id: int = 0  # the word [PAD] id (export sets HF's position offset from it)
    initializer_range: float = 0.02  # std of N(0, .) for every freshly initialised matrix
    # how word and entity keys share attention: "joint" (one softmax over words and entities, LUKE and
    # Hugging Face's LukeModel) or "separate" (the DaLUKE paper's four softmaxes A, A_w2e, A_e2w, A_e2e,
    # the entity term of a word's output scaled by a learned gate tanh(g) from 0: the word stream
    # starts as the plain encoder whatever entity tokens come with it)
    entity_attention: str = DEFAULT_ENTITY_ATTENTION

    def __post_init__(self) -> None:
        self.validate()

    @property
    def is_luke(self) -> bool:
        """True when words and entities share one width (LUKE); False for DaLUKE's l < L."""
        return self.entity_hidden_size == self.hidden_size

    @property
    def hf_luke(self) -> bool:
        """True when Hugging Face's LukeModel computes what this model does: l == L and the joint softmax."""
        return self.is_luke and self.entity_attention == "joint"

    def why_not_hf(self) -> str:
        """Why Hugging Face's LukeModel cannot hold this model ("" when it can)."""
        if not self.is_luke:
            return f"HF LUKE cannot represent a reduced entity dimension (l = {self.entity_hidden_size} < L = {self.hidden_size})"
        if self.entity_attention != "joint":
            return "HF LUKE has one joint softmax over words and entities, this model separate ones (entity_attention)"
        return ""

    def validate(self) -> None:
        """Raise RalmError with one line naming the first inconsistent value."""
        for name in (
            "vocab_size",
            "hidden_size",
            "entity_hidden_size",
            "entity_vocab_size",
            "entity_emb_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "entity_intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
            "max_mention_length",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise RalmError(f"LukeConfig.{name} = {v!r}: must be a positive integer")
        L, le, H = self.hidden_size, self.entity_hidden_size, self.num_attention_heads
        if le > L:
            raise RalmError(
                f"LukeConfig: entity_hidden_size l = {le} is larger than hidden_size L = {L}; "
                "the entity dimension may only be reduced (l <= L), choose l <= L"
            )
        if L % H or le % H:
            raise RalmError(
                f"LukeConfig: hidden_size {L} and entity_hidden_size {le} must both be multiples of "
                f"num_attention_heads {H}"
            )
        if le == L and self.entity_intermediate_size != self.intermediate_size:
            raise RalmError(
                f"LukeConfig: with l == L (LUKE) entities share the word feed-forward, so "
                f"entity_intermediate_size ({self.entity_intermediate_size}) must equal intermediate_size "
                f"({self.intermediate_size})"
            )
        if self.entity_vocab_size < 3:
            raise RalmError(
                f"LukeConfig.entity_vocab_size = {self.entity_vocab_size}: needs at least [PAD], [UNK], [MASK]"
            )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise RalmError(f"LukeConfig.pad_token_id = {self.pad_token_id}: not in [0, vocab_size)")
        if self.entity_attention not in ENTITY_ATTENTION:
            raise RalmError(
                f"LukeConfig.entity_attention = {self.entity_attention!r}: choose {' or '.join(ENTITY_ATTENTION)}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise RalmError(
                f"LukeConfig.hidden_act = {self.hidden_act!r}: not one of {', '.join(ACTIVATIONS)}"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            p = getattr(self, name)
            if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
                raise RalmError(f"LukeConfig.{name} = {p!r}: must be in [0, 1)")
        if not (isinstance(self.layer_norm_eps, (int, float)) and self.layer_norm_eps > 0):
            raise RalmError(f"LukeConfig.layer_norm_eps = {self.layer_norm_eps!r}: must be > 0")
        if not (isinstance(self.initializer_range, (int, float)) and self.initializer_range > 0):
            raise RalmError(f"LukeConfig.initializer_range = {self.initializer_range!r}: must be > 0")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LukeConfig:
        """The config in `d`; RalmError on unknown or missing keys (a file from elsewhere)."""
        if not isinstance(d, dict):
            raise RalmError(f"LukeConfig: expected a JSON object, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise RalmError(f"LukeConfig: unknown key(s) {', '.join(unknown)}")
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        missing = sorted(required - set(d))
        if missing:
            raise RalmError(f"LukeConfig: missing key(s) {', '.join(missing)}")
        return cls(**{"entity_attention": "joint", **d})  # files from before the setting: joint
