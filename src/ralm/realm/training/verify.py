"""`ralm run verify RUN`: every file of a pre-training run checked against what was recorded.

- each checkpoint's files (model, optimizer, RNG, its index copy) against the sizes and XXH3
  digests in its state.json (`ralm.train.checkpoint.checkpoint_problems`);
- each index version under RUN/index against its index.json (`verify_index_files`), or each
  shard of a sharded version against its shards.json (`verify_sharded`);
- config.toml parses, split.json reads, metrics.jsonl has JSON lines (a torn last line is the
  crash-safe case resume drops, reported as a note, not a problem).
What it leaves out: the DocStore the run reads (`ralm corpus verify` checks it) and whether the
weights are any good.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ralm.errors import RalmError


def verify_run(run_dir: str | os.PathLike) -> tuple[list[str], list[str], int]:
    """(problems, notes, files checked) of a run directory; problems [] when it is intact."""
    from ralm.realm.training.run import read_run_config
    from ralm.retrieval.index.io import verify_index_files
    from ralm.train.checkpoint import finished_checkpoints, read_state
    from ralm.train.logging import read_metric_rows

    run = Path(run_dir)
    if not run.is_dir():
        raise RalmError(f"{run}: no such run directory; give a `ralm pretrain --out` directory")
    problems: list[str] = []
    notes: list[str] = []
    checked = 0
    try:
        read_run_config(run)
        checked += 1
    except RalmError as exc:
        problems.append(str(exc))
    split = run / "split.json"
    if split.is_file():
        checked += 1
        try:
            json.loads(split.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(f"{split}: unreadable ({exc})")
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        checked += 1
        try:
            read_metric_rows(metrics, note=lambda m: notes.append(m + " (`--resume` does the same)"))
        except RalmError as exc:
            problems.append(str(exc))
    ckpts = finished_checkpoints(run)
    if not ckpts:
        notes.append(f"{run}: no finished checkpoint yet")
    for ckpt in ckpts:
        try:
            files = read_state(ckpt).get("files")
        except RalmError as exc:
            problems.append(str(exc))
            continue
        if not isinstance(files, dict):
            notes.append(f"{ckpt.name}: written before checksums were recorded; sizes and contents unchecked")
            continue
        from ralm.integrity import check_digests

        checked += len(files)
        problems += check_digests(ckpt, files)
    idx_root = run / "index"
    for vdir in sorted(idx_root.glob("v*")) if idx_root.is_dir() else []:
        if vdir.is_dir() and (vdir / "shards.json").is_file():  # index_sharding = "rank"
            from ralm.retrieval.index.sharded import verify_sharded

            found, n = verify_sharded(vdir)
            checked += n
            problems += found
        elif vdir.is_dir():
            checked += 1
            problems += verify_index_files(vdir)
    return problems, notes, checked
