"""`ralm serve` on the command line: bad TARGETs end in one line and exit 2; binding, warnings; markup."""

from __future__ import annotations

import shutil

import pytest

from ralm.cli import main


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ralm: error: "), err
    return err[0]


def test_bad_targets_exit_2_with_one_line(capsys, tmp_path, serve_store, serve_surealm):
    import json

    line = "not a REALM run (config.toml), SUREALM run (surealm.json), index directory (retrieval.json) or DocStore"
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hello", encoding="utf-8")
    (tmp_path / "file.txt").write_text("hello", encoding="utf-8")
    datastore = json.loads((serve_surealm / "train.json").read_text(encoding="utf-8"))["datastore"]
    damaged = tmp_path / "damaged"
    shutil.copytree(serve_store, damaged)
    shard = next((damaged / "chunks").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:100])
    half_index = tmp_path / "half"
    (half_index / "encoder").mkdir(parents=True)
    cases = [
        (tmp_path / "missing", "no such directory"),
        (tmp_path / "junk", line),
        (tmp_path / "file.txt", "not a directory"),
        (datastore, "a SUREALM data store; serve the run trained on it"),
        (damaged, shard.name),
        (half_index, "unfinished index build"),
    ]
    for target, expected in cases:
        assert main(["serve", str(target)]) == 2
        assert expected in _one_error_line(capsys)
    assert main(["serve", str(serve_store), "--port", "70000"]) == 2
    assert "--port 70000" in _one_error_line(capsys)


@pytest.fixture
def fake_server(monkeypatch):
    """Replace uvicorn with a recorder: (app, host, port) of each `run_server` call."""
    calls = []

    def record(app, sock, log_level="info"):
        calls.append((app, *sock.getsockname()[:2]))
        sock.close()

    monkeypatch.setattr("ralm.serve.cli.run_server", record)
    return calls


def test_serve_binds_loopback_by_default_and_warns_otherwise(capsys, serve_store, fake_server):
    from fastapi.testclient import TestClient

    assert main(["serve", str(serve_store), "--port", "0"]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err and "ralm serve: docstore" in err and "(search, corpus)" in err
    app, host, port = fake_server[-1]
    assert host == "127.0.0.1" and port > 0
    assert TestClient(app, base_url=f"http://127.0.0.1:{port}").get("/api/info").json()["kind"] == "docstore"
    assert TestClient(app, base_url="http://attacker.example").get("/api/info").status_code == 400

    assert main(["serve", str(serve_store), "--host", "0.0.0.0", "--port", "0"]) == 0
    err = capsys.readouterr().err.splitlines()
    warnings = [x for x in err if x.startswith("ralm: warning:")]
    assert len(warnings) == 1 and "--host 0.0.0.0 is not a loopback address" in warnings[0]
    assert fake_server[-1][1] == "0.0.0.0"


def test_a_taken_port_is_one_line(capsys, serve_store):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["serve", str(serve_store), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in _one_error_line(capsys)


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host, loopback):
    from ralm.serve.cli import is_loopback

    assert is_loopback(host) is loopback


def test_highlight_spans_against_a_plain_scan():
    import re

    from ralm.retrieval.analysis import Analyzer
    from ralm.serve.markup import highlight_spans

    assert highlight_spans("Oslo is in Norway", ["norway"], Analyzer()) == [(11, 17)]
    text = "Pivottabeller og pivottabellen: en PIVOTTABEL, ikke en tabel. 😀 Pivottabel!"
    an = Analyzer.resolve(lang="da")
    terms = an.analyze("pivottabel")
    want = [
        (m.start(), m.end()) for m in re.finditer(r"\w+", text) if m.group().lower().startswith("pivottabel")
    ]
    assert highlight_spans(text, terms, an) == want and len(want) == 4
    assert highlight_spans(text, [], an) == []


def test_salient_segments_cover_the_text_once():
    from ralm.serve.markup import Segment, salient_segments

    spans = [
        {"start": 0, "end": 4, "source": "auto", "label": "A"},
        {"start": 2, "end": 6, "source": "link", "label": "L"},
        {"start": 8, "end": 99, "source": "date", "label": "D"},  # past the end: clipped
        {"start": 5, "end": 5, "source": "ner", "label": "empty"},  # empty: ignored
    ]
    got = salient_segments("abcdefghij", spans)
    assert got == [
        Segment("ab", ("auto",), ("auto: A",)),
        Segment("cd", ("link", "auto"), ("link: L", "auto: A")),
        Segment("ef", ("link",), ("link: L",)),
        Segment("gh"),
        Segment("ij", ("date",), ("date: D",)),
    ]
    assert "".join(s.text for s in got) == "abcdefghij" and got[1].source == "link"
