"""Building what a pre-training run trains: the device, the reader, the REALM model, AdamW, the index refresher."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.realm.config import PretrainConfig
from ralm.realm.model import ChunkDocs, RealmModel
from ralm.realm.refresh import SyncRefresher
from ralm.train.distributed import Dist
from ralm.train.optim import adamw, param_groups

logger = logging.getLogger(__name__)

__all__ = [
    "build_model",
    "first_index",
    "check_reader_tokenizer",
    "load_reader",
    "make_refresher",
    "optimizer_for",
    "resolve_device",
    "resolve_reader_dir",
]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise RalmError(f"device {name!r}: use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RalmError(f"device {name!r}: no CUDA GPU is available here; use --device cpu")
    return dev


def load_reader(path: str | None):
    """The reader: `Reader.from_pretrained`, with one clear error when no MLM head can be had."""
    from ralm.backbones import resolve_model_dir
    from ralm.realm.reader import Reader
    from ralm.retrieval.encoders import quiet_transformers

    d = resolve_model_dir(path)
    try:
        with quiet_transformers():
            return Reader.from_pretrained(str(d)), d
    except (ValueError, KeyError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RalmError(
            f"{d}: cannot be loaded as a masked LM ({first[:200]}); give --reader a BERT-style "
            "encoder or masked-LM directory"
        ) from None


def check_reader_tokenizer(store: DocStore, tokenizer, reader_dir) -> None:
    """RalmError unless `store` was built with the reader's tokenizer (same sha256): the reader reads
    the DocStore's token ids as they are."""
    from ralm.backbones import tokenizer_fingerprint

    want = store.manifest.get("tokenizer", {}).get("sha256")
    if want and tokenizer_fingerprint(tokenizer) != want:
        raise RalmError(
            f"{store.root}: built with another tokenizer than the reader {reader_dir}; rebuild the "
            "DocStore (and any index of it) with --tokenizer set to the reader's directory"
        )


def build_model(cfg: PretrainConfig, store: DocStore) -> tuple[RealmModel, Any]:
    """The model `cfg` asks for, on CPU, in train mode; returns (model, tokenizer)."""
    from ralm.backbones import load_tokenizer
    from ralm.retrieval.embed import check_tokenizer
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig

    reader, reader_dir = load_reader(cfg.reader)
    tokenizer = load_tokenizer(reader_dir)
    check_reader_tokenizer(store, tokenizer, reader_dir)
    vocab = reader.mlm.get_output_embeddings()
    if vocab is not None and len(tokenizer) > vocab.weight.shape[0]:
        raise RalmError(f"{reader_dir}: the tokenizer has more tokens than the reader's vocabulary")
    encoder = docs = None
    if cfg.mode == "realm":
        enc_cfg = EncoderConfig(
            pooling=cfg.pooling,
            proj_dim=cfg.proj_dim,
            scale_by_sqrt_dim=cfg.scale_by_sqrt_dim,
            max_length=cfg.encoder_max_length,
        )
        from ralm.retrieval.encoders import ENCODER_FILE

        src = cfg.retriever or str(reader_dir)
        if (Path(src).expanduser() / ENCODER_FILE).is_file():  # a saved DualEncoder keeps its own shape
            encoder = DualEncoder.from_pretrained(src)
            encoder.config.scale_by_sqrt_dim = cfg.scale_by_sqrt_dim
            encoder.config.max_length = cfg.encoder_max_length
        else:
            encoder = DualEncoder.from_pretrained(src, enc_cfg)
        check_tokenizer(encoder.doc_tower, store)
        docs = ChunkDocs(store, encoder)
    model = RealmModel(
        reader,
        encoder,
        docs,
        k=cfg.k,
        null_doc=cfg.null_doc,
        reader_max_length=cfg.reader_max_length,
        query_masks=cfg.query_masks,
    )
    if model.retrieval and cfg.k - (cfg.null_doc != "none") > len(store) - 1:
        raise RalmError(
            f"k={cfg.k} needs {model.n_retrieved} retrieved chunks per query but {store.root} has "
            f"{len(store)} (one is the query's own); lower k"
        )
    return model.train(), tokenizer


def optimizer_for(model: RealmModel, cfg: PretrainConfig) -> torch.optim.AdamW:
    """AdamW: reader and retriever at their own lr; no decay on biases, norms and the null vector."""
    seen: set[int] = set()
    groups = param_groups(model.reader, cfg.lr_reader, cfg.weight_decay, name="reader", skip=seen)
    if model.encoder is not None:
        null = [model.null_vector] if getattr(model, "null_vector", None) is not None else []
        groups += param_groups(
            model.encoder,
            cfg.lr_retriever,
            cfg.weight_decay,
            name="retriever",
            extra_no_decay=null,
            skip=seen,
        )
    return adamw(groups)


def resolve_reader_dir(cfg: PretrainConfig) -> Path:
    from ralm.backbones import resolve_model_dir

    return resolve_model_dir(cfg.reader)


def make_refresher(
    cfg: PretrainConfig, model: RealmModel, run: Path, dist: Dist, *, progress: bool = False
) -> SyncRefresher:
    """The index refresher `cfg.refresh_mode` asks for, saving versions under RUN/index; `progress`
    shows a bar while the corpus is embedded."""
    common = dict(
        every=cfg.refresh_every,
        kind=cfg.index_kind,
        batch_size=cfg.embed_batch_size,
        autocast=cfg.autocast,
        root=run / "index",
        dist=dist,
        progress=progress,
    )
    if cfg.refresh_mode == "sync" and cfg.index_sharding == "rank":
        from ralm.realm.sharded_refresh import ShardedRefresher

        return ShardedRefresher(model.docs, **common)
    if cfg.refresh_mode == "sync":
        return SyncRefresher(model.docs, **common)
    from ralm.realm.async_refresh import AsyncRefresher

    assert model.encoder is not None
    return AsyncRefresher(
        model.docs,
        **common,
        encoder_src=cfg.retriever or str(resolve_reader_dir(cfg)),
        encoder_config=model.encoder.config,
        threads=cfg.builder_threads,
        cores=cfg.builder_cores,
        device=cfg.builder_device,
    )


def first_index(
    refresher: SyncRefresher, cfg: PretrainConfig, model: RealmModel, *, show: bool = False
) -> None:
    """Index version 0 of a new run: `cfg.initial_index` when given (checked against the corpus),
    else the corpus embedded with the initial doc tower. `show`: say how long that took, which is
    what every later re-embedding will take."""
    t0 = time.perf_counter()
    if cfg.initial_index:
        refresher.load(cfg.initial_index)
        refresher.version, refresher.built_at_step = 0, 0
        refresher.last_seconds = time.perf_counter() - t0
        if hasattr(refresher, "last_snapshot_step"):
            refresher.last_snapshot_step = 0
        return
    t = refresher.refresh(model.encoder, 0)
    logger.info("index version 0 built in %.1fs", t)
    if show:
        again = (
            f"; each re-embedding (every {cfg.refresh_every} steps) takes about as long"
            if cfg.refresh_every and cfg.refresh_mode == "sync"
            else ""
        )
        print(f"index v0 built in {t:.1f} s{again}", flush=True)
