"""All retrievers in one recall@k table: BM25, query likelihood, ColBERT re-ranking, dense MiniLM
and (optionally) an ICT-tuned encoder, on two question sets:
- the bundled trivia pairs whose answer occurs in the English Wikipedia sample DocStore;
- the TriviaQA sample (11 questions) over its own evidence documents (`--sample triviaqa`).

Run: python -m benchmarks.retrieval.eval_retrieval_all [--ict ENCODER_DIR] [--colbert-depth 20]
Writes benchmarks/results/eval_retrieval_all.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks.common import sample_store, script_command, write_result
from benchmarks.retrieval.search import DEFAULT_DOCSTORE


def table(store, qa: str, ict: str | None, depth: int, ks: list[int], work: Path) -> dict:
    from ralm.retrieval.bm25 import BM25Searcher
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.eval.compare import evaluate_retrievers, load_qa
    from ralm.retrieval.index.open import dense_retriever_for
    from ralm.retrieval.late_interaction import LateInteractionSearcher
    from ralm.retrieval.query_likelihood import QueryLikelihoodSearcher
    from ralm.retrieval.retriever import RerankSearcher

    pairs = load_qa(qa, store)
    bm25 = BM25Searcher.build(store, stopwords="none", stemmer="none")
    retrievers = {
        "bm25": bm25,
        "query_likelihood": QueryLikelihoodSearcher.build(store),
        f"colbert_rerank_bm25_{depth}": RerankSearcher(
            bm25, LateInteractionSearcher.from_pretrained(None, store), depth
        ),
        "dense_minilm": dense_retriever_for(
            store, DualEncoder.from_pretrained(None), work / "minilm", progress=False
        ),
    }
    if ict:
        retrievers["dense_ict"] = dense_retriever_for(
            store, DualEncoder.from_pretrained(ict), work / "ict", progress=False
        )
    rec = evaluate_retrievers(store, pairs, retrievers, ks)
    return {"questions": len(pairs), "chunks": len(store), "recall": rec}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--ict", default=None, help="an ICT-tuned encoder dir (e.g. from retrieval_recall.py or ralm ict)"
    )
    ap.add_argument("--colbert-depth", type=int, default=20)
    args = ap.parse_args()
    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.corpus.docstore import DocStore
    from ralm.samples import sample_path

    work = Path(tempfile.mkdtemp(prefix="ralm-evalall-"))
    en = DocStore(sample_store(DEFAULT_DOCSTORE))
    tq = build_docstore(
        [sample_path("triviaqa")],
        work / "tq",
        BuildConfig(format="jsonl"),
        progress=False,
        log=lambda m: None,
    )
    results = {
        "enwiki_trivia": table(en, "trivia", args.ict, args.colbert_depth, [1, 5, 20], work / "en"),
        "triviaqa_sample": table(tq, "triviaqa", args.ict, args.colbert_depth, [1, 5, 20], work / "tq_emb"),
    }
    metrics: dict[str, float] = {}
    for setname, res in results.items():
        metrics[f"{setname}_questions"] = res["questions"]
        metrics[f"{setname}_chunks"] = res["chunks"]
        for name, rec in res["recall"].items():
            for k, v in rec.items():
                metrics[f"{setname}_{name}_recall_at_{k}"] = round(v, 4)
    cmd = script_command(__file__, "--ict ICT_ENCODER_DIR" if args.ict else "")
    cmd += f" --colbert-depth {args.colbert_depth}"
    out = write_result(
        "eval_retrieval_all", cmd, metrics, {"table": "all retrievers side by side (no bar set)"}
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
