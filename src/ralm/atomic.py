"""Files that appear whole or not at all: write a temporary sibling, then rename it into place.

`write_text_atomic(path, text)` and `write_json_atomic(path, obj)` are what every manifest,
results file and marker in ralm goes through: a reader (or a job resumed after kill -9) sees the
old file or the new one, never half of one. The temporary file is `.NAME.tmp-PID` beside the
target (`temp_sibling`), so two processes never share one and a leftover is easy to recognise.
`atomic_path(path)` hands out that temporary path for any writer (numpy, safetensors, FAISS,
matplotlib) and renames it into place when the block ends without an error; `staged_dir(out)` and
`replace_dir(tmp, out)` do the same for a whole directory, the old one removed only after the new
one is in place; `move_into_place(src, dst)` renames a finished file or folder over `dst`. This is
the one module in ralm that calls `os.replace`. `remove_stale(out, log, kinds)` removes the
`.NAME.KIND-PID` folders that killed writers of `out` left behind, once their process is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ralm.locks import pid_alive

__all__ = [
    "atomic_path",
    "move_into_place",
    "remove_stale",
    "replace_dir",
    "staged_dir",
    "temp_sibling",
    "write_json_atomic",
    "write_text_atomic",
]


def temp_sibling(path: str | os.PathLike, suffix: str = "") -> Path:
    """`.NAME.tmp-PID` beside `path` (plus `suffix`, for writers that add an extension otherwise).

    Example: temp_sibling("out/m.npz", ".npz") -> out/.m.npz.tmp-1234.npz.
    """
    p = Path(path)
    return p.with_name(f".{p.name}.tmp-{os.getpid()}{suffix}")


def move_into_place(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename the finished file (or folder) `src` over `dst` in one step (same filesystem)."""
    os.replace(src, dst)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """A temporary sibling of `path` (`temp_sibling`) to write by any means, parents made; renamed
    over `path` when the block ends without an error, removed either way otherwise."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(p, suffix)
    try:
        yield tmp
        move_into_place(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path`, parents made, through a temporary sibling and a rename."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json_atomic(path: str | os.PathLike, obj: Any, *, ensure_ascii: bool = True) -> Path:
    """`obj` as indented JSON (one trailing newline) at `path`, atomically (`write_text_atomic`)."""
    return write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=ensure_ascii) + "\n")


def replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished folder `tmp` into place at `out`; an old `out` moves aside first and is
    removed only afterwards (put back if the second rename fails): the gap between the two renames
    is the only moment without a folder at `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        move_into_place(out, old)
        try:
            move_into_place(tmp, out)
        except OSError:
            move_into_place(old, out)  # the old folder back: never no folder at all
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        move_into_place(tmp, out)


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike) -> Iterator[Path]:
    """An empty `.OUT.tmp-PID` directory beside `out` to write into; when the block ends without an
    error it replaces `out` (an old `out` is removed only once the new one is in place). The
    temporary directory is removed either way."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale(
    out: Path, log: Callable[[str], None], kinds: tuple[str, ...] = ("tmp",), what: str = "build"
) -> None:
    """Remove `.NAME.KIND-PID` dirs, KIND one of `kinds` (and `old` once `out` exists), of processes
    that are gone, each with a note to `log` naming the interrupted `what` ("build", "fine-tuning job").

    Example: remove_stale(Path("ft"), print, ("partial",), "fine-tuning job") removes `.ft.partial-4242`
    when process 4242 no longer runs."""
    names = "|".join(re.escape(k) for k in (*kinds, *(("old",) if out.exists() else ())))
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(?:{names})-(\d+)")
    if not out.parent.is_dir():
        return
    for p in sorted(out.parent.iterdir()):
        m = pattern.fullmatch(p.name)
        if m is None or not p.is_dir() or p.is_symlink():
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or pid_alive(pid):
            continue
        try:
            shutil.rmtree(p)
        except OSError as exc:
            log(f"note: could not remove {p}, left by an interrupted {what} ({exc}); remove it by hand")
            continue
        log(f"note: removed {p}, left by an interrupted {what} (PID {pid} is no longer running)")
