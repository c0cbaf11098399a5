"""LUKE batches: spans read from a DocStore, masking rates (binomial bounds), shapes, padding, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ralm.luke.annotations import EntitySpans, annotation_rate, annotation_stats
from ralm.luke.data import LukeCollator, MaskSettings, WordTokens, collate, make_example
from ralm.luke.vocab import MASK_ID, UNK_ID, EntityVocabulary
from testkit import unlink, write_jsonl

DOCS = [
    ("Oslo", "Oslo is the capital of [[Norway]]. It was founded by [[Harald Hardrada]] a long time ago."),
    ("Bergen", "Bergen is a city in [[Norway]] on the west coast, near the [[North Sea]] and the fjords."),
    ("Norway", "Norway is a country in [[Scandinavia]]. Its capital is [[Oslo]]. Norway is cold in winter."),
    (
        "Denmark",
        "Denmark is a country in [[Scandinavia]]. Its capital is [[Copenhagen]]. Scandinavia is north.",
    ),
]

# synthetic word ids: 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK]; 5..999 ordinary
TOK = WordTokens(cls_id=2, sep_id=3, pad_id=0, mask_id=4, vocab_size=1000, special_ids=(0, 1, 2, 3, 4))


def z_bound(n: int, p: float, z: float = 5.0) -> float:
    """Half-width of a 5-sigma interval of a Binomial(n, p) count (false alarm ~6e-7)."""
    return z * math.sqrt(n * p * (1 - p))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from ralm.corpus.build import BuildConfig, build_docstore

    d = tmp_path_factory.mktemp("luke-data")
    rows = []
    for title, marked in DOCS:
        text, links = unlink(marked)
        rows.append({"title": title, "text": text, "links": links})
    write_jsonl(d / "w.jsonl", rows)
    return build_docstore(
        [d / "w.jsonl"], d / "store", BuildConfig(chunk_size=24), progress=False, log=lambda m: None
    )


def synthetic(n: int, T: int = 60, seed: int = 0):
    """n chunks of T word ids with a few [UNK]s, and 6 spans each (ids 3..9 known, 1 unknown)."""
    rng = np.random.default_rng(seed)
    chunks, spans = [], []
    for _ in range(n):
        ids = rng.integers(5, 1000, size=T)
        ids[rng.integers(0, T, size=3)] = 1  # [UNK] in the text: never masked
        chunks.append(ids)
        starts = np.arange(0, 60, 10)[:6]
        ent = rng.choice([1, 3, 4, 5, 6, 7, 8, 9], size=6)
        spans.append(np.stack([starts, starts + 3, ent], axis=1))
    return chunks, spans


def test_spans_match_the_store(store):
    for sources in (("link",), ("link", "auto")):
        spans = EntitySpans.from_docstore(store, sources)
        assert spans.n_chunks == len(store)
        vocab = EntityVocabulary.from_docstore(store, 100, sources)
        vid = spans.vocab_ids(vocab)
        for i in range(len(store)):
            want = [
                (s.token_start, s.token_end, vocab.id(s.label))
                for s in store.salient_spans(i)
                if s.source in sources
            ]
            assert spans.chunk(i, vid).tolist() == [list(w) for w in want]


def test_annotation_stats_count_words_and_spans(store):
    st = annotation_stats(store)
    words = sum(len(store[i]["text"].split()) for i in range(len(store)))
    assert st.words == words and st.tokens == int(store.lengths().sum())
    counts = store.manifest["counts"]["salient"]
    assert st.spans == {"link": counts["link"], "auto": counts["auto"]}
    assert annotation_rate(store, ["link"]) == pytest.approx(1000 * counts["link"] / words)
    both = annotation_rate(store, ["link", "auto"])
    assert both == pytest.approx(1000 * (counts["link"] + counts["auto"]) / words) and both > 0
    assert st.as_dict()["entities_per_1k_words"]["link+auto"] == pytest.approx(both)


def test_masking_rates_are_binomial():
    chunks, spans = synthetic(3000)
    s = MaskSettings(max_seq_length=128, max_entities=32)
    exs = [
        make_example(c, sp, np.random.default_rng([1, i]), s, TOK)
        for i, (c, sp) in enumerate(zip(chunks, spans, strict=True))
    ]
    b = collate(exs, s, TOK, return_tensors="np")
    orig = np.zeros_like(b["input_ids"])
    for k, c in enumerate(chunks):
        orig[k, 1 : len(c) + 1] = c
    special = np.isin(orig, TOK.special_ids) | (b["attention_mask"] == 0)
    special[:, 0] = True
    masked = b["mlm_labels"] != -100
    assert not (masked & special).any()  # never [CLS]/[SEP]/[PAD]/[UNK]
    assert (b["mlm_labels"][masked] == orig[masked]).all()
    # 15% of the chunk length (57 + 3 [UNK]) is masked; the count per chunk varies less than a binomial
    n_words = sum(len(c) for c in chunks)
    assert abs(masked.sum() - 0.15 * n_words) <= z_bound(n_words, 0.15)
    got = b["input_ids"][masked]
    k = int(masked.sum())
    assert abs((got == TOK.mask_id).sum() - 0.8 * k) <= z_bound(k, 0.8)
    assert abs((got == orig[masked]).sum() - 0.1 * k) <= z_bound(k, 0.1) + 5  # + chance draws of the same id
    rand = (got != TOK.mask_id) & (got != orig[masked])
    assert not np.isin(got[rand], TOK.special_ids).any()

    ent_in = np.concatenate([sp[:, 2] for sp in spans])
    known = int((ent_in >= 3).sum())
    em = b["entity_labels"] != -100
    assert abs(em.sum() - 0.15 * known) <= z_bound(known, 0.15)
    assert (b["entity_ids"][em] == MASK_ID).all()
    assert (b["entity_labels"][em] >= 3).all()
    unk = b["entity_ids"] == UNK_ID
    # unknown entities enter as [UNK] and are never predicted
    assert unk.sum() == (ent_in == 1).sum() and (b["entity_labels"][unk] == -100).all()
    assert not (em & (b["entity_attention_mask"] == 0)).any()


def test_shapes_padding_and_positions():
    s = MaskSettings(max_seq_length=12, max_entities=3, max_mention_length=2, mlm_prob=0.0, mep_prob=0.0)
    spans = np.array([[0, 1, 7], [2, 6, 8], [8, 11, 1], [9, 10, 9]])  # [8, 11) ends past the 10 kept words
    a = make_example(np.arange(5, 25), spans, np.random.default_rng(0), s, TOK)
    b = make_example(np.arange(30, 34), np.zeros((0, 3)), np.random.default_rng(1), s, TOK)
    batch = collate([a, b], s, TOK)
    assert batch["input_ids"].shape == (2, 12) and batch["entity_position_ids"].shape == (2, 3, 2)
    assert batch["input_ids"][0].tolist() == [2, *range(5, 15), 3]  # truncated to 10 words
    assert batch["input_ids"][1].tolist() == [2, 30, 31, 32, 33, 3] + [0] * 6
    assert batch["attention_mask"][1].tolist() == [1] * 6 + [0] * 6
    assert batch["entity_ids"][0].tolist() == [7, 8, 9]
    # +1 for [CLS]; [2, 6) keeps its first M = 2 words; -1 pads
    assert batch["entity_position_ids"][0].tolist() == [[1, -1], [3, 4], [10, -1]]
    assert batch["entity_ids"][1].tolist() == [0, 0, 0]
    assert batch["entity_attention_mask"].tolist() == [[1, 1, 1], [0, 0, 0]]
    assert (batch["entity_position_ids"][1] == -1).all() and (batch["entity_labels"] == -100).all()
    assert (batch["mlm_labels"] == -100).all()


def test_max_entities_keeps_the_first_spans():
    s = MaskSettings(max_seq_length=64, max_entities=2, mlm_prob=0.0, mep_prob=0.0)
    ex = make_example(
        np.arange(5, 25), np.array([[0, 1, 3], [2, 3, 4], [5, 6, 5]]), np.random.default_rng(0), s, TOK
    )
    assert ex.entity_ids.tolist() == [3, 4] and ex.entity_spans.tolist() == [[0, 1], [2, 3]]


def test_deterministic_and_plain_mlm_masks_the_same_words():
    chunks, spans = synthetic(20, seed=3)
    s = MaskSettings()

    def batch(settings, seed):
        exs = [
            make_example(c, sp, np.random.default_rng([seed, i]), settings, TOK)
            for i, (c, sp) in enumerate(zip(chunks, spans, strict=True))
        ]
        return collate(exs, settings, TOK)

    x, y = batch(s, 5), batch(s, 5)
    assert all((x[k] == y[k]).all() for k in x)
    z = batch(s, 6)
    assert not (x["mlm_labels"] == z["mlm_labels"]).all()
    plain = batch(MaskSettings(with_entities=False), 5)
    assert plain["entity_ids"].shape == (20, 0) and plain["entity_position_ids"].shape == (20, 0, 30)
    assert (plain["input_ids"] == x["input_ids"]).all() and (plain["mlm_labels"] == x["mlm_labels"]).all()


def test_collator_on_a_docstore(store, bert_tokenizer):
    spans = EntitySpans.from_docstore(store, ["link"])
    vocab = EntityVocabulary.from_docstore(store, 100, ["link"])
    s = MaskSettings(mlm_prob=0.0, mep_prob=0.0)
    col = LukeCollator(store, spans, vocab, WordTokens.from_tokenizer(bert_tokenizer), s)
    ids = list(range(len(store)))
    batch = col(ids, [np.random.default_rng(i) for i in ids])
    seen = 0
    for b, cid in enumerate(ids):
        want = [sp for sp in store.salient_spans(cid) if sp.source == "link"]
        for k, sp in enumerate(want):
            pos = [p for p in batch["entity_position_ids"][b, k].tolist() if p >= 0]
            words = bert_tokenizer.decode(batch["input_ids"][b, pos].tolist())
            assert words == sp.label.lower()  # the link's own words ([CLS] offset included)
            assert vocab.title(int(batch["entity_ids"][b, k])) == sp.label
            seen += 1
        assert int(batch["entity_attention_mask"][b].sum()) == len(want)
    assert seen == store.manifest["counts"]["salient"]["link"]
