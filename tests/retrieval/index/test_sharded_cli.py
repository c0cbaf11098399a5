"""`ralm index build --shards N`, `ralm index plan`, and search / verify / serve over a sharded index,
against the same index built unsharded (tiny random encoder)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from test_cli import DOCS, run

from ralm.cli import main


@pytest.fixture(scope="module")
def pair(tmp_path_factory, tiny_dir):
    """The same DocStore indexed whole (index/) and in 3 shards (sharded/)."""
    d = tmp_path_factory.mktemp("sharded-cli")
    src = d / "docs.jsonl"
    rows = [{"title": f"{t} {i}", "text": f"{x} Part {i}."} for i in range(3) for t, x in DOCS]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert (
        main(
            ["corpus", "build", str(src), "--out", str(d / "store"), "--tokenizer", str(tiny_dir), "--quiet"]
        )
        == 0
    )
    common = ["--encoder", str(tiny_dir), "--center", "--quiet"]
    assert main(["index", "build", str(d / "store"), "--out", str(d / "index"), *common]) == 0
    assert (
        main(["index", "build", str(d / "store"), "--out", str(d / "sharded"), "--shards", "3", *common]) == 0
    )
    return d


def test_search_over_shards_equals_the_whole_index(pair, capsys):
    from ralm.retrieval.index.sharded import ShardedIndex
    from ralm.retrieval.searchers import open_searcher

    manifest = json.loads((pair / "sharded" / "retrieval.json").read_text())
    assert manifest["shards"] == 3 and "dense/shards.json" in manifest["files"]
    for query in ("capital of Norway", "Greek philosopher", "president born"):
        _, whole, _ = run(capsys, "search", pair / "index", query, "-k", "7", "--json")
        _, sharded, _ = run(capsys, "search", pair / "sharded", query, "-k", "7", "--json")
        assert [json.loads(x) for x in sharded.splitlines()] == [json.loads(x) for x in whole.splitlines()]
    store, dense = open_searcher(pair / "sharded", "dense")  # what `ralm serve` and eval-retrieval open
    assert isinstance(dense.index, ShardedIndex) and len(dense.index.shards) == 3
    ref = open_searcher(pair / "index", "dense")[1]
    queries = [r["text"] for r in (store.get(i) for i in range(len(store)))]
    excl = list(range(len(store)))  # each chunk's text as a query, excluding itself
    got, want = dense.search_text(queries, 5, exclude_ids=excl), ref.search_text(queries, 5, exclude_ids=excl)
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_array_equal(got.scores, want.scores)
    from ralm.serve.loaders import load_target

    target = load_target(pair / "sharded")  # `ralm serve INDEX`: the same retriever behind the pages
    assert isinstance(target.dense.index, ShardedIndex)
    served = target.dense.search_text(queries[:4], 3)
    np.testing.assert_array_equal(served.ids, ref.search_text(queries[:4], 3).ids)


def test_verify_names_a_damaged_shard(pair, tmp_path, capsys):
    code, out, _ = run(capsys, "index", "verify", pair / "sharded")
    assert code == 0 and out.startswith("ok:")
    bad = tmp_path / "bad"
    shutil.copytree(pair / "sharded", bad)
    victim = bad / "dense" / "shard-00002-of-00003" / "index.faiss"
    data = bytearray(victim.read_bytes())
    data[-3] ^= 1
    victim.write_bytes(bytes(data))
    code, out, err = run(capsys, "index", "verify", bad)
    assert code == 2 and "shard-00002-of-00003/index.faiss: contents changed" in out
    code, _, err = run(capsys, "search", bad, "capital", "-k", "2")
    assert code == 2 and len(err) == 1 and "shard-00002-of-00003/index.faiss" in err[0]
    assert "shard 2 of 3" in err[0] and "ralm index verify" in err[0]


def test_index_plan_per_shard(pair, capsys):
    code, out, _ = run(capsys, "index", "plan", "--chunks", "13000000", "--dim", "128", "--shards", "8")
    assert code == 0
    assert out.splitlines()[0] == (
        "flat index of 13,000,000 x 128 in 8 shards of up to 1,625,000: about 793.5 MiB per shard, "
        "6.2 GiB in all, build time: seconds"
    )
    assert [ln.split()[0] for ln in out.splitlines()] == ["flat", "sq8", "ivf-pq"]
    code, out, _ = run(
        capsys, "index", "plan", pair / "store", "--kind", "flat", "--dim", "4", "--shards", "2"
    )
    assert code == 0 and out.startswith("flat index of 18 x 4 in 2 shards of up to 9: about 144 B per shard")
    code, _, err = run(capsys, "index", "plan", "--chunks", "5", "--shards", "6")
    assert code == 2 and err == ["ralm: error: --shards 6: must be between 1 and the 5 chunks"]
    code, _, err = run(capsys, "index", "build", pair / "store", "--out", pair / "x", "--shards", "19")
    assert code == 2 and "more shards than the 18 chunks" in err[0] and not (pair / "x").exists()


def test_index_build_under_torchrun_one_shard_per_process(pair, tmp_path, capsys):
    """2 gloo processes: each embeds its share and builds its shard; the index searches like the
    one-process build (same encoder; the embedding batches differ, so scores to float16 noise)."""
    import os
    import subprocess

    from ralm.train.distributed import torchrun_command

    out = tmp_path / "ranks"
    argv = [
        "index",
        "build",
        str(pair / "store"),
        "--out",
        str(out),
        "--encoder",
        str(pair / "index" / "encoder"),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("WORLD_SIZE", None)
    res = subprocess.run(
        torchrun_command(2, [*argv, "--center", "--quiet"]),
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    manifest = json.loads((out / "retrieval.json").read_text())
    shards = json.loads((out / "dense" / "shards.json").read_text())
    assert manifest["shards"] == 2 and [(e["start"], e["stop"]) for e in shards["shards"]] == [
        (0, 9),
        (9, 18),
    ]
    code, text, _ = run(capsys, "index", "verify", out)
    assert code == 0 and text.startswith("ok:")
    np.testing.assert_allclose(
        np.load(out / "embeddings.npy").astype(np.float32),
        np.load(pair / "index" / "embeddings.npy").astype(np.float32),
        atol=2e-3,
    )
    for query in ("capital of Norway", "Greek philosopher"):
        _, whole, _ = run(capsys, "search", pair / "index", query, "-k", "5", "--json")
        _, ranks, _ = run(capsys, "search", out, query, "-k", "5", "--json")
        a, b = [json.loads(x) for x in whole.splitlines()], [json.loads(x) for x in ranks.splitlines()]
        assert [r["id"] for r in a] == [r["id"] for r in b]
        assert [r["score"] for r in a] == pytest.approx([r["score"] for r in b], abs=1e-3)
    # more processes than shards asked for: one line from every rank, nothing built
    res = subprocess.run(
        torchrun_command(2, [*argv[:4], str(tmp_path / "x"), *argv[5:], "--shards", "1", "--quiet"]),
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert res.returncode != 0 and "--shards 1: fewer shards than the 2 processes" in res.stderr
    assert not (tmp_path / "x").exists()
