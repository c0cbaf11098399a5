"""REALM/BRENT pre-training loop, and the MLM-only baseline in the same loop.

`pretrain(cfg)` builds the model from `cfg` (`ralm.realm.config.PretrainConfig`), builds index
version 0 with the initial doc tower, then per optimiser step: masks `batch_size x grad_accum`
training chunks, runs retrieve-then-predict, backpropagates the marginal likelihood, clips,
steps AdamW and the schedule, logs metrics, refreshes the index every `refresh_every` steps and
checkpoints every `checkpoint_every` steps. `pretrain(cfg, resume=True)` continues from the newest
checkpoint and reaches the same parameters as an uninterrupted run (same device, fixed seed).

Determinism: the data order is a fixed permutation per epoch (seeded by `seed` and the epoch);
the masking of micro-batch m of step s draws from ``default_rng([seed, s, m])``; dropout uses the
torch RNG, whose state is checkpointed. So a checkpoint needs only the step, the torch RNG,
the model, optimizer and scheduler states and the index version (saved next to it).

Run directory layout::

    config.toml  split.json  metrics.jsonl  tb/  index/v00003/
    checkpoints/step-0000300/{model.safetensors, optim.pt, rng.safetensors, state.json, index/}

Metrics per step (JSONL and TensorBoard): loss (NLL per masked token), ppl (masked-token
perplexity of the batch), lr_reader, lr_retriever, grad_norm, index_version, step_seconds and,
with retrieval, null_mass (mean p(null|x)), entropy (of p(z|x), nats), utility_1..utility_{k-1}
(REALM's retrieval utility log p(y|z,x) - log p(y|null,x) by retrieval rank, needs a null
document), answers_in_docs (fraction of masked tokens that occur in some retrieved chunk: the
reader can only copy those), refresh_seconds on refresh steps.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.realm.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from ralm.realm.config import CONFIG_FILE, PretrainConfig
from ralm.realm.masking import MaskingCollator, eligible_ids
from ralm.realm.model import ChunkDocs, RealmModel, RealmOutput
from ralm.realm.refresh import SyncRefresher
from ralm.retrieval.encoders import autocast_context, autocast_dtype
from ralm.train.distributed import Dist, init_distributed, peer_failure_message
from ralm.train.logging import METRICS_FILE, MetricsLogger
from ralm.train.optim import adamw, param_groups, warmup_schedule

logger = logging.getLogger(__name__)

__all__ = ["LoadedRun", "batch_positions", "build_model", "latest_checkpoint", "load_run", "pretrain"]

SPLIT_FILE = "split.json"


# ----------------------------------------------------------------------------- building
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


# ----------------------------------------------------------------------------- data order
def split_ids(cfg: PretrainConfig, qstore: DocStore) -> tuple[np.ndarray, np.ndarray]:
    """(train ids, held-out ids): `cfg.heldout` query chunks held out (seeded), the rest eligible.

    Held-out chunks are drawn from the chunks with a salient span (the only ones `evaluate-mlm`
    can score), whatever the training strategy, so runs with the same seed and `heldout` hold
    out the same chunks: an MLM warm-up with uniform masking never sees the chunks that the
    REALM run and its baseline are later evaluated on.
    """
    scorable = (
        eligible_ids(qstore, replace(cfg.masking, strategy="salient"))
        if cfg.heldout
        else np.zeros(0, np.int64)
    )
    if cfg.heldout and len(scorable) <= cfg.heldout:
        raise RalmError(
            f"{qstore.root}: only {len(scorable)} chunks have a salient span to mask; lower heldout "
            f"(now {cfg.heldout}) or use a larger corpus"
        )
    rng = np.random.default_rng([cfg.seed, 7])
    held = np.sort(rng.choice(scorable, size=cfg.heldout, replace=False)) if cfg.heldout else scorable[:0]
    train = np.setdiff1d(eligible_ids(qstore, cfg.masking), held)
    if not len(train):
        raise RalmError(
            f"{qstore.root}: no chunk left to train on with strategy {cfg.masking.strategy!r} "
            f"after holding out {cfg.heldout}"
        )
    return train, held


def batch_positions(train_ids: np.ndarray, seed: int, start: int, size: int) -> np.ndarray:
    """Chunk ids at global example positions start..start+size-1 (one seeded permutation per epoch)."""
    n = len(train_ids)
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        pos = start + filled
        epoch, off = divmod(pos, n)
        order = np.random.default_rng([seed, 11, epoch]).permutation(n)
        take = min(size - filled, n - off)
        out[filled : filled + take] = train_ids[order[off : off + take]]
        filled += take
    return out


# ----------------------------------------------------------------------------- metrics
def step_metrics(outs: list[RealmOutput], model: RealmModel) -> dict[str, float]:
    """Per-step numbers from the micro-batches' outputs (see the module docstring)."""
    nll = -sum(float(o.log_p_y.detach().sum()) for o in outs)
    n = sum(int(o.n_masked.sum()) for o in outs)
    m: dict[str, float] = {"loss": nll / max(n, 1), "ppl": math.exp(min(nll / max(n, 1), 50.0))}
    if model.retrieval:
        lpz = torch.cat([o.log_p_z.detach().float() for o in outs])
        p = lpz.exp()
        m["entropy"] = float(-(p * lpz).sum(1).mean())
        if all(o.answers_found is not None for o in outs):
            m["answers_in_docs"] = sum(int(o.answers_found.sum()) for o in outs) / max(n, 1)
        if model.null_doc != "none":
            m["null_mass"] = float(p[:, -1].mean())
            lpyz = torch.cat([o.log_p_y_given_z.detach().float() for o in outs])
            util = (lpyz[:, :-1] - lpyz[:, -1:]).mean(0)
            for i, u in enumerate(util.tolist(), start=1):
                m[f"utility_{i}"] = u
    return m


