"""Building what a pre-training run trains: the device, the reader, the REALM model, AdamW, the index refresher.

The reader is a masked LM (REALM, BRENT: it fills [MASK]s and reads the DocStore's token ids, so
the DocStore, the towers and the reader share one tokenizer) or a causal LM
(`ralm.realm.readers.causal`: it generates the masked spans after the chunk and the masked text, in
its own tokenizer; masks are still drawn on the DocStore's tokens, which the towers read).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.realm.config import PretrainConfig
from ralm.realm.modeling.model import ChunkDocs, RealmModel
from ralm.realm.refresh.sync import SyncRefresher
from ralm.train.distributed import Dist
from ralm.train.optim import adamw, param_groups

logger = logging.getLogger(__name__)

__all__ = [
    "build_model",
    "is_causal_reader",
    "make_collator",
    "first_index",
    "check_reader_tokenizer",
    "load_reader",
    "load_retriever_init",
    "make_refresher",
    "optimizer_for",
    "resolve_reader_dir",
]


def load_reader(path: str | None):
    """The reader: `Reader.from_pretrained`, with one clear error when no MLM head can be had."""
    from ralm.models.names import resolve_model_dir
    from ralm.models.quiet import quiet_transformers
    from ralm.realm.readers.mlm import Reader

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
    from ralm.models.tokenizers import tokenizer_fingerprint

    want = store.manifest.get("tokenizer", {}).get("sha256")
    if want and tokenizer_fingerprint(tokenizer) != want:
        raise RalmError(
            f"{store.root}: built with another tokenizer than the reader {reader_dir}; rebuild the "
            "DocStore (and any index of it) with --tokenizer set to the reader's directory"
        )


def is_causal_reader(cfg: PretrainConfig) -> bool:
    """Whether the run's reader is a causal LM: `reader_kind`, or for "auto" whether `reader` names
    a decoder-only LM (`ralm.models.names.is_decoder_spec`; the default MiniLM is none)."""
    if cfg.reader_kind != "auto":
        return cfg.reader_kind == "causal"
    if cfg.reader is None or cfg.reader == "minilm":
        return False
    from ralm.models.names import is_decoder_spec

    return is_decoder_spec(cfg.reader)


DECODER_TOWERS = (
    "{src}: decoder-LM towers cannot be REALM's retriever: its masked queries are built as "
    "[CLS] x [SEP] with [MASK] tokens, which a decoder tokenizer lacks; use an encoder (MiniLM, or a "
    "`ralm retriever train` encoder made from one)"
)


def _is_decoder_dir(d: Path) -> bool:
    """Whether model directory `d` (a saved tower) holds a decoder LM's body."""
    import json
    from types import SimpleNamespace

    from ralm.models.decoder_body import is_decoder_body

    try:
        return is_decoder_body(SimpleNamespace(**json.loads((d / "config.json").read_text(encoding="utf-8"))))
    except (OSError, ValueError, TypeError):
        return False


def _towers(cfg: PretrainConfig, src: str, store: DocStore):
    """The dual encoder from `src` (a saved DualEncoder keeps its own shape), checked against the store."""
    from ralm.retrieval.encoders import ENCODER_FILE, DualEncoder, EncoderConfig
    from ralm.retrieval.store_tokenizer import check_tokenizer

    if (Path(src).expanduser() / ENCODER_FILE).is_file():
        encoder = DualEncoder.from_pretrained(src)
        encoder.config.scale_by_sqrt_dim = cfg.scale_by_sqrt_dim
        encoder.config.max_length = cfg.encoder_max_length
    else:
        enc_cfg = EncoderConfig(
            pooling=cfg.pooling,
            proj_dim=cfg.proj_dim,
            scale_by_sqrt_dim=cfg.scale_by_sqrt_dim,
            max_length=cfg.encoder_max_length,
        )
        encoder = DualEncoder.from_pretrained(src, enc_cfg)
    if encoder.query_tower.decoder:
        raise RalmError(DECODER_TOWERS.format(src=src))
    check_tokenizer(encoder.doc_tower, store)
    return encoder


