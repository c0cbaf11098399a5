"""The files of an embedding run (`ralm.retrieval.embed`): where its rows, row mask, progress and
metadata live, how a finished file is recorded (shape, dtype, fingerprints, XXH3-128 digest) and
checked (`load_embeddings`, `check_file`), and how the shards of a torchrun job are merged
(`merge_shards`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ralm.atomic import atomic_path, move_into_place, write_json_atomic
from ralm.errors import RalmError
from ralm.integrity import DIGEST, digest, file_record

if TYPE_CHECKING:
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.encoders import DualEncoder

__all__ = ["check_file", "load_embeddings", "merge_shards", "shard_path"]

EMB_FORMAT = "ralm-embeddings"
DTYPES = ("float16", "float32")


def embedding_paths(target: Path) -> dict[str, Path]:
    """emb.npy -> emb.partial.npy, emb.done.npy, emb.progress.json and its metadata emb.meta.json."""
    stem = target.name[: -len(".npy")]
    return {
        "partial": target.with_name(stem + ".partial.npy"),
        "done": target.with_name(stem + ".done.npy"),
        "progress": target.with_name(stem + ".progress.json"),
        "meta": target.with_name(stem + ".meta.json"),
    }


def shard_path(out_path: str | os.PathLike, rank: int, world_size: int) -> Path:
    """emb.npy, 1, 4 -> emb.rank1-of-4.npy"""
    out = Path(out_path)
    return out.with_name(f"{out.name[: -len('.npy')]}.rank{rank}-of-{world_size}.npy")


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def save_mask(path: Path, mask: np.ndarray) -> None:
    with atomic_path(path, ".npy") as tmp:
        np.save(tmp, mask)


def load_embeddings(
    path: str | os.PathLike, store: DocStore | None = None, encoder: DualEncoder | None = None
):
    """A finished embedding file as a read-only (N, d) memmap; checks it against `store`/`encoder`."""
    path = Path(path)
    meta = read_json(embedding_paths(path)["meta"]) if path.name.endswith(".npy") else None
    if not path.is_file() or meta is None or meta.get("format") != EMB_FORMAT:
        raise RalmError(f"{path}: not a finished ralm embedding file; run embed_docstore (it resumes)")
    if store is not None and meta["store_fingerprint"] != store.fingerprint:
        raise RalmError(f"{path}: embeds another DocStore than {store.root}; re-embed this one")
    if encoder is not None and meta["encoder_fingerprint"] != encoder.fingerprint("doc"):
        raise RalmError(f"{path}: made by another doc encoder; re-embed with this one")
    check_file(path, meta)
    return np.load(path, mmap_mode="r")


def check_file(path: Path, meta: dict) -> None:
    """RalmError unless a finished embedding file has the size and digest its metadata records
    (metadata written before checksums: nothing to check)."""
    rec = (meta.get("files") or {}).get(path.name)
    if not isinstance(rec, dict):
        return
    fix = f"delete it and {embedding_paths(path)['meta'].name} to embed again"
    size = path.stat().st_size
    if "size" in rec and size != int(rec["size"]):
        raise RalmError(
            f"{path}: {size} bytes, {embedding_paths(path)['meta'].name} says {int(rec['size'])} (truncated?); {fix}"
        )
    if DIGEST in rec and digest(path) != rec[DIGEST]:
        raise RalmError(
            f"{path}: contents changed since it was written (xxh3_128 checksum mismatch: a damaged disk or "
            f"copy); {fix}"
        )


def is_finished(target: Path, meta: dict) -> bool:
    got = read_json(embedding_paths(target)["meta"])
    return (
        target.is_file() and got is not None and got.get("complete") and {k: got.get(k) for k in meta} == meta
    )


def finish_file(p: dict[str, Path], target: Path, meta: dict) -> None:
    """Rename the partial file to its final name, then record it as complete, with its checksum."""
    p["meta"].unlink(missing_ok=True)
    move_into_place(p["partial"], target)
    write_json_atomic(p["meta"], {**meta, "complete": True, "files": {target.name: file_record(target)}})
    p["done"].unlink(missing_ok=True)
    p["progress"].unlink(missing_ok=True)


def merge_shards(out_path: str | os.PathLike, world_size: int, *, remove: bool = True) -> np.memmap:
    """Assemble `emb.rank{r}-of-{w}.npy` (ids r::w) into `out_path`; returns it as a read-only memmap."""
    out = Path(out_path)
    metas, shards = [], []
    for r in range(world_size):
        s = shard_path(out, r, world_size)
        m = read_json(embedding_paths(s)["meta"])
        if not s.is_file() or m is None or not m.get("complete"):
            raise RalmError(f"{s}: shard missing or unfinished; run rank {r} of {world_size} (it resumes)")
        metas.append(m)
        shards.append(s)
    keys = (
        "store_fingerprint",
        "encoder_fingerprint",
        "dtype",
        "titles",
        "max_length",
        "n_total",
        "world_size",
    )
    for r, m in enumerate(metas):
        if any(m[k] != metas[0][k] for k in keys) or m["rank"] != r:
            raise RalmError(
                f"{shards[r]}: made from another store, encoder or setting than rank 0; re-embed it"
            )
    n, d = metas[0]["n_total"], metas[0]["shape"][1]
    meta = {**metas[0], "shape": [n, d], "rank": 0, "world_size": 1}
    meta.pop("complete", None)
    meta.pop("files", None)
    p = embedding_paths(out)
    mm = np.lib.format.open_memmap(p["partial"], mode="w+", dtype=meta["dtype"], shape=(n, d))
    step = 1 << 16
    for r, s in enumerate(shards):
        src = np.load(s, mmap_mode="r")
        if src.shape != (len(range(r, n, world_size)), d):
            raise RalmError(
                f"{s}: shape {src.shape} does not fit {n} rows split {world_size} ways; re-embed it"
            )
        for a in range(0, len(src), step):  # rows a.. of shard r are ids r + w*a ..
            b = min(a + step, len(src))
            mm[r + world_size * a : r + world_size * b : world_size] = src[a:b]
        del src
    mm.flush()
    del mm
    finish_file(p, out, meta)
    if remove:
        for s in shards:
            s.unlink(missing_ok=True)
            embedding_paths(s)["meta"].unlink(missing_ok=True)
    return np.load(out, mmap_mode="r")
