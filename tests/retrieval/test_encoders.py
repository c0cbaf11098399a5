"""DualEncoder: pooling, projection, scoring, shared towers, doc inputs, save/load, errors."""

import json
import math
import os
import shutil

import numpy as np
import pytest
import torch

from ralm.errors import RalmError
from ralm.models.precision import autocast_dtype
from ralm.retrieval import encoders
from ralm.retrieval.encoders import ENCODER_FILE, DualEncoder, EncoderConfig
from ralm.retrieval.towers import InputTemplate

QUERIES = ["who was the king of norway", "albedo", "the 16th president of the united states of america"]
TITLES = ["Oslo", None, "Abraham Lincoln"]
TEXTS = ["Oslo is the capital of Norway.", "Albedo is reflectivity.", "He was born in 1809 in Kentucky."]


def _manual(enc, texts, pooling):
    """Pooled vectors computed by hand from the backbone's last_hidden_state."""
    batch = enc.tokenize_queries(texts)
    with torch.no_grad():
        h = enc.query_tower.model(**batch).last_hidden_state
    if pooling == "cls":
        return h[:, 0].numpy()
    m = batch["attention_mask"].unsqueeze(-1).float()
    return ((h * m).sum(1) / m.sum(1)).numpy()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_pooling_by_hand(tiny_dir, pooling):
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling=pooling))
    got = enc.encode_queries(QUERIES, batch_size=2)
    assert got.shape == (3, 64) and got.dtype == np.float32
    np.testing.assert_allclose(got, _manual(enc, QUERIES, pooling), atol=1e-5)
    assert not hasattr(enc.query_tower.model, "pooler") or enc.query_tower.model.pooler is None


def test_projection_and_scaled_score(tiny_dir):
    cfg = EncoderConfig(pooling="cls", proj_dim=16, scale_by_sqrt_dim=True)
    enc = DualEncoder.from_pretrained(tiny_dir, cfg)
    q = torch.from_numpy(enc.encode_queries(QUERIES))
    d = torch.from_numpy(enc.encode_docs(TITLES, TEXTS))
    assert q.shape == (3, 16) and d.shape == (3, 16) and enc.dim == 16
    # separate towers, projections start equal (same space at step 0)
    assert enc.query_tower is not enc.doc_tower
    assert torch.equal(enc.query_tower.proj.weight, enc.doc_tower.proj.weight)
    assert enc.query_tower.proj.bias is None
    w = enc.query_tower.proj.weight.detach().numpy()
    np.testing.assert_allclose(q.numpy(), _manual(enc, QUERIES, "cls") @ w.T, atol=1e-5)
    torch.testing.assert_close(enc.score(q, d), q @ d.T / math.sqrt(16))
    plain = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="cls", proj_dim=16))
    torch.testing.assert_close(plain.score(q, d), q @ d.T)


def test_shared_towers_are_one_module(tiny_dir):
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(shared=True, proj_dim=8))
    assert enc.query_tower is enc.doc_tower
    n_tower = sum(p.numel() for p in enc.query_tower.parameters())
    assert sum(p.numel() for p in enc.parameters()) == n_tower
    sep = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(proj_dim=8))
    assert sum(p.numel() for p in sep.parameters()) == 2 * n_tower
    with torch.no_grad():  # separate towers do not share storage
        sep.query_tower.model.embeddings.word_embeddings.weight.add_(1.0)
    assert not torch.equal(
        sep.query_tower.model.embeddings.word_embeddings.weight,
        sep.doc_tower.model.embeddings.word_embeddings.weight,
    )


def test_doc_inputs_match_the_tokenizer_pair_encoding(tiny_dir):
    enc = DualEncoder.from_pretrained(tiny_dir)
    tok = enc.doc_tower.tokenizer
    rows = enc.doc_rows(TITLES, TEXTS)
    for (ids, types), title, text in zip(rows, TITLES, TEXTS, strict=True):
        ref = tok(title, text) if title else tok(text)
        assert ids == ref["input_ids"] and types == ref["token_type_ids"]
    assert rows[0][0][0] == tok.cls_token_id and rows[0][0].count(tok.sep_token_id) == 2
    # docstring example: BERT, max_length 10 leaves room 7 next to a title: 3 + 4
    tpl = InputTemplate(tok)
    assert tpl.fit(3, 9, 10) == (3, 4)
    assert tpl.fit(9, 9, 10) == (3, 4)  # both long: the title keeps half the room (7 // 2)
    assert tpl.fit(0, 20, 10) == (0, 8)  # untitled: [CLS] text [SEP]
    ids, _ = tpl.build(np.arange(1000, 1009), np.arange(2000, 2020), 10)
    assert len(ids) == 10 and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    long = enc.tokenize_docs(["x " * 100], ["y " * 300])
    assert long["input_ids"].shape == (1, 128)


