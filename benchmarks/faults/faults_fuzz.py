"""Seeded fuzzing for `faults.py`: the cases made from the mutations (`faults_mutate`,
`faults_mutate_json`) and the child process that runs them. This file is the child:
`python -m benchmarks.faults.faults_fuzz CASES RESULTS START`."""

from __future__ import annotations

import bz2
import contextlib
import io
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import script_argv
from benchmarks.faults.faults_mutate import mutate_bytes, mutate_wikitext
from benchmarks.faults.faults_mutate_json import dump_json, mutate_arpa_lines, mutate_json
from benchmarks.faults.faults_util import FUZZ_ALARM, FUZZ_WATCHDOG, child_env, leftovers


def make_fuzz_cases(family: str, n: int, seed: int, base: dict, d: Path) -> list[dict]:
    """`n` seeded mutated inputs of `family` written under `d`, each with its ralm argv."""
    d.mkdir(parents=True, exist_ok=True)
    cases = []
    for i in range(n):
        rng = random.Random(f"{seed}-{family}-{i}")
        out = d / f"out-{i:03d}"
        if family == "wiki":
            if rng.random() < 0.4:
                data, desc = mutate_wikitext(base["wiki_xml"], rng)
            else:
                data, desc = mutate_bytes(base["wiki_xml"], rng, "wiki")
            if rng.random() < 0.5:
                data = bz2.compress(data, compresslevel=1)
                desc += "; bz2"
                if rng.random() < 0.2:
                    data, more = (
                        mutate_bytes(data, rng, "wiki")
                        if rng.random() < 0.5
                        else (data[: rng.randrange(len(data))], "truncate the .bz2")
                    )
                    desc += f"; then {more}"
                path = d / f"in-{i:03d}.xml.bz2"
            else:
                path = d / f"in-{i:03d}.xml"
            argv = ["corpus", "build", str(path), "--out", str(out), "--quiet"]
        elif family == "jsonl":
            if rng.random() < 0.5:
                data, desc = mutate_bytes(base["jsonl"], rng, "jsonl")
            else:
                rows = [json.loads(x) for x in base["jsonl"].decode().splitlines()]
                k = rng.randrange(len(rows))
                obj, desc = mutate_json(
                    rows[k], rng, special=("title", "text", "links", "start", "end", "target", "id")
                )
                lines = base["jsonl"].decode().splitlines()
                lines[k] = dump_json(obj, rng).decode("utf-8", "surrogatepass")
                data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
                desc = f"line {k + 1}: {desc}"
            path = d / f"in-{i:03d}.jsonl"
            argv = ["corpus", "build", str(path), "--out", str(out), "--quiet", "--chunk-size", "64"]
        elif family == "arpa":
            if rng.random() < 0.5:
                data, desc = mutate_bytes(base["arpa"], rng, "arpa")
            else:
                data, desc = mutate_arpa_lines(base["arpa"], rng)
            path = d / f"in-{i:03d}.arpa"
            argv = ["ngram", "score", str(path), str(base["held"])]
            out = None
        elif family == "squad":
            if rng.random() < 0.5:
                data, desc = mutate_bytes(base["squad"], rng, "squad")
            else:
                obj = json.loads(base["squad"])
                obj, desc = mutate_json(
                    obj,
                    rng,
                    special=(
                        "answer_start",
                        "text",
                        "answers",
                        "qas",
                        "context",
                        "id",
                        "question",
                        "data",
                        "paragraphs",
                    ),
                )
                data = dump_json(obj, rng, indent=rng.choice([None, 1]))
            path = d / f"in-{i:03d}.json"
            argv = [
                "finetune",
                "extractive-qa",
                str(path),
                "--model",
                str(base["tiny"]),
                "--out",
                str(out),
                "--max-steps",
                "1",
                "--epochs",
                "1",
                "--batch-size",
                "2",
                "--max-length",
                "64",
                "--doc-stride",
                "16",
                "--device",
                "cpu",
                "--autocast",
                "off",
                "--no-save",
                "--no-progress",
                "--max-eval",
                "2",
            ]
        else:
            raise ValueError(family)
        path.write_bytes(data)
        cases.append({"i": i, "family": family, "argv": argv, "out": str(out) if out else None, "desc": desc})
    return cases


