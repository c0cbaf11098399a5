"""What one request costs in a batch of B, in-process: why batching gains what it gains in `ralm serve`.

Question (issue 29): the serve_load targets assume a batched forward costs little more than a
single one. Does it, for the models `ralm serve` runs? Per request, the milliseconds of
`ralm.serve.batched.search_many` (dense, BM25, hybrid; k=10, chatterbot trivia questions) and
`fill_many_dicts` (benchmarks/serve/serve_load.py's masked chunk texts, the run's k) on batches of B
requests, in this process, on the TARGET that serve_load.py serves (benchmarks/serve/serve_target.py),
the same requests for every B; best of --reps. `gain_at_B` = cost at B=1 / cost at B.

Run: OMP_NUM_THREADS=1 python -m benchmarks.serve.serve_batch_cost [--target DIR]
Writes benchmarks/results/serve_batch_cost.json.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from benchmarks.common import offline, script_command, write_result

offline()
from benchmarks.serve.serve_load import DEFAULT_WORK, fill_texts, search_queries  # noqa: E402
from benchmarks.serve.serve_target import DEFAULT_TARGET, build_demo_like  # noqa: E402


def per_request_ms(fn, items: list, batch: int, reps: int) -> float:
    """Best of `reps` of running `fn` over `items` in batches of `batch`, per item (ms)."""
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        for i in range(0, len(items), batch):
            fn(items[i : i + batch])
        best = min(best, time.perf_counter() - t)
    return round(1000 * best / len(items), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", type=Path, default=None, help="a REALM run (default: as serve_load.py)")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()

    import torch

    from ralm.serve.batched import fill_many_dicts, search_many
    from ralm.serve.loaders import load_target

    if args.target is not None:
        path = args.target
    elif (DEFAULT_TARGET / "config.toml").is_file():
        path = DEFAULT_TARGET
    else:
        path = build_demo_like(DEFAULT_WORK)
    t = load_target(path, "cpu", log=lambda m: None)
    queries, fills = search_queries()[:32], fill_texts(t.store, 16)
    rows: dict[str, dict[str, float]] = {}
    for r in ("dense", "bm25", "hybrid"):
        rows[f"search_{r}"] = {
            str(b): per_request_ms(lambda qs, r=r: search_many(t, r, 10, qs), queries, b, args.reps)
            for b in (1, 4, 16, 32)
        }
    rows["fill"] = {
        str(b): per_request_ms(lambda xs: fill_many_dicts(t, xs, None, 5), fills, b, args.reps)
        for b in (1, 2, 4, 8, 16)
    }
    metrics = {
        "ms_per_request": rows,
        **{f"gain_{name}": {b: round(ms["1"] / v, 2) for b, v in ms.items()} for name, ms in rows.items()},
        "torch_threads": torch.get_num_threads(),
        "chunks": len(t.store),
    }
    env = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
    write_result(
        "serve_batch_cost",
        script_command(__file__, shlex.join(sys.argv[1:]), python=f"{env}python"),
        metrics,
        {"report": "per-request cost at each batch size (no target: it explains serve_load's ratios)"},
        notes=[
            f"target: {path}; MiniLM query tower, doc tower and reader for a demo-shaped run; in-process, "
            "no HTTP; shared 2-core machine, best of --reps"
        ],
    )
    print(metrics)


if __name__ == "__main__":
    main()
