"""LUKE / DaLUKE models: embeddings + entity-aware encoder, the pre-training heads, span classification.

- `EntityAwareModel`: word embeddings (BERT's: word + position 0..T-1 + token type, LayerNorm),
  entity embeddings (below) and `num_hidden_layers` `EntityAwareLayer`s; returns the word states
  (B, T, L) and entity states (B, E, l). With E = 0 the word stream is exactly BERT.
- Entity inputs (as HF `LukeEntityEmbeddings`, at width l): the entity's row of an
  (entity_vocab_size, entity_emb_size) table, projected to l by a bias-free Linear when
  entity_emb_size != l; plus the mean of the entity position table over the span's word positions
  (`entity_position_ids` (B, E, M), -1 padded; an all -1 row gives zero); plus a token-type
  embedding; LayerNorm, dropout. The entity position table is its own (P, l) table, as in LUKE/HF
  (`init.from_bert` starts it as a copy of the word position table when l == L).
- Padding entities (entity_attention_mask 0) and padding words are masked out as keys, so they
  never influence any other token; their own outputs are computed but meaningless.
- `LukeForPretraining`: masked word prediction (HF `LukeLMHead` layout: dense, act, LayerNorm,
  decoder tied to the word embeddings, own bias) and masked entity prediction (HF
  `EntityPredictionHead`: dense l -> entity_emb_size, act, LayerNorm, decoder tied to the entity
  embedding table (its shape always matches: (entity_vocab_size, entity_emb_size)), own bias).
  The ties are taken at forward time from the embedding modules, so no tensor is stored twice.
- `LukeForSpanClassification`: a linear classifier over concat(first word state (L), last word
  state (L), entity state (l)) of each candidate span, as HF `LukeForEntitySpanClassification`;
  with `words_only` the encoder reads the words alone (no entity tokens) and the classifier sees
  concat(first, last) (DaLUKE's `words_only`: span classification without entity tokens).
  `class_weights` (C,), when set, weights the cross-entropy per gold class (e.g. less for "O").

Parameter names follow HF LUKE (without the `luke.` prefix of its task models) so that
`ralm.luke.export` is a renaming. Left out: pooler, gradient checkpointing, attention outputs.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers.activations import ACT2FN

from ralm.luke.attention import EntityAwareLayer
from ralm.luke.config import ENTITY_PAD_ID, LukeConfig

__all__ = [
    "EntityAwareModel",
    "LukeForPretraining",
    "LukeForSpanClassification",
    "init_weights",
    "masked_cross_entropy",
    "weighted_cross_entropy",
]


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's init: Linear/Embedding ~ N(0, std) with zero bias and zero padding row; LayerNorm = identity."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def masked_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy over labels != -100; 0 (still differentiable) when there are none.

    logits (..., C), labels (...). Example: no label set -> tensor(0.), not the NaN of F.cross_entropy.
    """
    flat, y = logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1)
    n = (y != -100).sum()
    total = F.cross_entropy(flat, y, ignore_index=-100, reduction="sum")
    return total / n.clamp(min=1)


def weighted_cross_entropy(logits: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """Cross-entropy over labels != -100, each weighted by its gold class's weight, divided by the
    summed weights (torch's weighted mean); 0 when there are none.

    Example: two spans, gold O (weight 0.25) and PER (weight 1): (0.25 * ce_O + ce_PER) / 1.25.
    """
    flat, y = logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1)
    keep = y != -100
    if not bool(keep.any()):
        return flat.sum() * 0.0
    w = weights.to(flat.device, flat.dtype)
    return F.cross_entropy(flat[keep], y[keep], weight=w)


