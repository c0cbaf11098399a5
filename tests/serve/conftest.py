"""Tiny real artifacts for `ralm serve` tests: a linked DocStore (one chunk holds `<script>` text),
its index directory (dense + BM25), a REALM run on it, and a SUREALM run; apps and live servers.

Fixtures (session-scoped, built once):
  serve_store      DocStore directory (tiny BERT tokenizer, 24-token chunks)
  serve_xss        {"title", "text"} of its article whose chunk holds `<script>` text
  serve_index      index directory of serve_store (tiny BERT towers, BM25 stored)
  serve_realm      REALM run directory on serve_store (2 steps, k=3 with the null document)
  serve_run        factory (per test): serve_run(out, **fields) -> a tiny REALM run on serve_store
  serve_surealm    SUREALM run directory (1 step on the tiny dialogues)
  serve_chat_lm    a random 2-layer Llama with a ChatML byte-level BPE tokenizer (Ask's generator)
  serve_ask        serve_index loaded with serve_chat_lm as its generator (the Ask page)
  serve_targets    {"realm" | "index" | "docstore" | "surealm" | "ask": loaded ralm.serve.loaders.Target}
  serve_clients    {kind: fastapi.testclient.TestClient on create_app(that Target)}
  live_server      factory: live_server("index") -> base URL of uvicorn serving that target on
                   127.0.0.1 and a free port, in a thread (stopped at the end of the session)
  chromium         Debian's Chromium driven by Playwright (one browser per session); where the system
                   has none, the browser tests skip and the run ends with one line saying how to install it
  browser_page     a fresh page of it (own context); `page.problems` collects console errors, page
                   errors, dialogs and failed requests (the tests assert it stays empty)
"""

from __future__ import annotations

import functools
import os
import shutil

import pytest

from testkit import (
    CPU_RUN,
    DIALOGUES,
    chat_llama,
    chatml_tokenizer,
    dialogue_jsonl,
    quiet_store,
    tiny_index,
    train_tiny_surealm,
    unlink,
    write_jsonl,
)

XSS_TITLE = "Mallory <b>bold</b>"
XSS_TEXT = "Mallory wrote <script>alert(1)</script> into the wiki and a <img src=x onerror=alert(2)> tag."

ARTICLES = [
    ("Oslo", "Oslo is the capital of [[Norway]]. It was founded in 1040 by [[Harald Hardrada]]."),
    ("Bergen", "Bergen is a city in [[Norway]] on the west coast. It was founded in 1070 by [[Olav Kyrre]]."),
    (
        "Norway",
        "Norway is a country in [[Scandinavia]]. Its capital is [[Oslo]] and its king is [[Harald V]].",
    ),
    ("Copenhagen", "Copenhagen is the capital of [[Denmark]]. It lies on the island of [[Zealand]]."),
    ("Denmark", "Denmark is a country in [[Scandinavia]]. Its capital is [[Copenhagen]]."),
    ("Stockholm", "Stockholm is the capital of [[Sweden]]. It lies on the [[Baltic Sea]]."),
    (
        "Sweden",
        "Sweden is a country in [[Scandinavia]]. Its capital is [[Stockholm]] and it borders [[Norway]].",
    ),
    ("Helsinki", "Helsinki is the capital of [[Finland]]. It was founded in 1550 by [[Gustav Vasa]]."),
    (XSS_TITLE, XSS_TEXT),
]

# the SUREALM run's dialogues: testkit.DIALOGUES but "room with a view" and "train station"
SERVE_DIALOGUES = DIALOGUES[:7] + DIALOGUES[8:9]


def linked_jsonl(path):
    """ARTICLES as JSONL with link spans ([[x]] -> text x and a link); each text twice, so the
    longer articles take two chunks."""
    rows = []
    for title, marked in ARTICLES:
        text, links = unlink(marked)
        if title != XSS_TITLE:
            n = len(text) + 1
            links += [{**x, "start": x["start"] + n, "end": x["end"] + n} for x in links]
            text = text + " " + text
        rows.append({"title": title, "text": text, "links": links})
    return write_jsonl(path, rows)


