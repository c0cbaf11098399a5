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
The removal of such leftovers is `ralm.atomic.remove_stale`, which also serves the partial folders of
`ralm finetune` and `ralm luke ner` (`ralm.train.seed_jobs`).

Example:
    with staged_build(Path("corpus"), overwrite=False, log=print) as tmp:
        write_everything_into(tmp)   # corpus/ appears only when this returns
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ralm.atomic import remove_stale, replace_dir, temp_sibling
from ralm.corpus.docstore import MANIFEST
from ralm.errors import CorpusError, RalmError, exception_chain
from ralm.locks import holder, writer_lock

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
