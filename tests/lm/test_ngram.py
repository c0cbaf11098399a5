"""Tests of ralm.lm n-gram models: normalisation, hand-computed Kneser-Ney values, nltk.lm
agreement (MLE, Laplace), KenLM agreement on exported ARPA files, ARPA round trips and errors."""

from __future__ import annotations

import math
import os
import re
from fractions import Fraction

import numpy as np
import pytest
from lm_ref import TOY

from ralm.errors import RalmError
from ralm.lm import NGramLM, word_tokenize
from ralm.lm.smoothing import kn_discount, mkn_discounts

TOY_SENTS = [s.split() for s in TOY]

NORMALISED = [
    ("mle", {}),
    ("laplace", {}),
    ("lidstone", {"delta": 0.1}),
    ("katz", {}),
    ("kn", {}),
    ("mkn", {}),
]


def histories(sentences, order):
    """Every context a model of `order` uses on `sentences`: the (<s>-padded) history of
    each predicted token, cut to order - 1 tokens, plus the empty context."""
    out = {()}
    for s in sentences:
        padded = ["<s>", *s, "</s>"]
        for t in range(1, len(padded)):
            out.add(tuple(padded[max(0, t - order + 1) : t]) if order > 1 else ())
    return sorted(out)


def predicted_vocab(lm):
    return [w for w in lm.vocab.id_to_token if w != "<s>"]


# --------------------------------------------------------------------------- tokenisation
def test_word_tokenize_unicode_and_lowercase():
    assert word_tokenize("Æble-tærte, 3.5 kr!", lowercase=True) == [
        "æble",
        "-",
        "tærte",
        ",",
        "3",
        ".",
        "5",
        "kr",
        "!",
    ]
    assert word_tokenize("Straße  Œuvre") == ["Straße", "Œuvre"]
    assert word_tokenize("") == []


# --------------------------------------------------------------------------- sum to one
@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize(("estimator", "params"), NORMALISED, ids=[e for e, _ in NORMALISED])
def test_distributions_sum_to_one(estimator, params, order):
    lm = NGramLM.fit(TOY_SENTS, order=order, estimator=estimator, **params)
    vocab = predicted_vocab(lm)
    assert "</s>" in vocab and "<unk>" in vocab
    contexts = histories(TOY_SENTS, order)
    if estimator != "mle":  # unseen contexts too (MLE is undefined there: all zeros, like nltk)
        contexts += [("zebra",), ("the", "zebra"), ("zebra", "cat", "sat")]
    for ctx in contexts:
        total = sum(10.0 ** lm.log10_prob(w, ctx) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-9), (estimator, order, ctx)
        # the table-driven next-word distribution agrees with the scorer
        dist = lm.next_word_log10_probs(ctx)
        ours = [lm.log10_prob(w, ctx) for w in lm.vocab.id_to_token]
        keep = [i for i in range(lm.vocab_size) if i != 1]
        np.testing.assert_allclose(dist[keep], np.array(ours)[keep], atol=1e-12)


@pytest.mark.parametrize("order", [2, 3, 4])
def test_arpa_loaded_model_sums_to_one(tmp_path, order):
    path = tmp_path / "m.arpa"
    NGramLM.fit(TOY_SENTS, order=order, estimator="mkn").to_arpa(path)
    lm = NGramLM.from_arpa(path)
    for ctx in histories(TOY_SENTS, order):
        assert sum(10.0 ** lm.log10_prob(w, ctx) for w in predicted_vocab(lm)) == pytest.approx(1.0, abs=1e-9)


def test_sum_to_one_on_real_text(lee_sentences):
    """Same property on 400 real sentences (discounts estimated, no fallback)."""
    train = lee_sentences[0][:400]
    for est in ("katz", "kn", "mkn"):
        lm = NGramLM.fit(train, order=3, estimator=est)
        assert lm.discount_fallback_orders == []
        keep = np.arange(lm.vocab_size) != 1
        for ctx in histories(train[:60], 3):
            assert (10.0 ** lm.next_word_log10_probs(ctx)[keep]).sum() == pytest.approx(1.0, abs=1e-9)


