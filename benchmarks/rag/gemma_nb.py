"""Gemma-3-270M in every role on NorQuAD-open (issue 36): generator, LSR supervisor, retriever towers.

All rows use the 472 NorQuAD-open test questions over the 5,859-chunk pool and the DPR-trained
MiniLM towers of retriever_train.py (`dpr-cc`, their index built by realm_causal.py: --b35).
Retrieval for generation is the tuned fusion of retriever_train.py (Norwegian BM25 0.7 + dpr-cc
0.3, weighted min-max; "hybrid"), run once into `ralm rag retrieve`-style files (top 20), so
every generator row reads the same passages. Cells (each a directory under --work, skipped
when its results exist, so the script resumes):

  prep            retrieval files (test; the first --train-questions train questions) and the
                  SQuAD subset of those train questions for DPR
  zs-<lm>-k3      zero-shot RAG k=3 (chat template where the LM has one)
  zs-<lm>-rest    zero-shot closed-book, RAG k=1/5, REPLUG k=3
  zs-<lm>-oracle  zero-shot with the gold chunk
  ft-<lm>         `ralm rag train` (k=3, LoRA r=16, 1 epoch over the train questions, plain-text
                  prompts), then RAG k=3 with the trained model
  ftoracle-<lm>   the fine-tuned model with the gold chunk
  cbft-gemma      closed-book fine-tuning on the same questions, closed-book eval
  lsr             `ralm rag lsr` on the dpr-cc index supervised by ft-gemma's model; dense
                  answer recall@1/5/20 before and after
  dpr-<tower>     `ralm retriever train dpr` on the same train questions, one recipe for MiniLM
                  and Gemma-3 (Gemma: bidirectional attention, mean pooling, a query
                  instruction, token embeddings frozen); recall on the test questions, alone
                  and fused with Norwegian BM25 (weighted 0.7, as tuned for dpr-cc); training
                  and encoding throughput; index size
  transfer-da     the Danish transfer rows (retriever_transfer_da.py's corpus and 40 questions) of the
                  dpr-gemma and dpr-minilm towers, alone and fused with Danish BM25
  report          benchmarks/results/gemma_nb.json

Run: python -m benchmarks.rag.gemma_nb CELL [CELL ...] [--work runs/b36] [--b35 runs/b35]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.common import BENCH, RESULTS, ROOT, logger, offline, ralm

offline()
from benchmarks.rag.gemma_nb_report import LMS, done, report  # noqa: E402
from benchmarks.retrieval.retriever_train import KS, row  # noqa: E402

NORQUAD = ROOT.parent / "shared" / "data" / "norquad" / "all"
TEST = NORQUAD / "test_dataset_flattened.json"
TRAIN = NORQUAD / "training_dataset_flattened.reconstructed.json"
QUERY_INSTRUCTION = "Spørsmål: "
log = logger("gemma_nb", stdout=True)


# ----------------------------------------------------------------------------- prep
def prep(a) -> None:
    from ralm.rag.data import read_questions
    from ralm.rag.retrieved import retrieve, write_retrieved
    from ralm.retrieval.retriever import Retriever

    a.work.mkdir(parents=True, exist_ok=True)
    ret = a.work / "retrieved"
    if not (ret / "train.jsonl").is_file():
        fusion = json.loads((RESULTS / "retriever_train.json").read_text())["fusion"]
        opened = Retriever.load(
            a.index,
            "hybrid",
            bm25_options={"lang": "nb"},
            fusion=fusion["method"],
            dense_weight=1 - fusion["bm25_weight"],
            log=log,
        )
        for split, path, limit in (("test", TEST, None), ("train", TRAIN, a.train_questions)):
            qs = read_questions(path)[:limit]
            write_retrieved(ret / f"{split}.jsonl", qs, retrieve(qs, opened, 20))
            log(f"retrieved: {split} {len(qs)} questions")
    sub = a.work / f"train-subset-{a.dpr_questions}.json"
    if not sub.is_file():
        squad = json.loads(TRAIN.read_text(encoding="utf-8"))
        left, data = a.dpr_questions, []
        for art in squad["data"]:
            paras = []
            for p in art["paragraphs"]:
                qas = p["qas"][:left]
                left -= len(qas)
                if qas:
                    paras.append({**p, "qas": qas})
            if paras:
                data.append({**art, "paragraphs": paras})
            if left <= 0:
                break
        sub.write_text(json.dumps({**squad, "data": data}, ensure_ascii=False), encoding="utf-8")
        log(f"{sub}: {a.dpr_questions} train questions")


# ----------------------------------------------------------------------------- generation
def rag_eval(a, out: Path, lm, *extra) -> None:
    ralm(
        "rag",
        "eval",
        TEST,
        "--lm",
        lm,
        "--lang",
        "nb",
        "--batch-size",
        8,
        "--out",
        out,
        "--no-progress",
        *extra,
    )


def zero_shot(a, key: str, part: str) -> None:
    out = a.work / f"zs-{key}-{part}"
    retrieved = ["--retrieved", a.work / "retrieved" / "test.jsonl"]
    if part == "k3" and not done(out):
        rag_eval(a, out, LMS[key], *retrieved, "--mode", "rag", "-k", 3)
    elif part == "rest" and not done(out / "replug-k3"):
        rag_eval(a, out, LMS[key], *retrieved, "--mode", "closed-book", "rag", "-k", 1, 5)
        rag_eval(a, out / "replug-k3", LMS[key], *retrieved, "--mode", "replug", "-k", 3)
    elif part == "oracle" and not done(out):  # the gold chunk comes from the index's DocStore
        rag_eval(a, out, LMS[key], *oracle_source(a), "--mode", "oracle", "-k", 1)


def oracle_source(a) -> list:
    """Where the oracle mode finds the gold chunk: the index's DocStore, or (`a.pool`, the GPU run) the
    pool DocStore itself (the same chunks: the index was built over it)."""
    if getattr(a, "pool", None) is not None:
        return ["--corpus", a.pool, "--retriever", "bm25"]
    return ["--index", a.index, "--retriever", "dense"]


def fine_tune(a, key: str, closed_book: bool = False, oracle: bool = False) -> None:
    name = f"{'cbft' if closed_book else 'ft'}-{key}"
    run = a.work / name
    if not (run / "model" / "config.json").is_file():
        ralm(
            "rag",
            "train",
            TRAIN,
            "--lm",
            LMS[key],
            "--retrieved",
            a.work / "retrieved" / "train.jsonl",
            "-k",
            3,
            "--lang",
            "nb",
            "--epochs",
            1,
            "--limit",
            a.train_questions,
            "--batch-size",
            4,
            "--lora-r",
            16,
            "--no-chat",
            "--out",
            run,
            "--no-progress",
            *(["--closed-book"] if closed_book else []),
        )
    ev = a.work / f"{name}-eval"
    if closed_book:
        if not done(ev):
            rag_eval(a, ev, run / "model", "--mode", "closed-book", "--no-chat")
        return
    if not oracle and not done(ev / "rag-k3"):
        rag_eval(
            a,
            ev / "rag-k3",
            run / "model",
            "--retrieved",
            a.work / "retrieved" / "test.jsonl",
            "--mode",
            "rag",
            "-k",
            3,
            "--no-chat",
        )
    if oracle and not done(ev / "oracle"):
        rag_eval(a, ev / "oracle", run / "model", *oracle_source(a), "--mode", "oracle", "-k", 1, "--no-chat")


# ----------------------------------------------------------------------------- retrieval
def recall_rows(a, retrievers: dict) -> dict:
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.eval.compare import compare_retrievers, load_qa

    store = DocStore(a.b35 / "pool")
    pairs = load_qa(str(a.b35 / "test.jsonl"), store)
    reps = compare_retrievers(store, pairs, retrievers, KS, measures=("nDCG@10",), lang="nb")
    return {n: row(r) for n, r in reps.items()} | {"_questions": len(pairs)}


def lsr(a) -> None:
    from ralm.retrieval.retriever import Retriever

    out = a.work / a.lsr_name
    if not (out / "index" / "retrieval.json").is_file():
        ralm(
            "rag",
            "lsr",
            TRAIN,
            "--lm",
            a.work / "ft-gemma" / "model",
            "--index",
            a.index,
            "-n",
            20,
            "--limit",
            a.lsr_questions,
            "--epochs",
            a.lsr_epochs,
            "--batch-size",
            a.lsr_batch,
            "--lr",
            a.lsr_lr,
            "--lang",
            "nb",
            "--out",
            out,
            "--no-progress",
        )
    res = out / "results.json"
    if not res.is_file():
        before = Retriever.load(a.index, "dense", log=log).backend
        after = Retriever.load(out / "index", "dense", log=log).backend
        rows = recall_rows(a, {"before": before, "after": after})
        res.write_text(json.dumps(rows, indent=2) + "\n")
        log(f"lsr: {rows}")


def dpr(a, tower: str) -> None:
    import numpy as np

    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.bm25 import BM25Searcher
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.hybrid import HybridSearcher
    from ralm.retrieval.index.open import dense_retriever_for

    run = a.work / f"dpr-{tower}"
    extra = (
        [
            "--encoder",
            getattr(a, "gemma_tower", "gemma3"),
            "--bidirectional",
            "--pooling",
            "mean",
            "--query-instruction",
            QUERY_INSTRUCTION,
        ]
        if tower == "gemma"
        else []
    )
    t0 = time.perf_counter()
    if not done(run):
        if getattr(a, "dpr_full", None) is not None:  # retriever_train.py's `dpr` row: all train questions,
            # model selection on validation, 3 epochs at batch 32 (its MiniLM row is the baseline)
            data = [TRAIN, "--dev", a.dpr_full, "--epochs", 3, "--batch-size", 32]
        else:
            data = [
                a.work / f"train-subset-{a.dpr_questions}.json",
                "--epochs",
                a.dpr_epochs,
                "--batch-size",
                32,
                "--grad-cache",
                8,
                "--select",
                "last",
            ]
        ralm(
            "retriever",
            "train",
            "dpr",
            *data,
            "--corpus",
            a.b35 / "pool",
            "--lang",
            "nb",
            "--quiet",
            "--out",
            run,
            *extra,
        )
        (run / "train_seconds.json").write_text(json.dumps({"seconds": time.perf_counter() - t0}) + "\n")
    res = run / "eval.json"
    if res.is_file():
        return
    store = DocStore(a.b35 / "pool")
    enc = DualEncoder.from_pretrained(run / "encoder")
    import torch

    if torch.cuda.is_available():  # the GPU run: embed the pool and the questions there
        enc = enc.to("cuda")
    t0 = time.perf_counter()
    dense = dense_retriever_for(store, enc, run / "emb", progress=False, batch_size=16)
    enc_s = time.perf_counter() - t0
    fusion = json.loads((RESULTS / "retriever_train.json").read_text())["fusion"]
    bm25 = BM25Searcher.build(store, lang="nb")
    w = fusion["bm25_weight"]
    fused = HybridSearcher([bm25, dense], len(store), method=fusion["method"], weights=[w, 1 - w])
    rows = recall_rows(a, {tower: dense, f"fused:{tower}": fused})
    vec = np.load(run / "emb" / "embeddings.npy", mmap_mode="r")
    train = json.loads((run / "train_seconds.json").read_text())["seconds"]
    rows["_speed"] = {
        "train_seconds": round(train, 1),
        "encode_seconds": round(enc_s, 1),
        "encode_chunks_per_s": round(len(store) / enc_s, 2),
        "index_bytes": int(vec.nbytes),
        "dim": int(vec.shape[1]),
    }
    res.write_text(json.dumps(rows, indent=2) + "\n")
    log(f"dpr-{tower}: {rows}")


def transfer_da(a) -> None:
    """retriever_transfer_da.py's Danish rows with the DPR towers of the dpr-<tower> cells (trained on
    NorQuAD): the Danish Debian corpus (128-token chunks, as that script builds it) and its 40
    questions, each tower alone and fused with Danish BM25 (weighted min-max, BM25 0.7)."""
    from benchmarks.data_prep.nordic_corpus import build_jsonl, default_cache
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.bm25 import BM25Searcher
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.eval.compare import compare_retrievers, load_qa
    from ralm.retrieval.hybrid import HybridSearcher
    from ralm.retrieval.index.open import dense_retriever_for

    out = a.work / "transfer-da"
    if (out / "results.json").is_file():
        return
    src = out / "nordic_da.jsonl"
    if not src.is_file():
        build_jsonl("da", src, default_cache())
    if not (out / "store" / "manifest.json").is_file():
        ralm("corpus", "build", src, "--out", out / "store", "--chunk-size", 128, "--lang", "da", "--quiet")
    store = DocStore(out / "store")
    pairs = load_qa(str(BENCH / "data" / "retrieval_da.jsonl"), store)
    bm25 = BM25Searcher.build(store, lang="da")
    rets, seconds = {"bm25:da": bm25}, {}
    for tower in ("gemma", "minilm"):
        t0 = time.perf_counter()
        enc = DualEncoder.from_pretrained(a.work / f"dpr-{tower}" / "encoder")
        rets[tower] = dense_retriever_for(store, enc, out / f"emb-{tower}", progress=False, batch_size=16)
        seconds[tower] = round(time.perf_counter() - t0, 1)
        rets[f"fused:{tower}"] = HybridSearcher(
            [bm25, rets[tower]], len(store), method="weighted", weights=[0.7, 0.3]
        )
    reps = compare_retrievers(store, pairs, rets, KS, measures=("nDCG@10",), lang="da")
    rows = {n: row(r) for n, r in reps.items()} | {
        "_questions": len(pairs),
        "_chunks": len(store),
        "_embed_seconds": seconds,
    }
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    log(f"transfer-da: {rows}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="+")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b36")
    ap.add_argument(
        "--b35", type=Path, default=ROOT / "runs" / "b35", help="realm_causal.py's work directory"
    )
    ap.add_argument("--train-questions", type=int, default=1000)
    ap.add_argument("--lsr-questions", type=int, default=250)
    ap.add_argument("--lsr-epochs", type=float, default=1.0)
    ap.add_argument("--lsr-batch", type=int, default=32)
    ap.add_argument("--lsr-lr", type=float, default=2e-5)
    ap.add_argument(
        "--lsr-name", default="lsr", help="the LSR run's folder (a second recipe beside the first)"
    )
    ap.add_argument("--dpr-epochs", type=float, default=1.0)
    ap.add_argument("--dpr-questions", type=int, default=1000, help="train questions of the DPR rows")
    a = ap.parse_args()
    a.index = a.b35 / "index-plain"
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for cell in a.cells:
        t0 = time.perf_counter()
        log(f"cell {cell}")
        if cell == "prep":
            prep(a)
        elif cell.startswith("zs-"):
            _, key, part = cell.split("-")
            zero_shot(a, key, part)
        elif cell.startswith(("ft-", "cbft-", "ftoracle-")):
            kind, key = cell.split("-")
            fine_tune(a, key, closed_book=kind == "cbft", oracle=kind == "ftoracle")
        elif cell == "lsr":
            lsr(a)
        elif cell.startswith("dpr-"):
            dpr(a, cell.split("-")[1])
        elif cell == "transfer-da":
            transfer_da(a)
        elif cell == "report":
            report(a)
        else:
            raise SystemExit(f"unknown cell {cell!r}")
        log(f"cell {cell}: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
