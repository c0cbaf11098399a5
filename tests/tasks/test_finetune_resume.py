"""`ralm finetune` cut off mid-job: a rerun keeps the finished seeds, runs the rest, and gives the
results of an uninterrupted job; stale partial folders of dead jobs are removed with a note."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import ralm.tasks.finetune as F
from ralm.cli import main
from ralm.locks import holder

pytestmark = pytest.mark.usefixtures("one_thread")

# seed 2 writes a little, then the process is killed as `kill -9` would: no handler runs
KILL_AT_SEED_2 = """
import os, signal, sys
import torch
import ralm.tasks.finetune as F
torch.set_num_threads(1)
real = F.run_seed
def run_seed(cfg, spec, data, labels, seed, out):
    if seed == 2:
        (out / "metrics.jsonl").write_text('{"step": 1}\\n')
        os.kill(os.getpid(), signal.SIGKILL)
    return real(cfg, spec, data, labels, seed, out)
F.run_seed = run_seed
from ralm.cli import main
sys.exit(main(sys.argv[1:]))
"""


def argv(task_data, tiny_dir, out, *extra):
    return [
        "finetune",
        "classify",
        str(task_data / "classify"),
        "--model",
        str(tiny_dir),
        "--out",
        str(out),
        "--seeds",
        "1,2",
        "--max-steps",
        "4",
        "--batch-size",
        "4",
        "--max-length",
        "48",
        "--device",
        "cpu",
        "--autocast",
        "off",
        "--no-progress",
        *extra,
    ]


def count_seeds(monkeypatch) -> list[int]:
    """Record the seeds `finetune` runs (the real run_seed still runs them)."""
    calls: list[int] = []
    real = F.run_seed

    def run_seed(cfg, spec, data, labels, seed, out):
        calls.append(seed)
        return real(cfg, spec, data, labels, seed, out)

    monkeypatch.setattr(F, "run_seed", run_seed)
    return calls


def test_killed_job_resumes_with_the_uninterrupted_results(
    task_data, tiny_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AT_SEED_2, *argv(task_data, tiny_dir, out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    partial = tmp_path / ".out.partial"
    seed1 = partial / "seed-1" / "eval.json"
    assert seed1.is_file() and (partial / "seed-2" / "metrics.jsonl").is_file()
    assert not (partial / "seed-2" / "eval.json").exists() and not out.exists()
    assert holder(out) is None  # the kernel dropped the dead job's lock
    before, mtime = seed1.read_bytes(), seed1.stat().st_mtime_ns

    calls = count_seeds(monkeypatch)
    assert main(argv(task_data, tiny_dir, out)) == 0
    err = capsys.readouterr().err
    assert calls == [2]  # only the seed that was cut off runs again
    assert f"note: resuming the interrupted job in {partial} (seed-1 finished, kept)" in err
    kept = out / "seed-1" / "eval.json"
    assert kept.read_bytes() == before and kept.stat().st_mtime_ns == mtime
    assert not partial.exists() and not (out / "job.json").exists()
    assert json.loads((out / "seed-2" / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1

    calls.clear()
    assert main(argv(task_data, tiny_dir, tmp_path / "ref")) == 0  # the same job, uninterrupted
    assert calls == [1, 2]
    got, ref = (json.loads((d / "results.json").read_text()) for d in (out, tmp_path / "ref"))
    timing = ("seconds", "train_seconds", "eval_seconds")
    for a, b in zip(got["seeds"], ref["seeds"], strict=True):
        assert {k: v for k, v in a.items() if k not in timing} == {
            k: v for k, v in b.items() if k not in timing
        }
    assert got["summary"] == ref["summary"]
    for seed in (1, 2):
        pred = (out / f"seed-{seed}" / "predictions.jsonl").read_text()
        assert pred == (tmp_path / "ref" / f"seed-{seed}" / "predictions.jsonl").read_text()


def test_interrupted_job_is_kept_and_other_options_are_refused(
    task_data, tiny_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "o"
    partial = tmp_path / ".o.partial"
    real = F.run_seed

    def stop_at(stop):
        def run_seed(cfg, spec, data, labels, seed, sd):
            if seed == stop:
                raise KeyboardInterrupt
            return real(cfg, spec, data, labels, seed, sd)

        return run_seed

    monkeypatch.setattr(F, "run_seed", stop_at(1))  # nothing finished: nothing is left behind
    assert main(argv(task_data, tiny_dir, out)) == 130
    assert not partial.exists() and not out.exists()
    capsys.readouterr()
    monkeypatch.setattr(F, "run_seed", stop_at(2))  # Ctrl-C in seed 2: seed 1 is kept
    assert main(argv(task_data, tiny_dir, out)) == 130
    assert (
        f"note: kept {partial} (seed-1 finished); rerun the same command to continue"
        in capsys.readouterr().err
    )
    assert (partial / "seed-1" / "eval.json").is_file() and not out.exists()

    monkeypatch.setattr(F, "run_seed", real)
    calls = count_seeds(monkeypatch)
    assert main(argv(task_data, tiny_dir, out, "--lr", "3e-5")) == 2  # other options: refused
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(partial) in err[0] and "lr 1e-05, asked 3e-05" in err[0]
    assert calls == [] and (partial / "seed-1" / "eval.json").is_file()
    assert main(argv(task_data, tiny_dir, out, "--lr", "3e-5", "--overwrite")) == 0  # starts over
    assert calls == [1, 2]
    assert "note: --overwrite: discarded the interrupted job" in capsys.readouterr().err
    assert json.loads((out / "results.json").read_text())["config"]["lr"] == 3e-5


def test_stale_partial_of_a_dead_process_is_removed_with_a_note(task_data, tiny_dir, tmp_path, capsys):
    dead = tmp_path / ".o.partial-99999999"  # above any PID the kernel hands out
    (dead / "seed-1").mkdir(parents=True)
    alive = tmp_path / f".o.partial-{os.getppid()}"  # a running process's: left alone
    alive.mkdir()
    assert main(argv(task_data, tiny_dir, tmp_path / "o", "--seeds", "1", "--max-steps", "1")) == 0
    err = capsys.readouterr().err.strip().splitlines()
    notes = [line for line in err if line.startswith("note:")]
    assert notes == [
        f"note: removed {dead}, left by an interrupted fine-tuning job (PID 99999999 is no longer running)"
    ]
    assert not dead.exists() and alive.is_dir() and (tmp_path / "o" / "results.json").is_file()
