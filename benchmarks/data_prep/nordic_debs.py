"""Fetching and reading Debian packages for nordic_corpus.py: `apt-get download` into a cache, then
ar + tar in Python (dpkg-deb for compressions tarfile cannot open)."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from benchmarks.data_prep.nordic_corpus_errors import NordicCorpusError

# ---------------------------------------------------------------------------------------------
# Fetching and reading .deb files
# ---------------------------------------------------------------------------------------------


def _cached_deb(pkg: str, cache: Path) -> Path | None:
    debs = sorted(cache.glob(f"{pkg}_*.deb"), key=lambda p: p.stat().st_mtime)
    return debs[-1] if debs else None


def fetch_deb(pkg: str, cache: Path) -> Path:
    """Path of `pkg`'s .deb in `cache`, running `apt-get download pkg` there if none is cached."""
    cache.mkdir(parents=True, exist_ok=True)
    deb = _cached_deb(pkg, cache)
    if deb is not None:
        return deb
    hint = f"place {pkg}_*.deb in {cache} by hand (e.g. from https://packages.debian.org/{pkg})"
    if shutil.which("apt-get") is None:
        raise NordicCorpusError(f"apt-get not found, cannot download {pkg}; {hint}")
    proc = subprocess.run(
        ["apt-get", "download", pkg], cwd=cache, capture_output=True, text=True, check=False
    )
    deb = _cached_deb(pkg, cache)
    if proc.returncode != 0 or deb is None:
        err = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise NordicCorpusError(f"apt-get download {pkg} failed ({err}); {hint}")
    return deb


def _ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    if not data.startswith(b"!<arch>\n"):
        raise NordicCorpusError("not an ar archive")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        pos += 60
        yield name, data[pos : pos + size]
        pos += size + (size & 1)


def _data_tar(deb: Path) -> tarfile.TarFile:
    """The data.tar of a .deb, opened for reading."""
    try:
        raw = deb.read_bytes()
        for name, payload in _ar_members(raw):
            if name.startswith("data.tar"):
                if name in ("data.tar", "data.tar.gz", "data.tar.xz", "data.tar.bz2"):
                    return tarfile.open(fileobj=io.BytesIO(payload), mode="r:*")
                break  # e.g. data.tar.zst: let dpkg-deb decompress
        else:
            raise NordicCorpusError("no data.tar member")
    except (OSError, ValueError, tarfile.TarError, NordicCorpusError) as exc:
        if shutil.which("dpkg-deb") is None:
            raise NordicCorpusError(f"{deb}: cannot read ({exc})") from exc
    proc = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=False)
    if proc.returncode != 0:
        raise NordicCorpusError(f"{deb}: dpkg-deb failed: {proc.stderr.decode(errors='replace').strip()}")
    return tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:")


def deb_files(deb: Path) -> dict[str, bytes]:
    """Regular files of a .deb: path without the leading "./" -> contents (symlinks left out)."""
    out: dict[str, bytes] = {}
    with _data_tar(deb) as tar:
        for member in tar:
            if member.isfile():
                f = tar.extractfile(member)
                if f is not None:
                    out[str(PurePosixPath(member.name.removeprefix("./")))] = f.read()
    return out


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")
