"""Faults around `ralm corpus build`: a full disk, killed builds, two writers, bad arguments.

Each ends with one `ralm: error:` line naming the file or value, exit code 2, the old store
untouched and no temp dir left behind.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from ralm.corpus.build import BuildConfig, build_docstore
from ralm.corpus.docstore import DocStoreWriter, RaggedWriter
from ralm.corpus.entities import EntityVocab
from ralm.errors import CorpusError
from ralm.locks import holder


def mount_point(path: Path) -> Path:
    p = path.absolute()
    while not os.path.ismount(p):
        p = p.parent
    return p


def disk_full(out: Path, what: str = "no space left on device") -> str:
    return (
        f"ralm: error: {out}: {what} {mount_point(out.parent)} while writing the corpus; "
        "nothing was written (free space or choose another --out)"
    )


def snapshot(store: Path) -> dict[str, bytes]:
    return {p.relative_to(store).as_posix(): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# ----------------------------------------------------------------------------- disk full


def test_disk_full_in_the_token_writer_keeps_the_old_store(
    tmp_path, linked_jsonl, cli, leftovers, monkeypatch
):
    out = tmp_path / "out"
    assert cli("corpus", "build", linked_jsonl, "--out", out, "--quiet")[0] == 0
    before = snapshot(out)
    calls = []
    append = RaggedWriter.append

    def full(self, row):
        calls.append(1)
        if len(calls) == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        append(self, row)

    monkeypatch.setattr(RaggedWriter, "append", full)
    code, stdout, err = cli("corpus", "build", linked_jsonl, "--out", out, "--overwrite", "--quiet")
    assert (code, stdout, err) == (2, "", [disk_full(out)])
    assert snapshot(out) == before and leftovers(out) == []
    new = tmp_path / "new"
    calls.clear()
    assert cli("corpus", "build", linked_jsonl, "--out", new, "--quiet")[::2] == (2, [disk_full(new)])
    assert not new.exists() and leftovers(new) == []


@pytest.mark.parametrize("link", ["context", "cause"])
def test_disk_full_behind_a_pyarrow_error(tmp_path, linked_jsonl, cli, leftovers, monkeypatch, link):
    """At one size the ENOSPC surfaced as `ArrowInvalid: Operation on closed file` (the writer's close)."""

    def flush(self):
        try:
            raise OSError(
                errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device"
            )
        except OSError as exc:
            if link == "cause":
                raise pa.ArrowInvalid("Operation on closed file") from exc
            raise pa.ArrowInvalid("Operation on closed file")  # noqa: B904 - the implicit context is the point

    monkeypatch.setattr(DocStoreWriter, "_flush", flush)
    out = tmp_path / "out"
    assert cli("corpus", "build", linked_jsonl, "--out", out, "--quiet")[::2] == (2, [disk_full(out)])
    assert not out.exists() and leftovers(out) == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_disk_full_for_real_from_pyarrow(tmp_path, linked_jsonl, cli, leftovers, monkeypatch):
    """A chunk shard that is /dev/full: pyarrow's own ENOSPC error, as on a full disk."""
    init = DocStoreWriter.__init__

    def to_dev_full(self, root, *args, **kwargs):
        init(self, root, *args, **kwargs)
        (Path(root) / "chunks" / "part-00000.parquet").symlink_to("/dev/full")

    monkeypatch.setattr(DocStoreWriter, "__init__", to_dev_full)
    out = tmp_path / "out"
    assert cli("corpus", "build", linked_jsonl, "--out", out, "--quiet")[::2] == (2, [disk_full(out)])
    assert not out.exists() and leftovers(out) == []


def test_quota_exceeded_writing_the_entity_vocabulary(tmp_path, linked_jsonl, cli, leftovers, monkeypatch):
    def save(self, path):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(EntityVocab, "save", save)
    out = tmp_path / "out"
    code, _, err = cli("corpus", "build", linked_jsonl, "--out", out, "--quiet")
    assert (code, err) == (2, [disk_full(out, "disk quota exceeded on")])
    assert not out.exists() and leftovers(out) == []


def test_disk_full_writing_the_lock_record(tmp_path, linked_jsonl, cli, leftovers, monkeypatch):
    def pwrite(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", pwrite)  # writer_lock records its holder with os.pwrite
    out = tmp_path / "out"
    assert cli("corpus", "build", linked_jsonl, "--out", out, "--quiet")[::2] == (2, [disk_full(out)])
    assert not out.exists() and leftovers(out) == []


# ----------------------------------------------------------------------------- killed builds


def test_temp_dirs_of_dead_builds_are_removed_live_ones_kept(tmp_path, linked_jsonl, cli, leftovers):
    out = tmp_path / "out"
    gone = dead_pid()
    dead_tmp = tmp_path / f".out.tmp-{gone}"
    (dead_tmp / "chunks").mkdir(parents=True)
    (dead_tmp / "chunks" / "part-00000.parquet").write_bytes(b"x" * 1000)
    live_tmp = tmp_path / ".out.tmp-1"  # PID 1 is always alive
    live_tmp.mkdir()
    other = tmp_path / f".other.tmp-{gone}"  # another --out: not ours to remove
    other.mkdir()
    code, _, err = cli("corpus", "build", linked_jsonl, "--out", out, "--quiet")
    assert code == 0
    assert (
        err[0] == f"note: removed {dead_tmp}, left by an interrupted build (PID {gone} is no longer running)"
    )
    assert len(err) == 2 and err[1].startswith(f"built {out}: ")
    assert leftovers(out) == [".out.tmp-1"] and other.is_dir()
    # a build killed between its two renames leaves the previous store as .NAME.old-PID
    old = tmp_path / f".out.old-{gone}"
    old.mkdir()
    code, _, err = cli("corpus", "build", linked_jsonl, "--out", out, "--overwrite", "--quiet")
    assert code == 0
    assert err[0] == f"note: removed {old}, left by an interrupted build (PID {gone} is no longer running)"
    assert leftovers(out) == [".out.tmp-1"]


def test_a_stale_temp_dir_that_cannot_be_removed_is_named(tmp_path, linked_jsonl, cli, monkeypatch):
    gone = dead_pid()
    stale = tmp_path / f".out.tmp-{gone}"
    stale.mkdir()

    def rmtree(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr("ralm.corpus.staging.shutil.rmtree", rmtree)
    code, _, err = cli("corpus", "build", linked_jsonl, "--out", tmp_path / "out", "--quiet")
    assert code == 0 and stale.is_dir()
    assert err[0] == (
        f"note: could not remove {stale}, left by an interrupted build ([Errno 13] Permission denied: "
        f"'{stale}'); remove it by hand"
    )


# ----------------------------------------------------------------------------- one writer


def test_a_second_writer_fails_at_once_naming_the_holder(
    tmp_path, linked_jsonl, cli, leftovers, monkeypatch, lock_holder
):
    out = tmp_path / "out"
    assert cli("corpus", "build", linked_jsonl, "--out", out, "--quiet")[0] == 0
    before = snapshot(out)
    stale = tmp_path / f".out.tmp-{dead_pid()}"
    stale.mkdir()
    p = lock_holder(out, "ralm corpus build --out X")
    try:
        # at once: before the seconds of loading the tokenizer
        monkeypatch.setattr("ralm.corpus.build_options.load_tokenizer", lambda *a: pytest.fail("loaded"))
        for argv in (["--overwrite"], []):
            code, stdout, err = cli("corpus", "build", linked_jsonl, "--out", out, "--quiet", *argv)
            assert (code, stdout, len(err)) == (2, "", 1), err
            assert err[0].startswith(
                f"ralm: error: {out}: another ralm process is writing it (PID {p.pid} on "
            )
            assert err[0].endswith("; wait for it to finish or stop it, then retry")
        assert snapshot(out) == before and stale.is_dir(), "nothing is touched while another process writes"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    monkeypatch.undo()
    assert cli("corpus", "build", linked_jsonl, "--out", out, "--overwrite", "--quiet")[0] == 0


def test_the_lock_is_held_for_the_whole_build(tmp_path, linked_jsonl, monkeypatch):
    out = tmp_path / "out"
    seen = []
    close = DocStoreWriter.close

    def close_and_look(self):
        seen.append(holder(out))
        return close(self)

    monkeypatch.setattr(DocStoreWriter, "close", close_and_look)
    build_docstore([linked_jsonl], out, progress=False, log=lambda m: None)
    assert seen[0] is not None and seen[0]["pid"] == os.getpid()
    assert holder(out) is None


# ----------------------------------------------------------------------------- arguments first


@pytest.fixture
def bad_input(tmp_path):
    """An input whose first line is broken: an argument error must come before it is read."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    return bad


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lang", "xx"], "--lang xx: no date patterns for language 'xx'"),
        (
            ["--entity-vocab", "{tmp}/nope.tsv"],
            "--entity-vocab {tmp}/nope.tsv: no such file; pass an entities.tsv or a DocStore directory",
        ),
        (
            ["--entity-vocab", "{tmp}"],
            "--entity-vocab {tmp}: not a DocStore directory (no manifest.json); pass an entities.tsv or a DocStore directory",
        ),
        (["--ner-model", "no_such_pipeline_xx"], "spaCy pipeline 'no_such_pipeline_xx' is not installed"),
        (["--tokenizer", "{tmp}/none"], "{tmp}/none: no such model directory"),
        (["--chunk-size", "4"], "--chunk-size 4: too small; use at least 8 tokens (BRENT used 128)"),
        (["--min-chunk-tokens", "-1"], "--min-chunk-tokens -1: must be >= 0 (0 turns it off)"),
        (
            ["--rows-per-shard", "100", "--row-group-size", "64"],
            "--rows-per-shard 100: must be a multiple of --row-group-size 64",
        ),
        (["--workers", "0"], "--workers 0: must be >= 1"),
        (["--max-articles", "0"], "--max-articles 0: must be >= 1"),
        (["--min-entity-count", "0"], "--min-entity-count 0: must be >= 1"),
    ],
)
def test_arguments_are_checked_before_any_input_is_read(tmp_path, bad_input, cli, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    message = message.replace("{tmp}", str(tmp_path))
    out = tmp_path / "out"
    code, stdout, err = cli("corpus", "build", bad_input, "--out", out, "--quiet", *argv)
    assert (code, stdout, len(err)) == (2, "", 1), err
    assert err[0].startswith(f"ralm: error: {message}"), err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"], "no lock, no temp dir, no output"


def test_lang_matters_only_for_dates(tmp_path, bad_input, cli):
    out = tmp_path / "out"
    code, _, err = cli("corpus", "build", bad_input, "--out", out, "--quiet", "--lang", "xx", "--no-dates")
    assert code == 2 and f"{bad_input}:1" in err[0]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"text_mode": "para"}, "--text-mode para: use file or line"),
        ({"format": "csv"}, "--format csv: use auto, wiki, jsonl, text or hf"),
        ({"row_group_size": 0}, "--row-group-size 0: must be >= 1"),
        (
            {"rows_per_shard": 100, "row_group_size": 64},
            "--rows-per-shard 100: must be a multiple of --row-group-size 64",
        ),
        ({"batch_articles": 0}, "batch_articles 0: must be >= 1"),
        ({"max_articles": -3}, "--max-articles -3: must be >= 1"),
        ({"lang": "xx"}, "--lang xx: no date patterns for language 'xx'"),
    ],
)
def test_library_checks_every_option_first(tmp_path, bad_input, option, message):
    with pytest.raises(CorpusError) as exc:
        build_docstore([bad_input], tmp_path / "out", BuildConfig(**option), progress=False, log=print)
    assert str(exc.value).startswith(message), str(exc.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_entity_vocab_from_a_store_without_entities(tmp_path, cli):
    src = tmp_path / "plain.txt"
    src.write_text("Plain text without any links. It still makes a store.")
    plain = tmp_path / "plain"
    assert cli("corpus", "build", src, "--out", plain, "--quiet")[0] == 0
    assert not (plain / "entities.tsv").exists()
    out = tmp_path / "out"
    code, _, err = cli("corpus", "build", src, "--out", out, "--quiet", "--entity-vocab", plain)
    assert (code, err) == (
        2,
        [
            f"ralm: error: --entity-vocab {plain}: this DocStore has no entity vocabulary (its corpus had no "
            'links); build a DocStore from linked text (a MediaWiki dump, or JSONL with "links") and pass that '
            "store or its entities.tsv"
        ],
    )
    assert not out.exists()


def test_store_files_are_written_with_the_umask(tmp_path, cli):
    """entities.tsv came out 0600 (mkstemp) while the rest was 0644."""
    src = tmp_path / "docs.jsonl"
    src.write_text(
        json.dumps(
            {"title": "A", "text": "Oslo is nice.", "links": [{"start": 0, "end": 4, "target": "Oslo"}]}
        )
        + "\n"
    )
    for umask, mode in ((0o022, 0o644), (0o027, 0o640)):
        old = os.umask(umask)
        try:
            out = tmp_path / f"out{umask:o}"
            assert cli("corpus", "build", src, "--out", out, "--quiet")[0] == 0
        finally:
            os.umask(old)
        modes = {
            p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file()
        }
        assert "entities.tsv" in modes
        assert modes == dict.fromkeys(modes, mode), modes