def test_stupid_backoff_is_not_normalised(tmp_path):
    lm = NGramLM.fit(TOY_SENTS, order=3, estimator="stupid_backoff")
    sums = [sum(10.0 ** lm.log10_prob(w, c) for w in predicted_vocab(lm)) for c in histories(TOY_SENTS, 3)]
    assert max(sums) > 1.01  # scores, not probabilities: excluded from the sum-to-1 checks
    assert not lm.is_normalised
    # S(sat | the cat) = c(the cat sat) / c(the cat) = 1/2 ; S(saw | the cat) = 0.4 * c(cat saw)/c(cat) = 0.4/3
    assert 10 ** lm.log10_prob("sat", ["the", "cat"]) == pytest.approx(1 / 2)
    assert 10 ** lm.log10_prob("saw", ["the", "cat"]) == pytest.approx(0.4 * 1 / 3)
    with pytest.raises(RalmError, match="not normalised"):
        lm.to_arpa(tmp_path / "sb.arpa")


# --------------------------------------------------------------------------- hand computations
# Corpus: "a b c", "a b", "b c"  ->  <s> a b c </s> / <s> a b </s> / <s> b c </s>
# Trigram raw counts: <s> a b:2, a b c:1, b c </s>:2, a b </s>:1, <s> b c:1
# Bigram adjusted counts (lmplz): n-grams starting with <s> keep raw counts, others get the
#   number of distinct left extensions among the trigrams:
#   <s> a:2 (raw), <s> b:1 (raw), a b:1 (<s> a b), b c:2 (a b c, <s> b c),
#   c </s>:1 (b c </s>), b </s>:1 (a b </s>)
# Unigram adjusted counts (distinct bigram types ending in w): a:1, b:2, c:1, </s>:2,
#   <unk>:0, <s>:0. Sum A = 6. |V| = {<unk>, </s>, a, b, c} = 5 (no <s>).
HAND = [["a", "b", "c"], ["a", "b"], ["b", "c"]]


def test_interpolated_kneser_ney_by_hand():
    lm = NGramLM.fit(HAND, order=3, estimator="kn")
    # D = n1 / (n1 + 2 n2) per order on adjusted counts:
    #   1-grams {1,2,1,2}: n1=2, n2=2 -> 2/6;  2-grams {2,1,1,2,1,1}: 4/(4+4) = 1/2;
    #   3-grams {2,1,2,1,1}: n1=3, n2=2 -> 3/7
    D1, D2, D3 = Fraction(1, 3), Fraction(1, 2), Fraction(3, 7)
    assert [d[0] for d in lm.discounts] == pytest.approx([float(D1), float(D2), float(D3)])
    # unigrams: gamma0 = D1 * 4 types / 6 = 2/9 ; p(w) = (a(w) - D1)/6 + gamma0/5
    g0 = D1 * 4 / 6
    p1 = {w: (a - D1) / 6 + g0 / 5 for w, a in {"a": 1, "b": 2, "c": 1, "</s>": 2}.items()}
    p1["<unk>"] = g0 / 5  # = 2/45: <unk> only gets its share of the uniform distribution
    assert p1["a"] == Fraction(7, 45) and p1["b"] == Fraction(29, 90) and p1["<unk>"] == Fraction(2, 45)
    # context "b": b c:2, b </s>:1 -> denominator 3, gamma(b) = D2 * 2 / 3 = 1/3
    p_c_b = (2 - D2) / 3 + Fraction(1, 3) * p1["c"]  # = 149/270
    p_a_b = Fraction(1, 3) * p1["a"]  # unseen: gamma * lower order = 14/270
    # context "<s>": <s> a:2, <s> b:1 -> gamma(<s>) = D2 * 2 / 3 = 1/3
    p_a_s = (2 - D2) / 3 + Fraction(1, 3) * p1["a"]  # = 149/270
    # context "a": a b:1 -> gamma(a) = D2 * 1 / 1 = 1/2
    p_b_a = (1 - D2) / 1 + Fraction(1, 2) * p1["b"]  # = 119/180
    # trigram context "a b": a b c:1, a b </s>:1 -> gamma = D3 * 2 / 2 = 3/7
    p_c_ab = (1 - D3) / 2 + D3 * p_c_b  # = 47/90
    # trigram context "<s> a": <s> a b:2 -> gamma = D3 / 2 = 3/14
    p_b_sa = (2 - D3) / 2 + D3 / 2 * p_b_a  # = 779/840
    assert (p_c_b, p_c_ab, p_b_sa) == (Fraction(149, 270), Fraction(47, 90), Fraction(779, 840))
    cases = [
        ("<unk>", [], p1["<unk>"]),
        ("zebra", ["a", "b"], D3 * Fraction(1, 3) * p1["<unk>"]),  # OOV after "a b": two backoffs
        ("b", [], p1["b"]),
        ("c", ["b"], p_c_b),
        ("a", ["b"], p_a_b),
        ("a", ["<s>"], p_a_s),
        ("c", ["a", "b"], p_c_ab),
        ("b", ["<s>", "a"], p_b_sa),
        ("a", ["x", "b"], p_a_b),  # unseen context "x b": backoff weight 1
    ]
    for word, ctx, want in cases:
        assert lm.log10_prob(word, ctx) == pytest.approx(math.log10(want), abs=1e-12), (word, ctx)
    # "a b" as a sentence: p(a|<s>) p(b|<s> a) p(</s>|a b)
    p_end_ab = (1 - D3) / 2 + D3 * ((1 - D2) / 3 + Fraction(1, 3) * p1["</s>"])
    want = math.log10(p_a_s) + math.log10(p_b_sa) + math.log10(p_end_ab)
    assert lm.score_sentence(["a", "b"]) == pytest.approx(want, abs=1e-12)


