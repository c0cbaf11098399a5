"""SUREALM on the real SmolLM2-135M (GGUF, Llama architecture) with the bundled MiniLM encoder."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_thread")]


def test_smollm2_data_store_training_steps_and_generation(tmp_path):
    from ralm.surealm.datastore_build import DatastoreConfig, build_datastore
    from ralm.surealm.generate import generate
    from ralm.surealm.sentences import read_sentences
    from ralm.surealm.train import TrainConfig, evaluate, load_trained, train

    sents = read_sentences(["chitchat"], fractions=(0.2, 0.2), limit_groups=4)
    ds = build_datastore(
        sents, tmp_path / "ds", DatastoreConfig(lm="smollm2", k=4, m=4), progress=False, log=lambda m: None
    )
    man = json.loads((ds / "manifest.json").read_text())
    assert man["lm"] == "smollm2" and man["dim"] == 384
    torch.manual_seed(0)
    out = train(
        TrainConfig(
            datastore=str(ds),
            out=str(tmp_path / "m"),
            lm="smollm2",
            k=4,
            steps=2,
            batch_size=4,
            eval_every=2,
            lr=1e-5,
            device="cpu",
            tensorboard=False,
        ),
        progress=False,
    )
    model, tok, store, batcher = load_trained(out, device="cpu")
    assert model.adapter.kind == "llama" and model.adapter.kv_heads == 3
    c = evaluate(model, batcher, store.split_ids("test"))
    assert 1 < c.token_ppl < 1e4  # a pretrained LM: far below its 49,152-token vocabulary
    res = generate(model, tok, store, "i would like to", max_new_tokens=4, min_new_tokens=4)
    assert len(res.token_ids[0]) == 4 and len(res.retriever.log) >= 4
