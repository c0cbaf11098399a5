"""Gradient caching in retriever training: step time against the plain step, and peak memory (issue 26, benchmark 4).

A DPR step of the bundled MiniLM dual encoder (unit vectors, temperature 0.05): B questions, their
positive chunks and one hard-negative chunk each (2B documents of up to 128 tokens, real NorQuAD-pool
text when --store is given, else the English Wikipedia sample), bf16 autocast where the CPU has it.
1. Time: the plain step (one forward/backward of the whole batch) and the cached step
   (`--grad-cache ROWS`: vectors without autograd, loss, then each mini-batch again with autograd)
   at the same batch, interleaved, median of --repeats steps each; ratio = cached / plain.
2. Memory: each configuration in a fresh process; peak RSS during two steps minus the RSS with
   the model loaded (what the step itself needs): batch 32 plain, batch 256 cached, and
   (--with-plain-256) batch 256 plain for reference.

Run: python -m benchmarks.retrieval.retriever_step [--store runs/b26/pool] [--batch 64] [--chunk 32]
Writes benchmarks/results/retriever_step.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import offline, script_argv, script_command, write_result

offline()


def rss_mib(field: str = "VmRSS") -> float:
    """This process's resident set size (VmRSS) or its peak (VmHWM) in MiB (Linux /proc). VmHWM,
    not getrusage's ru_maxrss: a process started by another keeps its parent's ru_maxrss when that
    is higher, which hid every child's own peak behind the timing run's."""
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: /proc/self/clear_refs, value 5); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def setup(store_path: str | None):
    import torch

    from ralm.corpus.docstore import DocStore
    from ralm.models.precision import autocast_dtype
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig
    from ralm.retrieval.passages import StorePassages

    if store_path is None:
        from ralm.corpus.build import BuildConfig, build_docstore
        from ralm.samples import sample_format, sample_path

        out = Path(os.environ.get("TMPDIR", "/tmp")) / "ralm-step-enwiki"
        store = (
            DocStore(out)
            if (out / "manifest.json").is_file()
            else build_docstore(
                [sample_path("enwiki")], out, BuildConfig(format=sample_format("enwiki")), progress=False
            )
        )
    else:
        store = DocStore(store_path)
    enc = DualEncoder.from_pretrained(None, EncoderConfig(normalize=True, score_scale=20.0)).train()
    amp = autocast_dtype(torch.device("cpu"), "auto", torch.float32)
    return enc, StorePassages(store), amp


def make_batch(enc, passages, b: int, seed: int):
    """B query rows (the first 16 tokens of a chunk) and 2B doc rows (other chunks)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.choice(len(passages), size=3 * b, replace=False)
    tpl, m = enc.query_tower.template, enc.config.max_length
    q_rows = [tpl.build(None, passages.token_ids(int(i))[:16].tolist(), m) for i in ids[:b]]
    d_rows = passages.doc_rows(enc, ids[b:])
    return q_rows, d_rows


def one_step(enc, opt, q_rows, d_rows, chunk: int, amp) -> float:
    from ralm.retrieval.training.contrastive import contrastive_step

    t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    contrastive_step(enc, q_rows, d_rows, range(len(q_rows)), chunk=chunk, amp=amp)
    opt.step()
    return time.perf_counter() - t


def memory_child(args) -> None:
    """Measure one configuration in this (fresh) process and print a JSON line."""
    import torch

    torch.set_num_threads(args.threads)
    enc, passages, amp = setup(args.store)
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-5)
    q_rows, d_rows = make_batch(enc, passages, args.batch, 0)
    one_step(enc, opt, q_rows[:2], d_rows[:4], 0, amp)  # optimiser state allocated before the baseline
    base = rss_mib()
    peak0 = rss_mib("VmHWM")
    reset = reset_peak()
    for s in range(2):
        q_rows, d_rows = make_batch(enc, passages, args.batch, s + 1)
        one_step(enc, opt, q_rows, d_rows, args.chunk, amp)
    peak = rss_mib("VmHWM")
    print(
        json.dumps(
            {
                "loaded_mib": base,
                "peak_mib": peak,
                "peak_before_mib": peak0,
                "peak_reset": reset,
                "step_mib": peak - base,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--store", default=None, help="DocStore whose chunks make the batches (default: enwiki sample)"
    )
    ap.add_argument("--batch", type=int, default=64, help="batch of the time comparison")
    ap.add_argument("--chunk", type=int, default=32, help="gradient-cache mini-batch rows")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--with-plain-256", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        memory_child(args)
        return
    import torch

    torch.set_num_threads(args.threads)
    enc, passages, amp = setup(args.store)
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-5)
    plain, cached = [], []
    for r in range(args.repeats + 1):
        q_rows, d_rows = make_batch(enc, passages, args.batch, 100 + r)
        tp = one_step(enc, opt, q_rows, d_rows, 0, amp)
        tc = one_step(enc, opt, q_rows, d_rows, args.chunk, amp)
        if r:  # the first pair warms up
            plain.append(tp)
            cached.append(tc)
        print(f"repeat {r}: plain {tp:.2f} s, cached {tc:.2f} s", file=sys.stderr)
    ratio = statistics.median(cached) / statistics.median(plain)
    ratios = sorted(c / p for c, p in zip(cached, plain, strict=True))

    def child(batch: int, chunk: int) -> dict:
        cmd = [
            *script_argv(__file__),
            "--child",
            "--batch",
            str(batch),
            "--chunk",
            str(chunk),
            "--threads",
            str(args.threads),
        ]
        if args.store:
            cmd += ["--store", args.store]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    mem = {"plain_b32": child(32, 0), f"cached_b256_chunk{args.chunk}": child(256, args.chunk)}
    if args.with_plain_256:
        mem["plain_b256"] = child(256, 0)
    metrics = {
        f"plain_step_s_b{args.batch}": round(statistics.median(plain), 3),
        f"cached_step_s_b{args.batch}": round(statistics.median(cached), 3),
        "cached_over_plain": round(ratio, 3),
        "cached_over_plain_pairwise_median": round(statistics.median(ratios), 3),
        **{f"{k}_step_mib": round(v["step_mib"], 1) for k, v in mem.items()},
        **{f"{k}_peak_mib": round(v["peak_mib"], 1) for k, v in mem.items()},
        "cached_b256_over_plain_b32_step_memory": round(
            mem[f"cached_b256_chunk{args.chunk}"]["step_mib"] / mem["plain_b32"]["step_mib"], 3
        ),
    }
    write_result(
        "retriever_step",
        script_command(__file__),
        metrics,
        {
            "cached_over_plain": "<= 1.25 (a cached step at most 1.25x the plain step at the same batch)",
            "cached_b256_over_plain_b32_step_memory": "batch 256 with caching fits where batch 32 fits (report)",
        },
        settings=vars(args),
        documents_per_step="2 x batch (one positive and one hard negative per question), up to 128 tokens",
    )
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
