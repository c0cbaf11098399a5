"""Names and numbers by surface form, and their place in a DocStore build."""

from __future__ import annotations

import json

from ralm.corpus.surface_spans import find_names, find_numbers


def _texts(text, spans):
    return [text[s.start : s.end] for s in spans]


def test_names_runs_particles_and_sentence_starts():
    t = "Etter krigen flyttet Harald Hårfagre til Oslo."
    assert _texts(t, find_names(t)) == ["Harald Hårfagre", "Oslo"]
    assert [(s.start, s.end, s.source, s.label) for s in find_names(t)] == [
        (21, 36, "name", ""),
        (41, 45, "name", ""),
    ]
    # a sentence-initial word is a name only when the text also capitalises it mid-sentence
    t = "Oslo er hovedstaden. Han bor i Oslo og jobber i NRK. Mange bor der."
    assert _texts(t, find_names(t)) == ["Oslo", "Oslo", "NRK"]
    t = "He met Ludwig van Beethoven in Vienna, and Olav den hellige."
    assert _texts(t, find_names(t)) == ["Ludwig van Beethoven", "Vienna", "Olav"]
    t = "I think so. A cat sat."  # one-letter words are never names
    assert find_names(t) == []
    t = "Han heter Anne-Lise Ødegård.\nKari kom også, sa Kari."
    assert _texts(t, find_names(t)) == ["Anne-Lise Ødegård", "Kari", "Kari"]


def test_numbers():
    t = "Det bor 1 500 mennesker der, 2,5 prosent av 60."
    assert [(s.start, s.end) for s in find_numbers(t)] == [(8, 13), (29, 32), (44, 46)]
    t = "Versjon 3.14, B52, x2, 7 og 12 345,5 kroner; -40 grader."
    assert _texts(t, find_numbers(t)) == ["3.14", "12 345,5", "-40"]
    assert all(s.source == "number" and s.label == "" for s in find_numbers(t))


def test_build_with_names_and_numbers(tmp_path, tiny_dir):
    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.corpus.docstore import SALIENT_SOURCES, DocStore

    src = tmp_path / "a.jsonl"
    src.write_text(
        json.dumps(
            {
                "title": "Bergen",
                "text": "Byen Bergen ble grunnlagt i 1070 av Olav Kyrre. Bergen har 285 900 innbyggere.",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    build_docstore(
        [src],
        tmp_path / "s",
        BuildConfig(tokenizer=str(tiny_dir), lang="nb", names=True, numbers=True),
        progress=False,
        log=lambda m: None,
    )
    store = DocStore(tmp_path / "s")
    row = store.get(0)
    got = [(row["text"][s["start"] : s["end"]], s["source"]) for s in row["salient"]]
    assert got == [
        ("Bergen", "name"),
        ("1070", "date"),
        ("Olav Kyrre", "name"),
        ("Bergen", "name"),
        ("285 900", "number"),
    ]
    codes = store.salient_tokens(0)[:, 2].tolist()
    assert [SALIENT_SOURCES[c] for c in codes] == [s for _, s in got]
    assert store.manifest["counts"]["salient"]["name"] == 3
    build_docstore(
        [src],
        tmp_path / "plain",
        BuildConfig(tokenizer=str(tiny_dir), lang="nb"),
        progress=False,
        log=lambda m: None,
    )
    assert [s["source"] for s in DocStore(tmp_path / "plain").get(0)["salient"]] == ["date"]  # off by default
