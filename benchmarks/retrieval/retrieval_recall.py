"""Retrieval quality: recall@k of BM25, the untuned MiniLM dual encoder and an ICT-tuned one.

Corpus: the gensim English Wikipedia sample as a DocStore (5,409 chunks of <= 128 tokens).
Questions: the bundled trivia pairs whose answer occurs somewhere in that corpus (a hit is a
top-k chunk containing a normalised answer, whole tokens). ICT: MiniLM towers trained on the
same corpus's chunks (held-out recall logged), then evaluated like the others. The issue sets no
bar for these numbers; they are reported side by side.

Run: python -m benchmarks.retrieval.retrieval_recall [--steps 150] [--batch-size 16]
Writes benchmarks/results/retrieval_recall.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.common import sample_store, script_command, write_result
from benchmarks.retrieval.search import DEFAULT_DOCSTORE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150, help="ICT steps")
    ap.add_argument("--batch-size", type=int, default=16, help="ICT batch size")
    ap.add_argument(
        "--lr", type=float, default=2e-5, help="ICT learning rate (MiniLM is already a retriever)"
    )
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 5, 20])
    args = ap.parse_args()

    from ralm.cli import main as ralm_main
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.bm25 import BM25Searcher
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.eval.compare import evaluate_retrievers, load_qa
    from ralm.retrieval.index.open import dense_retriever_for

    store = DocStore(sample_store(DEFAULT_DOCSTORE))
    pairs = load_qa("trivia", store)
    work = Path(tempfile.mkdtemp(prefix="ralm-recall-"))
    t = time.perf_counter()
    # `ralm ict` (an alias of `ralm retriever train ict`: the one retriever training loop)
    argv = [
        "ict",
        str(store.root),
        "--out",
        str(work / "ict"),
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--lr",
        str(args.lr),
        "--eval-every",
        str(max(1, args.steps // 3)),
        "--quiet",
    ]
    if ralm_main(argv) != 0:
        raise SystemExit("ralm ict failed")
    ict_seconds = time.perf_counter() - t
    log = [json.loads(x) for x in (work / "ict" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in log if "dev_heldout_recall@1" in r]
    before, held = evals[0], evals[-1]

    retrievers = {
        "bm25": BM25Searcher.build(store, stopwords="none", stemmer="none"),
        "dense_minilm": dense_retriever_for(
            store, DualEncoder.from_pretrained(None), work / "d0", progress=False
        ),
        "dense_ict": dense_retriever_for(
            store, DualEncoder.from_pretrained(work / "ict" / "encoder"), work / "d1", progress=False
        ),
    }
    table = evaluate_retrievers(store, pairs, retrievers, args.ks)
    metrics: dict[str, float] = {
        "questions": len(pairs),
        "chunks": len(store),
        "ict_steps": args.steps,
        "ict_seconds": round(ict_seconds, 1),
    }
    for name, rec in table.items():
        for k, v in rec.items():
            metrics[f"{name}_recall_at_{k}"] = round(v, 4)
    for k in (1, 5, 20):
        metrics[f"ict_heldout_recall_at_{k}_before"] = before[f"dev_heldout_recall@{k}"]
        metrics[f"ict_heldout_recall_at_{k}_after"] = held[f"dev_heldout_recall@{k}"]
    cmd = script_command(__file__, f"--steps {args.steps} --batch-size {args.batch_size} --lr {args.lr}")
    result = write_result(
        "retrieval_recall",
        cmd,
        metrics,
        {"table": "BM25, untuned dense and ICT-tuned dense side by side on the same questions (no bar set)"},
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
