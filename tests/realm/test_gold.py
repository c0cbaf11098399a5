"""`ralm.realm.inference.gold`: a causal REALM run scored on queries whose right document is known, checked
against references computed apart (a brute-force search over every chunk, the evaluation's own
span scores, the reader's greedy generation) on a tiny records world."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.realm.conftest import ONE_STEP

from ralm.errors import RalmError
from testkit import records_world_stores

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_dir):
    """A 12-record world (36 documents) as DocStores on the tiny BERT's vocabulary, and its gold."""
    from ralm.worlds.records import RecordsWorldConfig

    root = tmp_path_factory.mktemp("gold")
    w = records_world_stores(
        root, RecordsWorldConfig(records=12, heldout_records=3, n_attributes=3), tiny_dir
    )
    return root, w


def _runs(world, causal_cfg, tmp_path):
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    root, _ = world
    common = dict(
        docstore=str(root / "corpus"),
        queries=str(root / "queries"),
        heldout=0,
        **ONE_STEP,
        k=3,
        masking={"sources": ("link",), "random_span_rate": 0.0},
    )
    realm = load_run(pretrain(causal_cfg(out=str(tmp_path / "realm"), **common), progress=False))
    closed = load_run(
        pretrain(causal_cfg(out=str(tmp_path / "closed"), mode="mlm", **common), progress=False)
    )
    return realm, closed


def test_gold_chunks_map_queries_to_the_documents_that_state_their_values(world):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.inference.gold import gold_chunks, read_gold

    root, w = world
    corpus, held = DocStore(root / "corpus"), DocStore(root / "heldout")
    gold = gold_chunks(held, corpus, read_gold(root / "data" / "gold.jsonl"))
    assert len(gold) == len(held) == len(w.heldout)
    for i, g in enumerate(gold.tolist()):
        value = held.get(i)["links"][0]["target"]
        assert value in corpus.get(g)["text"]
    with pytest.raises(RalmError, match="no document"):
        gold_chunks(held, corpus, {w.heldout[0]["id"]: "XX-0000/owner"})


def test_measures_match_their_references(world, causal_cfg, tmp_path):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.inference.causal_fill import generate_spans
    from ralm.realm.inference.evaluate import causal_span_scores
    from ralm.realm.inference.gold import evaluate_gold, gold_chunks, read_gold, with_queries
    from ralm.realm.training.heldout import heldout_batches

    root, _ = world
    realm, closed = _runs(world, causal_cfg, tmp_path)
    held = DocStore(root / "heldout")
    gold = gold_chunks(held, realm.store, read_gold(root / "data" / "gold.jsonl"))
    ids = np.arange(0, len(held), 3)
    res = evaluate_gold(realm, held, gold, ids=ids, depth=8, batch_size=4)
    recs = res["records"]
    assert [r["query"] for r in recs] == ids.tolist()

    model, qrun = realm.model, with_queries(realm, held)
    assert not qrun.same_corpus
    n = len(realm.store)
    with torch.no_grad():
        docs = model.doc_vectors(model.docs.tower_batch(np.arange(n)), realm.device).float()
        batch = next(iter(heldout_batches(qrun, ids, len(ids))))
        q = model.embed_queries(batch).float()
        scores = (q @ docs.T).numpy()  # the brute-force search: every chunk, nothing excluded
        order = np.argsort(-scores, axis=1, kind="stable")
        ref_rank = [int(np.flatnonzero(order[b] == gold[c])[0]) + 1 for b, c in enumerate(ids)]
        lpz = model.prior_over(q, order[:, :2]).exp()  # k = 3: the top 2 and the null document
        cb = causal_span_scores(model, batch)["content"]
        rt = causal_span_scores(model, batch, qrun.searcher)["content"]
    for b, r in enumerate(recs):
        assert r["rank"] == (ref_rank[b] if ref_rank[b] <= 8 else 0)
        assert r["top_docs"] == order[b, :2].tolist()
        assert r["p_right"] == pytest.approx(
            float(lpz[b, ref_rank[b] - 1]) if ref_rank[b] <= 2 else 0.0, abs=1e-5
        )
        assert r["p_null"] == pytest.approx(float(lpz[b, -1]), abs=1e-5)
        assert r["lp_closed_book"] == pytest.approx(float(cb[b]), abs=1e-4)
        assert r["lp_retrieval"] == pytest.approx(float(rt[b]), abs=1e-4)
        assert r["lp_oracle"] <= 0 and r["span"] == held.get(int(ids[b]))["links"][0]["target"]
    # the oracle's fill is the reader's greedy generation given the gold chunk
    col_spans = [r["span"] for r in recs]
    from ralm.realm.training.heldout import eval_collator

    col = eval_collator(qrun)
    sq = [
        col.span_query(int(c), col.mask(int(c), np.random.default_rng([realm.cfg.seed, 3, int(c)])))
        for c in ids
    ]
    assert [q.spans[0] for q in sq] == col_spans
    gen = generate_spans(qrun, sq, [[int(gold[c])] for c in ids])
    assert [r["fill_oracle"] for r in recs] == [g[0][0] for g in gen]
    summary = res["summary"]
    assert summary["queries"] == len(ids)
    assert summary["recall@1"] == pytest.approx(np.mean([x == 1 for x in ref_rank]))
    assert summary["em_oracle"] == pytest.approx(np.mean([r["em_oracle"] for r in recs]))
    from ralm.answers import squad_scores

    for r in recs:
        assert (r["em_retrieval"], r["f1_retrieval"]) == squad_scores(r["fill_retrieval"], [r["span"]])

    # a closed-book run: its reader given the right document, no retrieval measures
    cres = evaluate_gold(closed, held, gold, ids=ids[:2], generate=False)
    assert set(cres["summary"]) == {
        "queries",
        "nll_closed_book",
        "nll_oracle",
        "ppl_closed_book",
        "ppl_oracle",
    }
    crec = cres["records"]
    assert cres["summary"]["ppl_oracle"] == pytest.approx(
        np.exp(-sum(r["lp_oracle"] for r in crec) / sum(r["n_content"] for r in crec))
    )
    assert "rank" not in cres["records"][0]


def test_bad_gold_is_refused(world, causal_cfg, tmp_path):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.inference.gold import evaluate_gold

    root, _ = world
    realm, _ = _runs(world, causal_cfg, tmp_path)
    held = DocStore(root / "heldout")
    with pytest.raises(RalmError, match="gold documents"):
        evaluate_gold(realm, held, np.zeros(3, dtype=np.int64))
    with pytest.raises(RalmError, match="chunk ids of"):
        evaluate_gold(realm, held, np.full(len(held), len(realm.store), dtype=np.int64))


def test_evaluate_mlm_gold_cli_writes_the_summary_and_records(world, causal_cfg, tmp_path, capsys):
    import json

    from ralm.cli import main

    root, _ = world
    realm, _ = _runs(world, causal_cfg, tmp_path)
    out = tmp_path / "gold.json"
    argv = [
        "evaluate-mlm",
        str(realm.cfg.out),
        "--gold",
        str(root / "heldout"),
        str(root / "data" / "gold.jsonl"),
    ]
    assert main([*argv, "--n", "4", "--fresh-index", "--json-out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "right document first (dense recall@1)" in printed and "span exact match, closed-book" in printed
    payload = json.loads(out.read_text())
    assert payload["summary"]["queries"] == 4 and len(payload["records"]) == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "x"}\n')
    assert main(["evaluate-mlm", str(realm.cfg.out), "--gold", str(root / "heldout"), str(bad)]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
