"""The retrieval commands end to end on a tiny DocStore with a tiny random encoder."""

import json

import numpy as np
import pytest
from pairs_ref import DOCS

from ralm.cli import main
from testkit import cli_store_and_index
from testkit import run_ralm_errors as run


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_dir):
    return cli_store_and_index(tmp_path_factory.mktemp("cli"), DOCS, tiny_dir, index_options=["--bm25"])


def test_search_dense_and_bm25(built, capsys):
    code, out, _ = run(
        capsys, "search", built / "index", "capital of Norway", "-k", "3", "--retriever", "bm25", "--json"
    )
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and [r["rank"] for r in rows] == [1, 2, 3]
    assert rows[0]["title"] == "Oslo"  # "capital" and "norway" both occur only there
    code, out, _ = run(capsys, "search", built / "index", "capital of Norway", "-k", "6")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6 and lines[0].lstrip().startswith("1 ")
    assert sorted(int(ln.split("[")[1].split("]")[0]) for ln in lines) == list(range(6))  # every chunk, once


def test_index_refuses_another_corpus(built, tmp_path, capsys, tiny_dir):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"title": "X", "text": "Something else entirely. Two sentences."}) + "\n")
    assert (
        main(
            [
                "corpus",
                "build",
                str(other),
                "--out",
                str(tmp_path / "store2"),
                "--tokenizer",
                str(tiny_dir),
                "--quiet",
            ]
        )
        == 0
    )
    code, _, err = run(capsys, "search", built / "index", "query", "--store", tmp_path / "store2")
    assert code == 2 and len(err) == 1 and "another corpus" in err[0]


def test_unfinished_and_missing_index_and_bad_encoder(built, tmp_path, capsys):
    half = tmp_path / "half"
    (half / "encoder").mkdir(parents=True)
    code, _, err = run(capsys, "search", half, "query")
    assert code == 2 and "unfinished" in err[0]
    code, _, err = run(capsys, "search", tmp_path / "missing", "query")
    assert code == 2 and "no such index" in err[0]
    (tmp_path / "notamodel").mkdir()
    code, _, err = run(
        capsys,
        "index",
        "build",
        built / "store",
        "--out",
        tmp_path / "i2",
        "--encoder",
        tmp_path / "notamodel",
    )
    assert code == 2 and "notamodel" in err[0]


def test_eval_retrieval_table_and_json(built, tmp_path, capsys, tiny_dir):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        json.dumps({"question": "what is the capital of norway", "answers": ["Oslo"]})
        + "\n"
        + json.dumps({"question": "who taught aristotle", "answers": ["Plato"]})
        + "\n"
    )
    out_json = tmp_path / "table.json"
    code, out, _ = run(
        capsys,
        "eval-retrieval",
        built / "store",
        "--qa",
        qa,
        "--dense",
        tiny_dir,
        "-k",
        "1",
        "6",
        "--json-out",
        out_json,
        "--quiet",
    )
    assert code == 0
    table = json.loads(out_json.read_text())
    # no --lang: the DocStore's language (corpus build's default, en) analyses BM25
    assert table["questions"] == 2 and set(table["recall"]) == {"bm25:en", f"dense:{tiny_dir}"}
    assert table["lang"] == "en"
    for rec in table["recall"].values():
        assert rec["6"] == 1.0  # k = all chunks: every answer is found
    # BM25 by hand: "capital"+"norway" only in Oslo's chunk; "aristotle" only in Aristotle's chunk
    assert table["recall"]["bm25:en"]["1"] == 1.0
    assert "2 questions" in out and "nDCG@10" in out and "hub@6" in out
    code, _, err = run(capsys, "eval-retrieval", built / "store", "--qa", qa, "-k", "99")
    assert code == 2 and "-k" in err[0]


