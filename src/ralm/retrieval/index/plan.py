"""Index kinds, their parameters and defaults, and the plan (memory, build time) before a build.

No FAISS here: `estimate` and `auto_kind` answer from N and d alone (see ralm.retrieval.index.dense for
what each kind is). The byte counts follow FAISS's storage (codes, 8-byte ids in inverted lists,
HNSW links, centroids).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ralm.errors import RalmError

KINDS = ("flat", "ivf-flat", "hnsw", "sq8", "ivf-pq", "sq6", "sq4")
SQ_BITS = {"sq8": 8, "sq6": 6, "sq4": 4}

PARAMS = {
    "flat": {},
    "ivf-flat": {"nlist": None, "nprobe": 16, "train_size": None},
    "ivf-pq": {"nlist": None, "nprobe": 16, "m": None, "nbits": 8, "train_size": None},
    "sq8": {"train_size": 100_000},
    "sq6": {"train_size": 100_000},
    "sq4": {"train_size": 100_000},
    "hnsw": {"M": 32, "ef_construction": 80, "ef_search": 128},
}
"""Accepted parameters per backend and their defaults (None: chosen from N and d)."""


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _default_nlist(n: int) -> int:
    """About 4*sqrt(N) lists, at most N/39 (FAISS wants >= 39 training points per list), 1..65536."""
    return int(max(1, min(round(4 * math.sqrt(n)), n // 39, 65_536)))


def _default_m(d: int) -> int:
    """PQ sub-quantisers: the largest divisor of d up to d/2, i.e. 2 dims per sub-quantiser.

    Measured on MiniLM (d=384, 5,409 enwiki chunks) in benchmarks/retrieval/compressed_index.py, recall@10
    vs exact for trivia questions / chunk queries: m=192 0.85 / 0.96 at nprobe 16, 0.94 / 0.97
    probing every list (the quantisation, not the probing, is the limit); m=96 at most 0.82 / 0.90.
    4.9x smaller than flat at that size (codes + 8-byte ids + centroids + codebooks), ~7.7x on
    large corpora. Where recall matters more than size, sq6 or sq8 do better (0.97 / 0.99).
    """
    for m in range(max(1, d // 2), 0, -1):
        if d % m == 0:
            return m
    return 1


def resolve_params(kind: str, n: int, d: int, params: dict[str, Any]) -> dict[str, Any]:
    """The backend's parameters with the defaults filled in from N and d; RalmError for unknown ones."""
    if kind not in PARAMS:
        raise RalmError(f"unknown index kind {kind!r}; choose one of {', '.join(KINDS)}")
    allowed = PARAMS[kind]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise RalmError(
            f"unknown parameter(s) {', '.join(unknown)} for a {kind} index; "
            f"accepted: {', '.join(allowed) or 'none'}"
        )
    out = {**allowed, **{key: v for key, v in params.items() if v is not None}}
    for key, v in out.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
            raise RalmError(f"{kind} parameter {key} must be a positive integer, got {v!r}")
        if v is not None:
            out[key] = int(v)
    if kind in ("ivf-flat", "ivf-pq"):
        if out["nlist"] is None:
            out["nlist"] = _default_nlist(n)
        out["nprobe"] = min(out["nprobe"], out["nlist"])
    if kind == "ivf-pq":
        if out["m"] is None:
            out["m"] = _default_m(d)
        if d % out["m"]:
            raise RalmError(f"ivf-pq parameter m={out['m']} must divide the dimension d={d}")
        if out["nbits"] > 16:
            raise RalmError(f"ivf-pq parameter nbits={out['nbits']} must be at most 16 (8 is usual)")
    if kind in ("ivf-flat", "ivf-pq") and out["train_size"] is None:
        need = 64 * out["nlist"]
        if kind == "ivf-pq":
            need = max(need, 64 * 2 ** out["nbits"])
        out["train_size"] = int(min(max(need, 10_000), 1_000_000))
    return out


def min_train_vectors(kind: str, params: dict[str, Any]) -> int:
    """The fewest vectors FAISS can train this backend on."""
    if kind == "ivf-flat":
        return params["nlist"]
    if kind == "ivf-pq":
        return max(params["nlist"], 2 ** params["nbits"])
    if kind in SQ_BITS:
        return 1
    return 0


