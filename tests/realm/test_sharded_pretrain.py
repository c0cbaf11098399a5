"""REALM pre-training with the index sharded over the ranks (`index_sharding = "rank"`): 2 gloo
processes under torchrun against the replicated index, resuming elsewhere, and the one-line refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_distributed import _args, _close, _losses, _params, _torchrun, nodrop_dir  # noqa: F401

from ralm.errors import RalmError

pytestmark = pytest.mark.usefixtures("one_thread")
SHARDED = ["--set", "index_sharding=rank"]


def test_sharded_index_matches_the_replicated_one(realm_store, nodrop_dir, tmp_path):  # noqa: F811
    rep, shd = tmp_path / "replicated", tmp_path / "sharded"
    res = _torchrun(_args(realm_store, nodrop_dir, rep))
    assert res.returncode == 0, res.stderr[-3000:]
    res = _torchrun(_args(realm_store, nodrop_dir, shd) + SHARDED)
    assert res.returncode == 0, res.stderr[-3000:]
    la, lb = _losses(rep), _losses(shd)
    assert sorted(la) == sorted(lb) == [1, 2, 3]
    for s in la:  # the same candidates (exact flat shards), the same towers: float noise at most
        assert lb[s] == pytest.approx(la[s], rel=1e-6)
    _close(_params(rep), _params(shd))
    # the saved versions and the checkpoint's copy are sharded index directories, one shard per rank
    version = json.loads((shd / "index" / "v00002" / "shards.json").read_text())
    assert [e["dir"] for e in version["shards"]] == ["shard-00000-of-00002", "shard-00001-of-00002"]
    assert version["index_version"] == 2 and version["shards"][1]["stop"] == version["count"]
    ckpt = shd / "checkpoints" / "step-0000003"
    state = json.loads((ckpt / "state.json").read_text())
    assert state["index_version"] == 2 and state["index_shards"] == 2
    assert "index/shard-00001-of-00002/index.faiss" in state["files"]
    assert json.loads((rep / "checkpoints" / "step-0000003" / "state.json").read_text())["index_shards"] == 1
    # `ralm run verify` checks every shard of the saved versions
    from ralm.cli import main

    assert main(["run", "verify", str(shd)]) == 0
    victim = shd / "index" / "v00002" / "shard-00001-of-00002" / "index.faiss"
    data = bytearray(victim.read_bytes())
    data[-2] ^= 1
    victim.write_bytes(bytes(data))
    assert main(["run", "verify", str(shd)]) == 2


def test_sharded_run_resumes_in_one_process(realm_store, nodrop_dir, tmp_path):  # noqa: F811
    from ralm.cli import main

    full, part = tmp_path / "full", tmp_path / "part"
    assert main(_args(realm_store, nodrop_dir, full)) == 0
    res = _torchrun(_args(realm_store, nodrop_dir, part) + SHARDED + ["--stop-after", "1"])
    assert res.returncode == 0, res.stderr[-3000:]
    # one process opens both shards of the checkpoint's index and searches them in turn
    assert main(_args(realm_store, nodrop_dir, part) + SHARDED + ["--resume"]) == 0
    _close(_params(full), _params(part))
    # and the other way: one shard saved by one process, re-cut into two when 2 processes resume
    grow = tmp_path / "grow"
    assert main(_args(realm_store, nodrop_dir, grow) + SHARDED + ["--stop-after", "1"]) == 0
    res = _torchrun(_args(realm_store, nodrop_dir, grow) + SHARDED + ["--resume"])
    assert res.returncode == 0, res.stderr[-3000:]
    _close(_params(full), _params(grow))
    assert len(json.loads((grow / "index" / "v00002" / "shards.json").read_text())["shards"]) == 2


def test_resharding_refusals_name_the_index(realm_store, tmp_path, tiny_dir):
    from ralm.realm.config import PretrainConfig
    from ralm.realm.modeling.model import ChunkDocs
    from ralm.realm.refresh.sharded import ShardedRefresher
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.index.shard_build import build_sharded
    from ralm.train.distributed import Dist

    with pytest.raises(RalmError, match='index_sharding = "rank" needs refresh_mode = "sync"'):
        PretrainConfig(index_sharding="rank", refresh_mode="async", refresh_every=5)
    enc = DualEncoder.from_pretrained(tiny_dir)
    from ralm.corpus.docstore import DocStore

    store = DocStore(realm_store)
    docs = ChunkDocs(store, enc)
    n = len(docs)
    x = np.random.default_rng(0).standard_normal((n, enc.dim)).astype(np.float32)
    fp = {"docstore_fingerprint": store.fingerprint, "encoder_fingerprint": enc.fingerprint("doc")}
    build_sharded(x, tmp_path / "sq8", 3, kind="sq8", **fp)
    # rank 0 of 2 (the refusal comes before any collective)
    refresher = ShardedRefresher(docs, kind="sq8", dist=Dist(0, 2))
    with pytest.raises(RalmError, match=r"sq8 index in 3 shard\(s\) cannot be re-cut into 2 .* --nproc 3"):
        refresher.load(tmp_path / "sq8")
    build_sharded(x, tmp_path / "other", 2, docstore_fingerprint="f" * 64, encoder_fingerprint="e" * 64)
    with pytest.raises(RalmError, match="built from another corpus"):
        refresher.load(tmp_path / "other")
