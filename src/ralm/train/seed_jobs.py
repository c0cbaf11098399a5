"""The run folder of a command that trains one model per seed (`ralm finetune`, `ralm luke ner`):
`.OUT.partial` beside `--out`, kept when the job is cut off, resumed by a rerun, renamed to `out`
when every seed is done.

The job holds `out`'s writer lock (`ralm.locks`) from start to end, so one job at a time writes
an `out` and its partial directory. `prepare_job(out, options, overwrite, note)`:
- refuses an existing `out` unless `overwrite` and it is a fine-tuning output (results.json); the
  old one stays in place until the new job is published;
- removes `.OUT.partial-PID` directories that killed jobs of earlier ralm versions left, once
  process PID is gone, with a note each (`ralm.atomic.remove_stale`);
- resumes `.OUT.partial` of an interrupted job (Ctrl-C, a crash, kill -9) when `options` equal
  the ones it saved in `job.json`, except those that do not change results (`NEUTRAL`); paths are
  compared resolved. Its finished seeds are kept (`finished_record`), the others run again.
  Other options: a RalmError naming them, or, with `overwrite`, the partial job is discarded
  with a note. To recompute a matching one anyway, remove `.OUT.partial`.

A seed has finished when its `seed-N/eval.json` exists: the command's seed trainer
(`ralm.tasks.trainer.run_seed`, `ralm.luke.ner.run_seed`) writes it last, through a temporary file
and a rename; `run_seeds` runs the seeds that have not finished and says which were kept. Every seed seeds its own generators, so a resumed
job's results equal an uninterrupted one's (timings aside). On failure `abandon` keeps a partial
directory that holds a finished seed (with a note: rerun to continue) and removes one that does
not; `publish` writes results.json and results.md and renames the directory to `out`.

Left out: comparing the data files' contents (edit the data, then remove `.OUT.partial` or
choose another --out), and resuming inside a seed (an unfinished seed starts again).

Example:
    tmp = prepare_job(Path("runs/ner"), asdict(cfg), overwrite=False, note=print)
    record = finished_record(tmp, 42) or run_the_seed(start_seed(tmp, 42))
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ralm.atomic import remove_stale, replace_dir, write_json_atomic
from ralm.errors import RalmError

__all__ = [
    "JOB_FILE",
    "NEUTRAL",
    "abandon",
    "finished_record",
    "option_differences",
    "partial_dir",
    "prepare_job",
    "publish",
    "run_seeds",
    "start_seed",
]

JOB_FILE = "job.json"  # the options of the job writing a partial directory
SEED_DONE = "eval.json"  # written last by a seed: its presence marks the seed finished
NEUTRAL = ("out", "overwrite", "progress", "name", "dataset")  # options that leave results as they are
PATH_OPTIONS = ("data", "model", "train", "dev", "test", "index")


def partial_dir(out: Path) -> Path:
    """`PARENT/.NAME.partial` for `out` = PARENT/NAME."""
    return out.parent / f".{out.name}.partial"


def start_seed(tmp: Path, seed: int) -> Path:
    """An empty `tmp/seed-N` (what an unfinished run of that seed left is removed)."""
    sd = tmp / f"seed-{seed}"
    shutil.rmtree(sd, ignore_errors=True)
    sd.mkdir()
    return sd


def finished_record(tmp: Path, seed: int) -> dict[str, Any] | None:
    """The record (eval.json) of seed `seed` in the partial directory `tmp`, None if it did not finish."""
    try:
        rec = json.loads((tmp / f"seed-{seed}" / SEED_DONE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("seed") == seed else None


def _comparable(name: str, value: Any) -> Any:
    """Paths resolved (when they exist), so `data/x` and `./data/x` are the same option."""
    if name in PATH_OPTIONS and isinstance(value, str) and value and Path(value).expanduser().exists():
        return str(Path(value).expanduser().resolve())
    return value


def option_differences(saved: dict[str, Any], asked: dict[str, Any]) -> list[str]:
    """How `asked` differs from `saved`, NEUTRAL options aside: ["lr 1e-05, asked 2e-05", ...].

    Example: option_differences({"lr": 1e-5, "out": "a"}, {"lr": 2e-5, "out": "b"}) -> ["lr 1e-05, asked 2e-05"].
    """
    asked = json.loads(json.dumps(asked))  # the types a JSON round trip gives (tuples -> lists)
    diffs = []
    for name in sorted(set(saved) | set(asked)):
        if name in NEUTRAL:
            continue
        had, want = saved.get(name), asked.get(name)
        if _comparable(name, had) != _comparable(name, want):
            diffs.append(f"{name} {_show(had)}, asked {_show(want)}")
    return diffs


def _show(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def _finished(tmp: Path) -> list[str]:
    """Names of the seed directories in `tmp` whose seed finished, in order."""
    done = [sd for sd in tmp.glob("seed-*") if (sd / SEED_DONE).is_file()]
    return [sd.name for sd in sorted(done, key=lambda p: (len(p.name), p.name))]


def prepare_job(out: Path, options: dict[str, Any], overwrite: bool, note: Callable[[str], None]) -> Path:
    """The partial directory a job with `options` writes into (see the module docstring); call it
    holding `writer_lock(out)`. `options` (JSON-able) are saved there as job.json."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise RalmError(f"{out}: exists; choose another --out or pass --overwrite")
        if out.is_dir() and not (out / "results.json").is_file():
            raise RalmError(
                f"{out}: exists and is not a fine-tuning output (no results.json); refusing to overwrite it"
            )
    remove_stale(out, note, ("partial",), "fine-tuning job")
    tmp = partial_dir(out)
    if tmp.exists() and not tmp.is_dir():
        raise RalmError(f"{tmp}: exists and is not a directory; remove it or choose another --out")
    if tmp.is_dir():
        done = _finished(tmp)
        try:
            saved = json.loads((tmp / JOB_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = None
        diffs = option_differences(saved, options) if isinstance(saved, dict) else ["no saved options"]
        if not diffs:
            kept = f"{', '.join(done)} finished, kept" if done else "no seed had finished"
            note(f"note: resuming the interrupted job in {tmp} ({kept}); remove that folder to start over")
        elif overwrite or not done:
            shutil.rmtree(tmp)
            if done:
                note(f"note: --overwrite: discarded the interrupted job in {tmp} ({'; '.join(diffs)})")
        else:
            raise RalmError(
                f"{tmp}: holds an interrupted job with other options ({'; '.join(diffs)}) and "
                f"{len(done)} finished seed(s); rerun with its options to resume it, pass --overwrite "
                "to start over, or choose another --out"
            )
    tmp.mkdir(parents=True, exist_ok=True)
    write_json_atomic(tmp / JOB_FILE, options)
    return tmp


def abandon(tmp: Path, note: Callable[[str], None]) -> None:
    """After a failure: keep `tmp` when a seed in it finished (a rerun continues), else remove it."""
    done = _finished(tmp) if tmp.is_dir() else []
    if not done:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    note(f"note: kept {tmp} ({', '.join(done)} finished); rerun the same command to continue")


def publish(tmp: Path, out: Path, results: dict[str, Any], markdown: str) -> None:
    """Write results.json and results.md into `tmp`, then put it in place of `out` (an old output
    is removed only once the new one is there)."""
    (tmp / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (tmp / "results.md").write_text(markdown, encoding="utf-8")
    (tmp / JOB_FILE).unlink(missing_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    replace_dir(tmp, out)


def run_seeds(
    tmp: Path,
    seeds: Sequence[int],
    run_one: Callable[[int, Path], dict[str, Any]],
    log: Callable[[str], None],
    details: Callable[[dict[str, Any]], list[str]] = lambda rec: [],
) -> list[dict[str, Any]]:
    """Each seed's record, in order: a finished seed's from `tmp` (`finished_record`), the others
    from `run_one(seed, start_seed(tmp, seed))`. A line per seed goes to `log`: its test scores
    (dev without a test split), the split, its seconds, `details(record)` and, for a kept seed,
    "finished by the interrupted run"."""
    records = []
    for seed in seeds:
        rec = finished_record(tmp, seed)
        reused = rec is not None
        if rec is None:
            rec = run_one(seed, start_seed(tmp, seed))
        shown = rec.get("test") or rec.get("dev") or {}
        notes = ["test" if rec.get("test") else "dev", f"{rec['seconds']:.0f} s", *details(rec)]
        if reused:
            notes.append("finished by the interrupted run")
        log(f"seed {seed}: " + ", ".join(f"{k} {v:.2f}" for k, v in shown.items()) + f" ({'; '.join(notes)})")
        records.append(rec)
    return records
