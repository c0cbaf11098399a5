"""EntityVocab and DaLUKE-style auto-annotation."""

from __future__ import annotations

import importlib.util
import random
import re
import time
from collections import Counter
from pathlib import Path

import pytest

from ralm.corpus.entities import (
    AutoAnnotator,
    EntityVocab,
    auto_annotate,
    entity_name,
    link_spans,
    resolve_redirect,
)
from ralm.corpus.types import LinkSpan, Span
from ralm.errors import CorpusError

# --------------------------------------------------------------------------- EntityVocab

COUNTS = {"NYC": 3, "New York": 1, "New York City": 2, "Cyc A": 4, "Rare": 1, "Oslo": 6, "Bergen": 6}
REDIRECTS = {
    "NYC": "New York",
    "New York": "New York City",
    "Cyc A": "Cyc B",
    "Cyc B": "Cyc A",
    "Into Cycle": "Cyc B",
    "Kristiania": "Oslo",
    "Gone": "Rare",
}


def test_resolve_redirect_chains_cycles_depth():
    assert resolve_redirect("NYC", REDIRECTS) == "New York City"
    assert resolve_redirect("New York City", REDIRECTS) == "New York City"
    # every title on or into a cycle resolves to the cycle's smallest title
    assert resolve_redirect("Cyc A", REDIRECTS) == "Cyc A"
    assert resolve_redirect("Cyc B", REDIRECTS) == "Cyc A"
    assert resolve_redirect("Into Cycle", REDIRECTS) == "Cyc A"
    assert resolve_redirect("Self", {"Self": "Self"}) == "Self"
    chain = {f"T{i}": f"T{i + 1}" for i in range(15)}
    assert resolve_redirect("T0", chain) == "T10"
    assert resolve_redirect("T0", chain, max_depth=3) == "T3"
    assert resolve_redirect("T12", chain) == "T15"


def test_vocab_build_ids_counts_min_count_aliases():
    v = EntityVocab.build(COUNTS, REDIRECTS, min_count=2)
    # summed: New York City 3+1+2=6, Oslo 6, Bergen 6, Cyc A 4, Rare 1 (dropped)
    assert v.titles == ["Bergen", "New York City", "Oslo", "Cyc A"]
    assert v.counts == {"Bergen": 6, "New York City": 6, "Oslo": 6, "Cyc A": 4}
    assert v.aliases == {
        "Cyc B": "Cyc A",
        "Into Cycle": "Cyc A",
        "Kristiania": "Oslo",
        "NYC": "New York City",
        "New York": "New York City",
    }
    assert len(v) == 4
    assert v.id_of("Bergen") == 0
    assert v.id_of("NYC") == 1
    assert v.id_of("Kristiania") == 2
    assert v.id_of("Cyc B") == 3
    assert v.id_of("Rare") is None and v.id_of("Gone") is None and v.id_of("Nowhere") is None
    assert "Kristiania" in v and "Oslo" in v and "Rare" not in v and 3 not in v
    assert v.resolve("NYC") == "New York City"
    assert v.resolve("Oslo") == "Oslo"
    assert v.resolve("Nowhere") == "Nowhere"
    v1 = EntityVocab.build(COUNTS, REDIRECTS)
    assert v1.titles == ["Bergen", "New York City", "Oslo", "Cyc A", "Rare"]
    assert v1.aliases["Gone"] == "Rare"


def test_vocab_ids_do_not_depend_on_input_order():
    items = list(COUNTS.items())
    reds = list(REDIRECTS.items())
    ref = EntityVocab.build(COUNTS, REDIRECTS)
    rng = random.Random(0)
    for _ in range(20):
        rng.shuffle(items)
        rng.shuffle(reds)
        assert EntityVocab.build(dict(items), dict(reds)) == ref


def test_vocab_save_load_round_trip(tmp_path: Path):
    counts = {"Mercury (planet)": 5, "Tab\there": 2, "Back\\slash": 2, "Ærø": 3, "Line\nbreak": 1}
    redirects = {"Ærøskøbing kommune": "Ærø", "Mercury planet": "Mercury (planet)"}
    v = EntityVocab.build(counts, redirects)
    path = tmp_path / "sub" / "entities.tsv"
    v.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["entities.tsv"]  # no temp file left
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id\ttitle\tcount\talias_of"
    assert lines[1] == "0\tMercury (planet)\t5\t"
    assert lines[-2:] == ["0\tMercury planet\t\tMercury (planet)", "1\tÆrøskøbing kommune\t\tÆrø"]
    w = EntityVocab.load(path)
    assert w == v
    assert w.titles == ["Mercury (planet)", "Ærø", "Back\\slash", "Tab\there", "Line\nbreak"]
    assert w.id_of("Ærøskøbing kommune") == 1
    v.save(path)  # overwrite in place
    assert EntityVocab.load(path) == v


