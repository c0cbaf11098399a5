"""REALM in the records world (issue 64): does the retriever learn from the reader's signal alone?

The world (`ralm.worlds.records`): 300 invented record codes with 4 one-fact documents each (1,200
documents), queries that restate a fact in other words with its invented value as the masked span,
60 records held out (their 720 queries never trained on). The run is `ralm pretrain` with today's
English recipe of issue 45 (configs/realm_world.toml: SmolLM2-135M reader, MiniLM towers, 3
retrieved documents + the null one, fixed score scale, lr_retriever 1e-5), and each lever of issue
45 as an arm of its own. Every arm is measured on held-out records (`ralm.realm.inference.gold`):

- at step 0 and every checkpoint: dense recall@1 / @3 of the right document (a fresh index of the
  checkpoint's document tower), mean p(right | x) and p(null | x) over the run's k documents;
- at the end (and at step 0 for today's recipe): the span's content NLL with retrieval, closed-book
  and given the right document (the oracle), and for the arms in GENERATE its exact match under each.

Stages (each skipped when its output exists under --work; training resumes after an interruption):

  prepare            the world's files and DocStores (and the control world's)
  arm NAME           `ralm pretrain` for --steps with the arm's settings (ARMS), then the evaluations
  signal NAME        the diagnosis (`ralm.realm.inference.diagnose`) of the arm at step 0 and at the end on 60
                     held-out queries: the same per-query signal measures as on the real corpus
                     (benchmarks/realm/realm_signal.py), for comparison
  report             benchmarks/results/world_realm.json and .md from the arms evaluated

The control arm `shuffled` trains on the control world (`shuffle_values`): the same queries and gold
documents, but the documents' values shuffled, so the reader's signal no longer points to the gold
document; a rise of its recall would come from something other than the reader.

Run: python -m benchmarks.worlds.realm_world STAGE [NAME] [--work runs/worlds/realm] [--steps 60]
Environment: OMP_NUM_THREADS (default 1) torch threads a job.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from benchmarks.common import ROOT, log, offline, ralm, read_json, script_command, write_result

offline()

CONFIG = ROOT / "configs" / "realm_world.toml"
EVAL_N = 120  # held-out queries of the full evaluation (reader rows and generation), step 0 and end
CURVE_N = 240  # held-out queries of the retrieval curve (towers only), every checkpoint (of 720)
GENERATE = ("today", "closed", "shuffled")  # arms whose full evaluation generates the spans (exact match)

# today's recipe and each lever of issue 45 (settings over configs/realm_world.toml)
ARMS: dict[str, dict[str, object]] = {
    "today": {},
    "scale": {"score_scale": "learned"},
    "scale_fast": {"score_scale": "learned", "lr_scale": 0.1},
    "null": {"null_doc": "logit"},
    "hybrid": {"candidates": "hybrid", "k": 8, "candidate_depth": 32},
    "topm": {"reader_backprop_top": 1},
    "query": {"retriever_train": "query"},
    "lr": {"lr_retriever": 1e-4},
    "distill": {"retriever_loss": "distill"},
    "answer": {"retriever_loss": "answer"},
    "shuffled": {},  # the control: the same recipe on the control world
    "closed": {"mode": "mlm"},  # BRENT's comparison: the same reader, the same steps, closed-book
}
WHY = {
    "today": "issue 45's English recipe",
    "scale": "scores times exp(s), s learned at lr_scale 1e-2",
    "scale_fast": "the learned scale at lr_scale 0.1",
    "null": "the null document scores the mean of the chunks' plus a learned b",
    "hybrid": "BM25 + dense candidates fused, 7 chunks + null",
    "topm": "the reader trained through the top 1 + null",
    "query": "the query tower alone learns (document tower and index frozen)",
    "lr": "both towers at 1e-4",
    "distill": "Atlas's perplexity distillation for the towers",
    "answer": "the query tower learns where the span is, not from the reader",
    "shuffled": "control: the documents' values shuffled, the reader's signal cut from the gold",
    "closed": "the reader alone on the same queries and steps (closed-book continued pre-training)",
}


def write_json(p: Path, obj) -> None:
    from ralm.atomic import write_json_atomic

    write_json_atomic(p, obj)


# ----------------------------------------------------------------------------- the world
def prepare(work: Path) -> None:
    """Write both worlds (the control under work/shuffled) and build their DocStores."""
    from ralm.worlds.records import RecordsWorldConfig, write_records_world

    for sub, shuffle in (("", False), ("shuffled", True)):
        root = work / sub if sub else work
        if not (root / "data" / "world.json").is_file():
            write_records_world(root / "data", RecordsWorldConfig(shuffle_values=shuffle))
        names = ("corpus",) if shuffle else ("corpus", "queries", "heldout")
        for name in names:
            if not (root / name / "manifest.json").is_file():
                ralm(
                    "corpus",
                    "build",
                    root / "data" / f"{name}.jsonl",
                    "--out",
                    root / name,
                    "--chunk-size",
                    64,
                    "--no-auto-annotate",
                    "--no-dates",
                    "--overwrite",
                    "--quiet",
                )


def stores(work: Path, arm: str) -> dict[str, Path]:
    """The DocStores an arm reads: the control arm's corpus is the control world's."""
    corpus = work / "shuffled" / "corpus" if arm == "shuffled" else work / "corpus"
    return {"corpus": corpus, "queries": work / "queries", "heldout": work / "heldout"}


# ----------------------------------------------------------------------------- training
def train(work: Path, arm: str, steps: int) -> Path:
    run = work / "arms" / arm / "run"
    s = stores(work, arm)
    every = max(1, steps // 6)
    sets = {
        "docstore": s["corpus"],
        "queries": s["queries"],
        "steps": steps,
        "warmup_steps": max(1, steps // 10),
        "checkpoint_every": every,
        "keep_checkpoints": steps // every + 1,
        "refresh_every": 2 * every,
        **ARMS[arm],
    }
    args = [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    t0 = time.time()
    ralm("pretrain", CONFIG, "--out", run, "--resume", *args)
    marker = run.parent / "train_seconds.json"
    if not marker.is_file():
        write_json(marker, {"seconds": time.time() - t0})
    return run


def checkpoints(run: Path) -> list[Path]:
    return sorted((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))


# ----------------------------------------------------------------------------- evaluation
def eval_ids(n: int) -> tuple:
    """(curve ids, full ids): a seeded choice of CURVE_N of the n held-out queries, spread over every
    record, attribute and wording, and a seeded choice of EVAL_N of those, both sorted."""
    import numpy as np

    curve = np.sort(np.random.default_rng([64, 1]).choice(n, size=min(CURVE_N, n), replace=False))
    full = np.sort(np.random.default_rng([64, 2]).choice(curve, size=min(EVAL_N, len(curve)), replace=False))
    return curve, full


def evaluate(work: Path, arm: str, run: Path) -> dict:
    """The retrieval curve over the checkpoints and the full evaluation at step 0 and the end."""
    import torch

    from ralm.corpus.docstore import DocStore
    from ralm.realm.inference.gold import evaluate_gold, gold_chunks, read_gold
    from ralm.realm.training.run import load_run

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out_file = run.parent / "eval.json"
    done = read_json(out_file) if out_file.is_file() else {"curve": {}, "full": {}}
    s = stores(work, arm)
    held = DocStore(s["heldout"])
    gold = None
    points = [(0, None), *[(int(c.name.split("-")[1]), c) for c in checkpoints(run)]]
    last = points[-1][0]
    curve_ids, full_ids = eval_ids(len(held))
    retrieval = ARMS[arm].get("mode", "realm") == "realm"
    for step, ckpt in points:
        # the full evaluation at the end, and at step 0 for today's recipe (the other arms start from
        # the same reader: their step-0 closed-book and oracle rows are today's)
        want_full = (step == last or (step == 0 and arm == "today")) and str(step) not in done["full"]
        if (str(step) in done["curve"] or not retrieval) and not want_full:
            continue
        loaded = load_run(run, initial=True) if ckpt is None else load_run(run, checkpoint=ckpt)
        if ckpt is not None and retrieval:  # a fresh index of this checkpoint's document tower
            loaded.refresher.refresh(loaded.model.encoder, step)
        if gold is None:
            gold = gold_chunks(held, loaded.store, read_gold(work / "data" / "gold.jsonl"))
        if retrieval and str(step) not in done["curve"]:
            t0 = time.time()
            res = evaluate_gold(loaded, held, gold, ids=curve_ids, reader=False)
            done["curve"][str(step)] = {**res["summary"], "seconds": time.time() - t0}
            log(f"{arm} step {step}: {done['curve'][str(step)]}")
        if want_full:
            t0 = time.time()
            res = evaluate_gold(loaded, held, gold, ids=full_ids, generate=arm in GENERATE)
            done["full"][str(step)] = {**res["summary"], "seconds": time.time() - t0}
            write_json(run.parent / f"records_step{step}.json", res["records"])
            log(f"{arm} step {step} (full): {done['full'][str(step)]}")
        write_json(out_file, done)
        del loaded
    return done


def signal(work: Path, name: str) -> None:
    """The diagnosis's summary of arm `name` at step 0 and at its last checkpoint (arms/NAME/signal.json)."""
    import torch

    from ralm.corpus.docstore import DocStore
    from ralm.realm.inference.diagnose import diagnose
    from ralm.realm.inference.gold import with_queries
    from ralm.realm.training.run import load_run

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    run = work / "arms" / name / "run"
    out = run.parent / "signal.json"
    done = read_json(out) if out.is_file() else {}
    held = DocStore(stores(work, name)["heldout"])
    _, full_ids = eval_ids(len(held))
    for tag, ckpt in (("0", None), ("end", checkpoints(run)[-1])):
        if tag in done:
            continue
        loaded = load_run(run, initial=True) if ckpt is None else load_run(run, checkpoint=ckpt)
        if ckpt is not None:
            loaded.refresher.refresh(loaded.model.encoder, int(loaded.state["step"]))
        summary = diagnose(
            with_queries(loaded, held), None, ids=full_ids[:60], depth=8, reader_depth=8
        ).summary
        done[tag] = {
            k: summary[k] for k in ("answers_in_candidates", "score_utility", "query_signal", "null_mass")
        }
        write_json(out, done)
        log(f"{name} signal {tag}: {done[tag]['query_signal']} {done[tag]['score_utility']}")


