"""What a stage of the GPU evidence pack (`benchmarks/gpu/gpu_pack.py`) is given, and how it runs commands.

A stage is a module of this package with

    NAME: str            its key in the report (e.g. "brent_en")
    TITLE: str           one line: what it measures
    BUDGET_S: float      seconds it may take on one H100/H200 (full mode)
    MIN_S: float         below this many seconds left, the run skips it with a line
    TARGETS: dict        metric name -> the issue's bar (text, e.g. "<= 0.5")
    prep(ctx) -> None    on the CPU: write its inputs under ctx.inputs (small: they travel)
    run(ctx) -> dict     on the GPU: its metrics (plain numbers); raises on failure

`ctx.tiny` asks for the same code path at toy scale (seconds on a CPU, for the test suite).
Commands run through `ctx.python(...)`/`ctx.ralm(...)`, which stop them when the stage's time is
up (StageTimeout) and point benchmark scripts' result files at the stage's scratch folder
(RALM_RESULTS_DIR) so nothing lands in benchmarks/results.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import ROOT


class StageTimeout(RuntimeError):
    """A stage's command ran past the stage's deadline and was stopped."""


@dataclass
class StageContext:
    """One stage's view of the pack: its inputs, its scratch folder, its clock and its device."""

    name: str
    inputs: Path  # PACK/inputs/NAME: what prep wrote (read-only on the GPU)
    work: Path  # scratch folder of this run of the stage
    tiny: bool
    device: str  # "cuda" or "cpu"
    deadline: float  # time.monotonic() by which the stage must have ended
    log: Callable[[str], None] = print
    env: dict[str, str] = field(default_factory=dict)

    def left(self) -> float:
        """Seconds left before the stage's deadline."""
        return self.deadline - time.monotonic()

    @property
    def results(self) -> Path:
        """Where benchmark scripts write their NAME.json (RALM_RESULTS_DIR of every command)."""
        return self.work / "results"

    def read_result(self, name: str) -> dict:
        """The JSON a benchmark script wrote as NAME.json into `results`."""
        return json.loads((self.results / f"{name}.json").read_text(encoding="utf-8"))

    def python(self, script: str | os.PathLike, *args, timeout: float | None = None) -> None:
        """Run a benchmark script with this stage's environment: a module (e.g.
        "benchmarks.realm.realm_quality", run as `python -m` from the repository root) or a file."""
        if isinstance(script, str) and not script.endswith(".py"):
            self._run([sys.executable, "-m", script, *map(str, args)], timeout)
        else:
            self._run([sys.executable, str(script), *map(str, args)], timeout)

    def ralm(self, *args, timeout: float | None = None) -> None:
        """Run `python -m ralm ARGS` with this stage's environment."""
        self._run([sys.executable, "-m", "ralm", *map(str, args)], timeout)

    def _run(self, cmd: list[str], timeout: float | None) -> None:
        left = self.left()
        if left <= 1:
            raise StageTimeout(f"{self.name}: no time left for {' '.join(cmd[1:3])}")
        limit = left if timeout is None else min(timeout, left)
        self.results.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.env,
            "RALM_RESULTS_DIR": str(self.results),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        # ralm's source first, then what the stage adds (carried packages), then what was there
        paths = [str(ROOT / "src"), self.env.get("PYTHONPATH"), os.environ.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(x for p in paths if p for x in p.split(os.pathsep)))
        self.log(f"$ {' '.join(cmd[1:])}")
        # its own process group, so that a command stopped at the deadline takes its children
        # (servers, data loaders) with it
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise StageTimeout(f"{self.name}: stopped after {limit:.0f} s (its budget)") from None
        except BaseException:
            _kill_group(proc)
            raise
        if code != 0:
            raise subprocess.CalledProcessError(code, cmd)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of `proc` (the command and everything it started) and reap it."""
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def progress_on_stop(runs: Callable[[], Iterable[Path]]):
    """Re-raise a StageTimeout of the block with how far each of `runs()` (run folders, listed when
    the stop comes) got, for the next time model."""
    try:
        yield
    except StageTimeout as exc:
        got = "; ".join(run_progress(r) for r in runs()) or "no run started"
        raise StageTimeout(f"{exc} ({got})") from None


def run_progress(run: Path) -> str:
    """'NAME: step N of a run, median step time' from RUN/metrics.jsonl (what a stopped run reached)."""
    try:
        lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return f"{run.name}: not started"
    rows = []
    for line in lines:
        with contextlib.suppress(ValueError):  # a line torn by the stop
            rows.append(json.loads(line))
    secs = sorted(r["step_seconds"] for r in rows if "step_seconds" in r)
    if not secs:
        return f"{run.name}: no step done"
    last = max(r["step"] for r in rows if "step_seconds" in r)
    return f"{run.name}: step {last}, median {1e3 * secs[len(secs) // 2]:.1f} ms/step"
