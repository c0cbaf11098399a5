"""Masking for REALM/BRENT: salient + random spans, the uniform/span ablations, 80/10/10, the collator."""

import json

import numpy as np
import pytest

from ralm.corpus.docstore import SALIENT_SOURCES
from ralm.realm.masking.mlm import (
    BERT_REPLACE,
    MaskingCollator,
    MaskingConfig,
    eligible_ids,
    mask_example,
    sample_span_lengths,
    span_length_pmf,
)

MASK, VOCAB = 3, 5000
SPECIALS = (0, 1, 2, 3, 4)  # pad, unk, cls, sep, mask stand-ins
LINK, AUTO, NER, DATE = range(4)


def _mask(ids, sal, cfg, seed, **kw):
    kw.setdefault("special_ids", SPECIALS)
    return mask_example(ids, sal, cfg, np.random.default_rng(seed), mask_id=MASK, vocab_size=VOCAB, **kw)


def _random_example(rng, t_lo=20, t_hi=128, with_specials=False):
    """(T,) ids and (S, 3) non-overlapping salient spans of random sources, lengths 1..5."""
    T = int(rng.integers(t_lo, t_hi + 1))
    ids = rng.integers(100, VOCAB, size=T)
    if with_specials:
        where = rng.random(T) < 0.1
        ids[where] = rng.choice(SPECIALS, size=int(where.sum()))
    spans, pos = [], int(rng.integers(0, 4))
    while True:
        n = int(rng.integers(1, 6))
        if pos + n > T:
            break
        spans.append((pos, pos + n, int(rng.integers(0, 4))))
        pos += n + int(rng.integers(0, 12))
    return ids, np.array(spans, dtype=np.int32).reshape(-1, 3)


# ----------------------------------------------------------------------------- hand-made example
IDS = np.arange(1000, 1012)  # T = 12
SAL = np.array([[1, 3, LINK], [6, 9, DATE]], dtype=np.int32)


@pytest.mark.parametrize(
    ("seed", "span"),
    [(0, (1, 3)), (1, (1, 3)), (2, (1, 3)), (3, (6, 9)), (4, (6, 9)), (5, (6, 9))],
)
def test_hand_made_example_masks_exactly_one_whole_span(seed, span):
    # target 0.15 * 12 = 1.8 tokens: either span covers it, so exactly one (chosen at random) is masked
    ex = _mask(IDS, SAL, MaskingConfig(random_span_rate=0.0), seed)
    s, e = span
    assert ex.masked_spans == [(s, e, "salient")]
    expected_labels = np.full(12, -100)
    expected_labels[s:e] = IDS[s:e]
    assert ex.labels.tolist() == expected_labels.tolist()
    expected_ids = IDS.copy()
    expected_ids[s:e] = MASK
    assert ex.input_ids.tolist() == expected_ids.tolist()
    assert ex.input_ids.dtype == np.int64 and ex.labels.dtype == np.int64


def test_hand_made_example_with_random_spans_and_determinism():
    ex = _mask(IDS, SAL, MaskingConfig(), 0)
    assert ex.masked_spans == [(1, 3, "salient"), (8, 9, "random")]
    assert np.flatnonzero(ex.labels != -100).tolist() == [1, 2, 8]
    again = _mask(IDS, SAL, MaskingConfig(), 0)
    assert again.masked_spans == ex.masked_spans and (again.input_ids == ex.input_ids).all()


def test_high_rate_masks_all_spans_whole():
    ex = _mask(IDS, SAL, MaskingConfig(salient_rate=0.9, random_span_rate=0.0), 0)
    assert ex.masked_spans == [(1, 3, "salient"), (6, 9, "salient")]
    assert np.flatnonzero(ex.labels != -100).tolist() == [1, 2, 6, 7, 8]


# ----------------------------------------------------------------------------- salient coverage
def test_salient_coverage_and_random_span_rate_over_1000_examples():
    cfg = MaskingConfig()
    rng = np.random.default_rng(0)
    n_random = n_tokens = 0
    for i in range(1000):
        ids, sal = _random_example(rng)
        ex = _mask(ids, sal, cfg, i)
        T = len(ids)
        masked = ex.labels != -100
        salient = [(s, e) for s, e, k in ex.masked_spans if k == "salient"]
        assert salient, "at least one salient span is always masked"
        allowed = {(int(s), int(e)) for s, e, _ in sal}
        assert set(salient) <= allowed  # whole stored spans only
        covered = sum(e - s for s, e in salient)
        assert covered >= cfg.salient_rate * T or len(salient) == len(allowed)
        # chosen only until the target is reached: without the last one (<= the longest) it falls short
        assert covered - max(e - s for s, e in salient) < cfg.salient_rate * T
        rand = [(s, e) for s, e, k in ex.masked_spans if k == "random"]
        for s, e in rand:
            assert not any(s < se and ss < e for ss, se in salient)  # random spans avoid salient ones
        assert masked.sum() == covered + sum(e - s for s, e in rand)
        n_random += sum(e - s for s, e in rand)
        n_tokens += T
    frac = n_random / n_tokens
    assert frac == pytest.approx(0.0375, abs=0.003)  # the expected fraction is exactly the rate
    assert frac == pytest.approx(0.03737, abs=1e-4)  # observed with these seeds