def test_modified_kneser_ney_by_hand():
    # Too few counts for D3+ (no adjusted count 3 or 4): lmplz --discount_fallback values
    # D1=0.5, D2=1, D3+=1.5 are used for every order (and reported).
    lm = NGramLM.fit(HAND, order=3, estimator="mkn")
    assert lm.discounts == [[0.5, 1.0, 1.5]] * 3 and lm.discount_fallback_orders == [1, 2, 3]
    D = {1: Fraction(1, 2), 2: Fraction(1), 3: Fraction(3, 2)}
    # unigrams a:1, b:2, c:1, </s>:2 -> gamma0 = (D1*2 + D2*2) / 6 = 1/2
    g0 = (D[1] * 2 + D[2] * 2) / 6
    p1 = {"a": (1 - D[1]) / 6 + g0 / 5, "b": (2 - D[2]) / 6 + g0 / 5, "<unk>": g0 / 5}
    p1["c"], p1["</s>"] = p1["a"], p1["b"]
    assert (p1["a"], p1["b"], p1["<unk>"]) == (Fraction(11, 60), Fraction(16, 60), Fraction(1, 10))
    # context "b": b c:2 (D2), b </s>:1 (D1) -> gamma = (0.5 + 1) / 3 = 1/2
    p_c_b = (2 - D[2]) / 3 + Fraction(1, 2) * p1["c"]  # 51/120
    p_e_b = (1 - D[1]) / 3 + Fraction(1, 2) * p1["</s>"]  # 36/120
    # context "a b": a b c:1, a b </s>:1 -> gamma = (0.5 * 2) / 2 = 1/2
    p_c_ab = (1 - D[1]) / 2 + Fraction(1, 2) * p_c_b  # 37/80
    # context "<s>": <s> a:2 (raw, D2), <s> b:1 (raw, D1) -> gamma = 1.5 / 3 = 1/2
    p_a_s = (2 - D[2]) / 3 + Fraction(1, 2) * p1["a"]
    assert (p_c_b, p_e_b, p_c_ab) == (Fraction(51, 120), Fraction(36, 120), Fraction(37, 80))
    for word, ctx, want in [
        ("a", [], p1["a"]),
        ("<unk>", [], p1["<unk>"]),
        ("c", ["b"], p_c_b),
        ("</s>", ["b"], p_e_b),
        ("c", ["a", "b"], p_c_ab),
        ("a", ["<s>"], p_a_s),
        ("b", ["b"], Fraction(1, 2) * p1["b"]),
    ]:
        assert lm.log10_prob(word, ctx) == pytest.approx(math.log10(want), abs=1e-12), (word, ctx)


