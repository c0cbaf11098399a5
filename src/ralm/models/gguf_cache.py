"""A GGUF LM de-quantised once: the float32 model transformers builds from a .gguf file, kept as a
plain Hugging Face directory (config.json, model.safetensors, the fast tokenizer) under
``$RALM_CACHE/gguf/`` so that later loads read safetensors instead of de-quantising again.

Loading Gemma-3-270M from its Q4_K_M GGUF takes 43-45 s on 2 cores (transformers de-quantises
every tensor in Python and converts the tokenizer); from this cache it takes a few seconds, which
is what puts a served model's first answer within seconds of start-up. The weights are the ones
the GGUF load gives, bit for bit (float32 in, float32 out).

A cached folder is named after the file and carries the source's XXH3-128 digest
(`ralm.integrity.digest`, ~0.05 s for 250 MB) in ``source.json``, written last; a folder whose
digest differs from the file's (the GGUF was replaced) is rebuilt, never used. Folders are
written beside their final place and renamed in one step, so a killed run leaves no half folder
behind, and a finished folder is never replaced (two processes that de-quantise the same file at
once keep the first copy); a cache that cannot be written (read-only home, full disk) costs only
the speed-up.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from ralm.integrity import digest
from ralm.models.names import cache_dir

__all__ = ["SOURCE_FILE", "cached_folder", "gguf_cache_disabled", "lookup", "store"]

SOURCE_FILE = "source.json"  # {"gguf": name, "size": bytes, "xxh3_128": digest}: written last


def gguf_cache_disabled() -> bool:
    """RALM_GGUF_CACHE=off: always de-quantise from the GGUF (and write nothing)."""
    return os.environ.get("RALM_GGUF_CACHE", "").strip().lower() in ("off", "0", "false")


def _source(gguf: Path) -> dict[str, Any]:
    return {"gguf": gguf.name, "size": gguf.stat().st_size, "xxh3_128": digest(gguf)}


def cached_folder(gguf: Path, source: dict[str, Any] | None = None) -> Path:
    """Where the de-quantised copy of `gguf` lives: $RALM_CACHE/gguf/STEM-DIGEST16."""
    src = source or _source(gguf)
    return cache_dir() / "gguf" / f"{gguf.stem}-{src['xxh3_128'][:16]}"


def lookup(gguf: Path) -> Path | None:
    """The cached folder of `gguf` when it is complete and made from this very file, else None."""
    if gguf_cache_disabled():
        return None
    src = _source(gguf)
    folder = cached_folder(gguf, src)
    return folder if _recorded(folder) == src else None


def store(gguf: Path, model: Any, tokenizer: Any) -> Path | None:
    """Write `model` (float32, loaded from `gguf`) and `tokenizer` into the cache; the folder, or
    None when the cache cannot be written (the caller just goes on with what it loaded)."""
    if gguf_cache_disabled():
        return None
    from safetensors.torch import save_model

    src = _source(gguf)
    folder = cached_folder(gguf, src)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.config.save_pretrained(str(tmp))
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(str(tmp))
        (tmp / SOURCE_FILE).write_text(json.dumps(src, indent=2) + "\n", encoding="utf-8")
        if _recorded(folder) == src:  # another process finished the same copy first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a copy of the same name without its record
        os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    return folder


def _recorded(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
