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

A corpus bigger than one host is split into shards, each a DenseIndex of a contiguous range of
chunk ids: see ralm.retrieval.sharded (the files, ShardedIndex) and ralm.retrieval.shard_merge.

Scores are those of the index: exact inner products for flat, ivf-flat and hnsw, approximate
ones (of the quantised vectors) for sq8/sq6/sq4 and ivf-pq. With metric "l2" the score is the negative
squared distance, so higher is still better.

Centring (`center=True`, a hubness reduction after Suzuki et al. 2013): the mean doc vector mu
is subtracted from every doc vector and every query vector, and both are re-normalised, so the
score is the cosine of the centred vectors. Chunks near the corpus mean ("hubs": short,
generic chunks that a mean-pooled encoder puts near every query) lose their pull. On the
bundled English MiniLM it lifts Danish recall@20 from 0.175 to 0.325 and English from 0.42
to 0.46 (benchmarks/retrieval_nordic.py). mu is stored in index.json and applied to queries
by `search`, so callers pass raw query vectors either way.

Saved as `index.faiss` (`faiss.write_index`) plus `index.json`, a manifest with the backend, its
parameters, the fingerprints of the DocStore and of the encoder that made the vectors, and the
size and XXH3-128 digest of index.faiss; loading checks all of them, the digest in the same pass
that reads the file (1.03x the time of a bare `faiss.read_index` of a 1.5 GB index; with
mmap=True the size only, `ralm index verify` hashes it): see ralm.retrieval.index_io. Left out: adding to or removing from a built index (REALM
and BRENT rebuild it after re-embedding) and training IVF on the GPU.

The module is split along its seams; everything stays importable from here:
    ralm.retrieval.index_plan   KINDS, PARAMS, resolve_params, estimate, auto_kind (no FAISS)
    ralm.retrieval.exclusion    prepare_exclude, filter_excluded (shared by every retriever)
    ralm.retrieval.index_io     save/load of the files, read_manifest, check_fingerprints
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import operator
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, SearchResult
from ralm.retrieval.exclusion import filter_excluded, prepare_exclude
from ralm.retrieval.index_io import (
    FORMAT,
    FORMAT_VERSION,
    INDEX_FILE,
    MANIFEST_FILE,
    check_fingerprints,
    read_index_files,
    read_manifest,
    write_index_files,
)
from ralm.retrieval.index_plan import (
    AUTO_FLAT_MAX_BYTES,
    AUTO_SQ8_MAX_BYTES,
    KINDS,
    PARAMS,
    SQ_BITS,
    auto_kind,
    estimate,
    min_train_vectors,
    resolve_params,
)

__all__ = [
    "ADD_BATCH",
    "AUTO_FLAT_MAX_BYTES",
    "AUTO_SQ8_MAX_BYTES",
    "FORMAT",
    "FORMAT_VERSION",
    "GPU_MAX_K",
    "INDEX_FILE",
    "KINDS",
    "MANIFEST_FILE",
    "METRICS",
    "PARAMS",
    "SQ_BITS",
    "DenseIndex",
    "auto_kind",
    "check_fingerprints",
    "estimate",
    "filter_excluded",
    "min_train_vectors",
    "prepare_exclude",
    "read_manifest",
    "resolve_params",
]

log = logging.getLogger(__name__)

METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
# ufunc methods called directly: ndarray.all()/.min() go through Python wrappers that cost more than
# the reduction itself on a single query (benchmarks/search.py, batch size 1)
_ALL = np.logical_and.reduce
_MIN = np.minimum.reduce
_ROW0 = np.zeros((1, 1), dtype=np.intp)  # the row index of a single query, for fancy indexing
_LESS = np.less
_F32 = np.dtype(np.float32)
ADD_BATCH = 65_536  # vectors converted to float32 and added at a time (memmap-friendly)
GPU_MAX_K = 2048  # FAISS GPU limit on k and nprobe; larger searches run on the CPU copy


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


def _batch32(vectors: np.ndarray, start: int, stop: int, center: np.ndarray | None = None) -> np.ndarray:
    batch = np.ascontiguousarray(vectors[start:stop], dtype=np.float32)
    if not np.isfinite(batch).all():
        bad = start + int(np.argwhere(~np.isfinite(batch))[0][0])
        raise RalmError(f"vector {bad} contains NaN or inf; re-embed the corpus")
    return batch if center is None else centre(batch, center)