def test_discount_formulas_by_hand():
    # Chen & Goodman: Y = n1/(n1+2n2) = 10/20 = 0.5 ; D1 = 1 - 2Y n2/n1 = 1 - 0.5 = 0.5
    # D2 = 2 - 3Y n3/n2 = 2 - 0.9 = 1.1 ; D3+ = 3 - 4Y n4/n3 = 3 - 4/3 = 5/3
    assert mkn_discounts(10, 5, 3, 2) == pytest.approx((0.5, 1.1, 5 / 3))
    assert mkn_discounts(10, 5, 0, 2) is None  # lmplz refuses (no 3s)
    assert kn_discount(3, 2) == pytest.approx(3 / 7)
    with pytest.raises(RalmError, match="corpus too small"):
        NGramLM.fit(HAND, order=3, estimator="mkn", discount_fallback=None)
    lm = NGramLM.fit(HAND, order=2, estimator="mkn", discounts=[(0.4, 0.9, 1.2), (0.3, 0.8, 1.1)])
    assert lm.discounts == [[0.4, 0.9, 1.2], [0.3, 0.8, 1.1]]


# --------------------------------------------------------------------------- nltk agreement
def _nltk_model(cls, order, sentences, **kw):
    """nltk model on the same corpus. nltk pads with order-1 <s> and </s>; order 1 gets no
    padding, so </s> is appended by hand there. nltk's vocabulary would include <s>, which
    ralm never predicts; it is left out (mapped to <UNK>) so |V| is the same on both sides."""
    from nltk.lm import Vocabulary
    from nltk.lm.preprocessing import padded_everygram_pipeline

    words = [w for s in sentences for w in s] + ["</s>"]
    if order == 1:
        train = [[(w,) for w in [*s, "</s>"]] for s in sentences]
    else:
        train, _ = padded_everygram_pipeline(order, sentences)
    model = cls(order=order, vocabulary=Vocabulary(words, unk_cutoff=1), **kw)
    model.fit(train)
    return model


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("estimator", ["mle", "laplace", "lidstone"])
def test_matches_nltk(estimator, order, lee_sentences):
    nltk_lm = pytest.importorskip("nltk.lm")
    cls, kw, params = {
        "mle": (nltk_lm.MLE, {}, {}),
        "laplace": (nltk_lm.Laplace, {}, {}),
        "lidstone": (nltk_lm.Lidstone, {"gamma": 0.25}, {"delta": 0.25}),
    }[estimator]
    for corpus in (TOY_SENTS, lee_sentences[0][:40]):
        ours = NGramLM.fit(corpus, order=order, estimator=estimator, **params)
        theirs = _nltk_model(cls, order, corpus, **kw)
        assert len(theirs.vocab) == ours.vocab_size - 1
        probe = ["the", "</s>", "zebra", corpus[0][0]]
        follow = {}  # context -> words seen after it
        for s in corpus:
            padded = ["<s>", *s, "</s>"]
            for t in range(1, len(padded)):
                ctx = tuple(padded[max(0, t - order + 1) : t]) if order > 1 else ()
                follow.setdefault(ctx, []).append(padded[t])
        for ctx in histories(corpus, order):
            if order > 1 and not ctx:  # nltk's lower orders count its padding symbols too
                continue
            nctx = (["<s>"] * (order - 1 - len(ctx)) + list(ctx)) if order > 1 else []
            dist = 10.0 ** ours.next_word_log10_probs(ctx)
            # real text: what follows the context, plus a few others (<unk> among them)
            words = predicted_vocab(ours) if corpus is TOY_SENTS else probe + follow.get(ctx, [])[:20]
            for w in words:
                want = theirs.score("<UNK>" if w == "<unk>" else w, nctx or None)
                got = dist[ours.vocab.token_to_id.get(w, 0)]
                assert got == pytest.approx(want, rel=1e-12, abs=1e-15), (estimator, order, ctx, w)
                if corpus is TOY_SENTS:
                    assert 10.0 ** ours.log10_prob(w, ctx) == pytest.approx(want, rel=1e-12, abs=1e-15)


