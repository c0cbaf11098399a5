"""Salient spans as the build stores them: sources, precedence, and the capitalised-only option."""

import json

from ralm.corpus.build import BuildConfig, build_docstore


def _build(tmp_path, name, **cfg):
    src = tmp_path / "docs.jsonl"
    docs = [
        {
            "title": "Bergen",
            "text": "Bergen is a city. Leadership matters.",
            "links": [
                {"start": 0, "end": 6, "target": "Bergen"},
                {"start": 18, "end": 28, "target": "leadership"},
            ],
        },
        {"title": "B", "text": "Good leadership in Bergen since 12 May 1905; bergen again.", "links": []},
    ]
    src.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    store = build_docstore([src], tmp_path / name, BuildConfig(**cfg), progress=False, log=lambda m: None)
    row = store.get(1)
    return [(row["text"][s["start"] : s["end"]], s["source"], s["label"]) for s in row["salient"]]


def test_daluke_rule_is_case_insensitive_by_default(tmp_path):
    # entity vocabulary from the links: {"Bergen", "Leadership"}; names need >= 5 chars (first letter upper-cased as MediaWiki does)
    assert _build(tmp_path, "a") == [
        ("leadership", "auto", "Leadership"),
        ("Bergen", "auto", "Bergen"),
        ("12 May 1905", "date", "DATE"),
        ("bergen", "auto", "Bergen"),
    ]


def test_capitalized_only_keeps_proper_names(tmp_path):
    assert _build(tmp_path, "b", auto_capitalized_only=True) == [
        ("Bergen", "auto", "Bergen"),
        ("12 May 1905", "date", "DATE"),
    ]


def test_sources_can_be_switched_off(tmp_path):
    assert _build(tmp_path, "c", dates=False, auto_annotate=False) == []
