"""ARPA reading and writing: bad values and counts named by file and line, every layout the
reader accepts giving the same tables, the writer's exact text, and writes that never leave a
half-written file."""

from __future__ import annotations

import os
import re

import lm_ref
import numpy as np
import pytest

from ralm.errors import RalmError
from ralm.lm import NGramLM
from ralm.lm.arpa import read_arpa, write_arpa

TOY = [s.split() for s in lm_ref.TOY]


@pytest.fixture()
def good_lines(tmp_path):
    path = tmp_path / "good.arpa"
    NGramLM.fit(TOY, order=3, estimator="mkn").to_arpa(path)
    return path.read_text(encoding="utf-8").splitlines()


def _write(tmp_path, lines, name="bad.arpa"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _replace_field(lines, line0, field, value):
    parts = lines[line0].split("\t")
    parts[field] = value
    out = list(lines)
    out[line0] = "\t".join(parts)
    return out


# --------------------------------------------------------------------------- bad values
@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        ("99", r"log10 probability '99' is above 0"),
        ("0.5", r"log10 probability '0.5' is above 0"),
        ("inf", r"log10 probability 'inf' is not a finite number"),
        ("1e999", r"log10 probability '1e999' is not a finite number"),
        ("-inf", r"log10 probability '-inf' is not a finite number"),
        ("nan", r"log10 probability 'nan' is not a finite number"),
        ("-1_5", r"expected a number, got '-1_5'"),
    ],
)
@pytest.mark.parametrize("section", ["\\1-grams:", "\\2-grams:", "\\3-grams:"])
def test_bad_probabilities_name_the_line(tmp_path, good_lines, value, pattern, section):
    line0 = good_lines.index(section) + 1 + (1 if section == "\\1-grams:" else 0)
    path = _write(tmp_path, _replace_field(good_lines, line0, 0, value))
    with pytest.raises(RalmError, match=pattern) as info:
        read_arpa(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line0 + 1}: ") and "\n" not in msg, msg


@pytest.mark.parametrize("value", ["inf", "-inf", "1e999", "nan", "-1e400"])
def test_bad_backoffs_name_the_line(tmp_path, good_lines, value):
    line0 = good_lines.index("\\2-grams:") + 1
    path = _write(tmp_path, _replace_field(good_lines, line0, 2, value))
    with pytest.raises(
        RalmError, match=rf"backoff weight '{re.escape(value)}' is not a finite number"
    ) as info:
        read_arpa(path)
    assert str(info.value).startswith(f"{path}:{line0 + 1}: ")


def test_zero_probability_minus_99_and_positive_backoff_are_accepted(tmp_path, good_lines):
    first_uni = good_lines.index("\\1-grams:") + 1
    first_bi = good_lines.index("\\2-grams:") + 1
    lines = _replace_field(good_lines, first_uni + 3, 0, "0")  # log10 p = 0: probability 1
    lines = _replace_field(lines, first_uni + 4, 0, "-99")
    lines = _replace_field(lines, first_bi, 2, "0.75")  # log10 alpha > 0 is legal
    lines = _replace_field(lines, first_bi + 1, 0, "-0.0")
    a = read_arpa(_write(tmp_path, lines))
    assert 0.0 in a.log10_prob[0] and -99.0 in a.log10_prob[0] and 0.75 in a.log10_bow[1]


def test_unk_above_zero_is_refused_by_the_cli(tmp_path, good_lines, capsys):
    from ralm.cli import main

    unk = next(i for i, line in enumerate(good_lines) if line.split("\t")[1:2] == ["<unk>"])
    path = _write(tmp_path, _replace_field(good_lines, unk, 0, "99"))
    text = tmp_path / "t.txt"
    text.write_text("a zebra\n", encoding="utf-8")
    assert main(["ngram", "score", str(path), str(text)]) == 2
    captured = capsys.readouterr()
    assert "perplexity" not in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"ralm: error: {path}:{unk + 1}: log10 probability '99' is above 0"
    ), err


# --------------------------------------------------------------------------- counts and truncation
def _header(lines, k):
    return next(i for i, line in enumerate(lines) if line.startswith(f"ngram {k}="))


