"""Build a DocStore from raw sources: read -> chunk -> entity vocabulary -> salient spans -> write.

Two streaming passes, so memory stays flat in the size of the text:
1. read articles (MediaWiki dump, JSONL or plain text), tokenize and chunk them, write the
   chunks with their token offsets to a staging Parquet file, and count link targets and
   record redirects (these grow with the number of distinct titles, not with the text);
2. build the entity vocabulary (redirects resolved), then re-read the staged chunks and add
   salient spans (links, DaLUKE auto-annotation, dates, optional spaCy NER) in character and
   token coordinates, writing the final Parquet shards and memory-mapped token files.

Every option is checked before any input is read (ralm.corpus.build_options). Everything is
written into a hidden sibling directory that is renamed to `out` only when the build has
succeeded, under the writer lock of `out` (ralm.corpus.staging), so a failed or interrupted
build leaves nothing half-written behind and a full disk ends in one line. The manifest lists
every file with its size and XXH3-128 checksum (`ralm corpus verify` checks them).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import multiprocessing
import os
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ralm import __version__
from ralm.atomic import write_json_atomic
from ralm.corpus.build_options import ENTITY_FILE, BuildConfig, check_options, check_sources, prepare
from ralm.corpus.chunking import Chunk, Chunker
from ralm.corpus.docstore import (
    ARTICLE_SCHEMA,
    FORMAT,
    FORMAT_VERSION,
    LINK_TYPE,
    MANIFEST,
    DocStore,
    DocStoreWriter,
    iter_parquet_batches,
)
from ralm.corpus.entities import AutoAnnotator, EntityVocab
from ralm.corpus.readers import iter_articles
from ralm.corpus.salient import SpacyNER, char_to_token_spans, find_dates, merge_spans
from ralm.corpus.staging import fail_if_locked, staged_build
from ralm.corpus.surface_spans import find_names, find_numbers
from ralm.corpus.types import Article, Span
from ralm.corpus.verify import record_files
from ralm.corpus.wiki import WikiPage, iter_wiki_pages, no_articles_error
from ralm.errors import CorpusError
from ralm.models.tokenizers import tokenizer_fingerprint
from ralm.progress import tqdm

__all__ = ["ENTITY_FILE", "BuildConfig", "SalientTagger", "build_docstore", "file_sha256"]


STAGE_SCHEMA = pa.schema(
    [
        ("article", pa.int64()),
        ("title", pa.string()),
        ("position", pa.int32()),
        ("char_start", pa.int64()),
        ("char_end", pa.int64()),
        ("text", pa.string()),
        ("input_ids", pa.list_(pa.int32())),
        ("token_starts", pa.list_(pa.int32())),
        ("token_ends", pa.list_(pa.int32())),
        ("links", pa.list_(LINK_TYPE)),
    ]
)


def file_sha256(path: Path, block: int = 1 << 22) -> str:
    """sha256 of a file, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while buf := f.read(block):
            h.update(buf)
    return h.hexdigest()


def _batched(it: Iterable[Article], n: int) -> Iterator[list[Article]]:
    batch: list[Article] = []
    for x in it:
        batch.append(x)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def _convert_pages(pages: list[WikiPage]) -> list[Article | None]:
    """Worker side of the parallel wiki path: wikitext -> plain text and link spans."""
    return [p.to_article() for p in pages]


def _wiki_articles_parallel(
    path: Path, redirects: dict[str, str], workers: int, batch_size: int = 32
) -> Iterator[Article]:
    """Articles of a dump in order, converted by `workers` processes.

    The main process streams pages; at most 2 * workers batches are in flight, so memory stays
    flat (Pool.imap would drain the whole dump into its task queue). "spawn" workers: the
    parent already runs the tokenizer's threads, which must not be forked.
    """
    n = 0
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        pending: deque = deque()
        for batch in _batched(iter_wiki_pages(path, redirects=redirects), batch_size):
            pending.append(pool.apply_async(_convert_pages, (batch,)))
            while len(pending) >= 2 * workers:
                for art in pending.popleft().get():
                    if art is not None:
                        n += 1
                        yield art
        while pending:
            for art in pending.popleft().get():
                if art is not None:
                    n += 1
                    yield art
    if n == 0:
        raise no_articles_error(path, (0,), pages_read=None)


def _stage_row(c: Chunk) -> dict[str, Any]:
    return {
        "article": c.article,
        "title": c.title,
        "position": c.position,
        "char_start": c.char_start,
        "char_end": c.char_end,
        "text": c.text,
        "input_ids": c.input_ids,
        "token_starts": c.token_starts,
        "token_ends": c.token_ends,
        "links": [{"start": s.start, "end": s.end, "target": s.target} for s in c.links],
    }


