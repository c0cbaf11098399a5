"""embed_docstore: equals encode_docs, bf16, resume after interruption, shards merge, checks."""

import json

import numpy as np
import pytest

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.errors import RalmError
from ralm.retrieval.embed import embed_docstore, plan_batches
from ralm.retrieval.embed_files import load_embeddings, merge_shards, shard_path
from ralm.retrieval.encoders import DualEncoder, EncoderConfig
from testkit import random_sentences


def _docs(n=24):
    rng = np.random.default_rng(0)
    docs = []
    for i in range(n):
        title = "" if i == 5 else f"Doc {i} " + "long title " * (i % 3)
        docs.append({"id": f"d{i}", "title": title, "text": random_sentences(rng, (3, 12), (1, 7))})
    return docs


@pytest.fixture(scope="module")
def store(tmp_path_factory, tiny_dir):
    d = tmp_path_factory.mktemp("ds")
    src = d / "docs.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in _docs()) + "\n", encoding="utf-8")
    cfg = BuildConfig(chunk_size=32, tokenizer=str(tiny_dir))
    return build_docstore([src], d / "store", cfg, progress=False, log=lambda m: None)


@pytest.fixture(scope="module")
def encoder(tiny_dir):
    return DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="cls", proj_dim=16, max_length=40))


@pytest.fixture(scope="module")
def reference(encoder, store):
    """encode_docs on the chunks' own titles and texts (fp32, no autocast)."""
    rows = [store.get(i) for i in range(len(store))]
    return encoder.encode_docs([r["title"] for r in rows], [r["text"] for r in rows], batch_size=7)


def _embed(encoder, store, path, **kw):
    kw = {"batch_size": 8, "dtype": "float32", "autocast": "off", "progress": False, **kw}
    return embed_docstore(encoder, store, path, **kw)


def test_store_is_retokenizable(store, encoder):
    """Precondition of the comparison below: encode_docs re-tokenizes to the stored ids."""
    tok = encoder.doc_tower.tokenizer
    assert len(store) > 30
    for i in range(len(store)):
        assert tok(store.get(i)["text"], add_special_tokens=False)["input_ids"] == store.input_ids(i).tolist()


def test_embed_equals_encode_docs(encoder, store, reference, tmp_path):
    emb = _embed(encoder, store, tmp_path / "emb.npy")
    assert emb.shape == (len(store), 16) and emb.dtype == np.float32
    np.testing.assert_allclose(emb, reference, atol=1e-5)
    meta = json.loads((tmp_path / "emb.meta.json").read_text())
    assert meta["complete"] and meta["store_fingerprint"] == store.fingerprint
    assert meta["encoder_fingerprint"] == encoder.fingerprint("doc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.meta.json", "emb.npy"]
    assert np.load(tmp_path / "emb.npy").shape == emb.shape  # a plain .npy
    np.testing.assert_array_equal(load_embeddings(tmp_path / "emb.npy", store, encoder), emb)
    calls = []
    again = _embed(encoder, store, tmp_path / "emb.npy", on_batch=calls.append)
    assert calls == [] and np.array_equal(again, emb)  # a finished file is reused


def test_bf16_and_float16(encoder, store, reference, tmp_path):
    emb = _embed(encoder, store, tmp_path / "bf.npy", autocast="bf16", dtype="float16")
    assert emb.dtype == np.float16
    e = emb.astype(np.float32)
    cos = (e * reference).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(reference, axis=1)
    assert cos.min() > 0.999


def test_resume_after_interruption(encoder, store, tmp_path):
    full = np.array(_embed(encoder, store, tmp_path / "full.npy"))
    n_batches = len(plan_batches(np.zeros(len(store)), 8))

    first = []

    def stop_after(rows):
        if rows == 8:  # the done mask is flushed before on_batch runs
            first.append(np.load(tmp_path / "emb.done.npy"))
        if rows >= 16:  # two batches of 8
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _embed(encoder, store, tmp_path / "emb.npy", on_batch=stop_after, flush_every=1)
    assert not (tmp_path / "emb.npy").exists()
    done = np.load(tmp_path / "emb.done.npy")
    assert done.sum() == 16 and first[0].sum() == 8
    # a hard kill can lose the last flush: forget the second batch and scribble over its rows
    lost = done & ~first[0]
    part = np.load(tmp_path / "emb.partial.npy", mmap_mode="r+")
    part[lost] = 123.0
    part.flush()
    del part
    np.save(tmp_path / "emb.done.npy", first[0])
    calls = []
    resumed = _embed(encoder, store, tmp_path / "emb.npy", on_batch=calls.append)
    assert len(calls) == n_batches - 1  # only the first batch was kept
    assert (tmp_path / "emb.npy").read_bytes() == (tmp_path / "full.npy").read_bytes()
    assert np.array_equal(resumed, full)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "emb.meta.json",
        "emb.npy",
        "full.meta.json",
        "full.npy",
    ]


