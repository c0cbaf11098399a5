"""Initialise a LUKE / DaLUKE model from a BERT-like checkpoint: `from_bert(path, ...)`.

Any local Hugging Face directory whose base model has BERT's layout (embeddings.word/position/
token_type_embeddings, encoder.layer.N.attention.self.query/key/value, ...): BERT, MiniLM (the
default, `ralm.models.names`), RoBERTa / XLM-R / CamemBERT. RoBERTa-style checkpoints number
positions from pad_token_id + 1; their table is copied shifted by that offset, so a right-padded
input gets the same position vectors as in the original model.

What is copied, what is drawn:
- Word side, always copied: embeddings, Q/K/V, attention output, feed-forward, LayerNorms, and
  the MLM head (transform + bias; the decoder is tied to the word embeddings) when the checkpoint
  has one (MiniLM has none: then N(0, initializer_range) dense, identity LayerNorm, zero bias).
- l == L (LUKE): Q_w2e, Q_e2w, Q_e2e start as copies of Q (weights and biases), as LUKE did; the
  entity stream shares the word feed-forward and LayerNorms (as LUKE and HF do, which at init is
  the same as copying them and is what keeps the HF export exact later); the entity position
  table, token-type table and embedding LayerNorm are copies of the word ones.
- l < L (DaLUKE): no word-side matrix has the shapes of Q_w2e (L -> l), Q_e2w (l -> L), Q_e2e,
  K_e, V_w2e, V_e2w, V_e2e or of the width-l attention output / feed-forward, and slicing a
  pretrained matrix down to l would pick arbitrary coordinates; so every entity-side matrix is
  drawn from N(0, initializer_range) with zero biases (BERT's own init for new layers), every
  entity LayerNorm is the identity, and the entity position/token-type tables are N(0, std) too.
  The word stream then starts as the pretrained BERT plus a small random contribution from the
  entity keys and values.
- Entity embedding table (entity_vocab_size x entity_emb_size) and its projection to l (when
  entity_emb_size != l): N(0, initializer_range); the [PAD] row (id 0) is zero and stays zero
  (padding_idx). [UNK] and [MASK] rows are random like the rest and are learned in pre-training.
Left out: checkpoints with another layout (DistilBERT, ELECTRA's embedding projection, pre-LN
models), relative position embeddings.
"""

from __future__ import annotations

import os

import torch

from ralm.errors import RalmError
from ralm.luke.config import ACTIVATIONS, DEFAULT_ENTITY_ATTENTION, LukeConfig
from ralm.luke.model import LukeForPretraining
from ralm.models.names import resolve_model_dir

__all__ = ["from_bert"]

ROBERTA_LIKE = {"roberta", "xlm-roberta", "camembert"}  # positions numbered from pad_token_id + 1
# MLM-head parameter names per checkpoint family -> ours (lm_head.*)
HEADS = {
    "cls.predictions.": {
        "transform.dense.weight": "dense.weight",
        "transform.dense.bias": "dense.bias",
        "transform.LayerNorm.weight": "layer_norm.weight",
        "transform.LayerNorm.bias": "layer_norm.bias",
        "bias": "bias",
    },
    "lm_head.": {
        "dense.weight": "dense.weight",
        "dense.bias": "dense.bias",
        "layer_norm.weight": "layer_norm.weight",
        "layer_norm.bias": "layer_norm.bias",
        "bias": "bias",
    },
}
LAYER_KEYS = (  # copied word-side parameters of one layer, BERT names == ours
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "attention.output.LayerNorm",
    "intermediate.dense",
    "output.dense",
    "output.LayerNorm",
)


