"""What `ralm serve TARGET` serves: which kind of directory TARGET is, and its models, loaded once.

    realm     a `ralm pretrain` run (config.toml): Fill, Search (the run's query tower over its
              index; BM25 built in memory), Corpus (its DocStore), Runs (metrics.jsonl). Before
              its first checkpoint: Runs, Corpus and BM25 Search, with a note.
    surealm   a `ralm surealm train` run (surealm.json): Generate, Runs
    index     a `ralm index build` directory (retrieval.json): Search (dense, BM25, hybrid), Corpus
    docstore  a `ralm corpus build` directory (manifest.json): Corpus, BM25 Search built in memory
    run       a directory with only metrics.jsonl (a run before it wrote anything else): Runs

Anything else, or a damaged one, is a RalmError with one line. Every model has one lock
(`Target.model_lock`, `bm25_lock`, `store_lock`: the DocStore's row cache is not thread-safe);
callers take them in that order, so two requests never use one model at once and never deadlock.
`--generator` adds an LM for Ask to a TARGET with a corpus (ralm.serve.generator.attach_generator:
`Target.generator`); its `generator_lock` is never held together with the others.
A REALM run's model reads its own DocStore (under model_lock); the pages read `Target.store`.
Left out: reloading a newer checkpoint while serving (restart the server for that).
"""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralm.errors import RalmError
from ralm.train.logging import METRICS_FILE, warn

__all__ = ["RunDense", "SurealmParts", "Target", "detect_kind", "load_target"]

KINDS = ("realm", "surealm", "index", "docstore", "run")


def held(locks) -> ExitStack:
    """An ExitStack holding `locks`, taken in the order given."""
    stack = ExitStack()
    for lock in locks:
        stack.enter_context(lock)
    return stack


@dataclass
class SurealmParts:
    """A trained SUREALM run: model, LM tokenizer, data store, the span embedder (loaded once)."""

    model: Any
    tokenizer: Any
    store: Any
    embedder: Any


@dataclass
class Target:
    """A loaded TARGET: what each page needs (None where it does not apply) and the model locks."""

    kind: str
    path: Path
    pages: list[str]
    device: str = "cpu"
    store: Any = None  # DocStore
    dense: Any = None  # anything with search_text(queries, k) -> SearchResult
    bm25: Any = None  # BM25Searcher
    hybrid: Any = None  # HybridSearcher over (bm25, dense)
    realm: Any = None  # LoadedRun
    surealm: SurealmParts | None = None
    generator: Any = None  # ralm.serve.generator.Generator: Ask's LM (`ralm serve --generator`)
    metrics_path: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None  # what the server loaded (a checkpoint or model directory name)
    steps: int | None = None  # the steps the run is configured for
    notes: list[str] = field(default_factory=list)
    model_lock: threading.Lock = field(default_factory=threading.Lock)
    bm25_lock: threading.Lock = field(default_factory=threading.Lock)
    store_lock: threading.Lock = field(default_factory=threading.Lock)
    generator_lock: threading.Lock = field(default_factory=threading.Lock)
    _summary: str | None = None

    @property
    def retrievers(self) -> list[str]:
        """The retrievers Search offers, in the order of its selector."""
        return [n for n, r in (("dense", self.dense), ("bm25", self.bm25), ("hybrid", self.hybrid)) if r]

    def retriever(self, name: str):
        """The retriever `name` and the locks to hold while it runs (model before bm25)."""
        if name not in self.retrievers:
            have = ", ".join(self.retrievers) or "none"
            raise RalmError(f"retriever {name!r}: this {self.kind} offers {have}")
        locks = {"dense": [self.model_lock], "bm25": [self.bm25_lock]}.get(
            name, [self.model_lock, self.bm25_lock]
        )
        return getattr(self, name), locks

    def corpus_summary(self) -> str:
        """`ralm corpus info`'s summary of the DocStore (computed once; call with store_lock held)."""
        if self._summary is None:
            from ralm.corpus.cli import summary

            self._summary = summary(self.store)
        return self._summary


