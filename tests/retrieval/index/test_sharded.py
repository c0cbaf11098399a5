"""Sharded dense index: merging per-shard top-k equals brute force and the unsharded index exactly
(ids, scores, ties by lower id, exclusions), and broken shards are named in one line."""

from __future__ import annotations

import json
import shutil

import faiss
import numpy as np
import pytest

from ralm.errors import RalmError
from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.shard_build import build_sharded
from ralm.retrieval.index.shard_merge import merge_topk, shard_ranges
from ralm.retrieval.index.sharded import (
    SHARDS_FILE,
    ShardedIndex,
    flat_rows,
    load_dense,
    shard_dir_name,
    verify_sharded,
)

pytestmark = pytest.mark.usefixtures("one_faiss_thread")

FP = {"docstore_fingerprint": "d" * 64, "encoder_fingerprint": "e" * 64}


def brute_force(x: np.ndarray, q: np.ndarray, k: int, exclude=None):
    """Reference: every score in float64 (integer vectors: exact), drop excluded ids, then order
    by (score desc, id asc) with a naive Python sort."""
    s = q.astype(np.float64) @ x.astype(np.float64).T
    out_ids, out_scores = [], []
    for i in range(len(q)):
        ex = set() if exclude is None or exclude[i] is None else set(np.atleast_1d(exclude[i]).tolist())
        rows = sorted((-s[i, j], j) for j in range(len(x)) if j not in ex)[:k]
        out_ids.append([j for _, j in rows])
        out_scores.append([-v for v, _ in rows])
    return np.array(out_ids), np.array(out_scores)


def int_vectors(rng, n, d=6):
    """Small integers: scores are exact in float32, and many of them tie."""
    return rng.integers(-2, 3, size=(n, d)).astype(np.float32)