@pytest.fixture(scope="session")
def serve_store(tmp_path_factory, tiny_dir):
    tmp = tmp_path_factory.mktemp("serve-corpus")
    quiet_store([linked_jsonl(tmp / "wiki.jsonl")], tmp / "store", 24, tiny_dir, min_chunk_tokens=0)
    return tmp / "store"


@pytest.fixture(scope="session")
def serve_xss():
    return {"title": XSS_TITLE, "text": XSS_TEXT}


@pytest.fixture(scope="session")
def serve_index(serve_store, tiny_dir, tmp_path_factory):
    return tiny_index(serve_store, tmp_path_factory.mktemp("serve-index") / "index", tiny_dir)


# What the tiny REALM runs on serve_store share
SERVE_RUN = dict(
    batch_size=2, encoder_max_length=32, heldout=2, checkpoint_every=0, warmup_steps=1, **CPU_RUN
)


def serve_pretrain(serve_store, out, **fields):
    """A tiny REALM run (SERVE_RUN, `fields` added) on serve_store at `out`: its run directory."""
    from ralm.realm.config import PretrainConfig
    from ralm.realm.training.trainer import pretrain

    return pretrain(
        PretrainConfig(docstore=str(serve_store), out=str(out), **SERVE_RUN, **fields), progress=False
    )


