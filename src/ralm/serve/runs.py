"""The Runs page's data: a run's metrics.jsonl rows (re-read when the file changes) and its status.

A run that is training appends to metrics.jsonl: `MetricsReader.rows()` re-reads the file only
when its size or mtime changed, and drops a torn last line silently (the writer is mid-line; the
next poll gets it). The status says training (the run's writer lock is held: ralm.locks),
finished (the last step logged is the configured last step) or stopped (see `run_status`).
Left out: TensorBoard event files (metrics.jsonl holds the same numbers).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from ralm.locks import describe_holder, holder
from ralm.train.logging import read_metric_rows

__all__ = ["MetricsReader", "run_status"]

RECENT_S = 120.0  # a metrics.jsonl written this recently belongs to a run still training


class MetricsReader:
    """The rows of one metrics.jsonl, cached by (size, mtime); thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._key: tuple[int, int] | None = None
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def rows(self) -> list[dict[str, Any]]:
        """All rows now (an empty list while the file does not exist)."""
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._key, self._rows = None, []
                return []
            key = (st.st_size, st.st_mtime_ns)
            if key != self._key:
                self._rows = read_metric_rows(self.path, note=lambda _m: None)
                self._key = key
            return self._rows


def run_status(
    run_dir: Path, metrics: Path, rows: list[dict[str, Any]], steps: int | None, checkpoint: str | None
) -> dict[str, Any]:
    """{state, step, steps, writer, checkpoint} for the Runs page (see the module docstring).

    A run without a writer lock (SUREALM takes none) counts as training while its metrics.jsonl
    changed in the last RECENT_S seconds and its last step is not the last one.
    """
    step = max((int(r["step"]) for r in rows if isinstance(r.get("step"), int)), default=None)
    info = holder(run_dir)
    done = step is not None and steps is not None and step >= steps
    if info is not None:
        state, writer = "training", describe_holder(info)
    elif step is None:
        state, writer = "no metrics", None
    elif not done and _age(metrics) < RECENT_S:
        state, writer = "training", None
    else:
        state, writer = ("finished" if done else "stopped"), None
    return {"state": state, "step": step, "steps": steps, "writer": writer, "checkpoint": checkpoint}


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")
