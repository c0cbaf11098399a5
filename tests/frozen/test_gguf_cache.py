"""The de-quantised GGUF cache (ralm.models.gguf_cache): the same model as the GGUF load, bit for bit,
a rebuilt copy when the file changes, and nothing written when it is off or cannot be written."""

from __future__ import annotations

import json
import shutil

import torch
from gguf_ref import write_tiny_gguf

from ralm.models import gguf_cache
from ralm.models.causal import load_causal_lm


def _same(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_the_cached_copy_is_the_gguf_load_bit_for_bit(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("RALM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RALM_GGUF_CACHE", raising=False)
    assert gguf_cache.lookup(tiny_gguf) is None
    first, tok1, _ = load_causal_lm(tiny_gguf)  # de-quantised from the GGUF, then stored
    folder = gguf_cache.lookup(tiny_gguf)
    assert folder is not None and folder.parent == tmp_path / "cache" / "gguf"
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith((".json", ".safetensors")))[:3] == [
        "config.json",
        "model.safetensors",
        "source.json",
    ]
    second, tok2, _ = load_causal_lm(tiny_gguf)  # read from the folder
    assert _same(first, second)
    text = "The capital of Norway is Oslo"
    assert tok1(text)["input_ids"] == tok2(text)["input_ids"] and len(tok1) == len(tok2) == 400
    with torch.no_grad():
        x = torch.tensor([tok1(text)["input_ids"]])
        assert torch.equal(first.eval()(x).logits, second.eval()(x).logits)


def test_loading_leaves_the_global_generator_where_it_was(tiny_gguf, tmp_path, monkeypatch):
    """A run seeded before its model loads draws the same numbers after it, from the GGUF file (the
    first load) and from the cached copy (the second): the cache cannot change a training run."""
    monkeypatch.setenv("RALM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RALM_GGUF_CACHE", raising=False)
    torch.manual_seed(0)
    unmoved = torch.rand(3)
    for _ in ("from the GGUF", "from the cache"):
        torch.manual_seed(0)
        load_causal_lm(tiny_gguf)
        assert torch.equal(torch.rand(3), unmoved)
    assert gguf_cache.lookup(tiny_gguf) is not None


def test_a_replaced_gguf_is_never_answered_from_the_old_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("RALM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RALM_GGUF_CACHE", raising=False)
    path = write_tiny_gguf(tmp_path / "m.gguf", seed=0)
    old, _, _ = load_causal_lm(path)
    old_folder = gguf_cache.lookup(path)
    write_tiny_gguf(tmp_path / "other.gguf", seed=1)
    shutil.move(tmp_path / "other.gguf", path)  # the same name, other weights
    assert gguf_cache.lookup(path) is None
    new, _, _ = load_causal_lm(path)
    assert not _same(old, new)
    assert gguf_cache.lookup(path) not in (None, old_folder)
    # a record that does not match the file (edited, or from another file) is not used either
    rec = gguf_cache.lookup(path) / gguf_cache.SOURCE_FILE
    data = json.loads(rec.read_text())
    rec.write_text(json.dumps({**data, "size": data["size"] + 1}))
    assert gguf_cache.lookup(path) is None


def test_off_or_unwritable_cache_writes_nothing_and_loads_anyway(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("RALM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RALM_GGUF_CACHE", "off")
    load_causal_lm(tiny_gguf)
    assert not (tmp_path / "cache").exists()
    monkeypatch.delenv("RALM_GGUF_CACHE")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("RALM_CACHE", str(blocker))  # $RALM_CACHE/gguf cannot be made
    model, _, _ = load_causal_lm(tiny_gguf)
    assert model.config.hidden_size == 64 and gguf_cache.lookup(tiny_gguf) is None
    assert [p.name for p in tmp_path.iterdir()] == ["file"]
