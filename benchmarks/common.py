"""Shared by the benchmark scripts: the machine description and the result-file writer.

Every benchmark writes benchmarks/results/NAME.json with `command` (how to rerun it), `machine`,
`date`, `metrics` (plain numbers) and `targets` (the issue's bar for each metric).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path

# RALM_RESULTS_DIR: write elsewhere (gpu_pack.py's stages keep their scripts' files in scratch folders)
RESULTS = Path(os.environ.get("RALM_RESULTS_DIR") or Path(__file__).resolve().parent / "results")


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
