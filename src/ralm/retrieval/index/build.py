"""Building a retrieval index directory (`ralm index build`): embed, index, BM25, retrieval.json last.

In one process `build_index_dir` embeds every chunk (resumable), builds the dense index (or its
shards in turn, `shards > 1`) and the optional BM25 index. Under torchrun (`dist` with several
ranks) the same directory comes out with one shard per rank or more: rank 0 checks the
directory and holds its writer lock, every rank embeds its share (`embed_docstore` splits and
merges the embeddings), rank r builds its shards from the merged vectors, and rank 0 writes
shards.json, BM25 and retrieval.json. Opening it and the layout: ralm.retrieval.searchers.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ralm.atomic import write_json_atomic
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.locks import writer_lock
from ralm.retrieval.bm25 import BM25Searcher
from ralm.retrieval.embed import embed_docstore
from ralm.retrieval.encoders import DualEncoder, EncoderConfig
from ralm.retrieval.index.dense import DenseIndex
from ralm.retrieval.index.directory import (
    INDEX_DIR_FORMAT,
    INDEX_DIR_VERSION,
    MANIFEST,
    dir_state,
    encoder_request,
    index_records,
    request_differences,
    swap_in,
    write_build_file,
)
from ralm.retrieval.index.kinds import mean_vector
from ralm.retrieval.index.plan import estimate, plan_shards
from ralm.retrieval.index.shard_build import build_shard, build_sharded, write_shards_manifest
from ralm.retrieval.index.shard_merge import shard_ranges
from ralm.retrieval.index.sharded import shard_dir_name
from ralm.train.distributed import Dist

__all__ = ["build_index_dir"]


def build_index_dir(
    store: DocStore,
    out: str | os.PathLike,
    *,
    encoder: str | os.PathLike | None = None,
    encoder_config: EncoderConfig | None = None,
    kind: str = "flat",
    bm25: bool = False,
    bm25_options: dict[str, Any] | None = None,
    batch_size: int = 64,
    dtype: str = "float16",
    progress: bool = True,
    log: Callable[[str], None] = print,
    overwrite: bool = False,
    center: bool = False,
    shards: int = 1,
    dist: Dist | None = None,
    **params: Any,
) -> Path:
    """Build (or resume building) a retrieval index directory for `store`; returns its path.

    shards > 1: the dense index is split into that many shards of contiguous chunk ids, built
    one after the other (one in memory at a time) under dense/ (ralm.retrieval.index.sharded).
    dist: the torchrun job every rank calls this in (see the module docstring); shards >= ranks.

    Holds `out`'s writer lock throughout. An unfinished build in `out` is resumed only when
    `encoder`/`encoder_config` are those it was started with; a finished index is replaced
    only with overwrite=True (built beside it, swapped in when complete). RalmError otherwise.
    """
    out = Path(out)
    dist = dist or Dist()
    if out.exists() and not out.is_dir():
        raise RalmError(f"{out}: exists and is not a directory; choose another --out")
    shard_ranges(len(store), shards)  # 0 shards, or more shards than chunks: one line before any work
    if shards < dist.world:
        raise RalmError(
            f"--shards {shards}: fewer shards than the {dist.world} processes; use --shards {dist.world} "
            "(one per process) or more"
        )
    request = encoder_request(encoder, encoder_config)
    opts = {
        "encoder": encoder,
        "encoder_config": encoder_config,
        "kind": kind,
        "bm25": bm25,
        "bm25_options": bm25_options,
        "batch_size": batch_size,
        "dtype": dtype,
        "progress": progress,
        "log": log if dist.is_main else (lambda m: None),
        "center": center,
        "shards": shards,
        "params": params,
        "dist": dist,
    }
    with ExitStack() as held:

        def prepare() -> tuple[str, bool]:
            held.enter_context(writer_lock(out))  # rank 0 holds it until the build is done
            return _target(out, request, overwrite, log)

        target, swap = dist.on_main(prepare)  # every rank stops with rank 0's one line
        _build(store, Path(target), request, **opts)
        if swap:
            dist.on_main(lambda: swap_in(Path(target), out))
    return out


def _target(
    out: Path, request: dict[str, Any], overwrite: bool, log: Callable[[str], None]
) -> tuple[str, bool]:
    """Where to build (out itself, or out's .rebuild sibling when replacing it) and whether to swap
    it in at the end; RalmError when `out` may not be written (see build_index_dir)."""
    state = dir_state(out)
    if state == "foreign":
        raise RalmError(
            f"{out}: exists and is not a ralm index; refusing to write into it, choose another --out"
        )
    if state == "finished" and not overwrite:
        raise RalmError(
            f"{out}: holds a finished index; pass --overwrite to replace it (the old one stays usable "
            "until the new one is complete), or choose another --out"
        )
    if state == "unfinished" and not overwrite:
        diffs = request_differences(out, request)
        if diffs:
            raise RalmError(
                f"{out}: holds an unfinished build made with other encoder options ({'; '.join(diffs)}); "
                "rerun with its options to resume it, pass --overwrite to start over, or choose another --out"
            )
    if not (overwrite and state in ("finished", "unfinished")):
        return str(out), False
    work = out.parent / f".{out.name}.rebuild"
    if work.exists():
        if dir_state(work) in ("unfinished", "finished") and not request_differences(work, request):
            log(f"resuming the interrupted --overwrite build in {work}")
        else:
            shutil.rmtree(work)
    return str(work), True


def _build(
    store: DocStore,
    out: Path,
    request: dict[str, Any],
    *,
    encoder: str | os.PathLike | None,
    encoder_config: EncoderConfig | None,
    kind: str,
    bm25: bool,
    bm25_options: dict[str, Any] | None,
    batch_size: int,
    dtype: str,
    progress: bool,
    log: Callable[[str], None],
    center: bool,
    shards: int,
    params: dict[str, Any],
    dist: Dist,
) -> None:
    """Build the index in `out` (resuming what is there); retrieval.json last."""
    enc_dir = out / "encoder"

    def start() -> DualEncoder | None:
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)  # unfinished from here on (an interrupted --overwrite)
        if enc_dir.exists():
            return None
        fresh = DualEncoder.from_pretrained(encoder, encoder_config)
        write_build_file(out, request)
        fresh.save(enc_dir)
        return None if dist.enabled else fresh

    # resuming, or another rank: the encoder saved there (so every rank holds the same weights)
    enc = dist.on_main(start) or DualEncoder.from_pretrained(enc_dir)
    if dist.enabled and dist.device.type == "cuda":
        enc.to(dist.device)
    if shards > 1:
        log(f"index plan: {plan_shards(kind, len(store), enc.dim, shards, **params)['text']}")
    else:
        log(f"index plan: {estimate(kind, len(store), enc.dim, **params)['text']}")
    # under torchrun: each rank embeds ids rank::world, rank 0 merges, every rank gets the memmap
    vectors = embed_docstore(
        enc,
        store,
        out / "embeddings.npy",
        batch_size=batch_size,
        dtype=dtype,
        progress=progress and dist.is_main,
    )
    fps = {"docstore_fingerprint": store.fingerprint, "encoder_fingerprint": enc.fingerprint("doc")}
    if dist.enabled:
        _build_rank_shards(
            vectors, out / "dense", shards, dist, kind=kind, center=center, fps=fps, params=params
        )

        def finish() -> None:
            write_shards_manifest(out / "dense")
            _finish(store, out, enc, kind, center, shards, bm25, bm25_options, log)

        dist.on_main(finish)
        return
    shutil.rmtree(out / "dense", ignore_errors=True)  # an earlier attempt's, sharded or not
    if shards > 1:
        build_sharded(vectors, out / "dense", shards, kind=kind, center=center, **fps, **params)
    else:
        DenseIndex.build(vectors, kind=kind, center=center, **fps, **params).save(out / "dense")
    _finish(store, out, enc, kind, center, shards, bm25, bm25_options, log)


def _build_rank_shards(
    vectors, dense: Path, shards: int, dist: Dist, *, kind: str, center: bool, fps: dict, params: dict
) -> None:
    """Rank r builds shards shard_ranges(shards, world)[r] of `vectors` into `dense`; a RalmError
    on any rank is raised on every rank (none is left waiting)."""

    def clear() -> None:
        shutil.rmtree(dense, ignore_errors=True)
        dense.mkdir(parents=True)

    dist.on_main(clear)
    ranges = shard_ranges(len(vectors), shards)
    mine = range(*shard_ranges(shards, dist.world)[dist.rank])

    def build_mine() -> None:
        mu = mean_vector(vectors) if center else None  # the same corpus mean on every rank
        for s in mine:
            start, stop = ranges[s]
            index = build_shard(
                vectors[start:stop],
                shard=s,
                n_shards=shards,
                start=start,
                total=len(vectors),
                kind=kind,
                center=mu,
                **fps,
                **params,
            )
            index.save(dense / shard_dir_name(s, shards))
            del index

    dist.together(build_mine)


def _finish(
    store: DocStore,
    out: Path,
    enc: DualEncoder,
    kind: str,
    center: bool,
    shards: int,
    bm25: bool,
    bm25_options: dict[str, Any] | None,
    log: Callable[[str], None],
) -> None:
    """BM25 (or none), then retrieval.json over everything built: the index is finished."""
    if bm25:
        sparse = BM25Searcher.build(store, **(bm25_options or {}))
        log(f"bm25: {sparse.describe()}")
        sparse.save(out / "bm25")
    else:
        shutil.rmtree(out / "bm25", ignore_errors=True)  # left by an earlier attempt
    manifest = {
        "format": INDEX_DIR_FORMAT,
        "version": INDEX_DIR_VERSION,
        "docstore": str(Path(store.root).resolve()),
        "docstore_fingerprint": store.fingerprint,
        "encoder_fingerprint": enc.fingerprint("all"),
        "doc_encoder_fingerprint": enc.fingerprint("doc"),
        "kind": kind,
        "center": center,
        "shards": shards,
        "count": len(store),
        "dim": enc.dim,
        "bm25": bm25,
        **index_records(out, bm25),
    }
    write_json_atomic(out / MANIFEST, manifest)
