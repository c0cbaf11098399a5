"""Reading sentences: cleaning, de-duplication, splits by group, bad input."""

from __future__ import annotations

import json

import pytest

from ralm.errors import RalmError
from ralm.surealm.sentences import read_sentences, split_groups


def test_duplicates_removed_and_groups_never_cross_splits(tmp_path):
    rows = [{"text": f"turn {i % 7}  of   talk", "group": f"g{i // 3}"} for i in range(60)]
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    s = read_sentences([p], fractions=(0.25, 0.25), seed=1)
    assert s.texts == [f"turn {i} of talk" for i in range(7)]  # whitespace normalised, first kept
    assert s.groups == ["s.jsonl:g0"] * 3 + ["s.jsonl:g1"] * 3 + ["s.jsonl:g2"]
    by_group: dict[str, set[str]] = {}
    for g, sp in zip(s.groups, s.splits, strict=True):
        by_group.setdefault(g, set()).add(sp)
    assert all(len(v) == 1 for v in by_group.values())


def test_split_groups_counts_and_order_independence():
    groups = [f"c{i}" for i in range(100)]
    a = split_groups(groups, (0.05, 0.1), seed=3)
    b = split_groups(list(reversed(groups)), (0.05, 0.1), seed=3)
    assert a == b
    vals = list(a.values())
    assert (vals.count("valid"), vals.count("test"), vals.count("train")) == (5, 10, 85)


def test_text_file_blank_lines_separate_groups_and_jsonl_split_is_kept(tmp_path):
    t = tmp_path / "d.txt"
    t.write_text("hello there\nhi\n\nhow are you\nfine\n")
    s = read_sentences([t], fractions=(0.0, 0.0))
    assert s.texts == ["hello there", "hi", "how are you", "fine"]
    assert s.groups == ["d.txt:0", "d.txt:0", "d.txt:1", "d.txt:1"]
    j = tmp_path / "f.jsonl"
    j.write_text(json.dumps({"text": "a b", "split": "test"}) + "\n" + json.dumps({"text": "c d"}) + "\n")
    s = read_sentences([j], fractions=(0.0, 0.0))
    assert s.splits == ["test", "train"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"text": "ok"}\n{"text": "   "}\n', 'f.jsonl:2: empty "text"'),
        ('{"text": "ok"}\nnot json\n', "f.jsonl:2: not JSON"),
        ('{"words": "ok"}\n', 'f.jsonl:1: needs a "text" string'),
        ('{"text": "ok", "split": "dev"}\n', "f.jsonl:1: split 'dev'"),
    ],
)
def test_bad_jsonl_lines(tmp_path, content, message):
    p = tmp_path / "f.jsonl"
    p.write_text(content)
    with pytest.raises(RalmError, match=message):
        read_sentences([p])


def test_no_sentences_and_missing_file(tmp_path):
    p = tmp_path / "blank.txt"
    p.write_text("\n\n  \n")
    with pytest.raises(RalmError, match="no sentences found"):
        read_sentences([p])
    with pytest.raises(RalmError, match="no such file"):
        read_sentences([tmp_path / "missing.txt"])
