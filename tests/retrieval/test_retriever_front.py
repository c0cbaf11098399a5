"""`ralm.Retriever` as the one way in: `open` on an index directory or a DocStore, `from_args` and the
shared `--index/--corpus/--retriever/--lang` options, `hybrid` over two open retrievers, `matched_mask`."""

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from pairs_ref import DOCS

from ralm.cli import build_parser, main
from ralm.errors import RalmError
from ralm.retrieval.base import SearchResult
from ralm.retrieval.options import add_retrieval_args
from ralm.retrieval.retriever import Retriever, matched_mask

QUERIES = ["capital of Norway", "who was a student of Plato", "sunlight reflected by snow"]
LM_EVAL_LANG_HELP = (
    "BM25 stopwords + Snowball stemmer (en, da, nb, ..., none); default: the index's own analysis, or the "
    "DocStore's language over --corpus"
)
RAG_LANG_HELP = (
    "BM25 analysis and answer normalisation language (en, nb, da, ...; default: the DocStore's, else en)"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_dir):
    """store/ (six articles, one chunk each), index/ over it (tiny encoder, with BM25), and other/:
    a DocStore of the first four articles."""
    d = tmp_path_factory.mktemp("front")
    for name, docs in (("store", DOCS), ("other", DOCS[:4])):
        src = d / f"{name}.jsonl"
        src.write_text("\n".join(json.dumps({"title": t, "text": x}) for t, x in docs) + "\n")
        argv = ["corpus", "build", str(src), "--out", str(d / name), "--tokenizer", str(tiny_dir), "--quiet"]
        assert main(argv) == 0
    argv = ["index", "build", str(d / "store"), "--out", str(d / "index"), "--encoder", str(tiny_dir)]
    assert main([*argv, "--bm25", "--quiet"]) == 0
    return d


def _ids_scores(retriever: Retriever, k: int = 6) -> tuple[list[list[int]], np.ndarray]:
    res = retriever.search_ids(QUERIES, k)
    return res.ids.tolist(), res.scores


@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid"])
def test_open_an_index_directory_is_load(built, kind):
    """`Retriever.open(INDEX, kind=...)` opens what `Retriever.load(INDEX, kind)` opens: the same
    DocStore, the same ranking and scores; described as the commands print it."""
    opened = Retriever.open(built / "index", kind=kind)
    loaded = Retriever.load(built / "index", kind)
    assert opened.kind == kind and opened.path == built / "index"
    assert opened.description == f"{kind} over {built / 'index'}"
    assert opened.store.root == loaded.store.root == (built / "store").resolve()
    got, want = _ids_scores(opened), _ids_scores(loaded)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    assert Retriever.open(index=built / "index", kind=kind).description == opened.description


def test_open_a_docstore_folder_or_object_is_bm25_in_memory(built):
    """A DocStore (its folder, or the open DocStore) is searched by BM25 built in memory for its
    recorded language (en: stopwords and the English stemmer), as `--corpus STORE` searches it."""
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.bm25 import BM25Searcher, store_analyzer

    by_path = Retriever.open(built / "store")
    store = DocStore(built / "store")
    by_object = Retriever.open(store)
    assert by_path.kind == by_object.kind == "bm25" and by_path.path is by_object.path is None
    assert by_path.description == f"bm25 (en: 33 stopwords, english stemmer) over {built / 'store'}"
    assert by_object.description == f"bm25 (en: 33 stopwords, english stemmer) over {store.root}"
    assert by_object.store is store and isinstance(by_object.backend, BM25Searcher)
    assert [h.title for h in by_path.search("capital of Norway", k=2)] == ["Oslo", "Bergen"]
    assert _ids_scores(by_path)[0] == _ids_scores(by_object)[0]
    assert by_path.description == Retriever.open(corpus=built / "store", kind="bm25").description
    own = Retriever.open(store, bm25_options={})  # the DocStore's own analysis (what `ralm serve` builds)
    assert own.backend.analyzer == store_analyzer(store)
    plain = Retriever.open(store, lang="none")
    assert plain.description == f"bm25 (no stopwords, no stemmer) over {store.root}"


def test_open_refuses_what_it_cannot_give(built):
    with pytest.raises(
        RalmError, match=r"^give what to search once: as path_or_store, or as index= / corpus=$"
    ):
        Retriever.open(built / "index", corpus=built / "store")
    with pytest.raises(RalmError, match="--retriever dense needs an index directory"):
        Retriever.open(built / "store", kind="dense")
    with pytest.raises(RalmError, match="no such index directory"):
        Retriever.open(built / "nope")


