"""ralm: retrieval-augmented and knowledge-enhanced language models in PyTorch.

The main objects under stable names. Each is imported on first use (PEP 562 module
`__getattr__`), so `import ralm` loads neither torch nor transformers; `ralm.DocStore`,
`ralm.Retriever` (BM25) and `ralm.NGramLM` do not either, the models do.

    corpus       DocStore, BuildConfig, build_docstore, export_dataset (to Hugging Face datasets)
    retrieval    Retriever, Hit, SearchResult, build_index_dir, DualEncoder, EncoderConfig,
                 export_rag (passages + FAISS index for transformers' RagRetriever)
    REALM/BRENT  PretrainConfig, pretrain, load_run, fill, FillResult, evaluate_mlm, export_reader
    downstream   FinetuneConfig, finetune, load_task_data
    frozen LMs   load_frozen_lm, tokenize_eval_text, FrozenEvalConfig, FrozenRetrieval, evaluate_frozen
    RAG QA       read_questions, RagConfig, run_rag, Asker, GeneratorTrainConfig, train_generator,
                 LSRConfig, train_lsr
    LMs          NGramLM
    LUKE         LukeConfig, LukeForPretraining, LukeForSpanClassification
    errors       RalmError

A corpus, an index and a search, on a two-article JSONL file:

>>> import json, pathlib, tempfile, ralm
>>> tmp = pathlib.Path(tempfile.mkdtemp())
>>> rows = [{"title": "Oslo", "text": "Oslo is the capital of Norway."},
...         {"title": "Bergen", "text": "Bergen lies on the west coast of Norway."}]
>>> _ = (tmp / "wiki.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
>>> store = ralm.build_docstore([tmp / "wiki.jsonl"], tmp / "corpus", progress=False, log=lambda m: None)
>>> len(store), store.get(0)["title"]
(2, 'Oslo')
>>> _ = ralm.build_index_dir(store, tmp / "index", encoder=None, bm25=True, progress=False, log=lambda m: None)
>>> [hit.title for hit in ralm.Retriever.load(tmp / "index", kind="bm25").search("capital of Norway", k=2)]
['Oslo', 'Bergen']
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> (module, attribute); the attribute is imported on first access
_EXPORTS: dict[str, tuple[str, str]] = {
    "RalmError": ("ralm.errors", "RalmError"),
    # corpus
    "DocStore": ("ralm.corpus.docstore", "DocStore"),
    "BuildConfig": ("ralm.corpus.build_options", "BuildConfig"),
    "build_docstore": ("ralm.corpus.build", "build_docstore"),
    "export_dataset": ("ralm.corpus.hf_export", "export_dataset"),
    # retrieval
    "Retriever": ("ralm.retrieval.retriever", "Retriever"),
    "Hit": ("ralm.retrieval.base", "Hit"),
    "SearchResult": ("ralm.retrieval.base", "SearchResult"),
    "build_index_dir": ("ralm.retrieval.index.build", "build_index_dir"),
    "DualEncoder": ("ralm.retrieval.encoders", "DualEncoder"),
    "EncoderConfig": ("ralm.retrieval.encoders", "EncoderConfig"),
    "export_rag": ("ralm.retrieval.hf_export", "export_rag"),
    # REALM / BRENT
    "PretrainConfig": ("ralm.realm.config", "PretrainConfig"),
    "pretrain": ("ralm.realm.training.trainer", "pretrain"),
    "load_run": ("ralm.realm.training.run", "load_run"),
    "fill": ("ralm.realm.inference.fill", "fill"),
    "FillResult": ("ralm.realm.inference.fill", "FillResult"),
    "evaluate_mlm": ("ralm.realm.inference.evaluate", "evaluate_mlm"),
    "export_reader": ("ralm.realm.inference.export", "export_reader"),
    "CausalReader": ("ralm.realm.readers.causal", "CausalReader"),
    # downstream tasks
    "FinetuneConfig": ("ralm.tasks.finetune", "FinetuneConfig"),
    "finetune": ("ralm.tasks.finetune", "finetune"),
    "load_task_data": ("ralm.tasks.datasets", "load_task_data"),
    # frozen causal LMs with retrieval
    "load_frozen_lm": ("ralm.frozen.lm", "load_frozen_lm"),
    "tokenize_eval_text": ("ralm.frozen.text", "tokenize_eval_text"),
    "FrozenEvalConfig": ("ralm.frozen.evaluate", "EvalConfig"),
    "FrozenRetrieval": ("ralm.frozen.evaluate", "Retrieval"),
    "evaluate_frozen": ("ralm.frozen.evaluate", "evaluate"),
    # RAG QA: a generator answering from retrieved passages
    "read_questions": ("ralm.rag.data", "read_questions"),
    "RagConfig": ("ralm.rag.evaluate", "RagConfig"),
    "run_rag": ("ralm.rag.evaluate", "run_rag"),
    "Asker": ("ralm.rag.ask", "Asker"),
    "GeneratorTrainConfig": ("ralm.rag.finetune", "GeneratorTrainConfig"),
    "train_generator": ("ralm.rag.finetune", "train_generator"),
    "LSRConfig": ("ralm.rag.lsr", "LSRConfig"),
    "train_lsr": ("ralm.rag.lsr", "train_lsr"),
    # language models
    "NGramLM": ("ralm.lm.ngram", "NGramLM"),
    # LUKE / DaLUKE
    "LukeConfig": ("ralm.luke.config", "LukeConfig"),
    "LukeForPretraining": ("ralm.luke.model", "LukeForPretraining"),
    "LukeForSpanClassification": ("ralm.luke.model", "LukeForSpanClassification"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access and cache the object in this module."""
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'ralm' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
