"""JSONL and plain-text readers and format dispatch (ralm.corpus.readers)."""

from __future__ import annotations

import bz2
import gzip
import json
import os
from pathlib import Path

import pytest

from ralm.corpus.readers import detect_format, iter_articles, iter_jsonl, iter_text
from ralm.corpus.types import Article, LinkSpan
from ralm.errors import CorpusError

ENWIKI_NAME = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
BGWIKI_NAME = "bgwiki-latest-pages-articles-shortened.xml.bz2"


def gensim_sample(name: str) -> Path:
    """A wiki dump sample shipped inside gensim (the `samples` extra); skip without gensim."""
    gensim = pytest.importorskip("gensim")
    return Path(os.path.dirname(gensim.__file__)) / "test" / "test_data" / name


RECORDS = [
    {
        "title": "Oslo",
        "text": "Oslo is the capital of Norway.",
        "id": 7,
        "links": [{"start": 23, "end": 29, "target": "norway"}],
    },
    {"text": "No title here.", "id": "doc-2"},
    {"title": "Blank", "text": "   "},
    {"title": "Float id", "text": "x", "id": 1.5},
    {"title": "Null id", "text": "y", "id": None, "links": []},
]
EXPECTED = [
    Article("Oslo", "Oslo is the capital of Norway.", "7", [LinkSpan(23, 29, "Norway")]),
    Article("", "No title here.", "doc-2"),
    Article("Float id", "x", "1.5"),
    Article("Null id", "y", ""),
]


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    lines = [json.dumps(r, ensure_ascii=False) for r in RECORDS]
    lines.insert(1, "")  # blank lines are skipped
    return write_jsonl(tmp_path / "docs.jsonl", lines)


# ----------------------------------------------------------------------------- JSONL


def test_jsonl(jsonl: Path) -> None:
    assert list(iter_jsonl(jsonl)) == EXPECTED
    assert list(iter_jsonl(str(jsonl))) == EXPECTED


@pytest.mark.parametrize("suffix", [".jsonl.bz2", ".jsonl.gz"])
def test_jsonl_compressed(jsonl: Path, suffix: str) -> None:
    data = jsonl.read_bytes()
    path = jsonl.with_name("docs" + suffix)
    path.write_bytes(bz2.compress(data) if suffix.endswith("bz2") else gzip.compress(data))
    assert list(iter_jsonl(path)) == EXPECTED


def test_jsonl_bom_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"title": "A", "text": "a"}\r\n{"title": "B", "text": "b"}\r\n')
    assert [a.title for a in iter_jsonl(path)] == ["A", "B"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"title": "A", "text": "unterminated}',
            r"docs.jsonl:3: not valid JSON \(Unterminated string starting at column 24\); each line must be",
        ),
        ('["a", "list"]', r"docs.jsonl:3: expected a JSON object"),
        ('{"title": "A"}', r'docs.jsonl:3: "text" is missing'),
        ('{"title": "A", "text": 5}', r'docs.jsonl:3: "text" is a int, not a string'),
        ('{"title": 5, "text": "t"}', r'docs.jsonl:3: "title" must be a string'),
        ('{"text": "t", "id": [1]}', r'docs.jsonl:3: "id" must be a string or a number'),
        (
            '{"text": "abc", "links": [{"start": 1, "end": 4, "target": "X"}]}',
            r"docs.jsonl:3: links\[0\] span \[1, 4\) is out of bounds for a text of 3 characters",
        ),
        (
            '{"text": "abc", "links": [{"start": 0, "end": 1, "target": "X"}, {"start": 2, "end": 2, "target": "Y"}]}',
            r"docs.jsonl:3: links\[1\] span \[2, 2\) is out of bounds",
        ),
        (
            '{"text": "abc", "links": [{"start": -1, "end": 2, "target": "X"}]}',
            r"docs.jsonl:3: links\[0\] span",
        ),
        (
            '{"text": "abc", "links": [{"start": "0", "end": 2, "target": "X"}]}',
            r'docs.jsonl:3: links\[0\] needs integer "start" and "end"',
        ),
        (
            '{"text": "abc", "links": [{"start": 0, "end": 2}]}',
            r'docs.jsonl:3: links\[0\] needs a string "target"',
        ),
        ('{"text": "abc", "links": {"start": 0}}', r'docs.jsonl:3: "links" must be a list'),
    ],
)
def test_jsonl_bad_line(tmp_path: Path, line: str, message: str) -> None:
    good = '{"title": "ok", "text": "fine"}'
    path = write_jsonl(tmp_path / "docs.jsonl", [good, "", line, good])
    records = iter_jsonl(path)
    assert next(records).title == "ok"  # records before the bad line still come through
    with pytest.raises(CorpusError, match=message) as err:
        next(records)
    assert str(err.value).startswith(f"{path}:3: ") and "\n" not in str(err.value)


def test_jsonl_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(CorpusError, match=r"latin1.jsonl:2: not valid UTF-8 \(byte 0xe9\)") as err:
        list(iter_jsonl(path))
    assert str(err.value).startswith(f"{path}:2: ")


def test_jsonl_truncated_bz2(tmp_path: Path, jsonl: Path) -> None:
    path = tmp_path / "cut.jsonl.bz2"
    data = bz2.compress(jsonl.read_bytes() * 200)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusError, match="compressed stream ended early") as err:
        list(iter_jsonl(path))
    assert str(path) in str(err.value)


def test_jsonl_empty(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "empty.jsonl", ["", '{"text": " "}'])
    with pytest.raises(CorpusError, match=r"empty.jsonl: no records with a non-empty \"text\" in 2 lines"):
        list(iter_jsonl(path))