# ----------------------------------------------------------------------------- the run
@dataclass
class LoadedRun:
    """A run directory read back: its config, model (eval mode), stores, index and split."""

    cfg: PretrainConfig
    model: RealmModel
    tokenizer: Any
    store: DocStore
    query_store: DocStore
    refresher: SyncRefresher | None
    train_ids: np.ndarray
    heldout_ids: np.ndarray
    checkpoint: Path
    state: dict[str, Any]
    device: torch.device
    searcher: Any = None  # the `search` the model uses (the index's, or hybrid candidates)

    def search(self, q: np.ndarray, source_ids: np.ndarray, k: int) -> np.ndarray:
        assert self.refresher is not None
        return self.refresher.search(q, source_ids, k)


def _open_stores(cfg: PretrainConfig) -> tuple[DocStore, DocStore]:
    from ralm.errors import CorpusError

    try:
        store = DocStore(cfg.docstore)
        qstore = DocStore(cfg.queries) if cfg.queries else store
    except CorpusError as exc:
        raise RalmError(str(exc)) from None
    return store, qstore


def read_run_config(run_dir: str | os.PathLike) -> PretrainConfig:
    p = Path(run_dir) / CONFIG_FILE
    if not p.is_file():
        raise RalmError(
            f"{run_dir}: not a ralm pre-training run (no {CONFIG_FILE}); give a `ralm pretrain` --out directory"
        )
    return PretrainConfig.from_toml(p)


def load_run(
    run_dir: str | os.PathLike, checkpoint: str | os.PathLike | None = None, device: str | None = None
) -> LoadedRun:
    """Read a run back for evaluation, `fill` or export (newest checkpoint unless one is given)."""
    run = Path(run_dir)
    cfg = read_run_config(run)
    ckpt = Path(checkpoint) if checkpoint else latest_checkpoint(run)
    if ckpt is None or not (ckpt / "state.json").is_file():
        raise RalmError(f"{run}: no finished checkpoint yet; let `ralm pretrain` reach one (or --resume it)")
    store, qstore = _open_stores(cfg)
    state = json.loads((ckpt / "state.json").read_text(encoding="utf-8"))
    if state.get("docstore_fingerprint") not in (None, store.fingerprint):
        raise RalmError(
            f"{run}: trained on another corpus than {store.root} (fingerprints differ); "
            "point docstore in its config.toml back to the run's corpus"
        )
    dev = resolve_device(device or cfg.device)
    model, tokenizer = build_model(cfg, store)
    model.to(dev)
    refresher = None
    if model.retrieval:
        refresher = SyncRefresher(model.docs, every=0, kind=cfg.index_kind, autocast=cfg.autocast)
        load_checkpoint(ckpt, model, refresher=refresher)
    else:
        load_checkpoint(ckpt, model)
    split = json.loads((run / SPLIT_FILE).read_text(encoding="utf-8"))
    searcher = None
    if refresher is not None:
        from ralm.realm.candidates import candidate_search

        searcher = candidate_search(cfg, model, refresher.search)
    return LoadedRun(
        cfg=cfg,
        model=model.eval(),
        tokenizer=tokenizer,
        store=store,
        query_store=qstore,
        refresher=refresher,
        train_ids=np.asarray(split["train"], dtype=np.int64),
        heldout_ids=np.asarray(split["heldout"], dtype=np.int64),
        checkpoint=ckpt,
        state=state,
        device=dev,
        searcher=searcher,
    )