class SalientTagger:
    """Finds the salient spans of chunk texts: links, auto-annotation, dates, NER, names and numbers, merged."""

    def __init__(self, vocab: EntityVocab | None, cfg: BuildConfig, ner: SpacyNER | None = None) -> None:
        self.vocab = vocab
        self.annotator = (
            AutoAnnotator(vocab) if (vocab is not None and cfg.auto_annotate and len(vocab)) else None
        )
        self.capitalized_only = cfg.auto_capitalized_only
        self.lang = cfg.lang
        self.dates = cfg.dates
        self.names = cfg.names
        self.numbers = cfg.numbers
        self.ner = ner if ner is not None else (SpacyNER(cfg.ner_model) if cfg.ner_model else None)

    def __call__(self, rows: dict[str, list]) -> list[list[dict[str, Any]]]:
        """rows: a staged batch as {column: list}; returns the salient rows of each chunk."""
        texts = rows["text"]
        ner_spans = self.ner(texts) if self.ner is not None else [[] for _ in texts]
        resolve = self.vocab.resolve if self.vocab is not None else (lambda t: t)
        out = []
        for text, links, starts, ends, ner in zip(
            texts, rows["links"], rows["token_starts"], rows["token_ends"], ner_spans, strict=True
        ):
            link_spans = [Span(s["start"], s["end"], "link", resolve(s["target"])) for s in links]
            groups = [link_spans, ner]
            if self.annotator is not None:
                auto = self.annotator.annotate(text)
                if self.capitalized_only:
                    auto = [a for a in auto if text[a.start].isupper() or text[a.start].isdigit()]
                groups.append(auto)
            if self.dates:
                groups.append(find_dates(text, self.lang))
            if self.names:
                groups.append(find_names(text))
            if self.numbers:
                groups.append(find_numbers(text))
            spans = merge_spans(*groups)
            mapped = char_to_token_spans(
                spans, np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
            )
            out.append(
                [
                    {
                        "start": s.start,
                        "end": s.end,
                        "token_start": int(t0),
                        "token_end": int(t1),
                        "source": s.source,
                        "label": s.label,
                    }
                    for t0, t1, s in mapped
                ]
            )
        return out


