"""REALM Table 2 in Norwegian: trained dense retrievers against BM25 on NorQuAD-open (issue 26, benchmark 1).

Corpus: every distinct NorQuAD context (train, validation, test) as an article of one DocStore,
chunked to 128 MiniLM tokens ("NorQuAD-open over its pool", as `openqa_retrievers.py` builds it).
Questions: all 472 test questions without their passage; a hit is a top-k chunk holding the
answer (eval-retrieval's rule). Rows, each scored by recall@1/5/20, nDCG@10 (pooled answer
judgments over all rows) and hub@20:
  bm25, bm25:nb                 plain and Norwegian (stopwords + Snowball stemmer) BM25
  minilm, minilm:centred        the bundled English MiniLM as before (inner product; centred index)
  minilm:cos                    the same with unit vectors (how sentence-transformers trained it)
  ict                           `ralm retriever train ict` on the unsupervised corpus
  contrastive                   `ralm retriever train contrastive` (Contriever crops), same budget
  dpr                           `ralm retriever train dpr` on the NorQuAD train split (dev = validation)
  dpr-cc                        DPR from the contrastive encoder (Contriever's recipe), batch 64 through
                                gradient caching (mini-batches of 32), 4 epochs
  dpr:gc128                     the same as dpr with batch 128 through gradient caching (--with-gc128)
  realm                         the query/doc towers after REALM pre-training on Norwegian text
                                (warm start: the contrastive encoder; MiniLM reader)
  hybrid:rrf / hybrid:tuned     the best trained dense row (by validation recall@5) fused with bm25:nb:
                                RRF with equal weights, and the fusion (RRF or weighted min-max scores)
                                and BM25 weight tuned on the validation questions
The unsupervised corpus is the NorQuAD passages plus the Norwegian Debian text (manpages-nb and
debian-edu-doc-nb-no, `nordic_corpus.py`): raw text only, no questions. Model selection for dpr
uses the validation split; the test questions are never trained or tuned on.

Run: python -m benchmarks.retrieval.retriever_train [--work runs/b26] [--with-gc128]
Each stage is skipped when its output exists in --work (training runs also resume).
Writes benchmarks/results/retriever_train.json and .md; reads ../shared/data/norquad by path.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.common import BENCH, RESULTS, ROOT, log, offline, ralm, script_command, write_result

offline()
NORQUAD = ROOT.parent / "shared" / "data" / "norquad" / "all"
KS = (1, 5, 20)
BM25_WEIGHTS = (0.5, 0.6, 0.7, 0.8, 0.9)  # RRF weight of BM25 tried on validation (dense gets 1 - w)


def qa_jsonl(split: str, out: Path) -> Path:
    """NorQuAD questions of `split` as open-QA JSONL {question, answers}."""
    from ralm.tasks.datasets import load_task_data

    if not out.is_file():
        data = load_task_data(NORQUAD, "open-qa")
        rows = [
            json.dumps({"question": q.question, "answers": q.answers}, ensure_ascii=False)
            for q in data.splits[split]
        ]
        out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def build_stores(work: Path) -> tuple[Path, Path]:
    """The NorQuAD pool DocStore and the unsupervised DocStore (pool + Norwegian Debian text)."""
    from benchmarks.data_prep.nordic_corpus import build_jsonl, default_cache
    from benchmarks.downstream.openqa_retrievers import build_pool

    pool = build_pool(work, 128)
    unsup = work / "unsup-nb"
    if not (unsup / "manifest.json").is_file():
        nb = work / "nordic_nb.jsonl"
        if not nb.is_file():
            build_jsonl("nb", nb, default_cache())
        ralm(
            "corpus",
            "build",
            work / "pool.jsonl",
            nb,
            "--out",
            unsup,
            "--chunk-size",
            128,
            "--lang",
            "nb",
            "--quiet",
        )
    return pool, unsup


def unsupervised(
    work: Path, unsup: Path, name: str, steps: int, batch: int, lr: float, lang: str = "nb"
) -> Path:
    """`ralm retriever train NAME` (ict or contrastive) over `unsup`, in `lang`, into work/NAME
    (work/NAME-LANG for another language than nb), once; its encoder."""
    out = work / (name if lang == "nb" else f"{name}-{lang}")
    if not (out / "results.json").is_file():
        flags = ["--steps", steps, "--batch-size", batch, "--lr", lr, "--quiet"]
        ralm("retriever", "train", name, unsup, "--out", out, "--lang", lang, *flags)
    return out / "encoder"


def dpr_flags(pool: Path) -> list:
    """What every `ralm retriever train dpr` here starts with: NorQuAD's train questions over `pool`,
    its validation questions for model selection."""
    train_json = NORQUAD / "training_dataset_flattened.reconstructed.json"
    dev_json = NORQUAD / "validation_dataset_flattened.json"
    return [train_json, "--corpus", pool, "--dev", dev_json, "--lang", "nb", "--quiet"]


def dpr(out: Path, pool: Path, *flags: object) -> Path:
    """`ralm retriever train dpr` (dpr_flags(pool), then FLAGS) into `out`, once; its encoder."""
    if not (out / "results.json").is_file():
        ralm("retriever", "train", "dpr", *dpr_flags(pool), *flags, "--out", out)
    return out / "encoder"


def dpr_cc(work: Path, pool: Path, contrastive: Path, epochs: float) -> Path:
    """DPR from the contrastive encoder (Contriever's recipe: pre-train, then fine-tune), batch 64 with
    gradient caching, into work/dpr-cc, once; its encoder."""
    flags = ["--epochs", epochs, "--batch-size", 64, "--grad-cache", 32, "--lr", 3e-5]
    return dpr(work / "dpr-cc", pool, "--encoder", contrastive, *flags)


def train(work: Path, pool: Path, unsup: Path, args) -> dict[str, Path]:
    """Every trained encoder (trained when missing; a rerun resumes an interrupted one)."""
    enc: dict[str, Path] = {}
    for name in ("ict", "contrastive"):
        enc[name] = unsupervised(work, unsup, name, args.unsup_steps, args.unsup_batch, args.unsup_lr)
    enc["dpr"] = dpr(work / "dpr", pool, "--epochs", args.epochs, "--batch-size", 32)
    if not args.no_dpr_cc:
        enc["dpr-cc"] = dpr_cc(work, pool, enc["contrastive"], args.cc_epochs)
    if args.with_gc128:
        gc128 = ["--epochs", args.gc_epochs, "--batch-size", 128, "--grad-cache", 32, "--lr", 4e-5]
        enc["dpr:gc128"] = dpr(work / "dpr-gc128", pool, *gc128)
    realm = work / "realm"
    if not (work / "realm-towers" / "ralm_encoder.json").is_file():
        if not (realm / "eval_mlm.json").is_file():
            resume = ["--resume"] if (realm / "checkpoints").is_dir() else []
            ralm(
                "pretrain",
                BENCH / "data" / "realm_nb.toml",
                "--docstore",
                unsup,
                "--out",
                realm,
                "--set",
                f"retriever={enc['contrastive']}",
                "--set",
                f"steps={args.realm_steps}",
                *resume,
            )
        ralm(
            "export-reader",
            realm,
            work / "realm-reader",
            "--retriever-out",
            work / "realm-towers",
            "--overwrite",
        )
    enc["realm"] = work / "realm-towers"
    return enc


def minilm_cos(work: Path) -> Path:
    """The bundled MiniLM as a dual encoder with unit vectors (saved once, so it loads like the others)."""
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig

    out = work / "minilm-cos"
    if not (out / "ralm_encoder.json").is_file():
        DualEncoder.from_pretrained(None, EncoderConfig(normalize=True)).save(out)
    return out


def evaluate(work: Path, pool: Path, encoders: dict[str, Path], questions: Path, tag: str) -> dict:
    """Every row on `questions`; returns {name: report} with the retrievers kept for fusion."""
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.bm25 import BM25Searcher
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.eval.compare import compare_retrievers, load_qa
    from ralm.retrieval.index.open import dense_retriever_for

    store = DocStore(pool)
    pairs = load_qa(str(questions), store)
    rets = {
        "bm25": BM25Searcher.build(store, stopwords="none", stemmer="none"),
        "bm25:nb": BM25Searcher.build(store, lang="nb"),
    }
    for name, path in encoders.items():
        enc = DualEncoder.from_pretrained(None if path is None else path)
        emb = work / "emb" / name.replace(":", "_")
        rets[name] = dense_retriever_for(store, enc, emb, progress=False)
        if name == "minilm":
            rets["minilm:centred"] = dense_retriever_for(store, enc, emb, progress=False, center=True)
    log(f"{tag}: {len(pairs)} questions, {len(rets)} retrievers")
    reports = compare_retrievers(store, pairs, rets, KS, measures=("nDCG@10",), lang="nb")
    return {"store": store, "pairs": pairs, "retrievers": rets, "reports": reports}


def fuse(ev: dict, dense: str, w_bm25: float, method: str = "rrf"):
    """bm25:nb and `dense` fused: RRF or weighted min-max scores, BM25 weighted w_bm25, dense 1 - w_bm25."""
    from ralm.retrieval.hybrid import HybridSearcher

    store, rets = ev["store"], ev["retrievers"]
    return HybridSearcher(
        [rets["bm25:nb"], rets[dense]], len(store), method=method, weights=[w_bm25, 1 - w_bm25]
    )


def row(rep) -> dict[str, float]:
    out = {f"recall@{k}": round(rep.recall[k], 4) for k in KS}
    out["nDCG@10"] = round(rep.measures["nDCG@10"], 4)
    out["hub@20"] = round(rep.hubness["hub_share"], 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b26")
    ap.add_argument("--epochs", type=float, default=3.0, help="dpr epochs (batch 32)")
    ap.add_argument(
        "--with-gc128", action="store_true", help="also train dpr with batch 128 (gradient caching)"
    )
    ap.add_argument("--gc-epochs", type=float, default=6.0)
    ap.add_argument("--no-dpr-cc", action="store_true", help="leave out dpr from the contrastive encoder")
    ap.add_argument("--cc-epochs", type=float, default=4.0, help="dpr-cc epochs (batch 64, gradient caching)")
    ap.add_argument("--unsup-steps", type=int, default=600)
    ap.add_argument("--unsup-batch", type=int, default=64)
    ap.add_argument("--unsup-lr", type=float, default=5e-5)
    ap.add_argument("--realm-steps", type=int, default=300)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    from ralm.retrieval.eval.compare import compare_retrievers

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    pool, unsup = build_stores(work)
    trained = train(work, pool, unsup, args)
    encoders: dict[str, Path | None] = {"minilm": None, "minilm:cos": minilm_cos(work), **trained}
    test = evaluate(work, pool, encoders, qa_jsonl("test", work / "test.jsonl"), "test")
    trained_names = list(trained)

    # the dense row to fuse and the RRF weight: chosen on the validation questions only
    val = evaluate(
        work,
        pool,
        {n: encoders[n] for n in trained_names},
        qa_jsonl("dev", work / "validation.jsonl"),
        "validation",
    )
    best_dense = max(trained_names, key=lambda n: (val["reports"][n].recall[5], val["reports"][n].recall[1]))
    tuning = {}
    grid = [(m, w) for m in ("rrf", "weighted") for w in BM25_WEIGHTS]
    for m, w in grid:
        rep = compare_retrievers(
            val["store"], val["pairs"], {"h": fuse(val, best_dense, w, m)}, KS, measures=(), lang="nb"
        )["h"]
        tuning[f"{m}@{w}"] = {f"recall@{k}": round(rep.recall[k], 4) for k in KS}

    def rank(mw):
        t = tuning[f"{mw[0]}@{mw[1]}"]
        return (t["recall@5"], t["recall@1"], mw[0] == "rrf", -mw[1])

    best_m, best_w = max(grid, key=rank)
    hybrids = {
        "hybrid:rrf": fuse(test, best_dense, 0.5),
        "hybrid:tuned": fuse(test, best_dense, best_w, best_m),
    }
    all_rets = {**test["retrievers"], **hybrids}
    final = compare_retrievers(test["store"], test["pairs"], all_rets, KS, measures=("nDCG@10",), lang="nb")
    rows = {name: row(rep) for name, rep in final.items()}

    metrics = {f"{n}/{m}": v for n, r in rows.items() for m, v in r.items()}
    bm = rows["bm25:nb"]
    best_trained = max(trained_names, key=lambda n: rows[n]["recall@5"])
    best_dpr = max((n for n in trained_names if n.startswith("dpr")), key=lambda n: rows[n]["recall@5"])
    hy = rows["hybrid:tuned"]
    targets = {
        f"{best_dpr}/recall@5 >= bm25:nb/recall@5 ({bm['recall@5']})": rows[best_dpr]["recall@5"]
        >= bm["recall@5"],
        f"hybrid:tuned/recall@5 >= bm25:nb + 0.05 ({bm['recall@5'] + 0.05:.4f})": hy["recall@5"]
        >= bm["recall@5"] + 0.05,
        f"hybrid:tuned/recall@1 >= bm25:nb/recall@1 ({bm['recall@1']})": hy["recall@1"] >= bm["recall@1"],
        "contrastive/recall@5 > ict/recall@5": rows["contrastive"]["recall@5"] > rows["ict"]["recall@5"],
        **{f"{n}/hub@20 < 0.3": rows[n]["hub@20"] < 0.3 for n in trained_names},
    }
    runs = {}
    for n in trained_names:
        res = encoders[n].parent / "results.json"
        if res.is_file():
            r = json.loads(res.read_text())
            runs[n] = {k: r.get(k) for k in ("steps", "best_step", "best", "seconds", "temperature")}
    write_result(
        "retriever_train",
        script_command(__file__),
        metrics,
        {k: "met" if v else "not met" for k, v in targets.items()},
        rows=rows,
        fusion={"dense": best_dense, "method": best_m, "bm25_weight": best_w, "validation": tuning},
        best_trained=best_trained,
        training_runs=runs,
        questions={"test": len(test["pairs"]), "validation": len(val["pairs"]), "chunks": len(test["store"])},
        seconds=round(time.perf_counter() - t0, 1),
        settings={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    )
    lines = [
        "| retriever | R@1 | R@5 | R@20 | nDCG@10 | hub@20 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, r in rows.items():
        lines.append(
            f"| {n} | {r['recall@1']:.3f} | {r['recall@5']:.3f} | {r['recall@20']:.3f} | {r['nDCG@10']:.3f} | {r['hub@20']:.3f} |"
        )
    (RESULTS / "retriever_train.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
