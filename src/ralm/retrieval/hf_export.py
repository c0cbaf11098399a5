"""Hugging Face data out: a DocStore as a `datasets` Dataset, an index as a RagRetriever knowledge source.

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

import json
import os
import shutil
from pathlib import Path

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError

__all__ = ["export_dataset", "export_rag"]

MARKER = "ralm_hf_export.json"  # what an export holds; lets overwrite=True replace only exports


def _datasets():
    try:
        import datasets
    except ImportError:
        raise RalmError(
            "exporting to Hugging Face datasets needs the datasets package: pip install datasets"
        ) from None
    datasets.disable_progress_bars()
    return datasets


def _start(out: Path, overwrite: bool) -> Path:
    """A fresh temporary sibling of `out`; RalmError when `out` exists and may not be replaced."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise RalmError(f"{out}: exists; choose another --out or pass --overwrite")
        if not (out / MARKER).is_file():
            raise RalmError(f"{out}: exists and is not a ralm export (no {MARKER}); refusing to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def _finish(tmp: Path, out: Path, info: dict) -> Path:
    (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def export_dataset(store: DocStore, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write `store`'s chunks as a `datasets` save_to_disk folder at `out`; returns it.

    Example: `export_dataset(DocStore("corpus"), "corpus-hf")`, then
    `datasets.load_from_disk("corpus-hf")[0]["text"] == DocStore("corpus").get(0)["text"]`.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    datasets = _datasets()
    out = Path(out)
    tmp = _start(out, overwrite)
    try:
        table = pa.concat_tables([pq.read_table(p) for p in store.parquet_files])
        datasets.Dataset(table).save_to_disk(str(tmp / "data"))
        for f in (tmp / "data").iterdir():  # the dataset at out/ itself, the marker beside it
            os.replace(f, tmp / f.name)
        (tmp / "data").rmdir()
        return _finish(tmp, out, {"kind": "docstore", "docstore": str(store.root), "rows": len(store)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def export_rag(index: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write an index directory's passages and FAISS index for transformers' RagRetriever at `out`.

    out/passages: columns title, text, embeddings ((d,) float32 doc vectors), id (chunk id);
    out/index.faiss: the dense index (its rows are the passages' rows). Queries must be embedded
    with the index's query tower (`index/encoder`, or `DualEncoder.encode_queries`).
    """
    from ralm.retrieval.index import DenseIndex
    from ralm.retrieval.search import open_index_dir

    datasets = _datasets()
    index, out = Path(index), Path(out)
    store, manifest = open_index_dir(index)
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
