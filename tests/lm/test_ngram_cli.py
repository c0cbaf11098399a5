"""`ralm ngram train|score|sample` end to end, through the top-level `ralm` entry point."""

from __future__ import annotations

import pytest

from ralm.cli import main
from ralm.lm import NGramLM, word_tokenize

TEXT = """The cat sat on the mat.
The dog sat on the log.

A cat saw a dog.
The cat ran.
A dog ran on the mat.
"""


@pytest.fixture()
def text_file(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    return path


def test_train_score_sample(tmp_path, text_file, capsys):
    model = tmp_path / "m.arpa"
    assert main(["ngram", "train", str(text_file), "--order", "3", "--estimator", "mkn",
                 "--out", str(model), "--lowercase"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "order 3 mkn" in out and "15 sentences" in out
    assert model.read_text(encoding="utf-8").count("\\end\\") == 1

    held = tmp_path / "held.txt"
    held.write_text("The cat sat on the log.\nA zebra ran.\n", encoding="utf-8")
    assert main(["ngram", "score", str(model), str(held)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("perplexity: ")
    lm = NGramLM.from_arpa(model)
    sents = [word_tokenize(s, lowercase=True) for s in held.read_text(encoding="utf-8").splitlines()]
    assert float(line.split()[1]) == pytest.approx(lm.perplexity(sents), rel=1e-4)  # lower-casing reused

    assert main(["ngram", "sample", str(model), "--seed", "7", "-n", "3", "--context", "The"]) == 0
    first = capsys.readouterr().out.splitlines()
    assert len(first) == 3 and all(s.startswith("the") for s in first)
    main(["ngram", "sample", str(model), "--seed", "7", "-n", "3", "--context", "The"])
    assert capsys.readouterr().out.splitlines() == first


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["train", "{text}", "--estimator", "stupid_backoff", "--out", "{out}"], "no ARPA form"),
        (["train", "{text}", "--estimator", "nope", "--out", "{out}"], "valid: mle"),
        (["train", "{missing}", "--out", "{out}"], "not found"),
        (["train", "{empty}", "--out", "{out}"], "empty corpus"),
        (["score", "{missing}", "{text}"], "not found"),
        (["score", "{text}", "{text}"], ":1: expected \\\\data"),
    ],
)
def test_cli_errors_exit_2_with_one_line(tmp_path, text_file, capsys, args, pattern):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    fill = {"text": str(text_file), "out": str(tmp_path / "o.arpa"), "missing": str(tmp_path / "no"),
            "empty": str(empty)}  # fmt: skip
    assert main(["ngram", *[a.format(**fill) for a in args]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ralm: error: ")
    import re

    assert re.search(pattern, err[0]), err[0]


def test_train_refuses_to_overwrite(tmp_path, text_file, capsys):
    out = tmp_path / "m.arpa"
    out.write_text("keep", encoding="utf-8")
    assert main(["ngram", "train", str(text_file), "--out", str(out)]) == 2
    assert out.read_text(encoding="utf-8") == "keep"
    assert (
        main(["ngram", "train", str(text_file), "--out", str(out), "--overwrite", "--estimator", "katz"]) == 0
    )
