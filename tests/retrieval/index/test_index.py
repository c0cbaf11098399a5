"""DenseIndex: exact search vs numpy, exclusion and always-k, approximate backends, save/load, errors."""

from __future__ import annotations

import json

import faiss
import numpy as np
import pytest

from ralm.errors import RalmError
from ralm.retrieval.exclusion import filter_excluded, prepare_exclude
from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.plan import KINDS, estimate

pytestmark = pytest.mark.usefixtures("one_faiss_thread")

FP = {"docstore_fingerprint": "d" * 64, "encoder_fingerprint": "e" * 64}
# Small enough to train on the clustered data below, large enough for recall.
APPROX = {
    "ivf-flat": {"nlist": 16, "nprobe": 4},
    "ivf-pq": {"nlist": 16, "nprobe": 4, "m": 32, "nbits": 8},
    "hnsw": {"M": 16, "ef_construction": 40, "ef_search": 64},
    "sq8": {},
}


def brute_force(x: np.ndarray, q: np.ndarray, k: int, exclude=None):
    s = q @ x.T
    if exclude is not None:
        for i, e in enumerate(exclude):
            s[i, list(np.atleast_1d(e))] = -np.inf
    ids = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return ids, np.take_along_axis(s, ids, axis=1)


@pytest.fixture(scope="module")
def random_data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((2000, 32)).astype(np.float32), rng.standard_normal((25, 32)).astype(
        np.float32
    )


@pytest.fixture(scope="module")
def clustered():
    """2,000 unit vectors in 16 tight-ish clusters; queries near the data."""
    rng = np.random.default_rng(1)
    centers = rng.standard_normal((16, 32)).astype(np.float32)
    x = centers[rng.integers(0, 16, 2000)] + 0.3 * rng.standard_normal((2000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.choice(2000, 40, replace=False)] + 0.05 * rng.standard_normal((40, 32)).astype(np.float32)
    return np.ascontiguousarray(x), np.ascontiguousarray(q, dtype=np.float32)


@pytest.fixture(scope="module")
def approx_indexes(clustered):
    x, _ = clustered
    return {kind: DenseIndex.build(x, kind=kind, **FP, **params) for kind, params in APPROX.items()}


# ----------------------------------------------------------------------------- exact search
def test_flat_equals_brute_force(random_data):
    x, q = random_data
    index = DenseIndex.build(x, **FP)
    assert isinstance(index.index, faiss.IndexFlatIP) and index.kind == "flat"
    res = index.search(q, 10)
    ids, scores = brute_force(x, q, 10)
    assert res.ids.dtype == np.int64 and res.scores.dtype == np.float32 and res.ids.shape == (25, 10)
    np.testing.assert_array_equal(res.ids, ids)
    np.testing.assert_allclose(res.scores, scores, rtol=1e-5, atol=1e-4)


def test_flat_exclusion_matches_brute_force(random_data):
    x, q = random_data
    index = DenseIndex.build(x, **FP)
    top = brute_force(x, q, 6)[0]
    # Exclude each query's true top 1..5 (ragged), given as ints and lists and None.
    exclude = [
        None if i % 5 == 0 else int(top[i, 0]) if i % 5 == 1 else top[i, : i % 5 + 1].tolist()
        for i in range(25)
    ]
    res = index.search(q, 10, exclude_ids=exclude)
    ids, scores = brute_force(x, q, 10, [[] if e is None else e for e in exclude])
    np.testing.assert_array_equal(res.ids, ids)
    np.testing.assert_allclose(res.scores, scores, rtol=1e-5, atol=1e-4)
    for row, e in zip(res.ids, exclude, strict=True):
        assert not set(np.atleast_1d(e if e is not None else [])) & set(row.tolist())
    # One id per query (the fast path): its own chunk for 25 chunk queries, where it ranks
    # first, and a random id for the random queries, where it mostly is not a candidate.
    own = np.arange(25)
    for queries, excl in ((x[:25], own), (q, top[:, 3]), (q, own)):
        res = index.search(queries, 10, exclude_ids=excl)
        ids, scores = brute_force(x, queries, 10, excl)
        np.testing.assert_array_equal(res.ids, ids)
        np.testing.assert_allclose(res.scores, scores, rtol=1e-5, atol=1e-4)


def test_exclude_own_id_and_k_plus_excluded_equals_n():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((50, 8)).astype(np.float32)
    index = DenseIndex.build(x, **FP)
    # REALM's trivial retrieval: the query is the chunk itself; exclude its own id.
    res = index.search(x, 5, exclude_ids=np.arange(50))
    assert (res.ids != np.arange(50)[:, None]).all() and res.ids.shape == (50, 5)
    # k + |excluded| == N: everything else comes back, in score order.
    excl = [[0, 1, 2, 3, 4], [10, 20, 30, 40, 49]]
    res = index.search(x[:2], 45, exclude_ids=excl)
    for row, scores, e, qv in zip(res.ids, res.scores, excl, x[:2], strict=True):
        assert sorted(row.tolist()) == sorted(set(range(50)) - set(e))
        assert (np.diff(scores) <= 0).all()
        np.testing.assert_allclose(scores, x[row] @ qv, rtol=1e-5, atol=1e-5)
    with pytest.raises(RalmError, match="k=46"):
        index.search(x[:2], 46, exclude_ids=excl)


def test_ties_go_to_the_lower_id():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 16)).astype(np.float32)
    x[[5, 100, 250]] = x[3]  # four identical chunks
    index = DenseIndex.build(x, **FP)
    for k in (1, 2, 3, 4, 6):
        res = index.search(x[[3]], k)
        assert res.ids[0, : min(k, 4)].tolist() == [3, 5, 100, 250][: min(k, 4)]
    res = index.search(x[[3]], 2, exclude_ids=[3])
    assert res.ids[0].tolist() == [5, 100]


