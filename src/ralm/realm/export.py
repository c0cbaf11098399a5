"""Export a run's reader (and retriever) as ordinary Hugging Face directories.

BRENT §4 extracts the reader after retrieval-augmented pre-training and fine-tunes it as a plain
LM. `export_reader(run, out)` writes a directory that `AutoModelForMaskedLM.from_pretrained` (and
`AutoTokenizer`) load, with safetensors weights, giving the same logits as the reader inside the
run. `export_retriever(run, out)` writes the two towers as a `DualEncoder` directory (``query/``
and ``doc/`` are themselves Hugging Face / sentence-transformers model directories), which
`ralm index build --encoder`, `ralm search` and `ralm pretrain --retriever` take as they are.
Both write into a temporary directory first and rename it into place.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ralm.errors import RalmError
from ralm.realm.run import LoadedRun
from ralm.retrieval.encoders import quiet_transformers

__all__ = ["export_reader", "export_retriever"]


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise RalmError(f"{out}: exists; choose another output directory or pass --overwrite")
        if out.is_dir() and not (out / "config.json").is_file() and not (out / "ralm_encoder.json").is_file():
            raise RalmError(f"{out}: exists and is not an exported model; refusing to overwrite it")


def export_reader(run: LoadedRun, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the reader as an AutoModelForMaskedLM directory at `out`; returns it."""
    out = Path(out)
    _check_out(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        mlm = run.model.reader.mlm
        with quiet_transformers():
            mlm.save_pretrained(str(tmp), safe_serialization=True)
            run.tokenizer.save_pretrained(str(tmp))
        info = {
            "exported_from": str(Path(run.cfg.out).resolve()),
            "checkpoint": run.checkpoint.name,
            "step": run.state.get("step"),
            "mode": run.cfg.mode,
        }
        (tmp / "ralm_export.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def export_retriever(run: LoadedRun, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the query and document towers as a saved `DualEncoder` at `out`; returns it."""
    if run.model.encoder is None:
        raise RalmError(f"{run.cfg.out}: an MLM-only run has no retriever to export")
    out = Path(out)
    _check_out(out, overwrite)
    if out.exists() and overwrite:
        shutil.rmtree(out)
    return run.model.encoder.save(out)