def _load_hf(d):
    """(masked-LM model or base model, its config, the set of parameter names it did NOT load)."""
    from ralm.models.encoder import load_masked_lm
    from ralm.models.quiet import quiet_transformers

    with quiet_transformers():
        try:  # no masked-LM class for this model type: the base model only
            model, missing = load_masked_lm(d, or_base=True, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise RalmError(f"{d}: could not load the checkpoint ({_first_line(exc)})") from None
    return model, model.config, set(missing)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def from_bert(
    path: str | os.PathLike | None = None,
    *,
    entity_vocab_size: int,
    entity_hidden_size: int | None = None,
    entity_emb_size: int = 256,
    max_mention_length: int = 30,
    seed: int = 0,
    entity_intermediate_size: int | None = None,
    entity_attention: str = DEFAULT_ENTITY_ATTENTION,
) -> LukeForPretraining:
    """A LukeForPretraining whose word side is the checkpoint at `path` (None/"minilm": the bundled MiniLM).

    entity_hidden_size: l (default L); entity_intermediate_size: the entity feed-forward width
    (default: the word one scaled by l / L). `seed` fixes every randomly drawn entity-side weight
    without touching the global RNG. RalmError for a missing or non-BERT-like directory, or l > L.
    """
    d = resolve_model_dir(path)
    hf, hc, missing = _load_hf(d)
    base = hf.base_model
    sd = {k: v.detach() for k, v in base.state_dict().items()}
    needed = ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight")
    if not all(k in sd for k in needed) or "encoder.layer.0.attention.self.query.weight" not in sd:
        raise RalmError(
            f"{d}: not a BERT-like checkpoint (no embeddings.*/encoder.layer.N.attention.self.query); "
            "pass a BERT, MiniLM or RoBERTa-style model directory"
        )
    if getattr(hc, "position_embedding_type", "absolute") not in ("absolute", None):
        raise RalmError(
            f"{d}: position_embedding_type {hc.position_embedding_type!r}; only absolute is supported"
        )
    if hc.hidden_act not in ACTIVATIONS:
        raise RalmError(f"{d}: hidden_act {hc.hidden_act!r} is not supported ({', '.join(ACTIVATIONS)})")
    if sd["embeddings.word_embeddings.weight"].shape[1] != hc.hidden_size:
        raise RalmError(f"{d}: embedding width differs from hidden_size (ELECTRA-style); not supported")
    pad = hc.pad_token_id if hc.pad_token_id is not None else 0
    offset = pad + 1 if hc.model_type in ROBERTA_LIKE else 0
    L = hc.hidden_size
    le = L if entity_hidden_size is None else int(entity_hidden_size)
    if entity_intermediate_size is None:
        entity_intermediate_size = hc.intermediate_size if le == L else max(1, hc.intermediate_size * le // L)
    cfg = LukeConfig(
        vocab_size=hc.vocab_size,
        hidden_size=L,
        entity_hidden_size=le,
        entity_vocab_size=entity_vocab_size,
        entity_emb_size=entity_emb_size,
        num_hidden_layers=hc.num_hidden_layers,
        num_attention_heads=hc.num_attention_heads,
        intermediate_size=hc.intermediate_size,
        entity_intermediate_size=entity_intermediate_size,
        max_position_embeddings=hc.max_position_embeddings - offset,
        type_vocab_size=hc.type_vocab_size,
        hidden_act=hc.hidden_act,
        layer_norm_eps=hc.layer_norm_eps,
        hidden_dropout_prob=hc.hidden_dropout_prob,
        attention_probs_dropout_prob=hc.attention_probs_dropout_prob,
        max_mention_length=max_mention_length,
        pad_token_id=pad,
        initializer_range=getattr(hc, "initializer_range", 0.02),
        entity_attention=entity_attention,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LukeForPretraining(cfg)
    _copy_word_side(model, sd, offset)
    _copy_head(model, hf.state_dict(), missing)
    if cfg.is_luke:
        _luke_entity_init(model)
    model.ralm_meta = {"backbone": str(d), "backbone_model_type": hc.model_type}
    return model


@torch.no_grad()
def _copy_word_side(model: LukeForPretraining, sd: dict, offset: int) -> None:
    luke = model.luke
    emb = luke.embeddings
    P = model.config.max_position_embeddings
    emb.word_embeddings.weight.copy_(sd["embeddings.word_embeddings.weight"])
    emb.position_embeddings.weight.copy_(sd["embeddings.position_embeddings.weight"][offset : offset + P])
    emb.token_type_embeddings.weight.copy_(sd["embeddings.token_type_embeddings.weight"])
    emb.LayerNorm.weight.copy_(sd["embeddings.LayerNorm.weight"])
    emb.LayerNorm.bias.copy_(sd["embeddings.LayerNorm.bias"])
    for i, layer in enumerate(luke.encoder.layer):
        ours = layer.state_dict()
        for key in LAYER_KEYS:
            for p in ("weight", "bias"):
                ours[f"{key}.{p}"].copy_(sd[f"encoder.layer.{i}.{key}.{p}"])


@torch.no_grad()
def _copy_head(model: LukeForPretraining, full: dict, missing: set) -> None:
    """Copy the checkpoint's MLM head into lm_head when every one of its parameters was in the checkpoint."""
    ours = model.lm_head.state_dict()
    for prefix, names in HEADS.items():
        theirs = {prefix + k: v for k, v in names.items()}
        if all(k in full for k in theirs) and not any(k in missing for k in theirs):
            for k, v in theirs.items():
                ours[v].copy_(full[k])
            return


@torch.no_grad()
def _luke_entity_init(model: LukeForPretraining) -> None:
    """l == L: extra queries = Q; entity position/type tables and embedding LayerNorm = the word ones."""
    for layer in model.luke.encoder.layer:
        att = layer.attention.self
        for q in (att.w2e_query, att.e2w_query, att.e2e_query):
            q.weight.copy_(att.query.weight)
            q.bias.copy_(att.query.bias)
    words, ents = model.luke.embeddings, model.luke.entity_embeddings
    ents.position_embeddings.weight.copy_(words.position_embeddings.weight)
    ents.token_type_embeddings.weight.copy_(words.token_type_embeddings.weight)
    ents.LayerNorm.load_state_dict(words.LayerNorm.state_dict())