def test_shard_ranges_like_dist_share():
    assert shard_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert shard_ranges(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(RalmError, match="more shards than the 3 chunks"):
        shard_ranges(3, 4)


def test_merge_equals_brute_force_on_random_shards():
    rng = np.random.default_rng(0)
    for trial in range(30):
        n, q_n, k = int(rng.integers(8, 60)), 5, int(rng.integers(1, 6))
        x, q = int_vectors(rng, n), int_vectors(rng, q_n)
        n_shards = int(rng.integers(1, min(n, 6) + 1))
        excl = [rng.choice(n, size=int(rng.integers(0, 4)), replace=False) for _ in range(q_n)]
        width = max(len(e) for e in excl)
        excl_arr = np.full((q_n, max(width, 1)), -1, dtype=np.int64)
        for i, e in enumerate(excl):
            excl_arr[i, : len(e)] = e
        s = q @ x.T
        ids, scores = [], []
        for start, stop in shard_ranges(n, n_shards):
            # each shard's own full ranking, cut at a random depth >= k + exclusions (what shard_topk gives)
            local = sorted(range(start, stop), key=lambda j: (-s[0, j], j))
            depth = min(stop - start, k + width + int(rng.integers(0, 3)))
            rows = [sorted(range(start, stop), key=lambda j, i=i: (-s[i, j], j))[:depth] for i in range(q_n)]
            perm = rng.permutation(depth)  # merge must not rely on the order within a list
            ids.append(np.array(rows)[:, perm])
            scores.append(np.take_along_axis(s, np.array(rows), axis=1)[:, perm])
            del local
        got_ids, got_scores = merge_topk(ids, scores, k, excl_arr)
        ref_ids, ref_scores = brute_force(x, q, k, excl)
        np.testing.assert_array_equal(got_ids, ref_ids, err_msg=f"trial {trial}")
        np.testing.assert_array_equal(got_scores, ref_scores.astype(np.float32))


@pytest.mark.parametrize("n_shards", [1, 2, 3, 5])
def test_sharded_flat_equals_brute_force_and_unsharded(tmp_path, n_shards):
    rng = np.random.default_rng(n_shards)
    n, d = 53, 6
    x, q = int_vectors(rng, n, d), int_vectors(rng, 7, d)
    build_sharded(x, tmp_path / "s", n_shards, kind="flat", **FP)
    sharded = load_dense(tmp_path / "s")
    assert isinstance(sharded, ShardedIndex) and sharded.count == n and len(sharded.shards) == n_shards
    whole = DenseIndex.build(x, kind="flat", **FP)
    # exclusions: none, one id per query (REALM), ragged lists, a whole small shard excluded
    last = shard_ranges(n, n_shards)[-1] if n_shards > 1 else (40, 53)
    cases = [
        None,
        np.arange(7, dtype=np.int64) * 7,
        [[0, 1, 2], None, [52], list(range(last[0], last[1])), [5, 5], [], [30, 31, 32, 33]],
    ]
    for excl in cases:
        for k in (1, 4, 10, 25, n - (last[1] - last[0])):
            got = sharded.search(q, k, exclude_ids=excl)
            ref = whole.search(q, k, exclude_ids=excl)
            bf_ids, bf_scores = brute_force(x, q, k, excl if excl is None else list(excl))
            np.testing.assert_array_equal(got.ids, bf_ids)
            np.testing.assert_array_equal(got.scores, bf_scores.astype(np.float32))
            np.testing.assert_array_equal(got.ids, ref.ids)
            np.testing.assert_array_equal(got.scores, ref.scores)
    with pytest.raises(RalmError, match="chunks left"):
        sharded.search(q[:1], n, exclude_ids=[[0]])


@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("center", [False, True])
def test_sharded_float_scores_equal_unsharded_exactly(tmp_path, batch, center):
    """Real-valued vectors (FAISS's BLAS path at batch 32): bit-identical scores to one index."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3001, 32)).astype(np.float16)  # the float16 refresh vectors
    q = rng.standard_normal((batch, 32)).astype(np.float32)
    build_sharded(x, tmp_path / "s", 4, kind="flat", center=center, **FP)
    sharded = ShardedIndex.load(tmp_path / "s", docstore_fingerprint=FP["docstore_fingerprint"])
    whole = DenseIndex.build(x, kind="flat", center=center, **FP)
    excl = rng.integers(0, 3001, size=batch).astype(np.int64)
    for k in (1, 10, 100):
        got, ref = sharded.search(q, k, exclude_ids=excl), whole.search(q, k, exclude_ids=excl)
        np.testing.assert_array_equal(got.ids, ref.ids)
        np.testing.assert_array_equal(got.scores, ref.scores)


def test_each_shard_is_a_plain_index_directory(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((10, 4)).astype(np.float32)
    m = build_sharded(x, tmp_path / "s", 3, **FP)
    assert [(e["start"], e["stop"]) for e in m["shards"]] == [(0, 4), (4, 7), (7, 10)]
    shard = tmp_path / "s" / shard_dir_name(1, 3)
    raw = faiss.read_index(str(shard / "index.faiss"))
    np.testing.assert_array_equal(raw.reconstruct_n(0, 3), x[4:7])
    assert json.loads((shard / "index.json").read_text())["shard"] == {
        "index": 1,
        "of": 3,
        "start": 4,
        "stop": 7,
        "total": 10,
    }
    assert verify_sharded(tmp_path / "s") == ([], 6)
    np.testing.assert_array_equal(flat_rows(tmp_path / "s", 2, 9), x[2:9])  # re-sharding reads these


def test_broken_shards_named_in_one_line(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((30, 4)).astype(np.float32)
    good = tmp_path / "good"
    build_sharded(x, good, 3, **FP)

    def copy(name):
        d = tmp_path / name
        shutil.copytree(good, d)
        return d, d / shard_dir_name(1, 3)

    d, s1 = copy("missing")
    shutil.rmtree(s1)
    with pytest.raises(RalmError, match=r"shard-00001-of-00003: missing \(shard 1 of 3, chunks 10..19\)"):
        ShardedIndex.load(d)
    assert "missing" in verify_sharded(d)[0][0]

    d, s1 = copy("damaged")
    data = bytearray((s1 / "index.faiss").read_bytes())
    data[-5] ^= 0xFF
    (s1 / "index.faiss").write_bytes(bytes(data))
    with pytest.raises(
        RalmError, match=r"shard-00001-of-00003/index.faiss: contents changed.*\(shard 1 of 3"
    ):
        ShardedIndex.load(d)
    assert "checksum mismatch" in verify_sharded(d)[0][0]

    d, s1 = copy("foreign")  # a shard built from another DocStore put in its place
    other = tmp_path / "other"
    build_sharded(x, other, 3, docstore_fingerprint="f" * 64, encoder_fingerprint="e" * 64)
    shutil.rmtree(s1)
    shutil.copytree(other / shard_dir_name(1, 3), s1)
    with pytest.raises(RalmError, match=r"shard-00001-of-00003: built from another DocStore \(shard 1 of 3"):
        ShardedIndex.load(d)

    with pytest.raises(RalmError, match="built from another corpus"):
        ShardedIndex.load(good, docstore_fingerprint="a" * 64)
    (good / SHARDS_FILE).write_text("{not json")
    with pytest.raises(RalmError, match="shards.json: unreadable"):
        load_dense(good)


def test_reconstruct_batch_reads_each_chunk_from_its_shard(tmp_path):
    """What fine-tuning from a sharded REALM run reads (ralm.tasks.retrieval.doc_vectors)."""
    from ralm.tasks.retrieval import doc_vectors

    rng = np.random.default_rng(3)
    x = rng.standard_normal((23, 4)).astype(np.float32)
    build_sharded(x, tmp_path / "s", 4, **FP)
    ids = np.array([22, 0, 5, 6, 6, 17])
    np.testing.assert_array_equal(doc_vectors(load_dense(tmp_path / "s"), ids), x[ids])
    with pytest.raises(RalmError, match="chunk ids must be in 0..22"):
        load_dense(tmp_path / "s").reconstruct_batch(np.array([23]))
