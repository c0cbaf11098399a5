"""`ralm run verify`: an intact run is ok; a truncated checkpoint file, a changed index and a bad
metrics line are named; a torn last metrics line is a note."""

from __future__ import annotations

import pytest

from ralm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def _verify(capsys, run):
    code = main(["run", "verify", str(run)])
    cap = capsys.readouterr()
    return code, cap.out.splitlines(), cap.err.strip().splitlines()


def test_run_verify(tiny_cfg, tmp_path, capsys):
    from ralm.realm.training.trainer import pretrain

    run = pretrain(tiny_cfg(steps=2, checkpoint_every=1, refresh_every=1, keep_checkpoints=2), progress=False)
    code, out, _ = _verify(capsys, run)
    assert code == 0 and out[-1].startswith(f"ok: {run}: ")
    # a torn last metrics line (a crash mid-write) is a note, not a problem
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 3, "lo')
    code, out, _ = _verify(capsys, run)
    assert code == 0 and any("line" in x and "incomplete" in x for x in out if x.startswith("note:"))
    # a truncated model file in the newest checkpoint and a changed index version
    ckpt = sorted((run / "checkpoints").glob("step-*"))[-1]
    model = ckpt / "model.safetensors"
    size = model.stat().st_size
    with open(model, "r+b") as f:
        f.truncate(size - 100)
    faiss_file = sorted((run / "index").glob("v*"))[0] / "index.faiss"
    raw = bytearray(faiss_file.read_bytes())
    raw[-10] ^= 0xFF
    faiss_file.write_bytes(bytes(raw))
    code, out, err = _verify(capsys, run)
    assert code == 2
    assert f"{model}: {size - 100} bytes, expected {size}" in out
    assert any(str(faiss_file) in x and "checksum" in x for x in out)
    # the checkpoint that holds that index version has a hard-linked copy: damaged with it
    assert sum("index.faiss" in x and "checksum" in x for x in out) == 2
    assert err[-1].startswith(f"ralm: error: {run}: 3 problem(s)")
    code, _, err = _verify(capsys, tmp_path / "nowhere")
    assert code == 2 and "no such run directory" in err[-1]
