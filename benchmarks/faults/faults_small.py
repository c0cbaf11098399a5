"""Fault cases of `faults.py`: two writers, small defects and the fuzzing run."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

from benchmarks.faults.faults_fuzz import make_fuzz_cases, run_fuzz
from benchmarks.faults.faults_util import Res, fingerprint, run_steps, wiki_excerpt


class WritersAndSmallCases:
    """Two writers into one output, small defects (closed pipe, invalid UTF-8, bad values), fuzzing."""

    def wait_lock(self, out: Path, pid: int, p: subprocess.Popen, timeout: float = 90) -> bool:
        lock = out.parent / f".{out.name}.lock"
        t = time.perf_counter()
        while time.perf_counter() - t < timeout and p.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                if json.loads(lock.read_text()).get("pid") == pid:
                    return True
            time.sleep(0.05)
        return False

    def second_writer(
        self, fam: str, name: str, args: list, holder: subprocess.Popen, locked: bool, inconclusive: str
    ) -> None:
        """Record `ralm ARGS` run while `holder` writes into the same output: exit 2 in one line naming
        the holder's PID. Unless the holder had taken the lock (`locked`) and is still running after
        it, the row is inconclusive (`inconclusive` says why)."""
        r = self.ralm(*args)
        alive = holder.poll() is None
        self.record(
            fam,
            name,
            r,
            "exit 2 naming the holder's PID",
            names=[f"PID {holder.pid}"],
            one_line=True,
            problems=[] if locked and alive else [f"inconclusive: {inconclusive}"],
        )

    def concurrency(self) -> None:
        fam = "two writers"
        # two corpus builds into one --out (the second also with --overwrite)
        d = self.dir("c-corpus")
        out = d / "ew"
        args = ["corpus", "build", "--sample", "enwiki", "--out", out, "--quiet"]
        p, errf, t0 = self.popen(*args)
        locked = self.wait_lock(out, p.pid, p)
        for extra in ([], ["--overwrite"]):
            name = "second corpus build into one --out" + (" (--overwrite)" if extra else "")
            self.second_writer(fam, name, [*args, *extra], p, locked, "the first build was not running")
        a = self.finish(p, errf, t0, args)
        probs = [] if fingerprint(out) == self.ref_fp else ["store differs from an uninterrupted build"]
        self.record(
            fam,
            "  ...the first corpus build",
            a,
            "exit 0, store == uninterrupted build",
            rc=(0,),
            outs=[out],
            problems=probs,
        )
        # two pretrains into one --out, then --overwrite onto the run while it trains
        d = self.dir("c-pretrain")
        run = d / "run"
        args = self.pretrain_args(self.store, run, steps=60, every=10)
        p, errf, t0 = self.popen(*args)
        locked = self.wait_lock(run, p.pid, p)
        self.second_writer(
            fam, "second pretrain into one --out", args, p, locked, "the first run was not running"
        )
        t = time.perf_counter()
        while (
            p.poll() is None
            and not (isinstance(s := run_steps(run), list) and s)
            and time.perf_counter() - t < 90
        ):
            time.sleep(0.1)
        self.second_writer(
            fam,
            "pretrain --overwrite onto a run still training",
            [*args, "--overwrite"],
            p,
            locked=True,  # the row asks only that the run still trains
            inconclusive="the first run had finished",
        )
        a = self.finish(p, errf, t0, args, timeout=300)
        steps = run_steps(run)
        self.record(
            fam,
            "  ...the live pretrain run",
            a,
            "exit 0, steps 1-60 logged once, no temp files in the run",
            rc=(0,),
            outs=[run],
            problems=[] if steps == list(range(1, 61)) else [f"metrics steps {steps}"],
        )

    # ------------------------------------------------------------------------- small defects
    def piped(self, args, mode: str) -> Res:
        """ralm ARGS | head -1 (mode "head") or | (a reader that exits at once; mode "closed")."""
        p, errf, t0 = self.popen(*args, stdout=subprocess.PIPE)
        if mode == "head":
            p.stdout.readline()
        p.stdout.close()
        return self.finish(p, errf, t0, args)

    def small(self) -> None:
        fam = "small defects"
        exp = "exit 0 or 141, no traceback, no error line"
        for args, mode, label in [
            (["corpus", "show", self.store, "0"], "head", "corpus show STORE 0 | head -1"),
            (
                ["corpus", "show", self.ref / "ew", "0", "--tokens"],
                "head",
                "(extra) corpus show EW 0 --tokens | head -1",
            ),
            (["corpus", "show", self.store, "0"], "closed", "(extra) corpus show STORE 0 | (closed pipe)"),
            (
                ["corpus", "info", "--json", self.ref / "ew"],
                "head",
                "(extra) corpus info --json EW | head -1",
            ),
            (
                ["search", self.idx, "king", "-k", "50", "--json"],
                "head",
                "(extra) search IDX king -k 50 --json | head -1",
            ),
            (
                ["ngram", "score", "--per-sentence", self.arpa, self.held],
                "head",
                "(extra) ngram score --per-sentence | head -1",
            ),
        ]:
            r = self.piped(args, mode)
            self.record(
                fam,
                label,
                r,
                exp,
                rc=(0, 141),
                command=self.show(r.argv) + (" | head -1" if mode == "head" else " | true"),
                problems=[] if not r.lines else [f"stderr: {r.message[:100]}"],
            )
        d = self.dir("s-utf8")
        bad = d / "bad.txt"
        bad.write_bytes(b"the first line\nthe second line\nthe third \xff\xfe line\nthe fourth line\n")
        r = self.ralm("ngram", "train", bad, "--out", d / "bad.arpa")
        self.record(
            fam,
            "ngram train, invalid UTF-8 on line 3",
            r,
            "exit 2, message names line 3",
            contains=[r"(line 3\b|:3\b)"],
            one_line=True,
            outs=[d / "bad.arpa"],
            problems=[] if not (d / "bad.arpa").exists() else ["bad.arpa written"],
        )
        r = self.ralm("ngram", "score", self.arpa, bad)
        self.record(
            fam,
            "(extra) ngram score, invalid UTF-8 on line 3",
            r,
            "exit 2, message names line 3",
            contains=[r"(line 3\b|:3\b)"],
            one_line=True,
        )
        base = self.ralm("--version")
        d = self.dir("s-lang")
        r = self.ralm("corpus", "build", "--sample", "enwiki", "--out", d / "ew", "--lang", "xx", "--quiet")
        limit = round(max(3.0, base.seconds + 2.0), 1)
        self.record(
            fam,
            "corpus build --lang xx",
            r,
            f"exit 2 before reading input (<= {limit} s)",
            names=["xx"],
            one_line=True,
            max_s=limit,
            outs=[d / "ew"],
            problems=[] if not (d / "ew").exists() else ["--out created"],
            note=f"`ralm --version` takes {base.seconds:.2f} s here",
        )
        for k in ("0", "-1"):
            r = self.ralm("search", self.idx, "king", "-k", k)
            self.record(
                fam,
                ("" if k == "0" else "(extra) ") + f"search IDX q -k {k}",
                r,
                f"exit 2 fast (<= {limit} s)",
                one_line=True,
                max_s=limit,
            )

    # ------------------------------------------------------------------------- fuzzing
    def fuzz(self, n: int) -> dict:
        base = {
            "wiki_xml": wiki_excerpt(self.enwiki),
            "jsonl": self.jsonl.read_bytes(),
            "arpa": self.small_arpa.read_bytes(),
            "held": self.fuzz_held,
            "squad": self.squad.read_bytes(),
            "tiny": self.tiny,
        }
        families = {}
        for fam in ("wiki", "jsonl", "arpa", "squad"):
            t = time.perf_counter()
            d = self.dir(f"fuzz-{fam}")
            cases = make_fuzz_cases(fam, n, self.seed, base, d)
            results = run_fuzz(cases, d)
            secs = time.perf_counter() - t
            c = {
                "cases": len(results),
                "exit_0": sum(r["rc"] == 0 for r in results),
                "exit_2": sum(r["rc"] == 2 for r in results),
                "exit_other": sum(r["rc"] not in (0, 2) and not r["hang"] for r in results),
                "tracebacks": sum(
                    bool(r["exception"] and not r["hang"]) or r["stderr_traceback"] for r in results
                ),
                "hangs": sum(r["hang"] for r in results),
                "leftovers": sum(bool(r["leftovers"]) for r in results),
                "seconds": round(secs, 1),
            }
            bad = [
                r
                for r in results
                if r["hang"]
                or r["rc"] not in (0, 2)
                or r["exception"]
                or r["stderr_traceback"]
                or r["leftovers"]
            ]
            families[fam] = {"counts": c, "failures": bad}
            print(f"[fuzz {fam}] {json.dumps(c)}", flush=True)
            for r in bad[:10]:
                print(
                    f"    #{r['i']} ({r['desc'][:120]}): exit {r['rc']} hang={r['hang']} {r['message'][:160]}"
                )
        return families
