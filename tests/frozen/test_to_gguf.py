"""`ralm convert-gguf` (ralm.frozen.to_gguf): a trained model's GGUF, checked against transformers'
own GGUF loader (which undoes llama.cpp's layout), its fingerprint, and its one-line refusals."""

from __future__ import annotations

import shutil

import pytest
import torch

from ralm.errors import RalmError
from ralm.frozen.to_gguf import GGUF_NAME, convert, converted
from ralm.models import gguf_cache
from ralm.models.causal import load_causal_lm


@pytest.fixture
def trained_dir(tiny_gguf, tmp_path, monkeypatch):
    """A Hugging Face folder of the tiny GGUF model with every weight moved (as training would)."""
    from safetensors.torch import save_model

    monkeypatch.setenv("RALM_CACHE", str(tmp_path / "cache"))
    model, tok, _ = load_causal_lm(tiny_gguf)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    d = tmp_path / "trained"
    shutil.copytree(gguf_cache.lookup(tiny_gguf), d)
    (d / gguf_cache.SOURCE_FILE).unlink()
    save_model(model, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d, model


def test_f32_conversion_loads_back_as_the_same_weights(trained_dir, tiny_gguf, monkeypatch):
    """transformers' GGUF loader reads our file back into exactly the trained weights: the head
    interleaving of q/k and the tensor names are right, nothing is lost."""
    d, model = trained_dir
    out = convert(d, base=str(tiny_gguf), qtype="f32")
    assert out == d / GGUF_NAME and converted(d) == out
    monkeypatch.setenv("RALM_GGUF_CACHE", "off")
    back, tok, _ = load_causal_lm(out)
    want, got = model.state_dict(), back.state_dict()
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(want[k], got[k]), k
    assert len(tok) == 400


def test_q8_conversion_is_within_a_block_step_and_f16_within_half_precision(
    trained_dir, tiny_gguf, monkeypatch
):
    d, model = trained_dir
    monkeypatch.setenv("RALM_GGUF_CACHE", "off")
    want = model.state_dict()
    for qtype, tol in (("q8_0", 1 / 127), ("f16", 1e-3)):
        convert(d, base=str(tiny_gguf), qtype=qtype)
        got = load_causal_lm(d / GGUF_NAME)[0].state_dict()
        for k, w in want.items():
            err = float((got[k] - w).abs().max())
            # q8_0: 32-value blocks scaled by their max |w| / 127, rounded: half a step at most
            assert err <= tol * float(w.abs().max()) + 1e-7, (qtype, k, err)


def test_a_retrained_model_is_not_answered_with_its_old_gguf(trained_dir, tiny_gguf):
    from safetensors.torch import save_model

    d, model = trained_dir
    convert(d, base=str(tiny_gguf), qtype="f32")
    assert converted(d) is not None
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)
    save_model(model, str(d / "model.safetensors"), metadata={"format": "pt"})
    assert converted(d) is None
    assert (d / GGUF_NAME).is_file()  # still there, never used: the next convert replaces it


def test_refusals_are_one_line(trained_dir, tiny_gguf, tmp_path):
    d, _ = trained_dir
    with pytest.raises(RalmError, match=r"no config.json"):
        convert(tmp_path, base=str(tiny_gguf))
    with pytest.raises(RalmError, match=r"block_count is 2, its base GGUF's 30"):
        convert(d, base="smollm2")
    with pytest.raises(RalmError, match=r"--type q4: choose one of q8_0, f16, f32"):
        convert(d, base=str(tiny_gguf), qtype="q4")
    assert not (d / GGUF_NAME).exists() and not list(d.glob(".ralm-model*"))


def test_cli_writes_the_file(trained_dir, tiny_gguf, capsys):
    from ralm.cli import main

    d, _ = trained_dir
    assert main(["convert-gguf", str(d), "--base", str(tiny_gguf), "--type", "f16"]) == 0
    assert f"gguf: {d / GGUF_NAME}" in capsys.readouterr().out
    assert converted(d) == d / GGUF_NAME
    assert main(["convert-gguf", str(d / "nowhere")]) == 2
    assert "no config.json" in capsys.readouterr().err