def test_stale_progress_starts_over(encoder, store, tiny_dir, tmp_path):
    with pytest.raises(RuntimeError):
        _embed(encoder, store, tmp_path / "emb.npy", on_batch=lambda r: (_ for _ in ()).throw(RuntimeError))
    other = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="mean", proj_dim=16, max_length=40))
    calls = []
    emb = _embed(other, store, tmp_path / "emb.npy", on_batch=calls.append)
    assert sum(1 for _ in calls) == len(plan_batches(np.zeros(len(store)), 8))  # nothing reused
    with pytest.raises(RalmError, match="another doc encoder"):
        load_embeddings(tmp_path / "emb.npy", store, encoder)
    assert emb.shape == (len(store), 16)


def test_two_shards_merge_to_the_single_result(encoder, store, tmp_path):
    single = np.array(_embed(encoder, store, tmp_path / "one.npy"))
    for r in range(2):
        shard = _embed(encoder, store, tmp_path / "emb.npy", rank=r, world_size=2)
        assert shard.shape == (len(range(r, len(store), 2)), 16)
        assert shard_path(tmp_path / "emb.npy", r, 2).is_file()
    with pytest.raises(RalmError, match="rank 0 of 3"):
        merge_shards(tmp_path / "emb.npy", 3)
    merged = merge_shards(tmp_path / "emb.npy", 2)
    np.testing.assert_allclose(merged, single, atol=1e-6)
    assert not shard_path(tmp_path / "emb.npy", 0, 2).exists()
    meta = json.loads((tmp_path / "emb.meta.json").read_text())
    assert meta["shape"] == [len(store), 16] and meta["files"]["emb.npy"]["size"] > 0
    calls = []  # a rerun of a rank finds the merged file and does nothing
    _embed(encoder, store, tmp_path / "emb.npy", rank=1, world_size=2, on_batch=calls.append)
    assert calls == []


def test_rank_from_environment(encoder, store, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    shard = _embed(encoder, store, tmp_path / "emb.npy")
    assert shard.shape == (len(range(1, len(store), 3)), 16)
    assert (tmp_path / "emb.rank1-of-3.npy").is_file()


def test_tokenizer_mismatch_and_bad_arguments(encoder, tiny_dir, tmp_path, bpe_tokenizer):
    tok_dir = tmp_path / "bpe"
    bpe_tokenizer.save_pretrained(tok_dir)
    src = tmp_path / "docs.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in _docs(6)) + "\n", encoding="utf-8")
    other = build_docstore(
        [src],
        tmp_path / "bpe_store",
        BuildConfig(chunk_size=32, tokenizer=str(tok_dir)),
        progress=False,
        log=lambda m: None,
    )
    # a DocStore built with another tokenizer: its chunk texts are tokenized again by the tower's
    # tokenizer, so the vectors are those of the texts encoded directly
    vecs = np.asarray(_embed(encoder, other, tmp_path / "emb.npy"))
    rows = [other.get(i) for i in range(len(other))]
    want = encoder.encode_docs([r["title"] or "" for r in rows], [r["text"] for r in rows])
    np.testing.assert_allclose(vecs, want, atol=1e-4)
    assert json.loads((tmp_path / "emb.meta.json").read_text())["retokenized"] is True
    with pytest.raises(RalmError, match="must end in .npy"):
        _embed(encoder, other, tmp_path / "emb.bin")
    with pytest.raises(RalmError, match="dtype"):
        _embed(encoder, other, tmp_path / "emb.npy", dtype="int8")
    with pytest.raises(RalmError, match="rank 2 of world_size 2"):
        _embed(encoder, other, tmp_path / "emb.npy", rank=2, world_size=2)


def test_plan_batches_docstring_example():
    assert [b.tolist() for b in plan_batches(np.array([3, 9, 5]), 2)] == [[1, 2], [0]]
    assert shard_path("x/emb.npy", 1, 4).as_posix() == "x/emb.rank1-of-4.npy"


def test_checksum_recorded_and_damage_refused(encoder, store, tmp_path):
    """The finished file's size and XXH3-128 are in its metadata; a damaged file is never reused."""
    from ralm.integrity import digest

    path = tmp_path / "emb.npy"
    emb = _embed(encoder, store, path)
    meta = json.loads((tmp_path / "emb.meta.json").read_text())
    assert meta["files"] == {"emb.npy": {"size": path.stat().st_size, "xxh3_128": digest(path)}}
    del emb
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # one flipped byte in the last vector
    path.write_bytes(bytes(data))
    msg = (
        f"{path}: contents changed since it was written (xxh3_128 checksum mismatch: a damaged disk or "
        "copy); delete it and emb.meta.json to embed again"
    )
    with pytest.raises(RalmError) as err:
        load_embeddings(path, store, encoder)
    assert str(err.value) == msg
    with pytest.raises(RalmError) as err:  # a finished file is reused only when intact
        _embed(encoder, store, path)
    assert str(err.value) == msg
    path.write_bytes(bytes(data[:-4]))
    with pytest.raises(RalmError) as err:
        load_embeddings(path)
    assert str(err.value) == (
        f"{path}: {len(data) - 4} bytes, emb.meta.json says {len(data)} (truncated?); "
        "delete it and emb.meta.json to embed again"
    )
    meta.pop("files")  # written before checksums: loads unchecked
    (tmp_path / "emb.meta.json").write_text(json.dumps(meta))
    path.write_bytes(bytes(data))
    assert load_embeddings(path).shape == (len(store), 16)