class WordEmbeddings(nn.Module):
    """BERT's embeddings: word + position (0..T-1) + token type, LayerNorm, dropout."""

    def __init__(self, config: LukeConfig):
        super().__init__()
        L = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, L, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, L)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, L)
        self.LayerNorm = nn.LayerNorm(L, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        """input_ids, token_type_ids (B, T) -> (B, T, L)."""
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        return self.dropout(self.LayerNorm(x + self.token_type_embeddings(token_type_ids)))


class EntityEmbeddings(nn.Module):
    """Entity table (projected to l) + mean span position embedding + token type; LayerNorm, dropout."""

    def __init__(self, config: LukeConfig):
        super().__init__()
        le, emb = config.entity_hidden_size, config.entity_emb_size
        self.entity_embeddings = nn.Embedding(config.entity_vocab_size, emb, padding_idx=ENTITY_PAD_ID)
        self.entity_embedding_dense = nn.Linear(emb, le, bias=False) if emb != le else None
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, le)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, le)
        self.LayerNorm = nn.LayerNorm(le, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, entity_ids: Tensor, entity_position_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        """entity_ids (B, E), entity_position_ids (B, E, M) with -1 padding, token_type_ids (B, E) -> (B, E, l)."""
        x = self.entity_embeddings(entity_ids)
        if self.entity_embedding_dense is not None:
            x = self.entity_embedding_dense(x)
        used = (entity_position_ids != -1).unsqueeze(-1)  # (B, E, M, 1)
        pos = self.position_embeddings(entity_position_ids.clamp(min=0)) * used
        pos = pos.sum(dim=-2) / used.sum(dim=-2).clamp(min=1)  # mean over the span's words; 0 if none
        x = x + pos + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class Encoder(nn.Module):
    def __init__(self, config: LukeConfig):
        super().__init__()
        self.layer = nn.ModuleList(EntityAwareLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, words: Tensor, entities: Tensor, key_mask: Tensor) -> tuple[Tensor, Tensor]:
        for layer in self.layer:
            words, entities = layer(words, entities, key_mask)
        return words, entities


class EntityAwareModel(nn.Module):
    """Embeddings + entity-aware encoder, no heads. Randomly initialised (see `init.from_bert`)."""

    def __init__(self, config: LukeConfig):
        super().__init__()
        self.config = config
        self.embeddings = WordEmbeddings(config)
        self.entity_embeddings = EntityEmbeddings(config)
        self.encoder = Encoder(config)
        init_weights(self, config.initializer_range)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        entity_ids: Tensor | None,
        entity_attention_mask: Tensor | None,
        entity_position_ids: Tensor | None,
        token_type_ids: Tensor | None = None,
        entity_token_type_ids: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """input_ids/attention_mask (B, T); entity_ids/entity_attention_mask (B, E); entity_position_ids (B, E, M).

        Masks are 1 for real tokens, 0 for padding (None: all real). entity_ids None means E = 0.
        Returns word states (B, T, L) and entity states (B, E, l).
        """
        b, t = input_ids.shape
        dev = input_ids.device
        if attention_mask is None:
            attention_mask = torch.ones(b, t, dtype=torch.long, device=dev)
        if entity_ids is None:
            entity_ids = torch.zeros(b, 0, dtype=torch.long, device=dev)
            entity_position_ids = torch.full((b, 0, 1), -1, dtype=torch.long, device=dev)
        e = entity_ids.size(1)
        if entity_attention_mask is None:
            entity_attention_mask = torch.ones(b, e, dtype=torch.long, device=dev)
        if entity_position_ids is None or entity_position_ids.shape[:2] != (b, e):
            raise ValueError(f"entity_position_ids must have shape ({b}, {e}, M)")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if entity_token_type_ids is None:
            entity_token_type_ids = torch.zeros_like(entity_ids)
        words = self.embeddings(input_ids, token_type_ids)
        entities = self.entity_embeddings(entity_ids, entity_position_ids, entity_token_type_ids)
        key_mask = torch.cat([attention_mask, entity_attention_mask], dim=1).bool()  # (B, T+E)
        return self.encoder(words, entities, key_mask)


class LMHead(nn.Module):
    """dense L -> L, act, LayerNorm; the decoder (tied to the word embeddings) is applied by the caller."""

    def __init__(self, config: LukeConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[config.hidden_act]
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, h: Tensor, decoder_weight: Tensor) -> Tensor:
        """h (..., L), decoder_weight (V, L) -> logits (..., V)."""
        return F.linear(self.layer_norm(self.act(self.dense(h))), decoder_weight, self.bias)


class EntityHeadTransform(nn.Module):
    """LayerNorm(act(dense(h))), dense: l -> entity_emb_size."""

    def __init__(self, config: LukeConfig):
        super().__init__()
        self.dense = nn.Linear(config.entity_hidden_size, config.entity_emb_size)
        self.act = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.entity_emb_size, eps=config.layer_norm_eps)

    def forward(self, h: Tensor) -> Tensor:
        return self.LayerNorm(self.act(self.dense(h)))


