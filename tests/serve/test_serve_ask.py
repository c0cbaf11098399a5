"""Ask in `ralm serve` (`--generator`): /api/ask against `Asker.ask` and the retriever called
directly, its errors, one question at a time on the generator's queue, the page, the CLI options."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from ralm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTION = "Who founded Oslo?"
KEYS = [
    "question",
    "answer",
    "mode",
    "retriever",
    "passages",
    "prompt",
    "retrieve_seconds",
    "generate_seconds",
]


@pytest.fixture(scope="module")
def client(serve_ask):
    from fastapi.testclient import TestClient

    from ralm.serve.app import create_app

    return TestClient(create_app(serve_ask), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def lm(serve_chat_lm):
    """The generator, loaded again here (the library's own copy, not the server's)."""
    from ralm.frozen.lm import load_frozen_lm

    return load_frozen_lm(serve_chat_lm, device="cpu", autocast="off")


def _retriever(serve_index, kind: str):
    from ralm.retrieval.retriever import Retriever

    opened = Retriever.load(serve_index, kind)
    return opened.store, opened.backend


# ----------------------------------------------------------------------------- answers
@pytest.mark.parametrize(
    ("mode", "retriever", "k"),
    [("rag", "dense", 3), ("rag", "bm25", 2), ("replug", "bm25", 3), ("rag", "hybrid", 4)],
)
def test_ask_equals_asker_called_directly(client, lm, serve_index, mode, retriever, k):
    from ralm.rag.ask import Asker

    store, r = _retriever(serve_index, retriever)
    want = Asker(lm, r, store, k=k, mode=mode, max_new_tokens=6).ask(QUESTION).as_dict()
    got = client.post("/api/ask", json={"question": QUESTION, "k": k, "mode": mode, "retriever": retriever})
    assert got.status_code == 200, got.text
    got = got.json()
    assert list(got) == KEYS
    assert got["answer"] == want["answer"] and got["answer"].strip() != ""
    assert (got["question"], got["mode"], got["retriever"], got["prompt"]) == (
        QUESTION,
        mode,
        retriever,
        want["prompt"],
    )
    assert [{key: p[key] for key in ("id", "score", "title", "text")} for p in got["passages"]] == want[
        "passages"
    ]
    assert got["retrieve_seconds"] >= 0 and got["generate_seconds"] > 0


def test_passages_are_the_retrievers_top_k_in_rank_order_with_links(client, serve_index):
    for kind in ("dense", "bm25"):
        store, r = _retriever(serve_index, kind)
        res = r.search_text([QUESTION], 3)
        ids, scores = [int(i) for i in res.ids[0]], [float(s) for s in res.scores[0]]
        assert all(s > 0 for s in scores)  # no BM25 hit without a query term is left out
        got = client.post("/api/ask", json={"question": QUESTION, "retriever": kind}).json()["passages"]
        assert got == [
            {
                "rank": rank,
                "id": i,
                "score": s,
                "title": store.get(i)["title"],
                "text": store.get(i)["text"],
                "url": f"/corpus/{i}",
            }
            for rank, (i, s) in enumerate(zip(ids, scores, strict=True), start=1)
        ]
        page = client.get(got[0]["url"])  # the link opens the chunk in the corpus browser
        assert (
            page.status_code == 200
            and f'data-testid="chunk-title">{store.get(ids[0])["title"]}<' in page.text
        )


def test_defaults_come_from_the_serve_options(client, lm, serve_index):
    """No k, mode or retriever: --ask-k (3), --ask-mode (rag), the first retriever (dense)."""
    from ralm.rag.ask import Asker

    store, r = _retriever(serve_index, "dense")
    want = Asker(lm, r, store, k=3, mode="rag", max_new_tokens=6).ask(QUESTION).as_dict()
    got = client.post("/api/ask", json={"question": "  " + QUESTION + "\n"}).json()
    assert (got["question"], got["mode"], got["retriever"], len(got["passages"])) == (
        QUESTION,
        "rag",
        "dense",
        3,
    )
    assert (got["answer"], got["prompt"]) == (want["answer"], want["prompt"])


def test_closed_book_gives_no_passages(client, lm):
    from ralm.rag.ask import Asker

    want = Asker(lm, mode="closed-book", max_new_tokens=6).ask(QUESTION).as_dict()
    got = client.post(
        "/api/ask", json={"question": QUESTION, "mode": "closed-book", "retriever": "bm25"}
    ).json()
    assert (got["passages"], got["retriever"], got["answer"], got["prompt"]) == (
        [],
        None,
        want["answer"],
        want["prompt"],
    )
    assert "Passage" not in got["prompt"]


# ----------------------------------------------------------------------------- errors
def test_ask_errors_are_4xx_with_one_line(client, serve_clients):
    cases = [
        ({"question": "   "}, 400, "empty question; type a question"),
        ({"question": "x" * 1001}, 422, "question has 1001 characters, over the cap of 1000"),
        ({"question": QUESTION, "k": 0}, 422, "k: Input should be greater than or equal to 1"),
        ({"question": QUESTION, "k": 21}, 422, "k=21 is over the cap of 20"),
        (
            {"question": QUESTION, "k": "three"},
            422,
            "k: Input should be a valid integer, unable to parse string as an integer",
        ),
        (
            {"question": QUESTION, "mode": "oracle"},
            422,
            "mode: Input should be 'rag', 'replug' or 'closed-book'",
        ),
        (
            {"question": QUESTION, "retriever": "magic"},
            422,
            "retriever: Input should be 'dense', 'bm25' or 'hybrid'",
        ),
        ({"question": QUESTION, "top": 3}, 422, "unknown field 'top'"),
        ({"k": 3}, 422, "question: Field required"),
    ]
    for body, status, line in cases:
        r = client.post("/api/ask", json=body)
        assert (r.status_code, r.json()["error"], r.json()["status"]) == (status, line, status)
    for kind in ("index", "docstore", "realm"):  # served without --generator
        r = serve_clients[kind].post("/api/ask", json={"question": QUESTION})
        assert r.status_code == 404
        assert r.json()["error"].endswith(
            "has no ask page (ask needs a generator: start `ralm serve` on a REALM run, an index directory "
            "or a DocStore with --generator LM (smollm2, a causal LM directory or a .gguf file)); it has: "
            + ", ".join(serve_clients[kind].get("/api/info").json()["pages"])
        )
        assert serve_clients[kind].get("/ask").status_code == 404


def test_k_over_the_corpus_and_a_retriever_not_served_are_400(tmp_path, tiny_dir, serve_chat_lm):
    from fastapi.testclient import TestClient

    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.serve.app import create_app
    from ralm.serve.ask import AskConfig
    from ralm.serve.loaders import load_target

    (tmp_path / "two.jsonl").write_text(
        '{"title": "Oslo", "text": "Oslo was founded by Harald."}\n{"title": "Bergen", "text": "Bergen is wet."}\n',
        encoding="utf-8",
    )
    build_docstore(
        [tmp_path / "two.jsonl"],
        tmp_path / "store",
        BuildConfig(tokenizer=str(tiny_dir)),
        progress=False,
        log=lambda m: None,
    )
    cfg = AskConfig(str(serve_chat_lm), k=2, max_new_tokens=2, autocast="off")
    t = load_target(tmp_path / "store", "cpu", ask=cfg)  # a DocStore: BM25 only, 2 chunks
    c = TestClient(create_app(t), raise_server_exceptions=False)
    for body, line in [
        ({"retriever": "dense"}, "retriever 'dense': this docstore offers bm25"),
        ({"k": 3}, "k=3 is more than the 2 chunks of the corpus; ask for at most 2"),
    ]:
        r = c.post("/api/ask", json={"question": QUESTION, **body})
        assert (r.status_code, r.json()["error"]) == (400, line)
    got = c.post("/api/ask", json={"question": QUESTION}).json()
    assert (got["retriever"], [p["title"] for p in got["passages"]]) == ("bm25", ["Oslo"])  # BM25 0: left out


# ----------------------------------------------------------------------------- one at a time
def test_questions_run_one_at_a_time_and_searches_do_not_wait(serve_ask, lm, serve_index):
    """The test holds the generator's lock: the first question blocks in its generation, the others
    wait in the generator queue, a search still answers; then each gets its own answer."""
    from ralm.rag.ask import Asker
    from ralm.serve.app import ServerThread, create_app

    questions = [QUESTION, "Where is Stockholm?", "What is the capital of Norway?"]
    with ServerThread(create_app(serve_ask)) as server, ThreadPoolExecutor(4) as pool:

        def queue() -> dict:
            return httpx.get(f"{server.url}/api/info").json()["batching"]["queues"]["generator"]

        def wait_for(cond, what: str) -> None:
            deadline = time.monotonic() + 60
            while not cond(queue()):
                assert time.monotonic() < deadline, f"never reached: {what}; last {queue()}"
                time.sleep(0.02)

        post = lambda q: httpx.post(f"{server.url}/api/ask", json={"question": q}, timeout=120)  # noqa: E731
        serve_ask.generator_lock.acquire()
        try:
            first = pool.submit(post, questions[0])
            wait_for(lambda q: q["running"] == 1, "the first question generating")
            rest = [pool.submit(post, q) for q in questions[1:]]
            wait_for(lambda q: q["waiting"] == 2, "two questions waiting")
            search = httpx.get(
                f"{server.url}/api/search", params={"q": "Oslo", "retriever": "bm25"}, timeout=60
            )
            assert search.status_code == 200 and queue()["waiting"] == 2 and queue()["running"] == 1
        finally:
            serve_ask.generator_lock.release()
        answers = [f.result().json() for f in [first, *rest]]
        store, r = _retriever(serve_index, "dense")
        for q, got in zip(questions, answers, strict=True):
            want = Asker(lm, r, store, k=3, max_new_tokens=6).ask(q).as_dict()
            assert (got["question"], got["answer"], [p["id"] for p in got["passages"]]) == (
                q,
                want["answer"],
                [p["id"] for p in want["passages"]],
            )
        assert queue() == {
            "waiting": 0,
            "running": 0,
            "batches": 3,
            "requests": 3,
            "dropped": 0,
            "rejected": 0,
            "batch_sizes": {"1": 3},
        }


# ----------------------------------------------------------------------------- info, page, docs
def test_info_openapi_and_page(client, serve_chat_lm):
    info = client.get("/api/info").json()
    assert info["pages"] == ["ask", "search", "corpus"]
    assert info["generator"] == {
        "name": str(serve_chat_lm),
        "device": "cpu",
        "dtype": "float32",
        "backend": "torch",
        "mode": "rag",
        "k": 3,
        "max_new_tokens": 6,
    }
    assert "generator" in info["batching"]["queues"] and info["caps"]["ask_k"] == 20
    spec = client.get("/openapi.json").json()
    assert sorted(spec["paths"]["/api/ask"]) == ["post"]
    assert spec["components"]["schemas"]["AskRequest"]["properties"]["k"]["anyOf"][0]["maximum"] == 20
    assert set(spec["components"]["schemas"]["AskResponse"]["properties"]) == set(KEYS)
    page = client.get(
        "/ask", params={"q": "Who <b>founded</b> Oslo?", "k": 99, "mode": "replug", "retriever": "bm25"}
    )
    assert page.status_code == 200 and 'id="nav-ask"' in page.text and 'aria-current="page"' in page.text
    assert 'value="Who &lt;b&gt;founded&lt;/b&gt; Oslo?"' in page.text
    assert re.search(r'id="ask-k"[^>]*max="20"\s+value="20"', page.text)  # k=99: capped
    assert '<option value="replug" selected>' in page.text and '<option value="bm25" selected>' in page.text
    assert client.get("/", follow_redirects=False).headers["location"] == "/ask"


# ----------------------------------------------------------------------------- CLI
def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ralm: error: "), err
    return err[0]


def test_cli_generator_options(capsys, monkeypatch, serve_store, serve_surealm, serve_chat_lm, tiny_dir):
    from fastapi.testclient import TestClient

    served = []

    def record(app, sock, log_level="info"):
        served.append((app, sock.getsockname()[1]))
        sock.close()

    monkeypatch.setattr("ralm.serve.cli.run_server", record)
    lm = str(serve_chat_lm)
    args = ["serve", str(serve_store), "--port", "0", "--device", "cpu", "--generator-autocast", "off"]
    assert main([*args, "--generator", lm, "--ask-k", "2", "--ask-mode", "closed-book"]) == 0
    assert "(ask, search, corpus)" in capsys.readouterr().err
    app, port = served[-1]
    c = TestClient(app, base_url=f"http://127.0.0.1:{port}")
    assert c.get("/api/info").json()["generator"] == {
        "name": lm,
        "device": "cpu",
        "dtype": "float32",
        "backend": "torch",
        "mode": "closed-book",
        "k": 2,
        "max_new_tokens": 32,
    }
    assert c.post("/api/ask", json={"question": QUESTION}).json()["passages"] == []
    # the first answer says, once, why `auto` decodes in torch (llama-cpp-python not installed, or
    # installed and this model without a GGUF file)
    said = capsys.readouterr().err
    assert said.startswith("backend auto: torch (") and said.count("\n") == 1
    cases = [
        ([*args, "--generator", lm, "--ask-k", "0"], "--ask-k 0: choose 1 to 20 passages"),
        (
            [*args, "--generator", lm, "--ask-max-new-tokens", "201"],
            "--ask-max-new-tokens 201: choose 1 to 200",
        ),
        (
            [*args, "--generator-gguf-file", "x.gguf"],
            "--generator-gguf-file names a file of the generator; give --generator LM too",
        ),
        (
            [*args, "--generator", str(tiny_dir)],
            f"{tiny_dir}: BertModel is not a causal LM (no next-token head)",
        ),
        (
            ["serve", str(serve_surealm), "--port", "0", "--generator", lm],
            f"{serve_surealm}: --generator needs a corpus to retrieve from; serve a REALM run, an index directory or a DocStore with it",
        ),
    ]
    for argv, line in cases:
        assert main(argv) == 2
        assert line in _one_error_line(capsys)