def test_one_query_at_a_time_equals_the_batch_and_brute_force(random_data):
    """The single-query fast path (Python lists) gives what the batch path and numpy give."""
    x, q = random_data
    x = x.copy()
    x[[40, 41]] = x[7]  # a three-way tie, for a query equal to chunk 7
    index = DenseIndex.build(x, **FP)
    queries = np.concatenate([q, x[[7, 9]]])
    own = np.array([*range(25), 7, -1])  # -1: nothing to exclude for the last query
    batch = index.search(queries, 10, exclude_ids=own)
    plain = index.search(queries, 10)
    for i in range(len(queries)):
        for res, excl in ((batch, own[i : i + 1]), (plain, None)):
            one = index.search(queries[i : i + 1], 10, exclude_ids=excl)
            assert one.ids.tolist() == res.ids[i : i + 1].tolist()
            np.testing.assert_array_equal(one.scores, res.scores[i : i + 1])
            ids, scores = brute_force(x, queries[i : i + 1], 10, None if excl is None else [[int(excl[0])]])
            np.testing.assert_array_equal(one.ids, ids)
            np.testing.assert_allclose(one.scores, scores, rtol=1e-5, atol=1e-4)
    assert plain.ids[25, :3].tolist() == [7, 40, 41] and batch.ids[25, :2].tolist() == [40, 41]


def test_query_vectors_with_nan_or_inf_are_refused_and_huge_finite_ones_are_not(random_data):
    x, q = random_data
    index = DenseIndex.build(x[:100], **FP)
    for bad in (np.nan, np.inf, -np.inf):
        for rows in (1, 3):
            v = q[:rows].copy()
            v[rows - 1, 5] = bad
            with pytest.raises(RalmError, match="^query vectors contain NaN or inf$"):
                index.search(v, 5)
    huge = q[:2] * np.float32(1e20)  # finite, though its squares overflow float32
    with pytest.warns(RuntimeWarning, match="overflow"):  # numpy's, from the quick check
        res = index.search(huge, 5)
    np.testing.assert_array_equal(res.ids, brute_force(x[:100], q[:2], 5)[0])
    with pytest.raises(RalmError, match="must be floating point, got int64"):
        index.search(np.ones((1, 32), dtype=np.int64), 5)
    np.testing.assert_array_equal(index.search(q[:2].astype(np.float64), 5).ids, index.search(q[:2], 5).ids)


