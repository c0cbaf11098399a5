"""Corpus input from Hugging Face data: a `save_to_disk` folder and Parquet written by the real
`datasets` package build the same DocStore as the same rows in JSONL."""

from __future__ import annotations

import json

import pytest

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.corpus.readers import detect_format, iter_articles
from ralm.errors import CorpusError

datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()

ROWS = [
    {
        "id": "7",
        "title": "Oslo",
        "text": "Oslo is the capital of Norway. It was founded in 1040.",
        "links": [{"start": 23, "end": 29, "target": "Norway"}],
    },
    {
        "id": "8",
        "title": "Bergen",
        "text": "Bergen is a city in Norway, on the west coast.",
        "links": [{"start": 20, "end": 26, "target": "Norway"}],
    },
    {"id": "9", "title": "Blank", "text": "   ", "links": []},
    {
        "id": "10",
        "title": "Norway",
        "text": "Norway is a country. Its capital is Oslo.",
        "links": [{"start": 36, "end": 40, "target": "Oslo"}],
    },
]


def rows_of(store):
    return [
        {k: row[k] for k in ("id", "article", "title", "text", "links", "salient")}
        for row in store.get_many(range(len(store)))
    ]


def test_save_to_disk_and_parquet_build_the_jsonl_docstore(tmp_path, tiny_dir):
    (tmp_path / "wiki.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    ds = datasets.Dataset.from_list(ROWS)
    datasets.DatasetDict(train=ds.select([0, 1]), test=ds.select([2, 3])).save_to_disk(str(tmp_path / "hf"))
    ds.to_parquet(str(tmp_path / "wiki.parquet"))
    assert detect_format(tmp_path / "hf") == "hf" and detect_format(tmp_path / "wiki.parquet") == "hf"
    # a DatasetDict's splits in sorted folder order: test, then train
    assert [a.title for a in iter_articles(tmp_path / "hf")] == ["Norway", "Oslo", "Bergen"]
    cfg = BuildConfig(chunk_size=16, tokenizer=str(tiny_dir))
    quiet = dict(progress=False, log=lambda m: None)
    ref = build_docstore([tmp_path / "wiki.jsonl"], tmp_path / "ref", cfg, **quiet)
    got = build_docstore([tmp_path / "wiki.parquet"], tmp_path / "pq", cfg, **quiet)
    assert rows_of(got) == rows_of(ref) and got.manifest["sources"][0]["format"] == "hf"
    arts = got.articles().to_pylist()
    assert [a["title"] for a in arts] == ["Oslo", "Bergen", "Norway"] and arts[0]["source_id"] == "7"


def test_table_input_errors(tmp_path):
    datasets.Dataset.from_dict({"body": ["x"]}).to_parquet(str(tmp_path / "nobody.parquet"))
    with pytest.raises(CorpusError, match=r'nobody.parquet: no "text" column \(columns: body\)'):
        list(iter_articles(tmp_path / "nobody.parquet"))
    datasets.Dataset.from_dict(
        {"text": ["ok", "x"], "links": [[], [{"start": 0, "end": 5, "target": "X"}]]}
    ).to_parquet(str(tmp_path / "bad.parquet"))
    with pytest.raises(CorpusError, match=r"bad.parquet: row 1: links\[0\] span \[0, 5\) is out of bounds"):
        list(iter_articles(tmp_path / "bad.parquet"))
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(CorpusError, match="junk.parquet: not a readable Parquet or Arrow file"):
        list(iter_articles(tmp_path / "junk.parquet"))