def test_save_load_round_trip(tiny_dir, tmp_path):
    from transformers import AutoModel

    cfg = EncoderConfig(pooling="cls", proj_dim=16, scale_by_sqrt_dim=True, max_length=64)
    enc = DualEncoder.from_pretrained(tiny_dir, cfg)
    with torch.no_grad():  # make the towers differ, as after training
        enc.doc_tower.proj.weight.mul_(2.0)
    q, d = enc.encode_queries(QUERIES), enc.encode_docs(TITLES, TEXTS)
    out = enc.save(tmp_path / "ret")
    meta = json.loads((out / ENCODER_FILE).read_text())
    assert meta["config"]["proj_dim"] == 16 and meta["fingerprint"] == enc.fingerprint()
    assert meta["doc_fingerprint"] == enc.fingerprint("doc") != enc.fingerprint("query")
    assert meta["doc"] == "doc" and not (out / "doc").is_symlink()  # trained towers: two copies
    for tower in ("query", "doc"):
        assert (out / tower / "model.safetensors").is_file() and (
            out / tower / "projection.safetensors"
        ).is_file()
        assert not list((out / tower).glob("*.bin"))
        assert AutoModel.from_pretrained(str(out / tower)).config.hidden_size == 64
    back = DualEncoder.from_pretrained(out)
    assert back.config == cfg and back.fingerprint() == enc.fingerprint()
    np.testing.assert_array_equal(back.encode_queries(QUERIES), q)
    np.testing.assert_array_equal(back.encode_docs(TITLES, TEXTS), d)
    enc.save(out)  # overwriting a saved encoder is allowed (and atomic)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ret"]
    with pytest.raises(RalmError, match="proj_dim"):
        DualEncoder.from_pretrained(out, EncoderConfig(pooling="cls", proj_dim=32))


def test_shared_round_trip(tiny_dir, tmp_path):
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(shared=True))
    with torch.no_grad():  # trained or not, a shared tower is stored once
        enc.query_tower.model.embeddings.word_embeddings.weight.add_(1.0)
    out = enc.save(tmp_path / "shared")
    assert os.readlink(out / "doc") == "query" and _files(out / "doc") == []
    assert json.loads((out / ENCODER_FILE).read_text())["doc"] == "query"
    back = DualEncoder.from_pretrained(out)
    assert back.query_tower is back.doc_tower and back.fingerprint() == enc.fingerprint()
    np.testing.assert_array_equal(back.encode_docs(None, TEXTS), enc.encode_docs(None, TEXTS))


def _files(d):
    """Real files under `d`, not following symlinks (a symlinked `d` itself has none)."""
    if os.path.islink(d):
        return []
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs)


def _nbytes(d):
    return sum(os.path.getsize(f) for f in _files(d) if not os.path.islink(f))


def _fingerprints(enc):
    return {part: enc.fingerprint(part) for part in ("all", "query", "doc")}


def _assert_separate_equal_towers(enc):
    assert enc.query_tower is not enc.doc_tower
    qs, ds = enc.query_tower.state_dict(), enc.doc_tower.state_dict()
    assert qs.keys() == ds.keys()
    for k in qs:
        assert torch.equal(qs[k], ds[k]) and qs[k].data_ptr() != ds[k].data_ptr(), k


