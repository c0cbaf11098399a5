"""Every bad input ends with one line naming the file, exit code 2, and nothing half-written."""

import bz2
import json
import subprocess
import sys

import pytest

from ralm.cli import main
from ralm.samples import sample_path


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    return code, [line for line in err if not line.startswith(("pass ", "\r"))]


def assert_clean_failure(code, err, needle, out):
    assert code == 2
    assert len(err) == 1 and err[0].startswith("ralm: error: "), err
    assert needle in err[0], err[0]
    assert not out.exists()
    left = [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    # the writer lock's file stays beside --out (ralm.locks), released and empty
    assert [p.name for p in left if p.name != f".{out.name}.lock"] == [], "temp dir left behind"
    assert all(p.read_text() == "" for p in left)


MINIMAL_DUMP = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
<siteinfo><namespaces><namespace key="0" /><namespace key="1">Talk</namespace></namespaces></siteinfo>
{pages}
</mediawiki>
"""
TALK_PAGE = (
    "<page><title>Talk:X</title><ns>1</ns><id>2</id><revision><text>chat about x</text></revision></page>"
)


def test_missing_path(tmp_path, capsys):
    out = tmp_path / "out"
    code, err = run_cli(capsys, "corpus", "build", tmp_path / "nope.xml.bz2", "--out", out)
    assert_clean_failure(code, err, "nope.xml.bz2", out)


def _build_fails(tmp_path, capsys, name, data: bytes, needle):
    """`ralm corpus build` of a file `name` holding `data`: one clean failure whose line names
    `needle`; returns that line."""
    src = tmp_path / name
    src.write_bytes(data)
    out = tmp_path / "out"
    code, err = run_cli(capsys, "corpus", "build", src, "--out", out, "--quiet")
    assert_clean_failure(code, err, needle, out)
    return err[0]


def test_truncated_bz2(tmp_path, capsys):
    data = sample_path("enwiki").read_bytes()
    assert "truncated" in _build_fails(tmp_path, capsys, "cut.xml.bz2", data[: len(data) // 2], "cut.xml.bz2")


def test_not_xml(tmp_path, capsys):
    _build_fails(tmp_path, capsys, "dump.xml", b"this is not xml at all\n", "dump.xml")


def test_not_utf8_xml(tmp_path, capsys):
    page = "<page><title>A</title><ns>0</ns><id>1</id><revision><text>caf\xe9 ok</text></revision></page>"
    data = MINIMAL_DUMP.format(pages=page).encode("latin-1")
    assert "UTF-8" in _build_fails(tmp_path, capsys, "latin1.xml", data, "latin1.xml")


def test_dump_without_articles(tmp_path, capsys):
    data = bz2.compress(MINIMAL_DUMP.format(pages=TALK_PAGE).encode())
    assert "no articles" in _build_fails(tmp_path, capsys, "talk.xml.bz2", data, "talk.xml.bz2")


def test_jsonl_bad_line_names_line(tmp_path, capsys):
    data = (json.dumps({"title": "a", "text": "Fine text."}) + "\n\n{not json\n").encode()
    _build_fails(tmp_path, capsys, "docs.jsonl", data, "docs.jsonl:3")


def test_jsonl_not_utf8(tmp_path, capsys):
    data = b'{"title": "a", "text": "ok"}\n{"title": "b", "text": "caf\xe9"}\n'
    assert "UTF-8" in _build_fails(tmp_path, capsys, "docs.jsonl", data, "docs.jsonl")


def test_bad_tokenizer_dir_and_chunk_size(tmp_path, capsys):
    src = tmp_path / "a.txt"
    src.write_text("Some text here.")
    out = tmp_path / "out"
    (tmp_path / "empty").mkdir()
    code, err = run_cli(capsys, "corpus", "build", src, "--out", out, "--tokenizer", tmp_path / "empty")
    assert_clean_failure(code, err, "empty", out)
    code, err = run_cli(capsys, "corpus", "build", src, "--out", out, "--chunk-size", "2")
    assert_clean_failure(code, err, "--chunk-size", out)
    code, err = run_cli(capsys, "corpus", "build", src, "--out", out, "--min-chunk-tokens", "-1")
    assert_clean_failure(code, err, "--min-chunk-tokens", out)


def test_existing_out_needs_overwrite_and_failed_rebuild_keeps_old(tmp_path, capsys):
    src = tmp_path / "a.txt"
    src.write_text("The first version. It has two sentences.")
    out = tmp_path / "out"
    assert run_cli(capsys, "corpus", "build", src, "--out", out, "--quiet")[0] == 0
    old_manifest = (out / "manifest.json").read_text()
    code, err = run_cli(capsys, "corpus", "build", src, "--out", out, "--quiet")
    assert code == 2 and "--overwrite" in err[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    code, err = run_cli(capsys, "corpus", "build", bad, "--out", out, "--overwrite", "--quiet")
    assert code == 2 and "bad.jsonl:1" in err[0]
    assert (out / "manifest.json").read_text() == old_manifest, (
        "a failed rebuild must not touch the old store"
    )
    src.write_text("The second version.")
    assert run_cli(capsys, "corpus", "build", src, "--out", out, "--overwrite", "--quiet")[0] == 0
    assert (out / "manifest.json").read_text() != old_manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "a.txt", "bad.jsonl", "out"]
    assert (tmp_path / ".out.lock").read_text() == ""  # the writer lock, released


def test_a_directory_that_is_not_a_docstore_is_never_overwritten(tmp_path, capsys):
    src = tmp_path / "a.txt"
    src.write_text("Text.")
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete")
    code, err = run_cli(capsys, "corpus", "build", src, "--out", out, "--overwrite")
    assert code == 2 and "not a DocStore" in err[0]
    assert (out / "thesis.tex").read_text() == "do not delete"


def test_info_and_show_errors(tmp_path, capsys):
    code, err = run_cli(capsys, "corpus", "info", tmp_path / "missing")
    assert code == 2 and "missing" in err[0]
    src = tmp_path / "a.txt"
    src.write_text("Just one chunk of text.")
    out = tmp_path / "out"
    assert run_cli(capsys, "corpus", "build", src, "--out", out, "--quiet")[0] == 0
    code, err = run_cli(capsys, "corpus", "show", out, "5")
    assert code == 2 and "out of range" in err[0]
    assert main(["corpus", "show", str(out), "0"]) == 0
    shown = capsys.readouterr().out
    assert shown.splitlines()[1] == "Just one chunk of text."
    # the flag reaches the manifest; the default 32 is in effect at chunk size 128
    assert json.loads((out / "manifest.json").read_text())["min_chunk_tokens"] == 32
    out0 = tmp_path / "out0"
    argv = ["corpus", "build", src, "--out", out0, "--quiet", "--min-chunk-tokens", "0"]
    assert run_cli(capsys, *argv)[0] == 0
    assert json.loads((out0 / "manifest.json").read_text())["min_chunk_tokens"] == 0


@pytest.mark.parametrize(
    "argv",
    [[], ["corpus"], ["corpus", "build"], ["corpus", "info"], ["corpus", "show"], ["corpus", "verify"]],
)
def test_help_explains_every_option(argv):
    res = subprocess.run(
        [sys.executable, "-m", "ralm", *argv, "--help"], capture_output=True, text=True, check=True
    )
    assert res.stdout.startswith("usage: ralm")
    if argv == ["corpus", "build"]:
        for opt in (
            "--out",
            "--sample",
            "--format",
            "--text-mode",
            "--tokenizer",
            "--chunk-size",
            "--min-chunk-tokens",
            "--lang",
            "--entity-vocab",
            "--min-entity-count",
            "--no-auto-annotate",
            "--no-dates",
            "--ner-model",
            "--max-articles",
            "--workers",
            "--rows-per-shard",
            "--row-group-size",
            "--overwrite",
            "--quiet",
        ):
            assert opt in res.stdout
