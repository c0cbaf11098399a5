"""The evaluated text (token prefix cut at a word boundary, words) and the LM spec rules."""

from __future__ import annotations

import numpy as np
import pytest
from frozen_ref import eval_text

from ralm.errors import RalmError
from ralm.frozen.lm import ScoreJob
from ralm.frozen.text import read_eval_text, tokenize_eval_text
from ralm.models.names import resolve_lm


def test_word_level_prefix_keeps_exactly_n_words(llama):
    t = tokenize_eval_text(eval_text(), llama.tokenizer, max_tokens=10)
    assert len(t) == 10 and t.text == " ".join(eval_text().split()[:10]) and t.n_words == 10
    assert t.span(2, 5) == " ".join(eval_text().split()[2:5]) and t.span(3, 3) == ""


def test_bpe_prefix_is_cut_at_a_word_boundary(gpt2):
    full = tokenize_eval_text(eval_text(), gpt2.tokenizer)
    for n in (7, 20, 33, 50):
        t = tokenize_eval_text(eval_text(), gpt2.tokenizer, max_tokens=n)
        assert len(t) <= n and np.array_equal(t.ids, full.ids[: len(t)])
        end = len(t.text)
        assert eval_text()[end].isspace()  # the next character starts a new word
        assert t.n_words == len(eval_text()[:end].split())
        assert gpt2.tokenizer(t.text, add_special_tokens=False)["input_ids"] == t.ids.tolist()


def test_text_file_errors(tmp_path, llama):
    with pytest.raises(RalmError, match="no such text file"):
        read_eval_text(tmp_path / "nope.txt", llama.tokenizer)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(RalmError, match="not UTF-8 text"):
        read_eval_text(bad, llama.tokenizer)
    with pytest.raises(RalmError, match="--max-tokens 1"):
        tokenize_eval_text("Oslo is", llama.tokenizer, max_tokens=1)


def test_lm_specs(tmp_path):
    g = tmp_path / "model.gguf"
    g.write_bytes(b"")
    assert resolve_lm(g) == (tmp_path, "model.gguf")
    assert resolve_lm(tmp_path, "model.gguf") == (tmp_path, "model.gguf")
    with pytest.raises(RalmError, match="names another"):
        resolve_lm(g, "other.gguf")
    with pytest.raises(RalmError, match="no such GGUF file"):
        resolve_lm(tmp_path, "other.gguf")


def test_score_returns_label_logprobs_of_each_job(llama):
    import torch

    ids = np.arange(1, 13)
    jobs = [
        ScoreJob(ids[:8], np.array([0, 3, 7]), ids[[1, 4, 8]]),
        ScoreJob(ids[2:5], np.array([2]), ids[[5]]),
    ]
    got = llama.score(jobs, batch_tokens=64)
    with torch.inference_mode():
        for job, lp in zip(jobs, got, strict=True):
            logp = torch.log_softmax(llama.model(torch.as_tensor(job.input_ids)[None]).logits[0].double(), -1)
            np.testing.assert_allclose(lp, logp[job.positions, job.labels].numpy(), atol=2e-5)


def test_cli_lm_is_optional_before_the_text():
    from ralm.cli import build_parser

    a = build_parser().parse_args(["lm-eval", "test.txt"])
    assert a.lm is None and str(a.text) == "test.txt"
    a = build_parser().parse_args(["lm-eval", "./llama", "test.txt", "--mode", "none", "replug"])
    assert a.lm == "./llama" and a.mode == ["none", "replug"]