def _masking_tokenizer(cfg: PretrainConfig, store: DocStore):
    """A causal run's masking tokenizer: the towers' (retriever, default MiniLM), which must be the
    DocStore's, since masks are drawn on the stored token ids."""
    from ralm.models.names import is_decoder_spec, resolve_model_dir
    from ralm.models.tokenizers import load_tokenizer
    from ralm.retrieval.encoders import ENCODER_FILE

    if cfg.retriever and is_decoder_spec(cfg.retriever):
        raise RalmError(DECODER_TOWERS.format(src=cfg.retriever))
    src = Path(cfg.retriever).expanduser() if cfg.retriever else resolve_model_dir(None)
    tower_dir = src / "query" if (src / ENCODER_FILE).is_file() else src
    if _is_decoder_dir(tower_dir):
        raise RalmError(DECODER_TOWERS.format(src=cfg.retriever))
    tok = load_tokenizer(tower_dir)
    from ralm.retrieval.store_tokenizer import tokenizes_like

    if not tokenizes_like(tok, store):
        raise RalmError(
            f"{store.root}: built with another tokenizer than the retriever {src}; a causal reader reads text, "
            "but the masks and the towers use the DocStore's token ids: set retriever to an encoder with the "
            "DocStore's tokenizer, or rebuild the DocStore with --tokenizer set to the retriever's"
        )
    return tok


