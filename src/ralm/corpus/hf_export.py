"""A DocStore out as a Hugging Face `datasets` Dataset (`export_dataset`), and the export helpers
the index export (ralm.retrieval.hf_export.export_rag) shares.

    export_dataset(store, out)   out/ is `Dataset.save_to_disk` output: `datasets.load_from_disk(out)`
                                 opens the chunks (every DocStore column; row i = chunk i)

It needs the `datasets` package (a RalmError says how to install it when it is missing), writes
into a temporary sibling and renames it into place, and refuses an existing `out` unless
overwrite=True (and then only one ralm wrote). The table is built in memory: about the size of
the DocStore's Parquet. Deliberately left out: pushing to the Hub.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ralm.atomic import replace_dir, temp_sibling
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError

__all__ = ["MARKER", "export_dataset"]

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
    tmp = temp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def _finish(tmp: Path, out: Path, info: dict) -> Path:
    (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    replace_dir(tmp, out)
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
            f.rename(tmp / f.name)
        (tmp / "data").rmdir()
        return _finish(tmp, out, {"kind": "docstore", "docstore": str(store.root), "rows": len(store)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
