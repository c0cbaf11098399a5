"""Damage checks of a DocStore: file sizes when it is opened, checksums in `ralm corpus verify`.

The manifest of a DocStore lists every file of the store (`files`: relative path -> {"size",
"xxh3_128"}, see ralm.integrity), recorded at the end of the build. Two levels of checking:
- `check_on_open` (run by `DocStore.__init__`): sizes only, a few `stat` calls. A truncated or
  missing file ends in one CorpusError naming the first bad file, before any reader trips
  over it. It cannot see a file overwritten with other bytes of the same length.
- `verify_store` (`ralm corpus verify STORE`): re-hashes every file (XXH3-128, about 5 GB/s);
  it finds the same-size overwrites too.
A store built before the manifest listed its files is still opened (only missing files are
caught then, and an unreadable Parquet file when it is read); verify refuses it: nothing could
be verified.

Example:
    n, problems = verify_store(Path("corpus/"))   # (9, []) when intact
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ralm.errors import CorpusError
from ralm.integrity import check_digests, check_sizes, records

TOKEN_FILES = ("tokens/input_ids.bin", "tokens/input_ids.idx", "tokens/salient.bin", "tokens/salient.idx")


def damage_error(root: Path, problems: list[str]) -> CorpusError:
    """One line: the first problem, how many more, and what to do."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return CorpusError(
        f"{problems[0]}{more}; DocStore {root} is damaged (run `ralm corpus verify {root}` for every "
        "problem, then rebuild it with --overwrite)"
    )


def read_error(root: Path, path: str | os.PathLike, exc: BaseException) -> CorpusError:
    """A reader's error (pyarrow's ArrowInvalid, an OSError) on a file of the store, as one line."""
    text = str(exc).strip()
    detail = text.splitlines()[0] if text else type(exc).__name__
    return damage_error(root, [f"{path}: cannot read ({detail})"])


def expected_files(manifest: Mapping[str, Any]) -> list[str]:
    """The files every DocStore has, from the layout (for stores whose manifest does not list them)."""
    names = [*manifest["layout"]["shards"], "articles.parquet", *TOKEN_FILES]
    if manifest.get("entity_vocab"):
        names.append(manifest["entity_vocab"])
    return names


def recorded_files(manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """The manifest's file records, or None for a store built before they were written."""
    files = manifest.get("files")
    return files if isinstance(files, dict) and files else None


def check_on_open(root: Path, manifest: Mapping[str, Any]) -> None:
    """CorpusError naming the first missing or wrong-size file of the store (sizes only, cheap)."""
    files = recorded_files(manifest)
    if files is not None:
        problems = check_sizes(root, files)
    else:
        problems = [f"{root / n}: missing" for n in expected_files(manifest) if not (root / n).is_file()]
    if problems:
        raise damage_error(root, problems)


def record_files(root: Path, skip: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """{relative path: {"size", "xxh3_128"}} of every file under `root` but `skip`, sorted by path."""
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return records(root, [n for n in names if n not in skip])


def verify_store(root: str | os.PathLike) -> tuple[int, list[str]]:
    """(files checked, problems): re-hash every file against the manifest, one problem per bad file.

    CorpusError when `root` is not a DocStore, or was built without file records."""
    from ralm.corpus.manifest import read_manifest

    root = Path(root)
    files = recorded_files(read_manifest(root))
    if files is None:
        raise CorpusError(f"{root}: built without checksums; rebuild it to verify")
    return len(files), check_digests(root, files)
