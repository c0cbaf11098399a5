"""Transfer to Danish: retrievers trained on Norwegian (and one trained on Danish raw text) on the Danish
Debian corpus and its 40 questions (issue 26, benchmark 2).

Corpus and questions as `retrieval_nordic.py` (manpages-da + debian-edu-doc-da, 128-token chunks,
default chunking; benchmarks/data/retrieval_da.jsonl). Rows, recall@1/5/20, nDCG@10, hub@20:
  bm25, bm25:da               plain and Danish (stopwords + Snowball) BM25
  minilm, minilm:cos          the bundled English MiniLM (inner product; unit vectors)
  dpr-norquad                 DPR-trained on NorQuAD (benchmarks/retrieval/retriever_train.py's dpr row)
  contrastive-nb              the unsupervised recipe on Norwegian text (its contrastive row)
  contrastive-da              the same recipe and budget on this Danish corpus itself (no questions)
  hybrid:rrf(X) / :M@w        the best trained row fused with bm25:da by RRF with equal weights, and
                              with the fusion and BM25 weight tuned on NorQuAD validation
                              (retriever_train.json's hybrid:tuned)
"Best" is chosen by recall@20 on these questions; with 40 questions and no Danish dev set, the
rows are reported side by side and the choice is stated, not tuned.

Run: python -m benchmarks.retrieval.retriever_transfer_da [--work runs/b26]   (after retriever_train.py)
Writes benchmarks/results/retriever_transfer_da.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.common import BENCH, RESULTS, ROOT, log, offline, ralm, script_command, write_result

offline()
from benchmarks.retrieval.retriever_train import KS, row, unsupervised  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b26")
    ap.add_argument("--unsup-steps", type=int, default=600)
    ap.add_argument("--unsup-batch", type=int, default=64)
    ap.add_argument("--unsup-lr", type=float, default=5e-5)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    from benchmarks.data_prep.nordic_corpus import build_jsonl, default_cache
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.bm25 import BM25Searcher
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.eval.compare import compare_retrievers, load_qa
    from ralm.retrieval.hybrid import HybridSearcher
    from ralm.retrieval.index.open import dense_retriever_for

    work = args.work
    t0 = time.perf_counter()
    src = work / "nordic_da.jsonl"
    if not src.is_file():
        build_jsonl("da", src, default_cache())
    store_dir = work / "store-da"
    if not (store_dir / "manifest.json").is_file():
        ralm("corpus", "build", src, "--out", store_dir, "--chunk-size", 128, "--lang", "da", "--quiet")
    cc_da = unsupervised(
        work, store_dir, "contrastive", args.unsup_steps, args.unsup_batch, args.unsup_lr, lang="da"
    )
    store = DocStore(store_dir)
    pairs = load_qa(str(BENCH / "data" / "retrieval_da.jsonl"), store)
    encoders = {
        "minilm": None,
        "minilm:cos": work / "minilm-cos",
        "dpr-norquad": work / "dpr" / "encoder",
        "contrastive-nb": work / "contrastive" / "encoder",
        "contrastive-da": cc_da,
        "dpr-cc-norquad": work / "dpr-cc" / "encoder",
    }
    encoders = {n: p for n, p in encoders.items() if p is None or p.exists()}
    rets = {
        "bm25": BM25Searcher.build(store, stopwords="none", stemmer="none"),
        "bm25:da": BM25Searcher.build(store, lang="da"),
    }
    for name, path in encoders.items():
        enc = DualEncoder.from_pretrained(None if path is None else path)
        rets[name] = dense_retriever_for(store, enc, work / "emb-da" / name.replace(":", "_"), progress=False)
    reports = compare_retrievers(store, pairs, rets, KS, measures=("nDCG@10",), lang="da")
    trained = [n for n in encoders if n not in ("minilm", "minilm:cos")]
    best = max(trained, key=lambda n: (reports[n].recall[20], reports[n].recall[1]))
    fusion = json.loads((RESULTS / "retriever_train.json").read_text())["fusion"]
    tuned, method = fusion["bm25_weight"], fusion["method"]
    hyb = {
        f"hybrid:rrf({best})": HybridSearcher([rets["bm25:da"], rets[best]], len(store), method="rrf"),
        f"hybrid:{method}@{tuned}({best})": HybridSearcher(
            [rets["bm25:da"], rets[best]], len(store), method=method, weights=[tuned, 1 - tuned]
        ),
    }
    reports = compare_retrievers(store, pairs, {**rets, **hyb}, KS, measures=("nDCG@10",), lang="da")
    rows = {n: row(r) for n, r in reports.items()}
    bm = rows["bm25:da"]
    targets = {}
    for h in hyb:
        targets[f"{h}/recall@20 >= bm25:da ({bm['recall@20']})"] = rows[h]["recall@20"] >= bm["recall@20"]
        targets[f"{h}/recall@1 >= bm25:da ({bm['recall@1']})"] = rows[h]["recall@1"] >= bm["recall@1"]
    write_result(
        "retriever_transfer_da",
        script_command(__file__),
        {f"{n}/{m}": v for n, r in rows.items() for m, v in r.items()},
        {k: "met" if v else "not met" for k, v in targets.items()},
        rows=rows,
        best_trained=best,
        questions=len(pairs),
        chunks=len(store),
        seconds=round(time.perf_counter() - t0, 1),
        settings={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    )
    for n, r in rows.items():
        log(f"{n}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
