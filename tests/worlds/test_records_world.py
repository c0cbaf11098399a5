"""The records world (`ralm.worlds.records`): deterministic under its seed, held-out records never in
the training queries, one salient span a query (its value), gold documents that hold the value,
and the control world whose documents no longer do."""

from __future__ import annotations

import json

import pytest

from ralm.errors import RalmError
from ralm.realm.inference.gold import read_gold
from ralm.worlds.records import (
    ATTRIBUTES,
    RecordsWorldConfig,
    check_heldout,
    make_records_world,
    write_records_world,
)
from testkit import run_ralm

SMALL = RecordsWorldConfig(records=20, heldout_records=5, n_attributes=3, seed=1)


def _value(text: str) -> str:
    """A document's value: its last word ("The home port of KX-4821 is Tremba." -> "Tremba")."""
    return text.rstrip(".").split()[-1]


def test_the_same_seed_gives_the_same_world_and_another_seed_another(tmp_path):
    a = write_records_world(tmp_path / "a", SMALL)
    b = write_records_world(tmp_path / "b", SMALL)
    for name in ("corpus.jsonl", "queries.jsonl", "heldout.jsonl", "gold.jsonl", "world.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    c = make_records_world(RecordsWorldConfig(records=20, heldout_records=5, n_attributes=3, seed=2))
    assert a.documents == b.documents and c.documents != a.documents
    assert {d["id"].split("/")[0] for d in c.documents}.isdisjoint(
        {d["id"].split("/")[0] for d in a.documents}
    )


def test_counts_and_layout():
    w = make_records_world(SMALL)
    assert len(w.documents) == 20 * 3
    assert len(w.queries) == 15 * 3 * len(ATTRIBUTES[0].queries)
    assert len(w.heldout) == 5 * 3 * len(ATTRIBUTES[0].queries)
    assert len(w.heldout_codes) == 5 and set(w.heldout_codes).isdisjoint(w.train_codes)
    assert set(w.gold) == {q["id"] for q in w.queries + w.heldout}


def test_heldout_records_never_occur_in_training_queries():
    w = make_records_world(SMALL)
    check_heldout(w)
    held_values = {q["links"][0]["target"] for q in w.heldout}
    train_text = " ".join(q["text"] for q in w.queries)
    assert not any(c in train_text for c in w.heldout_codes)
    assert not any(v in train_text for v in held_values)
    # and the check catches a leak
    w.queries.append({"id": "leak", "text": f"About {w.heldout_codes[0]}.", "links": []})
    with pytest.raises(RalmError, match="mentions held-out"):
        check_heldout(w)


def test_each_query_has_one_link_its_value_and_its_gold_document_states_it():
    w = make_records_world(SMALL)
    docs = {d["id"]: d for d in w.documents}
    values = []
    for q in w.queries + w.heldout:
        (link,) = q["links"]
        value = q["text"][link["start"] : link["end"]]
        assert value == link["target"]
        doc = docs[w.gold[q["id"]]]
        assert value in doc["text"] and doc["title"] == f"Record {q['id'].split('/')[0]}"
        values.append(value)
    # a value belongs to one fact only: every document states a value no other document states
    assert len({_value(d["text"]) for d in w.documents}) == len(w.documents)
    assert len(set(values)) == len(w.documents)


def test_query_wordings_share_no_content_word_with_the_corpus_wording():
    stop = {"the", "of", "to", "is", "by", "at", "was", "in", "from", "are", "with", "and", "a"}
    for a in ATTRIBUTES:
        corpus = {w.strip(".").lower() for w in a.corpus.split()} - stop - {"{code}", "{value}"}
        for t in a.queries:
            words = {w.strip(".").lower() for w in t.split()} - stop - {"{code}", "{value}"}
            assert not corpus & words, (a.name, t)


def test_the_control_world_moves_values_away_from_its_gold_document():
    plain = make_records_world(SMALL)
    ctrl = make_records_world(RecordsWorldConfig(**{**SMALL.__dict__, "shuffle_values": True}))
    assert ctrl.queries == plain.queries and ctrl.gold == plain.gold
    docs = {d["id"]: d["text"] for d in ctrl.documents}
    kept = sum(q["links"][0]["target"] in docs[ctrl.gold[q["id"]]] for q in ctrl.queries)
    assert kept <= len(ctrl.queries) // 10  # a random permutation keeps about 1 in 60 in place
    assert sorted(map(_value, docs.values())) == sorted(_value(d["text"]) for d in plain.documents)


def test_gold_file_round_trips_and_bad_config_is_refused(tmp_path):
    w = write_records_world(tmp_path, SMALL)
    assert read_gold(tmp_path / "gold.jsonl") == w.gold
    meta = json.loads((tmp_path / "world.json").read_text())
    assert meta["documents"] == 60 and meta["heldout_codes"] == w.heldout_codes
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(RalmError, match="bad.jsonl"):
        read_gold(tmp_path / "bad.jsonl")
    with pytest.raises(RalmError, match="heldout_records"):
        RecordsWorldConfig(records=3, heldout_records=3)
    with pytest.raises(RalmError, match="n_attributes"):
        RecordsWorldConfig(n_attributes=0)


def test_the_world_command_writes_the_files_and_refuses_bad_sizes(tmp_path, capsys):
    from ralm.cli import main

    out = tmp_path / "data"
    code, printed, _ = run_ralm(
        capsys,
        "world",
        "records",
        "--out",
        out,
        "--records",
        "20",
        "--heldout-records",
        "5",
        "--seed",
        "1",
        "--attributes",
        "3",
    )
    assert code == 0
    assert "60 documents" in printed and "ralm evaluate-mlm" in printed
    assert (out / "corpus.jsonl").read_bytes() == b"".join(
        (json.dumps(d) + "\n").encode() for d in make_records_world(SMALL).documents
    )
    assert (
        main(["world", "records", "--out", str(tmp_path / "x"), "--records", "3", "--heldout-records", "3"])
        == 2
    )
    assert "heldout_records=3" in capsys.readouterr().err
