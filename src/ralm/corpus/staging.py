"""Where a build writes: a hidden temp dir beside `--out`, renamed into place when complete.

`staged_build(out, overwrite, log)` is the frame of `ralm corpus build`:
- it holds the writer lock of `out` (ralm.locks) for the whole build, so a second build into
  the same `--out` (with `--overwrite` or not) fails naming the holder's PID, before anything
  is removed (`fail_if_locked` lets it fail before loading the tokenizer, too);
- it removes `.NAME.tmp-PID` (and `.NAME.old-PID`) dirs that builds killed before they could
  clean up left beside `out`, when process PID is gone (never one whose process still runs);
- the build writes into `.NAME.tmp-PID`; on success `out` is replaced by it, an old store being
  removed only afterwards; on any failure the temp dir is removed and `out` stays as it was;
- a full disk or quota (ENOSPC, EDQUOT, also behind a pyarrow error that caught it) becomes
  one CorpusError naming `out` and the mount point.
`remove_stale` (and `ralm.atomic.replace_dir`, which it uses) also serve `ralm finetune`'s partial folders (ralm.tasks.job_dir).

Example:
    with staged_build(Path("corpus"), overwrite=False, log=print) as tmp:
        write_everything_into(tmp)   # corpus/ appears only when this returns
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ralm.atomic import replace_dir, temp_sibling
from ralm.corpus.docstore import MANIFEST
from ralm.errors import CorpusError, RalmError, exception_chain
from ralm.locks import holder, pid_alive, writer_lock

_DISK_FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded on"}


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding `path` (or its nearest existing ancestor)."""
    p = path.expanduser().absolute()
    while not p.exists():
        p = p.parent
    while not os.path.ismount(p):
        p = p.parent
    return p


def disk_full_cause(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT OSError in `exc` or its cause/context chain (pyarrow's "Operation on closed
    file" after a failed write is chained to the write's error), or None."""
    return next((e for e in exception_chain(exc) if isinstance(e, OSError) and e.errno in _DISK_FULL), None)


def disk_full_error(out: Path, cause: OSError) -> CorpusError:
    return CorpusError(
        f"{out}: {_DISK_FULL[cause.errno]} {mount_point(out.parent)} while writing the corpus; "
        "nothing was written (free space or choose another --out)"
    )


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


def fail_if_locked(out: Path) -> None:
    """The writer lock's one-line error now if another process holds it (creates no lock file)."""
    if holder(out) is not None:
        with writer_lock(out):  # raises, naming the holder (unless it has just finished)
            pass


@contextmanager
def staged_build(out: Path, overwrite: bool, log: Callable[[str], None]) -> Iterator[Path]:
    """Lock `out`, check it may be written, and yield a fresh temp dir that becomes `out` on success."""
    try:
        with writer_lock(out):  # creates out.parent, where the lock file lives
            if out.exists() and not overwrite:
                raise CorpusError(f"{out}: already exists; pass --overwrite or choose another --out")
            if out.exists() and not (out / MANIFEST).is_file():
                raise CorpusError(
                    f"{out}: exists and is not a DocStore; refusing to overwrite it, choose another --out"
                )
            remove_stale(out, log)
            tmp = temp_sibling(out)
            if tmp.exists():
                shutil.rmtree(tmp)
            try:
                tmp.mkdir()
                yield tmp
                replace_dir(tmp, out)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    except RalmError:
        raise
    except BaseException as exc:
        cause = disk_full_cause(exc)
        if cause is not None:
            raise disk_full_error(out, cause) from None
        raise
