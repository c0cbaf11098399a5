"""Corpus ingestion: throughput, flat memory on a 50x dump, and chunking vs the raw tokenizer.

Questions and targets (issue 2):
- ingest throughput (articles/s, chunks/s) of `ralm corpus build` on the gensim English sample
  and on a dump 50x its size made by repeating its pages;
- peak RSS of the build process must stay flat: rss(50x) / rss(1x) <= 1.25;
- chunking throughput >= 0.8x the raw fast-tokenizer throughput on the same article texts
  (both measured in this one process, same batches, best of 3).

Each build runs in its own child process; its peak RSS is that child's ru_maxrss.
Run: python -m benchmarks.corpus.ingest [--scale 50] [--skip-big]
Writes benchmarks/results/ingest.json.
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import script_command, write_result


def make_repeated_dump(src: Path, dst: Path, times: int) -> None:
    """A valid dump with the pages of `src` repeated `times` times (titles and ids made unique)."""
    xml = bz2.decompress(src.read_bytes()).decode("utf-8")
    head_end = xml.index("<page>")
    tail_start = xml.rindex("</page>") + len("</page>")
    head, pages, tail = xml[:head_end], xml[head_end:tail_start], xml[tail_start:]
    with bz2.open(dst, "wt", encoding="utf-8", compresslevel=1) as f:
        f.write(head)
        for r in range(times):
            if r == 0:
                f.write(pages)
                continue
            copy = re.sub(
                r"<title>(.*?)</title>", lambda m, r=r: f"<title>{m.group(1)} (copy {r})</title>", pages
            )
            copy = re.sub(
                r"<id>(\d+)</id>", lambda m, r=r: f"<id>{int(m.group(1)) + r * 10_000_000}</id>", copy
            )
            f.write(copy)
        f.write(tail)


def timed_build(src: Path, out: Path, workers: int = 1) -> dict:
    """Run `ralm corpus build` in a child process; wall time, peak RSS and counts."""
    code = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "r = subprocess.run(sys.argv[1:])\n"
        "print(json.dumps({'rc': r.returncode, 'seconds': time.perf_counter() - t,"
        " 'max_rss_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n"
    )
    cmd = [
        sys.executable,
        "-c",
        code,
        sys.executable,
        "-m",
        "ralm",
        "corpus",
        "build",
        str(src),
        "--out",
        str(out),
        "--overwrite",
        "--quiet",
        "--workers",
        str(workers),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    stats = json.loads(res.stdout.strip().splitlines()[-1])
    if stats["rc"] != 0:
        raise RuntimeError(res.stderr)
    manifest = json.loads((out / "manifest.json").read_text())
    stats.update(articles=manifest["counts"]["articles"], chunks=manifest["counts"]["chunks"])
    return stats


def chunk_vs_tokenizer(src: Path, repeats: int = 5) -> dict:
    """Chunker throughput vs the bare fast tokenizer on the same texts and batches (chars/s)."""
    from tokenizers import Tokenizer

    from ralm.corpus.chunking import Chunker
    from ralm.corpus.readers import iter_articles
    from ralm.models.tokenizers import load_tokenizer

    articles = list(iter_articles(src, "wiki"))
    tok = load_tokenizer(None)
    chunker = Chunker(tok, 128)
    raw = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    raw.no_padding()
    raw.no_truncation()
    batches = [articles[i : i + 64] for i in range(0, len(articles), 64)]
    n_chars = sum(len(a.text) for a in articles)

    def bare():
        for b in batches:
            raw.encode_batch([a.text for a in b], add_special_tokens=False)

    def bare_read():  # the same call with its output read out (ids and offsets): what any user pays
        for b in batches:
            for enc in raw.encode_batch([a.text for a in b], add_special_tokens=False):
                _ = enc.ids, enc.offsets

    def ours():
        for b in batches:
            chunker.chunk(b)

    best = dict.fromkeys(("tokenizer", "tokenizer_read", "chunker"), float("inf"))
    for _ in range(repeats):  # interleaved, best of `repeats` for each
        for name, fn in (("tokenizer", bare), ("tokenizer_read", bare_read), ("chunker", ours)):
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return {
        "chars": n_chars,
        "tokenizer_chars_per_s": n_chars / best["tokenizer"],
        "tokenizer_with_outputs_chars_per_s": n_chars / best["tokenizer_read"],
        "chunker_chars_per_s": n_chars / best["chunker"],
        "chunking_vs_tokenizer_ratio": best["tokenizer"] / best["chunker"],
        "chunking_vs_tokenizer_with_outputs_ratio": best["tokenizer_read"] / best["chunker"],
    }


def build_metrics(prefix: str, build: dict, seconds_digits: int) -> dict[str, float]:
    """A timed_build's counts, seconds (to `seconds_digits`), rates and peak RSS as PREFIX_* metrics."""
    return {
        f"{prefix}_articles": build["articles"],
        f"{prefix}_chunks": build["chunks"],
        f"{prefix}_seconds": round(build["seconds"], seconds_digits),
        f"{prefix}_articles_per_s": round(build["articles"] / build["seconds"], 2),
        f"{prefix}_chunks_per_s": round(build["chunks"] / build["seconds"], 1),
        f"{prefix}_peak_rss_mb": round(build["max_rss_kb"] / 1024, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--scale", type=int, default=50, help="repeat the sample this many times for the big dump"
    )
    ap.add_argument("--skip-big", action="store_true", help="only the 1x sample (quick)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    from ralm.samples import sample_path

    src = sample_path("enwiki")
    metrics: dict[str, float] = {}
    work = Path(tempfile.mkdtemp(prefix="ralm-bench-"))
    try:
        small = timed_build(src, work / "small")
        metrics.update(build_metrics("sample", small, seconds_digits=2))
        print(json.dumps(small), flush=True)
        if not args.skip_big:
            big_src = work / f"enwiki-x{args.scale}.xml.bz2"
            make_repeated_dump(src, big_src, args.scale)
            big = timed_build(big_src, work / "big")
            print(json.dumps(big), flush=True)
            big2 = timed_build(big_src, work / "big2", workers=2)
            print(json.dumps(big2), flush=True)
            metrics.update(
                big_scale=args.scale,
                big_dump_mb=round(big_src.stat().st_size / 2**20, 1),
                **build_metrics("big", big, seconds_digits=1),
                rss_ratio_big_vs_sample=round(big["max_rss_kb"] / small["max_rss_kb"], 3),
                big_workers2_seconds=round(big2["seconds"], 1),
                big_workers2_speedup=round(big["seconds"] / big2["seconds"], 3),
            )
        metrics["load_average_1min_before_chunking"] = round(os.getloadavg()[0], 2)
        cvt = chunk_vs_tokenizer(src)
        metrics.update({k: round(v, 3) if isinstance(v, float) else v for k, v in cvt.items()})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = script_command(__file__, f"--scale {args.scale}" if args.scale != 50 else "")
    command += " --skip-big" if args.skip_big else ""
    result = write_result(
        "ingest",
        command,
        metrics,
        {"rss_ratio_big_vs_sample": "<= 1.25", "chunking_vs_tokenizer_ratio": ">= 0.8"},
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