def test_eval_retrieval_with_regex_answers(built, tmp_path, capsys):
    """CuratedTREC-style patterns in a DPR TSV: matched as regexes by the file's name (auto) or by
    --answers regex, as strings with --answers string; a bad pattern is one line naming file and row."""
    qa = tmp_path / "curatedtrec-test.qa.csv"
    qa.write_text(
        'when was lincoln born\t["18(0|1)\\\\d"]\n'
        'who taught aristotle\t["Plat(o|on)"]\n'
        "what is the capital of alabama\t['montgomery']\n",
        encoding="utf-8",
    )
    common = ["--index", built / "index", "--no-bm25", "-k", "1", "6", "--measures", "none", "--quiet"]
    code, out, _ = run(capsys, "eval-retrieval", "--qa", qa, *common, "--json-out", tmp_path / "r.json")
    assert code == 0 and "3 questions" in out and "3 with regex answers" in out
    t = json.loads((tmp_path / "r.json").read_text())
    assert t["regex_questions"] == 3 and t["recall"]["dense:index"]["6"] == 1.0  # every pattern is found
    code, out, _ = run(
        capsys,
        "eval-retrieval",
        "--qa",
        qa,
        *common,
        "--answers",
        "string",
        "--json-out",
        tmp_path / "s.json",
    )
    t = json.loads((tmp_path / "s.json").read_text())
    assert code == 0 and t["regex_questions"] == 0
    assert t["recall"]["dense:index"]["6"] == pytest.approx(1 / 3)  # only "montgomery" occurs as text
    plain = tmp_path / "qa.jsonl"
    plain.write_text(json.dumps({"question": "when was lincoln born", "answers": ["18(0|1)\\d"]}) + "\n")
    code, out, _ = run(capsys, "eval-retrieval", "--qa", plain, *common, "--answers", "regex")
    assert code == 0 and "1 with regex answers" in out
    bad = tmp_path / "curatedtrec-bad.qa.csv"
    bad.write_text('q1\t["ok"]\nq2\t["(unclosed"]\n', encoding="utf-8")
    code, _, err = run(capsys, "eval-retrieval", "--qa", bad, *common)
    assert code == 2 and len(err) == 1 and f"{bad}:2: answer pattern '(unclosed'" in err[0]


def test_eval_retrieval_all_retrievers_in_one_table(built, tmp_path, capsys, tiny_dir):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"question": "who taught aristotle", "answers": ["Plato"]}) + "\n")
    out_json = tmp_path / "all.json"
    code, out, _ = run(
        capsys,
        "eval-retrieval",
        built / "store",
        "--qa",
        qa,
        "--dense",
        tiny_dir,
        "--ql",
        "--colbert-rerank",
        "4",
        "-k",
        "1",
        "3",
        "--json-out",
        out_json,
        "--quiet",
    )
    assert code == 0
    recall = json.loads(out_json.read_text())["recall"]
    assert list(recall) == ["bm25:en", "query_likelihood", "colbert_rerank_bm25@4", f"dense:{tiny_dir}"]
    # "aristotle" occurs only in Aristotle's chunk: both lexical retrievers rank it first
    assert recall["bm25:en"]["1"] == 1.0 and recall["query_likelihood"]["1"] == 1.0
    # MaxSim with the real MiniLM puts the Aristotle/Plato chunk first among BM25's top 4
    assert recall["colbert_rerank_bm25@4"] == {"1": 1.0, "3": 1.0}
    assert all(name in out for name in recall)


