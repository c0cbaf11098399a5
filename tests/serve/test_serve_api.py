"""`ralm serve`'s JSON API and pages on tiny real artifacts, against the library called directly."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def _as_json(obj):
    return json.loads(json.dumps(obj))


def _hits(res):
    return [int(i) for i in res.ids[0]], [float(s) for s in res.scores[0]]


# ----------------------------------------------------------------------------- info and pages
API_OF_PAGE = {
    "fill": ("POST", "/api/fill", {"text": "a [MASK]"}),
    "generate": ("POST", "/api/generate", {"prefix": "i would"}),
    "ask": ("POST", "/api/ask", {"question": "who?"}),
    "search": ("GET", "/api/search?q=oslo", None),
    "corpus": ("GET", "/api/chunk/0", None),
    "runs": ("GET", "/api/metrics", None),
}


def test_info_says_what_each_target_serves(serve_clients, serve_store):
    want = {
        "realm": (["fill", "search", "corpus", "runs"], ["dense", "bm25", "hybrid"], "[MASK]"),
        "index": (["search", "corpus"], ["dense", "bm25", "hybrid"], None),
        "docstore": (["search", "corpus"], ["bm25"], None),
        "surealm": (["generate", "runs"], [], None),
        "ask": (["ask", "search", "corpus"], ["dense", "bm25", "hybrid"], None),
    }
    from ralm.corpus.docstore import DocStore

    n = len(DocStore(serve_store))
    for kind, (pages, retrievers, mask) in want.items():
        info = serve_clients[kind].get("/api/info").json()
        assert (info["kind"], info["pages"], info["retrievers"], info["mask_token"]) == (
            "index" if kind == "ask" else kind,
            pages,
            retrievers,
            mask,
        )
        assert info["chunks"] == (None if kind == "surealm" else n)
        assert info["caps"] == {
            "query_chars": 1000,
            "k": 100,
            "top": 20,
            "max_new_tokens": 200,
            "beams": 8,
            "ask_k": 20,
        }


def test_every_page_renders_and_others_are_404(serve_clients):
    for c in serve_clients.values():
        pages = c.get("/api/info").json()["pages"]
        r = c.get("/", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].endswith("/" + pages[0])
        for page in ("fill", "generate", "ask", "search", "corpus", "runs"):
            r = c.get(f"/{page}")
            if page in pages:
                assert (
                    r.status_code == 200 and f'id="nav-{page}"' in r.text and 'aria-current="page"' in r.text
                )
                assert (
                    "Content-Security-Policy" in r.headers
                    and r.headers["X-Content-Type-Options"] == "nosniff"
                )
                assert not re.search(r'(src|href)="https?://', r.text)  # nothing from a CDN
            else:
                assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
                assert f"has no {page} page" in r.text
                method, path, body = API_OF_PAGE[page]
                r = c.request(method, path, json=body)
                assert r.status_code == 404 and f"has no {page} page" in r.json()["error"]


def test_openapi_lists_the_endpoints_and_docs_are_served_locally(serve_clients):
    c = serve_clients["realm"]
    spec = c.get("/openapi.json").json()
    assert {p: sorted(m) for p, m in spec["paths"].items()} == {
        "/api/info": ["get"],
        "/api/config": ["get"],
        "/api/metrics": ["get"],
        "/api/search": ["get"],
        "/api/fill": ["post"],
        "/api/chunk/{chunk_id}": ["get"],
        "/api/corpus": ["get"],
        "/api/generate": ["post"],
        "/api/ask": ["post"],
    }
    schemas = spec["components"]["schemas"]
    assert schemas["FillRequest"]["properties"]["text"]["maxLength"] == 1000
    assert schemas["GenerateRequest"]["properties"]["max_new_tokens"]["maximum"] == 200
    docs = c.get("/docs").text
    assert "/static/vendor/swagger-ui/swagger-ui-bundle.js" in docs and "cdn." not in docs
    assert c.get("/static/vendor/swagger-ui/swagger-ui-bundle.js").status_code == 200
    assert c.get("/static/vendor/uplot/uPlot.iife.min.js").status_code == 200


# ----------------------------------------------------------------------------- search
@pytest.mark.parametrize("kind", ["dense", "bm25", "hybrid"])
def test_search_equals_the_retriever_called_directly(serve_clients, serve_index, kind):
    from ralm.retrieval.retriever import Retriever

    opened = Retriever.load(serve_index, kind)
    store, retriever = opened.store, opened.backend
    q = "capital of Norway"
    got = serve_clients["index"].get("/api/search", params={"q": q, "k": 5, "retriever": kind}).json()
    ids, scores = _hits(retriever.search_text([q], 5))
    assert [h["id"] for h in got["results"]] == ids and [h["score"] for h in got["results"]] == scores
    assert [h["rank"] for h in got["results"]] == [1, 2, 3, 4, 5]
    for h in got["results"]:
        row = store.get(h["id"])
        assert (h["title"], h["text"], h["article"], h["position"]) == (
            row["title"],
            row["text"],
            row["article"],
            row["position"],
        )
    if kind == "dense":  # and DenseIndex.search on the query tower's vector, by hand
        q_vec = retriever.encoder.encode_queries([q], autocast=retriever.autocast)
        assert _hits(retriever.index.search(q_vec, 5)) == (ids, scores)


def test_search_highlights_exactly_the_query_words(serve_clients):
    got = (
        serve_clients["index"]
        .get("/api/search", params={"q": "Capital of NORWAY", "k": 21, "retriever": "bm25"})
        .json()
    )
    # the index's BM25 analyses as its DocStore's language (en): "of" is a stopword, stems match
    assert got["terms"] == ["capit", "norway"]
    oslo = next(h for h in got["results"] if h["text"].startswith("Oslo is the capital of Norway."))
    assert oslo["highlights"][:2] == [[12, 19], [23, 29]]  # by hand
    for h in got["results"]:
        words = [(m.start(), m.end()) for m in re.finditer(r"\w+", h["text"])]
        want = [[a, b] for a, b in words if h["text"][a:b].lower() in ("capital", "capitals", "norway")]
        assert h["highlights"] == want


def test_realm_search_uses_the_runs_query_tower_and_index(serve_clients, serve_targets):
    import torch

    run = serve_targets["realm"].realm
    q = "Harald Hardrada was king"
    enc = run.tokenizer([q], return_tensors="pt")
    with torch.no_grad():
        vec = run.model.embed_queries(
            {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        )
    want = _hits(run.refresher.index.search(vec.numpy(), 4))
    got = serve_clients["realm"].get("/api/search", params={"q": q, "k": 4}).json()["results"]
    assert ([h["id"] for h in got], [h["score"] for h in got]) == want


def test_docstore_search_is_bm25_built_in_memory(serve_clients, serve_store):
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.bm25 import BM25Searcher

    want = _hits(BM25Searcher.build(DocStore(serve_store)).search_text(["founded by"], 3))
    got = (
        serve_clients["docstore"]
        .get("/api/search", params={"q": "founded by", "k": 3, "retriever": "bm25"})
        .json()
    )
    assert ([h["id"] for h in got["results"]], [h["score"] for h in got["results"]]) == want
    r = serve_clients["docstore"].get("/api/search", params={"q": "oslo", "retriever": "dense"})
    assert r.status_code == 400 and r.json()["error"] == "retriever 'dense': this docstore offers bm25"


def test_search_caps_and_bad_requests_are_4xx_with_one_line(serve_clients):
    c = serve_clients["index"]
    cases = [
        ({"q": "x" * 1001}, 422, "query parameter q has 1001 characters, over the cap of 1000"),
        ({"q": "oslo", "k": 101}, 422, "query parameter k=101 is over the cap of 100"),
        ({"q": "oslo", "k": 0}, 422, "query parameter k: Input should be greater than or equal to 1"),
        ({"q": "oslo", "k": 22}, 400, "k=22 is more than the 21 chunks of the corpus; ask for at most 21"),
        ({"q": "   "}, 400, "empty query; pass some words to search for"),
        (
            {"q": "oslo", "retriever": "magic"},
            422,
            "query parameter retriever: Input should be 'dense', 'bm25' or 'hybrid'",
        ),
        ({}, 422, "query parameter q: Field required"),
    ]
    for params, status, line in cases:
        r = c.get("/api/search", params=params)
        assert (r.status_code, r.json()["error"], r.json()["status"]) == (status, line, status)


# ----------------------------------------------------------------------------- fill
def test_fill_equals_fill_called_directly(serve_clients, serve_realm):
    from ralm.realm.inference.fill import fill
    from ralm.realm.training.run import load_run

    run = load_run(serve_realm, device="cpu")
    for text, k in [("Oslo is the capital of [MASK].", 3), ("[MASK] is a country in [MASK].", 2)]:
        got = serve_clients["realm"].post("/api/fill", json={"text": text, "k": k, "top": 4}).json()
        want = _as_json(fill(run, text, k=k, top=4).as_dict())
        assert {key: got[key] for key in want} == want
        assert got["null_mass"] == want["docs"][-1]["p_z"] and want["docs"][-1]["chunk_id"] == -1
        assert got["retrieval"] is True and len(got["docs"]) == k
        assert sum(d["p_z"] for d in got["docs"]) == pytest.approx(1.0, abs=1e-5)


def test_fill_on_an_mlm_only_run_is_the_reader_alone(serve_run, tiny_dir, tmp_path):
    from fastapi.testclient import TestClient

    from ralm.realm.inference.fill import fill
    from ralm.realm.training.run import load_run
    from ralm.serve.app import create_app

    run = serve_run(tmp_path / "mlm", mode="mlm", reader=str(tiny_dir), steps=1, reader_max_length=96)
    c = TestClient(create_app(run, device="cpu"), raise_server_exceptions=False)
    info = c.get("/api/info").json()
    assert (info["pages"], info["retrievers"]) == (["fill", "search", "corpus", "runs"], ["bm25"])
    got = c.post("/api/fill", json={"text": "Oslo is the [MASK] of Norway."}).json()
    want = _as_json(fill(load_run(run, device="cpu"), "Oslo is the [MASK] of Norway.").as_dict())
    assert {key: got[key] for key in want} == want and want["docs"] == []
    assert (got["null_mass"], got["retrieval"]) == (None, False)


def test_fill_on_a_causal_reader_run(serve_run, tiny_dir, causal_dirs, tmp_path):
    """A causal-reader run: /api/fill gives ralm.realm.inference.fill's generated spans and p(z|x); the page says so."""
    from fastapi.testclient import TestClient

    from ralm.realm.inference.fill import fill
    from ralm.realm.training.run import load_run
    from ralm.serve.app import create_app

    run = serve_run(
        tmp_path / "causal",
        reader=str(causal_dirs["llama"]),
        retriever=str(tiny_dir),
        steps=1,
        k=3,
        reader_max_length=160,
        refresh_every=0,
    )
    c = TestClient(create_app(run, device="cpu"), raise_server_exceptions=False)
    text = "Oslo is the capital of [MASK] [MASK]."
    got = c.post("/api/fill", json={"text": text, "k": 3, "top": 2}).json()
    want = _as_json(fill(load_run(run, device="cpu"), text, k=3, top=2).as_dict())
    assert {key: got[key] for key in want} == want and got["retrieval"] is True
    assert (
        len(got["prediction"]) == 1 and len(got["docs"]) == 3 and got["null_mass"] == want["docs"][-1]["p_z"]
    )
    assert sum(d["p_z"] for d in got["docs"]) == pytest.approx(1.0, abs=1e-5)
    page = c.get("/fill").text
    assert 'data-testid="fill-causal-note"' in page and "a span should be generated" in page
    r = c.post("/api/fill", json={"text": "no mask"})
    assert (r.status_code, r.json()["error"]) == (
        400,
        "the text has no [MASK]; put [MASK] where a span should be generated",
    )


