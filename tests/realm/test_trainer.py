"""The pre-training loop on a tiny model: resume == uninterrupted, checkpoints, metrics, config, errors."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from ralm.errors import RalmError
from testkit import quiet_store

pytestmark = pytest.mark.usefixtures("one_thread")


def _tensors(run):
    from safetensors.torch import load_file

    from ralm.train.checkpoint import latest_checkpoint

    return load_file(str(latest_checkpoint(run) / "model.safetensors"))


def _losses(run):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


@pytest.mark.parametrize("mode", ["realm", "mlm"])
def test_resume_reaches_the_same_parameters(tiny_cfg, tmp_path, mode):
    from ralm.realm.training.trainer import pretrain

    kw = dict(mode=mode, steps=5, checkpoint_every=2, refresh_every=2, grad_accum=2)
    full = pretrain(tiny_cfg(out=str(tmp_path / "full"), **kw), progress=False)
    part = tiny_cfg(out=str(tmp_path / "part"), **kw)
    pretrain(part, progress=False, stop_after=3)  # interrupted after step 3 (checkpointed)
    state = json.loads((tmp_path / "part" / "checkpoints" / "step-0000003" / "state.json").read_text())
    assert state["step"] == 3 and state["examples_seen"] == 3 * 3 * 2
    if mode == "realm":
        assert state["index_version"] == 1  # v0 at start, v1 after step 2
    pretrain(part, resume=True, progress=False)
    a, b = _tensors(full), _tensors(tmp_path / "part")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    assert _losses(full) == _losses(tmp_path / "part")  # also: no duplicated metric rows


def test_run_directory_metrics_and_checkpoints(tiny_cfg, tmp_path):
    from ralm.realm.config import PretrainConfig
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=4, k=3, checkpoint_every=1, keep_checkpoints=2, refresh_every=2)
    run = pretrain(cfg, progress=False)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    want = {
        "loss",
        "ppl",
        "entropy",
        "null_mass",
        "utility_1",
        "utility_2",
        "lr_reader",
        "lr_retriever",
        "answers_in_docs",
        "grad_norm",
        "index_version",
        "step_seconds",
        "examples_seen",
    }
    assert want <= set(steps[0])
    assert [r["index_version"] for r in steps] == [0, 0, 1, 1]  # the version each step searched
    assert [r["step"] for r in rows if "refresh_seconds" in r] == [0, 2, 4]
    for r in steps:
        assert r["ppl"] == pytest.approx(np.exp(r["loss"]))
        assert 0 <= r["null_mass"] <= 1 and 0 <= r["entropy"] <= np.log(3) + 1e-6
    assert steps[0]["lr_reader"] == pytest.approx(1e-3)  # warm-up of 1 step done
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts == ["step-0000003", "step-0000004"]
    assert sorted(p.name for p in (run / "index").iterdir()) == ["v00002"]
    assert json.loads((run / "checkpoints/step-0000004/index/index.json").read_text())["index_version"] == 2
    again = PretrainConfig.from_toml(run / "config.toml")
    assert again == cfg
    split = json.loads((run / "split.json").read_text())
    assert len(split["heldout"]) == 3 and not set(split["heldout"]) & set(split["train"])


def test_optimizer_groups_and_schedule(tiny_cfg, realm_store):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.training.build import build_model, optimizer_for

    cfg = tiny_cfg(null_doc="zeros", lr_reader=3e-4, lr_retriever=1e-5, weight_decay=0.1)
    model, _ = build_model(cfg, DocStore(realm_store))
    opt = optimizer_for(model, cfg)
    groups = {g["name"]: g for g in opt.param_groups}
    assert set(groups) == {"reader", "reader_no_decay", "retriever", "retriever_no_decay"}
    assert groups["reader"]["lr"] == 3e-4 and groups["retriever"]["lr"] == 1e-5
    assert groups["reader_no_decay"]["weight_decay"] == 0.0 and groups["retriever"]["weight_decay"] == 0.1
    assert any(p is model.null_vector for p in groups["retriever_no_decay"]["params"])
    n_params = sum(len(g["params"]) for g in opt.param_groups)
    assert n_params == len({id(p) for p in model.parameters()})  # each parameter once (tied decoder too)
    for name, p in model.named_parameters():
        if name.endswith("bias") or "LayerNorm" in name:
            assert not any(p is q for g in ("reader", "retriever") for q in groups[g]["params"]), name


def test_separate_query_corpus(tiny_cfg, realm_store, tmp_path):
    """X != Z: queries come from another store; nothing is excluded (ids mean nothing in Z)."""
    from ralm.realm.training.trainer import pretrain

    run = pretrain(tiny_cfg(queries=str(realm_store), steps=1, refresh_every=0), progress=False)
    assert (run / "checkpoints" / "step-0000001").is_dir()


# ----------------------------------------------------------------------------- bad input
def test_bad_inputs_are_one_clear_error(tiny_cfg, tmp_path, realm_store):
    from ralm.realm.config import PretrainConfig
    from ralm.realm.training.trainer import pretrain

    with pytest.raises(RalmError, match="lower k"):
        pretrain(tiny_cfg(k=500), progress=False)
    with pytest.raises(RalmError, match="null_doc"):
        tiny_cfg(null_doc="learned")
    with pytest.raises(RalmError, match="k=1 leaves no retrieved document"):
        tiny_cfg(k=1)
    with pytest.raises(RalmError, match="unknown setting"):
        PretrainConfig.from_dict({"docstore": "x", "stepz": 3})
    bad = tmp_path / "bad.toml"
    bad.write_text("steps = [oops\n")
    with pytest.raises(RalmError, match="not valid TOML"):
        PretrainConfig.from_toml(bad)
    # a reader that has no MLM head and none can be added (a config AutoModelForMaskedLM lacks)
    gpt = tmp_path / "gpt"
    from transformers import GPT2Config, GPT2Model

    GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=100, n_positions=32)).save_pretrained(gpt)
    with pytest.raises(RalmError, match="cannot be loaded as a masked LM"):
        pretrain(tiny_cfg(reader=str(gpt), out=str(tmp_path / "g")), progress=False)
    assert not (tmp_path / "g").exists()
    # an existing run is neither overwritten nor mixed with a new one
    run = pretrain(tiny_cfg(steps=1, out=str(tmp_path / "r")), progress=False)
    with pytest.raises(RalmError, match="--resume"):
        pretrain(tiny_cfg(steps=1, out=str(run)), progress=False)
    with pytest.raises(RalmError, match="was started with batch_size"):
        pretrain(tiny_cfg(steps=2, batch_size=2, out=str(run)), resume=True, progress=False)
    # the retriever a run started from (and the towers' shape) cannot change on resume: the towers
    # would be rebuilt with another config (unit vectors, score scale) under the same weights
    saved = (run / "config.toml").read_text()
    with pytest.raises(RalmError, match="was started with retriever=None"):
        pretrain(
            tiny_cfg(steps=2, retriever=str(tmp_path / "enc"), out=str(run)), resume=True, progress=False
        )
    flipped = not tiny_cfg().scale_by_sqrt_dim
    with pytest.raises(RalmError, match=f"was started with scale_by_sqrt_dim={not flipped}"):
        pretrain(tiny_cfg(steps=2, scale_by_sqrt_dim=flipped, out=str(run)), resume=True, progress=False)
    assert (run / "config.toml").read_text() == saved
    # the same corpus named another way (relative instead of absolute) is the same setting
    rel = os.path.relpath(tiny_cfg().docstore)
    assert rel != tiny_cfg().docstore
    pretrain(tiny_cfg(steps=2, docstore=rel, out=str(run)), resume=True, progress=False)
    assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())][-1] == 2


def test_run_from_another_corpus_is_refused(tiny_cfg, tmp_path, tiny_dir):
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    run = pretrain(tiny_cfg(steps=1), progress=False)
    other = tmp_path / "other.jsonl"
    other.write_text(
        json.dumps({"title": "Rome", "text": "Rome is the capital of Italy since 1871. " * 6}) + "\n"
    )
    quiet_store([other], tmp_path / "other", 24, tiny_dir)
    cfg_text = (run / "config.toml").read_text()
    (run / "config.toml").write_text(cfg_text.replace(tiny_cfg().docstore, str(tmp_path / "other")))
    with pytest.raises(RalmError, match="trained on another corpus"):
        load_run(run)
    with pytest.raises(RalmError, match="not a ralm pre-training run"):
        load_run(tmp_path)


def test_heldout_split_does_not_depend_on_the_training_strategy(tiny_cfg, realm_store):
    """A uniform-masking MLM warm-up holds out the chunks the salient runs are evaluated on."""
    from dataclasses import replace

    from ralm.corpus.docstore import DocStore
    from ralm.realm.data import split_ids
    from ralm.realm.masking.mlm import eligible_ids

    store = DocStore(realm_store)
    sal = tiny_cfg(heldout=4)
    uni = tiny_cfg(heldout=4)
    uni.masking = replace(uni.masking, strategy="uniform")
    tr_s, held_s = split_ids(sal, store)
    tr_u, held_u = split_ids(uni, store)
    assert held_s.tolist() == held_u.tolist() and len(held_s) == 4
    assert set(held_s) <= set(eligible_ids(store, sal.masking).tolist())  # scorable by evaluate-mlm
    assert not set(held_s) & set(tr_u.tolist()) and not set(held_s) & set(tr_s.tolist())
    assert sorted(tr_u.tolist() + held_u.tolist()) == list(range(len(store)))  # uniform: every chunk


def test_initial_index_is_used_and_must_match_the_corpus(tiny_cfg, tmp_path):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.refresh.sync import SyncRefresher
    from ralm.realm.training.build import build_model
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(out=str(tmp_path / "a"), steps=3, refresh_every=2)
    model, _ = build_model(cfg, DocStore(cfg.docstore))
    ref = SyncRefresher(model.docs, every=0, autocast="off")
    ref.refresh(model.encoder, 0)
    ref.index.save(tmp_path / "prebuilt")
    run = pretrain(
        tiny_cfg(out=str(tmp_path / "b"), steps=3, refresh_every=2, initial_index=str(tmp_path / "prebuilt")),
        progress=False,
    )
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["index_version"] for r in rows if "loss" in r] == [0, 0, 1]
    assert all(r["elapsed_seconds"] >= r["step_seconds"] for r in rows if "loss" in r)
    man = json.loads((tmp_path / "prebuilt" / "index.json").read_text())
    man["docstore_fingerprint"] = "0" * 64
    (tmp_path / "prebuilt" / "index.json").write_text(json.dumps(man))
    with pytest.raises(RalmError, match="fingerprint|another"):
        pretrain(tiny_cfg(out=str(tmp_path / "c"), initial_index=str(tmp_path / "prebuilt")), progress=False)


def test_same_setting_compares_paths_by_what_they_name(tmp_path, monkeypatch):
    from ralm.train.run import same_setting

    (tmp_path / "store").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "store")
    monkeypatch.chdir(tmp_path)
    assert same_setting(str(tmp_path / "store"), "store")
    assert same_setting("store", str(tmp_path / "link"))
    assert same_setting(4, 4) and same_setting(None, None)
    assert not same_setting(4, 8)
    assert not same_setting("store", "other")  # "other" does not exist
    assert not same_setting("gone", str(tmp_path / "gone"))  # names nothing: compared as text
    (tmp_path / "other").mkdir()
    assert not same_setting("store", "other")


def test_data_offset_starts_the_data_order_later(tiny_cfg, realm_store):
    """data_offset = 2 steps of examples: step 1 reads what step 3 reads without it; bad values refused."""
    from ralm.corpus.docstore import DocStore
    from ralm.realm.data import batch_positions, micro_batch_ids, split_ids

    plain = tiny_cfg(grad_accum=2)
    per_step = plain.batch_size * plain.grad_accum
    shifted = tiny_cfg(grad_accum=2, data_offset=2 * per_step)
    train_ids, _ = split_ids(plain, DocStore(realm_store))
    assert split_ids(shifted, DocStore(realm_store))[0].tolist() == train_ids.tolist()  # same split
    for m in range(2):
        got = micro_batch_ids(train_ids, shifted, 1, m).tolist()
        assert got == micro_batch_ids(train_ids, plain, 3, m).tolist()
        start = 2 * per_step + m * plain.batch_size
        assert got == batch_positions(train_ids, plain.seed, start, plain.batch_size).tolist()
    assert (
        micro_batch_ids(train_ids, shifted, 1, 0).tolist() != micro_batch_ids(train_ids, plain, 1, 0).tolist()
    )
    with pytest.raises(RalmError, match="data_offset=-1: must be >= 0"):
        tiny_cfg(data_offset=-1)