def build_docstore(
    sources: list[str | os.PathLike],
    out: str | os.PathLike,
    cfg: BuildConfig | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> DocStore:
    """Build a DocStore at `out` from `sources`; returns it opened.

    Raises CorpusError (one line, names the file or option) on a bad option, before any input is
    read; on bad input, a full disk or another process writing `out`, which is then left untouched.
    """
    cfg = cfg or BuildConfig()
    log = log or (lambda msg: print(msg, file=sys.stderr))
    out = Path(out)
    check_options(cfg)
    srcs = check_sources([Path(s) for s in sources], cfg.format)
    fail_if_locked(out)  # before the seconds of loading a tokenizer
    prep = prepare(srcs, cfg)
    with staged_build(out, overwrite, log) as tmp:
        manifest = _build_into(
            tmp, prep.sources, cfg, prep.chunker, prep.tokenizer, prep.vocab, prep.ner, progress, log
        )
    log(
        f"built {out}: {manifest['counts']['articles']} articles, {manifest['counts']['chunks']} chunks, "
        f"{manifest['counts']['tokens']} tokens"
    )
    return DocStore(out)


def _build_into(
    root: Path,
    srcs: list[tuple[Path, str]],
    cfg: BuildConfig,
    chunker: Chunker,
    tokenizer,
    vocab_in: EntityVocab | None,
    ner: SpacyNER | None,
    progress: bool,
    log: Callable[[str], None],
) -> dict[str, Any]:
    # ---- pass 1: read, chunk, stage; count links and redirects
    stage_path = root / "stage.parquet"
    stage = pq.ParquetWriter(stage_path, STAGE_SCHEMA)
    article_writer = pq.ParquetWriter(root / "articles.parquet", ARTICLE_SCHEMA)
    n_articles = 0
    link_counts: Counter[str] = Counter()
    redirects: dict[str, str] = {}
    n_chunks = n_links = n_empty = 0
    bar = tqdm(desc="pass 1/2: read+chunk", unit=" articles", disable=not progress, mininterval=1.0)
    try:
        for src_index, (src, fmt) in enumerate(srcs):
            text_mode = "line" if fmt == "text-lines" else cfg.text_mode
            fmt = "text" if fmt == "text-lines" else fmt
            if fmt == "wiki" and cfg.workers > 1:
                stream = _wiki_articles_parallel(src, redirects, cfg.workers)
            else:
                stream = iter_articles(src, fmt, text_mode=text_mode, redirects=redirects)
            for batch in _batched(stream, cfg.batch_articles):
                if cfg.max_articles is not None:
                    batch = batch[: max(0, cfg.max_articles - n_articles)]
                    if not batch:
                        break
                chunked = chunker.chunk(batch, first_index=n_articles)
                rows, article_rows = [], []
                for art, chunks in zip(batch, chunked, strict=True):
                    if not chunks:
                        n_empty += 1
                    article_rows.append(
                        {
                            "article": n_articles + len(article_rows),
                            "source_id": art.source_id,
                            "title": art.title,
                            "source": src_index,
                            "first_chunk": n_chunks,
                            "n_chunks": len(chunks),
                            "n_chars": len(art.text),
                        }
                    )
                    for link in art.links:
                        link_counts[link.target] += 1
                    n_links += len(art.links)
                    rows.extend(_stage_row(c) for c in chunks)
                    n_chunks += len(chunks)
                if rows:
                    stage.write_table(pa.Table.from_pylist(rows, schema=STAGE_SCHEMA))
                article_writer.write_table(pa.Table.from_pylist(article_rows, schema=ARTICLE_SCHEMA))
                n_articles += len(article_rows)
                bar.update(len(batch))
            if cfg.max_articles is not None and n_articles >= cfg.max_articles:
                break
    finally:
        stage.close()
        article_writer.close()
        bar.close()
    if n_chunks == 0:
        names = ", ".join(str(s) for s, _ in srcs)
        raise CorpusError(f"{names}: no text to chunk (every document was empty); check the input")

    # ---- entity vocabulary
    if vocab_in is not None:
        vocab = vocab_in
    elif link_counts:
        vocab = EntityVocab.build(link_counts, redirects, min_count=cfg.min_entity_count)
    else:
        vocab = None
    if vocab is not None:
        vocab.save(root / ENTITY_FILE)
    if cfg.auto_annotate and vocab is None:
        log("note: no links and no --entity-vocab, so no auto-annotated entity spans")

    # ---- pass 2: salient spans, final shards
    tagger = SalientTagger(vocab, cfg, ner)
    writer = DocStoreWriter(root, cfg.rows_per_shard, cfg.row_group_size)
    bar = tqdm(
        total=n_chunks, desc="pass 2/2: salient spans", unit=" chunks", disable=not progress, mininterval=1.0
    )
    try:
        for batch in iter_parquet_batches(stage_path, 512):
            rows = batch.to_pydict()
            salient = tagger(rows)
            for i in range(len(rows["text"])):
                writer.add(
                    {
                        "article": rows["article"][i],
                        "title": rows["title"][i],
                        "position": rows["position"][i],
                        "char_start": rows["char_start"][i],
                        "char_end": rows["char_end"][i],
                        "text": rows["text"][i],
                        "input_ids": rows["input_ids"][i],
                        "links": rows["links"][i],
                        "salient": salient[i],
                    }
                )
            bar.update(len(rows["text"]))
    finally:
        layout = writer.close()
        bar.close()
    stage_path.unlink()

    # ---- manifest
    fp = hashlib.sha256()
    for rel in [*layout["shards"], "tokens/input_ids.bin", "tokens/input_ids.idx", "tokens/salient.bin"]:
        fp.update(rel.encode())
        fp.update(file_sha256(root / rel).encode())
    n_with_salient = int(np.count_nonzero(np.diff(np.fromfile(root / "tokens/salient.idx", dtype=np.int64))))
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "ralm_version": __version__,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "sources": [
            {
                "path": str(s.resolve()),
                "format": f,
                "bytes": s.stat().st_size if s.is_file() else None,
                "sha256": file_sha256(s) if s.is_file() else None,
            }
            for s, f in srcs
        ],
        "tokenizer": {
            "name_or_path": str(tokenizer.name_or_path),
            "class": type(tokenizer).__name__,
            "vocab_size": len(tokenizer),
            "sha256": tokenizer_fingerprint(tokenizer),
            "special_tokens_per_chunk": tokenizer.num_special_tokens_to_add(pair=False),
        },
        "chunk_size": cfg.chunk_size,
        # in effect (clamped to half the text budget); config holds the value asked for
        "min_chunk_tokens": chunker.min_tokens,
        "config": asdict(cfg),
        "counts": {
            "articles": n_articles,
            "empty_articles": n_empty,
            "chunks": n_chunks,
            "tokens": writer.n_tokens,
            "links": n_links,
            "redirects": len(redirects),
            "entities": len(vocab) if vocab is not None else 0,
            "salient": writer.salient_counts,
            "chunks_with_salient": n_with_salient,
        },
        "entity_vocab": ENTITY_FILE if vocab is not None else None,
        "layout": layout,
        "fingerprint": fp.hexdigest(),
        # every file but the manifest: {"size", "xxh3_128"} (sizes checked on open, all by verify)
        "files": record_files(root, skip=(MANIFEST,)),
    }
    write_json_atomic(root / MANIFEST, manifest, ensure_ascii=False)
    return manifest
