"""Multi-process pre-training under torchrun (2 gloo processes on CPU) against one process.

The tiny model has no dropout here, so one process and two see the same arithmetic (up to the
order of float additions in the gradient all-reduce and different padding per rank).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def nodrop_dir(tmp_path_factory, tiny_dir):
    from transformers import BertConfig, BertModel

    d = tmp_path_factory.mktemp("nodrop") / "bert"
    shutil.copytree(tiny_dir, d)
    cfg = BertConfig.from_pretrained(str(tiny_dir))
    cfg.hidden_dropout_prob = 0.0
    cfg.attention_probs_dropout_prob = 0.0
    torch.manual_seed(0)
    BertModel(cfg, add_pooling_layer=False).save_pretrained(d)
    return d


def _args(store, reader, out, **kw):
    base = {
        "docstore": store,
        "out": out,
        "reader": reader,
        "steps": 3,
        "batch-size": 4,
        "k": 3,
        "refresh-every": 2,
        "checkpoint-every": 1,
        "heldout": 3,
        "device": "cpu",
        "autocast": "off",
        "lr-reader": 1e-3,
        "lr-retriever": 1e-3,
        "warmup-steps": 1,
    }
    base.update(kw)
    argv = ["pretrain"]
    for k, v in base.items():
        argv += [f"--{k}", str(v)]
    return argv + [
        "--set",
        "encoder_max_length=32",
        "--set",
        "reader_max_length=96",
        "--set",
        "tensorboard=false",
        "--quiet",
    ]


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("WORLD_SIZE", None)
    return env


def _torchrun(argv, nproc=2, env=None, timeout=240):
    from ralm.train.distributed import torchrun_command

    cmd = torchrun_command(nproc, argv)  # what `ralm pretrain --nproc N` runs
    return subprocess.run(cmd, capture_output=True, text=True, env=env or _env(), timeout=timeout)


def _params(run):
    from safetensors.torch import load_file

    from ralm.train.checkpoint import latest_checkpoint

    return load_file(str(latest_checkpoint(run) / "model.safetensors"))


def _losses(run):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def _close(a, b, atol=1e-4):
    """Equal up to float noise: Adam at lr 1e-3 moves a weight ~1e-3 per step, and a wrong gradient
    (e.g. not averaged over ranks) moves it by that much; summation order moves it < 1e-4."""
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=atol, msg=name)


def test_two_gloo_processes_match_one_process(realm_store, nodrop_dir, tmp_path):
    from ralm.cli import main

    one, two = tmp_path / "one", tmp_path / "two"
    assert main(_args(realm_store, nodrop_dir, one)) == 0
    res = _torchrun(_args(realm_store, nodrop_dir, two))
    assert res.returncode == 0, res.stderr[-3000:]
    la, lb = _losses(one), _losses(two)
    assert sorted(la) == sorted(lb) == [1, 2, 3]
    for s in la:
        assert la[s] == pytest.approx(lb[s], rel=1e-4)
    _close(_params(one), _params(two))
    state = json.loads((two / "checkpoints" / "step-0000003" / "state.json").read_text())
    assert state["index_version"] == 2 and state["examples_seen"] == 12  # v0, v1 after step 2, v2 at the end
    assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["step-0000002", "step-0000003"]


def test_two_gloo_processes_match_one_process_with_a_causal_reader(
    realm_store, nodrop_dir, causal_dirs, tmp_path
):
    """The causal reader under torchrun: the same losses and weights as one process (Llama has no dropout)."""
    from ralm.cli import main

    one, two = tmp_path / "one", tmp_path / "two"
    extra = ["--set", f"retriever={nodrop_dir}", "--set", "reader_max_length=200"]
    assert main(_args(realm_store, causal_dirs["llama"], one, steps=2) + extra) == 0
    res = _torchrun(_args(realm_store, causal_dirs["llama"], two, steps=2) + extra)
    assert res.returncode == 0, res.stderr[-3000:]
    la, lb = _losses(one), _losses(two)
    assert sorted(la) == sorted(lb) == [1, 2]
    for s in la:
        assert la[s] == pytest.approx(lb[s], rel=1e-4)
    _close(_params(one), _params(two))


def test_resume_on_another_number_of_processes(realm_store, nodrop_dir, tmp_path):
    from ralm.cli import main

    full, part = tmp_path / "full", tmp_path / "part"
    assert main(_args(realm_store, nodrop_dir, full)) == 0
    res = _torchrun(_args(realm_store, nodrop_dir, part) + ["--stop-after", "1"])
    assert res.returncode == 0, res.stderr[-3000:]
    # the 2-process run stopped after step 1: finish it in one process
    assert json.loads((part / "checkpoints" / "step-0000001" / "state.json").read_text())["step"] == 1
    assert main(_args(realm_store, nodrop_dir, part) + ["--resume"]) == 0
    _close(_params(full), _params(part))


def test_a_killed_rank_ends_the_job_with_a_clear_message(realm_store, nodrop_dir, tmp_path):
    env = {**_env(), "RALM_TEST_KILL_RANK_AT": "1:2"}
    res = _torchrun(_args(realm_store, nodrop_dir, tmp_path / "k", steps=5), env=env, timeout=180)
    assert res.returncode != 0
    # rank 0 either sees the broken collective or is stopped by torchrun first: one line either way
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("ralm: ") and "rank 0" in ln]
    assert len(lines) == 1, res.stderr[-3000:]
    assert "lost another process of the job" in lines[0] or "another process of the job failed" in lines[0]
    assert "[rank0]: Traceback" not in res.stderr  # (torchrun's own report of the failed child follows)
