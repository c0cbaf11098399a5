"""The harness of `faults.py`: `Harness` runs `python -m ralm.cli` cases in child processes with a
time limit and records each one (`record`: exit code, one error line, no traceback, leftovers)."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.faults.faults_report import printable
from benchmarks.faults.faults_util import (
    TIMEOUT,
    TINY_CODE,
    Res,
    articles,
    child_env,
    fingerprint,
    leftovers,
    squad_file,
    src_in_flux,
    write_jsonl,
)


@dataclass
class Harness:
    work: Path
    seed: int
    cases: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # -- running
    def argv(self, args) -> list[str]:
        return [sys.executable, "-m", "ralm.cli", *map(str, args)]

    def ralm(self, *args, timeout: int = TIMEOUT) -> Res:
        """Run ralm; a run that fails because src/ is mid-edit by someone else (the CLI cannot even
        be imported) is retried, up to 6 times 20 s apart, and counted in `self.retries`."""
        for _ in range(6):
            r = self._ralm(*args, timeout=timeout)
            if not src_in_flux(r.err):
                return r
            self.retries.append(" ".join(r.argv)[:200])
            print(
                f"    (src/ mid-edit? {r.err.strip().splitlines()[-1][:120]}; retrying in 20 s)", flush=True
            )
            time.sleep(20)
        return r

    def wait_cli(self) -> None:
        """Wait (up to 5 min) until the whole CLI imports: other engineers edit src/ meanwhile."""
        for _ in range(15):
            r = self._ralm("--help", timeout=60)
            if r.rc == 0:
                return
            print(f"    (ralm --help fails: {r.message[:120]}; waiting 20 s)", flush=True)
            time.sleep(20)

    def _ralm(self, *args, timeout: int = TIMEOUT) -> Res:
        argv = [str(a) for a in args]
        t = time.perf_counter()
        p = subprocess.Popen(
            self.argv(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=child_env(),
            start_new_session=True,
        )
        try:
            out, err = p.communicate(timeout=timeout)
            return Res(
                argv,
                p.returncode,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
                time.perf_counter() - t,
            )
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return Res(
                argv,
                None,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
                time.perf_counter() - t,
                hang=True,
            )

    def popen(self, *args, stdout=None) -> tuple[subprocess.Popen, Path, float]:
        """Start ralm in the background (stderr to a file); returns (process, stderr file, start time)."""
        fd, name = tempfile.mkstemp(prefix="stderr-", dir=self.work)
        os.close(fd)
        errf = Path(name)
        p = subprocess.Popen(
            self.argv(args),
            stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=open(errf, "wb"),  # noqa: SIM115 - the child owns it
            stdin=subprocess.DEVNULL,
            env=child_env(),
            start_new_session=True,
        )
        return p, errf, time.perf_counter()

    def finish(self, p: subprocess.Popen, errf: Path, t0: float, args, timeout: int = TIMEOUT) -> Res:
        hang = False
        try:
            p.wait(timeout=max(1, timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            hang = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        return Res(
            [str(a) for a in args],
            None if hang else p.returncode,
            "",
            errf.read_text(encoding="utf-8", errors="replace"),
            time.perf_counter() - t0,
            hang,
        )

    def must(self, *args, timeout: int = 300) -> Res:
        """A set-up step that has to work."""
        r = self.ralm(*args, timeout=timeout)
        if r.rc != 0:
            raise RuntimeError(f"set-up failed: ralm {' '.join(r.argv)}\n{r.err[-3000:]}")
        return r

    def dir(self, name: str) -> Path:
        d = self.work / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    # -- recording
    def show(self, argv: list[str]) -> str:
        s = " ".join(shlex.quote(a) for a in argv)
        s = s.replace(" ".join(shlex.quote(a) for a in self.tiny_flags()), "$TINY")
        return "ralm " + s.replace(str(self.work), "$W")

    def record(
        self,
        family: str,
        name: str,
        res: Res,
        expected: str,
        *,
        rc=(2,),
        names=(),
        names_anywhere: bool = False,
        contains=(),
        one_line: bool = False,
        max_s: float | None = None,
        outs=(),
        left_before=(),
        problems=(),
        command: str | None = None,
        note: str = "",
    ) -> dict:
        """Compare a result with what the issue expects and add a row to the table."""
        probs = list(problems)
        if res.hang:
            probs.insert(0, f"hang (over {TIMEOUT} s)")
        elif res.rc not in rc:
            probs.insert(0, f"exit {res.rc}, expected {'/'.join(map(str, rc))}")
        if res.traceback:
            probs.append("traceback")
        for n in names:
            if n not in (res.out + res.err if names_anywhere else res.message):
                probs.append(f"{'output' if names_anywhere else 'message'} does not name {n!r}")
        for c in contains:
            if not re.search(c, res.err, re.IGNORECASE):
                probs.append(f"stderr lacks /{c}/")
        if one_line and len(res.lines) != 1:
            probs.append(f"{len(res.lines)} stderr lines, expected 1")
        if max_s is not None and res.seconds > max_s:
            probs.append(f"took {res.seconds:.1f} s, expected <= {max_s} s")
        left = [x for x in leftovers(*outs) if x not in set(left_before)]  # new ones only
        if left:
            probs.append("leftovers")
        row = {
            "family": family,
            "case": name,
            "command": command or self.show(res.argv),
            "expected": expected,
            "exit": res.rc,
            "seconds": round(res.seconds, 2),
            "message": printable(res.message.replace(str(self.work), "$W"))[:300],
            "stderr_lines": len(res.lines),
            "traceback": res.traceback,
            "hang": res.hang,
            "leftovers": [p.replace(str(self.work), "$W") for p in left],
            "ok": not probs,
            "problems": probs,
            "note": note,
        }
        if probs:
            row["stderr_tail"] = printable(res.err[-2500:].replace(str(self.work), "$W"))
            row["stdout_tail"] = printable(res.out[-1000:].replace(str(self.work), "$W"))
        self.cases.append(row)
        mark = "ok" if not probs else "FAIL: " + "; ".join(probs)
        print(
            f"[{family}] {name}: exit {res.rc}, {res.seconds:.1f} s -- {mark}\n    {row['message'][:200]}",
            flush=True,
        )
        return row

    def skip(self, family: str, name: str, why: str) -> None:
        self.skipped.append({"family": family, "case": name, "why": why})
        print(f"[{family}] {name}: SKIPPED ({why})", flush=True)

    # -- fixtures
    def tiny_flags(self) -> list[str]:
        return [
            "--reader",
            str(self.tiny),
            "--batch-size",
            "2",
            "--k",
            "3",
            "--refresh-every",
            "2",
            "--heldout",
            "3",
            "--warmup-steps",
            "1",
            "--device",
            "cpu",
            "--autocast",
            "off",
            "--quiet",
            "--set",
            "tensorboard=false",
            "--set",
            "encoder_max_length=32",
            "--set",
            "reader_max_length=96",
        ]

    def build_with_other_encoder(self, store: Path, out: Path) -> Res:
        """`ralm index build` of `store` onto `out` with encoder options other than the fixtures' index
        (cls pooling, a 128-d projection)."""
        return self.ralm(
            "index",
            "build",
            store,
            "--out",
            out,
            "--encoder",
            self.tiny,
            "--pooling",
            "cls",
            "--proj-dim",
            "128",
            "--quiet",
        )

    def pretrain_args(self, store: Path, out: Path, steps: int = 3, every: int = 1, keep: int = 3) -> list:
        return [
            "pretrain",
            "--docstore",
            store,
            "--out",
            out,
            "--steps",
            steps,
            "--checkpoint-every",
            every,
            "--keep-checkpoints",
            keep,
            *self.tiny_flags(),
        ]

    def setup(self) -> None:
        from ralm.samples import sample_path

        t = time.perf_counter()
        base = self.dir("base")
        self.tiny = base / "tiny"
        subprocess.run(
            [sys.executable, "-c", TINY_CODE, str(self.tiny)],
            check=True,
            env=child_env(),
            capture_output=True,
        )
        self.jsonl = write_jsonl(base / "articles.jsonl", articles())
        self.store = base / "store"
        self.must("corpus", "build", self.jsonl, "--out", self.store, "--chunk-size", "64", "--quiet")
        self.idx = base / "idx"
        self.must("index", "build", self.store, "--out", self.idx, "--encoder", self.tiny, "--quiet")
        self.enwiki = sample_path("enwiki")
        lee = sample_path("lee").read_text(encoding="utf-8").splitlines()
        (base / "lee-train.txt").write_text("\n".join(lee[:250]) + "\n", encoding="utf-8")
        self.held = base / "lee-held.txt"
        self.held.write_text("\n".join(lee[250:]) + "\n", encoding="utf-8")
        self.arpa = base / "lee.arpa"
        self.must("ngram", "train", base / "lee-train.txt", "--order", "3", "--out", self.arpa)
        (base / "lee-small.txt").write_text("\n".join(lee[:60]) + "\n", encoding="utf-8")
        self.small_arpa = base / "lee-small.arpa"
        self.must("ngram", "train", base / "lee-small.txt", "--order", "3", "--out", self.small_arpa)
        self.fuzz_held = base / "lee-held-20.txt"
        self.fuzz_held.write_text("\n".join(lee[250:270]) + "\n", encoding="utf-8")
        self.squad = squad_file(base / "squad.json")
        self.ref = self.dir("ref")
        self.must("corpus", "build", "--sample", "enwiki", "--out", self.ref / "ew", "--quiet")
        self.ref_fp = fingerprint(self.ref / "ew")
        self.must(
            "index", "build", self.ref / "ew", "--out", self.ref / "idx", "--encoder", self.tiny, "--quiet"
        )
        print(f"set-up: {time.perf_counter() - t:.1f} s", flush=True)

    def new_store(self, d: Path) -> Path:
        shutil.copytree(self.store, d / "store", symlinks=True)
        return d / "store"

    # ------------------------------------------------------------------------- damaged files