def enable_checkpointing(model: torch.nn.Module, name: str) -> None:
    """Gradient checkpointing in a transformers model (non-reentrant: frozen embeddings, LoRA and
    the towers' gradients work as without it), or one clear error for a model that has none."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise RalmError(
            f"reader_checkpointing: {name} ({type(model).__name__}) has no gradient checkpointing; "
            "set reader_checkpointing = false"
        )
    kw = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x names it so
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)


def is_checkpointing(model: torch.nn.Module) -> bool:
    """Whether gradient checkpointing is on in a transformers model (either transformers API)."""
    on = getattr(model, "is_activation_checkpointing", None)
    return bool(on if on is not None else getattr(model, "is_gradient_checkpointing", False))


def load_causal_reader(cfg: PretrainConfig, store: DocStore | None):
    """The causal reader of `cfg`: the LM (float32), embeddings frozen unless asked, LoRA if asked."""
    from ralm.models.causal import load_causal_lm
    from ralm.models.lora import add_lora
    from ralm.realm.readers.causal import CausalReader

    lm, tok, _ = load_causal_lm(cfg.reader or "minilm", what="reader")
    if cfg.reader_embeddings != "train":
        lm.get_input_embeddings().weight.requires_grad_(
            False
        )  # tied to the output layer where the LM ties them
    if cfg.reader_checkpointing:
        enable_checkpointing(lm, cfg.reader or "minilm")
    if cfg.reader_lora_r:
        lm = add_lora(lm, cfg.reader_lora_r)
    return CausalReader(
        lm,
        tok,
        max_length=cfg.reader_max_length,
        store=store,
        bucket_slack=cfg.reader_bucket_slack,
        layout=cfg.reader_layout,
    )


def _build_causal(cfg: PretrainConfig, store: DocStore) -> tuple[RealmModel, Any]:
    tokenizer = _masking_tokenizer(cfg, store)
    encoder = docs = None
    if cfg.mode == "realm":
        encoder = _towers(cfg, cfg.retriever or "minilm", store)
        docs = ChunkDocs(store, encoder)
    reader = load_causal_reader(cfg, store if cfg.mode == "realm" else None)
    return _assemble(cfg, store, reader, encoder, docs), tokenizer


def build_model(cfg: PretrainConfig, store: DocStore) -> tuple[RealmModel, Any]:
    """The model `cfg` asks for, on CPU, in train mode; returns (model, the masking tokenizer)."""
    from ralm.models.tokenizers import load_tokenizer

    if is_causal_reader(cfg):
        return _build_causal(cfg, store)
    reader, reader_dir = load_reader(cfg.reader)
    tokenizer = load_tokenizer(reader_dir)
    check_reader_tokenizer(store, tokenizer, reader_dir)
    vocab = reader.mlm.get_output_embeddings()
    if vocab is not None and len(tokenizer) > vocab.weight.shape[0]:
        raise RalmError(f"{reader_dir}: the tokenizer has more tokens than the reader's vocabulary")
    if cfg.reader_embeddings == "freeze":
        reader.mlm.get_input_embeddings().weight.requires_grad_(False)
    if cfg.reader_lora_r:
        raise RalmError("reader_lora_r: LoRA is for a causal reader; a masked-LM reader trains in full")
    if cfg.reader_checkpointing:
        enable_checkpointing(reader.mlm, str(reader_dir))
    encoder = docs = None
    if cfg.mode == "realm":
        encoder = _towers(cfg, cfg.retriever or str(reader_dir), store)
        docs = ChunkDocs(store, encoder)
    return _assemble(cfg, store, reader, encoder, docs), tokenizer


def _assemble(cfg: PretrainConfig, store: DocStore, reader, encoder, docs) -> RealmModel:
    model = RealmModel(
        reader,
        encoder,
        docs,
        k=cfg.k,
        null_doc=cfg.null_doc,
        reader_max_length=cfg.reader_max_length,
        query_masks=cfg.query_masks,
        score_scale=cfg.score_scale,
        null_logit_init=cfg.null_logit_init,
        marginal=cfg.marginal,
        reader_backprop_top=cfg.reader_backprop_top,
        retriever_train=cfg.retriever_train,
        retriever_loss=cfg.retriever_loss,
        distill_tau=cfg.distill_tau,
        answer_spans=cfg.answer_spans,
        reader_train=cfg.reader_train,
    )
    if model.retrieval and cfg.k - (cfg.null_doc != "none") > len(store) - 1:
        raise RalmError(
            f"k={cfg.k} needs {model.n_retrieved} retrieved chunks per query but {store.root} has "
            f"{len(store)} (one is the query's own); lower k"
        )
    if cfg.retriever_init and model.retrieval:
        load_retriever_init(model, cfg.retriever_init)
    return model.train()


def load_retriever_init(model: RealmModel, run_dir: str) -> Path:
    """Start `model`'s retriever from another `ralm pretrain` run: its towers (`encoder.*`) and its
    score prior (`prior.*`: the learned scale, the null logit) from that run's newest intact checkpoint,
    e.g. a query tower trained on cached scores (a warm start, as REALM's ICT). The reader stays as
    built. The towers must have this run's shapes (the same `retriever`); a prior parameter the other
    run lacks keeps its initial value. Returns the checkpoint read."""
    from safetensors import safe_open

    from ralm.train.checkpoint import intact_checkpoint

    run = Path(run_dir)
    ckpt = intact_checkpoint(run) if run.is_dir() else None
    if ckpt is None:
        raise RalmError(
            f"retriever_init = {run_dir}: not a `ralm pretrain` run with a finished checkpoint; "
            "give a run directory"
        )
    own = {k: v for k, v in model.state_dict().items() if k.startswith(("encoder.", "prior."))}
    path = ckpt / "model.safetensors"
    copied = {}
    with safe_open(str(path), "pt") as f:
        theirs = set(f.keys())
        for key, mine in own.items():
            if key not in theirs:
                if key.startswith("encoder."):
                    raise RalmError(
                        f"{path}: has no {key}; give retriever_init a run trained with this run's retriever"
                    )
                continue
            t = f.get_tensor(key)
            if t.shape != mine.shape:
                raise RalmError(
                    f"{path}: {key} has shape {tuple(t.shape)}, this run's {tuple(mine.shape)}; "
                    "give retriever_init a run trained with this run's retriever"
                )
            copied[key] = t
    model.load_state_dict(copied, strict=False)
    logger.info("retriever from %s: %d tensors", ckpt, len(copied))
    return ckpt


def make_collator(
    cfg: PretrainConfig, qstore: DocStore, tokenizer, model: RealmModel, masking=None, **kwargs
):
    """The batch maker of a run: `MaskingCollator`, plus the LM's view for a causal reader."""
    from ralm.realm.data import span_keep
    from ralm.realm.masking.mlm import MaskingCollator

    masking = masking if masking is not None else cfg.masking
    kwargs.setdefault("span_keep", span_keep(cfg, qstore) if masking.retrievable_only else None)
    if getattr(model.reader, "kind", "mlm") == "causal":
        from ralm.realm.masking.causal import CausalMaskingCollator

        return CausalMaskingCollator(
            qstore, tokenizer, model.reader.tokenizer, masking, blank=cfg.causal_blank, **kwargs
        )
    return MaskingCollator(qstore, tokenizer, masking, **kwargs)


def optimizer_for(model: RealmModel, cfg: PretrainConfig) -> torch.optim.AdamW:
    """AdamW: reader and retriever at their own lr; no decay on biases, norms and the null vector;
    the learned score scale and null logit (`ralm.realm.modeling.prior`) at `lr_scale`, without decay."""
    seen: set[int] = set()
    groups = param_groups(model.reader, cfg.lr_reader, cfg.weight_decay, name="reader", skip=seen)
    prior = [p for p in model.prior.parameters()] if model.encoder is not None else []
    if prior:
        seen.update(id(p) for p in prior)
        groups.append({"params": prior, "lr": cfg.lr_scale, "weight_decay": 0.0, "name": "prior"})
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
    from ralm.models.names import resolve_model_dir

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
        from ralm.realm.refresh.sharded import ShardedRefresher

        return ShardedRefresher(model.docs, **common)
    if cfg.refresh_mode == "sync":
        return SyncRefresher(model.docs, **common)
    from ralm.realm.refresh.background import AsyncRefresher

    assert model.encoder is not None
    return AsyncRefresher(
        model.docs,
        **common,
        encoder_src=cfg.retriever or ("minilm" if is_causal_reader(cfg) else str(resolve_reader_dir(cfg))),
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
