"""REALM's index sharded over the processes of a job (`index_sharding = "rank"`).

With the replicated index (`SyncRefresher`) every rank embeds its share of the corpus into one
memory map, rank 0 builds the whole index and every rank loads all of it: each process holds
N vectors. Here rank r of W embeds its contiguous share (the same `Dist.share` ranges), builds
shard r from it in memory and keeps it: each process holds about N/W vectors. A search is a
collective (ralm.retrieval.index.dist_search): the micro-batch's queries of all ranks are gathered,
each rank searches its shard, the per-shard top k are gathered and merged. For a flat index the
candidates are exactly those of the replicated index; the live towers re-score them as before,
so the losses match the replicated run (tests/realm/test_sharded_pretrain.py).

Saved versions (a shared run directory, as for checkpoints): ``RUN/index/vNNNNN/`` is a sharded
index directory (ralm.retrieval.index.sharded: shards.json + shard-r-of-W/), each rank writing its
own shard into ``.build-vNNNNN/`` and rank 0 the manifest before renaming it into place.
Checkpoints hard-link the whole tree and record the number of shards.

Resuming (or `initial_index`) on W processes: a sharded version with W shards cut as
`shard_ranges` cuts loads shard r on rank r; any other flat index (another number of shards,
or one unsharded index) is re-cut: rank r reads its rows from the overlapping shards. Other
kinds cannot be re-cut (their vectors are quantised): one line says to resume on the number of
processes they were built with. In a single process (`ralm evaluate`, `serve`) a sharded
version is opened whole and its shards searched in turn.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np

from ralm.atomic import replace_dir
from ralm.errors import RalmError
from ralm.realm.refresh.sync import SyncRefresher, embed_chunks, plan_line
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.index.dist_search import DistributedShardSearch
from ralm.retrieval.index.io import read_manifest
from ralm.retrieval.index.plan import auto_kind
from ralm.retrieval.index.shard_build import build_shard, write_shards_manifest
from ralm.retrieval.index.shard_merge import shard_ranges
from ralm.retrieval.index.sharded import (
    flat_rows,
    is_sharded,
    load_shard,
    read_shards_manifest,
    shard_dir_name,
)

logger = logging.getLogger(__name__)

__all__ = ["ShardedRefresher"]


class ShardedRefresher(SyncRefresher):
    """A SyncRefresher whose index is split over the ranks of `dist`: rank r builds and holds shard r.

    Same protocol (`search`, `maybe_refresh`, `version`); `search` is a collective, which every
    rank's forward pass calls in step. `n_shards` is the job's number of processes.
    """

    @property
    def n_shards(self) -> int:
        return self.dist.world

    def _share(self) -> tuple[int, int]:
        return shard_ranges(len(self.docs), self.dist.world)[self.dist.rank]

    def refresh(self, encoder: DualEncoder, step: int) -> float:
        """Embed this rank's share with the current doc tower, build its shard, swap it in; returns seconds."""
        t0 = time.perf_counter()
        dist, docs = self.dist, self.docs
        n, d = len(docs), encoder.doc_tower.dim
        kind = auto_kind(n, d) if self.kind == "auto" else self.kind
        version = self.version + 1
        if version == 0 and dist.is_main:
            print(f"index: {plan_line(kind, n, d)}, in {dist.world} shards (one per process)", flush=True)
        start, stop = self._share()

        def build():  # this rank's share: a RalmError here reaches every rank (Dist.together)
            vectors = embed_chunks(
                encoder,
                docs,
                batch_size=self.batch_size,
                autocast=self.autocast,
                ids=np.arange(start, stop),
                out=np.empty((stop - start, d), np.float16),
                progress=self.progress and dist.is_main,
                desc=f"index v{version}: embedding",
            )
            shard = build_shard(
                vectors,
                shard=dist.rank,
                n_shards=dist.world,
                start=start,
                total=n,
                kind=kind,
                docstore_fingerprint=docs.store.fingerprint,
                encoder_fingerprint=encoder.fingerprint("doc"),
            )
            shard.manifest.update(index_version=version, built_at_step=step)
            return shard

        shard = dist.together(build)
        if self.root is not None:
            self._publish(shard, version, step)
        self.index = DistributedShardSearch(dist, shard, start, n)
        self.version, self.built_at_step = version, step
        if self.root is not None:
            self._prune()
        self.last_seconds = time.perf_counter() - t0
        return self.last_seconds

    def _publish(self, shard, version: int, step: int) -> None:
        """Save this rank's shard of `version` into root/.build-vNNNNN, then (rank 0) shards.json
        and the rename to root/vNNNNN. Every rank takes part; a RalmError on one reaches all."""
        assert self.root is not None
        dist = self.dist
        build, final = self.root / f".build-v{version:05d}", self.version_dir(version)
        if dist.is_main:
            shutil.rmtree(build, ignore_errors=True)
            build.mkdir(parents=True)
        dist.barrier()
        dist.together(lambda: shard.save(build / shard_dir_name(dist.rank, dist.world)))

        def finish() -> None:
            write_shards_manifest(build, extra={"index_version": version, "built_at_step": step})
            replace_dir(build, final)

        dist.on_main(finish)

    def load(self, directory: str | os.PathLike) -> None:
        """Use the saved index in `directory` (a checkpoint's copy, `initial_index`): this rank's
        shard, re-cut from a flat index saved with another number of shards (module docstring)."""
        d = Path(directory)
        fp = self.docs.store.fingerprint
        if not self.dist.enabled:  # one process: the saved shards searched in turn
            super().load(d)
            return
        n = len(self.docs)
        start, stop = self._share()
        if is_sharded(d):
            manifest = read_shards_manifest(d)
            cut = [(e["start"], e["stop"]) for e in manifest["shards"]]
        else:
            manifest = read_manifest(d / "index.json", "ralm-dense-index", 1, "index")
            cut = [(0, int(manifest.get("count", 0)))]
        if int(manifest.get("count", -1)) != n or manifest.get("docstore_fingerprint") != fp:
            raise RalmError(
                f"index {d} was built from another corpus (fingerprint {str(manifest.get('docstore_fingerprint'))[:12]}… "
                f"vs {fp[:12]}…); rebuild it with `ralm index build`"
            )
        version = int(manifest.get("index_version", 0))
        step = int(manifest.get("built_at_step", 0))
        recut = cut != shard_ranges(n, self.dist.world)
        if recut and manifest.get("kind") != "flat":
            raise RalmError(
                f"{d}: a {manifest.get('kind')} index in {len(cut)} shard(s) cannot be re-cut into "
                f"{self.dist.world} (only a flat index keeps its vectors); resume with --nproc {len(cut)}"
            )

        def open_mine():  # a damaged shard is seen by its rank alone: Dist.together tells every rank
            if not recut:
                return load_shard(d, manifest, self.dist.rank, docstore_fingerprint=fp)
            rows = flat_rows(d, start, stop, docstore_fingerprint=fp)
            return build_shard(
                rows,
                shard=self.dist.rank,
                n_shards=self.dist.world,
                start=start,
                total=n,
                kind="flat",
                docstore_fingerprint=fp,
                encoder_fingerprint=manifest["encoder_fingerprint"],
            )

        shard = self.dist.together(open_mine)
        if recut:
            logger.info("index %s re-cut from %d shard(s) into %d", d, len(cut), self.dist.world)
        shard.manifest.update(index_version=version, built_at_step=step)
        self.index = DistributedShardSearch(self.dist, shard, start, n)
        self.version, self.built_at_step = version, step
        if self.root is None:
            return
        self._drop_later_versions()
        self.dist.barrier()
        if d.resolve() != self.version_dir(self.version).resolve():
            self._publish(shard, version, step)
            self._prune()