# ----------------------------------------------------------------------------- fuzz child
def fuzz_child(cases_path: str, results_path: str, start: int) -> None:
    """Run cases[start:] in this process, appending one JSON line per case to results_path
    (a {"start": i} line first, so that the parent knows which case killed a dead child)."""
    import faulthandler
    import traceback

    import torch

    torch.set_num_threads(1)
    from ralm.cli import main
    from ralm.errors import RalmError

    class Hang(BaseException):
        pass

    def on_alarm(signum, frame):
        raise Hang()

    signal.signal(signal.SIGALRM, on_alarm)
    cases = json.loads(Path(cases_path).read_text())
    with open(results_path, "a", encoding="utf-8") as log:
        for case in cases[start:]:
            log.write(json.dumps({"start": case["i"]}) + "\n")
            log.flush()
            out, err = io.StringIO(), io.StringIO()
            rc, exc_text, hang = None, None, False
            t = time.perf_counter()
            faulthandler.dump_traceback_later(FUZZ_WATCHDOG, exit=True)
            signal.alarm(FUZZ_ALARM)
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    rc = main(case["argv"])
            except Hang:
                hang = True
                exc_text = traceback.format_exc()
            except SystemExit as exc:
                rc = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
            except RalmError as exc:  # main catches these; counted as exit 2 if one escapes
                rc = 2
                err.write(f"(escaped main) ralm: error: {exc}\n")
            except BaseException:  # noqa: BLE001 - the point: anything else is a traceback
                exc_text = traceback.format_exc()
                rc = 1
            finally:
                signal.alarm(0)
                faulthandler.cancel_dump_traceback_later()
            seconds = time.perf_counter() - t
            left = []
            if case["out"]:
                left = leftovers(Path(case["out"]))
                shutil.rmtree(case["out"], ignore_errors=True)
                for p in left:
                    p = Path(p)
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            e = err.getvalue()
            log.write(
                json.dumps(
                    {
                        "i": case["i"],
                        "rc": rc,
                        "hang": hang,
                        "exception": exc_text,
                        "stderr_traceback": "Traceback (most recent call last)" in e,
                        "message": ([x for x in e.splitlines() if x.strip()] or [""])[-1][:300],
                        "stderr_tail": e[-1500:],
                        "leftovers": left,
                        "seconds": round(seconds, 3),
                    }
                )
                + "\n"
            )
            log.flush()


def run_fuzz(cases: list[dict], d: Path) -> list[dict]:
    """Run the cases in child processes (restarted after a case that kills one); one result each."""
    cases_path, results_path = d / "cases.json", d / "results.jsonl"
    cases_path.write_text(json.dumps(cases))
    results_path.unlink(missing_ok=True)
    done: dict[int, dict] = {}
    start = 0
    while start < len(cases):
        with open(d / "child.log", "ab") as clog:
            p = subprocess.run(
                [*script_argv(__file__), str(cases_path), str(results_path), str(start)],
                stdout=clog,
                stderr=clog,
                env=child_env(),
                timeout=FUZZ_WATCHDOG * (len(cases) - start) + 120,
            )
        last_start = None
        for line in results_path.read_text().splitlines():
            r = json.loads(line)
            if "start" in r:
                last_start = r["start"]
            else:
                done[r["i"]] = r
        if last_start is not None and last_start not in done:  # the child died in this case
            tail = (d / "child.log").read_bytes()[-3000:].decode("utf-8", "replace")
            hang = "Timeout (" in tail  # faulthandler's watchdog
            done[last_start] = {
                "i": last_start,
                "rc": None if hang else p.returncode,
                "hang": hang,
                "exception": None if hang else f"child process died with status {p.returncode}",
                "stderr_traceback": "Traceback" in tail,
                "message": tail.strip().splitlines()[-1] if tail.strip() else "",
                "stderr_tail": tail,
                "leftovers": [],
                "seconds": FUZZ_WATCHDOG if hang else None,
            }
            start = last_start + 1
        elif p.returncode != 0:
            raise RuntimeError(
                f"fuzz child failed outside any case (status {p.returncode}); see {d / 'child.log'}"
            )
        else:
            start = len(cases)
    out = []
    for c in cases:
        r = dict(done[c["i"]])
        r.update(family=c["family"], desc=c["desc"], argv=c["argv"])
        out.append(r)
    return out


if __name__ == "__main__":
    fuzz_child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
