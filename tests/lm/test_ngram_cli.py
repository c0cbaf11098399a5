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
    assert (
        main(
            [
                "ngram",
                "train",
                str(text_file),
                "--order",
                "3",
                "--estimator",
                "mkn",
                "--out",
                str(model),
                "--lowercase",
            ]
        )
        == 0
    )
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
    fill = {
        "text": str(text_file),
        "out": str(tmp_path / "o.arpa"),
        "missing": str(tmp_path / "no"),
        "empty": str(empty),
    }
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


@pytest.mark.parametrize("command", ["train", "score"])
def test_invalid_utf8_names_the_right_line_and_byte(tmp_path, capsys, command):
    bad = tmp_path / "x.txt"
    bad.write_bytes(b"en linje\nto linjer\ntre \xff linjer\n")
    model = tmp_path / "m.arpa"
    NGramLM.fit([["en", "linje"]], order=2, estimator="kn").to_arpa(model)
    args = (
        ["train", str(bad), "--out", str(tmp_path / "x.arpa")]
        if command == "train"
        else ["score", str(model), str(bad)]
    )
    assert main(["ngram", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"ralm: error: {bad}:3: not valid UTF-8 (byte 0xff at byte offset 23"), err[0]
    assert not (tmp_path / "x.arpa").exists()


@pytest.mark.parametrize("estimator", ["mle", "laplace", "lidstone"])
def test_estimators_without_arpa_form(tmp_path, text_file, capsys, estimator):
    """train refuses ARPA output for them in one line that says why and what to run instead;
    score --train fits them in memory and prints their perplexity."""
    out = tmp_path / "m.arpa"
    assert (
        main(["ngram", "train", str(text_file), "--order", "3", "--estimator", estimator, "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no ARPA form" in err[0] and "ralm ngram score --train" in err[0], err
    assert not out.exists()
    held = tmp_path / "held.txt"
    held.write_text("The cat sat on the log.\nA dog ran.\n", encoding="utf-8")
    assert (
        main(
            [
                "ngram",
                "score",
                "--train",
                str(text_file),
                "--order",
                "3",
                "--estimator",
                estimator,
                "--lowercase",
                str(held),
            ]
        )
        == 0
    )
    line = capsys.readouterr().out.strip().splitlines()[-1]
    train = [word_tokenize(s, lowercase=True) for s in text_file.read_text(encoding="utf-8").splitlines()]
    lm = NGramLM.fit([s for s in train if s], order=3, estimator=estimator)
    sents = [word_tokenize(s, lowercase=True) for s in held.read_text(encoding="utf-8").splitlines()]
    want = lm.perplexity(sents)
    assert line == f"perplexity: {want:.4f}"


def test_score_argument_errors(tmp_path, text_file, capsys):
    model = tmp_path / "m.arpa"
    assert main(["ngram", "train", str(text_file), "--out", str(model)]) == 0
    capsys.readouterr()
    for args, pattern in [
        (["score", str(text_file)], "give MODEL.arpa and TEXT"),
        (["score", "--train", str(text_file), str(model), str(text_file)], "with --train give only TEXT"),
        (
            ["score", str(model), str(text_file), "--order", "2"],
            "--order, --estimator, --delta and --katz-k need --train",
        ),
    ]:
        assert main(["ngram", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and pattern in err[0], err
