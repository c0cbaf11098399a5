"""Dense maximum-inner-product search over chunk embeddings with FAISS (REALM's MIPS, BRENT's index).

`DenseIndex` wraps one FAISS index whose row i is chunk i of a DocStore (vectors are added in id
order, so a plain `faiss.read_index` of the saved file returns chunk ids too). Backends by name:

    flat      exact inner product (IndexFlatIP), the default, as in BRENT
    ivf-flat  inverted lists of raw vectors: nlist, nprobe
    hnsw      graph search (inner-product metric): M, ef_construction, ef_search
    sq8       8-bit scalar quantiser, exhaustive scan: about 4x smaller than flat
    sq6, sq4  6- and 4-bit scalar quantisers: about 5.3x and 8x smaller (sq6 keeps recall@10
              >= 0.95 on MiniLM embeddings, see benchmarks/compressed_index.py)
    ivf-pq    inverted lists of product-quantised codes (m bytes per vector at nbits=8): for
              corpora whose raw vectors do not fit in memory; `load(..., mmap=True)` leaves
              the file on disk, memory-mapped

`search` returns exactly k results per query whenever the index has k chunks that are not
excluded for that query (REALM's "prohibit trivial retrievals"): it asks FAISS for
k + max|excluded| + 1 candidates, drops excluded ids, and widens the search (more candidates,
more IVF probes, a larger HNSW beam) for the queries that came back short, down to exact
re-scoring as the last resort. Results are best first with ties broken by the lower id; the one
extra candidate lets a tie at the k-th place be seen and resolved the same way.

Scores are those of the index: exact inner products for flat, ivf-flat and hnsw, approximate
ones (of the quantised vectors) for sq8/sq6/sq4 and ivf-pq. With metric "l2" the score is the negative
squared distance, so higher is still better.

Saved as `index.faiss` (`faiss.write_index`) plus `index.json`, a manifest with the backend, its
parameters and the fingerprints of the DocStore and of the encoder that made the vectors; loading
checks both. Left out: adding to or removing from a built index (REALM and BRENT rebuild it after
re-embedding), sharding one index over several machines, and training IVF on the GPU.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, SearchResult

log = logging.getLogger(__name__)

KINDS = ("flat", "ivf-flat", "hnsw", "sq8", "ivf-pq", "sq6", "sq4")
SQ_BITS = {"sq8": 8, "sq6": 6, "sq4": 4}
METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
INDEX_FILE = "index.faiss"
MANIFEST_FILE = "index.json"
FORMAT = "ralm-dense-index"
FORMAT_VERSION = 1
ADD_BATCH = 65_536  # vectors converted to float32 and added at a time (memmap-friendly)
GPU_MAX_K = 2048  # FAISS GPU limit on k and nprobe; larger searches run on the CPU copy

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


# ----------------------------------------------------------------------------- shared helpers
def prepare_exclude(exclude_ids: ExcludeIds, n_queries: int, n_items: int, k: int) -> np.ndarray | None:
    """Check k and the exclusions of a query batch; returns them as a (Q, E) int64 array padded with -1.

    `exclude_ids`: None, or one entry per query: None, an id, or a sequence of ids (a (Q,) or
    (Q, E) integer array also works). Ids outside 0..n_items-1 are ignored (nothing to exclude).
    Raises RalmError when k < 1 or when some query has fewer than k chunks left to return.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise RalmError(f"k must be a positive integer, got {k!r}")
    k = int(k)
    if k > n_items:
        raise RalmError(f"k={k} is more than the N={n_items} chunks of the index; ask for k <= {n_items}")
    if exclude_ids is None:
        return None
    arr = _exclude_array(exclude_ids, n_queries)
    width = arr.shape[1]
    if width == 0:
        return None
    if k + width > n_items:  # some query might have fewer than k chunks left: count them
        s = np.sort(np.where((arr >= 0) & (arr < n_items), arr, -1), axis=1)
        distinct = s >= 0
        distinct[:, 1:] &= s[:, 1:] != s[:, :-1]
        counts = distinct.sum(axis=1)
        worst = int(np.argmax(counts))
        if n_items - counts[worst] < k:
            raise RalmError(
                f"k={k} is more than the {n_items - counts[worst]} chunks left for query {worst} "
                f"(N={n_items}, {counts[worst]} excluded); ask for fewer results or exclude fewer ids"
            )
    return arr


