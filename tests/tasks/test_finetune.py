"""End to end: `ralm finetune` on every task with a tiny random BERT, with and without retrieval."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ralm.cli import main
from ralm.tasks.finetune import FinetuneConfig, finetune

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(device="cpu", autocast="off", progress=False, max_length=48, doc_length=32, eval_batch_size=8)


def cfg(task, data, out, model, **kw):
    base = dict(task=task, data=str(data), out=str(out), model=str(model), max_steps=4, batch_size=4, **SMALL)
    base.update(kw)
    return FinetuneConfig(**base)


@pytest.mark.parametrize(
    ("task", "sub", "metric", "head"),
    [
        ("classify", "classify", "macro_f1", "AutoModelForSequenceClassification"),
        ("ner", "ner", "f1", "AutoModelForTokenClassification"),
        ("pos", "pos", "accuracy", "AutoModelForTokenClassification"),
        ("extractive-qa", "qa", "f1", "AutoModelForQuestionAnswering"),
    ],
)
@pytest.mark.parametrize("retrieval", [False, True])
def test_finetune_every_task_saves_an_auto_model(
    task, sub, metric, head, retrieval, task_data, fact_store, tiny_dir, tmp_path
):
    import transformers

    kw = dict(retrieval=True, index=str(fact_store / "index"), k=3) if retrieval else {}
    res = finetune(
        cfg(task, task_data / sub, tmp_path / "out", tiny_dir, seeds=[1, 2], **kw), log=lambda m: None
    )
    out = tmp_path / "out"
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(res))
    assert [r["seed"] for r in res["seeds"]] == [1, 2]
    assert res["retrieval"] is retrieval and res["primary"] == metric
    s = res["summary"]["test"][metric]
    assert s["n"] == 2 and 0.0 <= s["mean"] <= 100.0
    assert s["mean"] == pytest.approx(np.mean([r["test"][metric] for r in res["seeds"]]))
    assert s["std"] == pytest.approx(np.std([r["test"][metric] for r in res["seeds"]], ddof=1))
    for seed in (1, 2):
        rows = [json.loads(x) for x in (out / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]
        model = getattr(transformers, head).from_pretrained(out / f"seed-{seed}" / "model")
        if res["labels"] is not None:
            assert model.config.id2label == dict(enumerate(res["labels"]))
    assert "| test |" in (out / "results.md").read_text()
    assert not list(tmp_path.glob(".out.partial-*"))


def test_saved_model_gives_the_evaluated_predictions(task_data, tiny_dir, tmp_path):
    """The directory a seed saves is the best-dev model it evaluated: reload it with the HF Auto class
    and its test predictions equal predictions.jsonl."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    finetune(
        cfg("pos", task_data / "pos", tmp_path / "o", tiny_dir, max_steps=6, lr=1e-3), log=lambda m: None
    )
    d = tmp_path / "o" / "seed-42" / "model"
    model = AutoModelForTokenClassification.from_pretrained(d).eval()
    tok = AutoTokenizer.from_pretrained(d)
    preds = {
        json.loads(x)["id"]: json.loads(x)["prediction"]
        for x in (tmp_path / "o" / "seed-42" / "predictions.jsonl").read_text().splitlines()
    }
    from ralm.tasks.datasets import load_task_data

    test = load_task_data(task_data / "pos", "pos").splits["test"]
    for ex in test:
        enc = tok(ex.tokens, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            ids = model(**enc).logits[0].argmax(-1).tolist()
        first = {}
        for t, w in enumerate(enc.word_ids(0)):
            if w is not None and w not in first:
                first[w] = model.config.id2label[ids[t]]
        assert [first[i] for i in range(len(ex.tokens))] == preds[ex.id]


def test_open_qa_end_to_end_reports_em_and_recall(task_data, fact_store, tiny_dir, tmp_path):
    res = finetune(
        cfg("open-qa", task_data / "openqa", tmp_path / "o", tiny_dir, index=str(fact_store / "index"), k=3),
        log=lambda m: None,
    )
    test = res["seeds"][0]["test"]
    assert set(test) == {"em", "f1", "recall@1", "recall@3"}
    assert res["retrieval"] is True
    assert test["recall@1"] <= test["recall@3"]
    assert (tmp_path / "o" / "seed-42" / "retriever" / "ralm_encoder.json").is_file()  # tuned query tower


def test_open_qa_with_bm25_is_frozen_and_recall_matches_search(task_data, fact_store, tiny_dir, tmp_path):
    """BM25 rows: recall@k equals what `has_answer` says of BM25's own top-k for the same questions."""
    from ralm.answers import has_answer
    from ralm.retrieval.retriever import Retriever
    from ralm.tasks.datasets import load_task_data

    res = finetune(
        cfg(
            "open-qa",
            task_data / "openqa",
            tmp_path / "o",
            tiny_dir,
            index=str(fact_store / "index"),
            k=3,
            retriever="bm25",
            max_steps=2,
        ),
        log=lambda m: None,
    )
    opened = Retriever.load(fact_store / "index", kind="bm25")
    ds, bm25 = opened.store, opened.backend
    test = load_task_data(task_data / "openqa", "open-qa").splits["test"]
    top = bm25.search_text([ex.question for ex in test], 3).ids
    want = np.mean(
        [
            any(has_answer(ds[int(i)]["text"], ex.answers) for i in row)
            for ex, row in zip(test, top, strict=False)
        ]
    )
    assert res["seeds"][0]["test"]["recall@3"] == pytest.approx(100.0 * want)
    assert not (tmp_path / "o" / "seed-42" / "retriever").exists()


def test_table_puts_runs_side_by_side(task_data, fact_store, tiny_dir, tmp_path, capsys):
    for name, ret in (("a", False), ("a", True), ("b", False)):
        kw = dict(retrieval=True, index=str(fact_store / "index"), k=2) if ret else {}
        finetune(
            cfg(
                "classify",
                task_data / "classify",
                tmp_path / f"{name}{ret}",
                tiny_dir,
                name=name,
                max_steps=1,
                **kw,
            ),
            log=lambda m: None,
        )
    assert main(["table", str(tmp_path / "aFalse"), str(tmp_path / "aTrue"), str(tmp_path / "bFalse")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| model | classify macro_f1 | classify macro_f1 +ret |"
    assert lines[2].startswith("| a | ") and lines[3].startswith("| b | ") and lines[3].endswith("| – |")
    assert len(lines) == 4


def test_bad_inputs_are_one_line_and_leave_nothing(task_data, fact_store, tiny_dir, tmp_path, capsys):
    out = tmp_path / "o"
    base = [
        "finetune",
        "classify",
        str(task_data / "classify"),
        "--out",
        str(out),
        "--max-steps",
        "1",
        "--no-progress",
    ]
    assert main([*base, "--model", str(tmp_path)]) == 2  # an empty directory is not a model
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ralm: error: ") and str(tmp_path) in err[0]
    assert (
        main(["finetune", "open-qa", str(task_data / "openqa"), "--out", str(out), "--model", str(tiny_dir)])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--index" in err[0]
    (tmp_path / "notamodel").mkdir()
    (tmp_path / "notamodel" / "config.json").write_text("{}")
    assert main([*base, "--model", str(tmp_path / "notamodel")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".o.partial-*"))


def test_bad_data_is_one_line_naming_the_file(tiny_dir, tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / "train.conll").write_text("Oslo\tB-LOC\nis\tO\n\nBergen\tB-LOC\tX\n", encoding="utf-8")
    (d / "test.conll").write_text("Oslo\tB-LOC\n", encoding="utf-8")
    out = tmp_path / "o"
    args = ["finetune", "ner", str(d), "--out", str(out), "--model", str(tiny_dir), "--max-steps", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.conll:4" in err[0]
    (d / "train.conll").write_text("Oslo\tB-LOC\nis\tO\n", encoding="utf-8")
    (d / "test.conll").write_text("Ola\tB-PER\n", encoding="utf-8")
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "B-PER" in err[0] and "test.conll" in err[0]
    (d / "train.json").write_text(
        json.dumps(
            {
                "data": [
                    {
                        "paragraphs": [
                            {
                                "context": "abc",
                                "qas": [
                                    {
                                        "id": "q",
                                        "question": "?",
                                        "answers": [{"text": "zz", "answer_start": 0}],
                                    }
                                ],
                            }
                        ]
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    assert (
        main(
            ["finetune", "extractive-qa", str(d / "train.json"), "--out", str(out), "--model", str(tiny_dir)]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.json" in err[0] and "q" in err[0]
    assert not out.exists() and not list(tmp_path.glob(".o.partial-*"))


@pytest.mark.parametrize(
    ("task", "sub", "metric", "steps"),
    [("classify", "classify", "accuracy", 40), ("ner", "ner", "f1", 60), ("pos", "pos", "accuracy", 60)],
)
def test_model_learns_the_training_set(task, sub, metric, steps, task_data, tiny_dir, tmp_path):
    """Enough steps at a high rate: a tiny model fits the training set (dev/test are the same)."""
    res = finetune(
        cfg(task, task_data / sub, tmp_path / "o", tiny_dir, max_steps=steps, lr=2e-3, warmup_ratio=0.0),
        log=lambda m: None,
    )
    assert res["seeds"][0]["test"][metric] == 100.0


def test_early_stopping_and_best_state(task_data, tiny_dir, tmp_path):
    """lr 0: the dev score never beats the first evaluation, so patience 1 stops at the second."""
    res = finetune(
        cfg(
            "classify",
            task_data / "classify",
            tmp_path / "o",
            tiny_dir,
            max_steps=10,
            lr=0.0,
            eval_every=1,
            patience=1,
        ),
        log=lambda m: None,
    )
    seed = res["seeds"][0]
    assert seed["steps"] == 2 and seed["best_step"] == 1
    rows = [json.loads(x) for x in (tmp_path / "o" / "seed-42" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "dev_macro_f1" in r] == [1, 2]


def test_best_state_restores_the_best_weights():
    from ralm.tasks.trainer import BestState, Parts

    model = torch.nn.Linear(2, 2)
    parts = Parts(model, None, None, None, torch.device("cpu"), None)
    best = BestState("f1")
    with torch.no_grad():
        for step, (score, fill) in enumerate([(50.0, 1.0), (60.0, 2.0), (55.0, 3.0), (60.0, 4.0)], start=1):
            model.weight.fill_(fill)
            best.offer({"f1": score}, step, parts)
    assert (best.score, best.step, best.stale) == (60.0, 2, 2)
    best.restore(parts)
    assert torch.equal(model.weight, torch.full((2, 2), 2.0))


def test_split_files_without_a_data_directory(task_data, tiny_dir, tmp_path, capsys):
    d = task_data / "classify"
    args = [
        "finetune",
        "classify",
        "--train",
        str(d / "stsa.binary.train"),
        "--test",
        str(d / "stsa.binary.test"),
    ]
    args += ["--out", str(tmp_path / "o"), "--model", str(tiny_dir), "--max-steps", "1", "--no-progress"]
    assert main(args) == 0
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert res["dataset"] == "stsa.binary.train" and set(res["summary"]) == {"dev", "test"}
    assert main(["finetune", "classify", "--out", str(tmp_path / "p")]) == 2
    assert "no data" in capsys.readouterr().err
