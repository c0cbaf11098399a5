"""A DenseIndex on disk: `index.faiss` (`faiss.write_index`) and `index.json`, its manifest, checksummed.

`write_index_files` writes both (each to a temp name, then renamed) and records the size and
XXH3-128 digest of `index.faiss` in the manifest (`files`, as ralm.integrity writes them; plus
`index_bytes`, the size older ralm versions check). `read_index_files` reads them back:

- the manifest's format and the DocStore/encoder fingerprints, then the file's size (free);
- then the digest, in the same pass that loads the index: FAISS deserialises from a reader
  (`faiss.PyCallbackIOReader`) whose blocks are hashed as they pass, so the file is read from
  disk once and each block is hashed while it is still in the CPU cache. benchmarks/
  index_checksum.py measured it on a 1.5 GB flat index (1M x 384), page cache warm: 1.03x the
  wall time of a bare `faiss.read_index` (median of paired runs; 1.08x of the minimums), 1.11x
  its CPU time; the hash itself takes ~0.05 s (XXH3 at ~28 GB/s), 4% of the load. Reading the
  file into a numpy array, hashing it and calling `faiss.deserialize_index` was measured too, at
  2.1x (FAISS copies that buffer twice more: into a std::vector, then into the index): not used.
  So the full check stays on load, no sampled check is needed.
  A mismatch (a damaged disk or copy: FAISS reads flipped bytes in the vectors without a
  complaint) raises one line naming the file (`IndexFileError`; `ralm search` adds the advice
  to run `ralm index verify` and rebuild with --overwrite).
- mmap=True: FAISS maps the file itself and reads only what searches touch, so only the size
  is checked on load (hashing would read the whole file the map is meant to leave on disk);
  `verify_index_files` (`ralm index verify`) hashes it.

Manifests written before checksums (no `files`, only `index_bytes`) still load, with the size
check alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import faiss
import xxhash

from ralm.atomic import move_into_place, temp_sibling
from ralm.errors import RalmError
from ralm.integrity import DIGEST, check_digests, file_record

INDEX_FILE = "index.faiss"
MANIFEST_FILE = "index.json"
FORMAT = "ralm-dense-index"
FORMAT_VERSION = 1
READ_BLOCK = 8 << 20  # bytes handed to FAISS (and hashed) per read; small reads go through a buffer
REBUILD = "rebuild it with `ralm index build`"


class IndexFileError(RalmError):
    """A saved index file that is truncated, damaged or unreadable. `what` names the file and the
    fault; the message adds "rebuild it with `ralm index build`" (callers that know better, such
    as `ralm search` on an index directory, replace that advice: see `what`)."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"{what}; {REBUILD}")


def write_index_files(
    index: faiss.Index, manifest: dict[str, Any], directory: str | os.PathLike
) -> dict[str, Any]:
    """Write `index.faiss` and `index.json` (with the file's size and digest) into `directory`,
    each file replaced atomically; returns the manifest written."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tmp_index, tmp_manifest = temp_sibling(d / INDEX_FILE), temp_sibling(d / MANIFEST_FILE)
    try:
        faiss.write_index(index, str(tmp_index))
        rec = file_record(tmp_index)  # re-reads what was just written: from the page cache
        manifest = {**manifest, "index_bytes": rec["size"], "files": {INDEX_FILE: rec}}
        tmp_manifest.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        move_into_place(tmp_index, d / INDEX_FILE)
        move_into_place(tmp_manifest, d / MANIFEST_FILE)
    finally:
        for t in (tmp_index, tmp_manifest):
            if t.exists():
                t.unlink()
    return manifest


def recorded_files(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{"index.faiss": {"size", "xxh3_128"}} from a manifest; from `index_bytes` (size only) for
    manifests written before checksums; {} when neither is there."""
    files = manifest.get("files")
    if isinstance(files, dict) and isinstance(files.get(INDEX_FILE), dict):
        return {INDEX_FILE: files[INDEX_FILE]}
    if manifest.get("index_bytes") is not None:
        return {INDEX_FILE: {"size": manifest["index_bytes"]}}
    return {}