def test_float16_memmap_is_added_in_batches(tmp_path, random_data):
    x, q = random_data
    path = tmp_path / "emb.f16"
    mm = np.memmap(path, dtype=np.float16, mode="w+", shape=x.shape)
    mm[:] = x
    mm.flush()
    ro = np.memmap(path, dtype=np.float16, mode="r", shape=x.shape)
    seen = []
    index = DenseIndex.build(ro, **FP, batch_size=300, progress=lambda done, total: seen.append(done))
    assert seen == [300, 600, 900, 1200, 1500, 1800, 2000]
    ids, _ = brute_force(x.astype(np.float16).astype(np.float32), q, 10)
    np.testing.assert_array_equal(index.search(q, 10).ids, ids)


# ----------------------------------------------------------------------------- approximate backends
@pytest.mark.parametrize("kind", list(APPROX))
def test_approximate_recall_and_exclusion(kind, clustered, approx_indexes):
    x, q = clustered
    index = approx_indexes[kind]
    exact = brute_force(x, q, 10)[0]
    res = index.search(q, 10)
    recall = np.mean(
        [len(set(a) & set(b)) / 10 for a, b in zip(res.ids.tolist(), exact.tolist(), strict=True)]
    )
    assert recall >= 0.9, f"{kind} recall@10 {recall:.3f}"
    # Exclude the exact top 5: exactly k valid, distinct, non-excluded ids come back.
    res = index.search(q, 10, exclude_ids=exact[:, :5])
    for row, e in zip(res.ids.tolist(), exact[:, :5].tolist(), strict=True):
        assert len(set(row)) == 10 and min(row) >= 0 and not set(row) & set(e)
    assert (np.diff(res.scores, axis=1) <= 0).all()


def test_ivf_with_one_probe_widens_until_k(clustered):
    x, q = clustered
    index = DenseIndex.build(x, kind="ivf-flat", nlist=64, nprobe=1, **FP)
    sizes = faiss.extract_index_ivf(index.index).invlists
    biggest = max(sizes.list_size(i) for i in range(64))
    k = biggest + 20  # more than any single list holds: one probe cannot fill it
    raw = index.index.search(q, k)[1]
    assert (raw == -1).any()
    top3 = brute_force(x, q, 3)[0]
    res = index.search(q, k, exclude_ids=top3)
    assert (res.ids >= 0).all() and all(len(set(r)) == k for r in res.ids.tolist())
    assert not any(set(r) & set(e) for r, e in zip(res.ids.tolist(), top3.tolist(), strict=True))


