"""The DocStore: a chunked corpus on disk, with stable integer ids and random access.

Layout of a DocStore directory:

    manifest.json            sources and their hashes, tokenizer, chunk size, counts, layout,
                             `files`: every other file's size and XXH3-128 checksum
    chunks/part-00000.parquet one row per chunk, ids 0..N-1 in order, `rows_per_shard` per file
    articles.parquet         one row per article: its chunks are first_chunk .. first_chunk+n_chunks-1
    entities.tsv             the entity vocabulary (see ralm.corpus.entities), when one was built
    tokens/input_ids.{bin,idx}  the chunks' token ids, memory-mapped (int32, ragged)
    tokens/salient.{bin,idx}    salient spans in token coordinates, (token_start, token_end, source) int32

The Parquet files are the interchange format (pyarrow, `datasets.load_dataset("parquet", ...)`,
pandas, DuckDB). Random access by id reads one small row group (`row_group_size` rows) and
keeps a few decoded groups in an LRU cache, so nothing loads the corpus into memory. The
ragged token files (ralm.corpus.ragged) serve the training hot path: `input_ids(i)` is a
memory-map slice, no decode.

Token coordinates index a chunk's `input_ids`, which exclude special tokens; a span
(token_start, token_end) is half-open. Left out: writes after the build (a DocStore is immutable;
build a new one), and compression choices beyond Parquet's default (snappy).

Damage (see ralm.corpus.verify). The manifest lists every file with its size and XXH3-128
checksum (`files`). Opening a DocStore compares the sizes (a few `stat` calls): a missing or
truncated file ends in one CorpusError naming it, suggesting `ralm corpus verify` and a
rebuild. A file overwritten with other bytes of the same length passes that check; only
`ralm corpus verify STORE`, which re-hashes every file, finds it. A Parquet file that pyarrow
cannot read (ArrowInvalid, OSError) is reported as one CorpusError naming the file. Stores built
before the file records: only missing files are caught on open, and verify cannot check them.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ralm.corpus.manifest import FORMAT, FORMAT_VERSION, MANIFEST, read_manifest
from ralm.corpus.ragged import RaggedArray, RaggedWriter
from ralm.corpus.verify import check_on_open, read_error
from ralm.errors import CorpusError

__all__ = [
    "ARTICLE_SCHEMA",
    "CHUNK_SCHEMA",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "SALIENT_SOURCES",
    "DocStore",
    "DocStoreWriter",
    "RaggedArray",
    "RaggedWriter",
    "SalientSpan",
    "iter_parquet_batches",
    "read_manifest",
]


# Min/max statistics only where they help (pruning by id/article); on text and list columns
# they would bloat the footer and the writer's memory with every row group.
STATISTICS_COLUMNS = ["id", "article", "position", "char_start", "char_end"]

# Salient span sources, in the integer code stored in tokens/salient.bin.
SALIENT_SOURCES = ("link", "auto", "ner", "date", "name", "number")  # new sources go last (stored codes)

LINK_TYPE = pa.struct([("start", pa.int32()), ("end", pa.int32()), ("target", pa.string())])
SALIENT_TYPE = pa.struct(
    [
        ("start", pa.int32()),
        ("end", pa.int32()),
        ("token_start", pa.int32()),
        ("token_end", pa.int32()),
        ("source", pa.string()),
        ("label", pa.string()),
    ]
)
CHUNK_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),  # stable chunk id = row number in the whole store
        ("article", pa.int64()),  # article index (row of articles.parquet)
        ("title", pa.string()),
        ("position", pa.int32()),  # 0-based chunk index within its article
        ("char_start", pa.int64()),  # offsets of the chunk text in the article text
        ("char_end", pa.int64()),
        ("text", pa.string()),
        ("input_ids", pa.list_(pa.int32())),  # no special tokens
        ("links", pa.list_(LINK_TYPE)),  # character spans relative to `text`
        ("salient", pa.list_(SALIENT_TYPE)),  # character spans relative to `text` + token spans
    ]
)
ARTICLE_SCHEMA = pa.schema(
    [
        ("article", pa.int64()),
        ("source_id", pa.string()),  # the id the source gave it (wiki page id, JSONL "id")
        ("title", pa.string()),
        ("source", pa.int32()),  # index into manifest["sources"]
        ("first_chunk", pa.int64()),
        ("n_chunks", pa.int32()),
        ("n_chars", pa.int64()),
    ]
)


def iter_parquet_batches(
    path: Path, batch_size: int, columns: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """Record batches of a Parquet file, one row group at a time.

    `ParquetFile.iter_batches` over a whole file lets Arrow buffer ahead across row groups
    (measured: Arrow memory growing with the file, 40 -> 134 MB over a 160k-chunk staging
    file); asking for one row group at a time keeps memory at one row group.
    """
    pf = pq.ParquetFile(path)
    for rg in range(pf.num_row_groups):
        yield from pf.iter_batches(
            batch_size=batch_size, row_groups=[rg], columns=list(columns) if columns else None
        )


# ----------------------------------------------------------------------------- writer
class DocStoreWriter:
    """Writes chunk rows into Parquet shards and the ragged token files, in id order."""

    def __init__(self, root: Path, rows_per_shard: int = 131_072, row_group_size: int = 128) -> None:
        if rows_per_shard % row_group_size:
            raise ValueError("rows_per_shard must be a multiple of row_group_size")
        self.root = Path(root)
        (self.root / "chunks").mkdir(parents=True, exist_ok=True)
        (self.root / "tokens").mkdir(parents=True, exist_ok=True)
        self.rows_per_shard = rows_per_shard
        self.row_group_size = row_group_size
        self.n_rows = 0
        self.shards: list[str] = []
        self._writer: pq.ParquetWriter | None = None
        self._buffer: list[dict[str, Any]] = []
        self._ids = RaggedWriter(self.root / "tokens" / "input_ids", "int32", 1)
        self._salient = RaggedWriter(self.root / "tokens" / "salient", "int32", 3)
        self.n_tokens = 0
        self.salient_counts = dict.fromkeys(SALIENT_SOURCES, 0)

    def add(self, row: dict[str, Any]) -> int:
        """Append one chunk row (CHUNK_SCHEMA fields except `id`); returns its id."""
        cid = self.n_rows
        row["id"] = cid
        self._ids.append(row["input_ids"])
        self.n_tokens += len(row["input_ids"])
        spans = row["salient"]
        for s in spans:
            self.salient_counts[s["source"]] += 1
        self._salient.append(
            [(s["token_start"], s["token_end"], SALIENT_SOURCES.index(s["source"])) for s in spans]
        )
        row["input_ids"] = np.asarray(row["input_ids"], dtype=np.int32)
        self._buffer.append(row)
        self.n_rows += 1
        if len(self._buffer) == self.row_group_size:
            self._flush()
        return cid

    def _flush(self) -> None:
        if not self._buffer:
            return
        if self._writer is None:
            name = f"part-{len(self.shards):05d}.parquet"
            self.shards.append(name)
            self._writer = pq.ParquetWriter(
                self.root / "chunks" / name, CHUNK_SCHEMA, write_statistics=STATISTICS_COLUMNS
            )
        table = pa.Table.from_pylist(self._buffer, schema=CHUNK_SCHEMA)
        self._writer.write_table(table, row_group_size=self.row_group_size)
        self._buffer = []
        if self.n_rows % self.rows_per_shard == 0:
            self._writer.close()
            self._writer = None

    def close(self) -> dict[str, Any]:
        """Flush everything; returns the layout part of the manifest."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._ids.close()
        self._salient.close()
        return {
            "rows_per_shard": self.rows_per_shard,
            "row_group_size": self.row_group_size,
            "shards": [f"chunks/{s}" for s in self.shards],
        }


