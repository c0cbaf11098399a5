"""`make demo` as a newcomer meets it: its wall time, with the environment installed and on a fresh
clone including the install, and the figures of the table it prints (issue 65).

Stages (each writes what it measured into benchmarks/results/demo.json, keeping the others):

  installed   `make demo` in this checkout with its environment already installed (`make setup`
              first, untimed), from an empty runs/demo (the folder is moved aside first and put
              back after)
  fresh       `git clone` of this checkout's HEAD into a temporary folder, then `make demo` there:
              a new virtual environment, the whole install (pip from the package registries or the
              local wheel cache), then the demo; the clone is deleted after
  report      (run by both) the table's figures from runs/demo of the checkout that ran last

The table's figures (the records world's, `runs/demo/world/run/demo_table.json`): held-out queries
counted, the right document's recall@1 and p(right | x) at step 0 and trained, and exact match,
token F1 and span perplexity closed-book, with retrieval and given the right document. When
closed-book matches no query, the EM ratio takes one match as closed-book's floor (a lower bound),
and `demo_closed_book_em_floored` is 1. Targets: `demo_em_retrieval_over_closed_book` >= 2, `demo_heldout_spans` >= 100,
`demo_seconds_installed` <= 600, `demo_seconds_fresh_clone` <= 900.

Run on idle cores (the wall time is the figure): python -m benchmarks.demo installed [fresh]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import RESULTS, ROOT, log, script_command, write_result

NAME = "demo"
TARGETS = {
    "demo_em_retrieval_over_closed_book": ">= 2",
    "demo_heldout_spans": ">= 100",
    "demo_seconds_installed": "<= 600",
    "demo_seconds_fresh_clone": "<= 900",
}


def _make_demo(cwd: Path, log_file: Path) -> float:
    """Wall seconds of `make demo` in `cwd`, its output into `log_file`; fails on a non-zero exit."""
    log(f"make demo in {cwd} (output: {log_file})")
    t0 = time.perf_counter()
    with open(log_file, "w", encoding="utf-8") as out:
        subprocess.run(["make", "demo"], cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def table_metrics(demo: Path) -> dict[str, float]:
    """The printed table's figures from a finished runs/demo folder `demo` (the records world's
    RUN/demo_table.json). Exact match is in percent; when closed-book matched no query, the ratio
    takes one matched query as closed-book's floor (a lower bound on the ratio), and says so."""
    fig = json.loads((demo / "world" / "run" / "demo_table.json").read_text(encoding="utf-8"))
    m = {"demo_heldout_spans": float(fig["queries"])}
    for key in ("recall_at_1_step0", "recall_at_1", "p_right_step0", "p_right"):
        m[f"demo_{key}"] = round(float(fig[key]), 4)
    for row in ("closed_book", "retrieval", "oracle"):
        for key in ("em", "f1", "ppl"):
            m[f"demo_{key}_{row}"] = round(float(fig[f"{key}_{row}"]), 4)
    floor = 100.0 / fig["queries"]
    closed = max(fig["em_closed_book"], floor)
    m["demo_em_retrieval_over_closed_book"] = round(fig["em_retrieval"] / closed, 2)
    m["demo_closed_book_em_floored"] = float(fig["em_closed_book"] < floor)
    return m


def _previous() -> dict:
    p = RESULTS / f"{NAME}.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stages", nargs="+", choices=["installed", "fresh"])
    args = ap.parse_args()
    prev = _previous()
    metrics = dict(prev.get("metrics", {}))
    logs = Path(tempfile.mkdtemp(prefix="ralm-demo-logs-"))
    if "installed" in args.stages:
        # the environment brought up to date first, untimed: `make demo` reinstalls when
        # pyproject.toml or the Makefile is newer than the environment's stamp
        subprocess.run(["make", "setup"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        runs = ROOT / "runs" / "demo"
        aside = ROOT / "runs" / f"demo.aside-{os.getpid()}"
        if runs.exists():
            runs.rename(aside)
        try:
            metrics["demo_seconds_installed"] = round(_make_demo(ROOT, logs / "installed.log"), 1)
            metrics.update(table_metrics(runs))
        finally:
            if aside.exists():
                shutil.rmtree(runs, ignore_errors=True)
                aside.rename(runs)
    if "fresh" in args.stages:
        work = Path(tempfile.mkdtemp(prefix="ralm-demo-clone-"))
        try:
            subprocess.run(["git", "clone", "-q", str(ROOT), str(work / "ralm")], check=True)
            metrics["demo_seconds_fresh_clone"] = round(_make_demo(work / "ralm", logs / "fresh.log"), 1)
            metrics.update(table_metrics(work / "ralm" / "runs" / "demo"))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    write_result(
        NAME,
        script_command(__file__),
        metrics,
        TARGETS,
        note="wall seconds of `make demo` on this machine's cores, nothing else running; the table's "
        "figures are from the last stage run (the demo is seeded: every stage prints the same table)",
    )
    log(f"written: {RESULTS / (NAME + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
