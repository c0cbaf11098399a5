"""The run directory of retriever training: what a new, resumed or finished run finds there.

    OUT/train_config.json   the settings and data of the run (a resume must match them)
    OUT/checkpoints/step-N  resumable state (`ralm.train.checkpoint`), removed when the run ends
    OUT/encoder/            the saved encoder (best dev checkpoint), written atomically
    OUT/metrics.jsonl, OUT/results.json

`prepare_run` keeps a finished run (a rerun with its settings has nothing to do; other settings
are refused) and a foreign directory unless --overwrite,
refuses to resume with other settings (naming them), and removes what a killed run left
half-written (an encoder being saved, a checkpoint being written), with a note.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from ralm.atomic import remove_stale, write_json_atomic
from ralm.errors import RalmError
from ralm.train.run import (
    not_a_run,
    out_state,
    refuse_other_settings,
    remove_run,
    resume_point,
    setting_differences,
)

RESULTS = "results.json"
CONFIG = "train_config.json"
COMMAND = "ralm retriever train"


def prepare_run(
    out: Path, settings: dict[str, Any], data: dict[str, Any], overwrite: bool, log=print
) -> Literal["new", "resume", "finished"]:
    """Make `out` ready: "resume" when it holds a checkpoint of the same run, "finished" when it
    holds this very run finished (nothing to do), else "new".

    A finished run (results.json) is kept unless `overwrite`; a run with other settings is refused.
    """
    remove_stale(out / "encoder", log, ("tmp",), "retriever training")
    state = out_state(out, CONFIG, RESULTS)
    given = json.loads(json.dumps({"config": settings, "data": data}))
    if overwrite and state != "empty":
        remove_run(out, CONFIG, COMMAND)
    elif state == "finished":
        saved = json.loads((out / CONFIG).read_text(encoding="utf-8")) if (out / CONFIG).is_file() else {}
        diff = setting_differences(saved, given)
        if not diff:
            return "finished"
        raise RalmError(
            f"{out}: holds a finished run with other settings ({', '.join(diff)}); choose another --out "
            "or pass --overwrite"
        )
    elif state == "foreign":
        raise RalmError(not_a_run(out, CONFIG, COMMAND))
    elif state == "unfinished":
        refuse_other_settings(out, CONFIG, given, COMMAND)
        return "resume" if resume_point(out, COMMAND) is not None else "new"
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / CONFIG, {"config": settings, "data": data})
    return "new"
