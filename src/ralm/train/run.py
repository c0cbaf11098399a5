"""The run folder of a ralm training command, once: may --out be used, does a resumed run have
the settings it was started with, and where does it resume.

Every checkpointed training command (`ralm pretrain`, `ralm luke pretrain`, `ralm train-retriever`,
`ralm rag train`, `ralm rag lsr`) writes a run folder:

    OUT/<settings file>     what the run was started with (config.toml, train_config.json, ...);
                            a resume must match it
    OUT/metrics.jsonl       one row a step (`ralm.train.logging`)
    OUT/checkpoints/step-N  resumable state (`ralm.train.checkpoint`)
    OUT/<result>            written last: its presence marks the run finished

The commands keep their own policy (pre-training continues only with --resume, the others
whenever --out holds the same run; what a finished run does) and share the mechanics:

- `out_state(run, marker, result)`: "empty", "foreign" (files, but no settings file), "unfinished"
  or "finished"; a RalmError when --out is a file;
- `check_start(run, marker, command, resume=..., overwrite=...)`: the --resume/--overwrite rule of
  the commands that continue only when asked;
- `remove_run(run, marker, command)`: --overwrite, refused for a folder that is not such a run;
- `setting_differences` and `refuse_other_settings`: a resumed run's settings against the given
  ones, paths compared resolved (`same_setting`);
- `resume_point(run, command)`: what a killed writer left half-written removed, the newest intact
  checkpoint (None when the run stopped before its first one: its metrics.jsonl is removed too);
- `reached_steps`, `rerun_of_finished` and `finished_note`: a rerun of a finished run's command
  says so and changes nothing (`--overwrite` trains it again).

`ralm finetune` and `ralm luke ner` keep a job folder per `--out` with one folder per seed
(`ralm.train.seed_jobs`): a seed either finished or runs again, so it has no checkpoints to resume.
`ralm surealm train` keeps no checkpoints either: it reads --out with `out_state` (its metrics.jsonl
marks a run, its train.json a trained model) and replaces a run only with --overwrite.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from ralm.errors import RalmError
from ralm.train.logging import METRICS_FILE

__all__ = [
    "check_start",
    "finished_note",
    "not_a_run",
    "out_state",
    "reached_steps",
    "refuse_other_settings",
    "remove_run",
    "rerun_of_finished",
    "resume_point",
    "same_setting",
    "setting_differences",
]

OutState = Literal["empty", "foreign", "unfinished", "finished"]


def same_setting(saved: Any, given: Any) -> bool:
    """Whether a resumed run's setting `given` is the one it was started with (`saved`): equal
    values, or two spellings of one existing path (relative vs absolute, a symlink)."""
    if saved == given:
        return True
    if isinstance(saved, str) and isinstance(given, str) and saved and given:
        a, b = Path(saved).expanduser(), Path(given).expanduser()
        return a.exists() and b.exists() and a.resolve() == b.resolve()
    return False


def out_state(run: str | os.PathLike, marker: str, result: str | None = None) -> OutState:
    """What --out holds: nothing ("empty"), a finished run (its `result` file), an unfinished run
    (its settings file `marker`), or files of something else ("foreign")."""
    run = Path(run)
    if run.exists() and not run.is_dir():
        raise RalmError(f"{run}: exists and is not a directory; choose another --out")
    if not run.is_dir() or not any(run.iterdir()):
        return "empty"
    if result is not None and (run / result).exists():
        return "finished"
    return "unfinished" if (run / marker).is_file() else "foreign"


def check_start(run: Path, marker: str, command: str, *, resume: bool, overwrite: bool) -> bool:
    """The rule of the commands that continue a run only when asked (`--resume`): True when --out
    holds a run to continue. A folder with files needs --resume or --overwrite; --overwrite is
    refused for one that holds no settings file `marker` (it is not a run of `command`), and
    --resume into such a folder starts a new run beside its files. Nothing is removed here."""
    state = out_state(run, marker)
    if state == "foreign" and overwrite and not resume:
        raise RalmError(not_a_run(run, marker, command))
    if state != "empty" and not resume and not overwrite:
        raise RalmError(f"{run}: exists; pass --resume to continue it or --overwrite to start over")
    return resume and state == "unfinished"


def remove_run(run: Path, marker: str, command: str) -> None:
    """--overwrite: delete the run folder `run` (nothing when it is empty or missing); refused for
    a folder that holds files but no settings file `marker`."""
    if out_state(run, marker) == "foreign":
        raise RalmError(not_a_run(run, marker, command))
    if run.is_dir():
        shutil.rmtree(run)


def not_a_run(run: Path, marker: str, command: str) -> str:
    """The one line that refuses to overwrite a --out holding files but no settings file `marker`."""
    return (
        f"{run}: exists and is not a `{command}` run (no {marker}); refusing to overwrite it, "
        "choose another --out"
    )


def _get(settings: Any, name: str) -> Any:
    return settings.get(name) if isinstance(settings, Mapping) else getattr(settings, name, None)


def setting_differences(saved: Any, given: Any, names: Iterable[str] | None = None) -> list[str]:
    """The names (default: every key of `given`) whose values differ between `saved` and `given`
    (mappings or objects with those attributes), by `same_setting`. A mapping value is compared
    key by key, its differing keys named: {"config": {"lr": ...}} gives "lr"."""
    if names is None:
        names = list(given) if isinstance(given, Mapping) else list(vars(given))
    diff: list[str] = []
    for name in names:
        old, new = _get(saved, name), _get(given, name)
        if isinstance(new, Mapping):
            diff += setting_differences(old if isinstance(old, Mapping) else {}, new)
        elif not same_setting(old, new):
            diff.append(name)
    return diff


def refuse_other_settings(
    run: Path,
    settings_file: str,
    given: Mapping[str, Any],
    command: str,
    labels: Mapping[str, str] | None = None,
) -> None:
    """RalmError (one line) when the run in `run` was started with settings (its `settings_file`,
    JSON) other than `given`, naming them (`labels` renames a setting in the message)."""
    saved = json.loads((run / settings_file).read_text(encoding="utf-8"))
    diff = setting_differences(saved, json.loads(json.dumps(given)))
    if diff:
        what = ", ".join((labels or {}).get(k, k) for k in diff)
        raise RalmError(
            f"{run}: holds an unfinished `{command}` run with other settings ({what}); rerun it "
            "with the same ones to resume, or pass --overwrite to start over"
        )


def resume_point(run: Path, command: str) -> Path | None:
    """The checkpoint an unfinished run resumes from: leftovers of a killed writer removed, the
    newest intact checkpoint (a warning names newer damaged ones). None when the run stopped
    before its first checkpoint; its metrics.jsonl is removed then, as the run starts at step 1."""
    from ralm.train.checkpoint import clear_leftovers, intact_checkpoint

    clear_leftovers(run)
    ckpt = intact_checkpoint(run, command=command)
    if ckpt is None:
        (run / METRICS_FILE).unlink(missing_ok=True)
    return ckpt


def reached_steps(run: Path, marker: str, steps: int) -> bool:
    """Whether the run in `run` has a newest checkpoint at `steps` or later that is intact (sizes
    and digests, checked only once the step count is reached, so a run still to resume is hashed
    once, by `resume_point`). False when `run` holds no run, no checkpoint, or a newest one that is
    damaged or unreadable (the resume path then says what is wrong). Call it under the writer lock."""
    from ralm.train.checkpoint import checkpoint_problems, latest_checkpoint, read_state

    if out_state(run, marker) != "unfinished":
        return False
    last = latest_checkpoint(run)
    if last is None:
        return False
    try:
        step = int(read_state(last)["step"])
    except (RalmError, TypeError, ValueError):
        return False
    return step >= steps and not checkpoint_problems(last)


def rerun_of_finished(run: Path, finished: bool, detail: str, *, resume: bool) -> bool:
    """The rule of the commands that continue a run only when asked, for a run that is `finished`:
    True with --resume (the caller prints `finished_note` and returns), a one-line RalmError
    without it; False for a run that is not finished. Nothing is changed either way."""
    if not finished:
        return False
    if not resume:
        raise RalmError(
            f"{run}: finished already ({detail}); nothing to do. --resume with more steps continues it, "
            "--overwrite trains it again"
        )
    return True


def finished_note(run: Path, detail: str) -> str:
    """What a rerun over a finished run says (on stderr) before it returns without a change."""
    return f"{run}: finished already ({detail}); nothing to do (--overwrite trains it again)"
