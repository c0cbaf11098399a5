import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.corpus.docstore import SALIENT_SOURCES, DocStore, RaggedArray, RaggedWriter
from ralm.errors import CorpusError
from testkit import random_sentences


def test_ragged_docstring_example(tmp_path):
    w = RaggedWriter(tmp_path / "r", "int32", 1)
    for row in ([1, 2], [], [3]):
        w.append(row)
    w.close()
    assert np.fromfile(tmp_path / "r.bin", dtype=np.int32).tolist() == [1, 2, 3]
    assert np.fromfile(tmp_path / "r.idx", dtype=np.int64).tolist() == [0, 2, 2, 3]
    r = RaggedArray(tmp_path / "r", "int32", 1)
    assert len(r) == 3 and [r[i].tolist() for i in range(3)] == [[1, 2], [], [3]]
    assert r.lengths().tolist() == [2, 0, 1]


def test_ragged_width3_and_size_check(tmp_path):
    w = RaggedWriter(tmp_path / "s", "int32", 3)
    w.append([(0, 2, 1), (5, 6, 3)])
    w.append([])
    w.close()
    r = RaggedArray(tmp_path / "s", "int32", 3)
    assert r[0].tolist() == [[0, 2, 1], [5, 6, 3]] and r[1].shape == (0, 3)
    with open(tmp_path / "s.bin", "ab") as f:
        f.write(b"\0\0\0\0")
    with pytest.raises(CorpusError, match="size does not match"):
        RaggedArray(tmp_path / "s", "int32", 3)


def _docs(n=30):
    rng = np.random.default_rng(0)
    docs = []
    for i in range(n):
        text = random_sentences(rng, (4, 15), (1, 9)) + f" Born 12 April {1800 + i}."
        j = text.find("Oslo")
        links = [{"start": j, "end": j + 4, "target": "Oslo"}] if j >= 0 else []
        docs.append({"id": f"d{i}", "title": f"Doc {i}", "text": text, "links": links})
    return docs


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("ds")
    src = d / "docs.jsonl"
    docs = _docs()
    src.write_text("\n".join(json.dumps(x) for x in docs) + "\n", encoding="utf-8")
    cfg = BuildConfig(chunk_size=24, rows_per_shard=8, row_group_size=4)
    store = build_docstore([src], d / "store", cfg, progress=False, log=lambda m: None)
    return store, docs