# --------------------------------------------------------------------------- KenLM agreement
def _split(article):
    return [t for s in re.split(r"(?<=[.!?])\s+", article) if (t := word_tokenize(s, lowercase=True))]


@pytest.fixture(scope="module")
def lee_sentences():
    gensim = pytest.importorskip("gensim")
    path = os.path.join(os.path.dirname(gensim.__file__), "test", "test_data", "lee_background.cor")
    if not os.path.exists(path):
        pytest.skip("gensim's lee_background.cor is not installed")
    with open(path, encoding="utf-8") as f:
        articles = f.read().splitlines()
    train = [s for a in articles[:250] for s in _split(a)]
    held = [s for a in articles[250:] for s in _split(a)]
    return train, held


EXPORTABLE = [("katz", 3), ("katz", 5), ("kn", 3), ("kn", 4), ("mkn", 2), ("mkn", 3), ("mkn", 5)]


@pytest.mark.parametrize(("estimator", "order"), EXPORTABLE)
def test_arpa_scores_match_kenlm(tmp_path, lee_sentences, estimator, order):
    kenlm = pytest.importorskip("kenlm")
    train, held = lee_sentences
    lm = NGramLM.fit(train, order=order, estimator=estimator)
    assert lm.discount_fallback_orders == []
    vocab = set(lm.vocab.id_to_token)
    assert len(held) >= 300 and sum(t not in vocab for s in held for t in s) > 100  # OOVs present
    path = tmp_path / f"{estimator}{order}.arpa"
    lm.to_arpa(path)
    km = kenlm.Model(str(path))
    for bos, eos in [(True, True), (False, False)]:
        ours = lm.score_sentences(held, bos=bos, eos=eos)
        theirs = np.array([km.score(" ".join(s), bos=bos, eos=eos) for s in held])
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)
    # single-sentence API agrees with the batch one
    assert lm.score_sentence(held[0]) == pytest.approx(km.score(" ".join(held[0])), abs=1e-4)
    assert lm.perplexity(held) == pytest.approx(
        10 ** (-sum(km.score(" ".join(s)) for s in held) / sum(len(s) + 1 for s in held)), rel=1e-5
    )


# --------------------------------------------------------------------------- ARPA round trip
@pytest.mark.parametrize(
    ("estimator", "order", "params"),
    [
        ("mkn", 3, {}),
        ("kn", 2, {}),
        ("katz", 4, {}),
        ("laplace", 1, {}),
        ("lidstone", 1, {"delta": 0.3}),
        ("mkn", 1, {}),
    ],
)
def test_arpa_round_trip_is_identical(tmp_path, lee_sentences, estimator, order, params):
    train, held = lee_sentences
    lm = NGramLM.fit(train[:600], order=order, estimator=estimator, **params)
    first, second = tmp_path / "a.arpa", tmp_path / "b.arpa"
    lm.to_arpa(first)
    back = NGramLM.from_arpa(first)
    assert back.order == order and back.vocab.id_to_token == lm.vocab.id_to_token
    assert np.array_equal(back.score_sentences(held), lm.score_sentences(held))
    assert np.array_equal(
        back.score_sentences(held, bos=False, eos=False), lm.score_sentences(held, bos=False, eos=False)
    )
    assert back.log10_prob("the", ["<s>"]) == lm.log10_prob("the", ["<s>"])
    back.to_arpa(second)
    assert first.read_text(encoding="utf-8") == second.read_text(encoding="utf-8")
    lines = first.read_text(encoding="utf-8").splitlines()
    assert any(re.fullmatch(r"-99\t<s>(\t.*)?", line) for line in lines)  # <s>: context only
    assert any(line.startswith("# ralm estimator=" + estimator) for line in lines)


SRILM_STYLE = """
\\data\\
ngram 1=6
ngram 2=4
ngram 3=2

\\1-grams:
-1.0\t<unk>
-99\t<s>\t-0.5
-0.7\t</s>
-0.6\ta\t-0.2
-0.8\tb\t-0.3
-0.9\tc

\\2-grams:
-0.3\t<s> a\t-0.1
-0.4\ta b\t-0.15
-0.5\tb </s>
-0.45\tb c

\\3-grams:
-0.05\t<s> a b
-0.02\t<s> a </s>

\\end\\
"""


