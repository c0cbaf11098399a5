"""Corpus embedding throughput: `embed_docstore` vs the bare encoder forward, fp32 vs bf16.

Questions and targets (issue: dual encoders and corpus embedding):
- `embed_docstore` (inputs from DocStore token ids, length-sorted batches, memmap writes,
  resumable bookkeeping) reaches >= 0.9x the chunks/s of the bare forward pass: `AutoModel` +
  mean pooling on the SAME length-sorted padded batches, prebuilt outside the timer, under the
  same inference_mode and autocast;
- chunks/s in fp32 and under bf16 autocast (what `autocast="auto"` picks on a CPU with native bf16).

Setup: the English sample DocStore (`ralm corpus build --sample enwiki`, 5,409 chunks of <= 128
tokens; cached under /tmp/ralm-bench) and the bundled all-MiniLM-L6-v2 (mean pooling, max_length
128, batch 64). Subsets are every k-th chunk (`rank=0, world_size=k`: the sharded code path).

Interleaving: the machine is shared, so whole-pass timings swing by 30%. Each measurement is
one embed_docstore run whose `on_batch` hook runs the bare forward on the same batch right
after embed_docstore finished it (E0 B0 E1 B1 ...): both see the same load, batch by batch.
Embed time = the run's wall time minus the time spent in the hook (so it includes every fixed
cost of embed_docstore: fingerprint, tokenizer check, title tokenization, files); bare time =
the hook's forwards. The fp32 run's hook also runs the bare forward under bf16 autocast, which
gives the bf16/fp32 speedup on identical batches.
Run: python -m benchmarks.retrieval.embed_throughput [--every 6] [--reps 2] [--every-fp32 16] [--batch-size 64]
Writes benchmarks/results/embed_throughput.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import offline, sample_store, script_command, write_result

offline()
import numpy as np  # noqa: E402
import torch  # noqa: E402

from ralm.corpus.docstore import DocStore  # noqa: E402
from ralm.models.precision import autocast_context, autocast_dtype, cpu_has_native_bf16  # noqa: E402
from ralm.retrieval.embed import DocInputs, embed_docstore, plan_batches  # noqa: E402
from ralm.retrieval.encoders import DualEncoder, EncoderConfig  # noqa: E402

CACHE = Path("/tmp/ralm-bench/enwiki-store")


def bare_model():
    """A fresh AutoModel of the bundled MiniLM (no pooler), float32, eval mode."""
    from ralm.models.encoder import load_auto
    from ralm.models.names import default_backbone_path

    return load_auto(
        "AutoModel", default_backbone_path(), dtype=torch.float32, add_pooling_layer=False
    ).eval()


def bare_batches(encoder: DualEncoder, store: DocStore, every: int, batch_size: int) -> list[dict]:
    """The exact padded batches embed_docstore builds for ids 0::every (same plan, same inputs)."""
    ids = np.arange(0, len(store), every, dtype=np.int64)
    inputs = DocInputs(encoder.doc_tower, store, encoder.config.max_length, titles=True)
    return [inputs.batch(ids[pos]) for pos in plan_batches(inputs.lengths(ids), batch_size)]


def bare_forward(model, b: dict, ac) -> int:
    """AutoModel forward + mean pooling of one prebuilt batch, as numpy; rows done."""
    with torch.inference_mode():
        with autocast_context(torch.device("cpu"), ac):
            h = model(**b).last_hidden_state  # (B, T, H)
        m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
        v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        v.float().numpy()
    return len(v)


def paired_run(encoder, store, model, every: int, batch_size: int, autocast: str, bare: dict, tmp: Path):
    """One embed_docstore run over ids 0::every; after each of its batches, the bare forward of
    that batch under each autocast in `bare` ({name: dtype or None}). Returns seconds and rows."""
    batches = bare_batches(encoder, store, every, batch_size)
    spent = dict.fromkeys(bare, 0.0)
    rows = dict.fromkeys(bare, 0)
    k = [0]

    def hook(_rows_done: int) -> None:
        b = batches[k[0]]
        for name, ac in bare.items():
            t0 = time.perf_counter()
            rows[name] += bare_forward(model, b, ac)
            spent[name] += time.perf_counter() - t0
        k[0] += 1

    out = tmp / f"emb-{autocast}-{time.monotonic_ns()}.npy"
    t0 = time.perf_counter()
    emb = embed_docstore(
        encoder,
        store,
        out,
        batch_size=batch_size,
        dtype="float16",
        autocast=autocast,
        resume=False,
        rank=0,
        world_size=every,
        progress=False,
        on_batch=hook,
    )
    wall = time.perf_counter() - t0
    n = len(emb)
    del emb
    for p in tmp.iterdir():
        p.unlink()
    assert k[0] == len(batches) and all(r == n for r in rows.values())
    return {"embed": (wall - sum(spent.values()), n), **{f"bare_{k}": (spent[k], rows[k]) for k in bare}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--store", type=Path, default=CACHE)
    ap.add_argument("--every", type=int, default=6, help="the ratio runs embed every k-th chunk")
    ap.add_argument("--reps", type=int, default=2, help="number of ratio runs")
    ap.add_argument("--every-fp32", type=int, default=16, help="the fp32 run embeds every k-th chunk")
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()

    store = DocStore(sample_store(args.store, "--overwrite", "--quiet"))
    encoder = DualEncoder.from_pretrained(None, EncoderConfig(pooling="mean", max_length=128))
    model = bare_model()
    cpu = torch.device("cpu")
    ac = autocast_dtype(cpu, "auto", torch.float32)
    ac_name = "bf16" if ac is not None else "off"
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    log(f"store {len(store)} chunks; autocast auto -> {ac_name}; threads {torch.get_num_threads()}")

    with tempfile.TemporaryDirectory(prefix="ralm-embed-bench-") as td:
        tmp = Path(td)
        # warm-up (oneDNN kernels, page cache), untimed
        paired_run(encoder, store, model, 64, args.batch_size, ac_name, {"x": ac}, tmp)
        runs = []
        for _ in range(args.reps):
            runs.append(
                paired_run(encoder, store, model, args.every, args.batch_size, ac_name, {ac_name: ac}, tmp)
            )
            log(f"{ac_name}: " + ", ".join(f"{k} {r} chunks in {s:.1f}s" for k, (s, r) in runs[-1].items()))
        fp32 = paired_run(
            encoder, store, model, args.every_fp32, args.batch_size, "off", {"fp32": None, "bf16": ac}, tmp
        )
        log("fp32: " + ", ".join(f"{k} {r} chunks in {s:.1f}s" for k, (s, r) in fp32.items()))

    def cps(key: str, rs: list[dict]) -> float:
        return sum(r[key][1] for r in rs) / sum(r[key][0] for r in rs)

    metrics = {
        "embed_vs_bare_forward_ratio": round(cps("embed", runs) / cps(f"bare_{ac_name}", runs), 3),
        "embed_vs_bare_forward_ratio_worst_run": min(
            round(cps("embed", [r]) / cps(f"bare_{ac_name}", [r]), 3) for r in runs
        ),
        f"embed_chunks_per_s_{ac_name}": round(cps("embed", runs), 2),
        f"bare_forward_chunks_per_s_{ac_name}": round(cps(f"bare_{ac_name}", runs), 2),
        "ratio_subset_chunks": runs[0]["embed"][1],
        "embed_vs_bare_forward_ratio_fp32": round(cps("embed", [fp32]) / cps("bare_fp32", [fp32]), 3),
        "embed_chunks_per_s_fp32": round(cps("embed", [fp32]), 2),
        "bare_forward_chunks_per_s_fp32": round(cps("bare_fp32", [fp32]), 2),
        "bare_forward_chunks_per_s_bf16_fp32_subset": round(cps("bare_bf16", [fp32]), 2),
        "bf16_over_fp32_forward_speedup": round(cps("bare_bf16", [fp32]) / cps("bare_fp32", [fp32]), 2),
        "fp32_subset_chunks": fp32["embed"][1],
    }
    result = write_result(
        "embed_throughput",
        script_command(
            __file__,
            f"--every {args.every} --reps {args.reps} --every-fp32 {args.every_fp32} --batch-size {args.batch_size}",
        ),
        metrics,
        {"embed_vs_bare_forward_ratio": ">= 0.9"},
        setup={
            "store_chunks": len(store),
            "model": "bundled all-MiniLM-L6-v2, mean pooling, max_length 128",
            "batch_size": args.batch_size,
            "autocast_auto": ac_name,
            "cpu_native_bf16": cpu_has_native_bf16(),
            "torch_threads": torch.get_num_threads(),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        runs={
            ac_name: [
                {k: {"seconds": round(s, 2), "chunks": r} for k, (s, r) in run.items()} for run in runs
            ],
            "fp32": {k: {"seconds": round(s, 2), "chunks": r} for k, (s, r) in fp32.items()},
        },
    )
    print(result["metrics"])


if __name__ == "__main__":
    main()
