"""Inference backends (ralm.frozen.backends): the same greedy tokens as the torch path where the
arithmetic is the same, a measured closeness where it is not, and one-line refusals and notes."""

from __future__ import annotations

import pytest
import torch

from ralm.errors import RalmError
from ralm.frozen import backends
from ralm.frozen.lm import load_frozen_lm, model_gguf
from ralm.rag.generate import greedy

PROMPTS = ["The capital of Norway is", "In 1814 the constitution of", "A fjord is a long"]


def _prompts(lm) -> list[list[int]]:
    return lm.encode(PROMPTS)


def test_torch_int8_decodes_on_a_quantised_copy_close_to_float32(tiny_gguf):
    lm = load_frozen_lm(tiny_gguf, device="cpu", autocast="off", backend="torch-int8")
    assert lm.backend == "torch-int8" and isinstance(lm.decoder, backends.TorchInt8Decoder)
    q = lm.decoder.torch_lm.model
    kinds = {type(m).__name__ for m in q.modules()}
    assert "Linear" in kinds  # torch.ao's dynamic quantised Linear
    assert any(m.__module__.startswith("torch.ao.nn.quantized") for m in q.modules())
    assert all(
        type(m).__module__.startswith("torch.nn") for m in lm.model.modules() if type(m).__name__ == "Linear"
    )
    x = torch.tensor([_prompts(lm)[0]])
    with torch.no_grad():
        ref, got = lm.model(x).logits, q(x).logits
    # int8 weights (per tensor) and activations (per batch): close, not equal, even on random weights
    cos = torch.nn.functional.cosine_similarity(got[0], ref[0], dim=-1)
    assert float(cos.min()) > 0.97, cos
    assert not torch.equal(got, ref)
    out = greedy(lm, _prompts(lm), max_new_tokens=6, stop_ids=[])
    assert [len(o) for o in out] == [6, 6, 6]
    lm.decoder = None  # the float32 path of the same FrozenLM
    assert lm.backend == "torch"


def test_unknown_backend_and_missing_llama_cpp_are_one_line(tiny_gguf, llama_dir, monkeypatch):
    with pytest.raises(RalmError, match=r"--backend onnx: choose one of auto, torch, torch-int8, llama.cpp"):
        load_frozen_lm(tiny_gguf, device="cpu", backend="onnx")
    monkeypatch.setattr(backends, "llama_cpp_installed", lambda: False)
    monkeypatch.setitem(__import__("sys").modules, "llama_cpp", None)  # import fails as if not installed
    with pytest.raises(
        RalmError, match=r"^backend llama.cpp: llama-cpp-python is not installed; `make setup-fast`"
    ):
        load_frozen_lm(tiny_gguf, device="cpu", backend="llama.cpp")
    notes: list[str] = []
    lm = load_frozen_lm(tiny_gguf, device="cpu", backend="auto", note=notes.append)
    assert lm.backend == "torch" and notes == []  # said when decoding runs, not before
    greedy(lm, _prompts(lm)[:1], max_new_tokens=1)
    greedy(lm, _prompts(lm)[:1], max_new_tokens=1)
    assert len(notes) == 1  # once
    assert notes[0].startswith("backend auto: torch (llama-cpp-python is not installed")


def test_a_model_without_gguf_is_refused_by_llama_cpp_and_auto_says_why(llama_dir, monkeypatch):
    monkeypatch.setattr(backends, "llama_cpp_installed", lambda: True)
    assert model_gguf(llama_dir) is None
    with pytest.raises(
        RalmError, match=r"has no GGUF file; run `ralm convert-gguf .*` first, or choose --backend torch"
    ):
        load_frozen_lm(llama_dir, device="cpu", backend="llama.cpp")
    notes: list[str] = []
    lm = load_frozen_lm(llama_dir, device="cpu", backend="auto", note=notes.append)
    greedy(lm, [[1, 2, 3]], max_new_tokens=1)
    assert lm.backend == "torch" and notes == [
        f"backend auto: torch ({llama_dir} has no GGUF file; `ralm convert-gguf {llama_dir}` writes one)"
    ]


def test_model_gguf_finds_the_specs_own_file(tiny_gguf):
    assert model_gguf(tiny_gguf) == tiny_gguf
    assert model_gguf(tiny_gguf.parent) == tiny_gguf  # a directory holding one .gguf file


