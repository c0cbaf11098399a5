"""`ralm lm-eval` end to end: rows, retrievers from an index directory, one-line errors."""

from __future__ import annotations

import json

import pytest
from frozen_ref import ARTICLES, EVAL_ARTICLE, eval_text

from testkit import quiet_store, tiny_index, write_jsonl
from testkit import run_ralm as run


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("lm-eval") / "river.txt"
    p.write_text(eval_text() + "\n", encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, corpus, tiny_dir):
    """A dense + BM25 index over the test corpus, with the tiny random BERT as encoder."""
    return tiny_index(corpus, tmp_path_factory.mktemp("lm-eval-index") / "index", tiny_dir)


COMMON = ("--max-length", "32", "--doc-tokens", "12", "--device", "cpu", "--autocast", "off")


def lm_eval(capsys, lm, text, *options):
    """`ralm lm-eval LM TEXT OPTIONS` with COMMON after the options: run_ralm's answer."""
    return run(capsys, "lm-eval", lm, text, *options, *COMMON)


def test_one_table_for_all_modes_and_strides(capsys, llama_dir, llama, text_file, corpus):
    from ralm.frozen.evaluate import EvalConfig, evaluate
    from ralm.frozen.text import read_eval_text

    code, out, err = lm_eval(
        capsys,
        llama_dir,
        text_file,
        "--corpus",
        corpus,
        "--mode",
        "none",
        "in-context",
        "replug",
        "--stride",
        "4",
        "8",
        "--k",
        "2",
        "--json",
    )
    assert code == 0, err
    res = json.loads(out)
    assert [(r["mode"], r["stride"]) for r in res["rows"]] == [
        ("none", 4),
        ("none", 8),
        ("in-context", 4),
        ("in-context", 8),
        ("replug", 4),
        ("replug", 8),
    ]
    assert res["excluded_articles"] == [EVAL_ARTICLE] and res["excluded_chunks"] >= 3
    assert res["tokens"] == 83 and res["words"] == 84
    assert {r["tokens"] for r in res["rows"]} == {83}  # every row scores the same tokens
    ref = evaluate(llama, read_eval_text(text_file, llama.tokenizer), EvalConfig(max_length=32, stride=4))
    assert res["rows"][0]["token_ppl"] == pytest.approx(ref.token_ppl, rel=1e-6)
    assert res["rows"][0]["word_ppl"] == pytest.approx(ref.word_ppl, rel=1e-6)
    for r in res["rows"]:
        assert r["seconds"]["total"] > 0 and r["tokens_per_s"] > 0
        assert r["blocks_with_docs"] == (0 if r["mode"] == "none" else r["blocks"] - 1)

    code, out, err = lm_eval(capsys, llama_dir, text_file, "--corpus", corpus, "--stride", "4")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"LM {llama_dir} (float32); {text_file}: 83 tokens scored, 84 words")
    assert "1 article(s) excluded" in lines[1] and lines[2].split()[:3] == ["mode", "stride", "docs"]
    assert lines[4].split()[:3] == ["in-context", "4", "1"]  # with a retriever the default mode
    assert any(f"excluded 1 article(s) from retrieval: {EVAL_ARTICLE}" in e for e in err)


@pytest.mark.parametrize("retriever", ["bm25", "dense", "hybrid"])
def test_retrievers_from_an_index_directory(capsys, llama_dir, text_file, index_dir, retriever):
    code, out, err = lm_eval(
        capsys,
        llama_dir,
        text_file,
        "--index",
        index_dir,
        "--retriever",
        retriever,
        "--mode",
        "in-context",
        "--rerank",
        "2",
        "--rerank-tokens",
        "4",
        "--stride",
        "6",
        "--json",
    )
    assert code == 0, err
    res = json.loads(out)
    assert res["retriever"] == f"{retriever} over {index_dir}"
    assert res["excluded_articles"] == [EVAL_ARTICLE]
    (row,) = res["rows"]
    assert row["rerank"] == 2 and row["blocks_with_docs"] == row["blocks"] - 1


