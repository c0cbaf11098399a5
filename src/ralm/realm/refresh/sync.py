"""The MIPS index REALM searches during pre-training, and how it is refreshed.

REALM §3.4 re-embeds the knowledge corpus with a snapshot of the document tower every few
hundred steps (asynchronously, on other machines); BRENT §4 does it synchronously every 100
steps with an exact FAISS inner-product index. `SyncRefresher` does the latter: at a refresh
the training loop stops, every chunk is embedded with the current doc tower (eval mode, no
gradient, bf16 autocast where the hardware has it) and a new `DenseIndex` replaces the old one.

The training loop only talks to the `IndexRefresher` protocol: `search(...)` with the current
index, `maybe_refresh(step, encoder)` after each optimiser step, and `version`. An asynchronous
refresher (the scale-out issue) implements the same three by embedding a snapshot of the doc
tower in another process and swapping the index in when it is ready.

Index versions count from 0 (the index built before the first step). Each version is saved
under ``run_dir/index/v{version:05d}`` (a `DenseIndex` directory whose manifest carries the
version and the step that built it), so a checkpoint can name the exact index its step used.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from ralm.atomic import replace_dir
from ralm.errors import RalmError
from ralm.models.precision import autocast_context, autocast_dtype, eval_on
from ralm.realm.modeling.model import ChunkDocs
from ralm.retrieval.embed import plan_batches
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.plan import auto_kind, estimate
from ralm.retrieval.index.sharded import ShardedIndex, load_dense
from ralm.train.distributed import Dist

logger = logging.getLogger(__name__)

__all__ = ["IndexRefresher", "SyncRefresher", "build_index_version", "embed_chunks", "plan_line"]


class IndexRefresher(Protocol):
    """What the pre-training loop needs from an index that follows the document tower."""

    version: int

    def search(self, q: np.ndarray, source_ids: np.ndarray, k: int) -> np.ndarray:
        """(B, k) chunk ids of the top k for q (B, d), never the query's own source chunk."""
        ...

    def maybe_refresh(self, step: int, encoder: DualEncoder) -> float | None:
        """Called after optimiser step `step`; returns seconds spent when a refresh happened."""
        ...


