"""`ralm rag train` on ralm.train's backbone: killed with SIGKILL mid-run, the same command resumes from
its newest checkpoint and ends with the weights, metrics and loss an uninterrupted run gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rag_ref import sigkill_at_checkpoint

from ralm.cli import main

QUESTIONS = [
    {"question": "What is the capital of Norway ?", "answer": ["Oslo"]},
    {"question": "Where was Abraham Lincoln born ?", "answer": ["Kentucky"]},
    {"question": "Who taught Aristotle ?", "answer": ["Plato"]},
]
PASSAGES = ["Oslo is the capital of Norway .", "Lincoln was born in Kentucky .", "Plato taught Aristotle ."]
STEPS = 600  # 3 questions, batch 1, 200 epochs: long enough that the kill lands mid-run


@pytest.fixture
def data(tmp_path):
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps(x) + "\n" for x in QUESTIONS), encoding="utf-8")
    r = tmp_path / "q.retrieved.jsonl"  # `ralm rag retrieve`'s format: one passage per question
    r.write_text(
        "".join(
            json.dumps(
                {
                    "id": str(i),
                    "question": x["question"],
                    "passages": [{"id": i, "score": 1.0, "title": "", "text": PASSAGES[i]}],
                }
            )
            + "\n"
            for i, x in enumerate(QUESTIONS)
        ),
        encoding="utf-8",
    )
    return q, r


def _argv(chat_lm_dir, data, out: Path) -> list[str]:
    q, r = data
    return [
        "rag",
        "train",
        str(q),
        "--lm",
        str(chat_lm_dir),
        "--retrieved",
        str(r),
        "-k",
        "1",
        "--epochs",
        "200",
        "--batch-size",
        "1",
        "--lora-r",
        "4",
        "--save-every",
        "5",
        "--no-progress",
        "--device",
        "cpu",
        "--autocast",
        "off",
        "--out",
        str(out),
    ]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run / "model" / "model.safetensors"))


def test_kill_9_then_rerun_gives_the_uninterrupted_weights(chat_lm_dir, data, tmp_path, capsys, one_thread):
    assert main(_argv(chat_lm_dir, data, tmp_path / "whole")) == 0
    assert not (tmp_path / "whole" / "checkpoints").exists()  # removed once the model is saved
    capsys.readouterr()
    cut = tmp_path / "cut"
    sigkill_at_checkpoint(_argv(chat_lm_dir, data, cut), cut)
    assert not (cut / "train.json").exists() and not (cut / "model").exists()  # stopped mid-run
    assert main(_argv(chat_lm_dir, data, cut)) == 0
    err = capsys.readouterr().err
    assert "resuming at step" in err
    a, b = _weights(tmp_path / "whole"), _weights(cut)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows = [
        [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        for d in (tmp_path / "whole", cut)
    ]
    assert [r["step"] for r in rows[1]] == list(range(1, STEPS + 1))
    assert [(r["loss"], r["tokens"]) for r in rows[0]] == [(r["loss"], r["tokens"]) for r in rows[1]]
    stats = [json.loads((d / "train.json").read_text())["stats"] for d in (tmp_path / "whole", cut)]
    assert (
        stats[0]["steps"] == stats[1]["steps"] == STEPS and stats[0]["final_loss"] == stats[1]["final_loss"]
    )


def test_a_run_with_other_settings_is_refused_in_one_line(chat_lm_dir, data, tmp_path, capsys):
    from dataclasses import asdict

    from ralm.rag.finetune import GeneratorTrainConfig
    from ralm.rag.train_run import CONFIG

    out = tmp_path / "run"
    out.mkdir()  # what _argv's run would have saved, with another lr and other examples
    saved = asdict(GeneratorTrainConfig(epochs=200.0, lr=1.0, batch_size=1, lora_r=4))
    (out / CONFIG).write_text(json.dumps({"config": saved, "examples": 3, "digest": "x"}))
    code = main(_argv(chat_lm_dir, data, out))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "holds an unfinished `ralm rag train` run with other settings (lr, training examples)" in err[0]
    assert "--overwrite" in err[0]
    assert main([*_argv(chat_lm_dir, data, out), "--overwrite", "--epochs", "1"]) == 0


def test_rerunning_a_finished_run_does_nothing(chat_lm_dir, data, tmp_path, capsys):
    """The command of a finished run, run again: it says so, trains nothing and leaves every file
    as it was; --overwrite trains it again."""
    out = tmp_path / "run"
    argv = [*_argv(chat_lm_dir, data, out), "--epochs", "1"]
    assert main(argv) == 0
    files = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(out.rglob("*")) if p.is_file()}
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "finished already" in err and "--overwrite" in err
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(out.rglob("*")) if p.is_file()} == files
    assert main([*argv, "--overwrite"]) == 0
    assert (out / "train.json").stat().st_mtime_ns > files[out / "train.json"][0]
