"""Dense maximum-inner-product search over chunk embeddings with FAISS (REALM's MIPS, BRENT's index).

`DenseIndex` wraps one FAISS index whose row i is chunk i of a DocStore (vectors are added in id
order, so a plain `faiss.read_index` of the saved file returns chunk ids too). Backends by name:

    flat      exact inner product (IndexFlatIP), the default, as in BRENT
    ivf-flat  inverted lists of raw vectors: nlist, nprobe
    hnsw      graph search (inner-product metric): M, ef_construction, ef_search
    sq8       8-bit scalar quantiser, exhaustive scan: about 4x smaller than flat
    sq6, sq4  6- and 4-bit scalar quantisers: about 5.3x and 8x smaller (sq6 keeps recall@10
              >= 0.95 on MiniLM embeddings, see benchmarks/retrieval/compressed_index.py)
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
chunk ids: see ralm.retrieval.index.sharded (the files, ShardedIndex) and ralm.retrieval.index.shard_merge.

Scores are those of the index: exact inner products for flat, ivf-flat and hnsw, approximate
ones (of the quantised vectors) for sq8/sq6/sq4 and ivf-pq. With metric "l2" the score is the negative
squared distance, so higher is still better.

Centring (`center=True`, a hubness reduction): doc and query vectors minus the mean doc vector mu,
re-normalised (see `ralm.retrieval.index.kinds`); mu is stored in index.json and applied to queries
by `search`, so callers pass raw query vectors either way.

Saved as `index.faiss` (`faiss.write_index`) plus `index.json`, a manifest with the backend, its
parameters, the fingerprints of the DocStore and of the encoder that made the vectors, and the
size and XXH3-128 digest of index.faiss; loading checks all of them, the digest in the same pass
that reads the file (1.03x the time of a bare `faiss.read_index` of a 1.5 GB index; with
mmap=True the size only, `ralm index verify` hashes it): see ralm.retrieval.index.io. Left out: adding to or removing from a built index (REALM
and BRENT rebuild it after re-embedding) and training IVF on the GPU.

The module is split along its seams; import each name from its own module:
    ralm.retrieval.index.plan   KINDS, PARAMS, resolve_params, estimate, auto_kind (no FAISS)
    ralm.retrieval.index.kinds  making, training and filling the FAISS structure; GPU copies;
                                exact re-scoring; centre, mean_vector
    ralm.retrieval.exclusion    prepare_exclude, filter_excluded, select_candidates (shared by
                                every retriever)
    ralm.retrieval.index.io     save/load of the files, read_manifest, check_fingerprints
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, SearchResult
from ralm.retrieval.exclusion import prepare_exclude, select_candidates, select_single
from ralm.retrieval.index.io import FORMAT, FORMAT_VERSION, read_index_files, write_index_files
from ralm.retrieval.index.kinds import (
    ADD_BATCH,
    GPU_MAX_K,
    METRICS,
    centre,
    check_queries,
    check_vectors,
    exact_top_k,
    gpu_copy,
    make_faiss_index,
    mean_vector,
    wants_gpu,
)
from ralm.retrieval.index.plan import min_train_vectors, resolve_params

__all__ = ["DenseIndex", "stored_vectors"]

log = logging.getLogger(__name__)

# ufunc methods called directly: ndarray.all()/.min() go through Python wrappers that cost more than
# the reduction itself on a single query (benchmarks/retrieval/search.py, batch size 1)


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
        if wants_gpu(device):
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
        vectors = check_vectors(vectors)
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
        if isinstance(center, np.ndarray):
            mu: np.ndarray | None = np.asarray(center, dtype=np.float32).reshape(d)
        else:
            mu = mean_vector(vectors) if center else None
        index = make_faiss_index(
            vectors, kind, metric, p, mu, seed=seed, batch_size=batch_size, progress=progress
        )
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
        gpu = gpu_copy(self.index, self.kind, None if self._ivf is None else self._ivf.nprobe)
        self._search_index, self.device = (self.index, "cpu") if gpu is None else (gpu, "cuda")

    # -- search
    def _check_queries(self, query_vectors: Any) -> np.ndarray:
        q = check_queries(query_vectors, self._dim)
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
            one = select_single(ids, scores, excl, k)
            if one is not None:
                return SearchResult(ids=one[0], scores=one[1])
        top_ids, top_scores, done = select_candidates(ids, scores, excl, k, kp > k and not self._final(kp, 0))
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
            ids_r, scores_r, done_r = select_candidates(
                ids, scores, sub_excl, k, kp > k and not self._final(kp, round_)
            )
            ok = rows if done_r is None else rows[done_r]
            top_ids[ok] = ids_r if done_r is None else ids_r[done_r]
            top_scores[ok] = scores_r if done_r is None else scores_r[done_r]
            if done_r is None:
                break
            rows = rows[~done_r]
            if rows.size and self._final(kp, round_):
                # Only an HNSW graph can miss vectors at this point: score the rest exactly.
                top_ids[rows], top_scores[rows] = exact_top_k(
                    self.index, self._ivf, self.metric, q[rows], None if excl is None else excl[rows], k
                )
                break
        return SearchResult(ids=top_ids, scores=top_scores)

    def _final(self, kp: int, round_: int) -> bool:
        """Whether a search with kp candidates in this round already saw every vector it can."""
        return kp >= self.count and (self._ivf is None or self._nprobe(round_) >= self._ivf.nlist)

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


def stored_vectors(index: Any, ids: np.ndarray) -> np.ndarray:
    """(N, d) float32 stored vectors of chunk `ids` (N,) of a DenseIndex or a ShardedIndex (exact for
    flat indexes; decoded codes otherwise): the vectors its searches score, without an encoder."""
    flat = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).ravel())
    if hasattr(index, "reconstruct_batch"):  # a ShardedIndex (a sharded REALM run's index version)
        return index.reconstruct_batch(flat)
    try:
        return np.asarray(index.index.reconstruct_batch(flat), dtype=np.float32)
    except RuntimeError:
        import faiss

        ivf = faiss.extract_index_ivf(index.index)
        ivf.make_direct_map()
        return np.asarray(index.index.reconstruct_batch(flat), dtype=np.float32)
