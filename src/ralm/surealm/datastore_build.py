"""Building a SUREALM data store (`build_datastore`): sentences -> LM tokens, prefix/suffix
embeddings, the keys' index and every prefix's top-K entries, in bounded memory, written into a
temporary directory and renamed into place. The layout and the reader: `ralm.surealm.datastore`."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ralm.atomic import staged_dir, write_json_atomic
from ralm.errors import RalmError
from ralm.surealm.datastore import FORMAT, FORMAT_VERSION, MANIFEST
from ralm.surealm.sentences import SentenceSet

__all__ = ["DatastoreConfig", "build_datastore", "tokenize_sentences"]


@dataclass
class DatastoreConfig:
    """How a data store is built (SUREALM §4.2 defaults)."""

    lm: str = "minilm"  # LM whose tokens define w_i: "minilm", "smollm2" or a model directory
    encoder: str | None = None  # sentence transformer for prefixes/suffixes; None = bundled MiniLM
    m: int = 10  # suffix truncation (tokens)
    # the paper's §5 variant: the suffix starts at the current word (s_i = w_i..w_{i+m-1}); by
    # default w_i is in neither prefix nor suffix
    include_current_word: bool = False
    # how a suffix is encoded: "truncate" (the encoder reads w_{i+1}..w_{i+m} alone) or "whole" (the
    # SUREALM authors' code: it reads the rest of the sentence, and the first m tokens are pooled)
    suffix: str = "truncate"
    k: int = 8  # neighbours kept per query (the model may use fewer)
    max_tokens: int = 64  # LM tokens kept per sentence (longer turns are cut)
    index_kind: str = "flat"  # DenseIndex kind over the keys
    batch_sentences: int = 2048  # sentences per build batch (bounds memory)
    embed_batch_size: int = 512
    device: str = "cpu"
    autocast: str = "auto"

    def check(self) -> None:
        for name, v, lo in (("m", self.m, 1), ("k", self.k, 1), ("max_tokens", self.max_tokens, 2)):
            if v < lo:
                raise RalmError(f"{name}={v}: must be >= {lo}")
        if self.suffix not in ("truncate", "whole"):
            raise RalmError(f"suffix={self.suffix!r}: use 'truncate' or 'whole'")
        if self.suffix == "whole" and self.include_current_word:
            raise RalmError(
                "suffix='whole' pools w_{i+1}..w_{i+m}; it does not combine with include_current_word"
            )


def tokenize_sentences(
    tokenizer, texts: list[str], max_tokens: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """LM token ids (N,) and character offsets (N, 2) per text, without special tokens, cut to max_tokens."""
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    ids = [np.asarray(x[:max_tokens], dtype=np.int32) for x in enc["input_ids"]]
    offs = [np.asarray(o[:max_tokens], dtype=np.int64).reshape(-1, 2) for o in enc["offset_mapping"]]
    return ids, offs


def build_datastore(
    sentences: SentenceSet,
    out: str | os.PathLike,
    cfg: DatastoreConfig | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    log=print,
) -> Path:
    """Build the data store of `sentences` into `out` (atomically: a temp dir renamed at the end)."""
    from ralm.models.tokenizers import load_lm_tokenizer

    cfg = cfg or DatastoreConfig()
    cfg.check()
    if not sentences.counts()["train"]:
        raise RalmError(
            f"{sentences.empty_split('train')}; the data store is built from the training sentences, so it "
            'needs some: give JSONL lines without "split" or with "split": "train", or lower '
            "--valid-frac/--test-frac"
        )
    out = Path(out)
    if out.exists():
        if not overwrite:
            raise RalmError(f"{out}: exists; pass --overwrite to replace it")
        if not (out / MANIFEST).is_file() and any(out.iterdir()):
            raise RalmError(f"{out}: exists and is not a SUREALM data store; refusing to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    with staged_dir(out) as tmp:
        tokenizer, tok_fp = load_lm_tokenizer(cfg.lm)
        _build_into(tmp, sentences, cfg, tokenizer, tok_fp, progress, log)
    return out


def _build_into(tmp: Path, sents: SentenceSet, cfg: DatastoreConfig, tokenizer, tok_fp: str, progress, log):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ralm.progress import tqdm
    from ralm.retrieval.index.dense import DenseIndex
    from ralm.surealm.embedder import SpanEmbedder

    t_start = time.perf_counter()
    S = len(sents)
    # pass 1: LM tokens of every sentence (ids kept, offsets recomputed per batch in pass 2)
    lengths = np.zeros(S, dtype=np.int32)
    lm_chunks = []
    for s0 in range(0, S, cfg.batch_sentences):
        ids, _ = tokenize_sentences(tokenizer, sents.texts[s0 : s0 + cfg.batch_sentences], cfg.max_tokens)
        lengths[s0 : s0 + len(ids)] = [len(x) for x in ids]
        lm_chunks.extend(ids)
    empty = np.flatnonzero(lengths == 0)
    if len(empty):
        raise RalmError(
            f"sentence {int(empty[0])} ({sents.texts[int(empty[0])]!r}) has no token for the LM "
            f"tokenizer; remove it from the input"
        )
    is_train = np.asarray([s == "train" for s in sents.splits])
    n_entries = np.where(is_train, lengths - 1, 0).astype(np.int64)
    E = int(n_entries.sum())
    if E == 0:
        raise RalmError(
            "no training sentence has two or more tokens, so there is no (prefix, word, suffix) split "
            "to store; give longer sentences"
        )
    if cfg.k > E:
        raise RalmError(f"k={cfg.k} is more than the {E} entries of the store; lower k")
    token_offset = np.zeros(S + 1, dtype=np.int64)
    np.cumsum(lengths, out=token_offset[1:])
    entry_offset = np.zeros(S + 1, dtype=np.int64)
    np.cumsum(n_entries, out=entry_offset[1:])
    T = int(token_offset[-1])
    np.save(tmp / "lengths.npy", lengths)
    np.save(tmp / "token_offset.npy", token_offset)
    np.save(tmp / "entry_offset.npy", entry_offset)
    lm_ids = np.lib.format.open_memmap(tmp / "lm_ids.npy", mode="w+", dtype=np.int32, shape=(T,))
    for s, x in enumerate(lm_chunks):
        lm_ids[token_offset[s] : token_offset[s + 1]] = x
    lm_ids.flush()
    del lm_chunks
    entry_sid = np.repeat(np.arange(S, dtype=np.int32), n_entries)
    entry_pos = (np.arange(E, dtype=np.int64) - np.repeat(entry_offset[:-1], n_entries) + 1).astype(np.int16)
    np.save(tmp / "entry_sid.npy", entry_sid)
    np.save(tmp / "entry_pos.npy", entry_pos)
    table = pa.table(
        {
            "sid": pa.array(np.arange(S, dtype=np.int64)),
            "split": pa.array(sents.splits, pa.string()),
            "group": pa.array(sents.groups, pa.string()),
            "text": pa.array(sents.texts, pa.string()),
        }
    )
    pq.write_table(table, tmp / "sentences.parquet")

    emb = SpanEmbedder(cfg.encoder, device=cfg.device, autocast=cfg.autocast)
    d = emb.dim
    keys = np.lib.format.open_memmap(tmp / "keys.npy", mode="w+", dtype=np.float16, shape=(E, d))
    values = np.lib.format.open_memmap(tmp / "values.npy", mode="w+", dtype=np.float16, shape=(E, d))
    log(f"data store: {S:,} sentences ({sents.counts()}), {E:,} entries, {T:,} query prefixes, dim {d}")

    # pass 2: keys and values of the training entries
    t0 = time.perf_counter()
    train_ids = np.flatnonzero(is_train & (lengths >= 2))
    bar = tqdm(total=E, disable=not progress, unit="entry", desc="embed entries")
    for b0 in range(0, len(train_ids), cfg.batch_sentences):
        sids = train_ids[b0 : b0 + cfg.batch_sentences]
        texts = [sents.texts[s] for s in sids]
        _, offs = tokenize_sentences(tokenizer, texts, cfg.max_tokens)
        krows, vrows = [], []
        for text, off in zip(texts, offs, strict=True):
            al = emb.align(text, off)
            n = len(off)
            krows.extend(al.prefix(i - 1) for i in range(1, n))
            if cfg.suffix == "whole":
                vrows.extend(al.suffix_whole(i, cfg.m) for i in range(1, n))
            else:
                vrows.extend(
                    al.suffix(i, cfg.m, include_current=cfg.include_current_word) for i in range(1, n)
                )
        kv = emb.embed(krows + vrows, cfg.embed_batch_size)
        rows = np.concatenate([np.arange(entry_offset[s], entry_offset[s + 1]) for s in sids])
        keys[rows] = kv[: len(krows)].astype(np.float16)
        values[rows] = kv[len(krows) :].astype(np.float16)
        bar.update(len(rows))
    bar.close()
    keys.flush()
    values.flush()
    t_embed = time.perf_counter() - t0

    # the index over the keys
    t0 = time.perf_counter()
    fp = _fingerprint(emb.fingerprint, tok_fp, cfg, sents)
    index = DenseIndex.build(
        keys, kind=cfg.index_kind, docstore_fingerprint=fp, encoder_fingerprint=emb.fingerprint
    )
    index.save(tmp / "index")
    t_index = time.perf_counter() - t0

    # pass 3: offline top-K for every query prefix w_1..w_L, L = 1..N, of every sentence; with an exact
    # index and a GPU the search is one matrix product a batch there (FAISS's CPU search dominated the
    # build on a GPU machine: 190 of 223 s for 172k entries)
    t0 = time.perf_counter()
    gpu_keys = None
    if cfg.index_kind == "flat" and str(cfg.device).startswith("cuda"):
        import torch

        gpu_keys = torch.from_numpy(np.asarray(keys, dtype=np.float32)).to(cfg.device)
    neighbors = np.lib.format.open_memmap(tmp / "neighbors.npy", mode="w+", dtype=np.int32, shape=(T, cfg.k))
    bar = tqdm(total=T, disable=not progress, unit="query", desc="offline retrieval")
    for s0 in range(0, S, cfg.batch_sentences):
        sids = np.arange(s0, min(S, s0 + cfg.batch_sentences))
        texts = [sents.texts[s] for s in sids]
        _, offs = tokenize_sentences(tokenizer, texts, cfg.max_tokens)
        qrows, from_keys, excl = [], [], []
        for s, text, off in zip(sids, texts, offs, strict=True):
            n = len(off)
            al = emb.align(text, off)
            for plen in range(1, n + 1):
                # a training prefix of length plen <= N-2 is the key of its own entry i = plen+1
                if is_train[s] and plen <= n - 2:
                    from_keys.append((len(qrows), int(entry_offset[s]) + plen))
                    qrows.append(None)
                else:
                    qrows.append(al.prefix(plen))
                excl.append(s)
        need = [i for i, r in enumerate(qrows) if r is not None]
        q = np.empty((len(qrows), d), dtype=np.float32)
        if need:
            q[need] = emb.embed([qrows[i] for i in need], cfg.embed_batch_size)
        if from_keys:
            pos, kid = (np.asarray(x) for x in zip(*from_keys, strict=True))
            q[pos] = keys[kid].astype(np.float32)
        q = q.astype(np.float16).astype(np.float32)  # queries at the stored precision
        ex = _own_entries(np.asarray(excl), entry_offset)
        rows = np.arange(token_offset[sids[0]], token_offset[sids[-1] + 1])
        if gpu_keys is not None:
            neighbors[rows] = exact_topk_torch(gpu_keys, q, cfg.k, ex).astype(np.int32)
        else:
            neighbors[rows] = index.search(q, cfg.k, exclude_ids=ex).ids.astype(np.int32)
        bar.update(len(rows))
    bar.close()
    neighbors.flush()
    t_search = time.perf_counter() - t0

    nbytes = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
    entry_bytes = sum(
        (tmp / f).stat().st_size for f in ("keys.npy", "values.npy", "entry_sid.npy", "entry_pos.npy")
    )
    entry_bytes += sum(p.stat().st_size for p in (tmp / "index").rglob("*") if p.is_file())
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "fingerprint": fp,
        "lm": cfg.lm,
        "lm_tokenizer_sha256": tok_fp,
        "encoder": str(emb.path),
        "encoder_fingerprint": emb.fingerprint,
        "encoder_pooling": emb.tower.pooling,
        "encoder_normalize": emb.tower.normalize,
        "dim": d,
        "m": cfg.m,
        "include_current_word": cfg.include_current_word,
        "suffix": cfg.suffix,
        "k": cfg.k,
        "max_tokens": cfg.max_tokens,
        "index_kind": cfg.index_kind,
        "sentences": S,
        "split_sentences": sents.counts(),
        "entries": E,
        "query_prefixes": T,
        "sources": sents.sources,
        "bytes_total": nbytes,
        "bytes_per_entry": entry_bytes / E,
        "seconds": {
            "embed_entries": t_embed,
            "index": t_index,
            "offline_retrieval": t_search,
            "total": time.perf_counter() - t_start,
        },
        "entries_per_second": E / max(t_embed, 1e-9),
    }
    write_json_atomic(tmp / MANIFEST, manifest)
    log(
        f"data store: {E:,} entries in {t_embed:.1f}s ({E / max(t_embed, 1e-9):,.0f} entries/s), "
        f"{entry_bytes / E:,.0f} bytes/entry, {nbytes / 2**20:,.1f} MiB"
    )
    return manifest


def exact_topk_torch(keys, q: np.ndarray, k: int, exclude: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """(Q, k) ids of the k largest inner products of queries q (Q, d) with `keys` (a (E, d) torch
    tensor, on any device), never an id in the query's row of `exclude` (Q, W; -1 = none); the same
    entries an exact FAISS search with the same exclusions gives (ties aside)."""
    import torch

    out = np.empty((len(q), k), dtype=np.int64)
    for lo in range(0, len(q), chunk):
        qq = torch.from_numpy(np.asarray(q[lo : lo + chunk], dtype=np.float32)).to(keys.device)
        scores = qq @ keys.T  # (B, E)
        ex = torch.from_numpy(np.asarray(exclude[lo : lo + chunk], dtype=np.int64)).to(keys.device)
        rows = torch.arange(len(qq), device=keys.device)[:, None].expand_as(ex)
        keep = ex >= 0
        scores[rows[keep], ex[keep]] = float("-inf")
        out[lo : lo + len(qq)] = scores.topk(k, dim=1).indices.cpu().numpy()
    return out


def _own_entries(sids: np.ndarray, entry_offset: np.ndarray) -> np.ndarray:
    """(Q, W) entry ids of each query's own sentence, padded with -1 (what the search must skip)."""
    start = entry_offset[sids]
    count = entry_offset[sids + 1] - start
    W = max(int(count.max(initial=0)), 1)
    cols = np.arange(W)
    out = start[:, None] + cols[None, :]
    return np.where(cols[None, :] < count[:, None], out, -1).astype(np.int64)


def _fingerprint(enc_fp: str, tok_fp: str, cfg: DatastoreConfig, sents: SentenceSet) -> str:
    variant = "|current-word" if cfg.include_current_word else ""  # default stores keep their fingerprint
    variant += "|suffix-whole" if cfg.suffix == "whole" else ""
    h = hashlib.sha256(f"{FORMAT}|{enc_fp}|{tok_fp}|{cfg.m}|{cfg.max_tokens}{variant}|".encode())
    for t, sp in zip(sents.texts, sents.splits, strict=True):
        h.update(f"{sp}\t{t}\n".encode())
    return h.hexdigest()
