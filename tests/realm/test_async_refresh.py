"""Asynchronous index refresh: a builder process hands over index versions while training goes on."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def _refresher(cfg, tmp_path, every=1):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.refresh.background import AsyncRefresher
    from ralm.realm.training.build import build_model

    model, _ = build_model(cfg, DocStore(cfg.docstore))
    ref = AsyncRefresher(
        model.docs,
        every=every,
        kind="flat",
        batch_size=8,
        autocast="off",
        root=tmp_path / "index",
        encoder_src=cfg.reader,
        encoder_config=model.encoder.config,
    )
    return model, ref


def _vectors(index):
    return index.index.reconstruct_n(0, index.count)


def test_builder_hands_over_the_index_of_the_snapshot_it_was_given(tiny_cfg, tmp_path):
    import torch

    from ralm.realm.refresh.sync import embed_chunks

    model, ref = _refresher(tiny_cfg(), tmp_path)
    try:
        ref.refresh(model.encoder, 0)
        assert ref.maybe_refresh(1, model.encoder) is None and ref.pending == (1, 1)  # snapshot of step 1
        at_snapshot = embed_chunks(model.encoder, model.docs, autocast="off")
        with torch.no_grad():  # training goes on: the live tower moves away from the snapshot
            for p in model.encoder.doc_tower.parameters():
                p.add_(0.05)
        ref.wait(120)
        t = ref.maybe_refresh(3, model.encoder)
        assert t is not None and ref.version == 1 and ref.built_at_step == 1
        assert ref.last_swap["staleness_steps"] == 2 and ref.last_swap["build_seconds"] > 0
        np.testing.assert_allclose(_vectors(ref.index), at_snapshot.astype(np.float16), atol=1e-3)
        assert not np.allclose(
            _vectors(ref.index), embed_chunks(model.encoder, model.docs, autocast="off"), atol=1e-2
        )
        assert ref.pending == (2, 3)  # the next snapshot left at once
        assert not (tmp_path / "index" / "snapshot-v00001.safetensors").exists()  # removed once used
    finally:
        ref.close()
    assert ref.proc is None


def test_async_pretraining_runs_and_never_goes_back_a_version(tiny_cfg):
    from ralm.realm.training.trainer import pretrain

    run = pretrain(
        tiny_cfg(steps=6, refresh_every=1, refresh_mode="async", checkpoint_every=0), progress=False
    )
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    versions = [r["index_version"] for r in rows if "loss" in r]
    assert len(versions) == 6 and versions == sorted(versions) and versions[0] == 0
    state = json.loads((run / "checkpoints" / "step-0000006" / "state.json").read_text())
    assert state["index_version"] >= versions[-1]


def test_async_refresh_with_a_causal_reader(causal_cfg, tmp_path):
    """The builder process embeds with the towers (the retriever), not with the causal reader, and a
    causal run trains with it."""
    from ralm.corpus.docstore import DocStore
    from ralm.realm.refresh.sync import embed_chunks
    from ralm.realm.training.build import build_model, make_refresher
    from ralm.realm.training.trainer import pretrain
    from ralm.train.distributed import Dist

    cfg = causal_cfg(refresh_every=1, refresh_mode="async", autocast="off")
    model, _ = build_model(cfg, DocStore(cfg.docstore))
    ref = make_refresher(cfg, model, tmp_path, Dist())
    assert model.causal and ref.spec["encoder_src"] == cfg.retriever
    try:
        ref.refresh(model.encoder, 0)
        assert ref.maybe_refresh(1, model.encoder) is None
        ref.wait(120)
        assert ref.maybe_refresh(2, model.encoder) is not None and ref.version == 1
        want = embed_chunks(model.encoder, model.docs, autocast="off").astype(np.float16)
        np.testing.assert_allclose(_vectors(ref.index), want, atol=1e-3)
    finally:
        ref.close()
    run = pretrain(
        causal_cfg(steps=3, refresh_every=1, refresh_mode="async", checkpoint_every=0), progress=False
    )
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    versions = [r["index_version"] for r in rows if "loss" in r]
    assert len(versions) == 3 and versions == sorted(versions) and versions[0] == 0


def test_a_half_written_version_is_never_used(tiny_cfg, tmp_path, caplog):
    model, ref = _refresher(tiny_cfg(), tmp_path, every=1000)
    ref.refresh(model.encoder, 0)
    good = ref.index
    # a version directory whose index file was cut short, and a builder report pointing at it
    bad = ref.version_dir(1)
    bad.mkdir(parents=True)
    src = ref.version_dir(0)
    (bad / "index.json").write_text((src / "index.json").read_text())
    (bad / "index.faiss").write_bytes((src / "index.faiss").read_bytes()[:100])
    import multiprocessing as mp

    ref.results = mp.get_context("spawn").Queue()
    ref.commands = mp.get_context("spawn").Queue()
    ref.pending = (1, 0)
    ref.results.put(("done", 1, 0, 0.5))
    time.sleep(0.2)
    with caplog.at_level("WARNING"):
        assert ref.maybe_refresh(5, model.encoder) is None
    assert ref.version == 0 and ref.index is good
    assert "index version 1 refused" in caplog.text
    q = np.zeros((1, model.encoder.dim), dtype=np.float32)
    assert ref.search(q, np.array([-1]), 2).shape == (1, 2)