def embed_chunks(
    encoder: DualEncoder,
    docs: ChunkDocs,
    *,
    batch_size: int = 128,
    autocast: str = "auto",
    ids: np.ndarray | None = None,
    out: np.ndarray | None = None,
    progress: bool = False,
    desc: str = "embedding",
) -> np.ndarray:
    """(N, d) doc-tower vectors of the chunks `ids` (default: all), written into `out` when given
    (e.g. a float16 memory map; row i for ids[i]) or returned as float32.

    Batches are length-sorted; the tower runs in eval mode without gradient on its own device.
    progress: a tqdm bar of chunks on stderr (`desc` before it), removed when done.
    """
    from ralm.progress import tqdm

    tower = encoder.doc_tower
    ids = np.arange(len(docs), dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
    dev = next(tower.parameters()).device
    ac = autocast_dtype(dev, autocast, next(tower.parameters()).dtype)
    if out is None:
        out = np.empty((len(ids), tower.dim), dtype=np.float32)
    bar = tqdm(total=len(ids), desc=desc, unit="chunk", disable=not progress, leave=False, mininterval=0.5)
    with bar, eval_on(tower, dev), torch.inference_mode():
        for pos in plan_batches(docs.inputs.lengths(ids), batch_size):
            batch = docs.tower_batch(ids[pos])
            with autocast_context(dev, ac):
                v = tower(**{k: t.to(dev) for k, t in batch.items()}).float()
            if not torch.isfinite(v).all():
                raise RalmError(
                    "the doc tower produced non-finite vectors; lower the learning rate or use autocast='off'"
                )
            out[pos] = v.cpu().numpy().astype(out.dtype, copy=False)
            bar.update(len(pos))
    return out


def plan_line(kind: str, n: int, d: int) -> str:
    """What the index will be: kind, size, memory. No build time: embedding the corpus dominates it
    and depends on the hardware; the embedding bar shows the real rate and ETA."""
    e = estimate(kind, n, d)
    smaller = "" if kind == "flat" else f" ({e['ratio_vs_flat']:.1f}x smaller than flat)"
    return f"{kind} index of {n:,} x {d}: about {e['memory']} in memory{smaller}"


def index_device(dist: Dist) -> str:
    """Where an index version is searched: the FAISS GPU index when faiss sees a GPU in a single
    process ("auto"); under DDP every rank searches on the CPU."""
    return "cpu" if dist.enabled else "auto"


def build_index_version(
    encoder: DualEncoder,
    docs: ChunkDocs,
    *,
    kind: str,
    batch_size: int,
    autocast: str,
    version: int,
    step: int,
    root: Path | None,
    dist: Dist | None = None,
    progress: bool = False,
) -> DenseIndex:
    """Embed the corpus with the doc tower and index it: one index version.

    Vectors are float16 (half the memory of float32; the flat index stores them exactly). With a
    `root`, they go to a memory map ``root/.build-vNNNNN/vectors.npy`` that every rank of `dist`
    fills with its contiguous share; rank 0 then builds the index and saves it to
    ``root/vNNNNN`` (a directory renamed into place when complete), and every rank loads that.
    Without a root (single process) everything stays in memory. progress: a bar while this
    process embeds its chunks (the slow part: minutes for a large corpus).
    """
    dist = dist or Dist()
    n, d = len(docs), encoder.doc_tower.dim
    if kind == "auto":
        kind = auto_kind(n, d)
    if version == 0 and dist.is_main:
        print(f"index: {plan_line(kind, n, d)}", flush=True)
    desc = f"index v{version}: embedding"
    fp = docs.store.fingerprint
    enc_fp = encoder.fingerprint("doc")
    dev = index_device(dist)
    if root is None:
        if dist.enabled:
            raise ValueError("a multi-process refresh needs a root directory")
        vectors = embed_chunks(
            encoder,
            docs,
            batch_size=batch_size,
            autocast=autocast,
            out=np.empty((n, d), np.float16),
            progress=progress,
            desc=desc,
        )
        index = DenseIndex.build(
            vectors, kind=kind, docstore_fingerprint=fp, encoder_fingerprint=enc_fp, device=dev
        )
        index.manifest = {**index.manifest, "index_version": version, "built_at_step": step}
        return index
    build = root / f".build-v{version:05d}"
    final = root / f"v{version:05d}"
    if dist.is_main:
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        np.lib.format.open_memmap(build / "vectors.npy", mode="w+", dtype=np.float16, shape=(n, d)).flush()
    dist.barrier()
    start, stop = dist.share(n)
    vectors = np.load(build / "vectors.npy", mmap_mode="r+")
    embed_chunks(
        encoder,
        docs,
        batch_size=batch_size,
        autocast=autocast,
        ids=np.arange(start, stop),
        out=vectors[start:stop],
        progress=progress and dist.is_main,
        desc=desc,
    )
    vectors.flush()
    del vectors
    dist.barrier()
    if dist.is_main:
        vectors = np.load(build / "vectors.npy", mmap_mode="r")
        index = DenseIndex.build(
            vectors, kind=kind, docstore_fingerprint=fp, encoder_fingerprint=enc_fp, device=dev
        )
        index.manifest = {**index.manifest, "index_version": version, "built_at_step": step}
        index.save(build / "index")
        del vectors
        replace_dir(build / "index", final)
        shutil.rmtree(build, ignore_errors=True)
    dist.barrier()
    if not dist.is_main:
        index = DenseIndex.load(final, docstore_fingerprint=fp, device=dev)
    return index


class SyncRefresher:
    """Rebuilds an exact (or any `kind`) index from the live doc tower every `every` steps.

    every: refresh period in optimiser steps (BRENT: 100); 0 = never (a frozen index).
    root: directory for the saved versions (None = keep them in memory only).
    progress: a bar while the corpus is embedded (on the main process).
    """

    def __init__(
        self,
        docs: ChunkDocs,
        *,
        every: int = 100,
        kind: str = "flat",
        batch_size: int = 128,
        autocast: str = "auto",
        root: str | os.PathLike | None = None,
        keep: int = 1,
        dist: Dist | None = None,
        progress: bool = False,
    ) -> None:
        if every < 0:
            raise RalmError(f"refresh_every {every}: use 0 (never) or a positive number of steps")
        self.docs = docs
        self.every = every
        self.kind = kind
        self.batch_size = batch_size
        self.autocast = autocast
        self.root = Path(root) if root is not None else None
        self.keep = keep
        self.dist = dist or Dist()
        self.progress = progress
        self.version = -1
        self.built_at_step = -1
        self.index: DenseIndex | ShardedIndex | None = None
        self._loaded_from: Path | None = None  # the directory `load` read (copied by _save)
        self.last_seconds = 0.0

    # -- the protocol
    def search(self, q: np.ndarray, source_ids: np.ndarray, k: int) -> np.ndarray:
        if self.index is None:
            raise RuntimeError("no index yet: call refresh() (or load()) before searching")
        src = np.asarray(source_ids, dtype=np.int64)
        own = int(bool((src >= 0).any()))  # a query's own chunk is left out (-1: another store's query)
        if k > self.index.count - own:
            raise RalmError(
                f"k={k} retrieved documents per query, but the corpus has {self.index.count} chunks"
                + (" (one is the query's own)" if own else "")
                + "; lower k"
            )
        return self.index.search(q, k, exclude_ids=src).ids

    def maybe_refresh(self, step: int, encoder: DualEncoder) -> float | None:
        if self.every and step > 0 and step % self.every == 0 and step != self.built_at_step:
            return self.refresh(encoder, step)
        return None

    # -- building, saving, loading
    def refresh(self, encoder: DualEncoder, step: int) -> float:
        """Embed every chunk with the current doc tower and swap in a new index; returns seconds."""
        t0 = time.perf_counter()
        index = build_index_version(
            encoder,
            self.docs,
            kind=self.kind,
            batch_size=self.batch_size,
            autocast=self.autocast,
            version=self.version + 1,
            step=step,
            root=self.root,
            dist=self.dist,
            progress=self.progress,
        )
        self.version += 1
        self.built_at_step = step
        self.index = index
        if self.root is not None:
            self._prune()
        self.last_seconds = time.perf_counter() - t0
        return self.last_seconds

    def _drop_later_versions(self) -> None:
        """Rank 0 removes saved versions after the current one: they belong to steps being trained again."""
        if self.dist.is_main:
            for p in self.root.glob("v[0-9]*"):
                if p.is_dir() and int(p.name[1:]) > self.version:
                    shutil.rmtree(p, ignore_errors=True)

    def version_dir(self, version: int) -> Path:
        assert self.root is not None
        return self.root / f"v{version:05d}"

    def save_under(self, root: str | os.PathLike) -> Path:
        """Save the current index version under `root`, the refresher's root from then on (e.g. an
        index held in memory for evaluation, written into another run directory); returns its
        version directory."""
        if self.index is None:
            raise RuntimeError("no index yet: call refresh() (or load()) before saving")
        self.root = Path(root)
        self._save()
        return self.version_dir(self.version)

    def _save(self) -> None:
        assert self.index is not None and self.root is not None
        if self.dist.is_main and isinstance(self.index, ShardedIndex):  # a sharded version, opened whole
            assert self._loaded_from is not None
            dst = self.version_dir(self.version)
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(self._loaded_from, dst)
        elif self.dist.is_main:
            self.index.save(self.version_dir(self.version))
        self._prune()

    def _prune(self) -> None:
        """Keep the newest `keep` saved versions (rank 0 only; checkpoints hold hard links)."""
        assert self.root is not None
        if not self.dist.is_main:
            return
        old = sorted(p for p in self.root.glob("v[0-9]*") if p.is_dir())
        for p in old[: max(0, len(old) - self.keep)]:
            shutil.rmtree(p, ignore_errors=True)

    def load(self, directory: str | os.PathLike) -> None:
        """Use the saved index version in `directory` (a checkpoint's copy or `version_dir(v)`); a
        sharded one (saved by `index_sharding = "rank"`) is opened whole, its shards searched in turn."""
        index = load_dense(
            directory,
            docstore_fingerprint=self.docs.store.fingerprint,
            device=index_device(self.dist),
        )
        self.index = index
        self._loaded_from = Path(directory)
        self.version = int(index.manifest.get("index_version", 0))
        self.built_at_step = int(index.manifest.get("built_at_step", 0))
        if self.root is None:
            return
        self._drop_later_versions()
        if Path(directory).resolve() != self.version_dir(self.version).resolve():
            self._save()