@pytest.mark.parametrize(
    "kind,params",
    [("hnsw", {"M": 4, "ef_search": 8}), ("ivf-flat", {"nlist": 7, "nprobe": 1}), ("sq8", {})],
)
def test_approximate_k_plus_excluded_equals_n(kind, params, monkeypatch):
    """Every non-excluded chunk comes back; a sparse HNSW graph needs the exact fallback for it."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 16)).astype(np.float32)
    index = DenseIndex.build(x, kind=kind, **params, **FP)
    fallbacks = []
    import ralm.retrieval.index.dense as index_module

    exact = index_module.exact_top_k
    monkeypatch.setattr(index_module, "exact_top_k", lambda *a: fallbacks.append(1) or exact(*a))
    excl = [list(range(i, i + 10)) for i in range(20)]
    res = index.search(x[:20], 290, exclude_ids=excl)
    for row, e in zip(res.ids.tolist(), excl, strict=True):
        assert sorted(row) == sorted(set(range(300)) - set(e))
    assert (np.diff(res.scores, axis=1) <= 0).all()
    assert bool(fallbacks) == (kind == "hnsw")


def test_sq8_memory_is_under_a_third_of_flat(clustered, approx_indexes):
    x, _ = clustered
    flat = DenseIndex.build(x, **FP)
    assert approx_indexes["sq8"].memory_bytes() < flat.memory_bytes() / 3
    assert DenseIndex.build(x, kind="sq6", **FP).memory_bytes() < flat.memory_bytes() / 5


# ----------------------------------------------------------------------------- save / load
@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(kind, tmp_path, clustered, approx_indexes):
    x, q = clustered
    index = approx_indexes[kind] if kind in approx_indexes else DenseIndex.build(x, kind=kind, **FP)
    before = index.search(q, 10, exclude_ids=list(range(40)))
    index.save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert manifest["kind"] == kind and manifest["count"] == 2000 and manifest["dim"] == 32
    assert manifest["docstore_fingerprint"] == FP["docstore_fingerprint"] and manifest["faiss_version"]
    loaded = DenseIndex.load(tmp_path / "idx", **FP)
    after = loaded.search(q, 10, exclude_ids=list(range(40)))
    np.testing.assert_array_equal(before.ids, after.ids)
    np.testing.assert_array_equal(before.scores, after.scores)
    assert loaded.params == index.params
    plain = faiss.read_index(str(tmp_path / "idx" / "index.faiss"))
    assert plain.ntotal == 2000 and plain.d == 32
    if kind == "flat":  # plain FAISS rows are chunk ids
        np.testing.assert_array_equal(plain.search(q, 10)[1], brute_force(x, q, 10)[0])
    assert not list((tmp_path / "idx").glob("*.tmp*"))


def test_mmap_load_of_ivf_pq(tmp_path, clustered, approx_indexes):
    x, q = clustered
    approx_indexes["ivf-pq"].save(tmp_path)
    loaded = DenseIndex.load(tmp_path, mmap=True)
    np.testing.assert_array_equal(loaded.search(q, 10).ids, approx_indexes["ivf-pq"].search(q, 10).ids)


def test_fingerprint_checks_and_missing_files(tmp_path, random_data):
    x, _ = random_data
    DenseIndex.build(x[:100], **FP).save(tmp_path / "idx")
    with pytest.raises(
        RalmError,
        match=r"another corpus \(docstore fingerprint dddddddddddd… vs 000000000000…\); rebuild it with `ralm index build`",
    ):
        DenseIndex.load(tmp_path / "idx", docstore_fingerprint="0" * 64)
    with pytest.raises(
        RalmError, match=r"another encoder \(encoder fingerprint eeeeeeeeeeee… vs 111111111111…\)"
    ):
        DenseIndex.load(tmp_path / "idx", encoder_fingerprint="1" * 64)
    DenseIndex.load(tmp_path / "idx", **FP)  # the right ones pass
    with pytest.raises(RalmError, match="nowhere/index.json: no such file"):
        DenseIndex.load(tmp_path / "nowhere")
    (tmp_path / "idx" / "index.faiss").unlink()
    with pytest.raises(RalmError, match="index.faiss: no such file"):
        DenseIndex.load(tmp_path / "idx")


def test_search_errors(random_data):
    x, q = random_data
    index = DenseIndex.build(x[:100], **FP)
    with pytest.raises(RalmError, match=r"k=101 is more than the N=100"):
        index.search(q, 101)
    with pytest.raises(RalmError, match=r"k=100 is more than the 99 chunks left for query 0"):
        index.search(q[:1], 100, exclude_ids=[7])
    with pytest.raises(RalmError, match="empty query batch"):
        index.search(np.zeros((0, 32), dtype=np.float32), 5)
    with pytest.raises(RalmError, match="dimension 16 but the index has 32"):
        index.search(q[:, :16], 5)
    with pytest.raises(RalmError, match="2-D"):
        index.search(q[0], 5)
    with pytest.raises(RalmError, match="k must be a positive integer"):
        index.search(q, 0)
    with pytest.raises(RalmError, match="2 entries for 25 queries"):
        index.search(q, 5, exclude_ids=[1, 2])
    with pytest.raises(RalmError, match=r"exclude_ids\[1\]"):
        index.search(q[:2], 5, exclude_ids=[1, "x"])


def test_build_errors(random_data):
    x, _ = random_data
    with pytest.raises(RalmError, match=r"needs at least 256 vectors to train, got 100"):
        DenseIndex.build(x[:100], kind="ivf-pq", nlist=2, m=8, **FP)
    with pytest.raises(RalmError, match=r"nlist=200 lists needs at least 200 vectors to train, got 100"):
        DenseIndex.build(x[:100], kind="ivf-flat", nlist=200, **FP)
    with pytest.raises(RalmError, match="unknown index kind 'annoy'"):
        DenseIndex.build(x, kind="annoy", **FP)
    with pytest.raises(RalmError, match="unknown parameter.*nprobe for a hnsw index"):
        DenseIndex.build(x, kind="hnsw", nprobe=3, **FP)
    with pytest.raises(RalmError, match="m=7 must divide"):
        DenseIndex.build(x, kind="ivf-pq", m=7, **FP)
    with pytest.raises(RalmError, match="empty array"):
        DenseIndex.build(np.zeros((0, 32), dtype=np.float32), **FP)
    bad = x[:10].copy()
    bad[4, 3] = np.nan
    with pytest.raises(RalmError, match="vector 4 contains NaN"):
        DenseIndex.build(bad, **FP)


# ----------------------------------------------------------------------------- helpers, estimate, GPU
def test_exclusion_helpers():
    assert prepare_exclude(None, 3, 10, 2) is None
    arr = prepare_exclude([None, 4, [1, 2, 2]], 3, 10, 2)
    assert arr.tolist() == [[-1, -1, -1], [4, -1, -1], [1, 2, 2]]
    assert prepare_exclude(np.array([1, 2, 3]), 3, 10, 2).tolist() == [[1], [2], [3]]
    # Out-of-range ids exclude nothing, so they do not count against k.
    prepare_exclude([[10, 11, 12]], 1, 10, 10)
    ids = np.array([[4, 1, -1, 7, 2]])
    scores = np.array([[0.9, 0.5, -np.inf, 0.5, 0.1]], dtype=np.float32)
    top_ids, top_scores, n_valid = filter_excluded(ids, scores, np.array([[4]]), 3)
    assert top_ids.tolist() == [[1, 7, 2]] and n_valid.tolist() == [3]
    top_ids, top_scores, n_valid = filter_excluded(ids, scores, np.array([[4, 2]]), 3)
    assert top_ids.tolist() == [[1, 7, -1]] and top_scores[0, 2] == -np.inf and n_valid.tolist() == [2]


def test_estimate():
    flat = estimate("flat", 1_000_000, 768)
    assert flat["bytes"] == 4 * 768 * 1_000_000 and flat["build_time"] == "seconds"
    sq8 = estimate("sq8", 1_000_000, 768)
    assert 3.9 < sq8["ratio_vs_flat"] <= 4
    assert 7.9 < estimate("sq4", 1_000_000, 768)["ratio_vs_flat"] <= 8
    pq = estimate("ivf-pq", 1_000_000, 768, m=96)
    assert pq["params"]["nlist"] == 4000 and pq["ratio_vs_flat"] > 20
    assert "GiB" in flat["memory"] and "ivf-pq index of 1,000,000 x 768" in pq["text"]


@pytest.mark.skipif(faiss.get_num_gpus() == 0, reason="FAISS sees no GPU")
def test_gpu_search_matches_cpu(tmp_path, random_data):
    x, q = random_data
    cpu = DenseIndex.build(x, **FP)
    gpu = DenseIndex.build(x, device="cuda", **FP)
    assert gpu.device == "cuda"
    np.testing.assert_array_equal(
        gpu.search(q, 10, exclude_ids=list(range(25))).ids, cpu.search(q, 10, exclude_ids=list(range(25))).ids
    )
    gpu.save(tmp_path)
    assert isinstance(faiss.read_index(str(tmp_path / "index.faiss")), faiss.IndexFlatIP)


def test_device_auto_without_gpu_stays_on_cpu(random_data):
    x, _ = random_data
    index = DenseIndex.build(x[:100], device="auto", **FP)
    assert index.device == ("cuda" if faiss.get_num_gpus() else "cpu")
    with pytest.raises(RalmError, match="device must be"):
        DenseIndex.build(x[:100], device="tpu", **FP)


def test_estimate_text_says_larger_or_smaller_than_flat():
    """'N.Nx larger' when the index is larger than flat, 'N.Nx smaller' only when it is smaller."""
    assert estimate("hnsw", 1_000_000, 384)["text"] == (
        "hnsw index of 1,000,000 x 384: about 1.7 GiB in memory (1.2x larger than flat), build time: minutes"
    )
    assert estimate("ivf-pq", 20, 384)["text"] == (  # the 256-centroid PQ codebooks dwarf 20 vectors
        "ivf-pq index of 20 x 384: about 389.4 KiB in memory (13.0x larger than flat), build time: seconds"
    )
    assert estimate("sq8", 1_000_000, 768)["text"] == (
        "sq8 index of 1,000,000 x 768: about 732.4 MiB in memory (4.0x smaller than flat), build time: seconds"
    )
    assert estimate("ivf-flat", 1_000_000, 768)["text"] == (  # 0.7% larger: no "1.0x" either way
        "ivf-flat index of 1,000,000 x 768: about 2.9 GiB in memory (about the size of flat), "
        "build time: minutes"
    )
    assert estimate("flat", 1000, 32)["text"] == (
        "flat index of 1,000 x 32: about 125.0 KiB in memory, build time: seconds"
    )


# ----------------------------------------------------------------------------- checksums
def _flip(path, n, start, seed=0):
    """Invert n bytes of a file at random offsets from `start` on (a damaged disk or copy)."""
    data = bytearray(path.read_bytes())
    pos = np.random.default_rng(seed).choice(np.arange(start, len(data)), size=n, replace=False)
    for p in pos:
        data[p] ^= 0xFF
    path.write_bytes(bytes(data))


def test_save_records_size_and_xxh3_of_index_faiss(tmp_path, random_data):
    from ralm.integrity import digest

    x, _ = random_data
    DenseIndex.build(x, **FP).save(tmp_path)
    manifest = json.loads((tmp_path / "index.json").read_text())
    path = tmp_path / "index.faiss"
    assert manifest["files"] == {"index.faiss": {"size": path.stat().st_size, "xxh3_128": digest(path)}}
    assert manifest["index_bytes"] == path.stat().st_size  # what older ralm versions check


def test_flipped_bytes_in_index_faiss_are_refused_on_load(tmp_path, random_data):
    """2,000 inverted bytes in the vectors: FAISS reads them happily, the checksum does not."""
    x, q = random_data
    DenseIndex.build(x, **FP).save(tmp_path)
    path = tmp_path / "index.faiss"
    _flip(path, 2000, start=200)
    assert faiss.read_index(str(path)).ntotal == 2000  # the bare library call sees nothing wrong
    with pytest.raises(RalmError) as err:
        DenseIndex.load(tmp_path, **FP)
    assert str(err.value) == (
        f"{path}: contents changed since it was saved (xxh3_128 checksum mismatch: a damaged disk or copy); "
        "rebuild it with `ralm index build`"
    )
    # a damaged header that FAISS cannot parse: FAISS's complaint, and that the file is damaged
    DenseIndex.build(x, **FP).save(tmp_path)
    data = bytearray(path.read_bytes())
    data[:4] = b"XXXX"
    path.write_bytes(bytes(data))
    with pytest.raises(RalmError) as err:
        DenseIndex.load(tmp_path, **FP)
    assert str(err.value).startswith(f"{path}: FAISS cannot read it (")
    assert str(err.value).endswith(
        "; its xxh3_128 checksum differs from the saved one: the file is damaged); "
        "rebuild it with `ralm index build`"
    )


def test_mmap_load_checks_the_size_and_verify_the_contents(tmp_path, clustered, approx_indexes):
    from ralm.retrieval.index.io import verify_index_files

    approx_indexes["ivf-pq"].save(tmp_path)
    assert verify_index_files(tmp_path) == []
    path = tmp_path / "index.faiss"
    _flip(path, 50, start=path.stat().st_size - 2000)  # in the last inverted list's codes
    assert DenseIndex.load(tmp_path, mmap=True).count == 2000  # mmap: not read, so not hashed
    assert verify_index_files(tmp_path) == [f"{path}: contents changed (checksum mismatch)"]
    with open(path, "ab") as f:
        f.write(b"\0")
    size = path.stat().st_size
    with pytest.raises(RalmError, match=r"index.faiss: \d+ bytes, index.json says \d+"):
        DenseIndex.load(tmp_path, mmap=True)
    assert verify_index_files(tmp_path) == [f"{path}: {size} bytes, expected {size - 1}"]


def test_index_saved_without_checksums_still_loads_with_its_size_checked(tmp_path, random_data):
    x, q = random_data
    index = DenseIndex.build(x[:100], **FP)
    index.save(tmp_path)
    m = json.loads((tmp_path / "index.json").read_text())
    del m["files"]  # as written before checksums: only index_bytes
    (tmp_path / "index.json").write_text(json.dumps(m))
    np.testing.assert_array_equal(DenseIndex.load(tmp_path, **FP).search(q, 5).ids, index.search(q, 5).ids)
    path = tmp_path / "index.faiss"
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(RalmError) as err:
        DenseIndex.load(tmp_path, **FP)
    assert str(err.value) == (
        f"{path}: {m['index_bytes'] - 8} bytes, index.json says {m['index_bytes']} (truncated, or an "
        "interrupted save); rebuild it with `ralm index build`"
    )