def test_jsonl_missing(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    with pytest.raises(CorpusError, match="no such file or directory; check the path") as err:
        list(iter_jsonl(path))
    assert str(path) in str(err.value)


# ----------------------------------------------------------------------------- plain text


@pytest.fixture
def text_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "b.txt").write_text("Second file.\r\nTwo lines.\n", encoding="utf-8")
    (folder / "a.txt").write_text("First file.\n\n  Indented line  \n", encoding="utf-8")
    (folder / "empty.txt").write_text(" \n", encoding="utf-8")
    (folder / "notes.md").write_text("ignored", encoding="utf-8")
    (folder / "sub").mkdir()
    (folder / "sub" / "c.txt").write_text("not read: no recursion", encoding="utf-8")
    return folder


def test_text_file_mode(text_dir: Path) -> None:
    assert list(iter_text(text_dir / "a.txt")) == [
        Article("a", "First file.\n\n  Indented line  \n", "a.txt")
    ]
    assert list(iter_text(text_dir)) == [
        Article("a", "First file.\n\n  Indented line  \n", "a.txt"),
        Article("b", "Second file.\nTwo lines.\n", "b.txt"),
    ]


def test_text_line_mode(text_dir: Path) -> None:
    assert list(iter_text(text_dir, mode="line")) == [
        Article("a:1", "First file.", "1"),
        Article("a:3", "Indented line", "3"),
        Article("b:1", "Second file.", "1"),
        Article("b:2", "Two lines.", "2"),
    ]


def test_text_compressed(tmp_path: Path) -> None:
    path = tmp_path / "story.txt.bz2"
    path.write_bytes(bz2.compress(b"Once.\nUpon.\n"))
    assert list(iter_text(path, mode="line")) == [
        Article("story:1", "Once.", "1"),
        Article("story:2", "Upon.", "2"),
    ]


@pytest.mark.parametrize("mode", ["file", "line"])
def test_text_not_utf8(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"fine\nalso fine\ncaf\xe9\n")
    with pytest.raises(CorpusError, match=r"latin1.txt:3: not valid UTF-8 \(byte 0xe9\)") as err:
        list(iter_text(path, mode=mode))
    assert str(err.value).startswith(f"{path}:3: ")


def test_text_errors(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="directory has no \\*.txt files"):
        list(iter_text(tmp_path))
    (tmp_path / "blank.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="no text found"):
        list(iter_text(tmp_path / "blank.txt", mode="line"))
    with pytest.raises(CorpusError, match="unknown text mode 'para'"):
        list(iter_text(tmp_path / "blank.txt", mode="para"))
    with pytest.raises(CorpusError, match="nope.txt: no such file or directory"):
        list(iter_text(tmp_path / "nope.txt"))


# ----------------------------------------------------------------------------- dispatch


def test_detect_format(tmp_path: Path, jsonl: Path, text_dir: Path) -> None:
    files = {
        "dump.xml": b"<mediawiki/>",
        "dump.xml.bz2": bz2.compress(b"<mediawiki/>"),
        "docs.json": b"{}",
        "docs.jsonl.gz": gzip.compress(b"{}"),
        "plain.txt": b"text",
        "corpus.cor": b"text",
        "mystery.dat": b'  {"text": "sniffed"}',
        "mystery.bz2": bz2.compress(b'<?xml version="1.0"?>\n<mediawiki xmlns="x">'),
        "jsonl-inside.bz2": bz2.compress(b'{"text": "t"}\n'),
        "unknown": b"free text",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert {name: detect_format(tmp_path / name) for name in files} == {
        "dump.xml": "wiki",
        "dump.xml.bz2": "wiki",
        "docs.json": "jsonl",
        "docs.jsonl.gz": "jsonl",
        "plain.txt": "text",
        "corpus.cor": "text",
        "mystery.dat": "jsonl",
        "mystery.bz2": "wiki",
        "jsonl-inside.bz2": "jsonl",
        "unknown": "text",
    }
    assert detect_format(text_dir) == "text"
    assert detect_format(gensim_sample(ENWIKI_NAME)) == "wiki"
    assert detect_format(gensim_sample(BGWIKI_NAME)) == "wiki"
    with pytest.raises(CorpusError, match="nope: no such file or directory; check the path"):
        detect_format(tmp_path / "nope")


def test_iter_articles_dispatch(jsonl: Path, text_dir: Path) -> None:
    assert list(iter_articles(jsonl)) == EXPECTED
    assert list(iter_articles(jsonl, "jsonl")) == EXPECTED
    assert [a.title for a in iter_articles(text_dir, text_mode="line")] == ["a:1", "a:3", "b:1", "b:2"]
    assert [a.title for a in iter_articles(text_dir / "a.txt", "text")] == ["a"]
    redirects: dict[str, str] = {}
    articles = iter_articles(gensim_sample(BGWIKI_NAME), redirects=redirects)
    assert [a.title for a in articles] == ["Григориански календар"]
    assert redirects == {}


def test_iter_articles_errors(tmp_path: Path, jsonl: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(CorpusError, match="no such file or directory") as err:
        iter_articles(missing)  # raised at the call, before iterating
    assert str(missing) in str(err.value)
    with pytest.raises(CorpusError, match="unknown corpus format 'csv'; use one of auto, wiki, jsonl, text"):
        iter_articles(jsonl, "csv")
    with pytest.raises(CorpusError, match="not a MediaWiki XML dump"):
        list(iter_articles(jsonl, "wiki"))