def read_index_files(
    directory: str | os.PathLike,
    *,
    docstore_fingerprint: str | None = None,
    encoder_fingerprint: str | None = None,
    mmap: bool = False,
) -> tuple[faiss.Index, dict[str, Any]]:
    """The FAISS index and manifest saved in `directory`, checked: format, fingerprints, size, and
    (unless mmap) the XXH3-128 digest, computed while FAISS reads the file."""
    d = Path(directory)
    mpath, ipath = d / MANIFEST_FILE, d / INDEX_FILE
    for p in (mpath, ipath):
        if not p.is_file():
            raise RalmError(f"{p}: no such file; build the index with `ralm index build`")
    manifest = read_manifest(mpath, FORMAT, FORMAT_VERSION, "index")
    check_fingerprints(d, manifest, docstore_fingerprint, encoder_fingerprint)
    rec = recorded_files(manifest).get(INDEX_FILE, {})
    size = os.path.getsize(ipath)
    if "size" in rec and size != int(rec["size"]):
        raise IndexFileError(
            f"{ipath}: {size} bytes, {mpath.name} says {int(rec['size'])} (truncated, or an interrupted save)"
        )
    error: Exception | None = None
    index, changed = None, False
    if mmap:
        try:
            index = faiss.read_index(str(ipath), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError as exc:
            error = exc
    else:
        index, got, error = _read_hashed(ipath)
        changed = DIGEST in rec and got != rec[DIGEST]
    if error is not None:
        text = str(error).strip()
        first = text.splitlines()[0] if text else type(error).__name__
        note = "; its xxh3_128 checksum differs from the saved one: the file is damaged" if changed else ""
        raise IndexFileError(f"{ipath}: FAISS cannot read it ({first}{note})")
    if changed:
        raise IndexFileError(damaged(ipath))
    assert index is not None
    if index.ntotal != manifest["count"] or index.d != manifest["dim"]:
        raise IndexFileError(
            f"{ipath} holds {index.ntotal} x {index.d} vectors but {mpath.name} says "
            f"{manifest['count']} x {manifest['dim']}"
        )
    return index, manifest


def damaged(path: Path) -> str:
    """What is wrong with a file whose digest differs from the recorded one (no advice)."""
    return f"{path}: contents changed since it was saved (xxh3_128 checksum mismatch: a damaged disk or copy)"


def _read_hashed(path: Path) -> tuple[faiss.Index | None, str, Exception | None]:
    """(index or None, XXH3-128 of the whole file, FAISS's error or None): one pass over the file.

    FAISS pulls its bytes through `read`, which hashes each block on its way; whatever FAISS
    leaves unread (nothing, for an intact file) is hashed after it, so the digest always covers
    the whole file, also when damage makes FAISS give up half way.
    """
    h = xxhash.xxh3_128()
    index, error = None, None
    with open(path, "rb", buffering=1 << 20) as f:

        def read(n: int) -> bytes:
            b = f.read(n)
            h.update(b)
            return b

        try:
            index = faiss.read_index(faiss.PyCallbackIOReader(read, READ_BLOCK))
        except (RuntimeError, MemoryError) as exc:  # e.g. a damaged header asking for 2**40 bytes
            error = exc
        while block := f.read(READ_BLOCK):
            h.update(block)
    return index, h.hexdigest(), error


def verify_index_files(directory: str | os.PathLike) -> list[str]:
    """Problems of a saved index directory, one line each ([] when intact): its manifest readable,
    then `index.faiss` re-hashed in full against the recorded size and digest (ralm.integrity)."""
    d = Path(directory)
    mpath = d / MANIFEST_FILE
    if not mpath.is_file():
        return [f"{mpath}: missing"]
    try:
        manifest = read_manifest(mpath, FORMAT, FORMAT_VERSION, "index")
    except RalmError as exc:
        return [str(exc)]
    recorded = recorded_files(manifest)
    if not recorded:
        recorded = {INDEX_FILE: {}}  # nothing recorded: the file must at least be there
    return check_digests(d, recorded)


def read_manifest(mpath: Path, fmt: str, version: int, what: str) -> dict[str, Any]:
    """A saved index's JSON manifest, checked for its format name and a version this ralm reads."""
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RalmError(
            f"{mpath}: unreadable {what} manifest ({exc}); rebuild it with `ralm index build`"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise RalmError(f"{mpath}: not a {fmt} manifest; rebuild it with `ralm index build`")
    if manifest.get("version", 0) > version:
        raise RalmError(f"{mpath}: {what} format v{manifest['version']} is newer than this ralm")
    return manifest


def check_fingerprints(
    where: Path, manifest: dict[str, Any], docstore_fingerprint: str | None, encoder_fingerprint: str | None
) -> None:
    """RalmError when a given fingerprint differs from the one in an index manifest."""
    for what, key, given in (
        ("corpus", "docstore_fingerprint", docstore_fingerprint),
        ("encoder", "encoder_fingerprint", encoder_fingerprint),
    ):
        stored = manifest.get(key)
        if given is not None and stored != given:
            raise RalmError(
                f"index {where} was built from another {what} ({key.split('_')[0]} fingerprint "
                f"{str(stored)[:12]}… vs {given[:12]}…); rebuild it with `ralm index build`"
            )
