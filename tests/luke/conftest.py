"""LUKE fixtures: a tiny config factory and a tiny saved pre-training model.

- `tiny_luke_config(**overrides) -> LukeConfig`: a fixture that returns a factory; defaults are a
  2-layer LUKE (l = L = 32, 4 heads, entity_emb_size 16 so the projection is exercised) over a
  100-word vocabulary. Pass entity_hidden_size=16 (and entity_intermediate_size) for DaLUKE,
  vocab_size=30522 to pair it with the MiniLM tokenizer.
- `tiny_luke_dir`: a random LukeForPretraining (vocab 30522, l = L = 32) saved with
  ralm.luke.io.save_model, with the MiniLM tokenizer files copied in (session scope; read only).
"""

from __future__ import annotations

import pytest


def make_tiny_luke_config(**overrides):
    from ralm.luke.config import LukeConfig

    kw = dict(
        vocab_size=100,
        hidden_size=32,
        entity_hidden_size=32,
        entity_vocab_size=20,
        entity_emb_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        entity_intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=2,
        max_mention_length=6,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        entity_attention="joint",  # LUKE's and Hugging Face's attention: the parity tests' model
    )
    kw.update(overrides)
    if "entity_hidden_size" in overrides and "entity_intermediate_size" not in overrides:
        kw["entity_intermediate_size"] = (
            kw["intermediate_size"]
            if kw["entity_hidden_size"] == kw["hidden_size"]
            else 2 * kw["entity_hidden_size"]
        )
    return LukeConfig(**kw)


@pytest.fixture
def tiny_luke_config():
    """A factory: tiny_luke_config(entity_hidden_size=16) -> LukeConfig."""
    return make_tiny_luke_config


@pytest.fixture(scope="session")
def tiny_luke_dir(tmp_path_factory, minilm_dir):
    import torch

    from ralm.luke.io import save_model
    from ralm.luke.model import LukeForPretraining

    torch.manual_seed(0)
    model = LukeForPretraining(make_tiny_luke_config(vocab_size=30522, max_mention_length=30))
    model.ralm_meta = {"backbone": str(minilm_dir)}
    d = tmp_path_factory.mktemp("tiny_luke") / "model"
    save_model(model, d)
    return d
