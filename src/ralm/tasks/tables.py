"""Markdown tables of fine-tuning results: one job's seeds, and BRENT Table 1's layout for many jobs.

`results_markdown(results)` renders one `results.json` (mean ± std per metric and split, and each
seed's primary metric). `comparison_table(results_list)` puts several jobs side by side: one row
per model name, one column per (task/dataset, metric) and retrieval setting, cells
``mean ± std`` over the seeds of the test split (dev when a job has no test split).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ralm.errors import RalmError

__all__ = ["comparison_table", "read_results", "results_markdown", "summary_of"]


def cell(stat: dict[str, float] | None) -> str:
    """ "64.21 ± 1.05" (n > 1), "64.21" (one seed), "–" (missing)."""
    if not stat:
        return "–"
    return f"{stat['mean']:.2f} ± {stat['std']:.2f}" if stat.get("n", 1) > 1 else f"{stat['mean']:.2f}"


def summary_of(results: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """split -> metric -> {"mean", "std", "n"} of a job over its seeds; a single run without seeds
    (`ralm rag eval`) has its metrics as the test split's means, with no std."""
    if "summary" in results:
        return results["summary"]
    return {
        "test": {
            m: {"mean": float(v)}
            for m, v in results.get("metrics", {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
    }


def results_markdown(results: dict[str, Any]) -> str:
    """One job: a metric x split table, then the primary metric per seed."""
    lines = [
        f"# {results['task']}: {results['name']}{' + retrieval' if results['retrieval'] else ''}",
        "",
        f"data: `{results['data']}` ({results['format']}); "
        + (
            "seeds: " + ", ".join(str(r["seed"]) for r in results["seeds"])
            if "seeds" in results
            else "one run"
        ),
        "",
        "| split | metric | mean ± std |",
        "| --- | --- | --- |",
    ]
    for split, metrics in summary_of(results).items():
        for m, stat in metrics.items():
            lines.append(f"| {split} | {m} | {cell(stat)} |")
    if "seeds" not in results:
        return "\n".join(lines) + "\n"
    p = results["primary"]
    lines += ["", f"| seed | dev {p} | test {p} | seconds |", "| --- | --- | --- | --- |"]
    for r in results["seeds"]:
        d = r.get("dev", {}).get(p)
        t = r.get("test", {}).get(p)
        lines.append(
            f"| {r['seed']} | {'–' if d is None else f'{d:.2f}'} | {'–' if t is None else f'{t:.2f}'} "
            f"| {r['seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def read_results(path: str | os.PathLike) -> dict[str, Any]:
    """`results.json` of a `ralm finetune` output directory (or the file itself)."""
    p = Path(path)
    f = p / "results.json" if p.is_dir() else p
    if not f.is_file():
        raise RalmError(f"{path}: no results.json; give a `ralm finetune --out` directory")
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RalmError(f"{f}: unreadable ({exc}); rerun `ralm finetune`") from None


def _dataset(r: dict[str, Any]) -> str:
    return r.get("dataset") or Path(str(r["data"])).name or r["task"]


def comparison_table(results: list[dict[str, Any]], metrics: dict[str, list[str]] | None = None) -> str:
    """BRENT Table 1 layout: rows = models; columns = dataset metric, without / with retrieval.

    metrics: task -> metrics to show (default: the job's primary metric; QA shows em and f1).
    """
    default = {"extractive-qa": ["em", "f1"], "open-qa": ["em", "recall@5"], "rag-qa": ["em", "f1"]}
    cols: list[tuple[str, str, str]] = []  # (dataset, task, metric)
    for r in results:
        for m in (metrics or {}).get(r["task"]) or default.get(r["task"], [r["primary"]]):
            key = (_dataset(r), r["task"], m)
            if key not in cols:
                cols.append(key)
    rows: list[str] = []
    for r in results:
        if r["name"] not in rows:
            rows.append(r["name"])
    modes = [False, True] if any(r["retrieval"] for r in results) else [False]
    header = ["model"] + [
        f"{d} {m}" + ((" +ret" if ret else "") if len(modes) > 1 else "") for d, _, m in cols for ret in modes
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name in rows:
        cells = [name]
        for d, task, m in cols:
            for ret in modes:
                hit = [
                    r
                    for r in results
                    if r["name"] == name and _dataset(r) == d and r["task"] == task and r["retrieval"] == ret
                ]
                stat = None
                if hit:
                    summ = summary_of(hit[-1])
                    stat = (summ.get("test") or summ.get("dev") or {}).get(m)
                cells.append(cell(stat))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