def _write_split(run: Path, train_ids: np.ndarray, held: np.ndarray) -> None:
    p = run / SPLIT_FILE
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps({"train": train_ids.tolist(), "heldout": held.tolist()}), encoding="utf-8")
    os.replace(tmp, p)


def _trim_metrics(run: Path, last_step: int) -> None:
    """Drop metric rows past the checkpoint being resumed (they will be logged again)."""
    p = run / METRICS_FILE
    if not p.is_file():
        return
    keep = [
        ln
        for ln in p.read_text(encoding="utf-8").splitlines()
        if ln and json.loads(ln).get("step", 0) <= last_step
    ]
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("".join(ln + "\n" for ln in keep), encoding="utf-8")
    os.replace(tmp, p)


def example_rngs(seed: int, step: int, micro: int, positions: range) -> list[np.random.Generator]:
    """One generator per example, keyed by (seed, step, micro-batch, position in the global micro-batch)."""
    return [np.random.default_rng([seed, step, micro, j]) for j in positions]


def train_step(
    model,
    opt: torch.optim.Optimizer,
    sched,
    collator: MaskingCollator,
    train_ids: np.ndarray,
    cfg: PretrainConfig,
    step: int,
    search,
    dev: torch.device,
    ac: torch.dtype | None,
    dist: Dist | None = None,
) -> tuple[list[RealmOutput], float, tuple[float, int]]:
    """One optimiser step (1-based `step`): grad_accum micro-batches, clip, AdamW, schedule.

    `model` is the RealmModel or its DistributedDataParallel wrapper. A micro-batch is
    `cfg.batch_size` queries in all (the global batch); rank r of `dist` takes its contiguous
    share, and every query's masks come from its own generator (`example_rngs`), so the examples
    and masks of a step do not depend on the number of processes. The loss of a micro-batch is
    its summed NLL over the masked tokens of all ranks, so the averaged gradients equal a single
    process's on the whole batch.

    Returns this rank's micro-batch outputs, the gradient norm before clipping and the step's
    (summed NLL, masked tokens) over all ranks.
    """
    dist = dist or Dist()
    opt.zero_grad(set_to_none=True)
    outs: list[RealmOutput] = []
    per_step = cfg.batch_size * cfg.grad_accum
    lo, hi = dist.share(cfg.batch_size)
    nll_sum, n_sum = 0.0, 0
    for m in range(cfg.grad_accum):
        ids = batch_positions(train_ids, cfg.seed, (step - 1) * per_step + m * cfg.batch_size, cfg.batch_size)
        batch = collator(ids[lo:hi], rngs=example_rngs(cfg.seed, step, m, range(lo, hi)))
        batch = {k: v.to(dev) for k, v in batch.items()}
        last = m == cfg.grad_accum - 1
        sync = model.no_sync() if (dist.enabled and not last and hasattr(model, "no_sync")) else nullcontext()
        with sync:
            with autocast_context(dev, ac):
                out = model(batch, search)
            nll_local = -out.log_p_y.sum()
            nll_all, n_all = dist.all_reduce_sum([float(nll_local.detach()), float(out.n_masked.sum())])
            # DDP averages gradients over ranks: scale so the average is d(global mean NLL)
            (nll_local * (dist.world / max(n_all, 1.0) / cfg.grad_accum)).backward()
        nll_sum += nll_all
        n_sum += int(n_all)
        outs.append(out)
    params = [p for p in model.parameters() if p.grad is not None]
    if cfg.max_grad_norm > 0:
        gn = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
    else:
        gn = float(
            torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in params]))
        )
    opt.step()
    sched.step()
    return outs, gn, (nll_sum, n_sum)


def _make_refresher(cfg: PretrainConfig, model: RealmModel, run: Path, dist: Dist) -> SyncRefresher:
    common = dict(
        every=cfg.refresh_every,
        kind=cfg.index_kind,
        batch_size=cfg.embed_batch_size,
        autocast=cfg.autocast,
        root=run / "index",
        dist=dist,
    )
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


