"""What `--model` and `--index` name, turned into a task model and (optionally) a retriever.

`--model M` may be:
  * a REALM/BRENT pre-training run (`ralm pretrain --out`): its reader, and with retrieval its
    query/doc towers and the index of its last refresh (BRENT_reader and BRENT rows);
  * an exported reader (`ralm export-reader`) or any local Hugging Face encoder / masked LM
    (default: the bundled MiniLM).
`prepare_init(M, out)` resolves this once per fine-tuning job: a run's reader and retriever are
exported under ``out/init/`` (plain HF / DualEncoder directories) so every seed loads the same
files. `load_task_model` then builds the Hugging Face head the task needs
(``AutoModelFor{QuestionAnswering,TokenClassification,SequenceClassification}``) on top of the
encoder weights; the MLM head of a reader is dropped (HF's own loading logic does that).

Decoder-only LMs (gemma3, smollm2, a .gguf file, a causal LM directory or a causal REALM run's
reader) get `ralm.tasks.causal_heads.CausalTaskModel`: transformers has no token-classification
or QA class for several of them. Left out: encoder-decoder backbones, and retrieval or open-QA
on causal backbones (the retrieved chunk follows x in a row, where a causal x cannot read it).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ralm.errors import RalmError
from ralm.models.encoder import load_auto
from ralm.models.names import NAMED_LMS, resolve_model_dir
from ralm.models.tokenizers import load_tokenizer
from ralm.tasks.causal_heads import is_causal_backbone

__all__ = ["InitSpec", "load_retriever_parts", "load_task_model", "prepare_init"]

INIT_FILE = "init.json"


@dataclass
class InitSpec:
    """Where a fine-tuning job's starting weights live (all local directories).

    reader: HF directory the task model starts from. encoder/index/docstore: the retriever's
    DualEncoder directory, DenseIndex directory and DocStore (None when there is no dense
    retriever); bm25: an index directory's BM25 (INDEX/bm25, open-QA baselines; opened through
    INDEX with `ralm.Retriever`). source: what --model named.
    """

    reader: str
    source: str
    encoder: str | None = None
    index: str | None = None
    docstore: str | None = None
    bm25: str | None = None

    @property
    def label(self) -> str:
        """A short row name: the bundled backbone is "minilm", others their directory's name."""
        from ralm.models.names import default_backbone_path

        try:
            if Path(self.source).resolve() == default_backbone_path().resolve():
                return "minilm"
        except RalmError:
            pass
        return Path(self.source).name


def _is_run(p: Path) -> bool:
    return (p / "config.toml").is_file() and (p / "checkpoints").is_dir()


def prepare_init(
    model: str | None, out: Path, *, retrieval: bool, index: str | None = None, retriever: str = "dense"
) -> InitSpec:
    """Resolve --model/--index into an InitSpec, exporting a run's parts under ``out/init/``.

    index: an index directory (`ralm index build --out`) to retrieve from; default the run's own.
    retriever: "dense" or "bm25" (the index directory must have been built with --bm25).
    """
    src = str(model) if model else "minilm"
    p = Path(src).expanduser()
    spec: InitSpec
    if model and p.is_dir() and _is_run(p):
        from ralm.realm.inference.export import export_reader, export_retriever
        from ralm.realm.training.run import load_run

        run = load_run(p, device="cpu")
        init = out / "init"
        reader_dir = export_reader(run, init / "reader", overwrite=True)
        spec = InitSpec(reader=str(reader_dir), source=str(p.resolve()))
        if retrieval and index is None and retriever == "dense":
            if run.model.encoder is None:
                raise RalmError(
                    f"{p}: an MLM-only run has no retriever; pass --index DIR (a `ralm index build` "
                    "directory) to fine-tune it with retrieval"
                )
            spec.encoder = str(export_retriever(run, init / "retriever", overwrite=True))
            spec.index = str(run.checkpoint / "index")
            spec.docstore = str(Path(run.cfg.docstore).resolve())
    elif model and is_causal_backbone(model):
        spec = InitSpec(reader=str(model), source=str(model) if str(model) in NAMED_LMS else str(p.resolve()))
    else:
        d = resolve_model_dir(model)
        if not (d / "config.json").is_file():
            raise RalmError(f"{d}: no config.json; --model needs a model directory, a reader or a REALM run")
        spec = InitSpec(reader=str(d), source=str(d))
    if retrieval and spec.encoder is None and spec.bm25 is None:
        if index is None:
            raise RalmError(
                f"{src}: retrieval needs an index; pass --index DIR (built with `ralm index build`) "
                "or give a REALM run as --model"
            )
        from ralm.retrieval.index.directory import read_index_dir

        ds, manifest = read_index_dir(index)  # the parts' paths are recorded; nothing opened yet
        spec.docstore = str(Path(ds.root).resolve())
        if retriever == "bm25":
            if not manifest.get("bm25"):
                raise RalmError(f"{index}: built without BM25; rebuild it with `ralm index build --bm25`")
            spec.bm25 = str(Path(index) / "bm25")
        else:
            spec.encoder, spec.index = str(Path(index) / "encoder"), str(Path(index) / "dense")
    return spec


