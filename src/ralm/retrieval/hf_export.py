"""Hugging Face data out: an index as a RagRetriever knowledge source (a DocStore alone as a Dataset:
`ralm.corpus.hf_export.export_dataset`).

    export_dataset(store, out)   out/ is `Dataset.save_to_disk` output: `datasets.load_from_disk(out)`
                                 opens the chunks (every DocStore column; row i = chunk i)
    export_rag(index, out)       out/passages/ (save_to_disk: "title", "text", "embeddings", "id")
                                 and out/index.faiss, the index's own FAISS file (row i = chunk i):
                                 transformers' `RagRetriever` with `index_name="custom"`,
                                 `passages_path=out/passages`, `index_path=out/index.faiss` searches it

Both need the `datasets` package (a RalmError says how to install it when it is missing), write
into a temporary sibling and rename it into place, and refuse an existing `out` unless
overwrite=True (and then only one they wrote). The tables are built in memory: about the size of
the DocStore's Parquet (export_dataset) or of the embeddings (export_rag).

Deliberately left out: pushing to the Hub, and centred indexes (their queries need the corpus mean
subtracted, which RagRetriever does not do: rebuild the index without `--center` to export it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from ralm.corpus.hf_export import _datasets, _finish, _start
from ralm.errors import RalmError

__all__ = ["export_rag"]


def export_rag(index: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write an index directory's passages and FAISS index for transformers' RagRetriever at `out`.

    out/passages: columns title, text, embeddings ((d,) float32 doc vectors), id (chunk id);
    out/index.faiss: the dense index (its rows are the passages' rows). Queries must be embedded
    with the index's query tower (`index/encoder`, or `DualEncoder.encode_queries`).
    """
    from ralm.retrieval.index.dense import DenseIndex
    from ralm.retrieval.index.directory import read_index_dir

    datasets = _datasets()
    index, out = Path(index), Path(out)
    store, manifest = read_index_dir(index)
    dense = DenseIndex.load(index / "dense", docstore_fingerprint=store.fingerprint)
    if dense.center is not None:
        raise RalmError(
            f"{index}: a centred index (built with --center) needs the corpus mean subtracted from every "
            "query, which RagRetriever does not do; rebuild it without --center to export it"
        )
    vectors = np.load(index / "embeddings.npy", mmap_mode="r")
    if vectors.shape[0] != len(store):
        raise RalmError(
            f"{index}: embeddings.npy has {vectors.shape[0]} rows for {len(store)} chunks; rebuild it"
        )
    tmp = _start(out, overwrite)
    try:
        titles, texts = [], []
        for batch in store.iter_batches(columns=["title", "text"]):
            titles += batch["title"]
            texts += batch["text"]
        columns = {
            "title": titles,
            "text": texts,
            "embeddings": np.asarray(vectors, dtype=np.float32),
            "id": np.arange(len(store), dtype=np.int64),
        }
        features = datasets.Features(
            {
                "title": datasets.Value("string"),
                "text": datasets.Value("string"),
                "embeddings": datasets.Sequence(datasets.Value("float32"), length=vectors.shape[1]),
                "id": datasets.Value("int64"),
            }
        )
        datasets.Dataset.from_dict(columns, features=features).save_to_disk(str(tmp / "passages"))
        shutil.copyfile(index / "dense" / "index.faiss", tmp / "index.faiss")
        info = {
            "kind": "rag",
            "index": str(index),
            "docstore": str(store.root),
            "rows": len(store),
            "dim": int(vectors.shape[1]),
            "index_kind": manifest.get("kind"),
        }
        return _finish(tmp, out, info)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
