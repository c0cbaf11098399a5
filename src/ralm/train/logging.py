"""Metric logs every trainer writes: JSON lines (always) and TensorBoard events (when installed)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"  # in every run directory


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