def test_add_retrieval_args_parses_the_options_the_commands_had():
    """The four options, their defaults and their values, as `lm-eval` and `rag` declared them."""
    p = argparse.ArgumentParser()
    add_retrieval_args(p)
    assert vars(p.parse_args([])) == {"index": None, "corpus": None, "retriever": "bm25", "lang": None}
    argv = ["--index", "I", "--corpus", "C", "--retriever", "hybrid", "--lang", "nb"]
    want = {"index": Path("I"), "corpus": Path("C"), "retriever": "hybrid", "lang": "nb"}
    assert vars(p.parse_args(argv)) == want
    with pytest.raises(SystemExit):
        p.parse_args(["--retriever", "sparse"])
    helps = {a.dest: a.help for a in p._actions if a.dest != "help"}
    assert helps == {
        "index": "a retrieval index directory (ralm index build)",
        "corpus": "a DocStore: BM25 built in memory (with --index: its DocStore)",
        "retriever": "default bm25",
        "lang": LM_EVAL_LANG_HELP,
    }
    assert [a.choices for a in p._actions if a.dest == "retriever"] == [["bm25", "dense", "hybrid"]]
    # the commands that declare them: lm-eval and the rag subcommands parse them alike
    for command in (
        ["lm-eval", "t.txt"],
        ["rag", "retrieve", "q.jsonl", "--out", "o"],
        ["rag", "eval", "q.jsonl", "--out", "o"],
    ):
        a = build_parser().parse_args([*command, *argv])
        assert {key: getattr(a, key) for key in want} == want, command
        d = build_parser().parse_args(command)
        assert (d.index, d.corpus, d.retriever, d.lang) == (None, None, "bm25", None), command


def test_the_commands_keep_their_lang_help(capsys):
    """`lm-eval --lang` is BM25's analysis; `rag`'s is answer normalisation too (`lang_help`)."""
    for argv, want in (
        (["lm-eval", "--help"], LM_EVAL_LANG_HELP),
        (["rag", "retrieve", "--help"], RAG_LANG_HELP),
    ):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        assert " ".join(want.split()) in " ".join(capsys.readouterr().out.split())


def test_from_args_opens_what_the_options_name(built):
    """`Retriever.from_args(args)` is what `lm-eval` and `rag` open from their options."""
    a = build_parser().parse_args(
        ["rag", "retrieve", "q.jsonl", "--out", "o", "--corpus", str(built / "store")]
    )
    r = Retriever.from_args(a)
    assert (
        r.kind == "bm25"
        and r.description == f"bm25 (en: 33 stopwords, english stemmer) over {built / 'store'}"
    )
    argv = ["lm-eval", "t.txt", "--index", str(built / "index"), "--retriever", "dense"]
    r = Retriever.from_args(build_parser().parse_args(argv))
    assert (r.kind, r.path, r.description) == ("dense", built / "index", f"dense over {built / 'index'}")
    np.testing.assert_array_equal(
        r.search_ids(QUERIES, 6).ids, Retriever.load(built / "index", "dense").search_ids(QUERIES, 6).ids
    )
    with pytest.raises(
        RalmError, match=r"^retrieval needs --index INDEX \(bm25, dense or hybrid\) or --corpus STORE"
    ):
        Retriever.from_args(build_parser().parse_args(["lm-eval", "t.txt"]))
    argv = ["lm-eval", "t.txt", "--corpus", str(built / "store"), "--retriever", "hybrid"]
    with pytest.raises(RalmError, match="--retriever hybrid needs an index directory"):
        Retriever.from_args(build_parser().parse_args(argv))


@pytest.mark.parametrize("fusion,w", [("rrf", 0.5), ("weighted", 0.2)])
def test_hybrid_of_two_open_retrievers_is_the_index_hybrid(built, fusion, w):
    bm25, dense = Retriever.load(built / "index", "bm25"), Retriever.load(built / "index", "dense")
    fused = Retriever.hybrid(bm25, dense, fusion=fusion, dense_weight=w)
    ref = Retriever.load(built / "index", "hybrid", fusion=fusion, dense_weight=w)
    assert fused.kind == "hybrid" and fused.store is bm25.store
    got, want = _ids_scores(fused), _ids_scores(ref)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])


def test_hybrid_refuses_two_docstores(built):
    dense = Retriever.load(built / "index", "dense")
    with pytest.raises(RalmError, match="search different DocStores"):
        Retriever.hybrid(Retriever.open(built / "other"), dense)
    with pytest.raises(RalmError, match="dense_weight 1.5: must be between 0 and 1"):
        Retriever.hybrid(Retriever.load(built / "index", "bm25"), dense, dense_weight=1.5)


def test_matched_mask(built):
    """A hit matched: a chunk, a finite score, and from BM25 a score above 0."""
    res = SearchResult(ids=np.array([[3, -1, 2, 4]]), scores=np.array([[1.5, 0.5, np.nan, 0.0]], np.float32))
    dense = Retriever.load(built / "index", "dense")
    assert matched_mask(dense.backend, res).tolist() == [[True, False, False, True]]
    bm25 = Retriever.open(built / "store")
    assert matched_mask(bm25.backend, res).tolist() == [[True, False, False, False]]
    hits = bm25.search("capital of Norway", k=6, matched_only=True)
    full = bm25.search_ids(["capital of Norway"], 6)
    assert [h.id for h in hits] == full.ids[0][full.scores[0] > 0].tolist() == [0, 1, 5]
