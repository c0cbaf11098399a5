"""`ralm surealm datastore|train|evaluate|generate` end to end on the tiny model, and bad input (exit 2)."""

from __future__ import annotations

import json

import pytest

from ralm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_whole_path(capsys, tmp_path, tiny_dir, dialogue_file):
    tiny = str(tiny_dir)
    ds = tmp_path / "ds"
    code, out, _ = _run(capsys, "surealm", "datastore", str(dialogue_file), "--out", str(ds), "--lm", tiny,
                        "--encoder", tiny, "--k", "3", "--m", "3", "--valid-frac", "0.2", "--test-frac", "0.2", "--quiet")  # fmt: skip
    assert code == 0 and f"data store: {ds}" in out
    common = ["--lm", tiny, "--k", "3", "--steps", "4", "--batch-size", "4", "--eval-every", "2", "--device", "cpu",
              "--autocast", "off", "--quiet"]  # fmt: skip
    assert _run(capsys, "surealm", "train", str(ds), "--out", str(tmp_path / "s"), *common)[0] == 0
    code, out, _ = _run(
        capsys, "surealm", "train", str(ds), "--out", str(tmp_path / "b"), "--no-retrieval", *common
    )
    assert code == 0 and "valid token ppl" in out
    code, out, _ = _run(capsys, "surealm", "evaluate", str(tmp_path / "s"), str(tmp_path / "b"), "--knnlm",
                        str(tmp_path / "b"), "--knn-k", "4", "--device", "cpu", "--json-out", str(tmp_path / "e.json"))  # fmt: skip
    assert code == 0
    rows = json.loads((tmp_path / "e.json").read_text())["rows"]
    assert [r["kind"].split(" ")[0] for r in rows] == ["surealm", "no", "kNN-LM"]
    assert len({r["tokens"] for r in rows}) == 1 and all(r["token_ppl"] > 1 for r in rows)
    code, out, _ = _run(capsys, "surealm", "generate", str(tmp_path / "s"), "i would like", "--max-new-tokens", "3",
                        "--show-retrievals", "--device", "cpu")  # fmt: skip
    assert code == 0 and out.startswith("i would like") and "query 'i':" in out and "suffix" in out


@pytest.fixture(scope="module")
def trained(tiny_store, tiny_dir, tmp_path_factory):
    from ralm.surealm.train import TrainConfig, train

    out = tmp_path_factory.mktemp("cli-run") / "m"
    cfg = TrainConfig(datastore=str(tiny_store), out=str(out), lm=str(tiny_dir), k=3, steps=1, eval_every=1,
                      batch_size=4, device="cpu", autocast="off", tensorboard=False)  # fmt: skip
    return train(cfg, progress=False)


def test_bad_input_exits_2_with_one_line(capsys, tmp_path, tiny_dir, trained, tiny_store):
    tiny = str(tiny_dir)
    empty = tmp_path / "e.jsonl"
    empty.write_text('{"text": "hi there"}\n{"text": ""}\n')
    one = tmp_path / "one.txt"
    one.write_text("hi\nyes\n\nno\nok\n")
    cases = [
        (["surealm", "datastore", str(empty), "--out", str(tmp_path / "x"), "--lm", tiny, "--encoder", tiny],
         'e.jsonl:2: empty "text"'),
        (["surealm", "datastore", str(one), "--out", str(tmp_path / "y"), "--lm", tiny, "--encoder", tiny,
          "--valid-frac", "0", "--test-frac", "0"], "no training sentence has two or more tokens"),
        (["surealm", "train", str(tiny_store), "--out", str(tmp_path / "z"), "--lm", tiny, "--k", "9"],
         "K=9 but .* kept only 3 neighbours"),
        (["surealm", "generate", str(trained), "  "], "the prompt is empty"),
        (["surealm", "generate", str(tmp_path), "hello"], "not a SUREALM model"),
        (["surealm", "datastore", "--out", str(tmp_path / "w")], "give sentence files"),
    ]  # fmt: skip
    import re

    for argv, message in cases:
        code, _, err = _run(capsys, *argv)
        assert code == 2, argv
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ralm: error:") and re.search(message, lines[0]), err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_store_built_with_another_encoder_is_refused(capsys, tmp_path, tiny_dir, trained, dialogue_file):
    """Same sentences and LM, but the encoder is a differently initialised tiny BERT."""
    import shutil

    import torch
    from transformers import BertModel

    other = tmp_path / "other"
    shutil.copytree(tiny_dir, other)
    torch.manual_seed(123)
    m = BertModel.from_pretrained(str(tiny_dir))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.01 * torch.randn_like(p))
    m.save_pretrained(other)
    ds = tmp_path / "ds2"
    code, _, _ = _run(capsys, "surealm", "datastore", str(dialogue_file), "--out", str(ds), "--lm", str(tiny_dir),
                      "--encoder", str(other), "--k", "3", "--m", "3", "--quiet")  # fmt: skip
    assert code == 0
    for argv in (["surealm", "evaluate", str(trained), "--datastore", str(ds), "--device", "cpu"],
                 ["surealm", "generate", str(trained), "hello", "--datastore", str(ds), "--device", "cpu"]):  # fmt: skip
        code, _, err = _run(capsys, *argv)
        assert (
            code == 2 and "built with another sentence encoder" in err and len(err.strip().splitlines()) == 1
        )
