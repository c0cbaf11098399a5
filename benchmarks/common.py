"""Shared by the benchmark scripts: paths, the machine description, the rerun command and the result
file writer.

The scripts live in one folder per area (benchmarks/AREA/NAME.py); each puts benchmarks/ first on
sys.path, imports this module as `common` and another script as `AREA.NAME`. Every benchmark writes
benchmarks/results/NAME.json with `command` (how to rerun it: `script_command`), `machine`, `date`,
`metrics` (plain numbers) and `targets` (the issue's bar for each metric).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent  # benchmarks/
ROOT = BENCH.parent  # the repository
# RALM_RESULTS_DIR: write elsewhere (gpu_pack.py's stages keep their scripts' files in scratch folders)
RESULTS = Path(os.environ.get("RALM_RESULTS_DIR") or BENCH / "results")


def machine() -> str:
    """CPU model, core count, Python version and OS, e.g. 'AMD EPYC ..., 2 cores, Python 3.11.7, Linux'."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def script_path(file: str | os.PathLike) -> str:
    """A script's path from the repository root, e.g. 'benchmarks/realm/realm_step.py' for its __file__."""
    path = Path(file).resolve()
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:  # not under the repository
        return str(path)


def script_command(
    file: str | os.PathLike, args: str | Sequence[str] | None = None, python: str = "python"
) -> str:
    """The command that reruns a script: 'python benchmarks/AREA/NAME.py ARGS' (default args: this
    process's sys.argv[1:]; a string is taken as written)."""
    if args is None:
        args = sys.argv[1:]
    rest = (args if isinstance(args, str) else " ".join(args)).strip()
    return " ".join(x for x in (python, script_path(file), rest) if x)


def write_result(name: str, command: str, metrics: dict, targets: dict, **extra) -> dict:
    """Write benchmarks/results/NAME.json atomically and return what was written."""
    result = {
        "command": command,
        "machine": machine(),
        "date": dt.date.today().isoformat(),
        "metrics": metrics,
        "targets": targets,
        **extra,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    return result


def log(msg: str) -> None:
    """A timestamped progress line on stderr: '[20:41:07] msg'."""
    import time

    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ralm(*args: object) -> None:
    """Run `ralm ARGS...` with this interpreter, as a user would from the shell; fails on a non-zero exit."""
    import subprocess

    log("ralm " + " ".join(str(a) for a in args))
    subprocess.run([sys.executable, "-m", "ralm", *[str(a) for a in args]], check=True)