def _bigram_count_off_by(tmp_path, good_lines, delta):
    """The good file with its header's 2-gram count moved by `delta`: (its path, the true count)."""
    h = _header(good_lines, 2)
    n2 = int(good_lines[h].split("=")[1])
    lines = list(good_lines)
    lines[h] = f"ngram 2={n2 + delta}"
    return _write(tmp_path, lines), n2


def test_header_count_too_small(tmp_path, good_lines):
    path, n2 = _bigram_count_off_by(tmp_path, good_lines, -1)
    last_bigram = good_lines.index("\\2-grams:") + n2  # 0-based: the entry beyond the count
    with pytest.raises(RalmError) as info:
        read_arpa(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{last_bigram + 1}: "), msg
    assert f"more 2-grams than the header's 'ngram 2={n2 - 1}'" in msg and "\n" not in msg


def test_header_count_too_large(tmp_path, good_lines):
    path, n2 = _bigram_count_off_by(tmp_path, good_lines, 3)
    with pytest.raises(RalmError) as info:
        read_arpa(path)
    msg = str(info.value)
    end = good_lines.index("\\2-grams:") + 1 + n2
    assert msg.startswith(f"{path}:{end + 1}: "), msg
    assert f"the 2-grams end after {n2} entries but the header says 'ngram 2={n2 + 3}'" in msg


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.95])
def test_truncated_file(tmp_path, good_lines, cut):
    data = ("\n".join(good_lines) + "\n").encode()
    path = tmp_path / "cut.arpa"
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(RalmError) as info:
        read_arpa(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:") and "\n" not in msg
    assert "the file is truncated" in msg[len(str(path)) :], msg


# --------------------------------------------------------------------------- layouts
def _tables_equal(a, b):
    assert a.vocab.id_to_token == b.vocab.id_to_token
    for x, y in zip(a.keys + a.log10_prob + a.log10_bow, b.keys + b.log10_prob + b.log10_bow, strict=True):
        assert np.array_equal(x, y)


def test_layouts_read_the_same(tmp_path, good_lines):
    """Tabs or single spaces, CRLF, trailing blanks, bows on some lines only, no final
    newline, shuffled entries: all read to the same tables."""
    ref = read_arpa(_write(tmp_path, good_lines, "ref.arpa"))
    spaces = [line.replace("\t", " ") for line in good_lines]
    crlf_path = tmp_path / "crlf.arpa"
    crlf_path.write_bytes(("\r\n".join(good_lines) + "\r\n").encode())
    trailing = [line + (" \t" if "\t" in line else "") for line in good_lines]
    no_zero_bow = [re.sub(r"\t0$", "", line) for line in good_lines]  # SRILM: bows only where set
    assert no_zero_bow != good_lines
    nofinal = tmp_path / "nofinal.arpa"
    nofinal.write_text("\n".join(good_lines), encoding="utf-8")
    first_tri = good_lines.index("\\3-grams:") + 1
    n3 = int(good_lines[_header(good_lines, 3)].split("=")[1])
    shuffled = list(good_lines)
    shuffled[first_tri : first_tri + n3] = shuffled[first_tri : first_tri + n3][::-1]
    for path in [
        _write(tmp_path, spaces, "spaces.arpa"),
        crlf_path,
        _write(tmp_path, trailing, "trail.arpa"),
        _write(tmp_path, no_zero_bow, "srilm.arpa"),
        nofinal,
        _write(tmp_path, shuffled, "shuf.arpa"),
    ]:
        _tables_equal(read_arpa(path), ref)


def test_words_may_hold_non_ascii_whitespace(tmp_path):
    """KenLM splits ARPA lines on spaces and tabs only: a no-break space is part of a word."""
    kenlm = pytest.importorskip("kenlm")
    text = (
        "\\data\\\nngram 1=5\nngram 2=2\n\n\\1-grams:\n-1\t<unk>\n-99\t<s>\t-0.3\n-0.5\t</s>\n"
        "-0.4\ta\u00a0b\t-0.2\n-0.6\tc\t-0.1\n\n\\2-grams:\n-0.2\t<s> a\u00a0b\n-0.1\ta\u00a0b c\n\n\\end\\\n"
    )
    path = tmp_path / "nbsp.arpa"
    path.write_text(text, encoding="utf-8")
    lm, km = NGramLM.from_arpa(path), kenlm.Model(str(path))
    assert "a\u00a0b" in lm.vocab
    for sent in (["a\u00a0b", "c"], ["c", "a\u00a0b"], ["a", "b"]):
        assert lm.score_sentence(sent) == pytest.approx(km.score(" ".join(sent)), abs=1e-6)


def test_fast_and_slow_paths_agree(tmp_path, good_lines, monkeypatch):
    """The line-by-line reader (used for odd layouts and to find a bad line) gives the very same
    tables as the bulk reader."""
    from ralm.lm import arpa_read

    path = _write(tmp_path, good_lines)
    fast = read_arpa(path)
    monkeypatch.setattr(arpa_read, "_bulk_section", lambda *a, **k: None)
    _tables_equal(read_arpa(path), fast)


# --------------------------------------------------------------------------- writing
def _reference_text(vocab, keys, probs, bows, meta):
    """The ARPA text the writer has always produced, built line by line."""

    def fmt(x):
        return "0" if x == 0.0 else "-99" if x == -99.0 else repr(float(x))

    V, order = len(vocab), len(keys)
    out = [f"# ralm {k}={v}" for k, v in meta.items()] + ["", "\\data\\"]
    out += [f"ngram {k}={len(keys[k - 1])}" for k in range(1, order + 1)]
    texts = list(vocab.id_to_token)
    for k in range(1, order + 1):
        if k > 1:
            texts = [f"{texts[int(key) // V]} {vocab.id_to_token[int(key) % V]}" for key in keys[k - 1]]
        out += ["", f"\\{k}-grams:"]
        for j, t in enumerate(texts):
            p = fmt(min(probs[k - 1][j], 0.0))
            out.append(f"{p}\t{t}\t{fmt(bows[k - 1][j])}" if k < order else f"{p}\t{t}")
    return "\n".join([*out, "", "\\end\\", ""])


@pytest.mark.parametrize(("order", "estimator"), [(1, "laplace"), (2, "kn"), (4, "mkn"), (3, "katz")])
def test_writer_text_is_unchanged(tmp_path, order, estimator):
    sents = [*TOY, ["æble", "tærte", "1e5", "-3"], ["nan", "mat", "inf"]]
    lm = NGramLM.fit(sents, order=order, estimator=estimator)
    path = tmp_path / "m.arpa"
    meta = {"order": str(order), "k": "v w"}
    t = lm._tables
    write_arpa(path, lm.vocab, lm._keys, t.log10_prob, t.log10_bow, meta)
    assert path.read_bytes() == _reference_text(lm.vocab, lm._keys, t.log10_prob, t.log10_bow, meta).encode()
    assert os.listdir(tmp_path) == ["m.arpa"]  # no temporary file left


def test_writer_never_leaves_a_half_written_file(tmp_path, monkeypatch):
    from ralm.lm import arpa

    lm = NGramLM.fit(TOY, order=3, estimator="mkn")
    path = tmp_path / "m.arpa"
    path.write_text("old model", encoding="utf-8")
    calls = {"n": 0}
    real = arpa._write_section

    def failing(f, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real(f, *args, **kwargs)

    monkeypatch.setattr(arpa, "_write_section", failing)
    with pytest.raises(RalmError, match="No space left on device"):
        lm.to_arpa(path)
    assert path.read_text(encoding="utf-8") == "old model"
    assert sorted(os.listdir(tmp_path)) == ["m.arpa"]


def test_bulk_reader_takes_the_common_layouts(tmp_path, good_lines, monkeypatch):
    """ralm/lmplz tabs, spaces only, SRILM's backoffs on some lines, trailing blanks and
    shuffled entries never need the line-by-line reader."""
    from ralm.lm import arpa

    def no_slow(*args, **kwargs):
        raise AssertionError("line-by-line reader used")

    ref = read_arpa(_write(tmp_path, good_lines, "ref.arpa"))
    monkeypatch.setattr(arpa._Reader, "_slow_section", no_slow)
    first_tri = good_lines.index("\\3-grams:") + 1
    shuffled = list(good_lines)
    shuffled[first_tri:-2] = shuffled[first_tri:-2][::-1]
    variants = {
        "crlf": [line + "\r" for line in good_lines],
        "tabs": good_lines,
        "spaces": [line.replace("\t", " ") for line in good_lines],
        "srilm": [re.sub(r"\t0$", "", line) for line in good_lines],
        "trailing": [line + ("  " if "\t" in line else "") for line in good_lines],
        "shuffled": shuffled,
    }
    for name, lines in variants.items():
        _tables_equal(read_arpa(_write(tmp_path, lines, f"{name}.arpa")), ref)


def test_round_trip_of_odd_words_and_numbers(tmp_path):
    """Words of every length around the bulk reader's 8- and 16-byte limits, multibyte UTF-8,
    words that look like numbers; numbers in every notation float() reads."""
    rng = np.random.default_rng(0)
    alphabet = list("abcdefghij") + ["æ", "ø", "å", "中", "🙂", "-", "1", ".", "e"]
    words = sorted({"".join(rng.choice(alphabet, size=n)) for n in [*range(1, 26)] * 8})
    sents = [list(rng.choice(words, size=int(rng.integers(1, 12)))) for _ in range(300)]
    lm = NGramLM.fit(sents, order=4, estimator="mkn")
    path = tmp_path / "odd.arpa"
    lm.to_arpa(path)
    back = read_arpa(path)
    assert back.vocab.id_to_token == lm.vocab.id_to_token
    t = lm._tables
    for k in range(4):
        assert np.array_equal(back.keys[k], lm._keys[k])
        assert np.array_equal(back.log10_prob[k], np.minimum(t.log10_prob[k], 0.0))
        assert np.array_equal(back.log10_bow[k], t.log10_bow[k])
    # the same numbers written in other notations read to the same values
    lines = path.read_text(encoding="utf-8").splitlines()
    first_bi = lines.index("\\2-grams:") + 1
    notations = ["-5e-1", "-.5", "-0.50000000000000000000000000000000000000001", "-5E-01", "-0000.5"]
    for j, text in enumerate(notations):
        parts = lines[first_bi + j].split("\t")
        parts[0] = text
        lines[first_bi + j] = "\t".join(parts)
    again = read_arpa(_write(tmp_path, lines, "notations.arpa"))
    want = back.log10_prob[1].copy()
    want[: len(notations)] = -0.5  # ralm writes the bigrams in key order
    assert np.array_equal(again.log10_prob[1], want)


def test_empty_sections_and_one_order(tmp_path):
    text = "\\data\\\nngram 1=3\nngram 2=0\n\n\\1-grams:\n-1\t<unk>\t0\n-99\t<s>\t0\n-0.5\t</s>\t0\n\n\\2-grams:\n\n\\end\\\n"
    a = read_arpa(_write(tmp_path, text.splitlines(), "empty2.arpa"))
    assert len(a.keys[1]) == 0 and a.vocab.id_to_token == ["<unk>", "<s>", "</s>"]
    lm = NGramLM.fit(TOY, order=1, estimator="laplace")
    lm.to_arpa(tmp_path / "one.arpa")
    back = NGramLM.from_arpa(tmp_path / "one.arpa")
    assert back.score_sentences(TOY).tolist() == lm.score_sentences(TOY).tolist()


def test_number_text_is_python_repr():
    """Arrow's shortest round-trip digits in Python's notation, at every magnitude."""
    from ralm.lm.arpa_write import _fmt, _format_floats

    rng = np.random.default_rng(1)
    mags = 10.0 ** rng.uniform(-12, 20, 20_000)
    x = np.concatenate([mags, -mags, rng.standard_normal(5000), [0.0, -0.0, -99.0, -1.0, 1e-4, 1e9, 0.1]])
    bits = rng.integers(0, 2**63, 5000, dtype=np.int64).view(np.float64)
    x = np.concatenate([x, bits[np.isfinite(bits)]])
    assert _format_floats(x).to_pylist() == [_fmt(v) for v in x.tolist()]


def test_without_arrow_number_casts_the_same_file(tmp_path, monkeypatch):
    """Should a pyarrow format or parse numbers unlike repr() / float(), ralm falls back to them."""
    from ralm.lm import arpa_arrow

    lm = NGramLM.fit(TOY, order=3, estimator="kn")
    lm.to_arpa(tmp_path / "fast.arpa")
    monkeypatch.setattr(arpa_arrow, "_ARROW_AGREES", [False])
    lm.to_arpa(tmp_path / "slow.arpa")
    assert (tmp_path / "fast.arpa").read_bytes() == (tmp_path / "slow.arpa").read_bytes()
    _tables_equal(read_arpa(tmp_path / "slow.arpa"), read_arpa(tmp_path / "fast.arpa"))
