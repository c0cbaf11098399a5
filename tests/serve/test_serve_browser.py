"""`ralm serve` in a real browser: headless Chromium (Debian's, via Playwright) against uvicorn.

What a user sees is checked against the JSON API on the same server (itself checked against the
library in test_serve_api.py): Search's two columns and their highlighted terms, Fill's p(z|x)
bars (rendered widths), marginal and null mass, the `<script>` chunk rendered as text, the Runs
charts following a growing metrics.jsonl, Generate's retrieval steps, Ask's answer and passage
links, the progress indicator.
Every test also fails on any console error, page error, dialog or 4xx/5xx (`page.problems`).
Where the system has no Chromium the module is skipped, and the run ends with one line saying how
to install it (conftest.pytest_terminal_summary).
"""

from __future__ import annotations

import json
import os
import re
import shutil

import httpx
import pytest

NO_CHROMIUM = (
    "apt-get install chromium (Debian) — the browser tests drive the system Chromium through Playwright"
)
if not any(p and os.access(p, os.X_OK) for p in (shutil.which("chromium"), "/usr/bin/chromium")):
    pytest.skip(NO_CHROMIUM, allow_module_level=True)  # one skip for the module; conftest prints the line
pytestmark = pytest.mark.usefixtures("one_thread")

expect = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)").expect

# [rendered width / bar width, style width / 100] of each fill-doc's p(z|x) bar
BAR_RATIOS = """els => els.map((li) => {
  const bar = li.querySelector('[data-testid="pz-bar"]'), fill = bar.querySelector('.bar-fill');
  return [fill.getBoundingClientRect().width / bar.clientWidth, parseFloat(fill.style.width) / 100];
})"""
SCRIPT_SRCS = "() => Array.from(document.querySelectorAll('script'), (s) => s.getAttribute('src'))"


def number_in(text: str) -> float:
    """The number at the end of a label like 'p(z|x) = 0.292' or 'p(y|x) = 1.23e-4'."""
    return float(re.search(r"=\s*([-+0-9.e]+)", text).group(1))


def assert_clean(page) -> None:
    assert page.problems == [], "\n".join(page.problems)


# ----------------------------------------------------------------------------- search
def test_search_shows_dense_and_bm25_side_by_side_with_hits_marked(browser_page, live_server):
    page, url = browser_page, live_server("index")
    page.goto(f"{url}/search")
    page.get_by_test_id("search-q").fill("Capital of NORWAY")
    page.get_by_test_id("search-k").fill("5")
    page.get_by_test_id("search-retriever").select_option("both")
    page.get_by_test_id("search-submit").click()
    for retriever in ("dense", "bm25"):
        column = page.get_by_test_id(f"results-{retriever}")
        expect(column).to_be_visible()
        results = column.get_by_test_id("result")
        expect(results).to_have_count(5)
        want = httpx.get(
            f"{url}/api/search", params={"q": "Capital of NORWAY", "k": 5, "retriever": retriever}
        )
        want = want.json()["results"]
        shown = results.evaluate_all(
            "els => els.map((e) => [Number(e.dataset.chunkId), Number(e.dataset.score)])"
        )
        assert shown == [[h["id"], h["score"]] for h in want]
        assert column.get_by_test_id("result-title").all_text_contents() == [h["title"] for h in want]
        assert column.get_by_test_id("result-text").all_text_contents() == [h["text"] for h in want]
        scores = [
            float(t.removeprefix("score ")) for t in column.get_by_test_id("result-score").all_text_contents()
        ]
        assert scores == pytest.approx([h["score"] for h in want], abs=5.1e-4)  # shown to 3 decimals
        for i, h in enumerate(want):
            marks = results.nth(i).locator("mark.hit").all_text_contents()
            assert marks == [h["text"][s:e] for s, e in h["highlights"]]
            assert {m.lower() for m in marks} <= {"capital", "of", "norway"}
        assert results.locator("mark.hit").count() > 0
    expect(page.get_by_test_id("results-hybrid")).to_be_hidden()
    assert "q=Capital+of+NORWAY" in page.url and "retriever=both" in page.url  # shareable
    # the link under a title opens that chunk in the corpus browser
    first = page.get_by_test_id("results-bm25").get_by_test_id("result-title").first
    title = first.text_content()
    first.click()
    expect(page.get_by_test_id("chunk-title")).to_have_text(title)
    assert_clean(page)


