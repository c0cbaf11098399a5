"""A pre-training run directory: its config, split, metrics and checkpoints.

`load_run(run)` gives a `LoadedRun` (config, model in eval mode, stores, index, split) for
`evaluate-mlm`, `fill` and `export-reader`, from the newest intact checkpoint. `prepare_run` is
the writing side, for `pretrain`'s main process: the writer lock, --overwrite and --resume, the
checkpoint to resume, leftovers of an interrupted writer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ralm.atomic import write_text_atomic
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.locks import writer_lock
from ralm.realm.config import CONFIG_FILE, PretrainConfig
from ralm.realm.modeling.candidates import queries_are_corpus, run_search, trivial_ids
from ralm.realm.modeling.model import RealmModel
from ralm.realm.refresh.sync import SyncRefresher
from ralm.realm.training.build import build_model
from ralm.train.checkpoint import (
    STATE_FILE,
    checkpoint_problems,
    intact_checkpoint,
    load_checkpoint,
    read_state,
)
from ralm.train.device import resolve_device
from ralm.train.run import (
    check_start,
    reached_steps,
    remove_run,
    rerun_of_finished,
    resume_point,
    setting_differences,
)

__all__ = [
    "FINISHED",
    "SPLIT_FILE",
    "LoadedRun",
    "check_checkpoint_corpus",
    "check_resume",
    "is_finished",
    "load_run",
    "open_stores",
    "prepare_run",
    "read_run_config",
    "read_split",
    "write_split",
]

SPLIT_FILE = "split.json"
COMMAND = "ralm pretrain"
FINISHED = "finished"  # what prepare_run returns for a finished run resumed: nothing to do


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
    searcher: Any = None  # the `search` the model uses (`run_search`: the index's or hybrid candidates)
    same_corpus: bool = True  # the queries are the knowledge corpus's own chunks (`queries` unset)

    def trivial(self, source_ids: np.ndarray) -> np.ndarray:
        """(B,) corpus chunk ids to exclude for queries of chunks `source_ids` (`trivial_ids`)."""
        return trivial_ids(source_ids, self.same_corpus)

    def search(self, q: np.ndarray, source_ids: np.ndarray, k: int) -> np.ndarray:
        """(B, k) chunk ids of the index's top k for query vectors q (B, d) of query chunks
        `source_ids` (B,), the trivial retrieval excluded by the one rule (`trivial_ids`)."""
        assert self.refresher is not None
        return self.refresher.search(q, self.trivial(source_ids), k)


def open_stores(cfg: PretrainConfig) -> tuple[DocStore, DocStore]:
    """(knowledge corpus Z, query corpus X) of a config; X is Z unless `queries` is set."""
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


# settings a checkpoint depends on: the data it saw, the shapes of its weights, and the retriever it
# started from (whose saved config, e.g. unit vectors and a score scale, the towers are rebuilt with)
RESUME_FIXED = (
    "docstore",
    "queries",
    "mode",
    "seed",
    "batch_size",
    "grad_accum",
    "k",
    "null_doc",
    "reader",
    "retriever",
    "retriever_init",
    "pooling",
    "proj_dim",
    "scale_by_sqrt_dim",
    "reader_kind",
    "causal_blank",
    "reader_embeddings",
    "reader_lora_r",
    "score_scale",
    "retriever_train",
    "reader_layout",
    "answer_queries",
    "answer_negatives",
    "answer_spans",
)


def check_resume(run: Path, cfg: PretrainConfig) -> None:
    """RalmError unless `cfg` continues the run's own config (the settings a checkpoint depends on)."""
    saved = read_run_config(run)
    diff = setting_differences(saved, cfg, RESUME_FIXED)
    if diff:
        f = diff[0]
        raise RalmError(
            f"{run}: was started with {f}={getattr(saved, f)!r}, not {getattr(cfg, f)!r}; "
            "resume it with its own config.toml"
        )


def is_finished(run: Path, cfg: PretrainConfig) -> bool:
    """Whether `run` holds this very run (its fixed settings) with an intact checkpoint at cfg.steps
    or later: rerunning its command has nothing to do."""
    if not reached_steps(run, CONFIG_FILE, cfg.steps):
        return False
    try:
        saved = read_run_config(run)
    except RalmError:  # not readable, so not this run: the resume path names what is wrong
        return False
    return not setting_differences(saved, cfg, RESUME_FIXED)


def check_checkpoint_corpus(
    run: Path, ckpt: Path, state: dict[str, Any], store: DocStore, cfg: PretrainConfig
) -> None:
    """RalmError when the checkpoint was trained on another build of the corpus than `store` (resume)."""
    if state.get("docstore_fingerprint") not in (None, store.fingerprint):
        raise RalmError(
            f"{run}: checkpoint {ckpt.name} was trained on another corpus than {cfg.docstore} (fingerprints "
            "differ); point docstore back to the corpus the run was trained on, or start over with --overwrite"
        )