def resolve_reader_dir(cfg: PretrainConfig) -> Path:
    from ralm.backbones import resolve_model_dir

    return resolve_model_dir(cfg.reader)


def _check_resume(run: Path, cfg: PretrainConfig) -> None:
    saved = read_run_config(run)
    for f in ("docstore", "queries", "mode", "seed", "batch_size", "grad_accum", "k", "null_doc", "reader"):
        if getattr(saved, f) != getattr(cfg, f):
            raise RalmError(
                f"{run}: was started with {f}={getattr(saved, f)!r}, not {getattr(cfg, f)!r}; "
                "resume it with its own config.toml"
            )


def pretrain(
    cfg: PretrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    stop_after: int | None = None,
) -> Path:
    """Train (or continue) the run `cfg.out`; returns its directory. See the module docstring.

    Under `torchrun` every process runs this: the model is wrapped in DistributedDataParallel,
    each rank takes its share of every global batch and of every corpus re-embedding, and rank 0
    alone writes the run directory, metrics and checkpoints.

    stop_after: end this call after that step (checkpointed), as a time-limited job would; the
    schedule still follows `cfg.steps` and `resume=True` continues the run.
    """
    if not cfg.docstore or not cfg.out:
        raise RalmError(
            "pretrain needs a docstore and an out directory (--docstore, --out or the config file)"
        )
    dist = init_distributed(cfg.device, cfg.dist_timeout_s)
    try:
        return _pretrain(
            cfg, dist, resume=resume, overwrite=overwrite, progress=progress, stop_after=stop_after
        )
    except RuntimeError as exc:
        msg = peer_failure_message(dist, exc)
        if msg is None:
            raise
        raise RalmError(msg) from None
    finally:
        dist.close()