def test_max_salient_tokens_guard():
    sal = np.array([[0, 10, LINK], [10, 11, DATE]], dtype=np.int32)
    for seed in range(20):
        ex = _mask(IDS, sal, MaskingConfig(max_salient_tokens=5, random_span_rate=0.0), seed)
        assert ex.masked_spans == [(10, 11, "salient")]
    assert _mask(IDS, sal[:1], MaskingConfig(max_salient_tokens=5), 0) is None


# ----------------------------------------------------------------------------- sources and None
def test_none_without_allowed_salient_span():
    assert _mask(IDS, np.zeros((0, 3), dtype=np.int32), MaskingConfig(), 0) is None
    assert _mask(IDS, SAL[:1], MaskingConfig(sources=("date",)), 0) is None  # only a link span
    # a span made only of special tokens has nothing to predict
    ids = IDS.copy()
    ids[1:3] = 1
    assert _mask(ids, SAL[:1], MaskingConfig(), 0) is None
    # the ablations do not need salient spans
    assert _mask(IDS, None, MaskingConfig(strategy="uniform"), 0) is not None
    assert _mask(IDS, None, MaskingConfig(strategy="span"), 0) is not None


def test_sources_date_only_masks_date_spans():
    cfg = MaskingConfig(sources=("date",), salient_rate=0.5, random_span_rate=0.0)
    rng = np.random.default_rng(1)
    seen = 0
    for i in range(200):
        ids, sal = _random_example(rng)
        ex = _mask(ids, sal, cfg, i)
        dates = {(int(s), int(e)) for s, e, c in sal if c == DATE}
        if not dates:
            assert ex is None
            continue
        spans = [(s, e) for s, e, k in ex.masked_spans]
        assert spans and set(spans) <= dates
        assert np.flatnonzero(ex.labels != -100).tolist() == sorted(p for s, e in spans for p in range(s, e))
        seen += 1
    assert seen > 100


def test_config_validation():
    with pytest.raises(ValueError, match="strategy"):
        MaskingConfig(strategy="whole-word")
    with pytest.raises(ValueError, match="sources"):
        MaskingConfig(sources=("person",))
    with pytest.raises(ValueError, match="replace_probs"):
        MaskingConfig(replace_probs=(0.8, 0.1, 0.2))
    assert MaskingConfig().sources == SALIENT_SOURCES


# ----------------------------------------------------------------------------- specials, ablations
@pytest.mark.parametrize("strategy", ["salient", "uniform", "span"])
def test_special_tokens_are_never_masked(strategy):
    cfg = MaskingConfig(strategy=strategy, salient_rate=0.5, replace_probs=BERT_REPLACE)
    rng = np.random.default_rng(2)
    n_masked = 0
    for i in range(300):
        ids, sal = _random_example(rng, with_specials=True)
        ex = _mask(ids, sal, cfg, i)
        if ex is None:
            continue
        masked = ex.labels != -100
        assert not np.isin(ids[masked], SPECIALS).any()
        assert (ex.input_ids[~masked] == ids[~masked]).all()
        changed = masked & (ex.input_ids != MASK)
        assert not np.isin(ex.input_ids[changed], SPECIALS).any()  # random replacements are never special
        n_masked += int(masked.sum())
    assert n_masked > 1000


def test_uniform_masks_15_percent():
    cfg = MaskingConfig(strategy="uniform")
    rng = np.random.default_rng(3)
    n_masked = n_tokens = 0
    for i in range(1000):
        ids, _ = _random_example(rng)
        ex = _mask(ids, None, cfg, i)
        assert all(e - s == 1 for s, e, _ in ex.masked_spans)
        n_masked += int((ex.labels != -100).sum())
        n_tokens += len(ids)
    assert n_masked / n_tokens == pytest.approx(0.15, abs=0.003)


def test_span_lengths_follow_truncated_geometric():
    cfg = MaskingConfig(strategy="span")
    pmf = span_length_pmf(0.2, 10)
    analytic = float((np.arange(1, 11) * pmf).sum())
    assert analytic == pytest.approx(3.79, abs=0.01)  # SpanBERT's mean span length
    lens = sample_span_lengths(np.random.default_rng(4), 100_000, cfg)
    assert lens.min() == 1 and lens.max() == 10
    assert lens.mean() == pytest.approx(analytic, abs=0.03)
    assert np.bincount(lens, minlength=11)[1:] / lens.size == pytest.approx(pmf, abs=0.005)
    # the "span" strategy masks ~15% in spans no longer than 10
    rng = np.random.default_rng(5)
    n_masked = n_tokens = 0
    for i in range(500):
        ids, _ = _random_example(rng, 100, 128)
        ex = _mask(ids, None, cfg, i)
        assert all(1 <= e - s <= 10 and k == "random" for s, e, k in ex.masked_spans)
        n_masked += int((ex.labels != -100).sum())
        n_tokens += len(ids)
    assert n_masked / n_tokens == pytest.approx(0.15, abs=0.003)


