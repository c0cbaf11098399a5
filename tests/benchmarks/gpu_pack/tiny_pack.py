"""Shared by the tiny end-to-end tests of benchmarks/gpu/gpu_pack.py: prep --tiny and run --tiny for
some of the stages, and the checks each stage's record must pass. The stages are split over two
test files so that `make test`'s two workers run them side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu import gpu_pack

ROOT = Path(__file__).resolve().parents[3]


def run_tiny_pack(tmp_path: Path, stages: list[str], also_prep: tuple[str, ...] = ()) -> None:
    """prep --tiny (for `stages` and the stages `also_prep` whose inputs they read) and run --tiny
    for `stages`: every one runs on the CPU and writes the metrics its targets name."""
    env = {"OMP_NUM_THREADS": "2", **os.environ}  # under `make test`'s two workers: theirs (1)
    pack, out, work = tmp_path / "pack", tmp_path / "out", tmp_path / "work"
    py = [sys.executable, "-m", "benchmarks.gpu.gpu_pack"]
    subprocess.run(
        [*py, "prep", "--tiny", "--pack", str(pack), "--stages", *also_prep, *stages],
        check=True,
        env=env,
        cwd=ROOT,
    )
    # the budget only stops a hung run: on a loaded 2-core machine causal_en's tiny steps (SmolLM2
    # itself) took 523 s, past the default 540 s for all stages
    where = ["--pack", str(pack), "--out", str(out), "--work", str(work), "--stages", *stages]
    subprocess.run([*py, "run", "--tiny", *where, "--budget", "3600"], check=True, env=env, cwd=ROOT)
    run = json.loads((out / gpu_pack.RUN_FILE).read_text())
    assert [r["stage"] for r in run["stages"]] == stages
    for r, st in zip(run["stages"], gpu_pack.load_stages(stages), strict=True):
        assert r["status"] == "ok", (r["stage"], r.get("reason"), r.get("traceback"))
        assert set(st.TARGETS) <= set(r["metrics"]), r["stage"]
        assert r["tiny"] is True and r["torch"] and r["transformers"] and r["precision"] == "fp32"