def test_foreign_arpa_scores_like_kenlm(tmp_path):
    """SRILM-style file: backoff column only on contexts, and "<s> a </s>" listed while its
    suffix "a </s>" is not (KenLM still uses the trigram; so does ralm)."""
    kenlm = pytest.importorskip("kenlm")
    path = tmp_path / "srilm.arpa"
    path.write_text(SRILM_STYLE, encoding="utf-8")
    km, lm = kenlm.Model(str(path)), NGramLM.from_arpa(path)
    for text in ["a", "a b", "a b c", "b a", "c", "x a b", "a a b c b", "", "a </s> b"]:
        for bos, eos in [(True, True), (False, False), (True, False), (False, True)]:
            want = km.score(text, bos=bos, eos=eos)
            assert lm.score_sentence(text.split(), bos=bos, eos=eos) == pytest.approx(want, abs=1e-6)
    # by hand: p(a | <s>) p(</s> | <s> a) = -0.3 - 0.02 ; p(c | b) after "a b": bow(a b) + p(c | b)
    assert lm.score_sentence(["a"]) == pytest.approx(-0.32)
    assert lm.log10_prob("c", ["a", "b"]) == pytest.approx(-0.15 - 0.45)


def test_arpa_missing_unk_is_added(tmp_path):
    text = "\\data\\\nngram 1=3\n\n\\1-grams:\n-1\t<s>\n-0.5\t</s>\n-0.2\tx\n\n\\end\\\n"
    path = tmp_path / "nounk.arpa"
    path.write_text(text, encoding="utf-8")
    lm = NGramLM.from_arpa(path)
    assert lm.log10_prob("zebra") == -100.0 and lm.log10_prob("x", ["<s>"]) == -0.2


def _write_variant(tmp_path, lines, name):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_malformed_arpa_errors_name_the_line(tmp_path):
    good = tmp_path / "good.arpa"
    NGramLM.fit(TOY_SENTS, order=3, estimator="mkn").to_arpa(good)
    lines = good.read_text(encoding="utf-8").splitlines()
    first_bigram = lines.index("\\2-grams:") + 1
    first_trigram = lines.index("\\3-grams:") + 1
    first_unigram = lines.index("\\1-grams:") + 1
    header2 = next(i for i, line in enumerate(lines) if line.startswith("ngram 2="))

    def variant(i, new):
        out = list(lines)
        if new is None:
            del out[i]
        else:
            out[i] = new
        return out

    p, w, b = lines[first_bigram].split("\t")
    tri_p, tri_w = lines[first_trigram].split("\t")
    n2 = int(lines[header2].split("=")[1])
    cases = [
        ("number", variant(first_bigram, f"abc\t{w}\t{b}"), first_bigram, "expected a number"),
        ("backoff", variant(first_bigram, f"{p}\t{w}\tx1"), first_bigram, "expected a number"),
        ("words", variant(first_trigram, f"{tri_p}\t{tri_w.rsplit(' ', 1)[0]}"), first_trigram, "word"),
        ("hibow", variant(first_trigram, f"{tri_p}\t{tri_w}\t-0.5"), first_trigram, "highest-order"),
        ("unknown", variant(first_bigram, f"{p}\tzebra cat\t{b}"), first_bigram, "not among the unigrams"),
        ("dup", variant(first_unigram + 4, lines[first_unigram + 3]), first_unigram + 4, "listed twice"),
        ("count", variant(header2, f"ngram 2={n2 + 1}"), first_bigram + n2, "header says 'ngram 2="),
        ("garbage", ["hello world", *lines], 0, "expected \\\\data"),
        ("header", variant(header2, "ngram 2 = x"), header2, "ngram 2=COUNT"),
        ("ctx", variant(first_trigram, f"{tri_p}\tmat mat the"), first_trigram, "context 'mat mat'"),
    ]
    for name, content, line0, pattern in cases:
        path = _write_variant(tmp_path, content, f"{name}.arpa")
        with pytest.raises(RalmError, match=pattern) as info:
            NGramLM.from_arpa(path)
        msg = str(info.value)
        assert "\n" not in msg
        assert f"{path}:{line0 + 1}:" in msg, (name, msg)
    no_end = _write_variant(tmp_path, [x for x in lines if x != "\\end\\"], "noend.arpa")
    with pytest.raises(RalmError, match="end"):
        NGramLM.from_arpa(no_end)
    with pytest.raises(RalmError, match="not found"):
        NGramLM.from_arpa(tmp_path / "missing.arpa")