def test_vocab_load_errors(tmp_path: Path):
    with pytest.raises(CorpusError, match="does not exist"):
        EntityVocab.load(tmp_path / "missing.tsv")
    bad = tmp_path / "bad.tsv"
    bad.write_text("title\tcount\nA\t1\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="not an entity vocabulary"):
        EntityVocab.load(bad)
    bad.write_text("id\ttitle\tcount\talias_of\n0\tA\tx\t\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"bad.tsv:2: malformed"):
        EntityVocab.load(bad)
    bad.write_text("id\ttitle\tcount\talias_of\n0\tA\t1\t\n5\tB\t\tA\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="not that entity"):
        EntityVocab.load(bad)


# --------------------------------------------------------------------------- AutoAnnotator


def vocab_of(*titles: str, aliases: dict[str, str] | None = None) -> EntityVocab:
    counts = {t: len(titles) - i for i, t in enumerate(titles)}  # ids follow the argument order
    return EntityVocab.build(counts, aliases or {})


def spans_text(text: str, spans: list[Span]) -> list[tuple[str, str]]:
    return [(text[s.start : s.end], s.label) for s in spans]


def test_entity_name_strips_disambiguation():
    assert entity_name("Mercury (planet)") == "Mercury"
    assert entity_name("Paris (Texas) (city)") == "Paris (Texas)"
    assert entity_name("(Untitled)") == "(Untitled)"
    assert entity_name("New York") == "New York"


def test_auto_longest_first_and_case_insensitive():
    ann = AutoAnnotator(vocab_of("New York", "New York City"))
    text = "I visited new york city, then NEW YORK."
    assert ann.annotate(text) == [
        Span(10, 23, "auto", "New York City"),
        Span(30, 38, "auto", "New York"),
    ]


def test_auto_partial_word_extension_and_word_starts():
    ann = AutoAnnotator(vocab_of("Danmark", "Sverige"))
    text = "Danmarks hovedstad, Kardanmark og sverigeslottet; (danmark)"
    assert spans_text(text, ann.annotate(text)) == [
        ("Danmarks", "Danmark"),
        ("sverigeslottet", "Sverige"),
        ("danmark", "Danmark"),
    ]
    # the n characters may end mid-word: the whole word is covered
    ann2 = AutoAnnotator(vocab_of("Grand Cany"))
    assert spans_text("The Grand Canyon.", ann2.annotate("The Grand Canyon.")) == [
        ("Grand Canyon", "Grand Cany")
    ]


def test_auto_length_limits():
    name48 = "A" + "b" * 46 + "c"
    name49 = "A" + "b" * 47 + "c"
    ann = AutoAnnotator(vocab_of("Oslo", "Paris", name48, name49))
    text = f"Oslo Paris {name48} {name49}"
    assert spans_text(text, ann.annotate(text)) == [("Paris", "Paris"), (name48, name48)]
    assert len(ann) == 2  # "Oslo" (4) and the 49-char name are never matched
    short = AutoAnnotator(vocab_of("Oslo", "Paris"), min_chars=3, max_chars=4)
    assert spans_text(text, short.annotate(text)) == [("Oslo", "Oslo")]


def test_auto_jumps_past_matched_words():
    ann = AutoAnnotator(vocab_of("New York City", "York City Hall", "City Hall"))
    text = "New York City Hall"
    # "York City Hall" and "City Hall" start inside the first match and are skipped
    assert spans_text(text, ann.annotate(text)) == [("New York City", "New York City")]
    text2 = "York City Hall and City Hall"
    assert spans_text(text2, ann.annotate(text2)) == [
        ("York City Hall", "York City Hall"),
        ("City Hall", "City Hall"),
    ]


def test_auto_disambiguation_and_aliases():
    v = vocab_of("Mercury (planet)", "Mercury (element)", "København", aliases={"Copenhagen": "København"})
    text = "Mercury orbits; Copenhagen is København. Mercury (planet)."
    assert spans_text(text, AutoAnnotator(v).annotate(text)) == [
        ("Mercury", "Mercury (planet)"),  # the more linked of the two "Mercury" entities
        ("Copenhagen", "København"),
        ("København", "København"),
        ("Mercury", "Mercury (planet)"),
    ]
    no_alias = AutoAnnotator(v, include_aliases=False)
    assert spans_text(text, no_alias.annotate(text))[1] == ("København", "København")
    # a canonical title beats an alias with the same name
    v2 = EntityVocab.build({"Paris": 1, "France": 5}, {"Lutetia": "Paris", "paris": "France"})
    assert v2.aliases == {"Lutetia": "Paris", "paris": "France"}
    assert AutoAnnotator(v2).annotate("PARIS") == [Span(0, 5, "auto", "Paris")]


def test_auto_non_ascii_and_length_changing_case():
    ann = AutoAnnotator(vocab_of("Ærøskøbing", "Straße", "İstanbul"))
    text = "ÆRØSKØBING, STRASSE, straße, İstanbul"
    # "ß" and "ss" differ; "İ" (whose lower case is two chars) keeps offsets right
    assert spans_text(text, ann.annotate(text)) == [
        ("ÆRØSKØBING", "Ærøskøbing"),
        ("straße", "Straße"),
        ("İstanbul", "İstanbul"),
    ]


def test_auto_annotate_drops_overlap_with_links():
    ann = AutoAnnotator(vocab_of("Danmark", "New York"))
    text = "Danmark og New York og Danmark"
    links = link_spans([LinkSpan(11, 19, "New York City"), LinkSpan(23, 26, "Danmark")])
    assert auto_annotate(text, ann, existing=links) == [Span(0, 7, "auto", "Danmark")]
    assert auto_annotate(text, ann) == ann.annotate(text)


def naive_annotate(text: str, vocab: EntityVocab, lo: int = 5, hi: int = 48) -> list[Span]:
    """Straightforward reference: every position, every n."""
    names: dict[str, str] = {}
    for t in vocab.titles:
        name = re.sub(r"\s*\([^()]*\)\s*$", "", t).strip() or t
        names.setdefault(name.lower(), t)
    for a, c in sorted(vocab.aliases.items(), key=lambda kv: (vocab.id_of(kv[1]), kv[0])):
        name = re.sub(r"\s*\([^()]*\)\s*$", "", a).strip() or a
        names.setdefault(name.lower(), c)
    out = []
    i = 0
    while i < len(text):
        if text[i].isalnum() and (i == 0 or not text[i - 1].isalnum()):
            for n in range(hi, lo - 1, -1):
                window = text[i : i + n]
                if len(window) == n and len(window.lower()) == n and window.lower() in names:
                    end = i + n
                    if text[end - 1].isalnum():
                        while end < len(text) and text[end].isalnum():
                            end += 1
                    out.append(Span(i, end, "auto", names[window.lower()]))
                    i = end
                    break
            else:
                i += 1
        else:
            i += 1
    return out


def test_auto_matches_naive_reference_on_random_texts():
    words = ["dan", "mark", "Danmark", "new", "York", "city", "ab", "abc", "øst", "Ærø", "x1", "42", "Hall"]
    seps = [" ", " ", " ", "-", ", ", "", ". ", "(", ")", "'"]
    rng = random.Random(1234)
    for trial in range(60):
        titles = set()
        while len(titles) < 12:
            k = rng.randint(1, 4)
            t = rng.choice(["", " "]).join(rng.choice(words) for _ in range(k))
            if rng.random() < 0.2:
                t += rng.choice([" (band)", " (x)"])
            titles.add(t)
        titles = sorted(titles)
        counts = {t: rng.randint(1, 5) for t in titles}
        redirects = {f"Alias{j} {rng.choice(words)}": rng.choice(titles) for j in range(4)}
        v = EntityVocab.build(counts, redirects)
        lo, hi = (5, 48) if trial % 3 else (3, 9)
        ann = AutoAnnotator(v, min_chars=lo, max_chars=hi)
        for _ in range(20):
            parts = []
            for _ in range(rng.randint(0, 40)):
                w = rng.choice(words + [t for t in titles] + list(redirects))
                w = rng.choice([w, w.lower(), w.upper()])
                parts.append(w + rng.choice(seps))
            text = "".join(parts)
            assert ann.annotate(text) == naive_annotate(text, v, lo, hi), (titles, text)


# --------------------------------------------------------------------------- real sample


def lee_background() -> Path:
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gensim (the sample data package) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data" / "lee_background.cor"
    if not path.exists():
        pytest.skip(f"{path} is missing")
    return path


def test_auto_annotation_throughput_on_lee_background():
    lines = lee_background().read_text(encoding="utf-8").splitlines()
    bigrams = Counter(m.group(0) for line in lines for m in re.finditer(r"\b[A-Z][a-z]+ [A-Z][a-z]+\b", line))
    vocab = EntityVocab.build(bigrams, {})
    ann = AutoAnnotator(vocab)
    chars = sum(map(len, lines))
    t0 = time.perf_counter()
    spans = [ann.annotate(line) for line in lines]
    dt = time.perf_counter() - t0
    n = sum(map(len, spans))
    print(
        f"\nauto-annotation: {len(lines)} articles, {chars} chars, {len(vocab)} entities, "
        f"{n} spans in {dt * 1000:.1f} ms = {chars / dt / 1e6:.2f} M chars/s"
    )
    assert n > 0
    for line, ss in zip(lines, spans, strict=True):
        for s in ss:
            assert line[s.start : s.end].lower().startswith(entity_name(s.label).lower())
