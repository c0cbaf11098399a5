"""EntityVocabulary: ordering and ties, DocStore counts per source, the TSV round trip, bad files."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from ralm.errors import RalmError
from ralm.luke.vocab import MASK_ID, PAD_ID, UNK_ID, EntityVocabulary
from testkit import unlink, write_jsonl

DOCS = [
    ("Oslo", "Oslo is the capital of [[Norway]]. It was founded by [[Harald Hardrada]] long ago."),
    ("Bergen", "Bergen is a city in [[Norway]] on the west coast, near the [[North Sea]]."),
    ("Norway", "Norway is a country in [[Scandinavia]]. Its capital is [[Oslo]]. Norway is cold."),
    ("Denmark", "Denmark is a country in [[Scandinavia]]. Its capital is [[Copenhagen]]. Scandinavia again."),
    ("Harald", "Harald Hardrada was king of [[Norway]]. He died at [[Stamford Bridge]]."),
]


def linked_jsonl(path, docs=DOCS):
    rows = []
    for title, marked in docs:
        text, links = unlink(marked)
        rows.append({"title": title, "text": text, "links": links})
    return write_jsonl(path, rows)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from ralm.corpus.build import BuildConfig, build_docstore

    d = tmp_path_factory.mktemp("luke-vocab")
    src = linked_jsonl(d / "wiki.jsonl")
    return build_docstore([src], d / "store", BuildConfig(chunk_size=24), progress=False, log=lambda m: None)


def naive_counts(store, sources):
    c: Counter[str] = Counter()
    for i in range(len(store)):
        for s in store.salient_spans(i):
            if s.source in sources:
                c[s.label] += 1
    return c


def test_from_counts_orders_by_count_then_title_and_size_counts_specials():
    v = EntityVocabulary.from_counts({"Oslo": 3, "Bergen": 3, "Norway": 5, "Aker": 1}, size=5)
    assert [v.title(i) for i in range(len(v))] == ["[PAD]", "[UNK]", "[MASK]", "Norway", "Bergen"]
    assert v.counts == [5, 3]
    assert (v.id("Norway"), v.id("Bergen"), v.id("Oslo"), v.id("nope")) == (3, 4, UNK_ID, UNK_ID)
    assert (v.id("[PAD]"), v.id("[MASK]")) == (PAD_ID, MASK_ID)
    assert "Bergen" in v and "Oslo" not in v and "[MASK]" not in v
    # a larger size keeps every entity, no more
    assert len(EntityVocabulary.from_counts({"a": 1, "b": 2}, size=100)) == 5
    with pytest.raises(RalmError, match="entity_vocab_size=3"):
        EntityVocabulary.from_counts({"a": 1}, size=3)


def test_from_docstore_counts_the_chosen_sources(store):
    for sources in (["link"], ["link", "auto"], ["auto"]):
        want = naive_counts(store, set(sources))
        assert want  # the corpus has spans of each source
        v = EntityVocabulary.from_docstore(store, 100, sources)
        ranked = sorted(want.items(), key=lambda tc: (-tc[1], tc[0]))
        assert v.titles == [t for t, _ in ranked]
        assert v.counts == [c for _, c in ranked]
    links = EntityVocabulary.from_docstore(store, 100, ["link"])
    assert links.titles[0] == "Norway" and links.counts[0] == 3
    both = EntityVocabulary.from_docstore(store.root, 100, ["link", "auto"])  # a path works too
    assert both.counts[both.id("Norway") - 3] > 3  # auto-annotation adds the unlinked mentions
    small = EntityVocabulary.from_docstore(store, 5, ["link"])
    assert small.titles == links.titles[:2]


def test_no_entity_spans_is_one_line(tmp_path):
    from ralm.corpus.build import BuildConfig, build_docstore

    src = tmp_path / "plain.jsonl"
    src.write_text(json.dumps({"title": "x", "text": "Nothing links anywhere in this text."}) + "\n")
    st = build_docstore(
        [src], tmp_path / "plain", BuildConfig(chunk_size=24), progress=False, log=lambda m: None
    )
    with pytest.raises(RalmError) as e:
        EntityVocabulary.from_docstore(st, 10, ["link", "auto"])
    msg = str(e.value)
    assert "\n" not in msg and str(st.root) in msg and "link, auto" in msg


def test_auto_suggested_when_only_auto_spans_exist(store):
    from ralm.luke.annotations import EntitySpans

    spans = EntitySpans.from_docstore(store, ["link"])
    spans.starts = spans.starts[:0]  # as if the store had only auto spans
    with pytest.raises(RalmError, match="auto_annotation = true"):
        spans.require_spans()


def test_save_load_round_trip(tmp_path):
    v = EntityVocabulary.from_counts({"Tab\there": 4, "New\nline": 4, "Back\\slash": 2, "Plain": 1}, size=10)
    p = tmp_path / "run" / "entity_vocab.tsv"
    v.save(p)
    w = EntityVocabulary.load(p)
    assert w == v and w.titles == ["New\nline", "Tab\there", "Back\\slash", "Plain"]
    assert v.difference(w) is None
    assert p.read_text().splitlines()[:4] == [
        "id\ttitle\tcount",
        "0\t[PAD]\t0",
        "1\t[UNK]\t0",
        "2\t[MASK]\t0",
    ]
    assert [q.name for q in p.parent.iterdir()] == ["entity_vocab.tsv"]  # no temp file left


def test_difference_names_the_first_change():
    a = EntityVocabulary(["A", "B"], [2, 1])
    assert a.difference(EntityVocabulary(["A", "C"], [2, 1])) == "id 4 is 'C' instead of 'B'"
    assert a.difference(EntityVocabulary(["A"], [2])) == "4 ids instead of 5"
    assert a.difference(EntityVocabulary(["A", "B"], [2, 7])) == "the count of 'B' is 7 instead of 1"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("id\ttitle\n", "not an entity vocabulary"),
        ("id\ttitle\tcount\n0\t[PAD]\t0\n2\t[UNK]\t0\n", r":3: malformed .*out of order"),
        ("id\ttitle\tcount\n0\t[UNK]\t0\n", r":2: malformed .*must be \[PAD\]"),
        ("id\ttitle\tcount\n0\t[PAD]\t0\n1\t[UNK]\tx\n", r":3: malformed"),
        ("id\ttitle\tcount\n0\t[PAD]\t0\n", "lacks the rows"),
        ("id\ttitle\tcount\n0\t[PAD]\t0\n1\t[UNK]\t0\n2\t[MASK]\t0\n3\tA\t1\n4\tA\t1\n", "unique"),
    ],
)
def test_load_rejects_malformed_files(tmp_path, text, match):
    p = tmp_path / "v.tsv"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(RalmError, match=match) as e:
        EntityVocabulary.load(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(RalmError, match="no such entity vocabulary"):
        EntityVocabulary.load(tmp_path / "missing.tsv")
