"""Making a FAISS index out of (possibly memory-mapped) vectors, for `ralm.retrieval.index.dense.DenseIndex`.

`make_faiss_index` picks the FAISS structure of a ralm index kind (flat, ivf-flat, ivf-pq, sq8/6/4,
hnsw), trains it on a seeded sample where it needs training (k-means seeded, polysemous training
off, one warning of ours when the sample is small) and adds the vectors in float32 batches,
checking for NaN/inf. `centre` / `mean_vector` are the hubness reduction's maths (see
`ralm.retrieval.index.dense`).

Centring (`center=True`, a hubness reduction after Suzuki et al. 2013): the mean doc vector mu
is subtracted from every doc vector and every query vector, and both are re-normalised, so the
score is the cosine of the centred vectors. Chunks near the corpus mean ("hubs": short,
generic chunks that a mean-pooled encoder puts near every query) lose their pull. On the
bundled English MiniLM it lifts Danish recall@20 from 0.175 to 0.325 and English from 0.42
to 0.46 (benchmarks/retrieval/retrieval_nordic.py). mu is stored in index.json and applied to queries
by `search`, so callers pass raw query vectors either way.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import faiss
import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.exclusion import filter_excluded
from ralm.retrieval.index.plan import SQ_BITS

__all__ = [
    "ADD_BATCH",
    "GPU_MAX_K",
    "METRICS",
    "centre",
    "check_queries",
    "check_vectors",
    "exact_top_k",
    "gpu_copy",
    "make_faiss_index",
    "mean_vector",
    "wants_gpu",
]

log = logging.getLogger("ralm.retrieval.index.dense")
_ALL = np.logical_and.reduce  # the ufunc method: ndarray.all() costs more on one query
_F32 = np.dtype(np.float32)

METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
ADD_BATCH = 65_536  # vectors converted to float32 and added at a time (memmap-friendly)
GPU_MAX_K = 2048  # FAISS GPU limit on k and nprobe; larger searches run on the CPU copy


def check_vectors(vectors: Any) -> np.ndarray:
    if not hasattr(vectors, "shape") or not hasattr(vectors, "dtype"):
        vectors = np.asarray(vectors)
    if len(vectors.shape) != 2:
        raise RalmError(f"vectors must be a 2-D (N, d) array, got shape {tuple(vectors.shape)}")
    if vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise RalmError(f"cannot build an index from an empty array of shape {tuple(vectors.shape)}")
    if np.dtype(vectors.dtype).kind != "f":
        raise RalmError(f"vectors must be float32 or float16, got {vectors.dtype}")
    return vectors


def batch32(vectors: np.ndarray, start: int, stop: int, center: np.ndarray | None = None) -> np.ndarray:
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


def make_faiss_index(
    vectors: np.ndarray,
    kind: str,
    metric: str,
    p: dict[str, Any],
    mu: np.ndarray | None,
    *,
    seed: int = 0,
    batch_size: int = ADD_BATCH,
    progress: Callable[[int, int], None] | None = None,
) -> faiss.Index:
    """A FAISS index of `kind` over `vectors` (N, d): made from its factory string, trained on a
    seeded sample of at most p["train_size"] rows when it needs training (p["train_size"] is set
    to the sample's size), then filled batch by batch (centred on `mu` when given).
    `progress(done, total)` is called after each added batch."""
    n, d = (int(x) for x in vectors.shape)
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
        index.add(batch32(vectors, start, stop, mu))
        if progress is not None:
            progress(stop, n)
    return index


def wants_gpu(device: str) -> bool:
    """Whether `device` ("cpu", "cuda", "auto") asks for, and FAISS has, a GPU."""
    if device not in ("cpu", "cuda", "auto"):
        raise RalmError(f"device must be 'cpu', 'cuda' or 'auto', got {device!r}")
    if device == "cpu":
        return False
    n_gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if n_gpus == 0 and device == "cuda":
        log.warning("device='cuda' but FAISS sees no GPU (faiss-cpu installed?); searching on the CPU")
    return n_gpus > 0


def gpu_copy(index: faiss.Index, kind: str, nprobe: int | None) -> faiss.Index | None:
    """`index` copied to the GPU(s) (nprobe capped at GPU_MAX_K), or None with a warning when FAISS
    has no GPU version of it (HNSW, flat SQ)."""
    try:
        if faiss.get_num_gpus() > 1:
            gpu = faiss.index_cpu_to_all_gpus(index)
        else:
            gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
        if nprobe is not None:
            faiss.GpuParameterSpace().set_index_parameter(gpu, "nprobe", min(nprobe, GPU_MAX_K))
    except (RuntimeError, AttributeError) as exc:
        log.warning("FAISS cannot move a %s index to the GPU (%s); searching on the CPU", kind, exc)
        return None
    return gpu


def exact_top_k(
    index: faiss.Index, ivf, metric: str, q: np.ndarray, excl: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exhaustive scores of all stored (reconstructed) vectors; the last resort of `search`."""
    if ivf is not None:
        ivf.make_direct_map()
    n = index.ntotal
    scores = np.empty((len(q), n), dtype=np.float32)
    for start in range(0, n, ADD_BATCH):
        stop = min(n, start + ADD_BATCH)
        x = index.reconstruct_n(start, stop - start)
        if metric == "ip":
            scores[:, start:stop] = q @ x.T
        else:
            scores[:, start:stop] = -((q * q).sum(1)[:, None] - 2 * q @ x.T + (x * x).sum(1)[None, :])
    ids = np.broadcast_to(np.arange(n, dtype=np.int64), scores.shape)
    top_ids, top_scores, _ = filter_excluded(ids, scores, excl, k)
    return top_ids, top_scores


def check_queries(query_vectors: Any, dim: int) -> np.ndarray:
    """(Q, d) query vectors as C-contiguous float32, checked (2-D, non-empty, d = dim, finite)."""
    q = query_vectors if isinstance(query_vectors, np.ndarray) else np.asarray(query_vectors)
    shape = q.shape
    if len(shape) != 2:
        raise RalmError(f"query vectors must be a 2-D (Q, d) array, got shape {shape}")
    if shape[0] == 0:
        raise RalmError("empty query batch: pass at least one query vector")
    if shape[1] != dim:
        raise RalmError(
            f"query vectors have dimension {shape[1]} but the index has {dim}; "
            "embed the queries with the encoder the index was built with"
        )
    if q.dtype is not _F32 or not q.flags.c_contiguous:
        if q.dtype.kind != "f":
            raise RalmError(f"query vectors must be floating point, got {q.dtype}")
        q = np.ascontiguousarray(q, dtype=np.float32)
    # NaN and inf in one BLAS call: NaN or inf in q makes q.q NaN or inf (quietly: no warning);
    # a finite q whose q.q overflows float32 (values over ~1e19, numpy warns) is told apart by
    # the exact check after it. Cheaper than isfinite(q).all() on one query (benchmarks/retrieval/search.py).
    flat = q.reshape(-1)
    if not math.isfinite(flat.dot(flat)) and not _ALL(np.isfinite(flat)):
        raise RalmError("query vectors contain NaN or inf")
    return q
