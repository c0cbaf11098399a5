"""A dense index split into shards: one DenseIndex directory per contiguous range of chunk ids.

    DENSE/
      shards.json             written last: count, dim, kind, metric, the DocStore and encoder
                              fingerprints, and per shard its directory, [start, stop) and the
                              sizes + XXH3-128 of its index.json and index.faiss
      shard-00000-of-00002/   a normal DenseIndex directory (index.faiss + index.json) whose row
      shard-00001-of-00002/   i is chunk start + i; its index.json says which shard it is

Built by ralm.retrieval.index.shard_build (in turn in one process, or one shard per rank). Each
shard is what `DenseIndex.save` writes, so `faiss.read_index` and `DenseIndex.load` open
it alone; rank r of a training job builds and searches shard r (ralm.retrieval.index.dist_search),
one process opens them all as a `ShardedIndex` that searches them in turn and merges
(ralm.retrieval.index.shard_merge): for flat shards the same ids and scores as one DenseIndex.

Loading checks every shard against shards.json before FAISS reads it: a missing or damaged
shard, or one built from another DocStore, is one RalmError naming the shard directory. Centred
indexes centre every shard on the mean of the whole corpus (computed once, before the shards).

Left out: adding shards to or removing them from a built index; re-sharding an approximate
index (a flat one can be cut anew from its vectors: `flat_rows`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ralm.errors import RalmError
from ralm.integrity import check_digests
from ralm.retrieval.base import ExcludeIds, SearchResult
from ralm.retrieval.exclusion import prepare_exclude
from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.io import MANIFEST_FILE, IndexFileError, check_fingerprints, read_manifest
from ralm.retrieval.index.shard_merge import merge_topk, shard_ranges, shard_topk

__all__ = [
    "SHARDS_FILE",
    "ShardedIndex",
    "flat_rows",
    "is_sharded",
    "load_dense",
    "load_rank_shards",
    "shard_dir_name",
    "verify_sharded",
]

SHARDS_FILE = "shards.json"
SHARDS_FORMAT = "ralm-sharded-index"
SHARDS_VERSION = 1
REBUILD = "rebuild it with `ralm index build --shards N`"


def shard_dir_name(shard: int, n_shards: int) -> str:
    """Directory name of a shard. Example: shard_dir_name(1, 4) -> 'shard-00001-of-00004'."""
    return f"shard-{shard:05d}-of-{n_shards:05d}"


def is_sharded(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds a finished sharded index (its shards.json)."""
    return (Path(directory) / SHARDS_FILE).is_file()


# ----------------------------------------------------------------------------- loading
def read_shards_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    """shards.json of a sharded index directory, checked for its format."""
    path = Path(directory) / SHARDS_FILE
    if not path.is_file():
        raise RalmError(f"{path}: no such file; {REBUILD}")
    return read_manifest(path, SHARDS_FORMAT, SHARDS_VERSION, "sharded index")