def test_lang_rebuilds_bm25_of_an_index_in_memory(capsys, llama_dir, text_file, index_dir):
    code, out, err = lm_eval(
        capsys,
        llama_dir,
        text_file,
        "--index",
        index_dir,
        "--lang",
        "none",
        "--stride",
        "8",
    )
    assert code == 0
    # the index's BM25 analyses English (its DocStore's language): a plain one is built in memory
    assert any("built one with no stopwords, no stemmer" in e for e in err)


@pytest.fixture(scope="module")
def other_corpus(tmp_path_factory, gpt2_dir):
    """The same articles chunked with another tokenizer (the GPT-2 test BPE): another DocStore."""
    d = tmp_path_factory.mktemp("other-corpus")
    src = write_jsonl(d / "docs.jsonl", [{"title": t, "text": x} for t, x in ARTICLES])
    return quiet_store([src], d / "store", 32, gpt2_dir).root


def _one_error_line(code, out, err, *needles):
    assert code == 2 and out == ""
    assert len(err) == 1 and err[0].startswith("ralm: error: "), err
    for n in needles:
        assert n in err[0], err[0]


def test_bad_input_exits_2_with_one_line(
    capsys, tmp_path, llama_dir, text_file, corpus, other_corpus, index_dir, tiny_dir
):
    short = tmp_path / "short.txt"
    short.write_text("Oslo is the capital\n", encoding="utf-8")
    _one_error_line(*lm_eval(capsys, llama_dir, short, "--corpus", corpus), "not more than one stride (4)")
    _one_error_line(*lm_eval(capsys, tiny_dir, text_file), "is not a causal LM", "BertModel")
    _one_error_line(
        *lm_eval(capsys, llama_dir, text_file, "--index", index_dir, "--corpus", other_corpus),
        "built from another corpus",
    )
    _one_error_line(*lm_eval(capsys, llama_dir, tmp_path / "missing.txt"), "no such text file")
    _one_error_line(
        *lm_eval(capsys, llama_dir, text_file, "--mode", "replug"),
        "needs --index INDEX or --corpus",
    )
    _one_error_line(
        *lm_eval(capsys, llama_dir, text_file, "--gguf-file", "model.gguf"),
        "no such GGUF file",
    )
    _one_error_line(
        *lm_eval(
            capsys,
            llama_dir,
            text_file,
            "--corpus",
            corpus,
            "--exclude-article",
            "Nowhere",
        ),
        "no article titled 'Nowhere'",
    )
    _one_error_line(*lm_eval(capsys, llama_dir, text_file, "--lm", llama_dir), "give the LM once")
    _one_error_line(*lm_eval(capsys, tmp_path / "no-lm", text_file), "no such LM directory")
    _one_error_line(
        *lm_eval(capsys, llama_dir, text_file, "--corpus", corpus, "--retriever", "dense"),
        "needs an index directory",
    )
    bert_lm = tmp_path / "bert-no-arch"
    bert_lm.mkdir()
    (bert_lm / "config.json").write_text(json.dumps({"model_type": "bert"}), encoding="utf-8")
    _one_error_line(*lm_eval(capsys, bert_lm, text_file), "bert is not a causal LM")


def test_causal_config_rule():
    from ralm.models.names import is_causal_config

    assert is_causal_config({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    assert is_causal_config({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    assert is_causal_config({"model_type": "qwen2"})  # no architectures: by model type
    assert is_causal_config({"model_type": "bert", "is_decoder": True, "architectures": ["BertLMHeadModel"]})
    assert not is_causal_config({"model_type": "bert", "architectures": ["BertForMaskedLM"]})
    assert not is_causal_config({"model_type": "bert", "architectures": ["BertLMHeadModel"]})  # not a decoder
    assert not is_causal_config({"model_type": "t5", "is_encoder_decoder": True})
    assert not is_causal_config({"model_type": "gpt2", "architectures": ["GPT2ForSequenceClassification"]})