def test_identical_towers_are_stored_once(tiny_dir, tmp_path):
    from transformers import AutoModel

    cfg = EncoderConfig(pooling="cls", proj_dim=16)
    enc = DualEncoder.from_pretrained(tiny_dir, cfg)  # fresh: both towers from the same weights
    fps = _fingerprints(enc)
    d = enc.encode_docs(TITLES, TEXTS)
    out = enc.save(tmp_path / "ret")
    meta = json.loads((out / ENCODER_FILE).read_text())
    assert os.path.islink(out / "doc") and os.readlink(out / "doc") == "query"  # relative link
    assert _files(out / "doc") == [] and meta["doc"] == "query"
    assert _nbytes(out) == _nbytes(out / "query") + (out / ENCODER_FILE).stat().st_size  # one copy
    assert meta["doc_fingerprint"] == fps["doc"] and meta["fingerprint"] == fps["all"]
    # tools that open ENC/doc themselves go through the link
    hf = AutoModel.from_pretrained(str(out / "doc"))
    assert torch.equal(
        hf.embeddings.word_embeddings.weight, enc.doc_tower.model.embeddings.word_embeddings.weight
    )

    back = DualEncoder.from_pretrained(out)
    _assert_separate_equal_towers(back)
    assert _fingerprints(back) == fps and back.config == cfg
    np.testing.assert_array_equal(back.encode_docs(TITLES, TEXTS), d)

    back.save(out)  # over the directory it was loaded from, which holds the doc link
    assert os.readlink(out / "doc") == "query" and _fingerprints(DualEncoder.from_pretrained(out)) == fps

    with torch.no_grad():  # training separates the towers: two copies again
        back.doc_tower.proj.weight.mul_(2.0)
    changed = back.doc_tower.proj.weight.clone()
    back.save(out)
    assert not os.path.islink(out / "doc") and (out / "doc" / "model.safetensors").is_file()
    assert json.loads((out / ENCODER_FILE).read_text())["doc"] == "doc"
    assert _nbytes(out / "doc") == pytest.approx(_nbytes(out / "query"), rel=0.01)  # tokenizer.json
    again = DualEncoder.from_pretrained(out)
    assert torch.equal(again.doc_tower.proj.weight, changed)
    assert again.fingerprint("query") == fps["query"] and again.fingerprint("doc") == back.fingerprint("doc")
    assert again.fingerprint("doc") != fps["doc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ret"]  # no temp or old dirs left


def test_copying_and_removing_a_linked_encoder(tiny_dir, tmp_path):
    enc = DualEncoder.from_pretrained(tiny_dir)
    fps = _fingerprints(enc)
    out = enc.save(tmp_path / "ret")
    deep = shutil.copytree(out, tmp_path / "deep")  # follows the link: doc becomes a real copy
    assert not os.path.islink(deep / "doc") and (deep / "doc" / "model.safetensors").is_file()
    linked = shutil.copytree(out, tmp_path / "linked", symlinks=True)  # keeps the relative link
    assert os.readlink(linked / "doc") == "query"
    for d in (deep, linked):
        assert _fingerprints(DualEncoder.from_pretrained(d)) == fps
    shutil.rmtree(linked)  # removes the link, not what it points to
    assert (out / "query" / "model.safetensors").is_file()
    assert _fingerprints(DualEncoder.from_pretrained(out)) == fps


def test_legacy_layout_and_no_symlink_fallback(tiny_dir, tmp_path, monkeypatch):
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(proj_dim=8))
    fps = _fingerprints(enc)
    # older versions: doc/ a full copy, no "doc" field
    legacy = enc.save(tmp_path / "legacy")
    (legacy / "doc").unlink()
    shutil.copytree(legacy / "query", legacy / "doc")
    meta = json.loads((legacy / ENCODER_FILE).read_text())
    del meta["doc"]
    (legacy / ENCODER_FILE).write_text(json.dumps(meta))
    back = DualEncoder.from_pretrained(legacy)
    _assert_separate_equal_towers(back)
    assert _fingerprints(back) == fps
    # ... where a missing doc/ stays an error (not silently the query tower)
    shutil.rmtree(legacy / "doc")
    with pytest.raises(RalmError, match="no such model directory"):
        DualEncoder.from_pretrained(legacy)
    # a link removed after saving: the json field points the loader at query/
    gone = enc.save(tmp_path / "gone")
    (gone / "doc").unlink()
    back = DualEncoder.from_pretrained(gone)
    _assert_separate_equal_towers(back)
    assert _fingerprints(back) == fps

    def no_symlinks(*args, **kwargs):
        raise OSError("symlinks not supported")

    monkeypatch.setattr(encoders.os, "symlink", no_symlinks)
    flat = enc.save(tmp_path / "flat")
    assert sorted(p.name for p in flat.iterdir()) == ["query", ENCODER_FILE]
    assert json.loads((flat / ENCODER_FILE).read_text())["doc"] == "query"
    back = DualEncoder.from_pretrained(flat)
    _assert_separate_equal_towers(back)
    assert _fingerprints(back) == fps
    meta = json.loads((flat / ENCODER_FILE).read_text())
    (flat / ENCODER_FILE).write_text(json.dumps({**meta, "doc": "elsewhere"}))
    with pytest.raises(RalmError, match="'elsewhere', expected 'query' or 'doc'"):
        DualEncoder.from_pretrained(flat)