def load_run(
    run_dir: str | os.PathLike,
    checkpoint: str | os.PathLike | None = None,
    device: str | None = None,
    *,
    initial: bool = False,
) -> LoadedRun:
    """Read a run back for evaluation, `fill` or export: the newest intact checkpoint (a warning names
    any newer damaged one) unless `checkpoint` names one, which must be intact. `initial`: the run's
    starting point instead (the reader and towers its config names, before any step, with the
    corpus embedded by the initial doc tower or its `initial_index`), e.g. a curve's step-0 point."""
    run = Path(run_dir)
    cfg = read_run_config(run)
    if initial:
        return _load_initial(run, cfg, device)
    if checkpoint:
        ckpt = Path(checkpoint)
        if not (ckpt / STATE_FILE).is_file():
            raise RalmError(
                f"{ckpt}: not a finished checkpoint (no {STATE_FILE}); give a checkpoints/step-N directory"
            )
        problems = checkpoint_problems(ckpt)
        if problems:
            raise RalmError(
                f"checkpoint {ckpt} is damaged ({'; '.join(problems)}); give another checkpoint of the run"
            )
    else:
        ckpt = intact_checkpoint(run)
    if ckpt is None:
        raise RalmError(f"{run}: no finished checkpoint yet; let `ralm pretrain` reach one (or --resume it)")
    store, qstore = open_stores(cfg)
    state = read_state(ckpt)
    if state.get("docstore_fingerprint") not in (None, store.fingerprint):
        raise RalmError(
            f"{run}: trained on another corpus than {store.root} (fingerprints differ); "
            "point docstore in its config.toml back to the run's corpus"
        )
    return _open_run(
        run,
        cfg,
        device,
        (store, qstore),
        ckpt,
        state,
        lambda model, refresher: load_checkpoint(ckpt, model, refresher=refresher, purpose="load"),
    )


def _open_run(
    run: Path,
    cfg: PretrainConfig,
    device: str | None,
    stores: tuple,
    checkpoint: Path,
    state: dict,
    fill: Callable[[RealmModel, SyncRefresher | None], None],
) -> LoadedRun:
    """The run's model on `device` with its stores, split and, with retrieval, an index searched as
    in training: `fill(model, refresher)` gives the model its weights and the index its vectors
    (refresher None without retrieval); `checkpoint` and `state` are what the LoadedRun reports."""
    store, qstore = stores
    split = read_split(run)
    dev = resolve_device(device or cfg.device)
    model, tokenizer = build_model(cfg, store)
    model.to(dev)
    refresher = None
    if model.retrieval:
        refresher = SyncRefresher(model.docs, every=0, kind=cfg.index_kind, autocast=cfg.autocast)
    fill(model, refresher)
    same = queries_are_corpus(store, qstore)
    searcher = None if refresher is None else run_search(cfg, model, refresher.search, same_corpus=same)
    return LoadedRun(
        cfg=cfg,
        model=model.eval(),
        tokenizer=tokenizer,
        store=store,
        query_store=qstore,
        refresher=refresher,
        train_ids=split[0],
        heldout_ids=split[1],
        checkpoint=checkpoint,
        state=state,
        device=dev,
        searcher=searcher,
        same_corpus=same,
    )


def _embedded_by(index_dir: Path, doc_fingerprint: str) -> bool:
    """Whether the saved index version `index_dir` was built at step 0 by the document tower whose
    fingerprint is `doc_fingerprint` (then the initial point need not embed the corpus again)."""
    try:
        manifest = json.loads((index_dir / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return manifest.get("built_at_step") == 0 and manifest.get("encoder_fingerprint") == doc_fingerprint


def _load_initial(run: Path, cfg: PretrainConfig, device: str | None) -> LoadedRun:
    stores = open_stores(cfg)
    torch.manual_seed(cfg.seed)  # the initial weights `pretrain` starts from

    def fill(model, refresher: SyncRefresher | None) -> None:
        if refresher is None:
            return
        saved = run / "index" / "v00000"
        if cfg.initial_index:
            refresher.load(cfg.initial_index)
        elif _embedded_by(saved, model.encoder.fingerprint("doc")):  # the run's own step-0 index
            refresher.load(saved)
        else:
            refresher.refresh(model.encoder, 0)

    return _open_run(run, cfg, device, stores, run / "step-0 (initial)", {"step": 0}, fill)


def prepare_run(
    run: Path, cfg: PretrainConfig, held: ExitStack, *, resume: bool, overwrite: bool
) -> Path | str | None:
    """`pretrain`'s main process: take the run's writer lock (kept in `held`), then check, clear or
    create the directory (`ralm.train.run`); returns the checkpoint to resume, None for a new run,
    or FINISHED when --resume finds the run finished (without --resume: a RalmError)."""
    held.enter_context(writer_lock(run))
    if rerun_of_finished(run, not overwrite and is_finished(run, cfg), f"step {cfg.steps}", resume=resume):
        return FINISHED
    if not check_start(run, CONFIG_FILE, COMMAND, resume=resume, overwrite=overwrite):
        if overwrite:
            remove_run(run, CONFIG_FILE, COMMAND)
        return None
    check_resume(run, cfg)
    return resume_point(run, COMMAND)


# ----------------------------------------------------------------------------- run files
def write_split(run: Path, train_ids: np.ndarray, held: np.ndarray) -> None:
    write_text_atomic(run / SPLIT_FILE, json.dumps({"train": train_ids.tolist(), "heldout": held.tolist()}))


def read_split(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """(train ids, held-out ids) from the run's split.json."""
    p = run / SPLIT_FILE
    try:
        split = json.loads(p.read_text(encoding="utf-8"))
        return np.asarray(split["train"], dtype=np.int64), np.asarray(split["heldout"], dtype=np.int64)
    except FileNotFoundError:
        raise RalmError(
            f"{p}: missing; resume the run with `ralm pretrain --resume` to write it again"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise RalmError(
            f"{p}: unreadable ({' '.join(str(exc).split())[:200]}); resume the run with `ralm pretrain --resume` "
            "to write it again"
        ) from None