def load_shard(
    directory: str | os.PathLike,
    manifest: dict[str, Any],
    shard: int,
    *,
    docstore_fingerprint: str | None = None,
    encoder_fingerprint: str | None = None,
    device: str = "cpu",
    mmap: bool = False,
) -> DenseIndex:
    """Shard `shard` of a sharded index, checked against shards.json: present, its index.json
    unchanged and from the same DocStore, its index.faiss as recorded (DenseIndex.load)."""
    d = Path(directory)
    entries = manifest["shards"]
    e = entries[shard]
    p = d / e["dir"]
    what = f"shard {shard} of {len(entries)}, chunks {e['start']}..{e['stop'] - 1}"
    if not p.is_dir() or not (p / MANIFEST_FILE).is_file():
        raise RalmError(f"{p}: missing ({what}); {REBUILD}")
    try:
        own = json.loads((p / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RalmError(f"{p / MANIFEST_FILE}: unreadable ({what}: {exc}); {REBUILD}") from None
    fp = own.get("docstore_fingerprint") if isinstance(own, dict) else None
    if fp != manifest["docstore_fingerprint"]:
        raise RalmError(
            f"{p}: built from another DocStore ({what}; fingerprint {str(fp)[:12]}… vs "
            f"{manifest['docstore_fingerprint'][:12]}…); {REBUILD}"
        )
    problems = check_digests(d, {k: v for k, v in e["files"].items() if k.endswith(MANIFEST_FILE)})
    if problems:
        raise RalmError(f"{problems[0]} ({what}); {REBUILD}")
    try:
        index = DenseIndex.load(
            p,
            docstore_fingerprint=docstore_fingerprint,
            encoder_fingerprint=encoder_fingerprint,
            device=device,
            mmap=mmap,
        )
    except IndexFileError as exc:
        raise IndexFileError(f"{exc.what} ({what})") from None
    if index.count != e["stop"] - e["start"]:
        raise RalmError(f"{p}: {index.count} chunks, shards.json says {e['stop'] - e['start']}; {REBUILD}")
    return index


def verify_sharded(directory: str | os.PathLike) -> tuple[list[str], int]:
    """(problems, files checked) of a sharded index: every shard file re-hashed against shards.json."""
    d = Path(directory)
    try:
        manifest = read_shards_manifest(d)
    except RalmError as exc:
        return [str(exc)], 0
    recorded = {k: v for e in manifest["shards"] for k, v in e["files"].items()}
    return check_digests(d, recorded), len(recorded)


class ShardedIndex:
    """All shards of a sharded index in one process: `search` asks each in turn and merges.

    Same face as DenseIndex where callers use it (search, count, dim, kind, metric, the
    fingerprints, manifest, memory_bytes), so DenseSearcher, REALM and serving take either.
    shards[s] holds chunks starts[s]..starts[s] + shards[s].count - 1.
    """

    def __init__(self, shards: Sequence[DenseIndex], starts: Sequence[int], manifest: dict[str, Any]) -> None:
        self.shards = list(shards)
        self.starts = [int(s) for s in starts]
        self.manifest = manifest
        self.kind: str = manifest["kind"]
        self.metric: str = manifest["metric"]
        self.params: dict[str, Any] = dict(self.shards[0].params)
        self.center = None  # each shard centres the queries itself
        self._count = sum(s.count for s in self.shards)

    @property
    def count(self) -> int:
        return self._count

    def __len__(self) -> int:
        return self._count

    @property
    def dim(self) -> int:
        return self.shards[0].dim

    @property
    def device(self) -> str:
        return self.shards[0].device

    @property
    def docstore_fingerprint(self) -> str:
        return self.manifest["docstore_fingerprint"]

    @property
    def encoder_fingerprint(self) -> str:
        return self.manifest["encoder_fingerprint"]

    def __repr__(self) -> str:
        return (
            f"ShardedIndex(kind={self.kind!r}, count={self.count}, dim={self.dim}, shards={len(self.shards)})"
        )

    def memory_bytes(self) -> int:
        return sum(s.memory_bytes() for s in self.shards)

    def reconstruct_batch(self, ids: np.ndarray) -> np.ndarray:
        """(N, d) float32 stored vectors of global chunk `ids` (N,), each from its shard (exact for
        flat shards, decoded codes otherwise): what fine-tuning reads to score fixed documents."""
        import faiss

        ids = np.asarray(ids, dtype=np.int64).ravel()
        if ids.size and (ids.min() < 0 or ids.max() >= self.count):
            raise RalmError(f"chunk ids must be in 0..{self.count - 1}")
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        for index, start in zip(self.shards, self.starts, strict=True):
            hit = np.flatnonzero((ids >= start) & (ids < start + index.count))
            if hit.size:
                local = np.ascontiguousarray(ids[hit] - start)
                try:
                    out[hit] = index.index.reconstruct_batch(local)
                except RuntimeError:  # IVF: needs its direct map first
                    faiss.extract_index_ivf(index.index).make_direct_map()
                    out[hit] = index.index.reconstruct_batch(local)
        return out

    def set_search_params(self, **kw: Any) -> None:
        for s in self.shards:
            s.set_search_params(**kw)
        self.params = dict(self.shards[0].params)

    def search(self, query_vectors: np.ndarray, k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Top-k chunk ids (global) and scores per query, best first, ties by the lower id:
        `DenseIndex.search` over the whole corpus (equal to it exactly for flat shards)."""
        q = np.asarray(query_vectors)
        if q.ndim != 2:
            raise RalmError(f"query vectors must be a 2-D (Q, d) array, got shape {q.shape}")
        if q.dtype.kind == "f":
            q = np.ascontiguousarray(q, dtype=np.float32)  # once, not per shard
        excl = prepare_exclude(exclude_ids, q.shape[0], self.count, k)
        if len(self.shards) == 1:
            return self.shards[0].search(q, k, exclude_ids=excl)
        ids, scores = [], []
        for index, start in zip(self.shards, self.starts, strict=True):
            i, s = shard_topk(index, start, q, k, excl)
            ids.append(i)
            scores.append(s)
        top_ids, top_scores = merge_topk(ids, scores, k, excl)
        return SearchResult(ids=top_ids, scores=top_scores)

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike,
        *,
        docstore_fingerprint: str | None = None,
        encoder_fingerprint: str | None = None,
        device: str = "cpu",
        mmap: bool = False,
    ) -> ShardedIndex:
        """Open every shard of `directory` (checked: see `load_shard`)."""
        d = Path(directory)
        manifest = read_shards_manifest(d)
        check_fingerprints(d, manifest, docstore_fingerprint, encoder_fingerprint)
        shards = [
            load_shard(
                d,
                manifest,
                s,
                docstore_fingerprint=docstore_fingerprint,
                encoder_fingerprint=encoder_fingerprint,
                device=device,
                mmap=mmap,
            )
            for s in range(len(manifest["shards"]))
        ]
        return cls(shards, [e["start"] for e in manifest["shards"]], manifest)


def load_dense(directory: str | os.PathLike, **kw: Any) -> DenseIndex | ShardedIndex:
    """`ShardedIndex.load` when `directory` holds shards.json, else `DenseIndex.load` (same keywords)."""
    return ShardedIndex.load(directory, **kw) if is_sharded(directory) else DenseIndex.load(directory, **kw)


def flat_rows(directory: str | os.PathLike, start: int, stop: int, **kw: Any) -> np.ndarray:
    """The stored vectors of chunks start..stop-1 from a flat index directory, sharded or not:
    (stop - start, d) float32, as the flat index holds them (centred ones as centred). What
    re-sharding a flat index on another number of processes reads; RalmError for other kinds."""
    d = Path(directory)
    if is_sharded(d):
        manifest = read_shards_manifest(d)
        parts = []
        for s, e in enumerate(manifest["shards"]):
            lo, hi = max(start, e["start"]), min(stop, e["stop"])
            if lo < hi:
                index = load_shard(d, manifest, s, **kw)
                _check_flat(index, d)
                parts.append(index.index.reconstruct_n(lo - e["start"], hi - lo))
                del index
        return np.concatenate(parts) if parts else np.empty((0, manifest["dim"]), np.float32)
    index = DenseIndex.load(d, **kw)
    _check_flat(index, d)
    return index.index.reconstruct_n(start, stop - start)


def _check_flat(index: DenseIndex, where: Path) -> None:
    if index.kind != "flat":
        raise RalmError(
            f"{where}: a {index.kind} index cannot be cut into other shards (only flat keeps its vectors); "
            "rebuild it, or resume on the number of processes it was built with"
        )


def load_rank_shards(
    directory: str | os.PathLike, rank: int, world: int, **kw: Any
) -> tuple[DenseIndex | ShardedIndex, int]:
    """(index, start): the contiguous group of shards rank `rank` of `world` searches, and its
    first chunk id. N shards over W <= N ranks: rank r takes shards shard_ranges(N, W)[r], so
    4 shards on 2 ranks are 2 each; one shard is a DenseIndex, several a ShardedIndex whose ids
    count from `start` (what DistributedShardSearch wants)."""
    d = Path(directory)
    manifest = read_shards_manifest(d)
    check_fingerprints(d, manifest, kw.get("docstore_fingerprint"), kw.get("encoder_fingerprint"))
    n_shards = len(manifest["shards"])
    if world > n_shards:
        raise RalmError(f"{d}: {n_shards} shards for {world} processes; build at least {world} shards")
    lo, hi = shard_ranges(n_shards, world)[rank]
    shards = [load_shard(d, manifest, s, **kw) for s in range(lo, hi)]
    start = manifest["shards"][lo]["start"]
    if len(shards) == 1:
        return shards[0], start
    local = [manifest["shards"][s]["start"] - start for s in range(lo, hi)]
    return ShardedIndex(shards, local, manifest), start
