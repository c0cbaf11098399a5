"""REALM Table 2's retriever claim on open-domain NorQuAD: recall@5 and EM for four retrievers.

"NorQuAD-open over its own pool": every distinct NorQuAD context (train, validation and test) is a
document of a DocStore chunked to --chunk-size MiniLM tokens; questions come without their
passage. The retrievers, on the same questions and corpus:
  * BM25 (bm25s, Lucene scoring), frozen;
  * untuned MiniLM (both towers the bundled encoder);
  * ICT: MiniLM after --ict-steps of the Inverse Cloze Task on the pool (REALM/ORQA's warm start);
  * the query and doc towers after REALM pre-training (the downstream benchmark's REALM run, on
    the English Wikipedia sample: a different language and corpus than NorQuAD).
For each: zero-shot answer recall@5 on the test questions (REALM Table 2's right column), then
open-QA fine-tuning (`ralm finetune open-qa`: MiniLM reader, top-5, query tower tuned, index
fixed; BM25 frozen) on --max-train training questions and EM/F1/recall@5 on --max-eval test ones.

Run: python benchmarks/openqa_retrievers.py [--max-train 600] [--max-eval 300]
Writes benchmarks/results/openqa_retrievers.json; reads ../shared/data/norquad by path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "norquad" / "all"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def ralm(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ralm", *args], check=True, env=ENV)


def build_pool(work: Path, chunk_size: int) -> Path:
    """DocStore of the distinct NorQuAD contexts (all splits)."""
    from ralm.tasks.datasets import load_task_data

    store = work / "pool"
    if (store / "manifest.json").is_file():
        return store
    data = load_task_data(DATA, "extractive-qa")
    seen: dict[str, None] = {}
    for split in ("train", "dev", "test"):
        for ex in data.splits[split]:
            seen.setdefault(ex.context, None)
    src = work / "pool.jsonl"
    src.write_text(
        "\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in seen) + "\n", encoding="utf-8"
    )
    ralm("corpus", "build", str(src), "--out", str(store), "--chunk-size", str(chunk_size), "--lang", "nb")
    return store


def zero_shot_recall(index: Path, kind: str, questions, k: int = 5) -> float:
    from ralm.retrieval.evaluate import has_answer
    from ralm.retrieval.search import load_retriever

    store, ret = load_retriever(index, kind=kind)
    top = ret.search_text([q.question for q in questions], k).ids
    hits = [
        any(has_answer(store[int(i)]["text"], q.answers, "nb") for i in row)
        for q, row in zip(questions, top, strict=True)
    ]
    return 100.0 * sum(hits) / len(hits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "openqa"))
    ap.add_argument("--realm-run", default=str(ROOT / "runs" / "downstream" / "realm"))
    ap.add_argument("--chunk-size", type=int, default=128)
    ap.add_argument("--ict-steps", type=int, default=300)
    ap.add_argument("--max-train", type=int, default=600)
    ap.add_argument("--max-eval", type=int, default=300)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("-k", type=int, default=5)
    args = ap.parse_args()
    from ralm.tasks.datasets import load_task_data

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    pool = build_pool(work, args.chunk_size)
    idx = {"bm25": work / "index-minilm", "minilm": work / "index-minilm"}
    if not (idx["minilm"] / "retrieval.json").is_file():
        ralm("index", "build", str(pool), "--out", str(idx["minilm"]), "--bm25")
    if not (work / "ict" / "encoder").exists():
        ralm("ict", str(pool), "--out", str(work / "ict"), "--steps", str(args.ict_steps), "--quiet")
    idx["ict"] = work / "index-ict"
    if not (idx["ict"] / "retrieval.json").is_file():
        ralm(
            "index", "build", str(pool), "--out", str(idx["ict"]), "--encoder", str(work / "ict" / "encoder")
        )
    realm_enc = work / "realm-retriever"
    if not (realm_enc / "ralm_encoder.json").is_file():
        ralm(
            "export-reader",
            args.realm_run,
            str(work / "realm-reader"),
            "--retriever-out",
            str(realm_enc),
            "--overwrite",
        )
    idx["realm"] = work / "index-realm"
    if not (idx["realm"] / "retrieval.json").is_file():
        ralm("index", "build", str(pool), "--out", str(idx["realm"]), "--encoder", str(realm_enc))

    test = load_task_data(DATA, "open-qa").splits["test"][: args.max_eval]
    metrics: dict[str, float] = {}
    for name, index in idx.items():
        kind = "bm25" if name == "bm25" else "dense"
        metrics[f"{name}/zero_shot_recall@5"] = round(zero_shot_recall(index, kind, test, 5), 2)
        out = work / "cells" / name
        t0 = time.perf_counter()
        if not (out / "results.json").is_file():
            ralm(
                "finetune", "open-qa", str(DATA), "--out", str(out), "--index", str(index), "--retriever", kind,
                "--seeds", "1", "--max-train", str(args.max_train), "--max-eval", str(args.max_eval),
                "--epochs", str(args.epochs), "-k", str(args.k), "--lang", "nb", "--no-save", "--no-progress",
                "--name", name, "--dataset", "norquad-open", "--overwrite",
            )  # fmt: skip
        res = json.loads((out / "results.json").read_text())
        for m, st in res["summary"]["test"].items():
            metrics[f"{name}/{m}"] = round(st["mean"], 2)
        metrics[f"{name}/seconds"] = res["seconds"]
        print(
            name,
            {k: v for k, v in metrics.items() if k.startswith(name + "/")},
            f"({time.perf_counter() - t0:.0f} s)",
        )
    write_result(
        "openqa_retrievers",
        "python benchmarks/openqa_retrievers.py " + " ".join(sys.argv[1:]),
        metrics,
        {"table": "REALM Table 2 layout (recall@5 zero-shot, EM after fine-tuning); no winner required"},
        settings=vars(args),
        questions={"test": len(test), "train": args.max_train},
    )


if __name__ == "__main__":
    main()
