"""`ralm serve`: the Runs data (metrics.jsonl while it grows, status, config) and robustness:
one-line 500s, Host checks, concurrent requests never sharing a model."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def _as_json(obj):
    return json.loads(json.dumps(obj))


def _hits(res):
    return [int(i) for i in res.ids[0]], [float(s) for s in res.scores[0]]


# ----------------------------------------------------------------------------- runs
def test_metrics_and_config_of_a_realm_run(serve_clients, serve_realm):
    from ralm.realm.config import PretrainConfig
    from ralm.train.logging import read_metric_rows

    rows = _as_json(read_metric_rows(serve_realm / "metrics.jsonl"))
    got = serve_clients["realm"].get("/api/metrics").json()
    assert (got["rows"], got["total"], got["offset"], got["reset"]) == (rows, len(rows), 0, False)
    assert got["status"] == {
        "state": "finished",
        "step": 2,
        "steps": 2,
        "writer": None,
        "checkpoint": "step-0000002",
    }
    assert serve_clients["realm"].get("/api/metrics", params={"offset": len(rows)}).json()["rows"] == []
    again = serve_clients["realm"].get("/api/metrics", params={"offset": len(rows) + 5}).json()
    assert again["reset"] is True and again["rows"] == rows
    cfg = serve_clients["realm"].get("/api/config").json()
    assert cfg["config"] == _as_json(PretrainConfig.from_toml(serve_realm / "config.toml").to_dict())
    assert serve_clients["index"].get("/api/metrics").status_code == 404


def test_metrics_follow_a_file_being_written(tmp_path):
    from fastapi.testclient import TestClient

    from ralm.serve.app import create_app

    m = tmp_path / "metrics.jsonl"
    m.write_text('{"step": 1, "loss": 2.5}\n{"step": 2, "loss": NaN}\n{"step": 3, "lo', encoding="utf-8")
    c = TestClient(create_app(tmp_path), raise_server_exceptions=False)
    assert c.get("/api/info").json()["pages"] == ["runs"]
    got = c.get("/api/metrics").json()
    # the torn line waits for its end; NaN is null in JSON
    assert got["rows"] == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": None}]
    assert got["status"]["state"] == "training" and got["status"]["step"] == 2
    with m.open("a", encoding="utf-8") as f:
        f.write('ss": 2.0}\n')
    got = c.get("/api/metrics", params={"offset": 2}).json()
    assert (got["offset"], got["total"], got["rows"]) == (2, 3, [{"step": 3, "loss": 2.0}])


def test_realm_run_before_its_first_checkpoint_serves_runs_and_corpus(serve_realm, tmp_path):
    from ralm.serve.loaders import load_target

    run = tmp_path / "early"
    run.mkdir()
    (run / "config.toml").write_text(
        (serve_realm / "config.toml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    notes = []
    t = load_target(run, "cpu", log=notes.append)
    assert (t.pages, t.retrievers, t.realm) == (["search", "corpus", "runs"], ["bm25"], None)
    assert notes == [
        f"{run}: no finished checkpoint yet; serving Runs, Corpus and BM25 Search (restart once it has one for Fill)"
    ]


# ----------------------------------------------------------------------------- robustness
def test_an_unexpected_error_is_a_one_line_500(serve_clients, serve_targets, monkeypatch):
    def boom(*a, **k):
        raise ValueError("secret internals\nTraceback (most recent call last)")

    monkeypatch.setattr(serve_targets["index"].bm25, "search_text", boom)
    r = serve_clients["index"].get("/api/search", params={"q": "oslo", "retriever": "bm25"})
    assert r.status_code == 500
    assert r.json() == {"error": "internal error (ValueError); the server log has the details", "status": 500}


def test_unknown_hosts_are_refused_when_asked(serve_targets):
    from fastapi.testclient import TestClient

    from ralm.serve.app import create_app

    app = create_app(serve_targets["docstore"], allowed_hosts=["127.0.0.1", "localhost"])
    assert TestClient(app, base_url="http://127.0.0.1:8000").get("/api/info").status_code == 200
    assert TestClient(app, base_url="http://evil.example").get("/api/info").status_code == 400


def test_concurrent_requests_never_share_a_model(serve_targets):
    """32 concurrent searches through a live server: the model runs one batch at a time, in worker
    threads (never the event loop's) that see torch's thread setting, every query runs exactly once,
    and every answer is the one a lone call gives."""
    import dataclasses
    import threading
    import time
    import urllib.parse
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from ralm.serve.app import ServerThread, create_app

    base = serve_targets["index"]
    active, seen = [0], {"max": 0, "threads": set(), "torch": set(), "queries": []}
    guard = threading.Lock()

    class Watched:
        def search_text(self, queries, k, exclude_ids=None):
            with guard:
                active[0] += 1
                seen["max"] = max(seen["max"], active[0])
                seen["threads"].add(threading.get_ident())
                seen["torch"].add(torch.get_num_threads())
                seen["queries"] += list(queries)
            time.sleep(0.01)
            try:
                return base.dense.search_text(queries, k)
            finally:
                with guard:
                    active[0] -= 1

    t = dataclasses.replace(base, dense=Watched(), hybrid=None)
    torch.set_num_threads(2)
    try:
        with ServerThread(create_app(t)) as server:

            def get(q):
                url = f"{server.url}/api/search?" + urllib.parse.urlencode({"q": q, "k": 3})
                with urllib.request.urlopen(url, timeout=60) as r:
                    return json.loads(r.read())

            queries = [f"capital of {w}" for w in ("Norway", "Sweden", "Denmark", "Finland")] * 8
            with ThreadPoolExecutor(32) as pool:
                answers = list(pool.map(get, queries))
            loop_thread = server.thread.ident
    finally:
        torch.set_num_threads(1)
    assert seen["max"] == 1 and loop_thread not in seen["threads"] and seen["torch"] == {2}
    assert sorted(seen["queries"]) == sorted(queries)
    for q, a in zip(queries, answers, strict=True):
        ids, scores = _hits(base.dense.search_text([q], 3))
        assert [h["id"] for h in a["results"]] == ids and np.allclose(
            [h["score"] for h in a["results"]], scores
        )
