"""The retrieval commands end to end on a tiny DocStore with a tiny random encoder."""

import json

import pytest

from ralm.cli import main

DOCS = [
    ("Oslo", "Oslo is the capital of Norway. The city lies at the end of the Oslofjord."),
    ("Bergen", "Bergen is a city on the west coast of Norway. It rains a lot in Bergen."),
    ("Albedo", "Albedo is the fraction of sunlight that a surface reflects. Snow has a high albedo."),
    ("Lincoln", "Abraham Lincoln was the 16th president of the United States. He was born in 1809."),
    ("Aristotle", "Aristotle was a Greek philosopher. He was a student of Plato."),
    ("Alabama", "Alabama is a state in the southern United States. Its capital is Montgomery."),
]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, [ln for ln in cap.err.splitlines() if ln.startswith("ralm: error")]


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_dir):
    d = tmp_path_factory.mktemp("cli")
    src = d / "docs.jsonl"
    src.write_text("\n".join(json.dumps({"title": t, "text": x}) for t, x in DOCS) + "\n")
    assert (
        main(
            ["corpus", "build", str(src), "--out", str(d / "store"), "--tokenizer", str(tiny_dir), "--quiet"]
        )
        == 0
    )
    code = main(
        [
            "index",
            "build",
            str(d / "store"),
            "--out",
            str(d / "index"),
            "--encoder",
            str(tiny_dir),
            "--bm25",
            "--quiet",
        ]
    )
    assert code == 0
    return d


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
    assert table["questions"] == 2 and set(table["recall"]) == {"bm25", f"dense:{tiny_dir}"}
    for rec in table["recall"].values():
        assert rec["6"] == 1.0  # k = all chunks: every answer is found
    # BM25 by hand: "capital"+"norway" only in Oslo's chunk; "aristotle" only in Aristotle's chunk
    assert table["recall"]["bm25"]["1"] == 1.0
    assert "recall@k on 2 questions" in out
    code, _, err = run(capsys, "eval-retrieval", built / "store", "--qa", qa, "-k", "99")
    assert code == 2 and "-k" in err[0]


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
    assert list(recall) == ["bm25", "query_likelihood", "colbert_rerank_bm25@4", f"dense:{tiny_dir}"]
    # "aristotle" occurs only in Aristotle's chunk: both lexical retrievers rank it first
    assert recall["bm25"]["1"] == 1.0 and recall["query_likelihood"]["1"] == 1.0
    # MaxSim with the real MiniLM puts the Aristotle/Plato chunk first among BM25's top 4
    assert recall["colbert_rerank_bm25@4"] == {"1": 1.0, "3": 1.0}
    assert all(name in out for name in recall)
