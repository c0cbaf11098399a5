"""REALM on real data from queries that carry signal (issue 64, part 5).

Issue 45 found that on the English Wikipedia sample the retriever's top chunk is the reader's best
no more often than chance: most masked spans occur in no retrievable chunk, a query masks several
spans under one marginal, and the fixed score scale keeps p(z|x) flat. The records world
(benchmarks/worlds/realm_world.py) shows the same code learning when every query carries signal.
This script measures the signal per query on the real corpus and raises it with what the world
showed matters, then trains:

  share              the share of the corpus's salient spans whose tokens occur in another chunk
                     (`ralm.realm.retrievable`), by kind, and of today's held-out spans
  diag0 NAME         the step-0 diagnosis of an arm (answers in candidates, the span ratio under
                     p(z|x), Spearman, and `query_signal`: spans whose chunks differ in holding the
                     span, the reader's preference for the holding chunk in nats, its rank)
  arm NAME           `ralm pretrain` for --steps (checkpoints at each quarter: the budget curve),
                     the closed-book run of the same masking and steps, evaluate-mlm at step 0, at
                     each checkpoint and at the end, the end diagnosis
  report             benchmarks/results/realm_signal.json

Arms (over benchmarks/data/realm_causal_en.toml, issue 45's English recipe: SmolLM2-135M reader,
MiniLM towers, 3 chunks + null, fixed scale, lr_retriever 1e-5):

  today              issue 45's recipe, for the signal measures at step 0
  retrievable        today's recipe on queries whose masked span occurs in another chunk
  signal             retrievable, one span a query under the per-span marginal, the learned score
                     scale at lr_scale 0.1, hybrid candidates (BM25 + dense, 3 + null)
  signal_reader      signal with the reader of the records world (SmolLM2 after REALM training there:
                     a reader that already copies a span from a given chunk)

The runs live in --work (default runs/b64) beside the corpus `realm_causal.py corpus` builds there.
Run: python benchmarks/realm/realm_signal.py STAGE [NAME] [--work runs/b64] [--steps 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from common import log, ralm, script_command, write_result  # noqa: E402
from realm import realm_learns as rl  # noqa: E402

RETRIEVABLE = {"masking.retrievable_only": True}
SIGNAL = {
    **RETRIEVABLE,
    "masking.max_spans": 1,
    "marginal": "span",
    "score_scale": "learned",
    "lr_scale": 0.1,
    "candidates": "hybrid",
    "candidate_depth": 32,
}
WORLD_READER = ROOT / "runs" / "worlds" / "realm" / "arms" / "today" / "reader"
# every arm starts from the corpus as the MiniLM document tower embeds it: today's run embeds it once
# (12,284 chunks, ~10 min on one core) and the others start from that index version 0
INDEX0 = {"initial_index": "{work}/en-today/index/v00000"}
ARMS: dict[str, dict[str, object]] = {
    "today": {},
    "retrievable": {**RETRIEVABLE, **INDEX0},
    "signal": {**SIGNAL, **INDEX0},
    "signal_reader": {**SIGNAL, **INDEX0, "reader": str(WORLD_READER)},
}


def masking_of(settings: dict) -> dict:
    """The arm's masking settings: its closed-book run masks (and holds out) the same way."""
    return {k: v for k, v in settings.items() if k.startswith("masking.")}


def closed_name(settings: dict) -> str:
    m = masking_of(settings)
    return "closed" + "".join(f"-{k.split('.', 1)[1]}{v}" for k, v in sorted(m.items())).replace("True", "")


# ----------------------------------------------------------------------------- stages
def share(work: Path) -> dict:
    """The retrievable share of the corpus's salient spans (all, by kind) and of today's held-out spans."""
    import numpy as np

    from ralm.corpus.docstore import SALIENT_SOURCES, DocStore, RaggedArray
    from ralm.realm.config import PretrainConfig
    from ralm.realm.data import split_ids
    from ralm.realm.retrievable import retrievable_spans

    out_file = work / "retrievable_share.json"
    if out_file.is_file():
        return rl.read_json(out_file)
    store = DocStore(rl.store_of(work, "en"))
    t0 = time.time()
    flags = retrievable_spans(store, store, same_corpus=True)
    seconds = time.time() - t0
    sal = RaggedArray(store.root / "tokens" / "salient", "int32", 3)
    kinds = np.asarray(sal.data).reshape(-1, 3)[:, 2]
    by_kind = {
        SALIENT_SOURCES[k]: {"spans": int((kinds == k).sum()), "share": float(flags[kinds == k].mean())}
        for k in np.unique(kinds).tolist()
    }
    cfg = PretrainConfig.from_toml(rl.CONFIGS["en"], docstore=str(store.root), out=str(work / "tmp"))
    _, held = split_ids(cfg, store)
    owner = np.repeat(np.arange(len(sal)), np.diff(sal.offsets))
    allowed = np.isin(kinds, cfg.masking.source_codes)
    held_any = [bool(flags[(owner == c) & allowed].any()) for c in held.tolist()]
    res = {
        "spans": int(len(flags)),
        "retrievable": int(flags.sum()),
        "share": float(flags.mean()),
        "by_kind": by_kind,
        "heldout_chunks": int(len(held)),
        "heldout_with_a_retrievable_span": float(np.mean(held_any)),
        "seconds": seconds,
    }
    out_file.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    log(f"retrievable share: {res['share']:.3f} of {res['spans']} spans ({seconds:.1f} s)")
    return res