def write_init(spec: InitSpec, out: Path, final: Path | None = None) -> None:
    """Record `spec` in out/init.json; paths inside `out` are written as they will be once `out`
    (a temporary directory) is renamed to `final`."""
    d = asdict(spec)
    if final is not None:
        root = str(out)
        for key, v in d.items():
            if isinstance(v, str) and (v == root or v.startswith(root + os.sep)):
                d[key] = str(final) + v[len(root) :]
    (out / INIT_FILE).write_text(json.dumps(d, indent=2) + "\n", encoding="utf-8")


HEADS = {
    "extractive-qa": "AutoModelForQuestionAnswering",
    "open-qa": "AutoModelForQuestionAnswering",
    "ner": "AutoModelForTokenClassification",
    "pos": "AutoModelForTokenClassification",
    "classify": "AutoModelForSequenceClassification",
}


def load_task_model(
    task: str, model_dir: str | os.PathLike, labels: list[str] | None = None, causal: dict | None = None
):
    """(HF task model, tokenizer) from an encoder/reader directory, with label maps for tagging and
    classification; a decoder-only LM gets a `CausalTaskModel` (causal: its options,
    bidirectional/pooling/lora_r/train_embeddings). Fails with one line when the directory is not a
    usable model."""
    if is_causal_backbone(model_dir):
        from ralm.tasks.causal_heads import load_causal_task_model

        if task == "open-qa":
            raise RalmError(
                f"{model_dir}: open-qa needs an encoder reader; a causal LM answers open questions with `ralm rag`"
            )
        return load_causal_task_model(task, model_dir, labels, **(causal or {}))
    if causal and causal.get("bidirectional"):
        raise RalmError(
            f"{model_dir}: --bidirectional is for decoder-only LMs; an encoder already reads both sides"
        )
    d = resolve_model_dir(model_dir)
    kw = {}
    if labels is not None:
        kw = {
            "num_labels": len(labels),
            "id2label": dict(enumerate(labels)),
            "label2id": {lab: i for i, lab in enumerate(labels)},
        }
    try:
        model = load_auto(HEADS[task], d, **kw)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RalmError(
            f"{d}: cannot be loaded as {HEADS[task]} ({first[:200]}); pass a BERT-style encoder, "
            "an exported reader or a REALM run"
        ) from None
    return model, load_tokenizer(d)


def load_retriever_parts(spec: InitSpec, *, reader_tokenizer, k: int, tune: bool, null_doc: bool = True):
    """A `TaskRetriever` from an InitSpec (None when the spec has no retriever)."""
    from ralm.corpus.docstore import DocStore
    from ralm.realm.training.build import check_reader_tokenizer
    from ralm.tasks.retrieval import TaskRetriever

    if spec.docstore is None:
        return None
    store = DocStore(spec.docstore)
    check_reader_tokenizer(store, reader_tokenizer, spec.reader)
    if spec.bm25 is not None:
        from ralm.retrieval.retriever import Retriever

        # INDEX/bm25 (prepare_init): the index directory's own BM25, checked against the DocStore
        bm25 = Retriever.load(Path(spec.bm25).parent, "bm25", store=store.root).backend
        return TaskRetriever(store, bm25=bm25, k=k, null_doc=null_doc)
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.index.sharded import load_dense

    encoder = DualEncoder.from_pretrained(spec.encoder)
    index = load_dense(spec.index, docstore_fingerprint=store.fingerprint)  # sharded or not
    if index.dim != encoder.dim:
        raise RalmError(f"{spec.index}: {index.dim}-d vectors, but the query tower gives {encoder.dim}-d")
    return TaskRetriever(store, encoder=encoder, index=index, k=k, null_doc=null_doc, tune=tune)
