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

from pathlib import Path
from typing import Any

from ralm.atomic import write_json_atomic
from ralm.corpus.staging import remove_stale
from ralm.errors import RalmError
from ralm.train.run import not_a_run, out_state, refuse_other_settings, remove_run, resume_point

RESULTS = "results.json"
CONFIG = "train_config.json"
COMMAND = "ralm retriever train"


def prepare_run(
    out: Path, settings: dict[str, Any], data: dict[str, Any], overwrite: bool, log=print
) -> bool:
    """Make `out` ready; True when it holds a checkpoint of the same run to resume.

    A finished run (results.json) is kept unless `overwrite`; a run with other settings is refused.
    """
    remove_stale(out / "encoder", log, ("tmp",), "retriever training")
    state = out_state(out, CONFIG, RESULTS)
    if overwrite and state != "empty":
        remove_run(out, CONFIG, COMMAND)
    elif state == "finished":
        raise RalmError(f"{out}: holds a finished run; choose another --out or pass --overwrite")
    elif state == "foreign":
        raise RalmError(not_a_run(out, CONFIG, COMMAND))
    elif state == "unfinished":
        refuse_other_settings(out, CONFIG, {"config": settings, "data": data}, COMMAND)
        return resume_point(out, COMMAND) is not None
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / CONFIG, {"config": settings, "data": data})
    return False