def arm(work: Path, name: str, steps: int, prune: bool = False) -> None:
    if name not in ARMS:
        raise SystemExit(f"arm {name!r}: choose one of {', '.join(ARMS)}")
    prepare(work)
    run = train(work, name, steps)
    evaluate(work, name, run)
    if prune:
        for c in checkpoints(run)[:-1]:  # the curve is measured: keep the last checkpoint only
            shutil.rmtree(c)


# ----------------------------------------------------------------------------- report
def queries_to(curve: dict, level: float, batch: int) -> int | None:
    """Training queries (steps x batch) at the first checkpoint whose recall@1 reaches `level`."""
    for step in sorted(curve, key=int):
        if curve[step]["recall@1"] >= level:
            return int(step) * batch
    return None


def report(work: Path) -> None:
    arms = {}
    for name in ARMS:
        f = work / "arms" / name / "eval.json"
        if not f.is_file():
            continue
        ev = read_json(f)
        curve, full = ev["curve"], ev["full"]
        secs = work / "arms" / name / "train_seconds.json"
        if not curve:  # the closed-book run: the reader rows only
            arms[name] = {"what": WHY[name], "settings": ARMS[name], "full": full}
            continue
        end = max(curve, key=int)
        arms[name] = {
            "what": WHY[name],
            "settings": ARMS[name],
            "steps": int(end),
            "curve": curve,
            "full": full,
            "r1_step0": curve["0"]["recall@1"],
            "r1_end": curve[end]["recall@1"],
            "r3_end": curve[end]["recall@3"],
            "p_right_end": curve[end]["p_right"],
            "queries_to_r1_0_9": queries_to(curve, 0.9, 4),
            "train_seconds": read_json(secs)["seconds"] if secs.is_file() else None,
        }
        sig = work / "arms" / name / "run" / "signal.json"
        if sig.is_file():
            arms[name]["signal"] = read_json(sig)
    if "today" not in arms:
        raise SystemExit(f"{work}: no evaluated `today` arm yet; run the arm stage first")
    today = arms["today"]
    end_full = today["full"][max(today["full"], key=int)]
    metrics = {
        "realm_world_r1_step0": today["r1_step0"],
        "realm_world_r1_end": today["r1_end"],
        "realm_world_queries_to_r1_0_9": today["queries_to_r1_0_9"],
        "realm_world_p_right_end": today["p_right_end"],
        "realm_world_em_retrieval": end_full.get("em_retrieval"),
        "realm_world_em_closed_book": end_full.get("em_closed_book"),
        "realm_world_em_oracle": end_full.get("em_oracle"),
    }
    scaled = [arms[a]["p_right_end"] for a in ("scale", "scale_fast") if a in arms]
    if scaled:
        metrics["realm_world_p_right_learned_scale"] = max(scaled)
    if "shuffled" in arms:
        metrics["realm_world_cut_signal_r1_gain"] = arms["shuffled"]["r1_end"] - arms["shuffled"]["r1_step0"]
    if "closed" in arms:
        closed = arms["closed"]["full"]
        copy_closed = closed[max(closed, key=int)]["em_oracle"]
        metrics["brent_world_copy_realm"] = end_full["em_oracle"]
        metrics["brent_world_copy_closed_book"] = copy_closed
        metrics["brent_world_copy_step0"] = today["full"]["0"]["em_oracle"]
        metrics["brent_world_copy_gain_points"] = 100 * (end_full["em_oracle"] - copy_closed)
    targets = {
        "realm_world_r1_step0": "<= 0.5",
        "realm_world_r1_end": ">= 0.9",
        "realm_world_queries_to_r1_0_9": "<= 200",
        "realm_world_p_right_learned_scale": ">= 0.9",
        "realm_world_em_retrieval": ">= 0.9",
        "realm_world_em_closed_book": "<= 0.1",
        "realm_world_cut_signal_r1_gain": "<= 0.05",
        "brent_world_copy_gain_points": ">= 20",
    }
    write_result(
        "world_realm",
        script_command(__file__, "arm NAME --steps STEPS; then report"),
        metrics,
        targets,
        world=read_json(work / "data" / "world.json") | {"heldout_codes": "(60 codes)"},
        eval_queries={"curve": CURVE_N, "full": EVAL_N},
        arms=arms,
    )
    log(json.dumps(metrics, indent=1))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("prepare", "arm", "signal", "report"))
    ap.add_argument("name", nargs="?")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "worlds" / "realm")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument(
        "--prune", action="store_true", help="arm: delete all but the last checkpoint once evaluated"
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.stage == "prepare":
        prepare(args.work)
    elif args.stage == "arm":
        arm(args.work, args.name or "today", args.steps, args.prune)
    elif args.stage == "signal":
        signal(args.work, args.name or "today")
    else:
        report(args.work)


if __name__ == "__main__":
    main()
