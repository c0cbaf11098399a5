"""Dynamic batching in `ralm serve`: batched answers equal lone ones, the queue gathers what waits,
a full queue answers 503, clients that leave leave no work; the default retriever; Fill's URL.

The live-server tests make batches deterministic without timing: the test holds the model's lock,
so the first request's batch blocks in its worker thread; what it sends next waits in the queue
(polled through /api/info) until the lock is released.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from ralm.errors import RalmError
from ralm.serve.batching import BatchConfig, ModelQueue

pytestmark = pytest.mark.usefixtures("one_thread")

QUERIES = ["capital of Norway", "founded by Harald", "Scandinavia kings", "the Baltic Sea", "Mallory wrote"]
TEXTS = [
    "Oslo is the capital of [MASK].",
    "[MASK] is a country in [MASK].",
    "Stockholm lies on the [MASK] Sea.",
    "It was founded in [MASK] by Gustav Vasa, the king of Sweden and of its capital Stockholm.",
]


def _same_search(got: dict, want: dict) -> None:
    got, want = json.loads(json.dumps(got)), json.loads(json.dumps(want))  # tuples -> lists, as sent
    assert {k: v for k, v in got.items() if k != "results"} == {
        k: v for k, v in want.items() if k != "results"
    }
    assert [h["id"] for h in got["results"]] == [h["id"] for h in want["results"]]
    assert [h["score"] for h in got["results"]] == pytest.approx(
        [h["score"] for h in want["results"]], abs=1e-5
    )
    strip = [{k: v for k, v in h.items() if k != "score"} for h in got["results"]]
    assert strip == [{k: v for k, v in h.items() if k != "score"} for h in want["results"]]


def _same_fill(got: dict, want: dict) -> None:
    assert (got["text"], got["prediction"], got["retrieval"]) == (
        want["text"],
        want["prediction"],
        want["retrieval"],
    )
    assert [d["chunk_id"] for d in got["docs"]] == [d["chunk_id"] for d in want["docs"]]
    assert [d["prediction"] for d in got["docs"]] == [d["prediction"] for d in want["docs"]]
    assert [t for row in got["alternatives"] for t, _ in row] == [
        t for row in want["alternatives"] for t, _ in row
    ]
    for key in ("p_z", "p_y"):
        assert [d[key] for d in got["docs"]] == pytest.approx(
            [d[key] for d in want["docs"]], rel=1e-4, abs=1e-6
        )
    assert got["p_y"] == pytest.approx(want["p_y"], rel=1e-4)
    assert got["null_mass"] == pytest.approx(want["null_mass"], rel=1e-4)


# ----------------------------------------------------------------------------- batched == alone
@pytest.mark.parametrize(
    ("kind", "retriever"),
    [
        ("index", "dense"),
        ("index", "bm25"),
        ("index", "hybrid"),
        ("realm", "dense"),
        ("realm", "hybrid"),
        ("docstore", "bm25"),
    ],
)
def test_batched_search_equals_each_search_alone(serve_targets, kind, retriever):
    from ralm.serve.api import search
    from ralm.serve.batched import search_many

    t = serve_targets[kind]
    batched = search_many(t, retriever, 4, QUERIES)
    assert len(batched) == len(QUERIES)
    for q, got in zip(QUERIES, batched, strict=True):
        want = search(t, q, 4, retriever)
        assert got["query"] == q and len(got["results"]) == 4
        _same_search(got, want)


def test_batched_fill_equals_each_fill_alone(serve_targets, serve_realm):
    from ralm.realm.inference.fill import fill
    from ralm.realm.training.run import load_run
    from ralm.serve.api import fill_text
    from ralm.serve.batched import fill_many_dicts

    t = serve_targets["realm"]
    for k, top in [(3, 4), (2, 2)]:
        batched = fill_many_dicts(t, TEXTS, k, top)
        for text, got in zip(TEXTS, batched, strict=True):
            _same_fill(got, fill_text(t, text, k, top))
    # and fill of one text is the same code as before batching: the run loaded afresh agrees exactly
    run = load_run(serve_realm, device="cpu")
    assert fill_text(t, TEXTS[1], 3, 4)["docs"] == [d.__dict__ for d in fill(run, TEXTS[1], k=3, top=4).docs]


# ----------------------------------------------------------------------------- the queue alone
def test_a_failing_batch_is_run_request_by_request():
    calls = []

    def upper(words):
        calls.append(list(words))
        if "bad" in words:
            raise RalmError("bad word")
        return [w.upper() for w in words]

    async def go():
        queue = ModelQueue("m", BatchConfig(max_batch=4))
        return await asyncio.gather(
            *(queue.submit("k", upper, w) for w in ["a", "b", "bad", "d"]), return_exceptions=True
        ), queue

    answers, queue = asyncio.run(go())
    assert answers[:2] == ["A", "B"] and answers[3] == "D"
    assert isinstance(answers[2], RalmError) and str(answers[2]) == "bad word"
    assert calls == [["a", "b", "bad", "d"], ["a"], ["b"], ["bad"], ["d"]]
    assert queue.stats() == {
        "waiting": 0,
        "running": 0,
        "batches": 1,
        "requests": 4,
        "dropped": 0,
        "rejected": 0,
        "batch_sizes": {"4": 1},
    }


def test_bad_batch_settings_are_one_line_errors():
    cases = [
        ({"max_batch": 0}, "--max-batch 0: must be >= 1 (1 turns batching off)"),
        ({"max_wait_ms": -1}, "--max-wait-ms -1: must be a number >= 0"),
        ({"max_queue": 0}, "--max-queue 0: must be >= 1"),
        ({"max_fill_batch": 0}, "--max-fill-batch 0: must be >= 1"),
    ]
    for kwargs, line in cases:
        with pytest.raises(RalmError) as e:
            BatchConfig(**kwargs)
        assert str(e.value) == line


def test_fill_batches_are_small_on_a_cpu_unless_set():
    assert (BatchConfig().fill_batch("cpu"), BatchConfig().fill_batch("cuda:0")) == (4, 32)
    assert (
        BatchConfig(max_batch=2).fill_batch("cpu") == 2 and BatchConfig(max_batch=1).fill_batch("cuda") == 1
    )
    assert BatchConfig(max_fill_batch=16).fill_batch("cpu") == 16
    assert BatchConfig(max_batch=8, max_fill_batch=16).fill_batch("cpu") == 8


def test_serve_cli_refuses_bad_batch_settings(capsys, serve_store):
    from ralm.cli import main

    assert main(["serve", str(serve_store), "--max-batch", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ralm: error: --max-batch 0: must be >= 1 (1 turns batching off)"]


# ----------------------------------------------------------------------------- a live server
class Held:
    """A live server over `target` whose model lock the test holds: the first request's batch
    blocks in its thread, later requests wait in the queue."""

    def __init__(self, target, config: BatchConfig) -> None:
        from ralm.serve.app import ServerThread, create_app

        self.target = target
        self.server = ServerThread(create_app(target, batching=config)).start()
        self.url = self.server.url
        self.pool = ThreadPoolExecutor(32)

    def info(self) -> dict:
        return httpx.get(f"{self.url}/api/info").json()["batching"]

    def wait_for(self, cond, what: str, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            b = self.info()
            if cond(b["queues"]["model"]):
                return b
            assert time.monotonic() < deadline, f"never reached: {what}; last {b}"
            time.sleep(0.02)

    def search(self, q: str, retriever: str = "dense", timeout: float = 120.0):
        params = {"q": q, "k": 4, "retriever": retriever}
        return self.pool.submit(httpx.get, f"{self.url}/api/search", params=params, timeout=timeout)

    def fill(self, text: str):
        return self.pool.submit(
            httpx.post, f"{self.url}/api/fill", json={"text": text, "k": 3, "top": 4}, timeout=120
        )

    def close(self) -> None:
        self.pool.shutdown()
        self.server.stop()


@pytest.fixture
def held():
    made: list[Held] = []
    lock: list[threading.Lock] = []

    def start(target, config: BatchConfig) -> Held:
        h = Held(target, config)
        made.append(h)
        target.model_lock.acquire()
        lock.append(target.model_lock)
        return h

    yield start
    for lk in lock:
        if lk.locked():
            lk.release()
    for h in made:
        h.close()


def test_waiting_requests_run_as_one_batch_per_kind_with_their_own_answers(serve_targets, held):
    from ralm.serve.api import fill_text, search

    t = serve_targets["realm"]
    h = held(t, BatchConfig(max_batch=8, max_queue=64))
    first = h.search("Oslo")
    h.wait_for(lambda q: q["running"] == 1, "the first batch running")
    fills = [h.fill(x) for x in TEXTS]
    dense = [h.search(q) for q in QUERIES[:4]]
    hybrid = [h.search(q, "hybrid") for q in QUERIES[:4]]
    h.wait_for(lambda q: q["waiting"] == 12, "12 requests waiting")
    t.model_lock.release()
    _same_search(first.result().json(), search(t, "Oslo", 4, "dense"))
    for x, f in zip(TEXTS, fills, strict=True):
        _same_fill(f.result().json(), fill_text(t, x, 3, 4))
    for r, futures in (("dense", dense), ("hybrid", hybrid)):
        for q, f in zip(QUERIES, futures, strict=False):
            _same_search(f.result().json(), search(t, q, 4, r))
    b = h.info()
    assert b["queues"]["model"] == {
        "waiting": 0,
        "running": 0,
        "batches": 4,
        "requests": 13,
        "dropped": 0,
        "rejected": 0,
        "batch_sizes": {"1": 1, "4": 3},
    }
    assert (b["enabled"], b["max_batch"], b["max_wait_ms"], b["max_queue"]) == (True, 8, 0.0, 64)


def test_fills_run_in_batches_of_max_fill_batch(serve_targets, held):
    from ralm.serve.api import fill_text

    t = serve_targets["realm"]
    h = held(t, BatchConfig(max_batch=8, max_fill_batch=3))
    first = h.search("Oslo")
    h.wait_for(lambda q: q["running"] == 1, "the first batch running")
    texts = TEXTS + [x.replace("[MASK].", "[MASK] again.") for x in TEXTS[:3]]
    fills = [h.fill(x) for x in texts]
    h.wait_for(lambda q: q["waiting"] == 7, "7 fills waiting")
    t.model_lock.release()
    assert first.result().status_code == 200
    for x, f in zip(texts, fills, strict=True):
        _same_fill(f.result().json(), fill_text(t, x, 3, 4))
    b = h.info()
    assert b["max_fill_batch"] == 3 and b["queues"]["model"]["batch_sizes"] == {"1": 2, "3": 2}


def test_a_burst_beyond_the_queue_bound_gets_503_and_no_crossed_answers(serve_targets, held):
    from ralm.serve.api import search

    t = serve_targets["index"]
    h = held(t, BatchConfig(max_batch=2, max_queue=4))
    first = h.search("Oslo")
    h.wait_for(lambda q: q["running"] == 1, "the first batch running")
    queries = [f"{q} {i}" for i, q in enumerate(QUERIES * 2)]
    burst = [h.search(q) for q in queries]
    h.wait_for(lambda q: q["waiting"] == 4 and q["rejected"] == 6, "4 waiting and 6 turned away")
    t.model_lock.release()
    answers = [f.result() for f in burst]
    busy = [r for r in answers if r.status_code == 503]
    assert len(busy) == 6
    for r in busy:
        assert r.json() == {
            "error": "the model queue is full (4 requests waiting); retry shortly",
            "status": 503,
        }
        assert int(r.headers["Retry-After"]) >= 1
    served = [(q, r.json()) for q, r in zip(queries, answers, strict=True) if r.status_code == 200]
    assert len(served) == 4
    for q, got in [("Oslo", first.result().json()), *served]:
        assert got["query"] == q
        _same_search(got, search(t, q, 4, "dense"))
    assert h.info()["queues"]["model"]["batch_sizes"] == {"1": 1, "2": 2}


def test_clients_that_leave_leave_no_work_behind(serve_targets, held):
    t = serve_targets["index"]
    h = held(t, BatchConfig(max_batch=8))
    first = h.search("Oslo")
    h.wait_for(lambda q: q["running"] == 1, "the first batch running")
    gone = [h.search(q, timeout=0.5) for q in QUERIES[:3]]
    for f in gone:
        with pytest.raises(httpx.ReadTimeout):
            f.result()
    h.wait_for(lambda q: q["waiting"] == 0 and q["dropped"] == 3, "the 3 requests out of the queue")
    t.model_lock.release()
    assert first.result().status_code == 200
    assert h.search("Bergen").result().status_code == 200
    q = h.info()["queues"]["model"]
    assert (q["requests"], q["batch_sizes"], q["dropped"]) == (2, {"1": 2}, 3)  # the 3 never ran


def test_info_reports_the_default_batching(serve_clients):
    b = serve_clients["docstore"].get("/api/info").json()["batching"]
    assert {k: v for k, v in b.items() if k != "queues"} == {
        "enabled": True,
        "max_batch": 32,
        "max_fill_batch": 4,
        "max_wait_ms": 0.0,
        "max_queue": 256,
    }
    assert sorted(b["queues"]) == ["bm25", "model"]
    assert set(b["queues"]["bm25"]) == {
        "waiting",
        "running",
        "batches",
        "requests",
        "dropped",
        "rejected",
        "batch_sizes",
    }


# ----------------------------------------------------------------------------- defects
@pytest.mark.parametrize(
    ("kind", "first", "page_default"),
    [("realm", "dense", "both"), ("index", "dense", "both"), ("docstore", "bm25", "bm25")],
)
def test_the_default_retriever_is_the_first_the_target_offers(
    serve_clients, serve_targets, kind, first, page_default
):
    from ralm.serve.api import search

    c = serve_clients[kind]
    assert c.get("/api/info").json()["retrievers"][0] == first
    r = c.get("/api/search", params={"q": "fjords and Oslo", "k": 3})
    assert r.status_code == 200 and r.json()["retriever"] == first
    _same_search(r.json(), search(serve_targets[kind], "fjords and Oslo", 3, first))
    page = c.get("/search").text
    assert f'<option value="{page_default}" selected>' in page


def test_default_retriever_on_a_target_without_search_is_404(serve_clients):
    r = serve_clients["surealm"].get("/api/search", params={"q": "fjords"})
    assert r.status_code == 404 and r.json()["error"].startswith("this SUREALM run has no search page")


def test_fill_page_takes_text_k_and_top_from_its_url(serve_clients):
    c = serve_clients["realm"]
    text = 'Bergen <b>"x"</b> is in [MASK].'
    page = c.get("/fill", params={"text": text, "k": 2, "top": 3}).text
    assert ">Bergen &lt;b&gt;&#34;x&#34;&lt;/b&gt; is in [MASK].</textarea>" in page and "<b>" not in page
    assert 'data-run-now="true"' in page
    assert 'name="k" type="number"\n           min="1" max="100" value="2">' in page
    assert 'max="20" value="3">' in page
    plain = c.get("/fill").text  # without: the example, the run's k, 5 alternatives, nothing run
    assert ">Oslo is the capital of [MASK].</textarea>" in plain and 'data-run-now="false"' in plain
    assert 'min="1" max="100" value="3">' in plain and 'max="20" value="5">' in plain
    capped = c.get("/fill", params={"text": "a [MASK]", "k": 500, "top": 0}).text
    assert 'min="1" max="100" value="100">' in capped and 'max="20" value="1">' in capped


def test_each_batch_is_logged_at_debug_level(serve_clients, caplog):
    import logging
    import re

    with caplog.at_level(logging.DEBUG, logger="ralm.serve"):
        assert serve_clients["index"].get("/api/search", params={"q": "Oslo", "k": 2}).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "ralm.serve"]
    assert len(lines) == 1
    assert re.fullmatch(
        r"batch model \('search', 'dense', 2\): 1 requests, oldest waited [0-9.]+ ms, ran [0-9.]+ ms",
        lines[0],
    )
