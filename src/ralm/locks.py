"""One writer per output directory: an advisory lock beside every corpus, index and run ralm writes.

`with writer_lock(out):` takes an exclusive `fcntl.flock` on `PARENT/.NAME.lock` (beside the
directory, so it exists before the directory does and survives the temp-dir-then-rename
dance) and records who holds it: PID, host, command line and start time, as JSON in the lock
file. A second writer fails at once with one line naming the holder; `--overwrite` of a
directory another process is writing fails the same way, before anything is deleted.

The kernel drops a flock when its process dies (kill -9 included), so a crash never leaves a
stale lock: the file stays (a few hundred bytes) but the next writer takes it. Readers
(search, evaluation) take no lock. Left out: locks over network file systems where flock is
not honoured (NFS without lockd); the lock is advisory, between ralm processes only.

Example:
    with writer_lock(Path("runs/demo/realm"), "ralm pretrain"):
        ...  # a second `ralm pretrain --out runs/demo/realm` now fails with the holder's PID
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ralm.errors import RalmError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, writers are not guarded
    fcntl = None  # type: ignore[assignment]


_HELD: set[Path] = set()  # lock files this process holds (a nested writer_lock is a no-op)


def lock_path(directory: str | os.PathLike) -> Path:
    """PARENT/.NAME.lock for the directory PARENT/NAME."""
    d = Path(directory).expanduser().absolute()
    return d.parent / f".{d.name}.lock"


def holder(directory: str | os.PathLike) -> dict[str, Any] | None:
    """Who holds the lock of `directory` (pid, host, command, since), or None when nobody does."""
    path = lock_path(directory)
    if fcntl is None or not path.is_file():
        return None
    fd = os.open(path, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return _read_info(fd)
            raise
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_info(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 65536)
    try:
        info = json.loads(raw.decode("utf-8"))
        return info if isinstance(info, dict) else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}


def describe_holder(info: dict[str, Any]) -> str:
    """'PID 1234 on host (ralm pretrain ..., since 2026-11-23T10:00:00+00:00)' from a lock's info."""
    pid = info.get("pid", "?")
    host = info.get("host")
    cmd = info.get("command")
    since = info.get("since")
    extra = ", ".join(x for x in (f"`{cmd}`" if cmd else None, f"since {since}" if since else None) if x)
    return f"PID {pid}" + (f" on {host}" if host else "") + (f" ({extra})" if extra else "")


@contextmanager
def writer_lock(directory: str | os.PathLike, what: str | None = None) -> Iterator[Path]:
    """Hold the exclusive writer lock of `directory` for the `with` block; RalmError if another
    process holds it. `what` names the command in the lock's record (default: this process's argv)."""
    path = lock_path(directory)
    if fcntl is None or path in _HELD:  # no flock here, or this process holds it already (nested)
        yield path
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            info = _read_info(fd)
            raise RalmError(
                f"{directory}: another ralm process is writing it ({describe_holder(info)}); "
                "wait for it to finish or stop it, then retry"
            ) from None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": what or " ".join(["ralm", *sys.argv[1:]])[:500],
            "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        _HELD.add(path)
        try:
            yield path
        finally:
            _HELD.discard(path)
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """True if a process with this PID exists on this machine (signal 0 probe)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
