"""Read corpora other than wiki dumps (JSONL, plain text) and dispatch on the input format.

Hugging Face data (save_to_disk folders, Parquet, Arrow) is read by `ralm.corpus.tables`.

`iter_articles` is the one entry point the rest of ralm uses: it detects the format from the
extension (or the decompressed head of a `.bz2`/`.gz` file) and streams `Article`s from
`iter_wiki_dump`, `iter_jsonl` or `iter_text`. Every malformed input ends in a one-line
`CorpusError` naming the file (and line, where there is one).

Deliberately left out: other formats (CSV, HTML), recursive directory walks (a
directory means its own `*.txt` files), encodings other than UTF-8, and any cleaning of the text
beyond dropping empty documents: JSONL and text inputs are taken as they are.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from ralm.corpus.records import record_article
from ralm.corpus.types import Article
from ralm.corpus.wiki import iter_wiki_dump, open_binary
from ralm.errors import CorpusError, check_json_text

__all__ = ["FORMATS", "detect_format", "iter_articles", "iter_jsonl", "iter_text"]

FORMATS = ("wiki", "jsonl", "text", "hf")
_COMPRESSED_SUFFIXES = (".bz2", ".gz")


def _check_exists(path: Path) -> None:
    if not path.exists():
        raise CorpusError(f"{path}: no such file or directory; check the path")


def _decode_error(path: Path, lineno: int | None, exc: UnicodeDecodeError) -> CorpusError:
    where = f"{path}:{lineno}" if lineno is not None else str(path)
    return CorpusError(
        f"{where}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x}); re-save the file as UTF-8"
    )


def _read_error(path: Path, exc: Exception) -> CorpusError:
    if isinstance(exc, EOFError):
        return CorpusError(f"{path}: compressed stream ended early: the file is truncated; recreate it")
    return CorpusError(f"{path}: cannot read ({exc}); check the file")


# ----------------------------------------------------------------------------- JSONL


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Article]:
    """Yield one `Article` per line of a JSONL file (`.jsonl`, optionally bzip2/gzip compressed).

    Each non-blank line is an object `{"title": str, "text": str}` with optional `"id"` (any JSON
    scalar, kept as a string) and optional `"links": [{"start", "end", "target"}]` (character
    offsets into text; targets are normalised with `normalize_title`). A missing title is "".
    Records whose text is only whitespace are skipped; a file without any record is an error.
    """
    path = Path(path)
    _check_exists(path)
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory; expected a .jsonl file")
    n_yielded = 0
    lineno = 0
    try:
        with open_binary(path) as f:
            for lineno, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _decode_error(path, lineno, exc) from exc
                if lineno == 1:
                    line = line.removeprefix("\ufeff")
                line = line.strip()
                if not line:
                    continue
                article = _jsonl_record(line, f"{path}:{lineno}")
                if article is not None:
                    n_yielded += 1
                    yield article
    except (EOFError, OSError) as exc:
        raise _read_error(path, exc) from exc
    if n_yielded == 0:
        raise CorpusError(f'{path}: no records with a non-empty "text" in {lineno} lines; check the file')


def _jsonl_record(line: str, where: str) -> Article | None:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        at = "" if exc.msg.endswith(" at") else " at"
        raise CorpusError(
            f"{where}: not valid JSON ({exc.msg}{at} column {exc.colno}); each line must be one JSON object"
        ) from exc
    if not isinstance(obj, dict):
        raise CorpusError(
            f'{where}: expected a JSON object with "title" and "text", got {type(obj).__name__}'
        )
    check_json_text(obj, line, where, CorpusError)
    return record_article(obj, where)


# ----------------------------------------------------------------------------- plain text


def _text_files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.glob("*.txt") if p.is_file())
    if not files:
        raise CorpusError(f"{path}: directory has no *.txt files; pass a text file or a folder of .txt files")
    return files


def iter_text(path: str | os.PathLike[str], *, mode: str = "file") -> Iterator[Article]:
    """Yield plain-text documents from a UTF-8 file or a folder of `*.txt` files (sorted by name).

    mode "file": each file is one document, titled with the file stem (source_id: file name).
    mode "line": each non-empty line is one document, titled `f"{stem}:{lineno}"`
        (source_id: the line number); the line is stripped of surrounding whitespace.
    Empty documents are skipped; an input without any text is an error.
    """
    if mode not in ("file", "line"):
        raise CorpusError(f"unknown text mode {mode!r}; use 'file' or 'line'")
    path = Path(path)
    _check_exists(path)
    n_yielded = 0
    for file in _text_files(path):
        try:
            with open_binary(file) as f:
                data = f.read()
        except (EOFError, OSError) as exc:
            raise _read_error(file, exc) from exc
        if mode == "file":
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise _decode_error(file, data.count(b"\n", 0, exc.start) + 1, exc) from exc
            text = text.replace("\r\n", "\n")
            if text.strip():
                n_yielded += 1
                yield Article(title=_stem(file), text=text, source_id=file.name)
            continue
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8").strip()
            except UnicodeDecodeError as exc:
                raise _decode_error(file, lineno, exc) from exc
            if line:
                n_yielded += 1
                yield Article(title=f"{_stem(file)}:{lineno}", text=line, source_id=str(lineno))
    if n_yielded == 0:
        raise CorpusError(f"{path}: no text found (empty input); check the path")


def _stem(path: Path) -> str:
    """`notes.txt` -> `notes`, `notes.txt.bz2` -> `notes`."""
    name = path.name
    for suffix in _COMPRESSED_SUFFIXES:
        name = name.removesuffix(suffix)
    return Path(name).stem or name


# ----------------------------------------------------------------------------- dispatch


def _sniff(path: Path) -> str | None:
    """Guess a format from the first decompressed bytes; None when undecided."""
    try:
        with open_binary(path) as f:
            head = f.read(4096)
    except (EOFError, OSError):
        return None
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = head.decode("utf-16", errors="ignore")
    else:
        text = head.decode("utf-8", errors="ignore").removeprefix("\ufeff")
    text = text.lstrip()
    if text.startswith("<?xml"):
        text = text[text.find("?>") + 2 :].lstrip()
    if text.startswith("<mediawiki"):
        return "wiki"
    if text.startswith("{"):
        return "jsonl"
    return None


def detect_format(path: str | os.PathLike[str]) -> str:
    """Return "wiki", "jsonl", "text" or "hf" for `path`.

    Parquet and Arrow files, and directories that `datasets`' save_to_disk wrote or that hold such
    files (and no `*.txt`), are hf (`ralm.corpus.tables`). Another directory is text. Otherwise the extension decides (`.xml[.bz2|.gz]` wiki,
    `.jsonl`/`.json` jsonl, `.txt`/`.cor` text); an unknown or bare-compressed extension (the
    gensim `...xml-p10p30302-shortened.bz2`) is sniffed: `<mediawiki` is wiki, `{` jsonl,
    anything else text.
    """
    path = Path(path)
    _check_exists(path)
    from ralm.corpus.tables import is_table_source

    if is_table_source(path):
        return "hf"
    if path.is_dir():
        return "text"
    name = path.name.lower()
    for suffix in _COMPRESSED_SUFFIXES:
        name = name.removesuffix(suffix)
    ext = Path(name).suffix
    if ext == ".xml":
        return "wiki"
    if ext in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if ext in (".txt", ".cor", ".text"):
        return "text"
    return _sniff(path) or "text"


def iter_articles(
    path: str | os.PathLike[str],
    fmt: str = "auto",
    *,
    text_mode: str = "file",
    redirects: dict[str, str] | None = None,
) -> Iterator[Article]:
    """Stream the articles of any supported corpus file.

    fmt: "auto" (see `detect_format`), "wiki", "jsonl" or "text".
    text_mode: "file" or "line", for text input (see `iter_text`).
    redirects: for wiki dumps, filled with redirect title -> target title.
    """
    path = Path(path)
    _check_exists(path)
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "wiki":
        return iter_wiki_dump(path, redirects=redirects)
    if fmt == "jsonl":
        return iter_jsonl(path)
    if fmt == "text":
        return iter_text(path, mode=text_mode)
    if fmt == "hf":
        from ralm.corpus.tables import iter_table

        return iter_table(path)
    raise CorpusError(f"unknown corpus format {fmt!r}; use one of auto, {', '.join(FORMATS)}")
