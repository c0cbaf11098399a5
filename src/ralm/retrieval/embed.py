"""Embed every chunk of a DocStore with a DualEncoder's doc tower into a memory-mapped .npy file.

    emb = embed_docstore(encoder, DocStore("corpus/"), "index/emb.npy")   # (N, d) float16 memmap

- Inputs come straight from the DocStore's token ids (`store.input_ids(i)`, no re-tokenizing):
  `[CLS] title [SEP] chunk [SEP]` with each article title tokenized once, truncated to the
  encoder's max_length (the chunk is cut first).
- Batches are length-sorted (longest first, so memory peaks at once) and rows are written
  back in id order; inference_mode, with bf16 autocast where the hardware has it.
- Resumable: rows go into `emb.partial.npy`; every `flush_every` batches the memmap is
  flushed and then `emb.done.npy` (a bool row mask) is replaced atomically, so a killed run
  redoes at most `flush_every` batches. The batch plan depends only on the store, the rank and
  batch_size, so a resumed file is bitwise identical. At the end the partial file is renamed
  to `emb.npy` and `emb.meta.json` records shape, dtype, the store/doc-encoder fingerprints and
  the file's size and XXH3-128 digest (`files`, ralm.integrity); `load_embeddings` opens it and
  checks those against a store and an encoder, and re-hashes the file (one pass at ~5 GB/s over
  a file its caller is about to read whole); a finished file is reused only when it is intact.
- Sharded under torchrun: rank r of w embeds ids r, r+w, r+2w, ... into `emb.rank{r}-of-{w}.npy`
  (strided, so every rank gets the same mix of lengths); with torch.distributed initialised,
  rank 0 merges after a barrier and every rank returns the merged file. Without it, run
  `merge_shards` once all ranks are done.

Left out: asynchronous refresh during training (a caller runs this in its own process) and
multi-GPU within one process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ralm.atomic import write_json_atomic
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.models.precision import autocast_context, autocast_dtype, eval_on
from ralm.retrieval.embed_files import (
    DTYPES,
    EMB_FORMAT,
    check_file,
    embedding_paths,
    finish_file,
    is_finished,
    merge_shards,
    read_json,
    save_mask,
    shard_path,
)
from ralm.retrieval.encoders import DualEncoder, Tower, module_device
from ralm.retrieval.store_tokenizer import tokenizes_like


def _rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit values, else torch.distributed if initialised, else env RANK/WORLD_SIZE, else (0, 1)."""
    if rank is None or world_size is None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            r, w = torch.distributed.get_rank(), torch.distributed.get_world_size()
        else:
            r, w = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise RalmError(f"rank {rank} of world_size {world_size}: need 0 <= rank < world_size")
    return rank, world_size


# ----------------------------------------------------------------------------- doc inputs from a DocStore
class DocInputs:
    """Doc-tower inputs for DocStore chunks: `[CLS] title [SEP] chunk ids [SEP]`, titles tokenized once.

    The chunk ids are the DocStore's own; with `retokenize` (a tower whose tokenizer differs from the
    one the DocStore was built with, e.g. a decoder LM over a MiniLM-chunked corpus) they are the
    chunk texts tokenized again by the tower's tokenizer, so the chunks stay the same text units.

    `lengths(ids)` gives input lengths (for sorting) without building anything;
    `batch(ids)` gives padded (B, T) tensors.
    """

    def __init__(
        self, tower: Tower, store: DocStore, max_length: int, titles: bool = True, retokenize: bool = False
    ) -> None:
        self.store, self.tower, self.max_length = store, tower, max_length
        self.template = tower.template
        n = len(store)
        # retokenize: the tower's tokenizer is not the DocStore's (a decoder-LM tower over a DocStore
        # built with MiniLM's): every chunk's text is tokenized again with the tower's, once
        self.text_ids: list[np.ndarray] | None = None
        if retokenize:
            self.text_ids = []
            for s in range(0, n, 1024):
                texts = [r["text"] for r in store.get_many(list(range(s, min(n, s + 1024))))]
                ids = tower.tokenizer(texts, add_special_tokens=False)["input_ids"]
                self.text_ids.extend(np.asarray(x, dtype=np.int64) for x in ids)
            self.text_len = np.array([len(x) for x in self.text_ids], dtype=np.int64)
        else:
            self.text_len = store.lengths()
        if titles:
            arts = store.articles()
            first = np.asarray(arts.column("first_chunk").to_numpy(), dtype=np.int64)
            counts = np.asarray(arts.column("n_chunks").to_numpy(), dtype=np.int64)
            names = arts.column("title").to_pylist()
            self.article = np.full(n, -1, dtype=np.int64)
            for a, (f, c) in enumerate(zip(first, counts, strict=True)):  # chunk -> article
                self.article[f : f + c] = a
            ids = tower.tokenizer([t or "" for t in names], add_special_tokens=False)["input_ids"]
            self.title_ids = [np.asarray(x, dtype=np.int64) for x in ids]
            tl = np.array([len(x) for x in self.title_ids] + [0], dtype=np.int64)
            self.title_len = tl[self.article]  # article -1 (none) -> the appended 0
        else:
            self.article = np.full(n, -1, dtype=np.int64)
            self.title_ids = []
            self.title_len = np.zeros(n, dtype=np.int64)

    def lengths(self, ids: np.ndarray) -> np.ndarray:
        return self.template.length(self.title_len[ids], self.text_len[ids], self.max_length)

    def rows(self, ids: np.ndarray) -> list[tuple[list, list]]:
        out = []
        for i in ids:
            a = self.article[i]
            title = self.title_ids[a] if a >= 0 and len(self.title_ids[a]) else None
            text = self.store.input_ids(int(i)) if self.text_ids is None else self.text_ids[int(i)]
            out.append(self.template.build(title, text, self.max_length))
        return out

    def batch(self, ids: np.ndarray) -> dict[str, torch.Tensor]:
        return self.template.collate(self.rows(ids), self.tower.uses_token_types)