# ----------------------------------------------------------------------------- fill
def test_fill_shows_pz_bars_the_marginal_and_the_null_mass(browser_page, live_server):
    page, url = browser_page, live_server("realm")
    page.goto(f"{url}/fill")
    text = "Oslo is the capital of [MASK]."
    page.get_by_test_id("fill-text").fill(text)
    page.get_by_test_id("fill-top").fill("4")
    page.get_by_test_id("fill-submit").click()
    expect(page.get_by_test_id("fill-results")).to_be_visible()
    want = httpx.post(f"{url}/api/fill", json={"text": text, "k": 3, "top": 4}).json()
    docs = page.get_by_test_id("fill-doc")
    expect(docs).to_have_count(len(want["docs"]))
    assert len(want["docs"]) == 3 and want["docs"][-1]["chunk_id"] == -1

    # the marginal prediction p(y|x) and the null document's mass
    assert page.get_by_test_id("marginal-token").all_text_contents() == want["prediction"]
    assert number_in(page.get_by_test_id("marginal-p").text_content()) == pytest.approx(want["p_y"], rel=5e-3)
    null = page.get_by_test_id("fill-null-mass")
    assert float(null.get_attribute("data-value")) == want["null_mass"]
    assert number_in(null.text_content()) == pytest.approx(want["null_mass"], abs=5e-4)
    alternatives = page.locator("#fill-alternatives tr .token").all_text_contents()
    assert alternatives == [tok for tok, _ in want["alternatives"][0]]

    # one entry per retrieved document, in order: p(z|x) as a bar as wide as p(z|x), p(y|z,x)
    attrs = docs.evaluate_all("els => els.map((e) => [Number(e.dataset.chunkId), Number(e.dataset.pz)])")
    assert attrs == [[d["chunk_id"], d["p_z"]] for d in want["docs"]]
    ratios = docs.evaluate_all(BAR_RATIOS)
    for (rendered, styled), d in zip(ratios, want["docs"], strict=True):
        assert rendered == pytest.approx(d["p_z"], abs=1e-3) and styled == pytest.approx(d["p_z"], abs=1e-6)
    assert sum(r for r, _ in ratios) == pytest.approx(1.0, abs=3e-3)
    pz = [number_in(t) for t in docs.get_by_test_id("pz").all_text_contents()]
    assert pz == pytest.approx([d["p_z"] for d in want["docs"]], abs=5e-4)
    titles = docs.get_by_test_id("doc-title").all_text_contents()
    assert titles == [d["title"] if d["chunk_id"] >= 0 else "(null document)" for d in want["docs"]]
    for i, d in enumerate(want["docs"]):
        pred = docs.nth(i).get_by_test_id("doc-prediction")
        assert pred.locator(".token").all_text_contents() == d["prediction"]
        assert number_in(pred.text_content()) == pytest.approx(d["p_y"], rel=5e-3)
    # a document's title links to its chunk in the corpus browser
    docs.first.get_by_test_id("doc-title").click()
    expect(page).to_have_url(f"{url}/corpus/{want['docs'][0]['chunk_id']}")
    expect(page.get_by_test_id("chunk-title")).to_have_text(want["docs"][0]["title"])
    assert_clean(page)


def test_fill_keeps_text_k_and_top_in_the_url(browser_page, live_server):
    from urllib.parse import parse_qs, urlsplit

    page, url = browser_page, live_server("realm")
    text = "Bergen is a city in [MASK]."
    page.goto(f"{url}/fill?" + str(httpx.QueryParams({"text": text, "k": 2, "top": 3})))
    expect(page.get_by_test_id("fill-results")).to_be_visible()  # a shared link fills at once
    expect(page.get_by_test_id("fill-text")).to_have_value(text)
    expect(page.get_by_test_id("fill-k")).to_have_value("2")
    expect(page.get_by_test_id("fill-top")).to_have_value("3")
    want = httpx.post(f"{url}/api/fill", json={"text": text, "k": 2, "top": 3}).json()
    expect(page.get_by_test_id("fill-doc")).to_have_count(2)
    assert page.get_by_test_id("marginal-token").all_text_contents() == want["prediction"]
    assert page.locator("#fill-alternatives tr .token").all_text_contents() == [
        t for t, _ in want["alternatives"][0]
    ]

    # another text: the URL follows the form
    other = "Oslo is the capital of [MASK]."
    page.get_by_test_id("fill-text").fill(other)
    page.get_by_test_id("fill-top").fill("4")
    page.get_by_test_id("fill-submit").click()
    want = httpx.post(f"{url}/api/fill", json={"text": other, "k": 2, "top": 4}).json()
    expect(page.locator("#fill-alternatives tr .token")).to_have_count(4)
    assert page.get_by_test_id("marginal-token").all_text_contents() == want["prediction"]
    assert parse_qs(urlsplit(page.url).query) == {"text": [other], "k": ["2"], "top": ["4"]}
    assert urlsplit(page.url).path == "/fill"
    assert_clean(page)


