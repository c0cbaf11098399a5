"""`ralm plot RUN [RUN...]`: training curves of one or more runs as a PNG (BRENT Figures 2-4).

Two panels side by side: loss (NLL per masked token) and masked-token perplexity against the
step, one line per run, smoothed with an exponential moving average (BRENT uses alpha = 0.99 over
10k steps; short runs want less, default 0.9). Raw values are drawn faintly underneath.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ralm.atomic import atomic_path
from ralm.errors import RalmError
from ralm.train.logging import METRICS_FILE, read_metric_rows

__all__ = ["ema", "plot_runs", "read_metrics"]


def read_metrics(run_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """{"step", "loss", "ppl"} arrays of a run's training steps (rows without a loss skipped)."""
    p = Path(run_dir) / METRICS_FILE
    if not p.is_file():
        raise RalmError(f"{run_dir}: no metrics.jsonl; give a `ralm pretrain` run directory")
    steps, loss, ppl = [], [], []
    for row in read_metric_rows(p):
        if "loss" in row:
            steps.append(row["step"])
            loss.append(row["loss"])
            ppl.append(row.get("ppl", float(np.exp(row["loss"]))))
    if not steps:
        raise RalmError(f"{p}: no training steps logged yet")
    return {"step": np.array(steps), "loss": np.array(loss), "ppl": np.array(ppl)}


def ema(x: np.ndarray, alpha: float) -> np.ndarray:
    """s_0 = x_0, s_t = alpha s_{t-1} + (1 - alpha) x_t; alpha 0 returns x."""
    out = np.empty(len(x), dtype=np.float64)
    s = float(x[0]) if len(x) else 0.0
    for i, v in enumerate(x):
        s = alpha * s + (1 - alpha) * float(v) if i else float(v)
        out[i] = s
    return out


def plot_runs(
    runs: list[str | os.PathLike],
    out: str | os.PathLike,
    *,
    alpha: float = 0.9,
    labels: list[str] | None = None,
) -> Path:
    """Draw the runs' loss and perplexity curves into the PNG `out` (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not 0.0 <= alpha < 1.0:
        raise RalmError(f"alpha {alpha}: use a smoothing factor in [0, 1)")
    labels = labels or [Path(r).name for r in runs]
    data = [read_metrics(r) for r in runs]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for m, name in zip(data, labels, strict=True):
        for ax, key in zip(axes, ("loss", "ppl"), strict=True):
            (line,) = ax.plot(m["step"], ema(m[key], alpha), label=name)
            ax.plot(m["step"], m[key], color=line.get_color(), alpha=0.2, linewidth=0.8)
    axes[0].set_title("training loss (NLL per masked token)")
    axes[1].set_title("masked-token perplexity")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"EMA-smoothed (alpha={alpha}); faint: raw")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(out, ".png") as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
    return out