def test_eval_retrieval_on_an_index_with_hybrid_measures_and_run_files(built, tmp_path, capsys):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        json.dumps({"question": "what is the capital of norway", "answers": ["Oslo"]})
        + "\n"
        + json.dumps({"question": "who taught aristotle", "answers": ["Plato"]})
        + "\n"
    )
    out_json, runs = tmp_path / "t.json", tmp_path / "runs"
    code, out, _ = run(
        capsys,
        "eval-retrieval",
        "--index",
        built / "index",
        "--qa",
        qa,
        "--bm25",
        "none",
        "--bm25",
        "en",
        "--hybrid",
        "rrf",
        "--hybrid",
        "weighted",
        "-k",
        "1",
        "3",
        "--measures",
        "nDCG@10",
        "RR@10",
        "Success@3",
        "--json-out",
        out_json,
        "--run-dir",
        runs,
        "--quiet",
    )
    assert code == 0
    t = json.loads(out_json.read_text())
    names = [
        "bm25",
        "bm25:en",
        "dense:index",
        "hybrid:rrf(bm25+dense:index)",
        "hybrid:weighted(bm25+dense:index)",
    ]
    assert list(t["recall"]) == names
    for n in names:  # Success@k (ir-measures) is answer recall@k
        assert t["measures"][n]["Success@3"] == pytest.approx(t["recall"][n]["3"])
        assert 0.0 < t["hubness"][n]["distinct"] <= 1.0
    assert t["recall"]["bm25"]["1"] == 1.0 and t["measures"]["bm25"]["RR@10"] == 1.0
    # the index's own BM25 (built for the DocStore's language, en) serves "bm25:en"; plain is built in memory
    assert "most retrieved chunk" in out
    files = sorted(p.name for p in runs.iterdir())
    assert files == [
        "bm25.trec",
        "bm25_en.trec",
        "dense_index.trec",
        "hybrid_rrf_bm25_dense_index_.trec",
        "hybrid_weighted_bm25_dense_index_.trec",
        "qrels.trec",
        "qrels.tsv",
        "queries.tsv",
    ]
    first = (runs / "bm25.trec").read_text().splitlines()[0].split()
    assert first[:2] == ["q1", "Q0"] and first[3] == "1" and first[5] == "bm25"
    assert (runs / "queries.tsv").read_text().splitlines()[1] == "q2\twho taught aristotle"
    # bad arguments fail before anything loads
    for argv, msg in [
        (["--qa", qa], "DocStore directory or --index"),
        ([built / "store", "--index", built / "index"], "DocStore directory or --index"),
        ([built / "store", "--bm25", "xx"], "xx"),
        ([built / "store", "--measures", "Bogus@3"], "Bogus@3"),
        ([built / "store", "--hybrid", "rrf", "--no-bm25"], "--no-bm25"),
        ([built / "store", "--fusion-depth", "2", "-k", "5"], "--fusion-depth"),
    ]:
        code, _, err = run(capsys, "eval-retrieval", *argv)
        assert code == 2 and msg in err[0], (argv, err)


def test_index_build_with_lang_and_hybrid_search(built, tmp_path, capsys, tiny_dir):
    code = main(
        [
            "index",
            "build",
            str(built / "store"),
            "--out",
            str(tmp_path / "da"),
            "--encoder",
            str(tiny_dir),
            "--lang",
            "da",
            "--quiet",
        ]
    )
    assert code == 0
    bm = json.loads((tmp_path / "da" / "bm25" / "bm25.json").read_text())
    assert bm["stemmer"] == "danish" and "og" in bm["stopwords"]
    code, out, _ = run(
        capsys, "search", tmp_path / "da", "capital of Norway", "-k", "3", "--retriever", "hybrid", "--json"
    )
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and len(rows) == 3 and len({r["id"] for r in rows}) == 3
    # an analysis other than the index's: BM25 is built in memory, with a note
    code, out, _ = run(
        capsys,
        "search",
        built / "index",
        "capitals of Norway",
        "-k",
        "1",
        "--retriever",
        "bm25",
        "--lang",
        "en",
        "--json",
    )
    assert code == 0 and json.loads(out)["title"] == "Oslo"  # "capitals" stems to "capit", as "capital"
    code, _, err = run(capsys, "search", built / "index", "x", "-k", "0")
    assert code == 2 and "-k 0" in err[0]
    code, _, err = run(capsys, "search", built / "index", "x", "--lang", "klingon")
    assert code == 2 and "klingon" in err[0]


