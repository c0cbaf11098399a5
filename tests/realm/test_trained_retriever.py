"""REALM pre-training warm-started from an encoder that `ralm retriever train` wrote."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(scope="module")
def trained_encoder(tmp_path_factory, realm_store, tiny_dir):
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig
    from ralm.retrieval.passages import StorePassages
    from ralm.retrieval.training.recipes import RetrieverTrainConfig, train_retriever

    out = tmp_path_factory.mktemp("trained") / "cc"
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(normalize=True, max_length=32))
    cfg = RetrieverTrainConfig(mode="contrastive", steps=2, batch_size=4, heldout=0, autocast="off")
    train_retriever(enc, StorePassages(DocStore(realm_store)), out, cfg, progress=False, log=lambda m: None)
    return out / "encoder"


def test_pretrain_keeps_the_trained_score_scale(tiny_cfg, trained_encoder, tmp_path):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.training.build import build_model
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(retriever=str(trained_encoder), scale_by_sqrt_dim=False)
    model, _ = build_model(cfg, DocStore(cfg.docstore))
    assert model.encoder.config.normalize and model.encoder.config.score_scale == pytest.approx(20.0)
    s = torch.tensor([[0.5, -0.25]])
    torch.testing.assert_close(model._scale(s), 20.0 * s)  # p(z|x) as sharp as in retriever training
    cfg = tiny_cfg(retriever=str(trained_encoder), scale_by_sqrt_dim=True)
    model, _ = build_model(cfg, DocStore(cfg.docstore))
    torch.testing.assert_close(model._scale(s), 20.0 * s / model.encoder.dim**0.5)
    pretrain(tiny_cfg(retriever=str(trained_encoder), out=str(tmp_path / "run")), progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows) == 4