# ----------------------------------------------------------------------------- reader


@dataclass(frozen=True)
class SalientSpan:
    """A salient span of a chunk: token span [token_start, token_end) and char span [start, end)."""

    start: int
    end: int
    token_start: int
    token_end: int
    source: str
    label: str


class DocStore:
    """Read access to a DocStore directory (see the module docstring for the layout).

    Opening checks that every file the manifest lists is there with its recorded size (cheap),
    and raises one CorpusError naming the first that is not. A file overwritten with other bytes
    of the same size passes; only `ralm corpus verify` (checksums) finds that.

    `store[i]` / `store.get(i)` -> dict with the CHUNK_SCHEMA fields of chunk i.
    `store.get_many(ids)` -> list of such dicts, in the order of `ids`.
    `store.input_ids(i)` -> (T,) int32 memory-map view; `store.salient_tokens(i)` -> (S, 3) int32.
    `store.iter_batches(batch_size, columns)` -> dicts of column lists, in id order.
    """

    def __init__(self, root: str | os.PathLike, cache_groups: int = 64) -> None:
        self.root = Path(root)
        self.manifest: dict[str, Any] = read_manifest(self.root)
        check_on_open(self.root, self.manifest)  # sizes only; contents: `ralm corpus verify`
        layout = self.manifest["layout"]
        self.rows_per_shard: int = layout["rows_per_shard"]
        self.row_group_size: int = layout["row_group_size"]
        self.shard_paths = [self.root / s for s in layout["shards"]]
        self._len: int = self.manifest["counts"]["chunks"]
        self._files: dict[int, pq.ParquetFile] = {}
        self._cache: OrderedDict[tuple[int, int], list[dict[str, Any]]] = OrderedDict()
        self._cache_groups = cache_groups
        self._ids: RaggedArray | None = None
        self._salient: RaggedArray | None = None

    # -- metadata
    def __len__(self) -> int:
        return self._len

    @property
    def fingerprint(self) -> str:
        """sha256 over the chunk shards and token files, fixed at build time (indexes check it)."""
        return self.manifest["fingerprint"]

    @property
    def lang(self) -> str | None:
        """The language the corpus was built for (`ralm corpus build --lang`, recorded in the
        manifest), or None for a manifest that does not record one. Retrieval uses it as the
        default BM25 analysis and answer normalisation."""
        lang = (self.manifest.get("config") or {}).get("lang")
        return lang if isinstance(lang, str) and lang.strip() else None

    @property
    def parquet_files(self) -> list[str]:
        """Paths of the chunk shards, for `datasets.load_dataset("parquet", data_files=...)`."""
        return [str(p) for p in self.shard_paths]

    def articles(self, columns: Sequence[str] | None = None) -> pa.Table:
        """The article table (small: one row per article), or some of its columns."""
        path = self.root / "articles.parquet"
        try:
            return pq.read_table(path, columns=list(columns) if columns else None)
        except (pa.ArrowException, OSError) as exc:
            raise read_error(self.root, path, exc) from None

    # -- random access
    def _check_id(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < self._len:
            raise CorpusError(f"chunk id {i} is out of range: {self.root} has ids 0..{self._len - 1}")
        return i

    def _group(self, shard: int, group: int) -> list[dict[str, Any]]:
        key = (shard, group)
        rows = self._cache.get(key)
        if rows is not None:
            self._cache.move_to_end(key)
            return rows
        try:
            pf = self._files.get(shard)
            if pf is None:
                pf = self._files[shard] = pq.ParquetFile(self.shard_paths[shard])
            rows = pf.read_row_group(group).to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise read_error(self.root, self.shard_paths[shard], exc) from None
        self._cache[key] = rows
        if len(self._cache) > self._cache_groups:
            self._cache.popitem(last=False)
        return rows

    def get(self, i: int) -> dict[str, Any]:
        """Chunk `i` as a dict of CHUNK_SCHEMA fields."""
        i = self._check_id(i)
        shard, local = divmod(i, self.rows_per_shard)
        group, row = divmod(local, self.row_group_size)
        return self._group(shard, group)[row]

    __getitem__ = get

    def get_many(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        """Chunks for `ids` (any order, repeats allowed), reading each needed row group once."""
        return [self.get(i) for i in ids]

    def input_ids(self, i: int) -> np.ndarray:
        """(T,) int32 token ids of chunk `i` (no special tokens), a memory-map view."""
        if self._ids is None:
            self._ids = RaggedArray(self.root / "tokens" / "input_ids", "int32", 1)
        return self._ids[self._check_id(i)]

    def salient_tokens(self, i: int) -> np.ndarray:
        """(S, 3) int32 rows (token_start, token_end, source code) for chunk `i`; codes index SALIENT_SOURCES."""
        if self._salient is None:
            self._salient = RaggedArray(self.root / "tokens" / "salient", "int32", 3)
        return self._salient[self._check_id(i)]

    def lengths(self) -> np.ndarray:
        """(N,) int64 number of tokens of every chunk (no special tokens)."""
        if self._ids is None:
            self._ids = RaggedArray(self.root / "tokens" / "input_ids", "int32", 1)
        return self._ids.lengths()

    # -- iteration
    def iter_batches(
        self, batch_size: int = 1024, columns: Sequence[str] | None = None
    ) -> Iterator[dict[str, list]]:
        """Batches in id order as {column: list}, streaming shard by shard (memory: one batch)."""
        for path in self.shard_paths:
            batches = iter_parquet_batches(path, batch_size, columns)
            while True:
                try:
                    batch = next(batches, None)
                except (pa.ArrowException, OSError) as exc:
                    raise read_error(self.root, path, exc) from None
                if batch is None:
                    break
                yield batch.to_pydict()

    def salient_spans(self, i: int) -> list[SalientSpan]:
        """The salient spans of chunk `i` with their labels."""
        return [SalientSpan(**s) for s in self.get(i)["salient"]]
