"""Peak RSS per rank of REALM pre-training, index sharded over the ranks vs replicated, at 1M chunks.

`ralm pretrain` under torchrun, 2 gloo processes, the same run twice: `index_sharding = "none"`
(every rank loads the whole initial index, as after a replicated refresh) and `"rank"` (rank r
loads shard r). Each rank reports its own high-water mark (VmHWM) when `ralm` returns.

Setup, sized for a 2-core box (the index must dominate the trainer for sharding to show):
* corpus: 1,000,000 chunks of <= 16 tokens (41,667 synthetic articles of 24 nine-word sentences
  over a 48-word vocabulary), `ralm corpus build --chunk-size 16`;
* model: a random 1-layer BERT, hidden 384 (MiniLM's width, so 384-d vectors), on the MiniLM
  vocabulary, as reader and both towers;
* index: the initial index (`initial_index`, no refresh: embedding 1M chunks takes hours on
  2 cores, see realm_scale.json) made of synthetic 384-d float16 vectors (5,000 centres + noise),
  flat: 1,465 MiB whole, 732 MiB per shard; the live towers re-score its candidates as always.
* 5 steps, batch 4 (2 per rank), k 3, uniform masking (the synthetic text has no salient spans),
  one checkpoint at the end.

Run: python -m benchmarks.realm.sharded_pretrain_rss [--chunks 1000000]
Writes benchmarks/results/sharded_pretrain_rss.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ralm, script_command, tiny_bert, write_result
from benchmarks.realm.realm_scale import MEMORY_RUN
from benchmarks.retrieval.sharded_index import vectors

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "her",
    "it",
    "an",
    "are",
    "were",
    "which",
    "this",
    "be",
    "or",
    "has",
    "had",
    "its",
    "first",
    "new",
    "one",
    "after",
    "city",
    "river",
    "king",
    "war",
    "team",
    "film",
    "music",
    "state",
    "world",
    "house",
    "school",
    "time",
    "year",
    "park",
    "game",
    "album",
    "church",
    "station",
    "band",
    "party",
]

WRAPPER = """import os, sys
from ralm.cli import main
code = main(sys.argv[2:])
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
open(f"{sys.argv[1]}.rank{os.environ.get('RANK', '0')}", "w").write(str(hwm))
sys.exit(code)
"""


def corpus(work: Path, chunks: int) -> Path:
    store = work / f"store-{chunks}"
    if (store / "manifest.json").exists():
        return store
    rng = np.random.default_rng(0)
    src = work / "corpus.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for a in range(-(-chunks // 24)):
            text = " ".join(" ".join(rng.choice(WORDS, 9)).capitalize() + "." for _ in range(24))
            f.write(json.dumps({"title": f"Article {a}", "text": text}) + "\n")
    flags = ["--chunk-size", 16, "--min-chunk-tokens", 0, "--no-auto-annotate", "--no-dates", "--quiet"]
    ralm("corpus", "build", src, "--out", store, *flags, say=None)
    return store


def reader(work: Path) -> Path:
    """A random one-layer BERT of MiniLM's width (384) as the reader, made once."""
    return tiny_bert(
        work / "reader",
        hidden_size=384,
        num_hidden_layers=1,
        num_attention_heads=6,
        intermediate_size=512,
        max_position_embeddings=128,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/ralm-bench-shrss"))
    args = ap.parse_args()

    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.index.dense import DenseIndex
    from ralm.retrieval.index.shard_build import build_sharded
    from ralm.train.distributed import torchrun_command

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    store = DocStore(corpus(work, args.chunks))
    n = len(store)
    rdir = reader(work)
    print(f"corpus {n:,} chunks, reader ready ({time.perf_counter() - t_all:.0f} s)", flush=True)
    x = vectors(work, n, 384)
    fp = {"docstore_fingerprint": store.fingerprint, "encoder_fingerprint": "synthetic"}
    whole, shards = work / "init-whole", work / "init-2-shards"
    if not (whole / "index.json").exists():
        DenseIndex.build(x, kind="flat", **fp).save(whole)
    if not (shards / "shards.json").exists():
        build_sharded(x, shards, 2, kind="flat", **fp)
    del x
    (work / "wrapper.py").write_text(WRAPPER)
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("WORLD_SIZE", None)
    src_dir = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_dir, env.get("PYTHONPATH", "")) if p)
    metrics: dict = {"chunks": n, "dim": 384, "index_mib_whole": n * 384 * 4 / 2**20, "steps": args.steps}
    losses = {}
    for mode, init in (("replicated", whole), ("sharded", shards)):
        run = work / f"run-{mode}"
        shutil.rmtree(run, ignore_errors=True)
        argv = [
            "pretrain",
            "--docstore",
            str(store.root),
            "--out",
            str(run),
            "--reader",
            str(rdir),
            "--steps",
            str(args.steps),
            "--batch-size",
            "4",
            "--k",
            "3",
            *MEMORY_RUN,
            "--device",
            "cpu",
            "--autocast",
            "off",
            "--warmup-steps",
            "1",
            "--set",
            "encoder_max_length=16",
            "--set",
            "reader_max_length=48",
            "--set",
            "tensorboard=false",
            "--set",
            "masking.strategy=uniform",
            "--set",
            f"initial_index={init}",
            "--set",
            f"index_sharding={'rank' if mode == 'sharded' else 'none'}",
            "--quiet",
        ]
        cmd = torchrun_command(2, argv)
        cmd = [*cmd[: cmd.index("-m", 3)], str(work / "wrapper.py"), str(work / f"hwm-{mode}"), *argv]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if res.returncode:
            raise SystemExit(res.stderr[-3000:])
        hwm = [int((work / f"hwm-{mode}.rank{r}").read_text()) / 1024 for r in (0, 1)]
        metrics[f"peak_rss_mib_rank0_{mode}"], metrics[f"peak_rss_mib_rank1_{mode}"] = hwm
        metrics[f"peak_rss_mib_per_rank_{mode}"] = max(hwm)
        metrics[f"seconds_{mode}"] = time.perf_counter() - t0
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        losses[mode] = [r["loss"] for r in rows if "loss" in r]
        print(f"{mode}: peak RSS per rank {hwm} MiB ({time.perf_counter() - t_all:.0f} s)", flush=True)
    metrics["peak_rss_ratio_sharded_vs_replicated"] = (
        metrics["peak_rss_mib_per_rank_sharded"] / metrics["peak_rss_mib_per_rank_replicated"]
    )
    metrics["max_abs_loss_difference"] = float(
        np.max(np.abs(np.subtract(losses["sharded"], losses["replicated"])))
    )
    metrics["total_seconds"] = time.perf_counter() - t_all
    res = write_result(
        "sharded_pretrain_rss",
        script_command(__file__, f"--chunks {args.chunks}" if args.chunks != 1_000_000 else ""),
        metrics,
        {"peak_rss_ratio_sharded_vs_replicated": "<= 0.6", "max_abs_loss_difference": "float noise"},
        losses=losses,
    )
    print(json.dumps(res["metrics"], indent=2))


if __name__ == "__main__":
    main()
