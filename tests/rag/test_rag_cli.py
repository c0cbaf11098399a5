"""`ralm rag` end to end on a tiny chat LM and a small corpus: retrieve, eval, train, lsr, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ralm.cli import main
from testkit import articles_store, tiny_index, write_jsonl
from testkit import run_ralm as run

ARTICLES = [
    ("Oslo", "Oslo is the capital of Norway . The city lies at the end of the fjord ."),
    ("Bergen", "Bergen is a city on the west coast of Norway . It rains a lot in Bergen ."),
    ("Lincoln", "Abraham Lincoln was the 16th president of the United States . He was born in Kentucky ."),
    ("Aristotle", "Aristotle was a Greek philosopher and a student of Plato ."),
]
QUESTIONS = [
    {"question": "What is the capital of Norway ?", "answer": ["Oslo"]},
    {"question": "Where was Abraham Lincoln born ?", "answer": ["Kentucky"]},
    {"question": "Who taught Aristotle ?", "answer": ["Plato"]},
]
LM = ("--device", "cpu", "--autocast", "off")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return articles_store(ARTICLES, tmp_path_factory.mktemp("rag-corpus"))


@pytest.fixture(scope="module")
def index(tmp_path_factory, store, tiny_dir):
    return tiny_index(store, tmp_path_factory.mktemp("rag-index") / "index", tiny_dir)


@pytest.fixture(scope="module")
def questions(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("rag-q") / "test.jsonl", QUESTIONS)


def _read_jsonl(p):
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines()]


def test_eval_rows_predictions_and_results(capsys, chat_lm_dir, chat_lm, store, questions, tmp_path):
    from ralm.corpus.docstore import DocStore
    from ralm.rag.generate import answer_text, greedy
    from ralm.rag.prompt import PromptBuilder, passage_text
    from ralm.retrieval.bm25 import BM25Searcher

    out = tmp_path / "rag"
    code, stdout, err = run(
        capsys,
        "rag",
        "eval",
        questions,
        "--lm",
        chat_lm_dir,
        "--corpus",
        store,
        "--mode",
        "closed-book",
        "rag",
        "replug",
        "-k",
        "1",
        "2",
        "--max-new-tokens",
        "5",
        "--no-progress",
        "--out",
        out,
        *LM,
    )
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        "closed-book",
        "rag-k1",
        "rag-k2",
        "replug-k1",
        "replug-k2",
    ]
    assert "| rag-k2 |" in stdout
    ds = DocStore(store)
    bm25 = BM25Searcher.build(ds, lang="en")
    top = bm25.search_text([q["question"] for q in QUESTIONS], 2)
    preds = _read_jsonl(out / "rag-k2" / "predictions.jsonl")
    want = [
        [int(i) for i, s in zip(r, sc, strict=True) if i >= 0 and s > 0]
        for r, sc in zip(top.ids, top.scores, strict=True)
    ]
    assert [p["retrieved"] for p in preds] == want  # BM25 hits scoring 0 share no word: left out
    b = PromptBuilder(chat_lm.tokenizer, 512 - 5)
    for p, row in zip(preds, want, strict=True):
        rows = [ds.get(i) for i in row]
        prompt = b.ids(p["question"], [passage_text(r["title"], r["text"]) for r in rows])
        assert p["prompt"] == chat_lm.tokenizer.decode(prompt)
        assert p["prediction"] == answer_text(
            chat_lm.tokenizer, greedy(chat_lm, [prompt], max_new_tokens=5)[0]
        )
    res = json.loads((out / "rag-k2" / "results.json").read_text())
    assert res["task"] == "rag-qa" and res["mode"] == "rag" and res["retrieval"] is True
    hits = [any(p["answer_in_passages"]) for p in preds]
    assert res["metrics"]["recall@1"] == pytest.approx(
        100 * np.mean([p["answer_in_passages"][0] for p in preds])
    )
    assert res["metrics"]["em"] == pytest.approx(100 * np.mean([p["em"] for p in preds]))
    assert "summary" not in res and "seeds" not in res  # one run: no invented std or n
    assert len(hits) == 3
    closed = json.loads((out / "closed-book" / "results.json").read_text())
    assert closed["retrieval"] is False
    code, table, err = run(capsys, "table", out / "closed-book", out / "rag-k2")
    assert code == 0 and "rag-k2" in table
    em, f1 = res["metrics"]["em"], res["metrics"]["f1"]
    assert f"| {res['name']} | – | {em:.2f} | – | {f1:.2f} |" in table  # means as they are, no "± 0.00"


def test_a_retrieval_file_gives_the_same_answers(capsys, chat_lm_dir, store, questions, tmp_path):
    f = tmp_path / "test.retrieved.jsonl"
    code, _, err = run(capsys, "rag", "retrieve", questions, "--corpus", store, "-k", "3", "--out", f)
    assert code == 0, err
    assert [len(json.loads(x)["passages"]) for x in f.read_text().splitlines()] == [
        2,
        1,
        1,
    ]  # BM25 hits > 0 only
    args = ("--lm", chat_lm_dir, "--mode", "rag", "-k", "2", "--max-new-tokens", "4", "--no-progress", *LM)
    assert run(capsys, "rag", "eval", questions, "--corpus", store, "--out", tmp_path / "a", *args)[0] == 0
    assert run(capsys, "rag", "eval", questions, "--retrieved", f, "--out", tmp_path / "b", *args)[0] == 0
    a = _read_jsonl(tmp_path / "a" / "predictions.jsonl")
    b = _read_jsonl(tmp_path / "b" / "predictions.jsonl")
    assert [(x["retrieved"], x["prediction"]) for x in a] == [(x["retrieved"], x["prediction"]) for x in b]


def test_cut_prompts_are_said_once(capsys, chat_lm_dir, store, questions, tmp_path):
    code, _, err = run(
        capsys,
        "rag",
        "eval",
        questions,
        "--lm",
        chat_lm_dir,
        "--corpus",
        store,
        "-k",
        "3",
        "--max-prompt-tokens",
        "120",
        "--max-new-tokens",
        "2",
        "--no-progress",
        "--out",
        tmp_path / "o",
        *LM,
    )
    assert code == 0, err
    notes = [line for line in err if "cut to fit" in line]
    assert notes == ["note: 3 prompts had their passages cut to fit 120 tokens"]


def test_bad_input_is_one_line(capsys, chat_lm_dir, tiny_dir, store, questions, tmp_path):
    noans = tmp_path / "noans.jsonl"
    noans.write_text(json.dumps({"question": "Who?", "answer": []}) + "\n")
    code, _, err = run(
        capsys, "rag", "eval", noans, "--lm", chat_lm_dir, "--corpus", store, "--out", tmp_path / "x", *LM
    )
    assert code == 2 and len(err) == 1 and f"{noans}: no question has an answer" in err[0]
    code, _, err = run(
        capsys,
        "rag",
        "eval",
        questions,
        "--lm",
        tiny_dir,
        "--mode",
        "closed-book",
        "--out",
        tmp_path / "y",
        *LM,
    )
    assert code == 2 and len(err) == 1 and str(tiny_dir) in err[0]
    code, _, err = run(
        capsys,
        "rag",
        "eval",
        questions,
        "--lm",
        chat_lm_dir,
        "--mode",
        "oracle",
        "--out",
        tmp_path / "z",
        *LM,
    )
    assert code == 2 and err == [
        "ralm: error: --mode oracle needs gold passages: a SQuAD file (its contexts) has them, "
        "or retrieved passages of which one holds the answer"
    ]
    code, _, err = run(
        capsys, "rag", "eval", questions, "--lm", chat_lm_dir, "--mode", "rag", "--out", tmp_path / "w", *LM
    )
    assert code == 2 and err == [
        "ralm: error: --mode rag needs passages: pass --index, --corpus or --retrieved"
    ]
    assert not (tmp_path / "w").exists()


def test_oracle_uses_the_chunk_of_a_squad_context(capsys, chat_lm_dir, store, tmp_path):
    from ralm.corpus.docstore import DocStore

    ctx = ARTICLES[3][1]
    squad = {
        "data": [
            {
                "title": "Aristotle",
                "paragraphs": [
                    {
                        "context": ctx,
                        "qas": [
                            {
                                "id": "q1",
                                "question": "Who taught Aristotle ?",
                                "answers": [{"text": "Plato", "answer_start": ctx.index("Plato")}],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    f = tmp_path / "squad.json"
    f.write_text(json.dumps(squad))
    code, _, err = run(
        capsys,
        "rag",
        "eval",
        f,
        "--lm",
        chat_lm_dir,
        "--corpus",
        store,
        "--mode",
        "oracle",
        "--max-new-tokens",
        "2",
        "--no-progress",
        "--out",
        tmp_path / "o",
        *LM,
    )
    assert code == 0, err
    ds = DocStore(store)
    chunk = next(ds.get(i) for i in range(len(ds)) if "Plato" in ds.get(i)["text"])
    pred = _read_jsonl(tmp_path / "o" / "predictions.jsonl")[0]
    assert f"Passage 1: Aristotle\n{chunk['text']}" in pred["prompt"]


def test_train_saves_a_generator_that_eval_loads(capsys, chat_lm_dir, store, questions, tmp_path):
    out = tmp_path / "gen"
    code, stdout, err = run(
        capsys,
        "rag",
        "train",
        questions,
        "--lm",
        chat_lm_dir,
        "--corpus",
        store,
        "-k",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "2",
        "--no-progress",
        "--out",
        out,
        *LM,
    )
    assert code == 0, err
    stats = json.loads((out / "train.json").read_text())
    assert stats["stats"]["steps"] == 4 and stats["stats"]["examples"] == 3 and stats["k"] == 2
    assert (out / "model" / "model.safetensors").is_file()
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "model" / "README.md")
    assert card.data.pipeline_tag == "text-generation" and card.data.library_name == "transformers"
    assert "| fine-tuning | full, 4 steps, lr 5e-05, batch 2 |" in card.text
    code, _, err = run(
        capsys,
        "rag",
        "eval",
        questions,
        "--lm",
        out / "model",
        "--mode",
        "closed-book",
        "--max-new-tokens",
        "2",
        "--no-progress",
        "--out",
        tmp_path / "e",
        *LM,
    )
    assert code == 0, err


def test_lsr_supervised_by_a_fine_tuned_generator_lowers_the_kl(
    capsys, chat_lm_dir, index, questions, tmp_path
):
    """`rag train` makes the supervisor; `rag lsr` with it writes an index whose query tower has a lower
    KL(P_R || Q) on the training questions (same candidates, same LM preferences), the doc tower unchanged."""
    import torch

    from ralm.frozen.lm import load_frozen_lm
    from ralm.rag.data import read_questions
    from ralm.rag.lsr import lm_preferences, lsr_loss
    from ralm.rag.prompt import PromptBuilder
    from ralm.rag.retrieved import retrieve
    from ralm.retrieval.index.directory import verify_index_dir
    from ralm.retrieval.retriever import Retriever

    gen = tmp_path / "gen"
    code, _, err = run(
        capsys,
        "rag",
        "train",
        questions,
        "--lm",
        chat_lm_dir,
        "--index",
        index,
        "--retriever",
        "dense",
        "-k",
        "1",
        "--epochs",
        "2",
        "--batch-size",
        "3",
        "--no-progress",
        "--out",
        gen,
        *LM,
    )
    assert code == 0, err
    out = tmp_path / "lsr"
    code, stdout, err = run(
        capsys,
        "rag",
        "lsr",
        questions,
        "--lm",
        gen / "model",
        "--index",
        index,
        "-n",
        "3",
        "--epochs",
        "2",
        "--lr",
        "1e-3",
        "--batch-size",
        "2",
        "--no-progress",
        "--out",
        out,
        *LM,
    )
    assert code == 0, err
    assert verify_index_dir(out / "index").problems == []
    opened = Retriever.load(index, "dense")
    store, before = opened.store, opened.backend
    after = Retriever.load(out / "index", "dense").backend
    vectors = np.load(index / "embeddings.npy")
    assert np.array_equal(vectors, np.load(out / "index" / "embeddings.npy"))
    for (n, p), (_, q) in zip(
        before.encoder.doc_tower.named_parameters(), after.encoder.doc_tower.named_parameters(), strict=True
    ):
        assert torch.equal(p, q), n  # the doc tower did not move

    qs = read_questions(questions)
    ps = retrieve(qs, Retriever(store, before, "dense"), 3)
    lm = load_frozen_lm(gen / "model", device="cpu", autocast="off")
    logp = torch.as_tensor(lm_preferences(lm, PromptBuilder(lm.tokenizer, 512), qs, ps))
    cands = np.asarray([[p.id for p in row] for row in ps])
    docs = torch.as_tensor(vectors[cands.reshape(-1)], dtype=torch.float32).reshape(*cands.shape, -1)

    def kl(encoder) -> float:
        with torch.no_grad():
            q = encoder.query_tower.eval()(**encoder.tokenize_queries([x.question for x in qs]))
            return float(lsr_loss(encoder.scale_scores(torch.einsum("bd,bnd->bn", q, docs)), logp))

    assert kl(after.encoder) < kl(before.encoder) - 1e-4
    info = json.loads((out / "lsr.json").read_text())
    assert info["questions"] == 3 and info["stats"]["steps"] == 4


def test_oracle_without_contexts_uses_the_answer_bearing_passage(
    capsys, chat_lm_dir, store, questions, tmp_path
):
    from ralm.corpus.docstore import DocStore

    code, _, err = run(
        capsys,
        "rag",
        "eval",
        questions,
        "--lm",
        chat_lm_dir,
        "--corpus",
        store,
        "--mode",
        "oracle",
        "--max-new-tokens",
        "2",
        "--no-progress",
        "--out",
        tmp_path / "o",
        *LM,
    )
    assert code == 0, err
    note = "note: oracle: 3 questions without a gold passage use their best-ranked retrieved passage that holds an answer"
    assert note in err
    ds = DocStore(store)
    preds = _read_jsonl(tmp_path / "o" / "predictions.jsonl")
    for p, (title, answer) in zip(
        preds, [("Oslo", "Oslo"), ("Lincoln", "Kentucky"), ("Aristotle", "Plato")], strict=True
    ):
        chunk = next(
            ds.get(i) for i in range(len(ds)) if ds.get(i)["title"] == title and answer in ds.get(i)["text"]
        )
        assert f"Passage 1: {title}\n{chunk['text']}" in p["prompt"] and p["answer_in_passages"] == [True]


def test_lsr_killed_with_sigkill_resumes_to_the_uninterrupted_query_tower(
    capsys, chat_lm_dir, index, questions, tmp_path, one_thread
):
    """`rag lsr` on ralm.train's backbone: SIGKILL mid-training, then the same command reuses the LM
    preferences it kept, resumes from its newest checkpoint and writes the query tower (and KL
    curve) of an uninterrupted run."""
    from rag_ref import sigkill_at_checkpoint

    from ralm.retrieval.encoders import DualEncoder

    def argv(out):
        return [
            "rag",
            "lsr",
            str(questions),
            "--lm",
            str(chat_lm_dir),
            "--index",
            str(index),
            "-n",
            "3",
            "--epochs",
            "60",
            "--lr",
            "1e-3",
            "--batch-size",
            "1",
            "--save-every",
            "5",
            "--no-progress",
            "--out",
            str(out),
            *LM,
        ]

    assert main(argv(tmp_path / "whole")) == 0
    capsys.readouterr()
    cut = tmp_path / "cut"
    sigkill_at_checkpoint(argv(cut), cut)
    assert not (cut / "lsr.json").exists() and not (cut / "index").exists()  # stopped mid-run
    assert main(argv(cut)) == 0
    err = capsys.readouterr().err
    assert "the LM preferences of a stopped run, reused" in err and "resuming at step" in err
    a = DualEncoder.from_pretrained(tmp_path / "whole" / "index" / "encoder")
    b = DualEncoder.from_pretrained(cut / "index" / "encoder")
    assert a.fingerprint("query") == b.fingerprint("query") and a.fingerprint("doc") == b.fingerprint("doc")
    rows = [
        [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        for d in (tmp_path / "whole", cut)
    ]
    assert [r["loss"] for r in rows[0]] == [r["loss"] for r in rows[1]] and len(rows[1]) == 180
    assert not (cut / "checkpoints").exists()
