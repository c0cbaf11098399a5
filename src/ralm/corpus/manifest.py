"""A DocStore's manifest.json: its name, format version, and `read_manifest`, which checks it is a
DocStore manifest this ralm can read. Below both `ralm.corpus.docstore` and `ralm.corpus.verify`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ralm.errors import CorpusError

__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "read_manifest"]

FORMAT = "ralm-docstore"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the DocStore at `root`; CorpusError when there is none or it is unreadable."""
    mpath = root / MANIFEST
    if not root.is_dir():
        raise CorpusError(f"{root}: no such DocStore directory; build one with `ralm corpus build`")
    if not mpath.is_file():
        raise CorpusError(f"{root}: not a DocStore (no {MANIFEST}); build one with `ralm corpus build`")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{mpath}: unreadable manifest ({exc}); rebuild the DocStore") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorpusError(f"{mpath}: not a {FORMAT} manifest; rebuild the DocStore")
    if manifest.get("version", 0) > FORMAT_VERSION:
        raise CorpusError(f"{mpath}: DocStore format v{manifest['version']} is newer than this ralm")
    for key in ("layout", "counts"):
        if not isinstance(manifest.get(key), dict):
            raise CorpusError(f"{mpath}: no {key!r} in the manifest; rebuild the DocStore")
    return manifest
