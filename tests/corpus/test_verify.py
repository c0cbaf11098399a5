"""A damaged DocStore: sizes checked on open, checksums by `ralm corpus verify`, one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ralm.corpus.docstore import DocStore
from ralm.errors import CorpusError
from ralm.integrity import file_record


def damaged(store, problem, more=""):
    return (
        f"{problem}{more}; DocStore {store} is damaged (run `ralm corpus verify {store}` for every problem, "
        "then rebuild it with --overwrite)"
    )


def strip_records(store: Path) -> None:
    """Make `store` look like one built before the manifest listed its files."""
    m = json.loads((store / "manifest.json").read_text())
    del m["files"]
    (store / "manifest.json").write_text(json.dumps(m))


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def test_manifest_records_every_file_with_size_and_xxh3(built_store):
    m = json.loads((built_store / "manifest.json").read_text())
    on_disk = sorted(
        p.relative_to(built_store).as_posix()
        for p in built_store.rglob("*")
        if p.is_file() and p.name != "manifest.json"
    )
    assert list(m["files"]) == on_disk
    assert {"articles.parquet", "entities.tsv", "tokens/input_ids.bin", "tokens/salient.idx"} <= set(on_disk)
    assert "chunks/part-00001.parquet" in on_disk
    for name, rec in m["files"].items():
        assert rec == file_record(built_store / name)
    assert len(m["fingerprint"]) == 64  # the sha256 fingerprint indexes check is kept as it was


def test_verify_ok(built_store, cli):
    n = len(json.loads((built_store / "manifest.json").read_text())["files"])
    code, out, err = cli("corpus", "verify", built_store)
    assert (code, out, err) == (0, f"ok: {n} files verified\n", [])


def test_verify_lists_every_problem_then_a_summary(store_copy, cli):
    store = store_copy
    n = len(json.loads((store / "manifest.json").read_text())["files"])
    shard = store / "chunks/part-00001.parquet"
    size = shard.stat().st_size
    truncate(shard, size - 10)
    (store / "tokens/salient.idx").unlink()
    ids = store / "tokens/input_ids.bin"
    ids.write_bytes(bytes(b ^ 0xFF for b in ids.read_bytes()))  # other bytes, same size
    code, out, err = cli("corpus", "verify", store)
    assert code == 2
    assert out.splitlines() == [
        f"{shard}: {size - 10} bytes, expected {size}",
        f"{store}/tokens/salient.idx: missing",
        f"{ids}: contents changed (checksum mismatch)",
    ]
    assert err == [
        f"ralm: error: {store}: 3 of {n} files damaged; rebuild the DocStore "
        f"(`ralm corpus build ... --out {store} --overwrite`)"
    ]


def test_verify_a_store_built_without_checksums(store_copy, cli):
    strip_records(store_copy)
    code, out, err = cli("corpus", "verify", store_copy)
    assert (code, out) == (2, "")
    assert err == [f"ralm: error: {store_copy}: built without checksums; rebuild it to verify"]


def test_verify_not_a_store(tmp_path, cli):
    code, out, err = cli("corpus", "verify", tmp_path / "nope")
    assert (code, out) == (2, "")
    assert err == [
        f"ralm: error: {tmp_path / 'nope'}: no such DocStore directory; build one with `ralm corpus build`"
    ]


def test_truncated_chunk_shard_is_caught_on_open(store_copy, cli):
    shard = store_copy / "chunks/part-00000.parquet"
    size = shard.stat().st_size
    truncate(shard, size // 2)
    expected = damaged(store_copy, f"{shard}: {size // 2} bytes, expected {size}")
    code, out, err = cli("corpus", "show", store_copy, "0")
    assert (code, out, err) == (2, "", [f"ralm: error: {expected}"])
    (store_copy / "tokens/salient.bin").unlink()  # a second problem is counted, the first named
    with pytest.raises(CorpusError) as exc:
        DocStore(store_copy)
    assert str(exc.value) == damaged(
        store_copy, f"{shard}: {size // 2} bytes, expected {size}", " (and 1 more)"
    )


def test_deleted_token_file_is_caught_on_open(store_copy, cli):
    (store_copy / "tokens/input_ids.bin").unlink()
    expected = damaged(store_copy, f"{store_copy}/tokens/input_ids.bin: missing")
    for argv in (["info"], ["info", "--json"], ["show"]):
        code, out, err = cli("corpus", *argv, store_copy, *(["0"] if argv == ["show"] else []))
        assert (code, out, err) == (2, "", [f"ralm: error: {expected}"])
    strip_records(store_copy)  # an older store: missing files are still caught on open
    code, out, err = cli("corpus", "info", store_copy)
    assert (code, out, err) == (2, "", [f"ralm: error: {expected}"])


def test_same_size_overwrite_passes_open_and_info_but_not_verify(store_copy, cli):
    ids = store_copy / "tokens/input_ids.bin"
    ids.write_bytes(bytes(len(ids.read_bytes())))  # zeros, same size: only a checksum sees it
    assert "only `ralm corpus verify`" in DocStore.__doc__
    code, out, err = cli("corpus", "info", store_copy)
    n = len(json.loads((store_copy / "manifest.json").read_text())["files"])
    assert code == 0 and err == []
    assert (
        f"  files        {n} recorded; sizes match, contents unchecked (`ralm corpus verify {store_copy}`)"
        in out.splitlines()
    )
    assert "healthy" not in out
    code, out, err = cli("corpus", "verify", store_copy)
    assert code == 2 and out == f"{ids}: contents changed (checksum mismatch)\n"


def test_info_of_a_store_without_checksums_says_so(store_copy, cli):
    strip_records(store_copy)
    code, out, err = cli("corpus", "info", store_copy)
    assert code == 0 and err == []
    assert (
        "  files        no checksums (built before they were recorded); rebuild to verify" in out.splitlines()
    )


def test_unreadable_parquet_of_an_old_store_names_the_file(store_copy, cli):
    """Without file records the size check cannot run; pyarrow's error becomes one line naming the file."""
    strip_records(store_copy)
    shard = store_copy / "chunks/part-00000.parquet"
    truncate(shard, shard.stat().st_size // 2)
    arts = store_copy / "articles.parquet"
    truncate(arts, 100)
    code, out, err = cli("corpus", "show", store_copy, "0")
    assert (code, out) == (2, "") and len(err) == 1
    head, tail = damaged(store_copy, "\0").split("\0")
    assert err[0].startswith(f"ralm: error: {shard}: cannot read (") and err[0].endswith(f"){tail}")
    store = DocStore(store_copy)
    with pytest.raises(CorpusError) as exc:
        next(store.iter_batches(4))
    assert str(exc.value).startswith(f"{shard}: cannot read (") and str(exc.value).endswith(tail)
    with pytest.raises(CorpusError) as exc:
        store.articles()
    assert str(exc.value).startswith(f"{arts}: cannot read (") and str(exc.value).endswith(tail)
    code, out, err = cli("corpus", "info", store_copy)
    assert code == 2 and len(err) == 1 and err[0].startswith(f"ralm: error: {arts}: cannot read (")


def test_damaged_manifest(store_copy, cli):
    mpath = store_copy / "manifest.json"
    text = mpath.read_text()
    mpath.write_text(text[: len(text) // 2])
    for cmd in ("info", "verify"):
        code, out, err = cli("corpus", cmd, store_copy)
        assert (code, out, len(err)) == (2, "", 1)
        assert err[0].startswith(f"ralm: error: {mpath}: unreadable manifest (")
        assert err[0].endswith("); rebuild the DocStore")
    m = json.loads(text)
    del m["layout"]
    mpath.write_text(json.dumps(m))
    for cmd in ("info", "verify"):
        code, out, err = cli("corpus", cmd, store_copy)
        assert (code, out, err) == (
            2,
            "",
            [f"ralm: error: {mpath}: no 'layout' in the manifest; rebuild the DocStore"],
        )