def _exclude_array(exclude_ids: ExcludeIds, n_queries: int) -> np.ndarray:
    arr = None
    if isinstance(exclude_ids, np.ndarray) and exclude_ids.dtype.kind in "iu":
        arr = exclude_ids
    elif not isinstance(exclude_ids, (str, bytes)):
        try:
            cand = np.asarray(exclude_ids)
        except (ValueError, TypeError):  # ragged: different numbers of ids per query
            cand = None
        if cand is not None and cand.dtype.kind in "iu" and cand.ndim in (1, 2):
            arr = cand
    if arr is not None:
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or len(arr) != n_queries:
            raise RalmError(f"exclude_ids has {len(arr)} entries for {n_queries} queries; give one per query")
        return arr.astype(np.int64, copy=False)
    try:
        n = len(exclude_ids)  # type: ignore[arg-type]
    except TypeError:
        raise RalmError(
            f"exclude_ids must be a list with one entry (None, an id or a list of ids) per query, "
            f"got {type(exclude_ids).__name__}"
        ) from None
    if n != n_queries:
        raise RalmError(f"exclude_ids has {n} entries for {n_queries} queries; give one per query")
    rows: list[list[int]] = []
    for i, e in enumerate(exclude_ids):  # type: ignore[union-attr]
        if e is None:
            rows.append([])
        elif isinstance(e, (int, np.integer)) and not isinstance(e, bool):
            rows.append([int(e)])
        else:
            try:
                row = [int(x) for x in e if not isinstance(x, bool)]
                if len(row) != len(e):
                    raise TypeError
            except (TypeError, ValueError):
                raise RalmError(
                    f"exclude_ids[{i}] must be None, an integer id or a list of ids, got {e!r}"
                ) from None
            rows.append(row)
    width = max((len(r) for r in rows), default=0)
    out = np.full((n_queries, width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def filter_excluded(
    ids: np.ndarray, scores: np.ndarray, exclude: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top k of candidate rows after dropping excluded and missing (-1) ids.

    `ids`, `scores`: (Q, C) candidates (any order, higher score is better); `exclude`: (Q, E)
    from `prepare_exclude` or None. Returns ids (Q, k) int64 and scores (Q, k) float32, best first
    with ties broken by the lower id, and n_valid (Q,) the number of usable candidates; rows with
    n_valid < k are padded with id -1 and score -inf.
    """
    ids = np.asarray(ids, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float32)
    q, c = ids.shape
    if (
        exclude is None
        and c >= k
        and bool((ids[:, -1] >= 0).all())  # FAISS puts missing results (-1) last
        and (c == 1 or bool((scores[:, 1:] < scores[:, :-1]).all()))
    ):  # the common case: nothing to drop and already in order
        return ids[:, :k].copy(), scores[:, :k].copy(), np.full(q, c)
    valid = ids >= 0
    if exclude is not None and exclude.shape[1]:
        if exclude.shape[1] == 1:
            valid &= ids != exclude
        elif exclude.shape[1] <= 64:
            valid &= ~(ids[:, :, None] == exclude[:, None, :]).any(axis=2)
        else:
            for i in range(q):
                valid[i] &= ~np.isin(ids[i], exclude[i])
    all_valid = bool(valid.all())
    n_valid = np.full(q, c) if all_valid else valid.sum(axis=1)
    width = min(k, c)
    if c > 1 and bool((scores[:, 1:] >= scores[:, :-1]).any()):
        # Ties or not in order: sort by (valid first, score desc, id asc).
        order = np.lexsort((ids, -scores, ~valid), axis=1)[:, :width]
    elif not all_valid:
        # Strictly descending already (FAISS's order): move the valid ones forward, keeping order.
        order = np.argsort(~valid, axis=1, kind="stable")[:, :width]
    else:
        order = None
    if order is None:
        top_ids, top_scores = ids[:, :width].copy(), scores[:, :width].copy()
    else:
        flat = order + np.arange(0, q * c, c)[:, None]  # cheaper than take_along_axis
        top_ids, top_scores = ids.ravel()[flat], scores.ravel()[flat]
    if width < k:
        pad = k - width
        top_ids = np.pad(top_ids, ((0, 0), (0, pad)), constant_values=-1)
        top_scores = np.pad(top_scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    if (not all_valid or width < k) and int(n_valid.min()) < k:
        cols = np.arange(k)[None, :] >= n_valid[:, None]
        top_ids[cols] = -1
        top_scores[cols] = -np.inf
    return top_ids, top_scores, n_valid


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

    Measured on MiniLM (d=384, 5,409 enwiki chunks) in benchmarks/compressed_index.py, recall@10
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
            + ("" if kind == "flat" else f" ({flat / size:.1f}x smaller than flat)")
            + f", build time: {build}"
        ),
    }


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


def _check_vectors(vectors: Any) -> np.ndarray:
    if not hasattr(vectors, "shape") or not hasattr(vectors, "dtype"):
        vectors = np.asarray(vectors)
    if len(vectors.shape) != 2:
        raise RalmError(f"vectors must be a 2-D (N, d) array, got shape {tuple(vectors.shape)}")
    if vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise RalmError(f"cannot build an index from an empty array of shape {tuple(vectors.shape)}")
    if np.dtype(vectors.dtype).kind != "f":
        raise RalmError(f"vectors must be float32 or float16, got {vectors.dtype}")
    return vectors


def _batch32(vectors: np.ndarray, start: int, stop: int) -> np.ndarray:
    batch = np.ascontiguousarray(vectors[start:stop], dtype=np.float32)
    if not np.isfinite(batch).all():
        bad = start + int(np.argwhere(~np.isfinite(batch))[0][0])
        raise RalmError(f"vector {bad} contains NaN or inf; re-embed the corpus")
    return batch


def _wants_gpu(device: str) -> bool:
    if device not in ("cpu", "cuda", "auto"):
        raise RalmError(f"device must be 'cpu', 'cuda' or 'auto', got {device!r}")
    if device == "cpu":
        return False
    n_gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if n_gpus == 0 and device == "cuda":
        log.warning("device='cuda' but FAISS sees no GPU (faiss-cpu installed?); searching on the CPU")
    return n_gpus > 0


# ----------------------------------------------------------------------------- the index
class DenseIndex:
    """A FAISS index over the chunk embeddings of one DocStore; row i is chunk i.

    Build with `DenseIndex.build(vectors, kind=..., docstore_fingerprint=..., encoder_fingerprint=...)`
    or `DenseIndex.load(dir)`; search with `search(query_vectors, k, exclude_ids)`.
    `index` is the CPU FAISS index (what `save` writes); searches run on a GPU copy when one
    was asked for and FAISS has a GPU.
    """

    def __init__(self, index: faiss.Index, manifest: dict[str, Any], device: str = "cpu") -> None:
        self.index = index
        self.manifest = manifest
        self.kind: str = manifest["kind"]
        self.metric: str = manifest["metric"]
        self.params: dict[str, Any] = dict(manifest["params"])
        self._ivf = faiss.extract_index_ivf(index) if self.kind in ("ivf-flat", "ivf-pq") else None
        self._memory: int | None = None
        self.set_search_params()
        self._search_index = index
        self.device = "cpu"
        if _wants_gpu(device):
            self._to_gpu()

    # -- properties
    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def count(self) -> int:
        return int(self.index.ntotal)

    def __len__(self) -> int:
        return self.count

    @property
    def docstore_fingerprint(self) -> str:
        return self.manifest["docstore_fingerprint"]

    @property
    def encoder_fingerprint(self) -> str:
        return self.manifest["encoder_fingerprint"]

    def __repr__(self) -> str:
        return f"DenseIndex(kind={self.kind!r}, count={self.count}, dim={self.dim}, device={self.device!r})"

    # -- build
    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        *,
        kind: str = "flat",
        metric: str = "ip",
        docstore_fingerprint: str,
        encoder_fingerprint: str,
        device: str = "cpu",
        seed: int = 0,
        batch_size: int = ADD_BATCH,
        progress: Callable[[int, int], None] | None = None,
        **params: Any,
    ) -> DenseIndex:
        """Index `vectors` (N, d), float32 or float16 (a memmap is read batch by batch).

        kind: one of KINDS; metric: "ip" (inner product, REALM/BRENT) or "l2"; params: see PARAMS
        (defaults from N and d). Training samples for ivf-*/sq* are drawn with `seed`.
        `progress(done, total)` is called after each added batch.
        """
        vectors = _check_vectors(vectors)
        if metric not in METRICS:
            raise RalmError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
        for name, fp in (
            ("docstore_fingerprint", docstore_fingerprint),
            ("encoder_fingerprint", encoder_fingerprint),
        ):
            if not isinstance(fp, str) or not fp:
                raise RalmError(
                    f"{name} must be a non-empty string (it ties the index to what it was built from)"
                )
        n, d = (int(x) for x in vectors.shape)
        p = resolve_params(kind, n, d, params)
        need = min_train_vectors(kind, p)
        if n < need:
            detail = {
                "ivf-flat": f"nlist={p.get('nlist')} lists",
                "ivf-pq": f"nlist={p.get('nlist')} lists and 2**nbits={2 ** p.get('nbits', 8)} PQ centroids",
            }.get(kind, "")
            raise RalmError(
                f"a {kind} index with {detail} needs at least {need} vectors to train, got {n}; "
                f"use kind='flat' or smaller parameters"
            )
        faiss_metric = METRICS[metric]
        if kind == "flat":
            index = faiss.IndexFlatIP(d) if metric == "ip" else faiss.IndexFlatL2(d)
        elif kind == "ivf-flat":
            index = faiss.index_factory(d, f"IVF{p['nlist']},Flat", faiss_metric)
        elif kind == "ivf-pq":
            index = faiss.index_factory(d, f"IVF{p['nlist']},PQ{p['m']}x{p['nbits']}", faiss_metric)
        elif kind in SQ_BITS:
            index = faiss.index_factory(d, f"SQ{SQ_BITS[kind]}", faiss_metric)
        else:
            index = faiss.index_factory(d, f"HNSW{p['M']}", faiss_metric)
            index.hnsw.efConstruction = p["ef_construction"]
        if not index.is_trained:
            size = min(n, p["train_size"])
            rng = np.random.default_rng(seed)
            sample = np.sort(rng.choice(n, size=size, replace=False)) if size < n else np.arange(n)
            train = np.ascontiguousarray(vectors[sample], dtype=np.float32)
            if not np.isfinite(train).all():
                raise RalmError("the training vectors contain NaN or inf; re-embed the corpus")
            if kind in ("ivf-flat", "ivf-pq"):
                # One warning of ours instead of FAISS's per-k-means one (192 lines for PQ192).
                ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
                if kind == "ivf-pq":
                    # The factory turns on polysemous training (codes reordered for Hamming
                    # filtering, which search never uses): 30+ s of annealing for nothing.
                    ivf.do_polysemous_training = False
                cps = [ivf.cp] + ([ivf.pq.cp] if kind == "ivf-pq" else [])
                for cp in cps:
                    cp.seed = seed + 1234
                    cp.min_points_per_centroid = 1
                centroids = max(p["nlist"], 2 ** p.get("nbits", 0))
                if size < 39 * centroids:
                    log.warning(
                        "training %s on %d vectors, fewer than the 39 per centroid FAISS recommends "
                        "(%d centroids); recall may suffer",
                        kind,
                        size,
                        centroids,
                    )
            index.train(train)
            p["train_size"] = size
            del train
        for start in range(0, n, batch_size):
            stop = min(n, start + batch_size)
            index.add(_batch32(vectors, start, stop))
            if progress is not None:
                progress(stop, n)
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "kind": kind,
            "metric": metric,
            "params": {**p, "seed": seed} if "train_size" in p else p,
            "dim": d,
            "count": n,
            "docstore_fingerprint": docstore_fingerprint,
            "encoder_fingerprint": encoder_fingerprint,
            "faiss_version": faiss.__version__,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        return cls(index, manifest, device=device)

    # -- search parameters and devices
    def set_search_params(self, *, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Change the speed/recall trade-off of an approximate index (kept in the manifest on save)."""
        if nprobe is not None:
            if self._ivf is None:
                raise RalmError(f"nprobe applies to ivf-* indexes, not to {self.kind}")
            self.params["nprobe"] = int(min(max(1, nprobe), self._ivf.nlist))
        if ef_search is not None:
            if self.kind != "hnsw":
                raise RalmError(f"ef_search applies to hnsw indexes, not to {self.kind}")
            self.params["ef_search"] = int(max(1, ef_search))
        if self._ivf is not None:
            self._ivf.nprobe = int(self.params.get("nprobe", 16))
        if self.kind == "hnsw":
            self.index.hnsw.efSearch = int(self.params.get("ef_search", 128))
        if getattr(self, "device", "cpu") == "cuda":
            self._to_gpu()

    def _to_gpu(self) -> None:
        try:
            if faiss.get_num_gpus() > 1:
                gpu = faiss.index_cpu_to_all_gpus(self.index)
            else:
                gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, self.index)
            if self._ivf is not None:
                faiss.GpuParameterSpace().set_index_parameter(gpu, "nprobe", min(self._ivf.nprobe, GPU_MAX_K))
        except (RuntimeError, AttributeError) as exc:  # e.g. HNSW and flat SQ have no GPU version
            log.warning("FAISS cannot move a %s index to the GPU (%s); searching on the CPU", self.kind, exc)
            self._search_index, self.device = self.index, "cpu"
            return
        self._search_index, self.device = gpu, "cuda"

    # -- search
    def _check_queries(self, query_vectors: Any) -> np.ndarray:
        q = query_vectors if isinstance(query_vectors, np.ndarray) else np.asarray(query_vectors)
        if q.ndim != 2:
            raise RalmError(f"query vectors must be a 2-D (Q, d) array, got shape {q.shape}")
        if q.shape[0] == 0:
            raise RalmError("empty query batch: pass at least one query vector")
        if q.shape[1] != self.dim:
            raise RalmError(
                f"query vectors have dimension {q.shape[1]} but the index has {self.dim}; "
                "embed the queries with the encoder the index was built with"
            )
        if q.dtype.kind != "f":
            raise RalmError(f"query vectors must be floating point, got {q.dtype}")
        q = np.ascontiguousarray(q, dtype=np.float32)
        if not np.isfinite(q).all():
            raise RalmError("query vectors contain NaN or inf")
        return q

    def _raw_search(self, q: np.ndarray, kp: int, round_: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS search; rounds > 0 widen the approximate search (more probes, larger beam)."""
        params = None
        if round_ > 0 and self._ivf is not None:
            params = faiss.SearchParametersIVF(nprobe=self._nprobe(round_))
        elif self.kind == "hnsw" and kp > self.index.hnsw.efSearch:
            params = faiss.SearchParametersHNSW(efSearch=kp)
        index = self._search_index
        if index is not self.index and (params is not None or kp > GPU_MAX_K):
            index = self.index  # rare widened searches run on the CPU copy
        if params is None:
            dist, ids = index.search(q, kp)
        else:
            dist, ids = index.search(q, kp, params=params)
        return (-dist if self.metric == "l2" else dist), ids

    def _nprobe(self, round_: int) -> int:
        assert self._ivf is not None
        return int(min(self._ivf.nlist, self._ivf.nprobe * 2**round_))

    def search(self, query_vectors: np.ndarray, k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Top-k chunk ids and scores for each query vector, best first (ties: lower id first).

        query_vectors: (Q, d); exclude_ids: per query None, an id or a list of ids never to return.
        Always k results per query; RalmError when k exceeds the chunks left after exclusion,
        for an empty batch or a wrong dimension.
        """
        q = self._check_queries(query_vectors)
        n = self.count
        excl = prepare_exclude(exclude_ids, len(q), n, k)
        kp = min(n, k + (0 if excl is None else excl.shape[1]) + 1)
        scores, ids = self._raw_search(q, kp, 0)
        top_ids, top_scores, done = self._select(ids, scores, excl, k, kp, 0)
        if done is None:  # the common case: every query complete in one search
            return SearchResult(ids=top_ids, scores=top_scores)
        # Widen the search for the queries that came back short (or with a tie at the k-th place).
        rows = np.flatnonzero(~done)
        round_ = 0
        while rows.size:
            kp = min(n, kp * 2)
            round_ += 1
            sub_excl = None if excl is None else excl[rows]
            scores, ids = self._raw_search(q[rows], kp, round_)
            ids_r, scores_r, done_r = self._select(ids, scores, sub_excl, k, kp, round_)
            ok = rows if done_r is None else rows[done_r]
            top_ids[ok] = ids_r if done_r is None else ids_r[done_r]
            top_scores[ok] = scores_r if done_r is None else scores_r[done_r]
            if done_r is None:
                break
            rows = rows[~done_r]
            if rows.size and self._final(kp, round_):
                # Only an HNSW graph can miss vectors at this point: score the rest exactly.
                top_ids[rows], top_scores[rows] = self._exact(
                    q[rows], None if excl is None else excl[rows], k
                )
                break
        return SearchResult(ids=top_ids, scores=top_scores)

    def _final(self, kp: int, round_: int) -> bool:
        """Whether a search with kp candidates in this round already saw every vector it can."""
        return kp >= self.count and (self._ivf is None or self._nprobe(round_) >= self._ivf.nlist)

    def _select(
        self, ids: np.ndarray, scores: np.ndarray, excl: np.ndarray | None, k: int, kp: int, round_: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """filter_excluded plus which rows are done (None: all of them)."""
        c = ids.shape[1]
        # Fast path (most searches): nothing missing, scores strictly descending, at most one
        # excluded id per row. The k-th kept candidate then sits before the last one and scores
        # higher, so there is no tie to resolve and every row is done.
        fits = (excl is None and c > k) or (excl is not None and excl.shape[1] == 1 and c > k + 1)
        if fits and bool((ids[:, -1] >= 0).all()) and bool((scores[:, 1:] < scores[:, :-1]).all()):
            if excl is None:
                return ids[:, :k].copy(), scores[:, :k].copy(), None
            hit = ids == excl
            pos = np.where(hit.any(axis=1), hit.argmax(axis=1), c)
            cols = np.arange(k)
            flat = cols + (cols >= pos[:, None]) + np.arange(0, ids.size, c)[:, None]
            return ids.ravel()[flat], scores.ravel()[flat], None
        top_ids, top_scores, n_valid = filter_excluded(ids, scores, excl, k)
        done = n_valid >= k
        if kp > k and not self._final(kp, round_):
            # A tie between the k-th result and the last candidate may continue past the
            # candidates; those rows search further so that the lower ids win it.
            last = (
                scores[:, -1]
                if bool((ids[:, -1] >= 0).all())
                else np.where(ids >= 0, scores, np.inf).min(axis=1)
            )
            done &= top_scores[:, k - 1] > last
        return top_ids, top_scores, None if bool(done.all()) else done

    def _exact(self, q: np.ndarray, excl: np.ndarray | None, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exhaustive scores of all stored (reconstructed) vectors; the last resort of `search`."""
        if self._ivf is not None:
            self._ivf.make_direct_map()
        n = self.count
        scores = np.empty((len(q), n), dtype=np.float32)
        for start in range(0, n, ADD_BATCH):
            stop = min(n, start + ADD_BATCH)
            x = self.index.reconstruct_n(start, stop - start)
            if self.metric == "ip":
                scores[:, start:stop] = q @ x.T
            else:
                scores[:, start:stop] = -((q * q).sum(1)[:, None] - 2 * q @ x.T + (x * x).sum(1)[None, :])
        ids = np.broadcast_to(np.arange(n, dtype=np.int64), scores.shape)
        top_ids, top_scores, _ = filter_excluded(ids, scores, excl, k)
        return top_ids, top_scores

    # -- size
    def memory_bytes(self) -> int:
        """Size of the serialized CPU index in bytes (what `save` writes and a load holds in memory)."""
        if self._memory is None:
            self._memory = int(faiss.serialize_index(self.index).nbytes)
        return self._memory

    # -- persistence
    def save(self, directory: str | os.PathLike) -> Path:
        """Write `index.faiss` and `index.json` into `directory` (files replaced atomically)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        tag = f".tmp-{os.getpid()}"
        tmp_index, tmp_manifest = d / (INDEX_FILE + tag), d / (MANIFEST_FILE + tag)
        try:
            faiss.write_index(self.index, str(tmp_index))
            manifest = {
                **self.manifest,
                "params": dict(self.params),
                "index_bytes": os.path.getsize(tmp_index),
            }
            tmp_manifest.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp_index, d / INDEX_FILE)
            os.replace(tmp_manifest, d / MANIFEST_FILE)
        finally:
            for t in (tmp_index, tmp_manifest):
                if t.exists():
                    t.unlink()
        self.manifest = manifest
        return d

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike,
        *,
        docstore_fingerprint: str | None = None,
        encoder_fingerprint: str | None = None,
        device: str = "cpu",
        mmap: bool = False,
    ) -> DenseIndex:
        """Read a saved index; with fingerprints given, check it was built from that DocStore/encoder.

        mmap=True maps the file read-only instead of reading it into memory (the codes of flat and
        sq*, the inverted lists of ivf-*: the OS pages in what searches touch).
        """
        d = Path(directory)
        mpath, ipath = d / MANIFEST_FILE, d / INDEX_FILE
        for p in (mpath, ipath):
            if not p.is_file():
                raise RalmError(f"{p}: no such file; build the index with `ralm index build`")
        manifest = read_manifest(mpath, FORMAT, FORMAT_VERSION, "index")
        check_fingerprints(d, manifest, docstore_fingerprint, encoder_fingerprint)
        size = manifest.get("index_bytes")
        if size is not None and os.path.getsize(ipath) != size:
            raise RalmError(
                f"{ipath} does not match {mpath.name} (an interrupted save?); rebuild it with `ralm index build`"
            )
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
        try:
            index = faiss.read_index(str(ipath), flags)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
            raise RalmError(
                f"{ipath}: FAISS cannot read it ({first}); rebuild it with `ralm index build`"
            ) from None
        if index.ntotal != manifest["count"] or index.d != manifest["dim"]:
            raise RalmError(
                f"{ipath} holds {index.ntotal} x {index.d} vectors but {mpath.name} says "
                f"{manifest['count']} x {manifest['dim']}; rebuild it with `ralm index build`"
            )
        return cls(index, manifest, device=device)


def read_manifest(mpath: Path, fmt: str, version: int, what: str) -> dict[str, Any]:
    """A saved index's JSON manifest, checked for its format name and a version this ralm reads."""
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RalmError(
            f"{mpath}: unreadable {what} manifest ({exc}); rebuild it with `ralm index build`"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise RalmError(f"{mpath}: not a {fmt} manifest; rebuild it with `ralm index build`")
    if manifest.get("version", 0) > version:
        raise RalmError(f"{mpath}: {what} format v{manifest['version']} is newer than this ralm")
    return manifest


def check_fingerprints(
    where: Path, manifest: dict[str, Any], docstore_fingerprint: str | None, encoder_fingerprint: str | None
) -> None:
    """RalmError when a given fingerprint differs from the one in an index manifest."""
    for what, key, given in (
        ("corpus", "docstore_fingerprint", docstore_fingerprint),
        ("encoder", "encoder_fingerprint", encoder_fingerprint),
    ):
        stored = manifest.get(key)
        if given is not None and stored != given:
            raise RalmError(
                f"index {where} was built from another {what} ({key.split('_')[0]} fingerprint "
                f"{str(stored)[:12]}… vs {given[:12]}…); rebuild it with `ralm index build`"
            )