def plan_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Positions grouped into batches, longest first: lengths [3, 9, 5], 2 -> [[1, 2], [0]]."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


# ----------------------------------------------------------------------------- embedding
def embed_docstore(
    encoder: DualEncoder,
    store: DocStore | str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    batch_size: int = 64,
    dtype: str = "float16",
    device: str | torch.device | None = "auto",
    autocast: str | bool | None = "auto",
    resume: bool = True,
    rank: int | None = None,
    world_size: int | None = None,
    titles: bool = True,
    flush_every: int = 20,
    progress: bool = True,
    on_batch: Callable[[int], None] | None = None,
) -> np.memmap:
    """Embed all chunks of `store` with `encoder.doc_tower` into `out_path` (a .npy); returns (N, d).

    dtype: "float16" (half the disk, plenty for MIPS) or "float32". device "auto": where the doc
    tower is. autocast "auto": bf16 on GPUs with bf16 and CPUs with native bf16 ("bf16"/"off" force).
    resume: continue a partial run made with the same store, doc tower, rank and options (else
    start over); a finished file made by them is returned as it is.
    rank/world_size: default from torch.distributed or env RANK/WORLD_SIZE. With world_size > 1
    and no initialised process group this returns the rank's shard (ids rank::world_size);
    call `merge_shards` when all are done. on_batch(rows_done): called after each batch.
    """
    if dtype not in DTYPES:
        raise RalmError(f"dtype {dtype!r}: choose float16 or float32")
    out = Path(out_path)
    if not out.name.endswith(".npy"):
        raise RalmError(f"{out}: the embedding file name must end in .npy")
    rank, world = _rank_world(rank, world_size)
    store = store if isinstance(store, DocStore) else DocStore(store)
    tower = encoder.doc_tower
    retokenize = not tokenizes_like(tower.tokenizer, store)  # a tower with its own tokenizer reads the texts
    target = out if world == 1 else shard_path(out, rank, world)
    n_total = len(store)
    ids = np.arange(rank, n_total, world, dtype=np.int64)
    meta = {
        "format": EMB_FORMAT,
        "version": 1,
        "shape": [len(ids), encoder.dim],
        "dtype": dtype,
        "store_fingerprint": store.fingerprint,
        "encoder_fingerprint": encoder.fingerprint("doc"),
        "titles": titles,
        "max_length": encoder.config.max_length,
        "rank": rank,
        "world_size": world,
        "n_total": n_total,
        **({"retokenized": True} if retokenize else {}),  # only when set: older files stay comparable
    }
    final_meta = {**meta, "shape": [n_total, encoder.dim], "rank": 0, "world_size": 1}
    dist = _process_group(world)
    if dist is not None:  # fail fast, before any embedding, if the ranks' doc towers differ
        prints: list = [None] * world
        dist.all_gather_object(prints, meta["encoder_fingerprint"])
        if len(set(prints)) > 1:
            raise RalmError(
                f"rank {rank}: the ranks hold different doc encoders (fingerprints differ); "
                "load or broadcast the same weights on every rank (seed any projection init)"
            )
    if resume and is_finished(out, final_meta):  # also a merged file of an earlier sharded run
        check_file(out, read_json(embedding_paths(out)["meta"]) or {})
        return np.load(out, mmap_mode="r")
    out.parent.mkdir(parents=True, exist_ok=True)
    if resume and is_finished(target, meta):
        check_file(target, read_json(embedding_paths(target)["meta"]) or {})
    else:
        _embed_rows(
            tower,
            store,
            ids,
            target,
            meta,
            batch_size,
            device,
            autocast,
            titles,
            flush_every,
            progress,
            on_batch,
        )
    if world == 1:
        return np.load(out, mmap_mode="r")
    if dist is not None:
        dist.barrier()
        if rank == 0:
            merge_shards(out, world)
        dist.barrier()
        return np.load(out, mmap_mode="r")
    return np.load(target, mmap_mode="r")