@pytest.mark.skipif(
    not backends.llama_cpp_installed(), reason="llama-cpp-python is not installed (make setup-fast)"
)
def test_llama_cpp_gives_the_torch_paths_greedy_tokens(tiny_gguf):
    """Float32 weights on both sides: llama.cpp decodes the same tokens as transformers' generate."""
    ref = load_frozen_lm(tiny_gguf, device="cpu", autocast="off", backend="torch")
    fast = load_frozen_lm(tiny_gguf, device="cpu", autocast="off", backend="llama.cpp")
    assert fast.backend == "llama.cpp" and fast.decoder.gguf == tiny_gguf
    prompts = _prompts(ref)
    want = greedy(ref, prompts, max_new_tokens=12, stop_ids=[])
    assert greedy(fast, prompts, max_new_tokens=12, stop_ids=[]) == want
    assert greedy(fast, prompts, max_new_tokens=12, stop_ids=[], first_line=True) == greedy(
        ref, prompts, max_new_tokens=12, stop_ids=[], first_line=True
    )
    stop = [want[0][3]]
    assert greedy(fast, prompts[:1], max_new_tokens=12, stop_ids=stop) == greedy(
        ref, prompts[:1], max_new_tokens=12, stop_ids=stop
    )


@pytest.mark.skipif(
    not backends.llama_cpp_installed(), reason="llama-cpp-python is not installed (make setup-fast)"
)
def test_auto_takes_llama_cpp_for_one_prompt_and_torch_for_a_batch(tiny_gguf):
    lm = load_frozen_lm(tiny_gguf, device="cpu", autocast="off", backend="auto")
    assert lm.backend == "llama.cpp" and lm.decoder.batches_in_torch
    calls = []
    real = lm.decoder.greedy
    lm.decoder.greedy = lambda prompts, *a: calls.append(len(prompts)) or real(prompts, *a)
    prompts = _prompts(lm)
    one = greedy(lm, prompts[:1], max_new_tokens=4)
    many = greedy(lm, prompts, max_new_tokens=4)
    assert calls == [1] and many[0] == one[0]
    explicit = load_frozen_lm(tiny_gguf, device="cpu", autocast="off", backend="llama.cpp")
    assert not explicit.decoder.batches_in_torch  # asked for by name: every decoding in llama.cpp


@pytest.mark.skipif(
    not backends.llama_cpp_installed(), reason="llama-cpp-python is not installed (make setup-fast)"
)
def test_a_file_llama_cpp_cannot_load_is_one_line(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(
        RalmError,
        match=r"^backend llama.cpp: .*broken.gguf does not load in llama.cpp .*choose --backend torch$",
    ):
        backends.LlamaCppDecoder(bad)


def test_later_builds_the_weights_once_on_first_use_with_the_same_scores(tiny_gguf):
    """`FrozenLM.later` holds the weights back; scoring builds them once, and scores as an LM
    built at once does (the torch backend builds them at load)."""
    from ralm.frozen.lm import FrozenLM, ScoreJob
    from ralm.models.causal import load_causal_lm_later

    eager = load_frozen_lm(tiny_gguf, device="cpu", autocast="off", backend="torch")
    assert eager.loaded
    load, tok, config, name = load_causal_lm_later(tiny_gguf)
    builds = []
    lm = FrozenLM.later(
        lambda: builds.append(1) or load(), config, tok, name=name, device="cpu", autocast="off"
    )
    assert not lm.loaded and lm.max_positions == eager.max_positions and lm.dtype_name == "float32"
    assert lm.hidden_size == eager.hidden_size and not lm.loaded
    ids = eager.encode(PROMPTS[:1])[0]
    job = ScoreJob(
        input_ids=torch.tensor(ids[:-1]).numpy(),
        positions=torch.arange(len(ids) - 1).numpy(),
        labels=torch.tensor(ids[1:]).numpy(),
    )
    got = lm.score([job])[0]
    assert lm.loaded and builds == [1]
    assert got.tolist() == eager.score([job])[0].tolist()
    lm.score([job])
    assert builds == [1]


@pytest.mark.skipif(
    not backends.llama_cpp_installed(), reason="llama-cpp-python is not installed (make setup-fast)"
)
def test_llama_cpp_answers_without_building_the_torch_weights(tiny_gguf):
    lm = load_frozen_lm(tiny_gguf, device="cpu", autocast="off", backend="llama.cpp")
    greedy(lm, _prompts(lm)[:1], max_new_tokens=4)
    assert not lm.loaded  # one prompt: llama.cpp alone
    auto = load_frozen_lm(tiny_gguf, device="cpu", autocast="off", backend="auto")
    assert not auto.loaded
    greedy(auto, _prompts(auto), max_new_tokens=4)
    assert auto.loaded  # a batch decodes in torch under auto: built on the way
