"""Open QA end to end on NorQuAD-open: the best trained dense retriever against Norwegian BM25 (issue 26, benchmark 3).

`ralm finetune open-qa` (REALM §3.2 / ORQA: top-5 chunks, span marginalisation, the query tower
tuned, the index fixed; BM25 frozen) with the bundled MiniLM reader on --max-train NorQuAD train
questions (seeded sample), one epoch, seeds 1-3; the best state by EM on the first 100
validation questions; scored on all 472 test questions: EM, F1 and answer recall@1/5.
Retrievers, over the NorQuAD pool (retriever_train.py's --work):
  dense   the trained retriever that retriever_train.py fused (best validation recall@5)
  bm25    Norwegian BM25 (stopwords + Snowball stemmer), the same index directory's BM25

Run: python -m benchmarks.downstream.openqa_norquad [--work runs/b26] [--max-train 1000] [--seeds 1,2,3]
Writes benchmarks/results/openqa_norquad.json (a rerun keeps finished seeds: `ralm finetune` resumes).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import RESULTS, ROOT, log, offline, ralm, script_command, write_result

offline()
from benchmarks.retrieval.retriever_train import NORQUAD  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b26")
    ap.add_argument("--max-train", type=int, default=1000)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--dev-questions", type=int, default=100)
    ap.add_argument("--rows", default="dense,bm25")
    args = ap.parse_args()
    work = args.work
    t0 = time.perf_counter()
    fused = json.loads((RESULTS / "retriever_train.json").read_text())["fusion"]["dense"]
    encoder = {"dpr:gc128": work / "dpr-gc128" / "encoder", "realm": work / "realm-towers"}.get(
        fused, work / fused / "encoder"
    )
    index = work / f"index-{fused.replace(':', '_')}"
    if not (index / "retrieval.json").is_file():
        ralm("index", "build", work / "pool", "--out", index, "--encoder", encoder, "--lang", "nb", "--quiet")
    dev = work / f"validation-{args.dev_questions}.jsonl"
    if not dev.is_file():
        lines = (work / "validation.jsonl").read_text(encoding="utf-8").splitlines()[: args.dev_questions]
        dev.write_text("\n".join(lines) + "\n", encoding="utf-8")
    metrics: dict[str, float] = {}
    per_seed: dict[str, list] = {}
    for name in args.rows.split(","):
        out = work / "openqa" / name
        t = time.perf_counter()
        if not (out / "results.json").is_file():
            ralm(
                "finetune",
                "open-qa",
                "--train",
                NORQUAD / "training_dataset_flattened.reconstructed.json",
                "--dev",
                dev,
                "--test",
                NORQUAD / "test_dataset_flattened.json",
                "--out",
                out,
                "--index",
                index,
                "--retriever",
                name,
                "--seeds",
                args.seeds,
                "--max-train",
                args.max_train,
                "--epochs",
                args.epochs,
                "-k",
                5,
                "--lang",
                "nb",
                "--no-save",
                "--no-progress",
                "--name",
                name,
                "--dataset",
                "norquad-open",
            )
        res = json.loads((out / "results.json").read_text())
        for m, st in res["summary"]["test"].items():
            metrics[f"{name}/{m}"] = round(st["mean"], 2)
            metrics[f"{name}/{m}_std"] = round(st["std"], 2)
        metrics[f"{name}/seconds_per_seed"] = round(res["seconds"] / len(res["seeds"]), 1)
        per_seed[name] = [
            {"seed": s["seed"], **s["test"], "train_examples": s.get("train_examples")} for s in res["seeds"]
        ]
        log(f"{name}: {time.perf_counter() - t:.0f} s")
    full = 3788 / args.max_train
    write_result(
        "openqa_norquad",
        script_command(__file__),
        metrics,
        {"table": "report (issue 26: the table is the deliverable; no target)"},
        per_seed=per_seed,
        dense_retriever=fused,
        index=str(index),
        estimated_seconds_per_seed_on_the_whole_train_split={
            n: round(metrics[f"{n}/seconds_per_seed"] * full) for n in per_seed
        },
        seconds=round(time.perf_counter() - t0, 1),
        settings={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    )


if __name__ == "__main__":
    main()