def centre(v: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """(n, d) float32 rows minus mu, re-normalised to unit length (a zero row stays zero).

    Example: centre([[1, 0], [0, 1]], mu=[.5, .5]) -> [[.707, -.707], [-.707, .707]].
    """
    c = np.asarray(v, dtype=np.float32) - np.asarray(mu, dtype=np.float32)
    norms = np.linalg.norm(c, axis=1, keepdims=True)
    return np.ascontiguousarray(c / np.where(norms > 0, norms, 1.0), dtype=np.float32)


def mean_vector(vectors: np.ndarray, batch_size: int = ADD_BATCH) -> np.ndarray:
    """(d,) float32 mean of the rows of a (possibly memory-mapped) (N, d) array, summed in float64."""
    total = np.zeros(vectors.shape[1], dtype=np.float64)
    for start in range(0, len(vectors), batch_size):
        total += np.asarray(vectors[start : start + batch_size], dtype=np.float64).sum(0)
    return (total / len(vectors)).astype(np.float32)


def _wants_gpu(device: str) -> bool:
    if device not in ("cpu", "cuda", "auto"):
        raise RalmError(f"device must be 'cpu', 'cuda' or 'auto', got {device!r}")
    if device == "cpu":
        return False
    n_gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if n_gpus == 0 and device == "cuda":
        log.warning("device='cuda' but FAISS sees no GPU (faiss-cpu installed?); searching on the CPU")
    return n_gpus > 0


def _select_one(
    ids: np.ndarray, scores: np.ndarray, excl: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray, None] | None:
    """`DenseIndex._select`'s fast path for a single query, on Python lists: a dozen values, where
    each numpy call would cost more than the work (benchmarks/search.py, batch size 1). None when
    the row needs the general path: a missing candidate, a tie, or too few candidates.

    Example: ids [[7, 3, 9, 4]], scores [[.9, .8, .7, .6]], excl [[3]], k=2 -> ([[7, 9]], [[.9, .7]]).
    """
    row, s = ids[0].tolist(), scores[0].tolist()
    drop = 0 if excl is None else 1
    if len(row) <= k + drop or row[-1] < 0 or not all(map(operator.gt, s, s[1:])):
        return None  # FAISS pads a short row with -1 at the end; a tie needs the id order
    if excl is not None:
        e = int(excl[0, 0])
        if row[0] == e:  # the usual case (a chunk excluded from its own query): the next k
            return ids[:, 1 : k + 1], scores[:, 1 : k + 1], None
        if e in row[:k]:  # shift the candidates after it one place left (FAISS's fresh arrays)
            p = row.index(e)
            ids[0, p:k] = ids[0, p + 1 : k + 1]
            scores[0, p:k] = scores[0, p + 1 : k + 1]
    return ids[:, :k], scores[:, :k], None  # views of one row: C-contiguous, nobody else holds them


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
        self._dim, self._count = int(index.d), int(index.ntotal)  # a built index never changes size
        self.manifest = manifest
        self.kind: str = manifest["kind"]
        self.metric: str = manifest["metric"]
        self.params: dict[str, Any] = dict(manifest["params"])
        self._ivf = faiss.extract_index_ivf(index) if self.kind in ("ivf-flat", "ivf-pq") else None
        self._memory: int | None = None
        self.set_search_params()
        self._search_index = index
        mu = manifest.get("center")
        self.center: np.ndarray | None = None if mu is None else np.asarray(mu, dtype=np.float32)
        self.device = "cpu"
        if _wants_gpu(device):
            self._to_gpu()

    # -- properties
    @property
    def dim(self) -> int:
        return self._dim

    @property
    def count(self) -> int:
        return self._count

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
        center: bool | np.ndarray = False,
        **params: Any,
    ) -> DenseIndex:
        """Index `vectors` (N, d), float32 or float16 (a memmap is read batch by batch).

        kind: one of KINDS; metric: "ip" (inner product, REALM/BRENT) or "l2"; params: see PARAMS
        (defaults from N and d). Training samples for ivf-*/sq* are drawn with `seed`.
        `progress(done, total)` is called after each added batch. center: index centred,
        re-normalised vectors and centre queries the same way (see the module docstring); a (d,)
        array is the mean to centre on (a shard of a sharded index centres on the corpus mean).
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
        if isinstance(center, np.ndarray):
            mu: np.ndarray | None = np.asarray(center, dtype=np.float32).reshape(d)
        else:
            mu = mean_vector(vectors) if center else None
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
            if mu is not None:
                train = centre(train, mu)
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
            index.add(_batch32(vectors, start, stop, mu))
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
            **({"center": [float(x) for x in mu]} if mu is not None else {}),
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
        shape = q.shape
        if len(shape) != 2:
            raise RalmError(f"query vectors must be a 2-D (Q, d) array, got shape {shape}")
        if shape[0] == 0:
            raise RalmError("empty query batch: pass at least one query vector")
        if shape[1] != self._dim:
            raise RalmError(
                f"query vectors have dimension {shape[1]} but the index has {self._dim}; "
                "embed the queries with the encoder the index was built with"
            )
        if q.dtype is not _F32 or not q.flags.c_contiguous:
            if q.dtype.kind != "f":
                raise RalmError(f"query vectors must be floating point, got {q.dtype}")
            q = np.ascontiguousarray(q, dtype=np.float32)
        # NaN and inf in one BLAS call: NaN or inf in q makes q.q NaN or inf (quietly: no warning);
        # a finite q whose q.q overflows float32 (values over ~1e19, numpy warns) is told apart by
        # the exact check after it. Cheaper than isfinite(q).all() on one query (benchmarks/search.py).
        flat = q.reshape(-1)
        if not math.isfinite(flat.dot(flat)) and not _ALL(np.isfinite(flat)):
            raise RalmError("query vectors contain NaN or inf")
        return q if self.center is None else centre(q, self.center)

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
            # FAISS's own search, without its Python wrapper (index.search): the wrapper's checks
            # (2-D, float32, C-contiguous, dimension) are those _check_queries has already made
            n = q.shape[0]
            dist, ids = np.empty((n, kp), dtype=np.float32), np.empty((n, kp), dtype=np.int64)
            index.search_c(n, faiss.swig_ptr(q), kp, faiss.swig_ptr(dist), faiss.swig_ptr(ids))
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
        n = self._count
        excl = prepare_exclude(exclude_ids, len(q), n, k)
        kp = min(n, k + (0 if excl is None else excl.shape[1]) + 1)
        scores, ids = self._raw_search(q, kp, 0)
        if len(q) == 1 and (excl is None or excl.shape[1] == 1):  # one query: the shortest path
            one = _select_one(ids, scores, excl, k)
            if one is not None:
                return SearchResult(ids=one[0], scores=one[1])
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
        if (
            fits
            and _MIN(ids[:, -1], axis=None) >= 0
            and _ALL(_LESS(scores[:, 1:], scores[:, :-1]), axis=None)
        ):
            if excl is None:
                return ids[:, :k].copy(), scores[:, :k].copy(), None
            # a stable sort of "is excluded" moves the (at most one) excluded column to the end:
            # [7, 3, 9] excluding 3 -> columns [0, 2, 1] -> the first k of [7, 9, 3]
            keep = np.argsort(ids == excl, axis=1, kind="stable")[:, :k]
            rows = _ROW0 if len(ids) == 1 else np.arange(len(ids))[:, None]
            return ids[rows, keep], scores[rows, keep], None
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
        self.manifest = write_index_files(
            self.index, {**self.manifest, "params": dict(self.params)}, directory
        )
        return Path(directory)

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

        index.faiss is checked against the size and XXH3-128 digest in index.json, hashed while
        FAISS reads it (RalmError naming the file on a mismatch; an index saved before digests
        were recorded gets the size check only). mmap=True maps the file read-only instead of
        reading it into memory (the codes of flat and sq*, the inverted lists of ivf-*: the OS
        pages in what searches touch); its size is checked, its contents are not read, so not
        hashed (`ralm index verify` does).
        """
        index, manifest = read_index_files(
            directory,
            docstore_fingerprint=docstore_fingerprint,
            encoder_fingerprint=encoder_fingerprint,
            mmap=mmap,
        )
        return cls(index, manifest, device=device)
