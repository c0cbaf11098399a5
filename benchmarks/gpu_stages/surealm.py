"""Stage 3: SUREALM against the no-retrieval LM at 10x the CPU run's steps (`surealm_quality.py`).

The committed CPU run (`surealm_quality.py --groups 500 --steps 800 --eval-every 200`) trained
both MiniLM causal LMs 800 steps x 32 sentences (1.7 epochs of 14,947 training sentences) and found
SUREALM's test perplexity 1.1% below the baseline's; the paper reports 7.2%. Here: the same 500
conversations (the same sentences and splits, so the same data store), the same K=8, delta=1,
m=10, batch 32, learning rate and seed, at 8,000 steps (10x; 17 epochs; validation every 500 steps
and the checkpoint of lowest validation perplexity kept, as before). Batch and data stay the CPU
run's so that the number of steps is the one thing changed.

GPU time, estimated from the ops a step dispatches (profiled on the CPU), not measured on a card:
a step is launch-bound (~1,650 ops for the baseline, ~2,050 for SUREALM, plus SUREALM's batch of
retrieved keys and values, ~24 MB gathered on the CPU and copied to the GPU each step): ~9 ms and
~20 ms, so 8,000 steps take ~75 s and ~160 s. The two runs train at once (`--parallel`: each leaves
the GPU mostly idle), so training takes ~165 s with validation. Before it: the data store (172k
entries; MiniLM on the GPU, the offline top-K for 200k prefixes on FAISS's CPU flat index) ~35 s;
after it: the test table with the kNN-LM row ~15 s; process starts ~10 s. About 225 s in all,
hence BUDGET_S. A stopped run says how far each training run got and its step time.

prep writes the 500 conversations' sentences (JSONL, each sentence's split fixed, 2.1 MB), so the
GPU machine needs neither the chitchat-dataset package nor ../shared. --tiny: the first 4 turns of
6 conversations, 4 steps of 4 sentences, on the CPU; the runs train one after the other there
(--parallel's two extra processes would double its CPU time), otherwise the same code path.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpu_stages.context import StageContext, StageTimeout, run_progress

NAME = "surealm"
TITLE = "SUREALM vs the same MiniLM LM without retrieval, 8,000 steps x 32 (10x the CPU run), 500 chitchat conversations"
BUDGET_S = 250.0
MIN_S = 230.0
TARGETS = {"gpu_surealm_ppl_reduction": ">= 0.07"}

FULL = {"groups": 500, "turns": None, "steps": 8000, "batch": 32, "eval_every": 500, "knn_k": 64}
# tiny: the first 4 turns of 6 conversations (4 train, 1 valid, 1 test), ~100 data store entries
TINY = {"groups": 6, "turns": 4, "steps": 4, "batch": 4, "eval_every": 2, "knn_k": 8}
SENTENCES = "chitchat.jsonl"


def _settings(ctx: StageContext) -> dict:
    return TINY if ctx.tiny else FULL


def prep(ctx: StageContext) -> None:
    """The first `groups` chitchat conversations as JSONL sentences, each with the split the
    benchmark would draw for it (so the data store, its fingerprint included, is the CPU run's)."""
    from ralm.surealm.sentences import read_sentences

    s = _settings(ctx)
    sents = read_sentences(["chitchat"], limit_groups=s["groups"])
    ctx.inputs.mkdir(parents=True, exist_ok=True)
    turns: dict[str, int] = {}
    splits: dict[str, int] = {}
    with open(ctx.inputs / SENTENCES, "w", encoding="utf-8") as f:
        for text, group, split in zip(sents.texts, sents.groups, sents.splits, strict=True):
            turns[group] = turns.get(group, 0) + 1
            if s["turns"] is None or turns[group] <= s["turns"]:
                f.write(json.dumps({"text": text, "group": group, "split": split}, ensure_ascii=False) + "\n")
                splits[split] = splits.get(split, 0) + 1
    ctx.log(f"{NAME}: {sum(splits.values()):,} sentences of {s['groups']} conversations {splits}")


def run(ctx: StageContext) -> dict:
    s = _settings(ctx)
    work = ctx.work / "surealm"
    try:
        ctx.python(
            "surealm_quality.py",
            "--sentences", ctx.inputs / SENTENCES, "--groups", s["groups"], "--steps", s["steps"],
            "--batch-size", s["batch"], "--eval-every", s["eval_every"], "--knn-k", s["knn_k"],
            "--device", ctx.device, *([] if ctx.tiny else ["--parallel"]), "--work", work, "--name", "gpu_surealm",
        )  # fmt: skip
    except StageTimeout as exc:  # say how far it got, for the next budget
        built = (work / Path(SENTENCES).stem / "manifest.json").is_file()
        store = "data store built" if built else "data store unfinished"
        runs = "; ".join(run_progress(work / n) for n in ("surealm", "baseline"))
        raise StageTimeout(f"{exc} ({store}; {runs})") from None
    m = ctx.read_result("gpu_surealm")["metrics"]
    out = {"gpu_surealm_ppl_reduction": m["test_ppl_reduction_surealm_vs_baseline"]}
    out.update({f"gpu_surealm_{k}": v for k, v in m.items() if isinstance(v, int | float)})
    out.update(
        gpu_surealm_steps=s["steps"], gpu_surealm_batch_size=s["batch"], gpu_surealm_groups=s["groups"]
    )
    return out
