"""Hugging Face data out: a DocStore that `datasets.load_from_disk` opens, and an index that
transformers' RagRetriever (index_name="custom") searches with the same top passages as `ralm search`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pairs_ref import DOCS

from ralm.cli import main
from ralm.errors import RalmError
from testkit import cli_store_and_index

datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_dir):
    d = tmp_path_factory.mktemp("hf-export")
    return cli_store_and_index(d, DOCS, tiny_dir, corpus_options=["--chunk-size", "16"])


def test_docstore_exports_to_load_from_disk(built, tmp_path, capsys):
    from ralm.corpus.docstore import DocStore

    store = DocStore(built / "store")
    assert main(["corpus", "export", str(built / "store"), "--out", str(tmp_path / "hf")]) == 0
    ds = datasets.load_from_disk(str(tmp_path / "hf"))
    assert len(ds) == len(store) > len(DOCS)  # 16-token chunks: several per article
    rows = store.get_many(range(len(store)))
    assert ds["text"] == [r["text"] for r in rows] and ds["id"] == list(range(len(store)))
    assert ds[3]["input_ids"] == [int(i) for i in store.input_ids(3)]
    assert main(["corpus", "export", str(built / "store"), "--out", str(tmp_path / "hf")]) == 2
    assert "exists; choose another --out or pass --overwrite" in capsys.readouterr().err
    assert main(["corpus", "export", str(built / "store"), "--out", str(tmp_path / "hf"), "--overwrite"]) == 0


def test_rag_retriever_finds_what_ralm_search_finds(built, tmp_path, tiny_dir, capsys):
    from transformers import AutoTokenizer, BertConfig, RagConfig, RagRetriever

    from ralm.retrieval.encoders import DualEncoder

    assert main(["index", "export-rag", str(built / "index"), "--out", str(tmp_path / "rag")]) == 0
    capsys.readouterr()
    k, queries = 4, ["capital of Norway", "Greek philosopher", "president born in 1809"]
    encoder = DualEncoder.from_pretrained(built / "index" / "encoder")
    config = RagConfig(
        question_encoder=BertConfig().to_dict(),
        generator=BertConfig().to_dict(),
        index_name="custom",
        passages_path=str(tmp_path / "rag" / "passages"),
        index_path=str(tmp_path / "rag" / "index.faiss"),
        retrieval_vector_size=encoder.dim,
        n_docs=k,
    )
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    retriever = RagRetriever(config, question_encoder_tokenizer=tok, generator_tokenizer=tok)
    _, doc_ids, doc_dicts = retriever.retrieve(np.asarray(encoder.encode_queries(queries), np.float32), k)
    for query, ids, docs in zip(queries, doc_ids, doc_dicts, strict=True):
        assert main(["search", str(built / "index"), query, "-k", str(k), "--json"]) == 0
        hits = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert ids.tolist() == [h["id"] for h in hits] == docs["id"]
        assert docs["title"] == [h["title"] for h in hits] and docs["text"] == [h["text"] for h in hits]


def test_centred_index_is_refused(built, tmp_path, tiny_dir):
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.hf_export import export_rag
    from ralm.retrieval.index.build import build_index_dir

    build_index_dir(
        DocStore(built / "store"),
        tmp_path / "c",
        encoder=str(tiny_dir),
        center=True,
        progress=False,
        log=lambda m: None,
    )
    with pytest.raises(RalmError, match="a centred index .* rebuild it without --center"):
        export_rag(tmp_path / "c", tmp_path / "rag")
    assert not (tmp_path / "rag").exists()
