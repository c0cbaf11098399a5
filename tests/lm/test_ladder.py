"""The LM ladder: one split, one vocabulary, the same predicted tokens for every model; the CLI."""

from __future__ import annotations

import json
import math

import pytest

from ralm.cli import main
from ralm.errors import RalmError
from ralm.lm.ladder import OOV_STANDIN, LadderConfig, prepare_data, run_ladder, sentences_of

DOCS = [
    f"The {a} sat on the {b}. A {a} saw the {b} today. It was {c}."
    for a in ("cat", "dog", "bird", "fox", "cow")
    for b in ("mat", "log", "hill", "tree")
    for c in ("late", "sunny", "quiet")
]  # 60 documents


pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py


def test_sentences_of_cuts_long_sentences():
    assert sentences_of(["A cat. A dog sat."], True, 2) == [["a", "cat"], ["."], ["a", "dog"], ["sat", "."]]


def test_prepare_data_split_and_oov_mapping():
    data = prepare_data(DOCS, LadderConfig(min_count=3, seed=1))
    assert len(data.train) + len(data.valid) + len(data.test) == 3 * len(DOCS)
    assert len(data.valid) == len(data.test) == 3 * 6  # 10% of 60 documents each, 3 sentences per doc
    mapped = data.mapped(data.test)
    for words, m in zip(data.test, mapped, strict=True):
        assert [w if w in data.vocab else OOV_STANDIN for w in words] == m
    s = data.summary()
    assert s["test_predicted_tokens"] == s["test_words"] + s["test_sentences"]  # </s> counted
    train_words = s["train_words"]
    capped = prepare_data(DOCS, LadderConfig(min_count=3, seed=1, max_tokens=train_words // 2))
    assert sum(len(x) for x in capped.train) <= train_words // 2
    with pytest.raises(RalmError, match="at least 3 documents"):
        prepare_data(DOCS[:2], LadderConfig())


def test_run_ladder_rows():
    cfg = LadderConfig(
        neural=("ffnn", "transformer"),
        epochs=2,
        min_count=1,
        model_overrides={"ffnn": {"emb_dim": 8, "hidden": 16}, "transformer": {"d_model": 16, "d_ff": 32}},
    )
    out = run_ladder(DOCS, cfg)
    names = [r["model"] for r in out["rows"]]
    assert names[:6] == [
        "add-one unigram",
        "add-one bigram",
        "Katz trigram",
        "interpolated KN trigram",
        "modified KN trigram",
        "modified KN 5-gram",
    ]
    assert names[6:] == ["fixed-window FFNN (Bengio 2003)", "transformer (pre-LN)"]
    for r in out["rows"]:
        assert math.isfinite(r["test_ppl"]) and r["test_ppl"] > 1 and r["params"] > 0
    by = {r["model"]: r["test_ppl"] for r in out["rows"]}
    assert by["modified KN trigram"] < by["add-one unigram"]  # this text is very predictable
    json.dumps(out)  # all plain values


def test_cli_ladder(tmp_path, capsys):
    text = tmp_path / "docs.txt"
    text.write_text("\n".join(DOCS) + "\n", encoding="utf-8")
    js = tmp_path / "ladder.json"
    rc = main(
        [
            "lm",
            "ladder",
            str(text),
            "--models",
            "ngram,ffnn",
            "--epochs",
            "1",
            "--quiet",
            "--json-out",
            str(js),
            "--save-dir",
            str(tmp_path / "models"),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "modified KN 5-gram" in out and "fixed-window FFNN" in out and "test ppl" in out
    rows = json.loads(js.read_text(encoding="utf-8"))["rows"]
    assert len(rows) == 7 and rows[-1]["kind"] == "ffnn"
    assert (tmp_path / "models" / "ffnn" / "model.safetensors").is_file()
    assert main(["lm", "ladder", str(tmp_path / "missing.txt"), "--quiet"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["lm", "ladder", str(text), "--models", "rnn", "--quiet"]) == 2


def test_cli_ladder_prints_each_row_as_it_finishes(tmp_path, capsys, monkeypatch):
    """stdout shows the table's head and every n-gram row before the first neural model starts
    training (issue: minutes of silence on the default sample), and the table once."""
    from ralm.lm import neural

    text = tmp_path / "docs.txt"
    text.write_text("\n".join(DOCS) + "\n", encoding="utf-8")
    seen = {}
    real = neural.train_lm

    def spy(*args, **kwargs):
        seen["out"] = capsys.readouterr().out
        return real(*args, **kwargs)

    monkeypatch.setattr(neural, "train_lm", spy)
    assert main(["lm", "ladder", str(text), "--models", "ngram,ffnn", "--epochs", "1", "--quiet"]) == 0
    early = seen["out"].splitlines()
    assert any(line.startswith("model") and "test ppl" in line for line in early)
    assert sum(line.startswith("modified KN 5-gram") for line in early) == 1
    assert not any(line.startswith("fixed-window FFNN") for line in early)
    rest = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("fixed-window FFNN") for line in rest) == 1
    assert not any(line.startswith("modified KN 5-gram") for line in rest)  # not printed twice
    widths = {len(line) for line in early[1:] + rest if line.strip()}
    assert len(widths) == 1, (early, rest)  # one aligned table