def test_fill_errors(serve_clients):
    c = serve_clients["realm"]
    cases = [
        (
            {"text": "no mask here"},
            400,
            "the text has no [MASK]; put [MASK] where a token should be predicted",
        ),
        ({"text": "[MASK] " * 200}, 422, "text has 1400 characters, over the cap of 1000"),
        ({"text": "a [MASK]", "k": 101}, 422, "k=101 is over the cap of 100"),
        ({"text": "a [MASK]", "k": 50}, 400, "k=50: choose between 2 and 21"),
        ({"text": "a [MASK]", "top": 21}, 422, "top=21 is over the cap of 20"),
        ({"text": "a [MASK]", "path": "/etc/passwd"}, 422, "unknown field 'path'"),
        ({"k": 3}, 422, "text: Field required"),
    ]
    for body, status, line in cases:
        r = c.post("/api/fill", json=body)
        assert (r.status_code, r.json()["error"]) == (status, line)
    r = c.post("/api/fill", content=b'{"text": "a [MASK]"', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"].startswith("malformed JSON body")
    r = serve_clients["index"].post("/api/fill", json={"text": "a [MASK]"})
    assert r.status_code == 404 and r.json()["error"].startswith("this index directory has no fill page")


# ----------------------------------------------------------------------------- corpus
def test_chunk_equals_docstore_get_with_neighbours_of_the_same_article(serve_clients, serve_store):
    from ralm.corpus.docstore import DocStore

    store = DocStore(serve_store)
    arts = store.articles(["first_chunk", "n_chunks"]).to_pylist()
    first = {
        a["first_chunk"] + j: (a["first_chunk"], a["first_chunk"] + a["n_chunks"] - 1)
        for a in arts
        for j in range(a["n_chunks"])
    }
    for i in range(len(store)):
        got = serve_clients["docstore"].get(f"/api/chunk/{i}").json()
        assert got["chunk"] == _as_json(store.get(i))
        lo, hi = first[i]
        assert (got["prev"], got["next"]) == (i - 1 if i > lo else None, i + 1 if i < hi else None)
    assert any(hi > lo for lo, hi in first.values())  # some article has neighbours to link
    for bad in (len(store), -1):
        r = serve_clients["docstore"].get(f"/api/chunk/{bad}")
        assert r.status_code == 404 and r.json()["error"].startswith(f"chunk id {bad} is unknown")
    assert serve_clients["docstore"].get("/api/chunk/abc").status_code == 422
    assert serve_clients["docstore"].get(f"/corpus/{len(store)}").status_code == 404


def test_xss_chunk_renders_as_text(serve_clients, serve_store, serve_xss):
    from ralm.corpus.docstore import DocStore

    store = DocStore(serve_store)
    i = next(i for i in range(len(store)) if store.get(i)["title"] == serve_xss["title"])
    assert serve_xss["text"].startswith(store.get(i)["text"]) and "<script>" in store.get(i)["text"]
    html = serve_clients["docstore"].get(f"/corpus/{i}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "Mallory &lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold</b>" not in html
    assert html.count("<script") == html.count('<script src="')  # only our own script files
    api = serve_clients["docstore"].get(f"/api/chunk/{i}")
    assert (
        api.headers["content-type"] == "application/json"
        and api.json()["chunk"]["text"] == store.get(i)["text"]
    )
    page = serve_clients["docstore"].get("/search", params={"q": '"><script>alert(3)</script>'}).text
    assert "<script>alert(3)" not in page and "&lt;script&gt;alert(3)" in page


def test_corpus_page_marks_salient_spans_by_source(serve_clients, serve_store):
    from ralm.corpus.docstore import DocStore

    store = DocStore(serve_store)
    html = serve_clients["docstore"].get("/corpus/0").text
    row = store.get(0)
    for s in row["salient"]:
        piece = row["text"][s["start"] : s["end"]]
        assert re.search(rf'<mark class="salient src-{s["source"]}"[^>]*>{re.escape(piece)}</mark>', html)
    assert {s["source"] for s in row["salient"]} >= {"link", "date"}
    assert 'id="legend"' in html and 'id="manifest-summary"' in html and f"chunks       {len(store)}" in html
    summary = serve_clients["docstore"].get("/api/corpus").json()
    assert summary["chunks"] == len(store) and summary["manifest"] == _as_json(store.manifest)


# ----------------------------------------------------------------------------- generate
def test_generate_equals_generate_called_directly(serve_clients, serve_surealm):
    from ralm.surealm.generate import generate
    from ralm.surealm.train import load_trained

    model, tok, store, _ = load_trained(serve_surealm, device="cpu")
    res = generate(model, tok, store, "i would like", max_new_tokens=4)
    got = (
        serve_clients["surealm"]
        .post("/api/generate", json={"prefix": "i would like", "max_new_tokens": 4, "show_entries": 2})
        .json()
    )
    assert got["continuations"] == [
        {"text": t, "token_ids": ids} for t, ids in zip(res.texts, res.token_ids, strict=True)
    ]
    log = res.retriever.log
    assert [s["query"] for s in got["retrievals"]] == [tok.decode(list(r.prefix)) for r in log]
    assert [[e["entry"] for e in s["entries"]] for s in got["retrievals"]] == [
        r.entries[:2].tolist() for r in log
    ]
    for s in got["retrievals"]:
        for e in s["entries"]:
            assert e["sentence"] == store.text(e["sentence_id"])
            assert e["sentence"].startswith(" ".join(x for x in (e["prefix"], e["word"], e["suffix"]) if x))


def test_generate_errors(serve_clients):
    c = serve_clients["surealm"]
    cases = [
        ({"prefix": "i", "max_new_tokens": 201}, 422, "max_new_tokens=201 is over the cap of 200"),
        ({"prefix": "  "}, 400, "the prefix is empty; give the start of a sentence"),
        (
            {"prefix": "i", "num_return": 2},
            400,
            "num_return=2: greedy decoding gives one continuation; use top-p or beam",
        ),
        (
            {"prefix": "i", "strategy": "beam", "num_beams": 2, "num_return": 3},
            400,
            "--num-return 3 is more than --beams 2",
        ),
    ]
    for body, status, line in cases:
        r = c.post("/api/generate", json=body)
        assert (r.status_code, r.json()["error"]) == (status, line)