def test_round_trip_every_access_path_agrees(small_store):
    store, docs = small_store
    n = len(store)
    assert n == store.manifest["counts"]["chunks"] and n > 30
    assert len(store.shard_paths) == -(-n // 8)  # ceil: 8 rows per shard
    streamed = [
        r
        for b in store.iter_batches(batch_size=5)
        for r in (dict(zip(b, vals, strict=True)) for vals in zip(*b.values(), strict=True))
    ]
    assert [r["id"] for r in streamed] == list(range(n))
    for i in [n - 1, 0, 7, 8, 3, 17, n // 2]:  # random access across groups and shards
        row = store.get(i)
        assert row == streamed[i]
        assert store.input_ids(i).tolist() == row["input_ids"]
        trip = store.salient_tokens(i).tolist()
        assert trip == [
            [s["token_start"], s["token_end"], SALIENT_SOURCES.index(s["source"])] for s in row["salient"]
        ]
    assert [r["id"] for r in store.get_many([5, 1, 5])] == [5, 1, 5]
    # chunk text is the exact slice of the article text
    arts = store.articles().to_pylist()
    assert len(arts) == len(docs)
    for r in streamed:
        art = arts[r["article"]]
        assert art["first_chunk"] <= r["id"] < art["first_chunk"] + art["n_chunks"]
        assert docs[r["article"]]["text"][r["char_start"] : r["char_end"]] == r["text"]
        assert r["title"] == docs[r["article"]]["title"] == art["title"]
        assert art["source_id"] == docs[r["article"]]["id"]
    assert store.lengths().tolist() == [len(r["input_ids"]) for r in streamed]


def test_salient_spans_dates_and_links(small_store):
    store, docs = small_store
    for r in (store.get(i) for i in range(len(store))):
        for s in r["salient"]:
            assert 0 <= s["token_start"] < s["token_end"] <= len(r["input_ids"])
            assert r["text"][s["start"] : s["end"]].strip() == r["text"][s["start"] : s["end"]]
    last = store.get(len(store) - 1)  # the last doc ends "Born 12 April 1829."
    dates = [last["text"][s["start"] : s["end"]] for s in last["salient"] if s["source"] == "date"]
    assert dates == ["12 April 1829"]
    counts = store.manifest["counts"]["salient"]
    assert counts["link"] == sum(len(d["links"]) for d in docs) and counts["date"] >= len(docs)


def test_readable_by_pyarrow_and_datasets(small_store):
    store, _ = small_store
    table = pq.read_table(store.parquet_files)
    assert table.num_rows == len(store) and table.column("id").to_pylist() == list(range(len(store)))
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset("parquet", data_files=store.parquet_files, split="train")
    assert len(ds) == len(store) and ds[3]["text"] == store.get(3)["text"]


def test_manifest_contents(small_store):
    store, _ = small_store
    m = store.manifest
    assert m["chunk_size"] == 24 and m["tokenizer"]["class"] == "BertTokenizer"
    # the default 32 asked for, clamped to half of the 22 text tokens next to [CLS]/[SEP]
    assert m["min_chunk_tokens"] == 11 and m["config"]["min_chunk_tokens"] == 32
    assert len(m["sources"][0]["sha256"]) == 64 and m["sources"][0]["format"] == "jsonl"
    assert m["counts"]["articles"] == 30 and m["entity_vocab"] == "entities.tsv"
    assert len(store.fingerprint) == 64


def test_out_of_range_and_not_a_store(small_store, tmp_path):
    store, _ = small_store
    with pytest.raises(CorpusError, match="out of range"):
        store.get(len(store))
    with pytest.raises(CorpusError, match="not a DocStore"):
        DocStore(tmp_path)
    with pytest.raises(CorpusError, match="no such DocStore"):
        DocStore(tmp_path / "nope")


def test_no_tiny_last_chunks_and_min_chunk_tokens_zero(small_store, tmp_path):
    store, docs = small_store
    lengths = store.lengths()
    arts = store.articles().to_pydict()
    multi = [(f, k) for f, k in zip(arts["first_chunk"], arts["n_chunks"], strict=True) if k >= 2]
    assert multi, "the fixture has articles of several chunks"
    assert all(lengths[f + k - 1] >= 11 for f, k in multi)
    # min_chunk_tokens 0: plain greedy packing, which here leaves short tails; same chunk count
    src = tmp_path / "docs.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in docs) + "\n", encoding="utf-8")
    cfg = BuildConfig(chunk_size=24, min_chunk_tokens=0, rows_per_shard=8, row_group_size=4)
    off = build_docstore([src], tmp_path / "off", cfg, progress=False, log=lambda m: None)
    assert off.manifest["min_chunk_tokens"] == 0 and len(off) == len(store)
    off_lengths = off.lengths()
    assert any(off_lengths[f + k - 1] < 11 for f, k in multi)
    # only the last two chunks of an article can differ, and together they hold the same tokens
    for f, k in multi:
        assert off_lengths[f : f + k - 2].tolist() == lengths[f : f + k - 2].tolist()
        assert off_lengths[f + k - 2 : f + k].sum() == lengths[f + k - 2 : f + k].sum()
    with pytest.raises(CorpusError, match="min-chunk-tokens"):
        build_docstore([src], tmp_path / "neg", BuildConfig(min_chunk_tokens=-1), progress=False)


def test_info_shows_min_chunk_tokens_and_length_histogram(small_store, tmp_path, capsys):
    import shutil

    from ralm.cli import main

    store, _ = small_store
    lengths = store.lengths()
    assert main(["corpus", "info", str(store.root)]) == 0
    out = capsys.readouterr().out
    lines = {line[2:15].strip(): line[15:] for line in out.splitlines()[1:]}
    assert lines["min chunk"] == "11 text tokens for an article's last chunk"
    # budget 22: bins 1-7, 8-15, 16-22, counted here by a plain loop
    naive = {"1-7": 0, "8-15": 0, "16-22": 0}
    for n in lengths.tolist():
        naive["1-7" if n < 8 else "8-15" if n < 16 else "16-22"] += 1
    assert lines["length hist"] == "  ".join(f"{k}: {v}" for k, v in naive.items())
    assert lines["chunk tokens"].startswith(f"min {lengths.min()}  median {np.median(lengths):g}  ")
    assert lines["chunk tokens"].endswith(f"max {lengths.max()}  (text tokens, budget 22)")
    n_short = int((lengths < 11).sum())
    assert lines["short chunks"].startswith(f"{n_short} < 11 tokens ({100 * n_short / len(lengths):.1f}%), ")
    # a store built before the option has no min_chunk_tokens in its manifest: shown as 0
    old = tmp_path / "old"
    shutil.copytree(store.root, old)
    m = json.loads((old / "manifest.json").read_text())
    del m["min_chunk_tokens"], m["config"]["min_chunk_tokens"]
    (old / "manifest.json").write_text(json.dumps(m))
    assert main(["corpus", "info", str(old)]) == 0
    out = capsys.readouterr().out
    assert "  min chunk    0 text tokens for an article's last chunk (off, or a store built" in out
    assert "  short chunks n/a (min chunk 0)" in out and "  length hist  1-7: " in out
