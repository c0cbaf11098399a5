"""ngram_speed.py against KenLM: loading and scoring an ARPA file, and `ralm ngram train` in a fresh
interpreter (seconds, the ARPA write's share, peak memory)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

from ralm.lm import NGramLM

_TRAIN_CHILD = """
import re, sys, time
from ralm.lm.ngram import NGramLM
real = NGramLM.to_arpa
def timed(self, path):
    t = time.perf_counter()
    real(self, path)
    print("write_seconds", time.perf_counter() - t)
NGramLM.to_arpa = timed
from ralm.cli import main
rc = main(sys.argv[1:])
with open("/proc/self/status") as f:
    print("peak_rss_kib", re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1))
sys.exit(rc)
"""


@contextlib.contextmanager
def quiet_stderr():
    """Silence file descriptor 2 (kenlm.Model draws a progress bar there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def train_command(text: str, out: str, order: int) -> dict:
    """`ralm ngram train TEXT --order N --out OUT` (default tokenizer) in a new interpreter:
    wall seconds of the whole command, seconds of ARPA writing in it, peak RSS, n-grams."""
    cmd = [sys.executable, "-c", _TRAIN_CHILD, "ngram", "train", text, "--order", str(order), "--out", out]
    t = time.perf_counter()
    proc = subprocess.run([*cmd, "--overwrite"], capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - t
    sizes = re.search(r"n-grams per order \[([\d, ]+)\]", proc.stdout).group(1)
    return {
        "seconds": seconds,
        "write_seconds": float(re.search(r"write_seconds (\S+)", proc.stdout).group(1)),
        "peak_rss": int(re.search(r"peak_rss_kib (\d+)", proc.stdout).group(1)) * 1024,
        "ngrams": sum(int(x) for x in sizes.split(",")),
    }


def faults_metrics(train: list[list[str]], held: list[list[str]], order: int = 5, reps: int = 5) -> dict:
    """Load + score vs KenLM, the ARPA write share of `ralm ngram train`, training memory."""
    import kenlm

    from ralm.cli import main as ralm_main

    m: dict[str, float] = {}
    lines = [" ".join(s) for s in held]
    with tempfile.TemporaryDirectory() as tmp:
        text, half = os.path.join(tmp, "train.txt"), os.path.join(tmp, "half.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.writelines(" ".join(s) + "\n" for s in train)
        with open(half, "w", encoding="utf-8") as f:
            f.writelines(" ".join(s) + "\n" for s in train[: len(train) // 2])
        path = os.path.join(tmp, f"mkn{order}.arpa")
        # ---- `ralm ngram train` as a command: time, ARPA writing in it, peak RSS (5 runs)
        runs = [train_command(text, path, order) for _ in range(5)]
        best = min(runs, key=lambda r: r["seconds"])
        halfrun = train_command(half, path + ".half", order)
        shares = [r["write_seconds"] / r["seconds"] for r in runs]
        m.update(
            train_command_seconds=best["seconds"],
            arpa_write_seconds=min(r["write_seconds"] for r in runs),
            arpa_write_share_of_train=float(np.median(shares)),
            arpa_write_share_of_train_all_runs=[round(x, 4) for x in shares],
            arpa_file_bytes=os.path.getsize(path),
            train_ngrams=best["ngrams"],
            train_peak_rss_bytes=max(r["peak_rss"] for r in runs),
            train_peak_rss_bytes_per_ngram=max(r["peak_rss"] for r in runs) / best["ngrams"],
            train_half_ngrams=halfrun["ngrams"],
            train_half_peak_rss_bytes=halfrun["peak_rss"],
            train_marginal_rss_bytes_per_ngram=(max(r["peak_rss"] for r in runs) - halfrun["peak_rss"])
            / (best["ngrams"] - halfrun["ngrams"]),
        )
        # ---- the same through the entry point in this process: no interpreter start or imports
        real_to_arpa = NGramLM.to_arpa
        spent: list[float] = []

        def timed_to_arpa(self, p):
            t = time.perf_counter()
            real_to_arpa(self, p)
            spent.append(time.perf_counter() - t)

        inproc = []
        NGramLM.to_arpa = timed_to_arpa
        try:
            for _ in range(5):
                t = time.perf_counter()
                with contextlib.redirect_stdout(None):
                    ralm_main(["ngram", "train", text, "--order", str(order), "--out", path, "--overwrite"])
                inproc.append((time.perf_counter() - t, spent[-1]))
        finally:
            NGramLM.to_arpa = real_to_arpa
        total, write = min(t for t, _ in inproc), min(w for _, w in inproc)
        m.update(
            train_in_process_seconds=total,
            arpa_write_seconds_in_process=write,
            arpa_write_share_of_train_in_process=float(np.median([w / t for t, w in inproc])),
            arpa_write_share_of_train_in_process_all_runs=[round(w / t, 4) for t, w in inproc],
        )
        print(
            f"ngram train (order {order}): {best['seconds']:.2f}s as a command, ARPA writing "
            f"{m['arpa_write_seconds']:.2f}s (median share {m['arpa_write_share_of_train']:.2f}); in this process "
            f"{total:.2f}s, writing {write:.2f}s (median share {m['arpa_write_share_of_train_in_process']:.2f}); "
            f"peak RSS {best['peak_rss'] / 2**20:.0f} MiB for {best['ngrams']} n-grams "
            f"({m['train_peak_rss_bytes_per_ngram']:.0f} B/n-gram, "
            f"{m['train_marginal_rss_bytes_per_ngram']:.0f} B per further n-gram)"
        )
        # ---- load + score: ralm vs the kenlm module, interleaved, best of reps
        ours_s, theirs_s, ours_cpu, theirs_cpu = [], [], [], []
        for _ in range(reps):
            t, c = time.perf_counter(), time.process_time()
            lm = NGramLM.from_arpa(path)
            ours = lm.score_sentences(held)
            ours_s.append(time.perf_counter() - t)
            ours_cpu.append(time.process_time() - c)
            del lm
            with quiet_stderr():
                t, c = time.perf_counter(), time.process_time()
                km = kenlm.Model(path)
                theirs = np.array([km.score(x) for x in lines])
                theirs_s.append(time.perf_counter() - t)
                theirs_cpu.append(time.process_time() - c)
            del km
        m.update(
            ralm_load_score_seconds=min(ours_s),
            kenlm_load_score_seconds=min(theirs_s),
            ralm_score_with_load_vs_kenlm_ratio=min(ours_s) / min(theirs_s),
            ralm_score_with_load_vs_kenlm_cpu_ratio=min(ours_cpu) / min(theirs_cpu),
            max_abs_sentence_log10_diff_vs_kenlm_order5=float(np.abs(ours - theirs).max()),
        )
        print(
            f"load + score: ralm {min(ours_s):.2f}s, kenlm {min(theirs_s):.2f}s "
            f"(ratio {m['ralm_score_with_load_vs_kenlm_ratio']:.2f})"
        )
    return m