class EntityPredictionHead(nn.Module):
    """`transform`, then a decoder tied to the entity embedding table, with its own bias."""

    def __init__(self, config: LukeConfig):
        super().__init__()
        self.transform = EntityHeadTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.entity_vocab_size))

    def forward(self, h: Tensor, decoder_weight: Tensor) -> Tensor:
        """h (..., l), decoder_weight (entity_vocab_size, entity_emb_size) -> logits (..., entity_vocab_size)."""
        return F.linear(self.transform(h), decoder_weight, self.bias)


class LukeForPretraining(nn.Module):
    """`luke` (EntityAwareModel) + masked word (`lm_head`) and masked entity (`entity_predictions`) heads.

    LUKE's pre-training model (`ralm luke pretrain`): words (B, T) and entities (B, E) in, masked-word
    logits (B, T, V) and masked-entity logits (B, E, entity vocabulary) out, with losses when labels
    are given (see `forward`).
    """

    def __init__(self, config: LukeConfig):
        super().__init__()
        self.config = config
        self.luke = EntityAwareModel(config)
        self.lm_head = LMHead(config)
        self.entity_predictions = EntityPredictionHead(config)
        init_weights(self.lm_head, config.initializer_range)
        init_weights(self.entity_predictions, config.initializer_range)
        self.ralm_meta: dict = {}  # provenance (e.g. the backbone directory), stored by io.save_model

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        entity_ids: Tensor | None,
        entity_attention_mask: Tensor | None,
        entity_position_ids: Tensor | None,
        mlm_labels: Tensor | None = None,
        entity_labels: Tensor | None = None,
        *,
        only_labelled: bool = False,
        **kw: Tensor | None,
    ) -> dict[str, Tensor]:
        """Labels (B, T) / (B, E) with -100 for "not predicted"; kw: token_type_ids, entity_token_type_ids.

        Returns mlm_logits (B, T, V) and entity_logits (B, E, entity_vocab_size); with labels also
        mlm_loss / mep_loss (mean over predicted positions, 0 when there are none) and their sum, loss.
        only_labelled: score only the positions whose label is not -100 (the vocabulary projection
        dominates a step otherwise); the logits are then (N, V) / (N_e, entity_vocab_size) in
        row-major order of those positions, and the losses are the same.
        """
        words, entities = self.luke(
            input_ids, attention_mask, entity_ids, entity_attention_mask, entity_position_ids, **kw
        )
        out: dict[str, Tensor] = {}
        losses = []
        for name, states, labels, head, table in (
            ("mlm", words, mlm_labels, self.lm_head, self.luke.embeddings.word_embeddings.weight),
            (
                "entity",
                entities,
                entity_labels,
                self.entity_predictions,
                self.luke.entity_embeddings.entity_embeddings.weight,
            ),
        ):
            if only_labelled and labels is not None:
                keep = labels != -100
                states, labels = states[keep], labels[keep]
            out[f"{name}_logits"] = logits = head(states, table)
            if labels is not None:
                key = "mlm_loss" if name == "mlm" else "mep_loss"
                out[key] = masked_cross_entropy(logits, labels)
                losses.append(out[key])
        if losses:
            out["loss"] = sum(losses[1:], losses[0])
        return out