def _pretrain(
    cfg: PretrainConfig, dist: Dist, *, resume: bool, overwrite: bool, progress: bool, stop_after: int | None
) -> Path:
    from tqdm.auto import tqdm

    if cfg.batch_size % dist.world:
        raise RalmError(
            f"batch_size={cfg.batch_size} (queries per micro-batch over all processes) is not divisible by "
            f"the {dist.world} processes; use a multiple of {dist.world}"
        )
    run = Path(cfg.out)
    if dist.is_main:
        if run.exists() and any(run.iterdir()) and not resume:
            if not overwrite:
                raise RalmError(f"{run}: exists; pass --resume to continue it or --overwrite to start over")
            if not (run / CONFIG_FILE).is_file():
                raise RalmError(
                    f"{run}: not a ralm run directory; refusing to overwrite it, choose another --out"
                )
            shutil.rmtree(run)
        if resume and (run / CONFIG_FILE).is_file():
            _check_resume(run, cfg)
    dist.barrier()
    ckpt = latest_checkpoint(run) if resume else None
    store, qstore = _open_stores(cfg)
    torch.manual_seed(cfg.seed)
    dev = dist.device if dist.enabled else resolve_device(cfg.device)
    model, tokenizer = build_model(cfg, store)
    model.to(dev)
    same_corpus = qstore is store
    train_ids, held = split_ids(cfg, qstore)
    if dist.is_main:
        run.mkdir(parents=True, exist_ok=True)
        cfg.save(run)
        _write_split(run, train_ids, held)
    dist.barrier()
    collator = MaskingCollator(qstore, tokenizer, cfg.masking, return_tensors="pt")
    opt = optimizer_for(model, cfg)
    sched = warmup_schedule(opt, cfg.schedule, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
    refresher = _make_refresher(cfg, model, run, dist) if model.retrieval else None
    start = 0
    if ckpt is not None:
        state = load_checkpoint(ckpt, model, opt, sched, refresher)
        start = int(state["step"])
        torch.set_rng_state(state["rng"]["torch"])
        if dev.type == "cuda" and dist.world == 1:
            torch.cuda.set_rng_state_all(
                [state["rng"][k] for k in sorted(state["rng"]) if k.startswith("cuda")]
            )
        if dist.is_main:
            _trim_metrics(run, start)
        if refresher is not None and hasattr(refresher, "last_snapshot_step"):
            refresher.last_snapshot_step = start
        logger.info("resumed %s at step %d (index version %s)", run, start, state["index_version"])
    elif refresher is not None and cfg.initial_index:
        t0 = time.perf_counter()
        refresher.load(cfg.initial_index)  # checked against the corpus fingerprint
        refresher.version, refresher.built_at_step = 0, 0
        refresher.last_seconds = time.perf_counter() - t0
        if hasattr(refresher, "last_snapshot_step"):
            refresher.last_snapshot_step = 0
    elif refresher is not None:
        t = refresher.refresh(model.encoder, 0)
        logger.info("index version 0 built in %.1fs", t)
    if dist.world > 1:
        torch.manual_seed(cfg.seed + 1000 * dist.rank + start)  # dropout differs per rank
    ac = autocast_dtype(dev, cfg.autocast, torch.float32)
    metrics = MetricsLogger(run, tensorboard=cfg.tensorboard) if dist.is_main else None
    if metrics is not None and start == 0 and refresher is not None:
        metrics.log(0, refresh_seconds=refresher.last_seconds, index_version=refresher.version)
    per_step = cfg.batch_size * cfg.grad_accum
    search = refresher.search if refresher is not None else None
    if refresher is not None and not same_corpus:

        def search(q, _src, k):  # another query corpus: its chunk ids mean nothing in Z
            return refresher.search(q, np.full(len(q), -1, dtype=np.int64), k)

    if search is not None:
        from ralm.realm.candidates import candidate_search

        search = candidate_search(cfg, model, search)

    net = model
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    fault = _fault_injection(dist)
    t_run = time.perf_counter()
    bar = tqdm(
        total=cfg.steps,
        initial=start,
        disable=not (progress and dist.is_main),
        unit="step",
        desc=f"pretrain {cfg.mode}",
    )
    try:
        for step in range(start + 1, cfg.steps + 1):
            if fault is not None and step == fault:
                os._exit(3)  # RALM_TEST_KILL_RANK_AT: this rank dies as if killed
            t0 = time.perf_counter()
            version = refresher.version if refresher is not None else None
            outs, gn, (nll, n) = train_step(
                net, opt, sched, collator, train_ids, cfg, step, search, dev, ac, dist
            )
            row = step_metrics(outs, model)
            row["loss"] = nll / max(n, 1)  # over all ranks
            row["ppl"] = math.exp(min(row["loss"], 50.0))
            lrs = {g["name"]: g["lr"] for g in opt.param_groups}
            row["lr_reader"] = lrs.get("reader", lrs.get("reader_no_decay", 0.0))
            if model.retrieval:
                row["lr_retriever"] = lrs.get("retriever", lrs.get("retriever_no_decay", 0.0))
                row["index_version"] = version
            row["grad_norm"] = gn
            row["examples_seen"] = step * per_step
            row["step_seconds"] = time.perf_counter() - t0
            row["elapsed_seconds"] = time.perf_counter() - t_run
            if refresher is not None:
                t = refresher.maybe_refresh(step, model.encoder)
                if t is not None:
                    row["refresh_seconds"] = t
                    row.update(getattr(refresher, "last_swap", {}))
            if not math.isfinite(row["loss"]):
                raise RalmError(
                    f"step {step}: the loss is not finite; lower the learning rates or use --autocast off"
                )
            if metrics is not None:
                metrics.log(step, **row)
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.3f}", ppl=f"{row['ppl']:.1f}")
            last = step == cfg.steps
            if (
                last
                and refresher is not None
                and refresher.every
                and cfg.refresh_mode == "sync"
                and refresher.built_at_step != step
            ):
                t = refresher.refresh(model.encoder, step)
                if metrics is not None:
                    metrics.log(step, refresh_seconds=t, index_version=refresher.version)
            stop = stop_after is not None and step >= stop_after
            if last or stop or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
                if dist.is_main:
                    save_checkpoint(run, step, model, opt, sched, refresher, cfg, store.fingerprint)
                dist.barrier()
            if stop:
                break
    finally:
        bar.close()
        if metrics is not None:
            metrics.close()
        if refresher is not None and hasattr(refresher, "close"):
            refresher.close()
    return run


def _fault_injection(dist: Dist) -> int | None:
    """RALM_TEST_KILL_RANK_AT="RANK:STEP" makes that rank exit abruptly at that step (fault tests)."""
    spec = os.environ.get("RALM_TEST_KILL_RANK_AT")
    if not spec:
        return None
    rank, step = (int(x) for x in spec.split(":"))
    return step if rank == dist.rank else None