def diag0(work: Path, name: str, steps: int) -> Path:
    """The step-0 diagnosis of arm `name` (its run folder made by `ralm pretrain --stop-after 1`)."""
    if name != "today" and "initial_index" in ARMS[name]:
        diag0(work, "today", steps)
    run = rl.train(work, "en", name, "realm", steps, ARMS[name], stop_after=1)  # the run folder, its split
    rl.diagnose(run, None, initial=True)
    return run / "diagnose_initial.json"


def arm(work: Path, name: str, steps: int) -> None:
    settings = ARMS[name]
    if "initial_index" in settings:
        diag0(work, "today", steps)  # its run embeds the corpus once for every arm
    if name == "signal_reader" and not (WORLD_READER / "config.json").is_file():
        world_run = WORLD_READER.parent / "run"
        ralm("export-reader", world_run, WORLD_READER, "--overwrite")
    run = rl.train(work, "en", name, "realm", steps, settings)
    closed = rl.train(work, "en", closed_name(settings), "mlm", steps, masking_of(settings))
    rl.evaluate(run, closed, initial=True)
    rl.diagnose(run, closed, initial=True)
    for ck in sorted((run / "checkpoints").glob("step-*")):
        step = int(ck.name.split("-")[1])
        out = run / f"eval_mlm_step{step}.json"
        cclosed = closed / "checkpoints" / ck.name
        if step != steps and cclosed.is_dir() and not out.is_file():
            rl.evaluate_pair_at(run, closed, ck, cclosed, out)
    rl.evaluate(run, closed)
    rl.diagnose(run, closed, initial=False)


# ----------------------------------------------------------------------------- report
def report(work: Path) -> None:
    res: dict = {"share": share(work) if (work / "retrievable_share.json").is_file() else None, "arms": {}}
    metrics: dict = {}
    if res["share"]:
        metrics["en_retrievable_span_fraction"] = res["share"]["share"]
        metrics["en_heldout_with_retrievable_span"] = res["share"]["heldout_with_a_retrievable_span"]
    for name in ARMS:
        run = work / f"en-{name}"
        entry: dict = {"settings": ARMS[name]}
        for tag, f in (("diag0", "diagnose_initial.json"), ("diag_end", "diagnose.json")):
            if (run / f).is_file():
                d = rl.read_json(run / f)
                entry[tag] = {
                    "answers_in_candidates": d.get("answers_in_candidates"),
                    "score_utility": d.get("score_utility"),
                    "query_signal": d.get("query_signal"),
                    "ratio_content_run_k": d["ratios"]["content"]["run_k"]["run"],
                }
        curve = {}
        for f in sorted(run.glob("eval_mlm*.json")):
            ev = rl.read_json(f)
            step = 0 if "initial" in f.name else int(ev.get("step") or 0)
            curve[step] = ev.get("ratios")
        entry["curve"] = curve
        res["arms"][name] = entry
    write_result(
        "realm_signal",
        script_command(__file__, "STAGE NAME --work runs/b64 --steps 100"),
        metrics,
        {
            "en_answers_top3_gain": ">= 0.05",
            "en_ratio_gain_from_training": ">= 0.05",
            "en_retrievable_span_fraction": "reported",
            "en_budget_points": ">= 3",
            "gpu_hours_for_issue45_targets": "reported",
        },
        **res,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("share", "diag0", "arm", "report"))
    ap.add_argument("name", nargs="?", default="today", choices=list(ARMS))
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b64")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--eval-n", type=int, help=f"held-out spans scored (default {rl.EVAL_N})")
    args = ap.parse_args(argv)
    if args.eval_n:
        rl.OVERRIDES["eval_n"] = args.eval_n
    if not (args.work / rl.STORES["en"] / "manifest.json").is_file():
        ralm(
            "corpus",
            "build",
            "--sample",
            "enwiki",
            "--out",
            args.work / rl.STORES["en"],
            "--chunk-size",
            64,
            "--quiet",
        )
    if args.stage == "share":
        share(args.work)
    elif args.stage == "diag0":
        diag0(args.work, args.name, args.steps)
    elif args.stage == "arm":
        arm(args.work, args.name, args.steps)
    else:
        report(args.work)


if __name__ == "__main__":
    main()