def test_bert_80_10_10_proportions():
    cfg = MaskingConfig(strategy="uniform", uniform_rate=0.5, replace_probs=BERT_REPLACE)
    rng = np.random.default_rng(6)
    counts = np.zeros(3)
    for i in range(200):
        ids, _ = _random_example(rng, 100, 128)
        ex = _mask(ids, None, cfg, i)
        m = ex.labels != -100
        out, orig = ex.input_ids[m], ids[m]
        counts += [(out == MASK).sum(), ((out != MASK) & (out != orig)).sum(), (out == orig).sum()]
    assert counts.sum() > 10_000
    assert counts / counts.sum() == pytest.approx([0.8, 0.1, 0.1], abs=0.02)


def test_default_is_always_mask():
    ex = _mask(IDS, SAL, MaskingConfig(salient_rate=1.0, random_span_rate=0.0), 0)
    m = ex.labels != -100
    assert (ex.input_ids[m] == MASK).all() and m.sum() == 5


# ----------------------------------------------------------------------------- DocStore + collator
@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    from ralm.corpus.build import BuildConfig, build_docstore

    tmp = tmp_path_factory.mktemp("masking")
    docs = [
        {"title": "Lincoln", "text": "Abraham Lincoln was born 12 February 1809 in Kentucky. " * 3},
        {"title": "Chekhov", "text": "Anton Chekhov was born 29 January 1860 in Taganrog, a port town."},
        {"title": "Empty of dates", "text": "A short line without any salient span in it."},
        {
            "title": "Frege",
            "text": "Gottlob Frege was born 8 November 1848. He died 26 July 1925 in Bad Kleinen.",
        },
    ]
    src = tmp / "docs.jsonl"
    src.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return build_docstore(
        [src], tmp / "store", BuildConfig(chunk_size=32), progress=False, log=lambda m: None
    )


def test_eligible_ids_match_a_loop(small_store):
    for cfg in (MaskingConfig(), MaskingConfig(sources=("date",)), MaskingConfig(sources=("link",))):
        codes = set(cfg.source_codes.tolist())
        loop = [
            i
            for i in range(len(small_store))
            if any(r[2] in codes and 0 < r[1] - r[0] <= 16 for r in small_store.salient_tokens(i).tolist())
        ]
        assert eligible_ids(small_store, cfg).tolist() == loop
    dates = eligible_ids(small_store, MaskingConfig(sources=("date",)))
    assert 0 < len(dates) < len(small_store)  # the dateless chunk is not eligible
    assert eligible_ids(small_store, MaskingConfig(strategy="uniform")).tolist() == list(
        range(len(small_store))
    )


def test_collator_batch(small_store, bert_tokenizer):
    tok = bert_tokenizer
    cfg = MaskingConfig(sources=("date",))
    ids = eligible_ids(small_store, cfg)[::-1].tolist()  # any order
    batch = MaskingCollator(small_store, tok, cfg, seed=0)(ids)
    B = len(ids)
    lens = [len(small_store.input_ids(i)) for i in ids]
    L = max(lens) + 2
    assert L <= 32
    for k in ("input_ids", "attention_mask", "labels"):
        assert tuple(batch[k].shape) == (B, L) and str(batch[k].dtype) == "torch.int64"
    assert batch["source_ids"].tolist() == ids
    x, am, y = batch["input_ids"].numpy(), batch["attention_mask"].numpy(), batch["labels"].numpy()
    assert (x[:, 0] == tok.cls_token_id).all()
    for b, (cid, t) in enumerate(zip(ids, lens, strict=True)):
        orig = np.asarray(small_store.input_ids(cid))
        assert x[b, t + 1] == tok.sep_token_id
        assert (x[b, t + 2 :] == tok.pad_token_id).all()
        assert am[b].tolist() == [1] * (t + 2) + [0] * (L - t - 2)
        assert y[b, 0] == -100 and (y[b, t + 1 :] == -100).all()
        m = y[b, 1 : t + 1] != -100
        assert m.any()
        assert (y[b, 1 : t + 1][m] == orig[m]).all()  # labels shifted by one for [CLS]
        assert (x[b, 1 : t + 1][m] == tok.mask_token_id).all()
        assert (x[b, 1 : t + 1][~m] == orig[~m]).all()
        # the masked salient span is a date span of this chunk (+1 for [CLS])
        sal = small_store.salient_tokens(cid)
        dates = [(int(s), int(e)) for s, e, c in sal if SALIENT_SOURCES[c] == "date"]
        assert any(m[s:e].all() for s, e in dates)


def test_collator_drops_ineligible_and_is_deterministic(small_store, bert_tokenizer):
    cfg = MaskingConfig(sources=("date",))
    el = set(eligible_ids(small_store, cfg).tolist())
    all_ids = list(range(len(small_store)))
    a = MaskingCollator(small_store, bert_tokenizer, cfg, seed=7, return_tensors="np")(all_ids)
    b = MaskingCollator(small_store, bert_tokenizer, cfg, seed=7, return_tensors="np")(all_ids)
    assert a["source_ids"].tolist() == sorted(el)
    for k in a:
        assert (a[k] == b[k]).all()