@pytest.mark.parametrize(
    "cfg",
    [EncoderConfig(pooling="mean"), EncoderConfig(pooling="cls", proj_dim=16, normalize=True)],
    ids=["mean", "cls-dense-normalize"],
)
def test_sentence_transformers_loads_a_saved_tower(tiny_dir, tmp_path, cfg):
    from sentence_transformers import SentenceTransformer

    enc = DualEncoder.from_pretrained(tiny_dir, cfg)
    out = enc.save(tmp_path / "st")
    st = SentenceTransformer(str(out / "query"), device="cpu")
    np.testing.assert_allclose(st.encode(QUERIES), enc.encode_queries(QUERIES), atol=1e-5)
    assert os.path.islink(out / "doc")  # fresh towers: doc -> query, which loads the same
    st = SentenceTransformer(str(out / "doc"), device="cpu")
    np.testing.assert_allclose(st.encode(TEXTS), enc.encode_docs(None, TEXTS), atol=1e-5)


def test_not_a_model_directory(tmp_path, tiny_dir):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hi")
    with pytest.raises(RalmError, match=r"junk: not a Hugging Face model directory"):
        DualEncoder.from_pretrained(tmp_path / "junk")
    with pytest.raises(RalmError, match="no such model directory"):
        DualEncoder.from_pretrained(tmp_path / "missing")
    only_vocab = tmp_path / "vocab_only"
    only_vocab.mkdir()
    shutil.copy(tiny_dir / "vocab.txt", only_vocab / "vocab.txt")
    with pytest.raises(RalmError, match=r"vocab_only: not a Hugging Face model directory \(no config.json\)"):
        DualEncoder.from_pretrained(only_vocab)
    no_tok = tmp_path / "no_tok"
    no_tok.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(tiny_dir / f, no_tok / f)
    with pytest.raises(RalmError, match="no_tok: could not load a tokenizer"):
        DualEncoder.from_pretrained(no_tok)
    with pytest.raises(RalmError, match="exists and is not a saved encoder"):
        DualEncoder.from_pretrained(tiny_dir).save(tmp_path / "junk")
    with pytest.raises(RalmError, match="pooling"):
        EncoderConfig(pooling="max")


def test_autocast_choice():
    cpu = torch.device("cpu")
    assert autocast_dtype(cpu, "off", torch.float32) is None
    assert autocast_dtype(cpu, None, torch.float32) is None
    assert autocast_dtype(cpu, "bf16", torch.float32) == torch.bfloat16
    assert autocast_dtype(cpu, "bf16", torch.bfloat16) is None  # already half precision
    assert autocast_dtype(cpu, "auto", torch.float32) in (None, torch.bfloat16)
    with pytest.raises(RalmError, match="autocast"):
        autocast_dtype(cpu, "fp8", torch.float32)


