"""Building a sharded dense index: one shard from its rows, all shards in turn, the manifest last.

`build_shard` makes the DenseIndex of one contiguous range of chunk ids (what rank r of a
refresh or of `ralm index build` under torchrun builds); `build_sharded` builds every shard of a
vector array in turn, one in memory at a time (`ralm index build --shards N` in one process);
`write_shards_manifest` writes shards.json over the saved shard directories, checking that
they agree and tile the chunk ids. The layout and loading: ralm.retrieval.index.sharded.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ralm.atomic import write_json_atomic
from ralm.errors import RalmError
from ralm.integrity import file_record
from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.io import INDEX_FILE, MANIFEST_FILE, read_manifest
from ralm.retrieval.index.kinds import mean_vector
from ralm.retrieval.index.shard_merge import shard_ranges
from ralm.retrieval.index.sharded import REBUILD, SHARDS_FILE, SHARDS_FORMAT, SHARDS_VERSION, shard_dir_name

__all__ = ["build_shard", "build_sharded", "write_shards_manifest"]


def build_shard(
    vectors: np.ndarray,
    *,
    shard: int,
    n_shards: int,
    start: int,
    total: int,
    kind: str = "flat",
    docstore_fingerprint: str,
    encoder_fingerprint: str,
    center: np.ndarray | None = None,
    device: str = "cpu",
    **params: Any,
) -> DenseIndex:
    """The DenseIndex of one shard: `vectors` (n_s, d) are chunks start..start+n_s-1 of `total`.

    center: the (d,) mean of the whole corpus for a centred index (None: not centred).
    Its manifest carries {"shard": {"index", "of", "start", "stop", "total"}}.
    """
    index = DenseIndex.build(
        vectors,
        kind=kind,
        docstore_fingerprint=docstore_fingerprint,
        encoder_fingerprint=encoder_fingerprint,
        center=center if center is not None else False,
        device=device,
        **params,
    )
    index.manifest["shard"] = {
        "index": shard,
        "of": n_shards,
        "start": int(start),
        "stop": int(start) + int(len(vectors)),
        "total": int(total),
    }
    return index


def write_shards_manifest(
    directory: str | os.PathLike, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write DIRECTORY/shards.json over the shard directories already saved there (temp + rename).

    Reads each shard's index.json (which must agree with the others on kind, metric, dimension,
    fingerprints and the id ranges, which must tile 0..total-1) and records its files' sizes
    and digests (index.faiss's from index.json, hashed when it was saved). extra: more keys
    (e.g. a REALM index version). Returns the manifest.
    """
    d = Path(directory)
    shard_dirs = sorted(p for p in d.glob("shard-*-of-*") if p.is_dir())
    if not shard_dirs:
        raise RalmError(f"{d}: no shard directories to describe; {REBUILD}")
    entries, first = [], None
    for p in shard_dirs:
        m = read_manifest(p / MANIFEST_FILE, "ralm-dense-index", 1, "index")
        info = m.get("shard")
        if not isinstance(info, dict):
            raise RalmError(f"{p}: not a shard (its {MANIFEST_FILE} has no shard entry); {REBUILD}")
        first = first or m
        for key in ("kind", "metric", "dim", "docstore_fingerprint", "encoder_fingerprint"):
            if m.get(key) != first.get(key):
                raise RalmError(
                    f"{p}: {key} {m.get(key)!r} differs from the other shards' {first.get(key)!r}"
                )
        entries.append(
            {
                "dir": p.name,
                "start": info["start"],
                "stop": info["stop"],
                "files": {
                    f"{p.name}/{MANIFEST_FILE}": file_record(p / MANIFEST_FILE),
                    f"{p.name}/{INDEX_FILE}": m["files"][INDEX_FILE],
                },
            }
        )
    total = int(first["shard"]["total"])
    entries.sort(key=lambda e: e["start"])
    pos = 0
    for e in entries:
        if e["start"] != pos:
            raise RalmError(f"{d / e['dir']}: starts at chunk {e['start']}, expected {pos}; {REBUILD}")
        pos = e["stop"]
    if pos != total or len(entries) != first["shard"]["of"]:
        raise RalmError(f"{d}: the shards cover chunks 0..{pos - 1} of {total}; {REBUILD}")
    manifest = {
        "format": SHARDS_FORMAT,
        "version": SHARDS_VERSION,
        "kind": first["kind"],
        "metric": first["metric"],
        "dim": first["dim"],
        "count": total,
        "docstore_fingerprint": first["docstore_fingerprint"],
        "encoder_fingerprint": first["encoder_fingerprint"],
        "center": "center" in first,
        "shards": entries,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **(extra or {}),
    }
    write_json_atomic(d / SHARDS_FILE, manifest)
    return manifest


def build_sharded(
    vectors: np.ndarray,
    directory: str | os.PathLike,
    n_shards: int,
    *,
    kind: str = "flat",
    docstore_fingerprint: str,
    encoder_fingerprint: str,
    center: bool = False,
    progress: Callable[[int, int], None] | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Build the shards of `vectors` (N, d; a memmap is read one shard at a time) in turn into
    `directory`, then shards.json; returns that manifest. One shard is in memory at a time.
    `progress(done_shards, n_shards)` after each shard."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / SHARDS_FILE).unlink(missing_ok=True)  # unfinished until the manifest is back
    n = int(vectors.shape[0])
    ranges = shard_ranges(n, n_shards)
    for old in d.glob("shard-*-of-*"):
        if old.name not in {shard_dir_name(s, n_shards) for s in range(n_shards)}:
            shutil.rmtree(old, ignore_errors=True)  # an earlier build with another number of shards
    mu = mean_vector(vectors) if center else None
    for s, (start, stop) in enumerate(ranges):
        index = build_shard(
            vectors[start:stop],
            shard=s,
            n_shards=n_shards,
            start=start,
            total=n,
            kind=kind,
            docstore_fingerprint=docstore_fingerprint,
            encoder_fingerprint=encoder_fingerprint,
            center=mu,
            **params,
        )
        index.save(d / shard_dir_name(s, n_shards))
        del index
        if progress is not None:
            progress(s + 1, n_shards)
    return write_shards_manifest(d)
