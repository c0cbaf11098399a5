"""`ralm.realm.masking.retrievable`: a salient span is retrievable when its tokens occur in a corpus chunk
other than the query's own; checked against a naive scan, and `masking.retrievable_only` masks only
such spans, in training and in evaluation alike."""

from __future__ import annotations

import numpy as np
import pytest
from tests.realm.conftest import ONE_STEP

pytestmark = pytest.mark.usefixtures("one_thread")

ARTICLES = [
    (
        "Oslo",
        "Oslo is the capital of Norway. It was founded by Harald Hardrada.",
        ["Norway", "Harald Hardrada"],
    ),
    ("Bergen", "Bergen lies in Norway on the west coast near Askoy.", ["Norway", "Askoy"]),
    ("Harald", "Harald Hardrada died at Stamford Bridge.", ["Harald Hardrada", "Stamford Bridge"]),
    ("Tromso", "Tromso is a town in the far north beside Kvaloya.", ["Kvaloya"]),
]


@pytest.fixture(scope="module")
def linked_store(tmp_path_factory, tiny_dir):
    """Four one-chunk articles whose links recur in other articles (Norway, Harald Hardrada) or not
    (Askoy, Stamford Bridge, Kvaloya)."""
    import json

    from ralm.corpus.build import BuildConfig, build_docstore

    tmp = tmp_path_factory.mktemp("retrievable")
    rows = []
    for title, text, links in ARTICLES:
        spans = []
        for target in links:
            at = text.index(target)
            spans.append({"start": at, "end": at + len(target), "target": target})
        rows.append({"title": title, "text": text, "links": spans})
    (tmp / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    build_docstore(
        [tmp / "c.jsonl"],
        tmp / "store",
        BuildConfig(chunk_size=32, tokenizer=str(tiny_dir), auto_annotate=False, dates=False),
        progress=False,
        log=lambda m: None,
    )
    return tmp / "store"


def _naive(queries, corpus, same_corpus: bool) -> list[bool]:
    chunks = [corpus.input_ids(j).tolist() for j in range(len(corpus))]
    out = []
    for c in range(len(queries)):
        ids = queries.input_ids(c).tolist()
        for s, e, _ in queries.salient_tokens(c).tolist():
            span = ids[s:e]
            hit = any(
                any(chunk[p : p + len(span)] == span for p in range(len(chunk) - len(span) + 1))
                for j, chunk in enumerate(chunks)
                if not (same_corpus and j == c)
            )
            out.append(bool(span) and hit)
    return out


def test_flags_match_a_naive_scan(realm_store, linked_store):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.masking.retrievable import retrievable_share, retrievable_spans

    small = DocStore(linked_store)
    flags = retrievable_spans(small, small, same_corpus=True).tolist()
    assert flags == _naive(small, small, True)
    texts = [
        small.get(c)["text"][s["start"] : s["end"]]
        for c in range(len(small))
        for s in small.get(c)["salient"]
    ]
    assert dict(zip(texts, flags, strict=True)) == {
        "Norway": True,
        "Harald Hardrada": True,
        "Askoy": False,
        "Stamford Bridge": False,
        "Kvaloya": False,
    }
    store = DocStore(realm_store)  # a corpus whose every text is repeated: every span recurs
    got = retrievable_spans(store, store, same_corpus=True)
    ref = _naive(store, store, True)
    assert got.tolist() == ref
    # another store: the span's own chunk counts too, so every span of a copy of the corpus is found
    assert retrievable_spans(store, store, same_corpus=False).tolist() == _naive(store, store, False)
    assert all(_naive(store, store, False))
    share = retrievable_share(store, store, same_corpus=True)
    assert share == {"spans": float(len(ref)), "retrievable": float(sum(ref)), "share": sum(ref) / len(ref)}


def test_masking_keeps_to_the_retrievable_spans(linked_store, bert_tokenizer):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.masking.mlm import MaskingCollator, MaskingConfig, eligible_ids
    from ralm.realm.masking.retrievable import retrievable_spans

    store = DocStore(linked_store)
    keep = retrievable_spans(store, store, same_corpus=True)
    cfg = MaskingConfig(strategy="salient", random_span_rate=0.0, salient_rate=1.0, retrievable_only=True)
    kept_chunks = eligible_ids(store, cfg, keep)
    offsets = np.concatenate(([0], np.cumsum([len(store.salient_tokens(c)) for c in range(len(store))])))
    with_kept = [c for c in range(len(store)) if keep[offsets[c] : offsets[c + 1]].any()]
    assert kept_chunks.tolist() == sorted(set(with_kept) & set(eligible_ids(store, cfg).tolist()))
    col = MaskingCollator(store, bert_tokenizer, cfg, span_keep=keep, return_tensors="np")
    for c in range(len(store)):
        allowed = {
            (s, e)
            for (s, e, _), k in zip(
                store.salient_tokens(c).tolist(), keep[offsets[c] : offsets[c + 1]], strict=True
            )
            if k
        }
        for seed in range(3):
            ex = col.mask(c, np.random.default_rng(seed))
            if c not in set(kept_chunks.tolist()):
                assert ex is None
                continue
            assert {(s, e) for s, e, _ in ex.masked_spans} <= allowed


def test_a_run_with_retrievable_only_trains_and_evaluates_on_such_spans(tiny_cfg, linked_store):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.data import span_keep, split_ids
    from ralm.realm.masking.mlm import eligible_ids
    from ralm.realm.training.heldout import eval_collator
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(
        docstore=str(linked_store),
        k=2,
        batch_size=1,
        heldout=1,
        **ONE_STEP,
        masking={"retrievable_only": True},
    )
    store = DocStore(cfg.docstore)
    keep = span_keep(cfg, store)
    assert keep is not None and 0 < keep.sum() < len(keep)
    train, held = split_ids(cfg, store)
    ok = set(eligible_ids(store, cfg.masking, keep).tolist())
    assert set(train.tolist()) <= ok and set(held.tolist()) <= ok
    run = load_run(pretrain(cfg, progress=False))
    assert run.train_ids.tolist() == train.tolist()
    assert eval_collator(run).span_keep is not None