def test_centred_dense_in_eval_and_index_build(built, tmp_path, capsys, tiny_dir):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"question": "who taught aristotle", "answers": ["Plato"]}) + "\n")
    out_json = tmp_path / "c.json"
    code, _, _ = run(
        capsys,
        "eval-retrieval",
        built / "store",
        "--qa",
        qa,
        "--dense",
        tiny_dir,
        "--center",
        "--hybrid",
        "rrf",
        "-k",
        "1",
        "3",
        "--json-out",
        out_json,
        "--quiet",
    )
    assert code == 0
    store_rows = json.loads(out_json.read_text())["recall"]
    assert list(store_rows) == [
        "bm25:en",
        f"dense:{tiny_dir}",
        f"dense:{tiny_dir}:centred",
        f"hybrid:rrf(bm25:en+dense:{tiny_dir}:centred)",
    ]
    # --center over an index: its saved embeddings centred, the same row as over the DocStore
    # (the index was built with the same encoder)
    out_index = tmp_path / "ci.json"
    code, _, _ = run(
        capsys,
        "eval-retrieval",
        "--index",
        built / "index",
        "--qa",
        qa,
        "--center",
        "--hybrid",
        "rrf",
        "-k",
        "1",
        "3",
        "--json-out",
        out_index,
        "--quiet",
    )
    assert code == 0
    index_rows = json.loads(out_index.read_text())["recall"]
    assert list(index_rows) == [
        "bm25:en",
        "dense:index",
        "dense:index:centred",
        "hybrid:rrf(bm25:en+dense:index:centred)",
    ]
    assert index_rows["dense:index:centred"] == store_rows[f"dense:{tiny_dir}:centred"]
    assert index_rows["dense:index"] == store_rows[f"dense:{tiny_dir}"]
    code = main(
        [
            "index",
            "build",
            str(built / "store"),
            "--out",
            str(tmp_path / "c"),
            "--encoder",
            str(tiny_dir),
            "--center",
            "--quiet",
        ]
    )
    assert code == 0
    assert json.loads((tmp_path / "c" / "retrieval.json").read_text())["center"] is True
    assert len(json.loads((tmp_path / "c" / "dense" / "index.json").read_text())["center"]) == 64
    code, out, _ = run(capsys, "search", tmp_path / "c", "capital of Norway", "-k", "6", "--json")
    assert code == 0 and sorted(json.loads(x)["id"] for x in out.splitlines()) == list(range(6))
    # an index built --center is centred already: --center evaluates it as it is
    code, _, _ = run(
        capsys,
        "eval-retrieval",
        "--index",
        tmp_path / "c",
        "--qa",
        qa,
        "--center",
        "--no-bm25",
        "-k",
        "1",
        "3",
        "--json-out",
        out_index,
        "--quiet",
    )
    rows = json.loads(out_index.read_text())["recall"]
    assert (
        code == 0 and rows["dense:index"] == rows["dense:index:centred"] == index_rows["dense:index:centred"]
    )
    # an index without its embeddings cannot be centred: one line saying what to do
    (tmp_path / "c" / "embeddings.npy").rename(tmp_path / "c.npy")
    (tmp_path / "c" / "retrieval.json").write_text(
        json.dumps({**json.loads((tmp_path / "c" / "retrieval.json").read_text()), "center": False})
    )
    code, _, err = run(capsys, "eval-retrieval", "--index", tmp_path / "c", "--qa", qa, "--center", "-k", "1")
    assert code == 2 and "embeddings.npy" in err[0] and "--center" in err[0]


@pytest.mark.parametrize("w", [0.2, 0.5, 0.9])
def test_weighted_rrf_hybrid_equals_fusing_the_two_rankings(built, w):
    from ralm.retrieval.hybrid import fuse_rankings
    from ralm.retrieval.searchers import open_searcher

    queries = ["capital of Norway", "who was a student of Plato", "sunlight reflected by snow"]
    _, bm25 = open_searcher(built / "index", "bm25")
    _, dense = open_searcher(built / "index", "dense")
    _, hybrid = open_searcher(built / "index", "hybrid", dense_weight=w, depth=6)
    got = hybrid.search_text(queries, 6)
    b, d = bm25.search_text(queries, 6), dense.search_text(queries, 6)
    for i in range(len(queries)):
        weights = None if w == 0.5 else [1 - w, w]  # equal: the usual RRF scores (1 and 1)
        ids, scores = fuse_rankings([b.ids[i], d.ids[i]], [b.scores[i], d.scores[i]], 6, weights=weights)
        assert got.ids[i].tolist() == ids.tolist()
        np.testing.assert_allclose(got.scores[i], scores, rtol=1e-6)


