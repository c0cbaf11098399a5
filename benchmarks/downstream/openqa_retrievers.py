"""REALM Table 2's retriever claim: zero-shot recall@5 and open-QA EM for four retrievers, same questions.

Two question sets, each over one corpus:
  * trivia: the bundled chatterbot trivia pairs whose answer occurs in the REALM run's own corpus
    (the English Wikipedia sample, 64-token chunks), split 70/30 (seeded) into train and test;
    this is where the REALM towers were pre-trained;
  * norquad: "NorQuAD-open over its own pool": every distinct NorQuAD context (train, validation
    and test) is a document of a DocStore chunked to --chunk-size MiniLM tokens; questions come
    without their passage (Norwegian, which the English MiniLM towers do not speak).
The retrievers, on the same questions and corpus:
  * BM25 (bm25s, Lucene scoring), frozen;
  * untuned MiniLM (both towers the bundled encoder);
  * ICT: MiniLM after --ict-steps of the Inverse Cloze Task on the pool (REALM/ORQA's warm start);
  * the query and doc towers after REALM pre-training (the downstream benchmark's REALM run, on
    the English Wikipedia sample: a different language and corpus than NorQuAD).
For each: zero-shot answer recall@5 on the test questions (REALM Table 2's right column), then
open-QA fine-tuning (`ralm finetune open-qa`: MiniLM reader, top-5, query tower tuned, index
fixed; BM25 frozen) on --max-train training questions and EM/F1/recall@5 on --max-eval test ones.

Run: python -m benchmarks.downstream.openqa_retrievers [--datasets trivia,norquad] [--max-train 600] [--max-eval 300]
Writes benchmarks/results/openqa_retrievers.json; reads ../shared/data/norquad by path.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

from benchmarks import common
from benchmarks.common import ROOT, script_command, write_result

DATA = ROOT.parent / "shared" / "data" / "norquad" / "all"
ralm = partial(common.ralm, env=common.OFFLINE, say=None)  # `ralm ARGS` offline, nothing said first


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


def trivia_sets(work: Path, corpus: Path, seed: int = 0) -> tuple[Path, Path]:
    """The bundled trivia pairs whose answer occurs in the REALM corpus, split 70/30 (seeded) into
    train.jsonl and test.jsonl."""
    import random

    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.eval.evaluate import answerable
    from ralm.samples import trivia_qa_pairs

    d = work / "trivia"
    if (d / "test.jsonl").is_file():
        return d / "train.jsonl", d / "test.jsonl"
    d.mkdir(parents=True, exist_ok=True)
    store = DocStore(corpus)
    texts = [t for b in store.iter_batches(1024, columns=["text"]) for t in b["text"]]
    pairs = answerable(trivia_qa_pairs(), texts)
    random.Random(seed).shuffle(pairs)
    cut = round(0.7 * len(pairs))
    for name, part in (("train", pairs[:cut]), ("test", pairs[cut:])):
        rows = [json.dumps({"question": q, "answer": a}) for q, a in part]
        (d / f"{name}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return d / "train.jsonl", d / "test.jsonl"


def zero_shot_recall(index: Path, kind: str, questions, lang: str, k: int = 5) -> float:
    from ralm.answers import has_answer
    from ralm.retrieval.retriever import Retriever

    opened = Retriever.load(index, kind=kind)
    store, ret = opened.store, opened.backend
    top = ret.search_text([q.question for q in questions], k).ids
    hits = [
        any(has_answer(store[int(i)]["text"], q.answers, lang) for i in row)
        for q, row in zip(questions, top, strict=True)
    ]
    return 100.0 * sum(hits) / len(hits)


def indexes(work: Path, pool: Path, realm_enc: Path, ict_steps: int) -> dict[str, Path]:
    """BM25 + untuned MiniLM, ICT and REALM-tower index directories over `pool` (built once)."""
    idx = {"bm25": work / "index-minilm", "minilm": work / "index-minilm"}
    if not (idx["minilm"] / "retrieval.json").is_file():
        ralm("index", "build", str(pool), "--out", str(idx["minilm"]), "--bm25")
    if not (work / "ict" / "encoder").exists():
        ralm("ict", str(pool), "--out", str(work / "ict"), "--steps", str(ict_steps), "--quiet")
    idx["ict"] = work / "index-ict"
    if not (idx["ict"] / "retrieval.json").is_file():
        ralm(
            "index", "build", str(pool), "--out", str(idx["ict"]), "--encoder", str(work / "ict" / "encoder")
        )
    idx["realm"] = work / "index-realm"
    if not (idx["realm"] / "retrieval.json").is_file():
        ralm("index", "build", str(pool), "--out", str(idx["realm"]), "--encoder", str(realm_enc))
    return idx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "openqa"))
    ap.add_argument("--realm-run", default=str(ROOT / "runs" / "downstream" / "realm"))
    ap.add_argument("--datasets", default="trivia,norquad")
    ap.add_argument("--chunk-size", type=int, default=128, help="NorQuAD pool chunks")
    ap.add_argument("--ict-steps", type=int, default=300)
    ap.add_argument("--max-train", type=int, default=600)
    ap.add_argument("--max-eval", type=int, default=300)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--trivia-epochs", type=float, default=4.0, help="REALM used 4 epochs on NQ")
    ap.add_argument("-k", type=int, default=5)
    args = ap.parse_args()
    from ralm.tasks.datasets import load_task_data

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
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
    metrics: dict[str, float] = {}
    counts: dict[str, dict[str, int]] = {}
    for ds in args.datasets.split(","):
        if ds == "norquad":
            dwork, lang, epochs = work / "norquad", "nb", args.epochs
            dwork.mkdir(exist_ok=True)
            pool = build_pool(dwork, args.chunk_size)
            data_args = [str(DATA)]
            test = load_task_data(DATA, "open-qa").splits["test"][: args.max_eval]
        else:  # the REALM run's own corpus (English Wikipedia sample, 64-token chunks)
            dwork, lang, epochs = work / "trivia", "en", args.trivia_epochs
            pool = Path(args.realm_run).parent / "corpus"
            train_f, test_f = trivia_sets(work, pool)
            data_args = [str(train_f.parent)]  # train.jsonl / test.jsonl (dev carved from train)
            test = load_task_data(None, "open-qa", test=test_f).splits["test"]
        idx = indexes(dwork, pool, realm_enc, args.ict_steps)
        counts[ds] = {"test_questions": len(test)}
        for name, index in idx.items():
            kind = "bm25" if name == "bm25" else "dense"
            key = f"{ds}/{name}"
            metrics[f"{key}/zero_shot_recall@5"] = round(zero_shot_recall(index, kind, test, lang, 5), 2)
            out = dwork / "cells" / name
            t0 = time.perf_counter()
            if not (out / "results.json").is_file():
                ralm(
                    "finetune",
                    "open-qa",
                    *data_args,
                    "--out",
                    str(out),
                    "--index",
                    str(index),
                    "--retriever",
                    kind,
                    "--seeds",
                    "1",
                    "--max-train",
                    str(args.max_train),
                    "--max-eval",
                    str(args.max_eval),
                    "--epochs",
                    str(epochs),
                    "-k",
                    str(args.k),
                    "--lang",
                    lang,
                    "--no-save",
                    "--no-progress",
                    "--name",
                    name,
                    "--dataset",
                    f"{ds}-open",
                    "--overwrite",
                )
            res = json.loads((out / "results.json").read_text())
            for m, st in res["summary"]["test"].items():
                metrics[f"{key}/{m}"] = round(st["mean"], 2)
            metrics[f"{key}/seconds"] = res["seconds"]
            counts[ds]["train_questions"] = res["seeds"][0]["train_examples"]
            print(
                key,
                {k: v for k, v in metrics.items() if k.startswith(key + "/")},
                f"({time.perf_counter() - t0:.0f} s)",
            )
    write_result(
        "openqa_retrievers",
        script_command(__file__),
        metrics,
        {"table": "REALM Table 2 layout (zero-shot recall@5; EM after fine-tuning); no winner required"},
        settings=vars(args),
        questions=counts,
    )


if __name__ == "__main__":
    main()
