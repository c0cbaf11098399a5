"""One GPU evidence pack (issue 38): the seeds' headline effects at the scale minutes of one H100/H200 give.

Prepared on the CPU, run whenever a GPU is lent, reported on the CPU:

  prep     on the CPU: each stage's inputs (DocStores, towers, questions, the serve target...),
           the wheels of what the GPU image lacks, the bundled MiniLM in fp16, all under --pack
           (default runs/gpupack), then cut into transport parts of <= 50 MiB
           (runs/gpupack/parts/pNN): a device call carries at most 64 MiB. With every stage the
           pack is ~440 MiB in 10 parts: p00-p02 hold the wheels, MiniLM and four stages, the rest
           is causal_nb (the Gemma-3 GGUF, 241 MiB). `prep --stages ...` packs fewer.
  stash    on the GPU (from the repository root; ralm is not installed there, hence PYTHONPATH=src),
           once per part, each call carrying one part:
             PYTHONPATH=src python -m benchmarks.gpu.gpu_pack stash runs/gpupack/parts/p00 --pack /tmp/gpupack
  run      on the GPU, in the call carrying the last part:
             PYTHONPATH=src python -m benchmarks.gpu.gpu_pack stash runs/gpupack/parts/pNN --pack /tmp/gpupack &&
             PYTHONPATH=src python -m benchmarks.gpu.gpu_pack run --pack /tmp/gpupack --out $OUT
           `run` installs the carried wheels (and the MiniLM stand-in) under --site, then starts
           itself once more with them on PYTHONPATH (RALM_GPUPACK_CARRIED set: no second install).
           Stages in priority order (those without a result in benchmarks/results/gpu_pack.json
           first), each with its time budget (--budget, default 540 s in all); a stage whose
           parts were not stashed is skipped with a line;
           a stage is skipped with a line when less than its minimum is left, a failed stage is
           recorded and the next one runs. $OUT/gpu_pack_run.json is rewritten after every stage,
           so a run stopped at the call's limit keeps what it finished.
  report   on the CPU: merges run files (and the stages already in benchmarks/results/gpu_pack.json)
           into benchmarks/results/gpu_pack.json and .md: per stage the newest successful run wins,
           and each stage says on which device, when, with which torch/CUDA/transformers and
           precision it ran, and its seconds.

Stages (benchmarks/gpu/stages/, in this order): brent_en (BRENT Fig. 2 in English), causal_nb (the
causal-reader REALM in Norwegian), surealm, serve (ralm serve under load), luke (DaLUKE NER).
`--tiny` runs every stage end to end at toy scale on the CPU (the test suite does, so the pack
never rots); tiny runs are refused by `report` (their numbers mean nothing).

Run: python -m benchmarks.gpu.gpu_pack prep | stash PART | run --out DIR | report RUN.json ... [--tiny]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from benchmarks.common import BENCH, RESULTS, ROOT, logger, script_argv, script_command, write_result
from benchmarks.gpu.stages import ORDER
from benchmarks.gpu.stages.context import StageContext

RUN_FILE = "gpu_pack_run.json"
# set in the environment of a `run` that device_env's carried packages are importable in (carried_rerun)
CARRIED = "RALM_GPUPACK_CARRIED"
RESULTS_FILE = BENCH / "results" / "gpu_pack.json"
DEFAULT_BUDGET = 540.0


log = logger("gpu_pack", stdout=True)


def load_stages(names: Sequence[str] = ORDER) -> list:
    """The stage modules, in the order given."""
    return [importlib.import_module(f"benchmarks.gpu.stages.{n}") for n in names]


def environment() -> dict:
    """Device, versions and precision of this process's torch (what every stage record carries)."""
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    bf16 = cuda and torch.cuda.is_bf16_supported()
    return {
        "device": torch.cuda.get_device_name(0)
        if cuda
        else f"cpu ({platform.processor() or platform.machine()})",
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "transformers": transformers.__version__,
        "precision": "bf16 autocast (ralm's autocast=auto)" if bf16 else "fp32",
        "host": platform.node(),
    }


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------- run
def run_stages(
    stages: Sequence,
    make_ctx: Callable[[object, float], StageContext],
    budget: float,
    *,
    tiny: bool = False,
    env: dict | None = None,
    on_record: Callable[[list[dict]], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    missing: Callable[[object], str | None] | None = None,
) -> list[dict]:
    """Run `stages` in order within `budget` seconds; one record per stage (ok, failed or skipped).

    A stage gets min(its BUDGET_S, the time left) (tiny: the time left) and is skipped when less
    than its MIN_S is left (tiny: never for want of time). `make_ctx(stage, deadline)` builds its
    context; an exception in a stage is recorded with its last lines and the next stage runs.
    `missing(stage)`: why the stage cannot run at all (its inputs did not travel), or None.
    """
    end = clock() + budget
    records: list[dict] = []
    for st in stages:
        left = end - clock()
        rec = {"stage": st.NAME, "title": st.TITLE, "tiny": tiny, "started": now(), **(env or {})}
        why = missing(st) if missing is not None else None
        if why is not None:
            rec.update(status="skipped", reason=why, seconds=0.0, metrics={})
            log(f"{st.NAME}: skipped ({why})")
        elif not tiny and left < st.MIN_S:
            rec.update(
                status="skipped",
                reason=f"{left:.0f} s left, the stage needs at least {st.MIN_S:.0f} s",
                seconds=0.0,
                metrics={},
            )
            log(f"{st.NAME}: skipped ({rec['reason']})")
        else:
            allowed = left if tiny else min(st.BUDGET_S, left)
            t0 = clock()
            try:
                metrics = st.run(make_ctx(st, t0 + allowed))
                rec.update(status="ok", metrics={k: float(v) for k, v in metrics.items()})
            except Exception as exc:  # a failing stage must not stop the others
                tail = traceback.format_exc().strip().splitlines()[-6:]
                rec.update(status="failed", reason=f"{type(exc).__name__}: {exc}", traceback=tail, metrics={})
                log(f"{st.NAME}: FAILED {rec['reason']}")
            rec.update(seconds=round(clock() - t0, 1), budget_s=round(allowed, 1))
            log(f"{st.NAME}: {rec['status']} in {rec['seconds']} s")
        rec["finished"] = now()
        records.append(rec)
        if on_record is not None:
            on_record(records)
    return records


def carried_rerun(argv: Sequence[str], carried: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run `gpu_pack ARGV` again with `carried` (device_env's
    PYTHONPATH of the carried packages) in its environment and CARRIED set, so that it does not
    install them again."""
    return [*script_argv(__file__), *argv], {**os.environ, **carried, CARRIED: "1"}


def cmd_run(a) -> int:
    from benchmarks.gpu.stages.transport import device_env
    from ralm.atomic import write_json_atomic

    pack = a.pack
    if not a.tiny and CARRIED not in os.environ:
        carried = device_env(pack, Path(a.site), log=log)
        if carried:  # the stages' own code imports them too: start again where they are importable
            cmd, full = carried_rerun(a.argv, carried)
            log(f"again with PYTHONPATH={carried['PYTHONPATH']}")
            os.execve(cmd[0], cmd, full)
    env = environment()
    log(f"device: {env['device']}, torch {env['torch']}, CUDA {env['cuda']}, {env['precision']}")
    if a.stages:
        names = list(a.stages)
    else:
        names = list(ORDER) if a.tiny else pending_first(list(ORDER), standing(RESULTS_FILE))
    log("stages, in this order: " + ", ".join(names))
    stages = load_stages(names)
    device = "cuda" if env["cuda"] else "cpu"
    work = Path(tempfile.gettempdir()) / "gpupack-work" if a.work is None else a.work

    def make_ctx(st, deadline: float) -> StageContext:
        return StageContext(
            st.NAME, pack / "inputs" / st.NAME, work / st.NAME, a.tiny, device, deadline, log
        )  # its commands inherit the carried packages' PYTHONPATH from this process's environment

    def save(records: list[dict]) -> None:
        write_json_atomic(
            a.out / RUN_FILE, {"command": " ".join(sys.argv), "budget_s": a.budget, "stages": records}
        )

    records = run_stages(
        stages,
        make_ctx,
        a.budget,
        tiny=a.tiny,
        env=env,
        on_record=save,
        missing=lambda st: inputs_missing(pack / "inputs" / st.NAME),
    )
    for r in records:
        log(f"{r['stage']}: {r['status']} {json.dumps(r['metrics'])}")
    return 0


def inputs_missing(d: Path) -> str | None:
    """Why a stage's inputs are not usable on this machine (not stashed, or some parts still missing)."""
    from benchmarks.gpu.stages.transport import CHUNK_SUFFIX

    if not d.is_dir():
        return f"its inputs ({d}) are not in the pack: prep it (`prep --stages ...`) and stash its parts"
    waiting = sorted({p.name.rpartition(CHUNK_SUFFIX)[0] for p in d.rglob(f"*{CHUNK_SUFFIX}*-of-*")})
    if waiting:
        return f"{', '.join(waiting)} of {d} still wait for parts that were not stashed"
    return None


def standing(path: Path) -> set[str]:
    """Stages with a successful GPU run in the committed report."""
    if not path.is_file():
        return set()
    return {n for n, r in json.loads(path.read_text())["stages"].items() if r["status"] == "ok"}


def pending_first(names: list[str], done: set[str]) -> list[str]:
    """Priority order, the stages without a standing result first: each GPU session advances the pack."""
    return [n for n in names if n not in done] + [n for n in names if n in done]


def cmd_prep(a) -> int:
    from benchmarks.gpu.stages.transport import download_wheels, save_minilm_fp16, split_parts, write_manifest

    pack = a.pack
    pack.mkdir(parents=True, exist_ok=True)
    for st in load_stages(a.stages):
        log(f"prep {st.NAME}")
        ctx = StageContext(
            st.NAME,
            pack / "inputs" / st.NAME,
            pack / "prep-work" / st.NAME,
            a.tiny,
            "cpu",
            time.monotonic() + 3600,
            log,
        )
        ctx.inputs.mkdir(parents=True, exist_ok=True)
        st.prep(ctx)
    shutil.rmtree(pack / "prep-work", ignore_errors=True)
    if a.tiny:
        return 0
    if not (pack / "wheels").is_dir():
        download_wheels(pack / "wheels", log=log)
    if not (pack / "minilm").is_dir():
        save_minilm_fp16(pack / "minilm")
    write_manifest(pack, stages=list(a.stages), date=now())
    # transport order: the small stages first, causal_nb (its reader is the 241 MiB GGUF) last, so that
    # the first three parts already run four stages
    heavy = [s for s in a.stages if s == "causal_nb"]
    order = [
        "pack.json",
        "wheels",
        "minilm",
        *[f"inputs/{s}" for s in a.stages if s not in heavy],
        *[f"inputs/{s}" for s in heavy],
    ]
    parts = split_parts(pack, pack / "parts", order)
    log(f"{len(parts)} transport parts under {pack / 'parts'}; see the module docstring for the device calls")
    return 0


def cmd_stash(a) -> int:
    from benchmarks.gpu.stages.transport import stash

    joined = stash(a.part, a.pack)
    log(f"{a.part} -> {a.pack}" + (f" (joined {', '.join(joined)})" if joined else ""))
    return 0


# ----------------------------------------------------------------------------- report
_BAR = re.compile(r"^\s*(<=|>=|<|>)\s*(-?[0-9.]+)")


def meets(value: float, bar: str) -> bool | None:
    """Whether `value` meets a bar written as '<= 0.5', '>= 3', '> 0' (None: no number to compare)."""
    m = _BAR.match(bar)
    if m is None:
        return None
    op, x = m.group(1), float(m.group(2))
    return {"<=": value <= x, ">=": value >= x, "<": value < x, ">": value > x}[op]


def merge_runs(records: Sequence[dict]) -> dict[str, dict]:
    """Stage name -> the record that stands: the newest successful one, else the newest attempt.
    Records of tiny runs are left out."""
    best: dict[str, dict] = {}
    for r in sorted((r for r in records if not r.get("tiny")), key=lambda r: r.get("finished", "")):
        cur = best.get(r["stage"])
        if cur is None or r["status"] == "ok" or cur["status"] != "ok":
            best[r["stage"]] = r
    return best


def build_report(stages: dict[str, dict], targets: dict[str, str]) -> dict:
    """gpu_pack.json's body from the standing stage records."""
    metrics: dict[str, float] = {}
    for r in stages.values():
        if r["status"] == "ok":
            metrics.update(r["metrics"])
    verdicts = {}
    for name, bar in targets.items():
        if name not in metrics:
            verdicts[name] = f"{bar} (not measured)"
        else:
            ok = meets(metrics[name], bar)
            verdicts[name] = f"{bar} ({'met' if ok else 'not met'})" if ok is not None else bar
    devices = sorted({r.get("device", "?") for r in stages.values() if r["status"] == "ok"})
    return {"metrics": metrics, "targets": verdicts, "devices": devices, "stages": stages}


def markdown(rep: dict) -> str:
    lines = [
        "# GPU evidence pack",
        "",
        "| stage | status | device | precision | seconds | when | metrics |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in ORDER:
        r = rep["stages"].get(name)
        if r is None:
            lines.append(f"| {name} | not run | | | | | |")
            continue
        ms = ", ".join(f"{k} {v:.4g}" for k, v in r["metrics"].items()) or r.get("reason", "")
        lines.append(
            f"| {name} | {r['status']} | {r.get('device', '?')} | {r.get('precision', '?')} | "
            f"{r.get('seconds', 0)} | {r.get('finished', '?')} | {ms} |"
        )
    lines += ["", "| metric | value | target |", "| --- | --- | --- |"]
    for k, bar in rep["targets"].items():
        v = rep["metrics"].get(k)
        lines.append(f"| {k} | {'–' if v is None else f'{v:.4g}'} | {bar} |")
    return "\n".join(lines) + "\n"


def cmd_report(a) -> int:

    records: list[dict] = []
    old = RESULTS / "gpu_pack.json"
    if old.is_file():
        records += list(json.loads(old.read_text())["stages"].values())
    for p in a.runs:
        f = p / RUN_FILE if p.is_dir() else p
        recs = json.loads(f.read_text())["stages"]
        if any(r.get("tiny") for r in recs):
            log(f"{f}: a --tiny run; left out of the report")
        records += recs
    stages = merge_runs(records)
    targets = {k: v for st in load_stages() for k, v in st.TARGETS.items()}
    rep = build_report(stages, targets)
    write_result(
        "gpu_pack",
        script_command(__file__, ["report", *map(str, a.runs)]),
        rep["metrics"],
        rep["targets"],
        devices=rep["devices"],
        stages=rep["stages"],
    )
    (RESULTS / "gpu_pack.md").write_text(markdown(rep), encoding="utf-8")
    log(f"{RESULTS / 'gpu_pack.json'}: {len(stages)} stages, {len(rep['metrics'])} metrics")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("prep", "run"):
        p = sub.add_parser(name)
        p.add_argument("--pack", type=Path, default=ROOT / "runs" / "gpupack")
        p.add_argument("--tiny", action="store_true", help="every stage at toy scale (CPU, seconds)")
        p.add_argument(
            "--stages",
            nargs="+",
            default=None if name == "run" else list(ORDER),
            choices=list(ORDER),
            help="run: default every stage, those without a result in benchmarks/results/gpu_pack.json first",
        )
    r = sub.choices["run"]
    r.add_argument("--out", type=Path, required=True)
    r.add_argument(
        "--work",
        type=Path,
        default=None,
        help="scratch folder (default: TMPDIR/gpupack-work; $OUT takes 8 files)",
    )
    r.add_argument(
        "--budget", type=float, default=DEFAULT_BUDGET, help="seconds for all stages (default 540)"
    )
    r.add_argument("--site", default="/tmp/gpupack-site", help="where carried wheels are installed")
    s = sub.add_parser("stash")
    s.add_argument("part", type=Path)
    s.add_argument("--pack", type=Path, default=Path("/tmp/gpupack"))
    rp = sub.add_parser("report")
    rp.add_argument("runs", nargs="*", type=Path, help="gpu_pack_run.json files or the run's --out folders")
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)  # what `run` starts itself again with
    return {"prep": cmd_prep, "run": cmd_run, "stash": cmd_stash, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