def test_search_dense_weight_out_of_range(built, capsys):
    code, _, err = run(
        capsys, "search", built / "index", "x", "--retriever", "hybrid", "--dense-weight", "1.5"
    )
    assert code == 2 and len(err) == 1 and "--dense-weight 1.5" in err[0]


@pytest.mark.parametrize("kind", ["dense", "bm25", "hybrid"])
def test_python_retriever_equals_search_json(built, capsys, kind):
    """`ralm.Retriever.load(dir, kind).search(...)` gives what `ralm search --json` prints, and the
    ids and scores of the searcher `open_searcher` opens."""
    from ralm import Hit, Retriever
    from ralm.retrieval.searchers import open_searcher

    queries = ["capital of Norway", "Greek philosopher"]
    retriever = Retriever.load(built / "index", kind)
    batch = retriever.search(queries, k=4)
    for query, hits in zip(queries, batch, strict=True):
        code, out, _ = run(capsys, "search", built / "index", query, "-k", "4", "--retriever", kind, "--json")
        # one query at a time: the same computation as the CLI, so the very same floats
        assert code == 0 and [Hit(**json.loads(x)) for x in out.splitlines()] == retriever.search(query, k=4)
        # in a batch the dense query is padded next to the others: equal up to float32 rounding
        single = retriever.search(query, k=4)
        assert [(h.rank, h.id, h.title, h.text) for h in hits] == [
            (h.rank, h.id, h.title, h.text) for h in single
        ]
        assert [h.score for h in hits] == pytest.approx([h.score for h in single], rel=1e-5)
    _, backend = open_searcher(built / "index", kind, log=lambda m: None)
    ref = backend.search_text(queries, 4)
    assert [[h.id for h in hits] for hits in batch] == ref.ids.tolist()
    np.testing.assert_array_equal(
        np.array([[h.score for h in hits] for hits in batch], np.float32), ref.scores
    )


def test_retriever_gives_its_encoder_and_document_vectors(built, tmp_path):
    """What LSR and serve need from an index, through `ralm.Retriever`: the dense side's encoder
    (dense or hybrid) and the saved document vectors, the very rows of embeddings.npy."""
    import shutil

    from ralm import RalmError, Retriever

    dense, hybrid = Retriever.load(built / "index", "dense"), Retriever.load(built / "index", "hybrid")
    assert dense.encoder is dense.backend.encoder
    assert hybrid.encoder.fingerprint("all") == dense.encoder.fingerprint("all")
    want = np.load(built / "index" / "embeddings.npy")
    assert want.shape == (6, dense.encoder.dim)
    np.testing.assert_array_equal(np.asarray(dense.doc_vectors()), want)
    with pytest.raises(RalmError, match="no dense side"):
        _ = Retriever.load(built / "index", "bm25").encoder
    copy = tmp_path / "index"
    shutil.copytree(built / "index", copy)
    (copy / "embeddings.npy").unlink()
    with pytest.raises(RalmError, match="embeddings.npy: no document vectors"):
        Retriever.load(copy, "dense").doc_vectors()


def test_python_retriever_errors(built):
    from ralm import RalmError, Retriever

    with pytest.raises(RalmError, match="no such index directory"):
        Retriever.load(built / "nope")
    retriever = Retriever.load(built / "index", "bm25")
    with pytest.raises(RalmError, match=r"k 7: must be between 1 and the number of chunks \(6\)"):
        retriever.search("x", k=7)
    with pytest.raises(RalmError, match="query 0 is empty"):
        retriever.search([" "], k=1)
    with pytest.raises(RalmError, match="dense_weight 2: must be between 0 and 1"):
        Retriever.load(built / "index", "hybrid", dense_weight=2)
