"""Hybrid REALM candidates: BM25 over decoded chunks fused with the index by RRF, masked words hidden."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ralm.errors import RalmError

pytestmark = pytest.mark.usefixtures("one_thread")


def _naive_rrf(lists, k, rrf_k=60.0):
    scores: dict[int, float] = {}
    for row in lists:
        for rank, cid in enumerate(row, start=1):
            scores[cid] = scores.get(cid, 0.0) + 1.0 / (rrf_k + rank)
    return [c for c, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))][:k]


@pytest.fixture(scope="module")
def parts(realm_store, tiny_dir, tmp_path_factory):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.config import PretrainConfig
    from ralm.realm.modeling.candidates import candidate_search
    from ralm.realm.refresh.sync import SyncRefresher
    from ralm.realm.training.build import build_model

    cfg = PretrainConfig(
        docstore=str(realm_store),
        out=str(tmp_path_factory.mktemp("cand") / "run"),
        reader=str(tiny_dir),
        k=4,
        encoder_max_length=32,
        candidates="hybrid",
        candidate_depth=5,
        autocast="off",
    )
    store = DocStore(realm_store)
    model, tok = build_model(cfg, store)
    model.eval()
    refresher = SyncRefresher(model.docs, every=0, autocast="off")
    refresher.refresh(model.encoder, 0)
    return cfg, model, tok, store, refresher, candidate_search(cfg, model, refresher.search)


def _masked_query(tok, store, cid: int, word: str):
    """Chunk `cid`'s token ids as [CLS] x [SEP] with every piece of `word` masked."""
    ids = [tok.cls_token_id, *store.input_ids(cid).tolist(), tok.sep_token_id]
    target = set(tok(word, add_special_tokens=False)["input_ids"])
    masked = [tok.mask_token_id if t in target else t for t in ids]
    assert masked != ids, f"{word!r} is not in chunk {cid}"
    return np.asarray([masked], dtype=np.int64)


def test_query_text_hides_masked_words_and_specials(parts):
    _, _, tok, store, _, search = parts
    cid = next(i for i in range(len(store)) if "stockholm" in store.get(i)["text"].lower())
    ids = _masked_query(tok, store, cid, "stockholm")
    text = search.query_texts(ids)[0]
    assert "stockholm" not in text and "[MASK]" not in text and "[CLS]" not in text
    assert "sweden" in text  # the visible words survive (MiniLM's tokenizer is uncased)


def test_candidates_are_the_rrf_of_both_lists_and_never_the_source(parts):
    cfg, model, tok, store, refresher, search = parts
    import torch

    for cid in range(0, len(store), 3):
        word = store.get(cid)["title"].split()[0]
        if word.lower() not in store.get(cid)["text"].lower():
            continue
        ids = _masked_query(tok, store, cid, word)
        batch = {"input_ids": torch.as_tensor(ids), "attention_mask": torch.ones_like(torch.as_tensor(ids))}
        with torch.no_grad():
            q = model.embed_queries(batch).float().numpy()
        src = np.asarray([cid])
        got = search(q, src, 3, query_ids=ids)
        dense = refresher.search(q, src, 5)[0].tolist()
        sparse = search.bm25.search_text(search.query_texts(ids), 5, exclude_ids=[cid]).ids[0].tolist()
        assert got[0].tolist() == _naive_rrf([dense, sparse], 3)
        assert cid not in got[0].tolist()


def test_bm25_indexes_the_decoded_chunks(parts):
    _, _, tok, store, _, search = parts
    assert len(search.bm25) == len(store)
    # a query made of one chunk's rarest visible word finds that chunk first
    cid = next(i for i in range(len(store)) if "reykjavik" in store.get(i)["text"].lower())
    top = search.bm25.search_text(["reykjavik iceland ingolfur"], 1).ids[0, 0]
    assert "reykjavik" in store.get(int(top))["text"].lower() and cid >= 0


def test_pretraining_with_hybrid_candidates_runs_and_reloads(tiny_cfg, tmp_path):
    from ralm.realm.modeling.candidates import HybridCandidates
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    run = pretrain(tiny_cfg(steps=2, candidates="hybrid", candidate_depth=4, bm25_lang="en"), progress=False)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]
    loaded = load_run(run)
    assert isinstance(loaded.searcher, HybridCandidates)
    assert loaded.searcher.bm25.analyzer.stemmer == "english"


def test_bad_candidate_settings(tiny_cfg):
    with pytest.raises(RalmError, match="candidates 'bm25'"):
        tiny_cfg(candidates="bm25")
    with pytest.raises(RalmError, match="candidate_depth=0"):
        tiny_cfg(candidates="hybrid", candidate_depth=0)
    with pytest.raises(RalmError, match="xx"):
        tiny_cfg(candidates="hybrid", bm25_lang="xx")
