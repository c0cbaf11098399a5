import json

import numpy as np
import pytest
import torch

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.retrieval.encoders import DualEncoder, EncoderConfig
from ralm.retrieval.training.ict import ict_loss, ict_pair


def test_ict_pair_docstring_example():
    assert ict_pair("A b. C d. E f.", 1, True) == ("C d.", "A b. E f.")
    assert ict_pair("A b. C d. E f.", 1, False) == ("C d.", "A b. C d. E f.")
    assert ict_pair("A b. C d. E f.", 0, True) == ("A b.", "C d. E f.")
    assert ict_pair("A b. C d. E f.", 2, True) == ("E f.", "A b. C d.")


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory, tiny_dir):
    d = tmp_path_factory.mktemp("ict")
    rng = np.random.default_rng(0)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "oslo",
        "norway",
        "king",
        "queen",
        "river",
        "mountain",
        "snow",
    ]
    lines = []
    for i in range(60):
        sents = [" ".join(rng.choice(words, size=6)).capitalize() + "." for _ in range(3)]
        lines.append(json.dumps({"title": f"Doc {i}", "text": " ".join(sents)}))
    (d / "docs.jsonl").write_text("\n".join(lines) + "\n")
    cfg = BuildConfig(chunk_size=64, tokenizer=str(tiny_dir))
    return build_docstore([d / "docs.jsonl"], d / "store", cfg, progress=False, log=lambda m: None)


def test_ict_loss_decreases_on_a_fixed_batch(tiny_dir):
    torch.manual_seed(0)
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(pooling="cls", proj_dim=32))
    batch = [
        (f"query about {w} number {i}", f"T{i}", f"a document that talks about {w} and more {i}")
        for i, w in enumerate(
            ["oslo", "bergen", "albedo", "lincoln", "aristotle", "alabama", "anarchism", "autism"]
        )
    ]
    opt = torch.optim.AdamW(enc.parameters(), lr=5e-4)
    enc.eval()  # no dropout: the same batch gives the same loss, so the trend is the model's
    losses = []
    for _ in range(30):
        loss, _ = ict_loss(enc, batch, None, torch.device("cpu"))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(enc.parameters(), 1.0)  # as the training loop does
        opt.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(np.log(8), abs=0.1)  # chance level: 8 equally likely documents
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    assert losses[-1] < 0.7 * losses[0]


def _run(capsys, *argv):
    from ralm.cli import main

    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_ralm_ict_is_retriever_train_ict(capsys, tiny_store, tiny_dir, tmp_path):
    """`ralm ict` runs the one retriever training loop: the same metrics, results and encoder as
    `ralm retriever train ict` given the flags it maps to (lr, held-out count from the fraction)."""
    common = [
        "--steps",
        "4",
        "--batch-size",
        "8",
        "--eval-every",
        "2",
        "--seed",
        "3",
        "--encoder",
        tiny_dir,
        "--pooling",
        "mean",
        "--quiet",
    ]
    code, out, err = _run(
        capsys,
        "ict",
        tiny_store.root,
        "--out",
        tmp_path / "a",
        "--lr",
        "5e-4",
        "--heldout-frac",
        "0.2",
        *common,
    )
    assert code == 0, err
    code, out2, err = _run(
        capsys,
        "retriever",
        "train",
        "ict",
        tiny_store.root,
        "--out",
        tmp_path / "b",
        "--lr",
        "5e-4",
        "--heldout",
        "12",
        "--similarity",
        "dot",
        *common,
    )
    assert code == 0, err
    a = json.loads(out.strip().splitlines()[-1])
    b = json.loads(out2.strip().splitlines()[-1])
    assert {k: v for k, v in a.items() if k not in ("run", "encoder")} == {
        k: v for k, v in b.items() if k not in ("run", "encoder")
    }
    ra = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    rb = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    strip = ("seconds", "elapsed_seconds", "time", "steps_per_second", "examples_per_second")
    assert [{k: v for k, v in r.items() if k not in strip} for r in ra] == [
        {k: v for k, v in r.items() if k not in strip} for r in rb
    ]
    assert [r["step"] for r in ra if "dev_heldout_recall@1" in r] == [
        0,
        2,
        4,
    ]  # before training, then every 2
    q = ["alpha beta gamma"]
    np.testing.assert_allclose(
        DualEncoder.from_pretrained(tmp_path / "a" / "encoder").encode_queries(q),
        DualEncoder.from_pretrained(tmp_path / "b" / "encoder").encode_queries(q),
    )
    cfg = json.loads((tmp_path / "a" / "train_config.json").read_text())["config"]
    assert cfg["lr"] == 5e-4 and cfg["heldout"] == 12 and cfg["recipe"] == "ict" and cfg["remove_prob"] == 0.9


def test_ralm_ict_refuses_bad_values_in_one_line(capsys, tiny_store, tmp_path):
    code, _, err = _run(capsys, "ict", tiny_store.root, "--out", tmp_path / "r", "--heldout-frac", "1.5")
    assert code == 2 and err.strip() == "ralm: error: --heldout-frac 1.5: must be between 0 and 1"
    code, _, err = _run(capsys, "ict", tmp_path / "nowhere", "--out", tmp_path / "r")
    assert code == 2 and "no DocStore here" in err and not (tmp_path / "r").exists()
