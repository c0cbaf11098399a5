"""The run directory of retriever training: what a new, resumed or finished run finds there.

    OUT/train_config.json   the settings and data of the run (a resume must match them)
    OUT/checkpoints/step-N  resumable state (`ralm.train.checkpoint`), removed when the run ends
    OUT/encoder/            the saved encoder (best dev checkpoint), written atomically
    OUT/metrics.jsonl, OUT/results.json

`prepare_run` refuses to overwrite a finished run or a foreign directory without --overwrite,
refuses to resume with other settings (naming them), and removes what a killed run left
half-written (an encoder being saved, a checkpoint being written), with a note.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ralm.atomic import write_json_atomic
from ralm.corpus.staging import remove_stale
from ralm.errors import RalmError

RESULTS = "results.json"
CONFIG = "train_config.json"


def prepare_run(
    out: Path, settings: dict[str, Any], data: dict[str, Any], overwrite: bool, log=print
) -> bool:
    """Make `out` ready; True when it holds a checkpoint of the same run to resume.

    A finished run (results.json) is kept unless `overwrite`; a run with other settings is refused.
    """
    from ralm.train.checkpoint import clear_leftovers, finished_checkpoints

    remove_stale(out / "encoder", log, ("tmp",), "retriever training")
    if out.exists() and not out.is_dir():
        raise RalmError(f"{out}: exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        known = (out / CONFIG).is_file()
        if overwrite:
            if not known:
                raise RalmError(
                    f"{out}: exists and is not a retriever run (no {CONFIG}); refusing to overwrite it"
                )
            shutil.rmtree(out)
        elif (out / RESULTS).is_file():
            raise RalmError(f"{out}: holds a finished run; choose another --out or pass --overwrite")
        elif not known:
            raise RalmError(f"{out}: exists and is not a retriever run; choose another --out")
        else:
            saved = json.loads((out / CONFIG).read_text(encoding="utf-8"))
            diff = [k for k, v in settings.items() if saved.get("config", {}).get(k) != v]
            diff += [k for k, v in data.items() if saved.get("data", {}).get(k) != v]
            if diff:
                raise RalmError(
                    f"{out}: holds an unfinished run with other settings ({', '.join(sorted(diff))}); "
                    "rerun it with the same ones to resume, or pass --overwrite to start over"
                )
            clear_leftovers(out)
            if finished_checkpoints(out):
                return True
            (out / "metrics.jsonl").unlink(missing_ok=True)  # cut before its first checkpoint
            return False
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / CONFIG, {"config": settings, "data": data})
    return False