class RunDense:
    """A REALM run's query tower over the run's own index: `search_text` like a DenseSearcher.

    Queries are tokenized and embedded as `fill` embeds a masked text (`model.embed_queries`);
    scores are the index's inner products.
    """

    def __init__(self, run) -> None:
        self.run = run

    def search_text(self, queries, k: int, exclude_ids=None):
        import torch

        from ralm.retrieval.base import check_queries

        queries = check_queries(queries)
        run = self.run
        enc = run.tokenizer(
            queries, truncation=True, max_length=run.cfg.encoder_max_length, padding=True, return_tensors="pt"
        )
        with torch.inference_mode():
            batch = {
                "input_ids": enc["input_ids"].to(run.device),
                "attention_mask": enc["attention_mask"].to(run.device),
            }
            q = run.model.embed_queries(batch)
        return run.refresher.index.search(q.float().cpu().numpy(), k, exclude_ids=exclude_ids)


def detect_kind(path: str | Path) -> str:
    """The kind of directory `path` is (see KINDS); RalmError with one line for anything else."""
    p = Path(path)
    if not p.exists():
        raise RalmError(
            f"{p}: no such directory; give a REALM or SUREALM run, an index directory or a DocStore"
        )
    if not p.is_dir():
        raise RalmError(
            f"{p}: not a directory; give a REALM or SUREALM run, an index directory or a DocStore"
        )
    from ralm.realm.config import CONFIG_FILE
    from ralm.retrieval.index.directory import BUILD_FILE, ENCODER_DIR, MANIFEST

    if (p / CONFIG_FILE).is_file():
        return "realm"
    if (p / "surealm.json").is_file() or (p / "train.json").is_file():
        return "surealm"
    if (p / MANIFEST).is_file() or (p / ENCODER_DIR).is_dir() or (p / BUILD_FILE).is_file():
        return "index"  # an unfinished one is refused when opened (read_index_dir), with its own line
    if (p / "manifest.json").is_file():
        try:
            fmt = json.loads((p / "manifest.json").read_text(encoding="utf-8")).get("format")
        except (OSError, ValueError, AttributeError):
            fmt = None
        if fmt == "ralm-surealm-datastore":
            raise RalmError(
                f"{p}: a SUREALM data store; serve the run trained on it (`ralm surealm train {p} --out RUN`)"
            )
        return "docstore"  # DocStore() names what is wrong with a damaged or foreign manifest
    if (p / METRICS_FILE).is_file():
        return "run"
    raise RalmError(
        f"{p}: not a REALM run (config.toml), SUREALM run (surealm.json), index directory (retrieval.json) "
        "or DocStore (manifest.json); give one of those"
    )


def load_target(path: str | Path, device: str | None = None, log=warn, ask=None) -> Target:
    """Detect and load TARGET once (models in eval mode on `device`); `log` gets the notes.

    ask: a ralm.serve.generator.AskConfig to load its generator too (the Ask page), or None.
    """
    p = Path(path)
    kind = detect_kind(p)
    if ask is not None and kind in ("surealm", "run"):
        from ralm.serve.generator import no_corpus

        raise no_corpus(p)
    t = {"realm": _realm, "surealm": _surealm, "index": _index, "docstore": _docstore, "run": _run}[kind](
        p, device
    )
    if ask is not None:
        from ralm.serve.generator import attach_generator

        attach_generator(t, ask, device)
    for note in t.notes:
        log(note)
    return t


# ----------------------------------------------------------------------------- loaders per kind
def _bm25_for(store, lang: str | None = None):
    """BM25 built in memory over `store`: `lang`'s analysis, else (None) the DocStore's own."""
    from ralm.retrieval.bm25_spec import bm25_options
    from ralm.retrieval.retriever import Retriever

    return Retriever.open(store, bm25_options=bm25_options(lang) if lang else {}).backend


def _with_hybrid(t: Target) -> Target:
    """Search's hybrid: the target's BM25 and dense fused (RRF, each giving its top 100)."""
    if t.dense is not None and t.bm25 is not None:
        from ralm.retrieval.retriever import Retriever

        sparse = Retriever(t.store, t.bm25, "bm25", t.path)
        dense = Retriever(t.store, t.dense, "dense", t.path)
        t.hybrid = Retriever.hybrid(sparse, dense).backend
    return t