# --------------------------------------------------------------------------- user errors
def test_user_errors_are_one_line_ralm_errors(tmp_path):
    cases = [
        (lambda: NGramLM.fit(TOY_SENTS, order=0), "order"),
        (lambda: NGramLM.fit(TOY_SENTS, order=11), "order"),
        (lambda: NGramLM.fit(TOY_SENTS, order="3"), "order"),
        (lambda: NGramLM.fit([], order=2), "empty corpus"),
        (lambda: NGramLM.fit([[], []], order=2), "empty corpus"),
        (lambda: NGramLM.fit(TOY_SENTS, order=2, estimator="witten_bell"), "valid: mle, laplace, lidstone"),
        (lambda: NGramLM.fit(TOY_SENTS, order=2, estimator="kn", delta=1), "no parameter 'delta'"),
        (lambda: NGramLM.fit(TOY_SENTS, order=2, estimator="lidstone", delta=0), "delta"),
        (lambda: NGramLM.fit([["a", "<s>", "b"]], order=2), "reserved token"),
        (lambda: NGramLM.fit([["a b"]], order=2), "whitespace"),
        (lambda: NGramLM.fit(["the cat"], order=2), "lists of tokens"),
        (lambda: NGramLM.fit(TOY_SENTS, order=2, estimator="mle").to_arpa(tmp_path / "x"), "zero"),
        (lambda: NGramLM.fit(TOY_SENTS, order=2, estimator="laplace").to_arpa(tmp_path / "x"), "order 1"),
        (lambda: NGramLM.fit(TOY_SENTS, order=2, estimator="kn", discount=1.5), "D1"),
        (lambda: NGramLM.fit(TOY_SENTS, order=2, estimator="mkn", discounts=[(0.5, 1, 1.5)]), "per order"),
    ]
    for fn, pattern in cases:
        with pytest.raises(RalmError, match=pattern) as info:
            fn()
        assert "\n" not in str(info.value)
    assert NGramLM.fit(TOY_SENTS, order=2, estimator="Modified_KN").estimator == "mkn"
    assert NGramLM.fit(TOY_SENTS, order=6, estimator="kn").sizes[0] == 13  # 10 words + 3 markers


# --------------------------------------------------------------------------- sampling
@pytest.mark.parametrize("estimator", ["mkn", "katz", "laplace", "stupid_backoff", "mle"])
def test_sampling_is_seeded(estimator):
    lm = NGramLM.fit(TOY_SENTS, order=3, estimator=estimator)
    a = [lm.sample(seed, max_len=12) for seed in range(20)]
    assert a == [lm.sample(seed, max_len=12) for seed in range(20)]
    assert len({tuple(x) for x in a}) > 3
    vocab = set(predicted_vocab(lm)) - {"</s>", "<unk>"}
    assert all(set(x) <= vocab and len(x) <= 12 for x in a)
    if estimator == "mle":  # only seen continuations
        assert all(x[0] in {"the", "a"} for x in a)
    cont = lm.sample(3, max_len=5, context=["the", "cat"])
    assert len(cont) <= 5 and lm.sample(3, max_len=0) == []


def test_scoring_paths_agree(lee_sentences):
    train, held = lee_sentences
    lm = NGramLM.fit(train[:500], order=4, estimator="mkn")
    batch = lm.score_sentences(held[:30])
    single = [lm.score_sentence(s) for s in held[:30]]
    np.testing.assert_allclose(batch, single, atol=1e-12)
    s = held[0]
    by_token = [lm.log10_prob(w, ["<s>", *s[:i]]) for i, w in enumerate([*s, "</s>"])]
    np.testing.assert_allclose(lm.full_scores(s), by_token, atol=1e-12)
    assert math.isfinite(lm.perplexity(held)) and lm.perplexity(held) > 1