class LukeForSpanClassification(nn.Module):
    """Classifier over concat(first word, last word, entity) states of each candidate span (B, E).

    LUKE's NER head (`ralm luke ner`): every candidate span is an entity token ([UNK] id 1 for
    unknown entities) whose mention positions are the span's words. Example, with a tiny config:

    >>> import torch
    >>> cfg = LukeConfig(vocab_size=100, hidden_size=32, entity_hidden_size=32, entity_vocab_size=10,
    ...                  entity_emb_size=32, num_hidden_layers=1, num_attention_heads=2,
    ...                  intermediate_size=64, entity_intermediate_size=64, max_position_embeddings=64,
    ...                  type_vocab_size=2, max_mention_length=4)
    >>> model = LukeForSpanClassification(cfg, num_labels=3)
    >>> words = torch.randint(5, 100, (2, 7))                        # (B, T) word ids
    >>> mentions = torch.tensor([[[1, 2, -1, -1]], [[3, -1, -1, -1]]])  # (B, E, M) span word positions
    >>> out = model(words, None, torch.ones(2, 1, dtype=torch.long), None, mentions,
    ...             torch.tensor([[1], [3]]), torch.tensor([[2], [3]]))  # span starts, ends (B, E)
    >>> tuple(out["logits"].shape)                                     # (B, E, num_labels)
    (2, 1, 3)
    """

    def __init__(
        self, config: LukeConfig, num_labels: int, *, dropout: float | None = None, words_only: bool = False
    ):
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        self.config = config
        self.num_labels = num_labels
        self.words_only = bool(words_only)
        self.luke = EntityAwareModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob if dropout is None else dropout)
        width = 2 * config.hidden_size + (0 if words_only else config.entity_hidden_size)
        self.classifier = nn.Linear(width, num_labels)
        init_weights(self.classifier, config.initializer_range)
        self.class_weights: Tensor | None = None  # (num_labels,) loss weight per gold class; None = 1
        self.ralm_meta: dict = {}

    @classmethod
    def from_pretraining(
        cls,
        pre: LukeForPretraining,
        num_labels: int,
        *,
        dropout: float | None = None,
        words_only: bool = False,
    ) -> LukeForSpanClassification:
        """A span classifier whose encoder is a copy of `pre.luke` (the classifier is fresh)."""
        model = cls(copy.deepcopy(pre.config), num_labels, dropout=dropout, words_only=words_only)
        model.luke.load_state_dict(pre.luke.state_dict())
        model.ralm_meta = dict(getattr(pre, "ralm_meta", {}))
        return model

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        entity_ids: Tensor,
        entity_attention_mask: Tensor | None,
        entity_position_ids: Tensor,
        entity_start_positions: Tensor,
        entity_end_positions: Tensor,
        labels: Tensor | None = None,
        **kw: Tensor | None,
    ) -> dict[str, Tensor]:
        """entity_start/end_positions (B, E): word indices of each span's first and last token.

        Returns logits (B, E, num_labels); with labels (B, E) also loss, the mean cross-entropy over
        real entities (entity_attention_mask 1) whose label is not -100.
        """
        if self.words_only:  # the words alone: no entity token reaches the encoder
            kw.pop("entity_token_type_ids", None)
            words, _ = self.luke(input_ids, attention_mask, None, None, None, **kw)
        else:
            words, entities = self.luke(
                input_ids, attention_mask, entity_ids, entity_attention_mask, entity_position_ids, **kw
            )
        t, L = words.size(1), words.size(2)
        start = entity_start_positions.clamp(0, t - 1).unsqueeze(-1).expand(-1, -1, L)
        end = entity_end_positions.clamp(0, t - 1).unsqueeze(-1).expand(-1, -1, L)
        parts = [words.gather(1, start), words.gather(1, end)] + ([] if self.words_only else [entities])
        out = {"logits": self.classifier(self.dropout(torch.cat(parts, dim=-1)))}
        if labels is not None:
            if entity_attention_mask is not None:
                labels = labels.masked_fill(entity_attention_mask == 0, -100)
            if self.class_weights is None:
                out["loss"] = masked_cross_entropy(out["logits"], labels)
            else:
                out["loss"] = weighted_cross_entropy(out["logits"], labels, self.class_weights)
        return out
