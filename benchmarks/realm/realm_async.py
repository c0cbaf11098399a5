"""Speed: REALM training steps/s while the index is rebuilt asynchronously, vs no refresh and vs a
stall-the-world (synchronous) refresh, measured in one run of this script.

On a 2-core machine the trainer is pinned to core 0 with one torch thread and the index builder
(async) to core 1 with one thread: the builder has its own core, as the issue asks. Three runs
of the same steps on the enwiki sample (64-token chunks, 12k chunks, k=4, batch 4):

* none:  refresh_every = 0 (the index of step 0 is never rebuilt)
* async: refresh_mode = async, refresh_every = 1 (the builder starts a new build as soon as the
  previous one is handed over, so a refresh is under way during almost every step)
* sync:  refresh_mode = sync, refresh_every = --sync-every (BRENT's stop-and-rebuild)

Steps/s = steps / wall time of the training loop (`elapsed_seconds` of the last step, which
includes the synchronous refreshes; the initial index build is outside it).

Run: python -m benchmarks.realm.realm_async [--steps 80] [--sync-every 40]
Writes benchmarks/results/realm_async.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from benchmarks.common import script_command, write_result
from benchmarks.realm.realm_quality import ensure_store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--sync-every", type=int, default=40)
    ap.add_argument("--work", default="/tmp/ralm-bench-realm")
    args = ap.parse_args()

    import torch

    cores = sorted(os.sched_getaffinity(0))
    trainer_core, builder_core = cores[0], cores[-1]
    os.sched_setaffinity(0, {trainer_core})
    torch.set_num_threads(1)
    from ralm.realm.config import PretrainConfig
    from ralm.realm.training.trainer import pretrain

    store = ensure_store(Path(args.work) / "enwiki-64", 64)
    common = dict(
        docstore=str(store),
        steps=args.steps,
        batch_size=4,
        k=4,
        encoder_max_length=64,
        reader_max_length=160,
        checkpoint_every=0,
        tensorboard=False,
        warmup_steps=5,
        heldout=200,
    )
    runs = {
        "none": dict(refresh_every=0),
        "async": dict(refresh_mode="async", refresh_every=1, builder_threads=1, builder_cores=[builder_core]),
        "sync": dict(refresh_every=args.sync_every),
    }
    out: dict[str, dict] = {}
    first_index = None
    for name, kw in runs.items():
        run = Path(args.work) / f"async-bench-{name}"
        # the step-0 index (outside the timing) is built once, by the first run, and reused
        pretrain(
            PretrainConfig(out=str(run), initial_index=first_index, **common, **kw),
            overwrite=True,
            progress=False,
        )
        if first_index is None:
            first_index = str(run / "index" / "v00000")
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if "loss" in r]
        wall = steps[-1]["elapsed_seconds"]
        swaps = [r for r in steps if "staleness_steps" in r]
        out[name] = {
            "steps_per_second": len(steps) / wall,
            "wall_seconds": wall,
            "index_versions_used": len({r["index_version"] for r in steps}),
            "swaps": len(swaps),
            "mean_staleness_steps": sum(r["staleness_steps"] for r in swaps) / len(swaps) if swaps else None,
            "mean_build_seconds": sum(r["build_seconds"] for r in swaps) / len(swaps) if swaps else None,
            "refresh_seconds_sync": [
                r["refresh_seconds"] for r in steps if "refresh_seconds" in r and name == "sync"
            ],
        }
        print(name, out[name], flush=True)
    base = out["none"]["steps_per_second"]
    write_result(
        "realm_async",
        script_command(__file__),
        {
            "steps_per_second_no_refresh": base,
            "steps_per_second_async_refresh": out["async"]["steps_per_second"],
            "steps_per_second_sync_refresh": out["sync"]["steps_per_second"],
            "async_vs_no_refresh": out["async"]["steps_per_second"] / base,
            "sync_vs_no_refresh": out["sync"]["steps_per_second"] / base,
            "async_index_swaps": out["async"]["swaps"],
            "async_mean_staleness_steps": out["async"]["mean_staleness_steps"],
            "async_mean_build_seconds": out["async"]["mean_build_seconds"],
            "sync_refresh_seconds_mean": (
                sum(out["sync"]["refresh_seconds_sync"]) / len(out["sync"]["refresh_seconds_sync"])
                if out["sync"]["refresh_seconds_sync"]
                else None
            ),
            "chunks": 12285,
        },
        {"async_vs_no_refresh": ">= 0.8"},
        pinning=f"trainer on core {trainer_core} (1 thread), builder on core {builder_core} (1 thread)",
        settings=vars(args),
    )


if __name__ == "__main__":
    main()