def test_progress_shows_while_a_request_computes(browser_page, live_server, serve_targets):
    page, url = browser_page, live_server("realm")
    page.goto(f"{url}/fill")
    progress, button = page.get_by_test_id("progress"), page.get_by_test_id("fill-submit")
    expect(progress).to_be_hidden()
    lock = serve_targets["realm"].model_lock  # the server's model: holding it keeps the fill waiting
    lock.acquire()
    try:
        button.click()
        expect(progress).to_be_visible()
        expect(button).to_be_disabled()
        page.wait_for_timeout(300)
        expect(page.get_by_test_id("fill-results")).to_be_hidden()
        expect(progress).to_be_visible()
    finally:
        lock.release()
    expect(page.get_by_test_id("fill-results")).to_be_visible()
    expect(progress).to_be_hidden()
    expect(button).to_be_enabled()
    assert_clean(page)


def test_an_api_error_is_shown_in_one_line(browser_page, live_server):
    page, url = browser_page, live_server("realm")
    page.goto(f"{url}/fill")
    page.get_by_test_id("fill-text").fill("no mask here")
    page.get_by_test_id("fill-submit").click()
    want = httpx.post(f"{url}/api/fill", json={"text": "no mask here", "k": 3, "top": 5}).json()["error"]
    expect(page.get_by_test_id("error")).to_have_text(want)
    expect(page.get_by_test_id("fill-results")).to_be_hidden()
    expect(page.get_by_test_id("progress")).to_be_hidden()
    # the browser logs the 400 itself; nothing else went wrong
    assert len(page.problems) == 2 and all("400" in p for p in page.problems), page.problems


# ----------------------------------------------------------------------------- XSS
def test_a_script_in_the_corpus_renders_as_text(browser_page, live_server, serve_store, serve_xss):
    from ralm.corpus.docstore import DocStore

    store = DocStore(serve_store)
    ids = [i for i in range(len(store)) if store.get(i)["title"] == serve_xss["title"]]
    texts = [store.get(i)["text"] for i in ids]
    assert "<script>alert(1)</script>" in texts[0] and "onerror=alert(2)>" in " ".join(texts)
    page, url = browser_page, live_server("docstore")

    for i, stored in zip(ids, texts, strict=True):
        page.goto(f"{url}/corpus/{i}")
        expect(page.get_by_test_id("chunk-title")).to_have_text(serve_xss["title"])
        assert page.get_by_test_id("chunk-text").text_content() == stored
        assert page.locator("#chunk-title b, #chunk-text script, #chunk-text img, main img").count() == 0
        assert page.evaluate(SCRIPT_SRCS) == ["/static/common.js"]  # only the app's own scripts

    page.goto(f"{url}/search")
    page.get_by_test_id("search-q").fill("Mallory wrote into the wiki")
    page.get_by_test_id("search-submit").click()
    hit = page.get_by_test_id("result").filter(has_text="Mallory wrote")
    expect(hit).to_have_count(1)
    expect(hit.get_by_test_id("result-title")).to_have_text(serve_xss["title"])
    assert hit.get_by_test_id("result-text").text_content() == texts[0]
    assert page.locator("#search-results script, #search-results img, #search-results b").count() == 0
    assert page.evaluate(SCRIPT_SRCS) == ["/static/common.js", "/static/search.js"]

    # a query carrying markup comes back in the form as text, and is searched for as text
    evil = '"><script>alert(3)</script><img src=x onerror=alert(4)>'
    page.goto(f"{url}/search?" + str(httpx.QueryParams({"q": evil})))
    expect(page.get_by_test_id("search-q")).to_have_value(evil)
    expect(page.get_by_test_id("results-bm25")).to_be_visible()
    assert page.evaluate(SCRIPT_SRCS) == ["/static/common.js", "/static/search.js"]
    page.wait_for_timeout(200)  # time for any injected handler to fire
    assert_clean(page)  # no dialog opened, no CSP violation logged


