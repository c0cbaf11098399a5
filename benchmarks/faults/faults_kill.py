"""Fault cases of `faults.py`: a full disk and kill -9."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time

from benchmarks.faults.faults_util import fingerprint, leftovers, run_steps


def kill_note(killed: bool, secs: float, at_kill: str) -> str:
    """A kill row's note: when the kill came (or that the command had finished first), then
    `at_kill` (what the kill left)."""
    return (f"killed at {secs:.1f} s" if killed else "finished before the kill") + f"; {at_kill}"


class DiskAndKillCases:
    """A full disk and kill -9 at a seeded moment, then the same command."""

    def disk_full(self) -> None:
        fam = "disk full"
        mnt = self.dir("full")
        if os.geteuid() != 0 or shutil.which("mount") is None:
            self.skip(fam, "corpus build onto a 2 MiB tmpfs", "not root: cannot mount a small tmpfs")
            return
        m = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True
        )
        if m.returncode != 0:
            self.skip(fam, "corpus build onto a 2 MiB tmpfs", f"mount failed: {m.stderr.strip()}")
            return
        try:
            store = mnt / "store"
            self.must("corpus", "build", self.jsonl, "--out", store, "--chunk-size", "64", "--quiet")
            fp = fingerprint(store)

            def used() -> int:
                st = os.statvfs(mnt)
                return (st.f_blocks - st.f_bfree) * st.f_frsize

            before, entries = used(), sorted(p.name for p in mnt.iterdir())
            r = self.ralm("corpus", "build", "--sample", "enwiki", "--out", store, "--overwrite", "--quiet")
            v = self.ralm("corpus", "verify", store)
            probs = []
            if fingerprint(store) != fp or v.rc != 0:
                probs.append(f"old store changed (verify exit {v.rc})")
            grown = used() - before
            if grown > 8192:
                probs.append(f"{grown} bytes still used on the full disk")
            new = sorted(set(p.name for p in mnt.iterdir()) - set(entries) - {".store.lock"})
            if new:
                probs.append(f"new entries {new}")
            self.record(
                fam,
                "corpus build --overwrite onto a full disk",
                r,
                "exit 2, 'no space left', nothing written, old store intact",
                contains=["no space left"],
                one_line=True,
                outs=[store],
                problems=probs,
            )
            before, entries = used(), sorted(p.name for p in mnt.iterdir())
            r = self.ralm("corpus", "build", "--sample", "enwiki", "--out", mnt / "new", "--quiet")
            probs = [f"{mnt / 'new'} exists"] if (mnt / "new").exists() else []
            grown = used() - before
            if grown > 8192:
                probs.append(f"{grown} bytes still used on the full disk")
            self.record(
                fam,
                "corpus build of a new store onto a full disk",
                r,
                "exit 2, 'no space left', nothing written",
                contains=["no space left"],
                one_line=True,
                outs=[mnt / "new"],
                problems=probs,
            )
            # extras: other writers onto the full disk
            before = used()
            r = self.ralm(
                "index", "build", self.ref / "ew", "--out", mnt / "idx", "--encoder", self.tiny, "--quiet"
            )
            grown = used() - before
            self.record(
                fam,
                "(extra) index build onto a full disk",
                r,
                "exit 2, one line about the disk, no traceback",
                contains=["space"],
                one_line=True,
                outs=[mnt / "idx"],
                note=f"{grown} bytes left on the disk afterwards (a resumable partial build may stay)",
            )
            before = used()
            r = self.ralm("ngram", "train", self.work / "base" / "lee-train.txt", "--out", mnt / "lee.arpa")
            grown = used() - before
            self.record(
                fam,
                "(extra) ngram train onto a full disk",
                r,
                "exit 2, one line about the disk, nothing written",
                contains=["space"],
                one_line=True,
                outs=[mnt / "lee.arpa"],
                problems=[] if grown <= 8192 else [f"{grown} bytes still used on the full disk"],
            )
        finally:
            if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True)

    # ------------------------------------------------------------------------- kill -9
    def kill_after(self, args, delay: float, wait_for=None) -> tuple[bool, float]:
        """Start ralm, wait for `wait_for()` (if given), sleep `delay`, kill -9; (killed?, seconds)."""
        p, errf, t0 = self.popen(*args)
        if wait_for is not None:
            while p.poll() is None and not wait_for() and time.perf_counter() - t0 < 90:
                time.sleep(0.05)
        time.sleep(delay)
        killed = p.poll() is None
        if killed:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        with contextlib.suppress(ProcessLookupError):  # anything it started
            os.killpg(p.pid, signal.SIGKILL)
        return killed, time.perf_counter() - t0

    def refused_by_verify(self, kind: str, out) -> list[str]:
        """[] where `ralm KIND verify OUT` accepts OUT, else the problem 'KIND verify exit N'."""
        v = self.ralm(kind, "verify", out)
        return [] if v.rc == 0 else [f"{kind} verify exit {v.rc}"]

    def kill9(self) -> None:
        fam = "kill -9"
        # corpus build of the enwiki sample, killed after 0.5-5 s; the last trial after the temp dir appears
        for trial in range(3):
            d = self.dir(f"k-corpus-{trial}")
            out = d / "ew"
            args = ["corpus", "build", "--sample", "enwiki", "--out", out, "--quiet"]
            delay = round(self.rng.uniform(0.5, 5.0), 2)
            wait = (
                (lambda d=d: any(p.name.startswith(".ew.tmp-") for p in d.iterdir())) if trial == 2 else None
            )
            killed, secs = self.kill_after(args, delay, wait)
            tmp_left = [p.name for p in d.iterdir() if p.name.startswith(".ew.tmp-")]
            again = args + (["--overwrite"] if out.exists() else [])
            r = self.ralm(*again)
            probs = []
            if fingerprint(out) != self.ref_fp:
                probs.append("store differs from an uninterrupted build")
            probs += self.refused_by_verify("corpus", out)
            when = f"{'after the temp dir appeared + ' if wait else ''}{delay} s"
            note = kill_note(killed, secs, f"temp dirs at the kill: {tmp_left or 'none'}")
            self.record(
                fam,
                f"corpus build killed ({when}), rerun",
                r,
                "exit 0"
                + (", a note about the removed temp dir" if tmp_left else "")
                + ", store == uninterrupted build",
                rc=(0,),
                contains=["removed"] if tmp_left else [],
                outs=[out],
                problems=probs,
                note=note,
            )
        # index build of the enwiki store (tiny encoder), killed 0.2-3 s after its directory appears
        for trial in range(3):
            d = self.dir(f"k-index-{trial}")
            out = d / "idx"
            args = ["index", "build", self.ref / "ew", "--out", out, "--encoder", self.tiny, "--quiet"]
            delay = round(self.rng.uniform(0.1, 3.0), 2)
            killed, secs = self.kill_after(
                args, delay, wait_for=lambda out=out: (out / "embeddings.partial.npy").exists()
            )
            state = (
                "finished"
                if (out / "retrieval.json").exists()
                else "unfinished"
                if out.exists()
                else "absent"
            )
            note = kill_note(killed, secs, f"index {state} at the kill")
            listing = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
            note += f" ({', '.join(listing) or 'empty'})"
            if state == "unfinished":  # other encoder options, tried on a copy of the killed build
                other = d / "other" / "idx"
                shutil.copytree(out, other, symlinks=True)
                recorded = (other / "build.json").is_file() or (
                    other / "encoder" / "ralm_encoder.json"
                ).is_file()
                before = leftovers(other)  # the killed build's resumable files stay
                r = self.build_with_other_encoder(self.ref / "ew", other)
                self.record(
                    fam,
                    f"index build killed ({delay} s into embedding), rerun with other encoder options",
                    r,
                    "exit 2, one line naming the option that differs"
                    if recorded
                    else "nothing recorded yet (no build.json): a fresh build, exit 0",
                    rc=(2,) if recorded else (0,),
                    names=["pooling"] if recorded else [],
                    one_line=recorded,
                    outs=[other],
                    left_before=before,
                    note=note,
                )
            again = args + (["--overwrite"] if state == "finished" else [])
            r = self.ralm(*again)
            probs = []
            a, b = out / "embeddings.npy", self.ref / "idx" / "embeddings.npy"
            if not a.is_file() or a.read_bytes() != b.read_bytes():
                probs.append("embeddings.npy differs from an uninterrupted build")
            probs += self.refused_by_verify("index", out)
            self.record(
                fam,
                f"index build killed ({delay} s into embedding), rerun",
                r,
                "exit 0 (resumes), embeddings == uninterrupted build, verify ok",
                rc=(0,),
                outs=[out],
                problems=probs,
                note=note,
            )
        # pretrain killed 0.2-4 s after metrics.jsonl appears, then --resume
        for trial in range(2):
            d = self.dir(f"k-pretrain-{trial}")
            run = d / "run"
            args = self.pretrain_args(self.store, run, steps=20, every=2)
            delay = round(self.rng.uniform(0.2, 3.0), 2)
            killed, secs = self.kill_after(
                args,
                delay,
                wait_for=lambda run=run: bool(run_steps(run)) and not isinstance(run_steps(run), str),
            )
            before = run_steps(run) if run.exists() else "no run dir"
            r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
            steps = run_steps(run)
            probs = [] if steps == list(range(1, 21)) else [f"metrics steps {steps}"]
            if not (run / "checkpoints" / "step-0000020").is_dir():
                probs.append("no final checkpoint step-0000020")
            note = kill_note(killed, secs, f"steps logged at the kill: {before}")
            self.record(
                fam,
                f"pretrain killed ({delay} s after its first step), --resume",
                r,
                "exit 0, steps 1-20 logged once, final checkpoint",
                rc=(0,),
                outs=[run],
                problems=probs,
                note=note,
            )

    # ------------------------------------------------------------------------- two writers
