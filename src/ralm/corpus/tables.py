"""Corpus input from Hugging Face data: `save_to_disk` folders, Parquet and Arrow files with a text column.

Each row is one article, as a JSONL record is (`ralm.corpus.records.record_article`): "text"
(required), "title" (optional, "" when absent), "id" (optional), "links" (optional, a list of
{"start", "end", "target"}). Other columns (a DPR passages file's "embeddings", say) are not read.
A folder is read as every Parquet/Arrow file under it in sorted path order (a DatasetDict's
splits, then shards); datasets' `cache-*.arrow` files are skipped. Rows are streamed a record
batch at a time with pyarrow, so memory stays flat and `datasets` is not needed.

Deliberately left out: the Hub (no downloads), column renaming (use datasets' `rename_column`),
and JSON/CSV tables (JSONL is read by `ralm.corpus.readers.iter_jsonl`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ralm.corpus.records import record_article
from ralm.corpus.types import Article
from ralm.errors import CorpusError

__all__ = ["TABLE_SUFFIXES", "is_table_source", "iter_table", "table_files"]

TABLE_SUFFIXES = (".parquet", ".arrow")
_DATASETS_FILES = ("state.json", "dataset_dict.json")  # what save_to_disk writes beside its shards
_COLUMNS = ("id", "title", "text", "links")
_BATCH_ROWS = 256


def _is_table_file(path: Path) -> bool:
    return (
        path.is_file() and path.suffix.lower() in TABLE_SUFFIXES and not path.name.startswith(("cache-", "."))
    )


def is_table_source(path: str | os.PathLike) -> bool:
    """A Parquet/Arrow file, or a folder that save_to_disk wrote or that holds such files and no
    `*.txt`: `is_table_source("wiki.parquet") is True`."""
    path = Path(path)
    if path.is_file():
        return path.suffix.lower() in TABLE_SUFFIXES
    if not path.is_dir():
        return False
    if any((path / name).is_file() for name in _DATASETS_FILES):
        return True
    return not any(path.glob("*.txt")) and any(_is_table_file(p) for p in path.iterdir())


def table_files(path: str | os.PathLike) -> list[Path]:
    """The Parquet/Arrow files of `path` (a file, or a folder searched recursively, sorted)."""
    path = Path(path)
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if _is_table_file(p))
    if not files:
        raise CorpusError(
            f"{path}: no Parquet or Arrow files found; pass a datasets save_to_disk folder or .parquet files"
        )
    return files


def _batches(path: Path) -> Iterator:
    """pyarrow record batches of `path`, only the columns ralm reads; CorpusError without "text"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if path.suffix.lower() == ".parquet":
            pf = pq.ParquetFile(path)
            names = pf.schema_arrow.names
            stream = pf.iter_batches(batch_size=_BATCH_ROWS, columns=[c for c in _COLUMNS if c in names])
        else:
            source = pa.memory_map(str(path))
            try:
                reader = pa.ipc.open_stream(source)
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(source)
                reader = (reader.get_batch(i) for i in range(reader.num_record_batches))
                names = None
            else:
                names = reader.schema.names
            stream = reader
        first = next(iter(stream), None)
    except (pa.ArrowException, OSError) as exc:
        raise CorpusError(
            f"{path}: not a readable Parquet or Arrow file ({str(exc).splitlines()[0]}); check the file"
        ) from None
    if first is None:
        return
    names = first.schema.names if names is None else names
    if "text" not in names:
        raise CorpusError(
            f'{path}: no "text" column (columns: {", ".join(names[:12])}); ralm reads "text" and optional '
            '"title", "id", "links"; rename the column (datasets\' rename_column)'
        )
    keep = [c for c in _COLUMNS if c in names]
    yield first.select(keep)
    for batch in stream:
        yield batch.select(keep)


def iter_table(path: str | os.PathLike) -> Iterator[Article]:
    """Yield one `Article` per row of a save_to_disk folder, Parquet or Arrow file (see the module doc).

    Rows with blank text are skipped; a source without any text is an error.
    """
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"{path}: no such file or directory; check the path")
    n_yielded = 0
    for file in table_files(path):
        row = 0
        for batch in _batches(file):
            for obj in batch.to_pylist():
                article = record_article(obj, f"{file}: row {row}")
                row += 1
                if article is not None:
                    n_yielded += 1
                    yield article
    if n_yielded == 0:
        raise CorpusError(f'{path}: no rows with a non-empty "text"; check the data')
