"""Metric logs every trainer writes: JSON lines (always) and TensorBoard events (when installed).

`read_metric_rows` reads a metrics.jsonl back: a final line cut off by a crash (no newline, not
JSON) is dropped with a warning on stderr; a bad line anywhere else is a RalmError naming the
file and the line number.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from ralm.errors import RalmError

METRICS_FILE = "metrics.jsonl"  # in every run directory

__all__ = ["METRICS_FILE", "MetricsLogger", "read_metric_rows", "truncate_metrics", "warn"]


def warn(message: str) -> None:
    """One line on stderr, `ralm: warning: MESSAGE`: something the user should know, not an error."""
    print(f"ralm: warning: {message}", file=sys.stderr, flush=True)


def read_metric_rows(path: str | os.PathLike, note=warn) -> list[dict[str, Any]]:
    """The JSON objects of a metrics.jsonl, in order (see the module docstring); a torn final
    line is dropped and reported to `note` (a warning on stderr by default)."""
    p = Path(path)
    text = p.read_text(encoding="utf-8", errors="replace")
    lines = [(n, ln) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip()]
    rows = []
    for j, (n, ln) in enumerate(lines):
        try:
            row = json.loads(ln)
        except json.JSONDecodeError as exc:
            if j == len(lines) - 1 and not text.endswith("\n"):  # a write the crash cut short
                note(f"{p}: line {n} is incomplete (cut off by a crash); dropped it")
                break
            raise RalmError(f"{p}: line {n} is not valid JSON ({exc.msg}); fix or delete that line") from None
        if not isinstance(row, dict):
            raise RalmError(f"{p}: line {n} is not a JSON object; fix or delete that line")
        rows.append(row)
    return rows


class MetricsLogger:
    """Appends one JSON object per `log(step, **metrics)` to `run_dir/metrics.jsonl`.

    TensorBoard events go to `run_dir/tb/` when the `tensorboard` package is importable.
    """

    def __init__(self, run_dir: str | os.PathLike, tensorboard: bool = True) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except ImportError:
                self._tb = None

    def log(self, step: int, **metrics: Any) -> None:
        row = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        self._f.write(json.dumps(row) + "\n")
        self._f.flush()
        if self._tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._tb.add_scalar(k, v, step)

    def close(self) -> None:
        self._f.close()
        if self._tb is not None:
            self._tb.close()


def _plain(v: Any) -> Any:
    """JSON-ready scalar: ints stay ints (steps, versions), other numbers (tensors too) become floats."""
    if isinstance(v, (bool, int, str)) or v is None:
        return v
    if hasattr(v, "dtype") and getattr(v.dtype, "is_floating_point", None) is False and hasattr(v, "item"):
        return int(v.item())  # an integer torch tensor
    if hasattr(v, "dtype") and str(getattr(v, "dtype", "")).startswith(("int", "uint")):
        return int(v)  # a numpy integer
    return float(v) if hasattr(v, "__float__") else v


def truncate_metrics(run_dir: str | os.PathLike, step: int) -> None:
    """Drop the metric rows written after checkpoint `step` (a resumed run writes them again)."""
    from ralm.atomic import write_text_atomic

    p = Path(run_dir) / METRICS_FILE
    if p.is_file():
        rows = [r for r in read_metric_rows(p) if int(r.get("step", 0)) <= step]
        write_text_atomic(p, "".join(json.dumps(r) + "\n" for r in rows))
