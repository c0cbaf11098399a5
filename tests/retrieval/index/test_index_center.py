"""Centred dense indexes: vectors and queries centred on the corpus mean, against a numpy reference."""

from __future__ import annotations

import numpy as np

from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.kinds import centre, mean_vector

FP = dict(docstore_fingerprint="store", encoder_fingerprint="enc")


def test_centre_by_hand():
    got = centre(np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]), np.array([0.5, 0.5]))
    s = 2**-0.5
    np.testing.assert_allclose(got, [[s, -s], [-s, s], [0.0, 0.0]], atol=1e-7)  # a row equal to mu stays zero
    v = np.random.default_rng(0).normal(size=(1000, 8)).astype(np.float16)
    assert np.allclose(mean_vector(v, batch_size=7), v.astype(np.float64).mean(0), atol=1e-6)


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_centred_search_equals_the_numpy_reference_and_survives_save(tmp_path):
    rng = np.random.default_rng(1)
    docs = _unit(rng.normal(size=(300, 16)) + 2.0).astype(np.float32)  # all near one direction
    queries = _unit(rng.normal(size=(20, 16)) + 2.0).astype(np.float32)
    idx = DenseIndex.build(docs, center=True, **FP)
    mu = docs.astype(np.float64).mean(0)
    ref = _unit(queries - mu) @ _unit(docs - mu).T
    want = np.argsort(-ref, axis=1, kind="stable")[:, :5]
    res = idx.search(queries, 5)
    assert res.ids.tolist() == want.tolist()
    assert np.allclose(res.scores, np.take_along_axis(ref, want, 1), atol=1e-5)
    idx.save(tmp_path / "dense")
    back = DenseIndex.load(tmp_path / "dense", **FP)
    assert back.center is not None and back.search(queries, 5).ids.tolist() == want.tolist()
    excl = back.search(queries, 5, exclude_ids=want[:, 0].tolist())  # the exact path under exclusion
    assert excl.ids.tolist() == np.argsort(-ref, axis=1, kind="stable")[:, 1:6].tolist()
    plain = DenseIndex.build(docs, **FP)
    assert plain.center is None and "center" not in plain.manifest


def test_centring_takes_the_pull_away_from_a_hub():
    """A doc at the corpus mean is nearly every query's nearest neighbour by cosine; centred, it is
    first only as often as any other doc (seeded: 46 of 50 queries -> 1 of 50)."""
    rng = np.random.default_rng(2)
    base = np.zeros(128)
    base[0] = 8.0
    docs = _unit(base + rng.normal(size=(200, 128))).astype(np.float32)
    docs[7] = _unit(docs.astype(np.float64).mean(0, keepdims=True))[0]  # the hub
    queries = _unit(base + rng.normal(size=(50, 128))).astype(np.float32)
    plain = DenseIndex.build(docs, **FP).search(queries, 1).ids[:, 0]
    centred = DenseIndex.build(docs, center=True, **FP).search(queries, 1).ids[:, 0]
    assert (plain == 7).sum() == 46 and (centred == 7).sum() == 1
