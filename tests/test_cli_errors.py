"""Errors found by fuzzing (benchmarks/faults/faults.py): full disks and lone surrogate escapes are one line."""

from __future__ import annotations

import errno
import json

import pytest

from ralm.cli import disk_full, main
from ralm.errors import RalmError, check_json_text, opening


def test_disk_full_is_found_in_the_exception_chain():
    assert disk_full(OSError(errno.ENOSPC, "No space left on device", "/x/y")).startswith(
        "no space left on device writing /x/y; free space and rerun"
    )
    assert disk_full(OSError(errno.EDQUOT, "Disk quota exceeded")).startswith("disk quota exceeded;")
    try:
        try:
            raise OSError(errno.ENOSPC, "full")
        except OSError as inner:
            raise ValueError("Operation on closed file") from inner
    except ValueError as outer:
        assert disk_full(outer).startswith("no space left on device;")
    assert disk_full(ValueError("something else")) is None
    assert disk_full(OSError(errno.EACCES, "Permission denied")) is None


def test_lone_surrogates_are_refused_and_pairs_pass():
    raw = '{"t": "\\ud800 x"}'
    with pytest.raises(RalmError, match=r"x.jsonl:3: text holds an unpaired surrogate escape \(\\ud800\)"):
        check_json_text(json.loads(raw), raw, "x.jsonl:3")
    pair = '{"t": "\\ud83d\\ude00"}'
    check_json_text(json.loads(pair), pair, "y")  # an emoji written as a pair is fine


def test_corpus_build_refuses_a_surrogate_title(tmp_path, capsys):
    src = tmp_path / "s.jsonl"
    src.write_text('{"title": "\\ud800", "text": "Oslo is the capital of Norway."}\n', encoding="utf-8")
    code = main(["corpus", "build", str(src), "--out", str(tmp_path / "store"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        f"ralm: error: {src}:1: text holds an unpaired surrogate escape (\\ud800), "
        "which is not a character; fix or drop it (a character outside the BMP is "
        "written as a \\ud83d\\ude00-style pair)"
    ]
    assert not (tmp_path / "store").exists()


def test_squad_reader_refuses_a_surrogate_question(tmp_path):
    from ralm.tasks.datasets import load_task_data

    squad = {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "Oslo is the capital.",
                        "qas": [
                            {
                                "id": "q1",
                                "question": "\ud800?",
                                "answers": [{"text": "Oslo", "answer_start": 0}],
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "train.json"
    path.write_text(json.dumps(squad), encoding="utf-8")  # json.dumps writes the escape \ud800
    with pytest.raises(RalmError, match="unpaired surrogate"):
        load_task_data(str(path), "extractive-qa")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p, "ARPA file not found: {p}"),
        (lambda p: p.mkdir() or p, "{p} is a directory, not an ARPA file"),
    ],
)
def test_opening_names_the_file_and_what_it_should_be(tmp_path, make, message):
    path = make(tmp_path / "model.arpa")
    with pytest.raises(RalmError) as exc, opening(path, "an ARPA file"):
        path.read_bytes()
    assert str(exc.value) == message.format(p=path)


def test_opening_passes_other_errors_and_success_through(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    with opening(tmp_path / "a.txt", "a text file"):
        assert (tmp_path / "a.txt").read_text() == "x"
    with pytest.raises(ValueError), opening(tmp_path / "a.txt", "a text file"):
        raise ValueError("not an OSError")