def estimate(kind: str, n: int, d: int, **params: Any) -> dict[str, Any]:
    """Memory and a rough build-time class of an index before building it.

    Returns {kind, n, d, params, bytes, bytes_per_vector, memory ("1.2 GiB"), flat_bytes,
    ratio_vs_flat, build_time ("seconds" | "minutes" | "hours" | "days"), train_vectors, text}.
    The byte counts follow FAISS's storage (codes, 8-byte ids in inverted lists, HNSW links,
    centroids); the build-time class assumes ~5e10 float operations per second (a few CPU cores).
    `text` compares with flat as "4.0x smaller than flat", "1.2x larger than flat" (HNSW's links;
    a tiny IVF-PQ's codebooks) or "about the size of flat" (within 5%).
    """
    if n < 1 or d < 1:
        raise RalmError(f"cannot estimate an index of {n} vectors of dimension {d}")
    p = resolve_params(kind, n, d, params)
    flat = 4.0 * n * d
    if kind == "flat":
        size, flops = flat, n * d
    elif kind in SQ_BITS:
        size, flops = n * math.ceil(d * SQ_BITS[kind] / 8) + 8.0 * d, n * d * 2
    elif kind == "hnsw":
        links = 2 * p["M"] + p["M"] / max(p["M"] - 1, 1)  # level 0 has 2M links, upper levels ~M/(M-1)
        size = flat + n * (links * 4 + 8 + 4)
        flops = n * d * p["ef_construction"] * p["M"] * math.log2(max(n, 2))
    else:
        nlist = p["nlist"]
        train = min(n, p["train_size"])
        size = nlist * d * 4.0 + n * 8.0  # centroids + ids
        flops = 25 * train * nlist * d + n * nlist * d  # k-means iterations + assignment
        if kind == "ivf-flat":
            size += flat
        else:
            size += n * math.ceil(p["m"] * p["nbits"] / 8) + d * 2 ** p["nbits"] * 4.0
            flops += 25 * train * 2 ** p["nbits"] * d + n * 2 ** p["nbits"] * d
    seconds = flops / 5e10
    build = (
        "seconds" if seconds < 60 else "minutes" if seconds < 3600 else "hours" if seconds < 86400 else "days"
    )
    size = int(size)
    train_vectors = min(n, p.get("train_size") or 0) if kind in ("ivf-flat", "ivf-pq", *SQ_BITS) else 0
    return {
        "kind": kind,
        "n": int(n),
        "d": int(d),
        "params": p,
        "bytes": size,
        "bytes_per_vector": size / n,
        "memory": _human_bytes(size),
        "flat_bytes": int(flat),
        "ratio_vs_flat": flat / size,
        "build_time": build,
        "train_vectors": train_vectors,
        "text": (
            f"{kind} index of {n:,} x {d}: about {_human_bytes(size)} in memory"
            + ("" if kind == "flat" else f" ({vs_flat(size, flat)})")
            + f", build time: {build}"
        ),
    }


def vs_flat(size: float, flat: float) -> str:
    """'4.0x smaller than flat', '1.2x larger than flat', or 'about the size of flat' (within 5%)."""
    if size < flat and f"{flat / size:.1f}" != "1.0":
        return f"{flat / size:.1f}x smaller than flat"
    if size > flat and f"{size / flat:.1f}" != "1.0":
        return f"{size / flat:.1f}x larger than flat"
    return "about the size of flat"


AUTO_FLAT_MAX_BYTES = 4 * 2**30  # "auto": exact search while the flat index stays under 4 GiB
AUTO_SQ8_MAX_BYTES = 16 * 2**30  # then 8-bit scalar quantisation (4x smaller) up to this flat size


def auto_kind(n: int, d: int) -> str:
    """The index kind "auto" picks for n vectors of dimension d: flat (exact) while it needs at most
    4 GiB, sq8 (recall@10 ~0.99, 4x smaller) while flat would need at most 16 GiB, else ivf-pq.

    Example: 735k x 768 (BRENT's Norwegian Wikipedia) -> flat (2.1 GiB); 13M x 128 (REALM) -> sq8.
    """
    flat = 4.0 * n * d
    if flat <= AUTO_FLAT_MAX_BYTES:
        return "flat"
    return "sq8" if flat <= AUTO_SQ8_MAX_BYTES else "ivf-pq"


def plan_shards(kind: str, n: int, d: int, shards: int, **params: Any) -> dict[str, Any]:
    """`estimate` for an index split into `shards` shards of contiguous ids (one per process or
    host): the largest shard's memory, what each process holds, beside the whole index's.

    Returns {kind, n, d, shards, shard_n (largest shard's chunks), shard_bytes, total_bytes,
    shard_memory, total_memory, text}. Each shard of an IVF/PQ/SQ kind trains its own quantiser
    (its own nlist from its size), so the shards' total can differ slightly from one index's.

    Example: plan_shards("flat", 13_000_000, 128, 8)["text"] -> 'flat index of 13,000,000 x 128 in
    8 shards of up to 1,625,000: about 793.5 MiB per shard, 6.2 GiB in all, build time: seconds'.
    """
    if shards < 1 or shards > n:
        raise RalmError(f"--shards {shards}: must be between 1 and the {n} chunks")
    base, extra = divmod(n, shards)
    big = base + (1 if extra else 0)
    one = estimate(kind, big, d, **params)
    sizes = [(big, extra), (base, shards - extra)] if extra else [(base, shards)]
    total = sum(estimate(kind, m, d, **params)["bytes"] * c for m, c in sizes)
    return {
        "kind": kind,
        "n": int(n),
        "d": int(d),
        "shards": int(shards),
        "shard_n": int(big),
        "shard_bytes": one["bytes"],
        "total_bytes": int(total),
        "shard_memory": one["memory"],
        "total_memory": _human_bytes(total),
        "text": (
            f"{kind} index of {n:,} x {d} in {shards} shards of up to {big:,}: about {one['memory']} per shard, "
            f"{_human_bytes(total)} in all, build time: {one['build_time']}"
        ),
    }