def _realm(p: Path, device: str | None) -> Target:
    from ralm.realm.training.run import load_run, open_stores, read_run_config
    from ralm.train.checkpoint import intact_checkpoint

    cfg = read_run_config(p)
    t = Target("realm", p, [], metrics_path=p / METRICS_FILE, config=cfg.to_dict(), steps=cfg.steps)
    ckpt = intact_checkpoint(p)  # warns once about newer damaged checkpoints passed over
    if ckpt is None:
        t.store = open_stores(cfg)[0]
        t.notes.append(
            f"{p}: no finished checkpoint yet; serving Runs, Corpus and BM25 Search (restart once it has one "
            "for Fill)"
        )
    else:
        run = load_run(p, checkpoint=ckpt, device=device)
        # the pages get their own DocStore (its row cache is not shared with the model's, so Corpus
        # and Search never wait for a Fill to finish)
        t.realm, t.store, t.device = run, open_stores(cfg)[0], str(run.device)
        t.checkpoint = run.checkpoint.name
        if run.model.retrieval:
            t.dense = RunDense(run)
    t.bm25 = _bm25_for(t.store, cfg.bm25_lang)
    t.pages = (["fill"] if t.realm is not None else []) + ["search", "corpus", "runs"]
    return _with_hybrid(t)


def _surealm(p: Path, device: str | None) -> Target:
    from ralm.surealm.model import MODEL_FILE
    from ralm.surealm.train import TRAIN_FILE, load_trained

    t = Target("surealm", p, ["runs"], metrics_path=p / METRICS_FILE)
    info = _read_json(p / TRAIN_FILE)
    t.config = info.get("config", {}) if isinstance(info, dict) else {}
    t.steps = t.config.get("steps")
    if not (p / MODEL_FILE).is_file():
        t.notes.append(f"{p}: no model saved yet; serving Runs (restart once it has one for Generate)")
        return t
    from ralm.surealm.embedder import SpanEmbedder

    model, tok, store, _ = load_trained(p, device=device or "auto")
    dev = next(model.parameters()).device
    # generate() retrieves for a baseline too (its model ignores the memory): one embedder for both
    embedder = SpanEmbedder(store.manifest["encoder"], device=dev)
    if embedder.fingerprint != store.manifest["encoder_fingerprint"]:
        raise RalmError(
            f"{store.root}: built with another sentence encoder than {embedder.path}; "
            "use the encoder the data store names or rebuild it"
        )
    t.surealm, t.device = SurealmParts(model, tok, store, embedder), str(dev)
    t.checkpoint = (
        f"best step {info.get('best_step')}" if isinstance(info, dict) and info.get("best_step") else p.name
    )
    t.pages = ["generate", "runs"]
    return t


def _index(p: Path, device: str | None) -> Target:
    from ralm.retrieval.retriever import Retriever

    notes: list[str] = []
    opened = Retriever.load(p, "dense", log=notes.append)
    store, dense = opened.store, opened.backend
    manifest = _read_json(p / "retrieval.json") or {}
    # the index's own BM25 when it has one, else one built in memory for the DocStore's language
    bm25_options = None if manifest.get("bm25") else {}
    bm25 = Retriever.load(p, "bm25", store=store.root, bm25_options=bm25_options, log=notes.append).backend
    if device:
        from ralm.train.device import resolve_device

        device = str(resolve_device(device))
        dense.encoder.to(device)
    build = _read_json(p / "build.json")
    config = {"retrieval.json": manifest, **({"build.json": build} if build else {})}
    t = Target(
        "index",
        p,
        ["search", "corpus"],
        device=device or "cpu",
        store=store,
        dense=dense,
        bm25=bm25,
        config=config,
        notes=notes,
    )
    return _with_hybrid(t)


def _docstore(p: Path, device: str | None) -> Target:
    from ralm.corpus.docstore import DocStore

    store = DocStore(p)
    t = Target("docstore", p, ["search", "corpus"], store=store, config=store.manifest)
    t.bm25 = _bm25_for(store)
    return t


def _run(p: Path, device: str | None) -> Target:
    return Target("run", p, ["runs"], metrics_path=p / METRICS_FILE)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