def _process_group(world: int):
    """torch.distributed when a process group of `world` ranks is initialised, else None."""
    dist = torch.distributed
    if world > 1 and dist.is_available() and dist.is_initialized() and dist.get_world_size() == world:
        return dist
    return None


def _embed_rows(
    tower, store, ids, target, meta, batch_size, device, autocast, titles, flush_every, progress, on_batch
):
    from ralm.progress import tqdm

    p = embedding_paths(target)
    plan_meta = {**meta, "batch_size": batch_size}
    n, d = meta["shape"]
    old = read_json(p["progress"])
    if old == plan_meta and p["partial"].is_file() and p["done"].is_file():
        mm = np.load(p["partial"], mmap_mode="r+")
        done = np.load(p["done"])
        if mm.shape != (n, d) or done.shape != (n,):
            mm, done = None, None
    else:
        mm, done = None, None
    if mm is None:
        for k in ("partial", "done", "progress"):
            p[k].unlink(missing_ok=True)
        mm = np.lib.format.open_memmap(p["partial"], mode="w+", dtype=meta["dtype"], shape=(n, d))
        done = np.zeros(n, dtype=bool)
        save_mask(p["done"], done)
        write_json_atomic(p["progress"], plan_meta)

    inputs = DocInputs(
        tower, store, meta["max_length"], titles=titles, retokenize=bool(meta.get("retokenized"))
    )
    batches = plan_batches(inputs.lengths(ids), batch_size)  # positions into ids; same on every resume
    dev = module_device(device, tower)
    ac = autocast_dtype(dev, autocast, next(tower.parameters()).dtype)
    pending: list[np.ndarray] = []

    def flush() -> None:
        if pending:
            mm.flush()  # vectors reach the disk before the mask says they are there
            done[np.concatenate(pending)] = True
            save_mask(p["done"], done)
            pending.clear()

    todo = int((~done).sum())
    desc = "embed" if meta["world_size"] == 1 else f"embed rank {meta['rank']}/{meta['world_size']}"
    try:
        with (
            eval_on(tower, dev),
            torch.inference_mode(),
            tqdm(total=todo, disable=not progress, unit="chunk", desc=desc) as bar,
        ):
            n_done, since_flush = n - todo, 0
            for pos in batches:
                if done[pos].all():
                    continue  # a partly done batch is redone whole: same padding, same bits
                batch = inputs.batch(ids[pos])
                with autocast_context(dev, ac):
                    vec = tower(**{k: t.to(dev, non_blocking=True) for k, t in batch.items()})
                rows = vec.float().cpu().numpy().astype(meta["dtype"], copy=False)
                if not np.isfinite(rows).all():
                    raise RalmError(
                        f"chunks {ids[pos][:3].tolist()}...: non-finite vectors in {meta['dtype']}; "
                        "embed with dtype='float32' (and autocast='off' if they stay non-finite)"
                    )
                mm[pos] = rows
                pending.append(pos)
                new = int((~done[pos]).sum())
                n_done += new
                bar.update(new)
                since_flush += 1
                if since_flush >= flush_every:
                    flush()
                    since_flush = 0
                if on_batch is not None:
                    on_batch(n_done)
    finally:
        flush()
        mm = None  # close the map before the rename
    finish_file(p, target, meta)
