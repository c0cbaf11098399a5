"""Files that appear whole or not at all: write a temporary sibling, then rename it into place.

`write_text_atomic(path, text)` and `write_json_atomic(path, obj)` are what every manifest,
results file and marker in ralm goes through: a reader (or a job resumed after kill -9) sees the
old file or the new one, never half of one. The temporary file is `.NAME.tmp-PID` beside the
target, so two processes never share one and a leftover is easy to recognise. `staged_dir(out)`
does the same for a whole directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["replace_dir", "staged_dir", "write_json_atomic", "write_text_atomic"]


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path`, parents made, through a temporary sibling and a rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p


def write_json_atomic(path: str | os.PathLike, obj: Any, *, ensure_ascii: bool = True) -> Path:
    """`obj` as indented JSON (one trailing newline) at `path`, atomically (`write_text_atomic`)."""
    return write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=ensure_ascii) + "\n")


def replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished folder `tmp` into place at `out`; an old `out` is removed only afterwards."""
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike) -> Iterator[Path]:
    """An empty `.OUT.tmp-PID` directory beside `out` to write into; when the block ends without an
    error it replaces `out` (an old `out` is removed only once the new one is in place). The
    temporary directory is removed either way."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
