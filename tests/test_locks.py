"""writer_lock: one writer per directory across processes, the holder named, released on kill -9."""

from __future__ import annotations

import json
import signal

import pytest

from ralm.errors import RalmError
from ralm.locks import holder, lock_path, writer_lock


def test_second_writer_gets_the_holders_pid_and_kill_releases(tmp_path, lock_holder):
    d = tmp_path / "run"
    p = lock_holder(d, "ralm pretrain --out X")
    try:
        info = holder(d)
        assert info is not None and info["pid"] == p.pid and info["command"] == "ralm pretrain --out X"
        with (
            pytest.raises(RalmError, match=rf"{d}: another ralm process is writing it \(PID {p.pid} on "),
            writer_lock(d),
        ):
            pass
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert holder(d) is None  # the kernel dropped the lock with the process
    with writer_lock(d, "second"):
        assert json.loads(lock_path(d).read_text())["command"] == "second"
    assert lock_path(d).read_text() == ""  # the record is cleared on release


def test_nested_lock_in_one_process_and_sequential_reuse(tmp_path):
    d = tmp_path / "corpus"
    with writer_lock(d) as p1, writer_lock(d) as p2:  # re-entrant within a process
        assert p1 == p2 == tmp_path / ".corpus.lock"
        assert not d.exists()  # the lock lives beside the directory, which need not exist yet
    for _ in range(2):
        with writer_lock(d):
            pass
    assert holder(d) is None
