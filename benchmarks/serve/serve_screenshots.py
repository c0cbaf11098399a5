"""Screenshots of `ralm serve` for the README: docs/serve-{fill,search,corpus,generate,runs}.png.

Not part of the test run: `python -m benchmarks.serve.serve_screenshots` (or `make screenshots`).
Fill, Search, Corpus and Runs show a REALM run: --realm, by default runs/demo/realm (`make demo`),
else a small one built as benchmarks/serve/serve_target.py builds it (random tiny BERT, 2 steps).
Generate shows a SUREALM run: --surealm, else a tiny one trained here under --work (a random
2-layer BERT that learns a dozen short dialogues by heart; its data store keyed by the bundled
MiniLM), so the continuation and the retrieved entries read as sentences.
The servers run in this process (ServerThread); the browser is the system's Chromium (Debian's
`chromium`) through Playwright. PNGs are palette-quantised (Pillow) to stay small.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, offline, tiny_bert

offline()
from benchmarks.serve.serve_target import DEFAULT_TARGET, build_small_realm  # noqa: E402

DOCS = ROOT / "docs"
WORK = Path(tempfile.gettempdir()) / "ralm-serve-screenshots"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FILL_TEXT = "Abraham Lincoln was born in [MASK] in 1809."
SEARCH_QUERY = "Where was Abraham Lincoln born?"
DIALOGUES = [
    ["i would like to book a room for two nights", "sure , which dates ?", "from friday to sunday please"],
    ["i would like to order a large pizza", "what toppings would you like ?", "cheese and mushrooms please"],
    ["can i bring my dog to the hotel ?", "sorry , pets are not allowed", "ok , thanks anyway"],
    ["i want a table for two at seven", "we have a table by the window", "perfect , thank you"],
    ["is there free wifi in the room ?", "yes , the wifi is free for guests", "great , thanks"],
    ["i need a taxi to the station", "when do you want to leave ?", "at noon please"],
    ["i would like to book a table for four", "for what time ?", "eight in the evening please"],
    ["i would like a cup of tea", "milk or sugar ?", "just milk please"],
    ["what time is breakfast served ?", "breakfast is from seven to ten", "thank you"],
    ["i would like to check out", "how was your stay ?", "it was lovely , thank you"],
    ["can you recommend a restaurant nearby ?", "the fish place by the harbour is good", "i will try it"],
    ["i would like to rent a bike", "for how many hours ?", "three hours please"],
]


def tiny_surealm(work: Path) -> Path:
    """A SUREALM run under `work` (reused when there): see the module docstring."""
    import torch

    from ralm.surealm.datastore_build import DatastoreConfig, build_datastore
    from ralm.surealm.sentences import read_sentences
    from ralm.surealm.train import TrainConfig, train

    run = work / "surealm"
    if (run / "surealm.json").is_file():
        return run
    work.mkdir(parents=True, exist_ok=True)
    bert = tiny_bert(work / "tiny-bert")
    rows = [{"text": t, "group": f"d{i}"} for i, d in enumerate(DIALOGUES) for t in d]
    (work / "dialogues.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    sents = read_sentences([work / "dialogues.jsonl"], fractions=(0.1, 0.0), seed=0)
    cfg = DatastoreConfig(lm=str(bert), encoder=None, m=6, k=4, batch_sentences=64, autocast="off")
    build_datastore(sents, work / "datastore", cfg, overwrite=True, progress=False, log=lambda m: None)
    torch.manual_seed(0)
    tcfg = TrainConfig(
        datastore=str(work / "datastore"),
        out=str(run),
        lm=str(bert),
        k=4,
        steps=400,
        batch_size=8,
        lr=2e-3,
        warmup_steps=20,
        eval_every=100,
        device="cpu",
        autocast="off",
        tensorboard=False,
    )
    return train(tcfg, progress=False)


def salient_chunk(store, limit: int = 3000) -> int:
    """A chunk among the first `limit` with the most kinds of salient span, then the most spans."""
    best, key = 0, (-1, -1)
    for i in range(min(limit, len(store))):
        spans = store.get(i)["salient"]
        k = (len({s["source"] for s in spans}), len(spans))
        if k > key:
            best, key = i, k
    return best


def save(page, path: Path, *, full_page: bool = True, max_height: int = 1500) -> None:
    """Screenshot the page (at most `max_height` px tall), palette-quantised."""
    from PIL import Image

    height = min(page.evaluate("document.documentElement.scrollHeight"), max_height) if full_page else None
    clip = {"x": 0, "y": 0, "width": page.viewport_size["width"], "height": height} if height else None
    page.screenshot(path=str(path), full_page=full_page, clip=clip, animations="disabled")
    img = Image.open(path).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    img.save(path, optimize=True)
    print(f"{path}: {path.stat().st_size // 1024} KiB", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--realm", type=Path, default=None, help="a REALM run (default: runs/demo/realm, else built)"
    )
    ap.add_argument("--surealm", type=Path, default=None, help="a SUREALM run (default: a tiny one, built)")
    ap.add_argument("--work", type=Path, default=WORK, help="where the runs that are built go")
    ap.add_argument("--out", type=Path, default=DOCS)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()

    import torch
    from playwright.sync_api import expect, sync_playwright

    from ralm.serve.app import ServerThread, create_app
    from ralm.serve.loaders import load_target

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    realm = args.realm or (DEFAULT_TARGET if (DEFAULT_TARGET / "config.toml").is_file() else None)
    realm = realm or build_small_realm(args.work)
    surealm = args.surealm or tiny_surealm(args.work)
    print(f"REALM run: {realm}; SUREALM run: {surealm}", file=sys.stderr)
    rt, st = load_target(realm, "cpu"), load_target(surealm, "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=60_000)

    with ServerThread(create_app(rt)) as r, ServerThread(create_app(st)) as s, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})

        page.goto(f"{r.url}/fill")
        page.get_by_test_id("fill-text").fill(FILL_TEXT)
        page.get_by_test_id("fill-submit").click()
        expect(page.get_by_test_id("fill-results")).to_be_visible()
        save(page, args.out / "serve-fill.png")

        page.goto(f"{r.url}/search")
        page.get_by_test_id("search-q").fill(SEARCH_QUERY)
        page.get_by_test_id("search-k").fill("4")
        page.get_by_test_id("search-submit").click()
        expect(page.get_by_test_id("results-bm25").get_by_test_id("result")).to_have_count(4)
        expect(page.get_by_test_id("results-dense").get_by_test_id("result")).to_have_count(4)
        save(page, args.out / "serve-search.png")

        page.goto(f"{r.url}/corpus/{salient_chunk(rt.store)}")
        save(page, args.out / "serve-corpus.png", max_height=1100)

        page.goto(f"{r.url}/runs")
        expect(page.locator("#chart-null canvas")).to_have_count(1)
        page.wait_for_timeout(300)
        save(page, args.out / "serve-runs.png", max_height=1000)

        page.goto(f"{s.url}/generate")
        page.get_by_test_id("gen-prefix").fill("i would like to")
        page.get_by_test_id("gen-max-new").fill("8")
        page.get_by_test_id("gen-submit").click()
        expect(page.get_by_test_id("gen-results")).to_be_visible()
        save(page, args.out / "serve-generate.png", max_height=1200)
        browser.close()


if __name__ == "__main__":
    main()