@pytest.fixture(scope="session")
def serve_realm(serve_store, tiny_dir, tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("serve-runs") / "realm"
    return serve_pretrain(
        serve_store, out, reader=str(tiny_dir), steps=2, k=3, reader_max_length=96, refresh_every=0
    )


@pytest.fixture
def serve_run(serve_store):
    """serve_pretrain on serve_store: `serve_run(out, **fields)` -> the run directory."""
    return functools.partial(serve_pretrain, serve_store)


@pytest.fixture(scope="session")
def serve_surealm(tiny_dir, tmp_path_factory):
    import torch

    from ralm.surealm.datastore_build import DatastoreConfig, build_datastore
    from ralm.surealm.sentences import read_sentences

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("serve-surealm")
    sents = read_sentences(
        [dialogue_jsonl(tmp / "dialogues.jsonl", SERVE_DIALOGUES)], fractions=(0.25, 0.0), seed=0
    )
    cfg = DatastoreConfig(
        lm=str(tiny_dir), encoder=str(tiny_dir), m=3, k=3, batch_sentences=8, autocast="off"
    )
    build_datastore(sents, tmp / "ds", cfg, progress=False, log=lambda m: None)
    return train_tiny_surealm(tmp / "ds", tmp / "run", tiny_dir)


@pytest.fixture(scope="session")
def serve_chat_lm(tmp_path_factory):
    """A random 2-layer Llama (hidden 32) on a byte-level BPE with ChatML tokens and template,
    trained on ARTICLES (SmolLM2's layout, as tests/rag's chat LM), saved as a HF directory."""
    import torch

    text = ["Answer the question with a short answer, using the passages. Passage 1: Question:"]
    tok = chatml_tokenizer((text + [f"{t}\n{x}" for t, x in ARTICLES]) * 10)
    d = tmp_path_factory.mktemp("serve-ask") / "chat-llama"
    model = chat_llama(tok)
    # a random tiny LM with tied embeddings echoes its last input token: the prompt's "\n" then the
    # end of turn. With the special tokens' and "\n"'s embeddings (so their logits) 0, answers have words.
    quiet = [tok.convert_tokens_to_ids(t) for t in tok.all_special_tokens] + tok.encode("\n")
    with torch.no_grad():
        model.get_input_embeddings().weight[quiet] = 0
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def serve_ask(serve_index, serve_chat_lm):
    """serve_index with serve_chat_lm as Ask's generator (k=3, rag, 6 new tokens, float32 on the CPU)."""
    import torch

    from ralm.serve.ask import AskConfig
    from ralm.serve.loaders import load_target

    torch.set_num_threads(1)
    cfg = AskConfig(str(serve_chat_lm), k=3, mode="rag", max_new_tokens=6, autocast="off")
    return load_target(serve_index, "cpu", log=lambda m: None, ask=cfg)


@pytest.fixture(scope="session")
def serve_targets(serve_store, serve_index, serve_realm, serve_surealm, serve_ask):
    """Every kind of TARGET, loaded once (CPU); "ask" is the index with a generator."""
    import torch

    from ralm.serve.loaders import load_target

    torch.set_num_threads(1)
    quiet = lambda m: None  # noqa: E731
    return {
        "docstore": load_target(serve_store, "cpu", log=quiet),
        "index": load_target(serve_index, "cpu", log=quiet),
        "realm": load_target(serve_realm, "cpu", log=quiet),
        "surealm": load_target(serve_surealm, "cpu", log=quiet),
        "ask": serve_ask,
    }


@pytest.fixture(scope="session")
def serve_clients(serve_targets):
    """{kind: FastAPI TestClient of that TARGET} (server errors answered, not raised)."""
    from fastapi.testclient import TestClient

    from ralm.serve.app import create_app

    return {k: TestClient(create_app(t), raise_server_exceptions=False) for k, t in serve_targets.items()}


@pytest.fixture(scope="session")
def live_server(serve_targets):
    """live_server(kind) -> "http://127.0.0.1:PORT": uvicorn serving that TARGET from a thread."""
    from ralm.serve.app import ServerThread, create_app

    running: dict[str, ServerThread] = {}

    def start(kind: str) -> str:
        if kind not in running:
            running[kind] = ServerThread(create_app(serve_targets[kind])).start()
        return running[kind].url

    yield start
    for server in running.values():
        server.stop()


# ----------------------------------------------------------------------------- browser
NO_CHROMIUM = (
    "apt-get install chromium (Debian) — the browser tests drive the system Chromium through Playwright"
)
# headless, and nothing that dials out: the machine may have no network, and Chromium's background
# connections (component updates, sync, QUIC probes) would be refused many at a time
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_terminal_summary(terminalreporter) -> None:
    """Say once, at the end of any run, why the browser tests were skipped (unless -rs shows it)."""
    skipped = terminalreporter.stats.get("skipped", [])
    if "s" not in (terminalreporter.config.option.reportchars or "") and any(
        NO_CHROMIUM in str(r.longrepr) for r in skipped
    ):
        terminalreporter.write_line(f"browser tests skipped: {NO_CHROMIUM}")


def system_chromium() -> str | None:
    """The system's Chromium executable (Debian's `chromium` package), or None."""
    for path in (shutil.which("chromium"), "/usr/bin/chromium"):
        if path and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture(scope="session")
def chromium():
    """A headless Chromium (the system's, through Playwright's sync API), shared by the session."""
    path = system_chromium()
    if path is None:
        pytest.skip(NO_CHROMIUM)
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
    sync_api.expect.set_options(timeout=20_000)  # a shared, loaded machine: model calls can be slow
    yield browser
    browser.close()
    pw.stop()


@pytest.fixture
def browser_page(chromium):
    """A new page (own context, 1280x900); `page.problems` lists every console error, uncaught page
    error, dialog (alert/confirm/prompt: dismissed) and request that failed (other than one cut short
    by leaving the page) or got a 4xx/5xx."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []

    def on_console(msg) -> None:
        if msg.type == "error":
            problems.append(f"console error: {msg.text} at {msg.location.get('url')}")

    def on_dialog(dialog) -> None:
        problems.append(f"a {dialog.type} dialog opened: {dialog.message!r}")
        dialog.dismiss()

    def on_response(resp) -> None:
        if resp.status >= 400:
            problems.append(f"HTTP {resp.status} for {resp.request.method} {resp.url}")

    def on_request_failed(req) -> None:
        if "ERR_ABORTED" not in (req.failure or ""):  # not a request cut short by leaving the page
            problems.append(f"request failed: {req.url} ({req.failure})")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("dialog", on_dialog)
    page.on("requestfailed", on_request_failed)
    page.on("response", on_response)
    page.problems = problems
    yield page
    context.close()