def test_fill_shows_a_script_chunk_as_text(browser_page, live_server, serve_xss):
    page, url = browser_page, live_server("realm")
    n = httpx.get(f"{url}/api/info").json()["chunks"]
    page.goto(f"{url}/fill")
    page.get_by_test_id("fill-k").fill(str(n + 1))  # every chunk and the null document
    page.get_by_test_id("fill-submit").click()
    doc = page.get_by_test_id("fill-doc").filter(has_text="Mallory wrote")
    expect(doc).to_have_count(1)
    expect(doc.get_by_test_id("doc-title")).to_have_text(serve_xss["title"])
    assert "<script>alert(1)</script>" in doc.locator(".doc-text").text_content()
    assert page.locator("#fill-docs script, #fill-docs img, #fill-docs b").count() == 0
    page.wait_for_timeout(200)
    assert_clean(page)


# ----------------------------------------------------------------------------- runs
def test_runs_page_draws_the_curves_and_follows_new_rows(browser_page, serve_realm, tmp_path):
    from ralm.serve.app import ServerThread, create_app

    rows = [json.loads(line) for line in (serve_realm / "metrics.jsonl").read_text().splitlines()]
    assert {"loss", "ppl", "utility_1", "null_mass"} <= set(rows[-1])  # what a REALM run logs
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    last = rows[-1]["step"]
    page = browser_page
    with ServerThread(create_app(tmp_path)) as server:  # a run being written (only metrics.jsonl)
        page.goto(f"{server.url}/runs")
        status = page.get_by_test_id("run-status")
        expect(status).to_have_attribute("data-state", "training")
        expect(status).to_contain_text(f"step {last}")
        for name in ("loss", "ppl", "utility", "null"):
            expect(page.locator(f"#chart-{name} canvas")).to_have_count(1)
        expect(page.get_by_test_id("chart-empty")).to_have_count(0)
        legend = page.locator("#chart-utility .u-legend .u-series .u-label").all_text_contents()
        assert legend == ["step"] + sorted(k for k in rows[-1] if k.startswith("utility_"))
        # hover: the legend shows the value under the cursor
        over = page.locator("#chart-loss .u-over")
        box = over.bounding_box()
        page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
        value = page.locator("#chart-loss .u-legend .u-series").nth(1).locator(".u-value")
        expect(value).to_have_text(f"{rows[-1]['loss']:.3f}")

        canvas = page.locator("#chart-loss canvas")
        before = canvas.evaluate("c => c.toDataURL()")
        new = {**rows[-1], "step": last + 1, "loss": rows[-1]["loss"] / 2, "ppl": rows[-1]["ppl"] / 2}
        with (tmp_path / "metrics.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(new) + "\n")
        expect(status).to_contain_text(f"step {last + 1}")  # picked up by polling, no reload
        page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)
        expect(value).to_have_text(f"{new['loss']:.3f}")
        assert canvas.evaluate("c => c.toDataURL()") != before
    assert_clean(page)


# ----------------------------------------------------------------------------- generate
def test_generate_shows_the_continuation_and_each_retrieval(browser_page, live_server):
    page, url = browser_page, live_server("surealm")
    page.goto(f"{url}/generate")
    prefix = "i would like to"
    page.get_by_test_id("gen-prefix").fill(prefix)
    page.get_by_test_id("gen-max-new").fill("4")
    page.get_by_test_id("gen-strategy").select_option("greedy")
    page.get_by_test_id("gen-submit").click()
    expect(page.get_by_test_id("gen-results")).to_be_visible()
    body = {
        "prefix": prefix,
        "max_new_tokens": 4,
        "strategy": "greedy",
        "top_p": 0.9,
        "num_beams": 4,
        "seed": 0,
    }
    want = httpx.post(f"{url}/api/generate", json=body).json()
    assert want["retrieval"] is True and len(want["retrievals"]) >= 1
    continuation = page.get_by_test_id("continuation")
    expect(continuation).to_have_count(1)
    assert continuation.locator("strong").text_content() == want["continuations"][0]["text"]
    assert continuation.text_content() == f"{prefix} {want['continuations'][0]['text']}"
    steps = page.get_by_test_id("retrieval-step")
    expect(steps).to_have_count(len(want["retrievals"]))
    for i, r in enumerate(want["retrievals"]):
        step = steps.nth(i)
        assert f"“{r['query']}”" in step.locator(".query").text_content()
        entries = step.get_by_test_id("retrieved-entry")
        assert entries.evaluate_all("els => els.map((e) => Number(e.dataset.entry))") == [
            e["entry"] for e in r["entries"]
        ]
        assert entries.locator(".word").all_text_contents() == [e["word"] for e in r["entries"]]
    assert_clean(page)


