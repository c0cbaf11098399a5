"""Asynchronous index refresh (REALM §3.4, Figure 3): an index builder beside the trainer.

REALM re-embeds the corpus on separate machines while training goes on: the trainer sends a
snapshot of the document tower to the builder, the builder embeds and indexes the corpus with
it and hands the new index back, and the trainer swaps it in between two steps. Only the choice
of candidates is stale: the trainer re-scores the retrieved chunks with its live towers.

`AsyncRefresher` implements the `IndexRefresher` protocol that way with a separate process
(`multiprocessing` spawn; pin it to its own cores or give it its own GPU with `cores` and
`device`):

* at most one build at a time; when none is running and `every` steps have passed since the last
  snapshot, rank 0 writes the doc tower's weights to ``root/snapshot-vNNNNN.safetensors`` and
  tells the builder;
* the builder loads them into its own copy of the tower, embeds every chunk (float16 memory map),
  builds the index, saves it to ``root/.build-vNNNNN/`` and renames it to ``root/vNNNNN`` when it
  is complete, then reports the version;
* after each step the trainer looks for a report (rank 0, without waiting), every rank loads the
  reported version through `DenseIndex.load`, which checks the manifest (fingerprint, vector
  count, file size), and swaps it in. A version that fails those checks is never used: the old
  index stays and a warning is logged.

Logged per swap: the step it happened, the step of the snapshot it came from (staleness =
difference) and the builder's seconds.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import queue
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ralm.atomic import atomic_path
from ralm.errors import RalmError
from ralm.realm.modeling.model import ChunkDocs
from ralm.realm.refresh.sync import SyncRefresher, build_index_version
from ralm.retrieval.encoders import DualEncoder, EncoderConfig
from ralm.retrieval.index.dense import DenseIndex
from ralm.train.distributed import Dist

logger = logging.getLogger(__name__)

__all__ = ["AsyncRefresher"]


def _builder_main(spec: dict[str, Any], commands, results) -> None:
    """The builder process: wait for snapshots, turn each into a saved index version."""
    torch.set_num_threads(int(spec["threads"]))
    if spec.get("cores"):
        with contextlib.suppress(AttributeError, OSError):  # not every OS can pin
            os.sched_setaffinity(0, set(spec["cores"]))
    from safetensors.torch import load_file

    from ralm.corpus.docstore import DocStore

    enc = DualEncoder.from_pretrained(spec["encoder_src"], EncoderConfig(**spec["encoder_config"]))
    dev = torch.device(spec["device"])
    enc.doc_tower.to(dev)
    docs = ChunkDocs(DocStore(spec["docstore"]), enc)
    root = Path(spec["root"])
    while True:
        cmd = commands.get()
        if cmd is None:
            return
        version, step, snap = cmd
        t0 = time.perf_counter()
        try:
            enc.doc_tower.load_state_dict(load_file(snap, device=str(dev)))
            build_index_version(
                enc,
                docs,
                kind=spec["kind"],
                batch_size=spec["batch_size"],
                autocast=spec["autocast"],
                version=version,
                step=step,
                root=root,
            )
            Path(snap).unlink(missing_ok=True)
            results.put(("done", version, step, time.perf_counter() - t0))
        except Exception as exc:  # report, never hang the trainer
            results.put(("error", version, step, f"{type(exc).__name__}: {exc}"))


class AsyncRefresher(SyncRefresher):
    """`SyncRefresher`'s interface; refreshes after the first come from a builder process.

    encoder_src / encoder_config: how the builder constructs its own doc tower (the weights then
    come from each snapshot). threads / cores / device: the builder's resources.
    """

    def __init__(
        self,
        docs: ChunkDocs,
        *,
        every: int,
        kind: str,
        batch_size: int,
        autocast: str,
        root: str | os.PathLike,
        encoder_src: str,
        encoder_config: EncoderConfig,
        dist: Dist | None = None,
        threads: int = 1,
        cores: list[int] | None = None,
        device: str = "cpu",
        keep: int = 2,
        progress: bool = False,
    ) -> None:
        super().__init__(
            docs,
            every=every,
            kind=kind,
            batch_size=batch_size,
            autocast=autocast,
            root=root,
            keep=keep,
            dist=dist,
            progress=progress,  # the trainer's own builds (version 0); the builder process shows none
        )
        if every < 1:
            raise RalmError(
                "an asynchronous refresh needs refresh_every >= 1 (the minimum steps between snapshots)"
            )
        self.spec = {
            "encoder_src": str(encoder_src),
            "encoder_config": asdict(encoder_config),
            "docstore": str(docs.store.root),
            "root": str(root),
            "kind": kind,
            "batch_size": batch_size,
            "autocast": autocast,
            "threads": threads,
            "cores": list(cores) if cores else None,
            "device": device,
        }
        self.proc = None
        self.pending: tuple[int, int] | None = None  # (version, snapshot step) being built
        self.last_snapshot_step = 0
        self.last_swap: dict[str, float] = {}
        self._held: tuple | None = None  # a report already read from the queue by `wait`

    # -- process management (rank 0)
    def start(self) -> None:
        if not self.dist.is_main or self.proc is not None:
            return
        ctx = mp.get_context("spawn")
        self.commands, self.results = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(
            target=_builder_main, args=(self.spec, self.commands, self.results), daemon=True
        )
        self.proc.start()

    def close(self) -> None:
        if self.proc is not None:
            self.commands.put(None)
            self.proc.join(timeout=30)
            if self.proc.is_alive():
                self.proc.terminate()
            self.proc = None

    def _snapshot(self, encoder: DualEncoder, step: int) -> None:
        from safetensors.torch import save_file

        assert self.root is not None
        version = self.version + 1
        snap = self.root / f"snapshot-v{version:05d}.safetensors"
        state = {k: v.detach().to("cpu").contiguous() for k, v in encoder.doc_tower.state_dict().items()}
        with atomic_path(snap) as tmp:
            save_file(state, str(tmp))
        self.commands.put((version, step, str(snap)))
        self.pending = (version, step)
        self.last_snapshot_step = step

    def _poll(self) -> tuple | None:
        """A finished build's report, if any (rank 0), shared with every rank."""
        report = None
        if self.dist.is_main and self.pending is not None:
            report, self._held = self._held, None
            if report is None:
                try:
                    report = self.results.get_nowait()
                except queue.Empty:
                    if self.proc is not None and not self.proc.is_alive():
                        report = ("error", self.pending[0], self.pending[1], "the index builder process died")
        return self.dist.broadcast_object(report)

    # -- the protocol
    def maybe_refresh(self, step: int, encoder: DualEncoder) -> float | None:
        """Swap in a finished index (returns the seconds this took the trainer), then maybe snapshot."""
        self.last_swap = {}
        t0 = time.perf_counter()
        swapped = None
        report = self._poll()
        if report is not None:
            kind, version, snap_step, info = report
            if self.dist.is_main:
                self.pending = None
            if kind == "done":
                try:
                    index = DenseIndex.load(
                        self.version_dir(version), docstore_fingerprint=self.docs.store.fingerprint
                    )
                except RalmError as exc:
                    logger.warning(
                        "index version %d refused (%s); keeping version %d", version, exc, self.version
                    )
                else:
                    self.index, self.version, self.built_at_step = index, version, snap_step
                    self._prune()
                    swapped = time.perf_counter() - t0
                    self.last_swap = {"staleness_steps": step - snap_step, "build_seconds": float(info)}
            else:
                logger.warning(
                    "index build for version %d failed: %s; keeping version %d", version, info, self.version
                )
        if self.dist.is_main and self.pending is None and step - self.last_snapshot_step >= self.every:
            self.start()
            self._snapshot(encoder, step)
        self.dist.barrier()
        if swapped is not None:
            self.last_seconds = swapped
        return swapped

    def wait(self, timeout: float = 3600.0) -> None:
        """Block until the build in flight (if any) has reported; used at the end of a run and in tests."""
        if not self.dist.is_main or self.pending is None:
            return
        deadline = time.monotonic() + timeout
        while self._held is None and time.monotonic() < deadline:
            try:
                self._held = self.results.get(timeout=0.5)  # kept for the next maybe_refresh
            except queue.Empty:
                if self.proc is None or not self.proc.is_alive():
                    return

    def _prune(self) -> None:
        super()._prune()
        if self.root is not None and self.dist.is_main:
            for p in self.root.glob(".build-v*"):
                v = int(p.name.removeprefix(".build-v"))
                if v <= self.version and (self.pending is None or v != self.pending[0]):
                    shutil.rmtree(p, ignore_errors=True)
