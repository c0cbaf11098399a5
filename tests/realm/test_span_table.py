"""`ralm.realm.inference.span_table`: the counted held-out span table of a causal REALM run, checked against
references computed apart (a hand-worked holder choice, a naive scan of the corpus for the span,
SQuAD scores of the records' own fills, the step-0 run's own gold evaluation)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ralm.errors import RalmError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_choose_holder_prefers_the_chunk_sharing_most_words():
    from ralm.realm.inference.span_table import choose_holder

    texts = ["oslo is big", "the capital oslo", "bergen", "capital of norway: oslo, the city 1"]
    # "[1] is the capital": chunk 0 shares "is", chunks 1 and 3 share "the" and "capital" (a tie: the
    # lower id); the blank's "1" is no word of the text, so chunk 3's "1" does not count
    assert choose_holder("Oslo", "[1] is the capital", texts, own=5) == 1
    assert choose_holder("Oslo", "[1] is the capital", texts, own=1) == 3  # never the query's own
    assert choose_holder("OSLO", "[1] is big", texts, own=5) == 0  # case folded; shares "is", "big"
    assert choose_holder("Bergen", "[1] is a city", texts, own=2) == -1  # held only by its own chunk
    assert choose_holder("  ", "[1]", texts, own=0) == -1


@pytest.fixture(scope="module")
def runs(tmp_path_factory, realm_store, tiny_dir, causal_dirs):
    """A causal REALM run on the linked corpus with 6 held-out chunks, trained 1 step."""
    from tests.realm.conftest import ONE_STEP, causal_config

    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    out = tmp_path_factory.mktemp("span-table") / "run"
    cfg = causal_config(
        realm_store,
        tiny_dir,
        causal_dirs,
        out=str(out),
        heldout=6,
        **ONE_STEP,
        masking={"sources": ("link",), "random_span_rate": 0.0, "max_spans": 1},
    )
    pretrain(cfg, progress=False)
    return load_run(out), load_run(out, initial=True)


def test_heldout_spans_are_the_first_of_the_split_and_held_elsewhere(runs):
    from ralm.realm.inference.span_table import heldout_spans
    from ralm.realm.training.heldout import eval_collator

    run, _ = runs
    spans, skipped = heldout_spans(run, 4)
    texts = [run.store.get(i)["text"].lower() for i in range(len(run.store))]
    # the naive reference: walk the split in order, mask each chunk as evaluate-mlm does, keep it when
    # another chunk's text holds its span
    col, kept, dropped = eval_collator(run), [], 0
    for c in [int(c) for c in run.heldout_ids]:
        ex = col.mask(c, np.random.default_rng([run.cfg.seed, 3, c]))
        if ex is None or len(kept) == 4:
            continue
        span = col.span_query(c, ex).spans[0].lower()
        if any(span in t for i, t in enumerate(texts) if i != c):
            kept.append((c, span))
        else:
            dropped += 1
    assert [(s["query"], s["span"].lower()) for s in spans] == kept and skipped == dropped
    for s in spans:
        assert s["holder"] != s["query"] and s["span"].lower() in texts[s["holder"]]
        assert "[1]" in s["masked_text"]


def test_span_table_counts_match_the_records(runs):
    from ralm.answers import squad_scores
    from ralm.realm.inference.gold import evaluate_gold
    from ralm.realm.inference.span_table import format_span_table, span_table

    run, initial = runs
    table = span_table(run, n=100, initial=initial, examples=2, batch_size=4)
    recs = table["records"]
    assert table["spans"] == len(recs) > 0 and table["asked"] == 100
    assert table["k"] == 3 and list(table["rows"]) == [
        "retrieval_step0",
        "closed_book",
        "retrieval",
        "oracle",
    ]
    for name, row in table["rows"].items():
        em = np.mean([squad_scores(r[f"fill_{name}"], [r["span"]])[0] for r in recs])
        f1 = np.mean([squad_scores(r[f"fill_{name}"], [r["span"]])[1] for r in recs])
        nll = -sum(r[f"lp_{name}"] for r in recs)
        assert row["em"] == pytest.approx(100 * em) and row["f1"] == pytest.approx(100 * f1)
        assert row["ppl"] == pytest.approx(math.exp(nll / sum(r["n_content"] for r in recs)))
    texts = [run.store.get(i)["text"].lower() for i in range(len(run.store))]
    held = [any(r["span"].lower() in texts[d] for d in r["top_docs"]) for r in recs]
    assert table["holder_in_top_k"] == pytest.approx(np.mean(held))
    for r in recs:
        assert len(r["top_docs"]) == 2 and r["query"] not in r["top_docs"]  # k - 1 chunks, never its own
        assert r["fill_doc"] in [*r["top_docs"], -1]
    # the step-0 row is the initial run's own gold evaluation on the same queries and holders
    gold = np.zeros(len(run.store), dtype=np.int64)
    gold[[r["query"] for r in recs]] = [r["gold"] for r in recs]
    ref = evaluate_gold(
        initial, initial.store, gold, ids=np.array([r["query"] for r in recs]), rows=("retrieval",)
    )
    assert [r["fill_retrieval_step0"] for r in recs] == [x["fill_retrieval"] for x in ref["records"]]
    assert "lp_closed_book" not in ref["records"][0]
    assert [e["answer"] for e in table["examples"]] == [r["span"] for r in recs[:2]]
    text = format_span_table(table)
    assert f"held-out spans: {len(recs)} (asked for 100" in text
    assert "oracle (the chunk holding the span)" in text and "example 2:" in text and "example 3:" not in text


def test_evaluate_mlm_spans_cli_writes_json_and_text(runs, tmp_path, capsys):
    from ralm.cli import main

    run, _ = runs
    out = tmp_path / "spans.json"
    assert main(["evaluate-mlm", str(run.cfg.out), "--spans", "--n", "2", "--json-out", str(out)]) == 0
    printed = capsys.readouterr().out
    payload = json.loads(out.read_text())
    assert payload["spans"] == 2 and payload["checkpoint"] == "step-0000001"
    assert "retrieval_step0" in payload["rows"]
    assert out.with_suffix(".txt").read_text().strip() in printed


def test_span_table_refuses_a_closed_book_run(tmp_path, causal_cfg):
    from ralm.realm.inference.span_table import span_table
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    closed = load_run(pretrain(causal_cfg(mode="mlm", steps=1, checkpoint_every=1), progress=False))
    with pytest.raises(RalmError, match="needs a REALM run with a causal reader"):
        span_table(closed)