# ----------------------------------------------------------------------------- ask
def test_ask_shows_the_answer_and_the_passages_linking_to_their_chunks(browser_page, live_server):
    page, url = browser_page, live_server("ask")
    page.goto(f"{url}/ask")
    question = "Who founded Oslo?"
    page.get_by_test_id("ask-q").fill(question)
    page.get_by_test_id("ask-k").fill("4")
    page.get_by_test_id("ask-retriever").select_option("bm25")
    page.get_by_test_id("ask-submit").click()
    expect(page.get_by_test_id("ask-results")).to_be_visible()
    body = {"question": question, "k": 4, "mode": "rag", "retriever": "bm25"}
    want = httpx.post(f"{url}/api/ask", json=body, timeout=60).json()
    assert want["answer"].strip() and len(want["passages"]) == 4
    expect(page.get_by_test_id("ask-answer")).to_have_text(want["answer"])
    passages = page.get_by_test_id("ask-passage")
    expect(passages).to_have_count(4)
    shown = passages.evaluate_all(
        "els => els.map((e) => [Number(e.dataset.rank), Number(e.dataset.chunkId), Number(e.dataset.score)])"
    )
    assert shown == [[p["rank"], p["id"], p["score"]] for p in want["passages"]]
    titles = passages.get_by_test_id("passage-title")
    assert titles.all_text_contents() == [p["title"] for p in want["passages"]]
    assert passages.get_by_test_id("passage-text").all_text_contents() == [
        p["text"] for p in want["passages"]
    ]
    scores = [
        float(t.removeprefix("score ")) for t in passages.get_by_test_id("passage-score").all_text_contents()
    ]
    assert scores == pytest.approx([p["score"] for p in want["passages"]], abs=5.1e-4)  # shown to 3 decimals
    assert [titles.nth(i).get_attribute("href") for i in range(4)] == [
        f"/corpus/{p['id']}" for p in want["passages"]
    ]
    assert page.get_by_test_id("ask-prompt").text_content() == want["prompt"]
    assert "q=Who+founded+Oslo%3F" in page.url and "retriever=bm25" in page.url  # shareable
    # a passage's title opens its chunk in the corpus browser
    second = want["passages"][1]
    titles.nth(1).click()
    expect(page.get_by_test_id("chunk-title")).to_have_text(second["title"])
    expect(page.locator("#chunk-id")).to_have_text(str(second["id"]))
    assert page.get_by_test_id("chunk-text").text_content() == second["text"]
    # back to the shared link: the form is filled in and run again
    page.go_back()
    expect(page.get_by_test_id("ask-answer")).to_have_text(want["answer"])
    expect(page.get_by_test_id("ask-retriever")).to_have_value("bm25")
    assert_clean(page)


def test_ask_errors_show_in_one_line(browser_page, live_server):
    page, url = browser_page, live_server("ask")
    page.goto(f"{url}/ask")
    page.get_by_test_id("ask-q").fill("   ")  # whitespace passes `required`; the server refuses it
    page.get_by_test_id("ask-submit").click()
    expect(page.get_by_test_id("error")).to_have_text("empty question; type a question")
    expect(page.get_by_test_id("ask-results")).to_be_hidden()
    assert len(page.problems) == 2 and all("400" in p for p in page.problems), page.problems


# ----------------------------------------------------------------------------- every page
@pytest.mark.parametrize("kind", ["realm", "index", "docstore", "surealm", "ask"])
def test_every_page_loads_without_console_errors(browser_page, live_server, kind):
    page, url = browser_page, live_server(kind)
    pages = httpx.get(f"{url}/api/info").json()["pages"]
    for name in [*pages, "docs"]:
        page.goto(f"{url}/{name}")
        if name == "runs":  # its script's first poll has come back
            expect(page.get_by_test_id("run-status")).to_have_attribute("data-state", re.compile("."))
        if name != "docs":
            expect(page.get_by_test_id(f"nav-{name}")).to_have_attribute("aria-current", "page")
            expect(page.get_by_test_id("progress")).to_be_hidden()
            expect(page.get_by_test_id("error")).to_be_hidden()
            assert [a.get_attribute("id") for a in page.locator("#nav a").all()] == [
                f"nav-{p}" for p in [*pages, "docs"]
            ]
        else:
            expect(page.locator(".swagger-ui .opblock").first).to_be_visible()  # Swagger UI, served locally
    assert_clean(page)