def test_auto_takes_bf16_only_where_it_is_faster(monkeypatch):
    """A CPU with the bf16 flag but slower bf16 products (a Xeon here: 0.5x) stays in float32."""
    import ralm.models.precision as E

    monkeypatch.delenv("RALM_CPU_BF16", raising=False)  # the suite pins "auto" to float32
    cpu = torch.device("cpu")
    assert E._matmul_speedup(torch.bfloat16, n=64, reps=1) > 0.0
    monkeypatch.setattr(E, "_BF16_FASTER", {})
    monkeypatch.setattr(E, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(E, "_matmul_speedup", lambda dtype, *shape: 0.5)
    assert autocast_dtype(cpu, "auto", torch.float32) is None
    monkeypatch.setattr(E, "_BF16_FASTER", {})
    monkeypatch.setattr(E, "_matmul_speedup", lambda dtype, *shape: 3.9)
    assert autocast_dtype(cpu, "auto", torch.float32) == torch.bfloat16
    monkeypatch.setattr(E, "_BF16_FASTER", {})
    monkeypatch.setattr(E, "cpu_has_native_bf16", lambda: False)
    assert autocast_dtype(cpu, "auto", torch.float32) is None  # no flag: not even timed
    # RALM_CPU_BF16 decides without timing: off never, on wherever the flag is
    monkeypatch.setattr(E, "_matmul_speedup", lambda dtype, *shape: 3.9)
    monkeypatch.setattr(E, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setenv("RALM_CPU_BF16", "off")
    assert autocast_dtype(cpu, "auto", torch.float32) is None
    monkeypatch.setenv("RALM_CPU_BF16", "on")
    monkeypatch.setattr(E, "_matmul_speedup", lambda dtype, *shape: 0.5)
    assert autocast_dtype(cpu, "auto", torch.float32) == torch.bfloat16


def _bf16_timed(monkeypatch, speedup_at) -> list[int]:
    """A CPU with bf16 instructions on which a product of `rows` rows runs `speedup_at(rows)` times
    faster in bf16 than in float32 (nothing timed before); returns the row counts timed, in order."""
    import ralm.models.precision as E

    monkeypatch.delenv("RALM_CPU_BF16", raising=False)
    monkeypatch.setattr(E, "_BF16_FASTER", {})
    monkeypatch.setattr(E, "cpu_has_native_bf16", lambda: True)
    timed: list[int] = []

    def speedup(dtype, rows, n, m, reps):
        timed.append(rows)
        return speedup_at(rows)

    monkeypatch.setattr(E, "_matmul_speedup", speedup)
    return timed


def test_auto_decides_decoding_apart_from_full_products(monkeypatch):
    """Full products faster in bf16 but one-row products slower (issue 66's EPYC: generation 1.85x
    slower under bf16): "auto" takes bf16 for matmul work and float32 for decoding, each timed on
    its own shape, once."""
    timed = _bf16_timed(monkeypatch, lambda rows: 3.9 if rows > 1 else 0.54)
    cpu = torch.device("cpu")
    assert autocast_dtype(cpu, "auto", torch.float32) == torch.bfloat16
    assert autocast_dtype(cpu, "auto", torch.float32, work="decode") is None
    assert autocast_dtype(cpu, "auto", torch.float32, work="decode") is None
    assert timed == [512, 1]
    assert autocast_dtype(cpu, "bf16", torch.float32, work="decode") == torch.bfloat16  # asked for
    with pytest.raises(RalmError, match="work 'prefill'"):
        autocast_dtype(cpu, "auto", torch.float32, work="prefill")


def test_auto_decides_a_decoding_batch_apart_from_one_row(monkeypatch):
    """The AMX Xeon's shape of things: bf16 4.5x faster at 32 rows, 0.3x at one row. A batch of
    prompts decodes in bf16 and one prompt in float32; FrozenLM picks by rows (BATCH_ROWS)."""
    from ralm.frozen.lm import FrozenLM
    from ralm.models.precision import BATCH_ROWS

    timed = _bf16_timed(monkeypatch, {512: 75.0, 32: 4.5, 1: 0.3}.__getitem__)
    cpu = torch.device("cpu")
    assert autocast_dtype(cpu, "auto", torch.float32, work="batch") == torch.bfloat16
    assert autocast_dtype(cpu, "auto", torch.float32, work="decode") is None
    assert timed == [32, 1]
    lm = FrozenLM.later(
        lambda: None, type("Config", (), {"max_position_embeddings": 64})(), None, device="cpu"
    )
    assert lm.decoding_autocast(BATCH_ROWS) == torch.bfloat16
    assert lm.decoding_autocast(BATCH_ROWS - 1) is None and lm.decoding_autocast(1) is None
    assert timed == [32, 1]  # each kind timed once a process


def test_bundled_minilm_matches_sentence_transformers(minilm_dir):
    """The real backbone: mean pooling + L2 norm reproduces all-MiniLM-L6-v2's own embeddings."""
    from sentence_transformers import SentenceTransformer

    enc = DualEncoder.from_pretrained(None, EncoderConfig(pooling="mean", normalize=True))
    assert enc.dim == 384
    ref = SentenceTransformer(str(minilm_dir), device="cpu").encode(QUERIES)
    np.testing.assert_allclose(enc.encode_queries(QUERIES), ref, atol=1e-5)


def test_the_bf16_speed_probe_leaves_the_global_rng_alone():
    """autocast="auto" times a bf16 matmul once per process; a seeded run must draw the same dropout
    masks whether or not that probe ran first (it made the first `retriever train` of a process differ)."""
    import torch

    from ralm.models import precision

    precision._BF16_FASTER = {}
    torch.manual_seed(5)
    want = torch.rand(4)
    torch.manual_seed(5)
    precision._matmul_speedup(torch.bfloat16, n=16, reps=1)
    assert torch.equal(torch.rand(4), want)
