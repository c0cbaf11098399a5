"""The GPU stage of rag_qa.py: every row of the RAG QA benchmark, from the files `rag_qa.py prep` wrote.

Imports only torch, transformers, numpy and ralm's torch-only modules (no FAISS or BM25: the
retrieval was done in prep; LSR's dense search is an exact inner product over the pool's doc
vectors in torch). Stages, in priority order (each row is saved as soon as it is measured, so a
run stopped at its time limit keeps what it finished; `--budget` skips stages that would not fit):

  zero    NorQuAD-open zero-shot: closed-book; RAG k=1/3/5 with BM25 and with hybrid; REPLUG k=3
          (BM25, hybrid); oracle
  cbft    closed-book fine-tuning on the train questions -> closed-book row
  ragft   RAG fine-tuning (k=3 hybrid passages, gold passage not mixed in) -> RAG k=3 (hybrid,
          BM25, dense), REPLUG k=3, oracle with the RAG-fine-tuned model
  lsr     REPLUG LSR: the RAG-fine-tuned LM's preferences over dpr-cc's top-20 for --lsr-questions
          train questions; the query tower trained; answer recall of start vs LSR (dense and
          hybrid) and RAG k=3 with the LSR retriever
  speed   our batched greedy against a bare `model.generate` on the same RAG k=3 prompts
  trivia  the trivia set: zero-shot rows, closed-book and RAG fine-tuning on its 70% train split
  extra   RAG fine-tuning with the gold passage mixed in; LoRA (r=16) RAG fine-tuning

Run (GPU): PYTHONPATH=src python -m benchmarks.rag.rag_qa_device --prep .devC/prep --gguf-parts .devA/part,.devB/part --out $OUT
Check (CPU): python -m benchmarks.rag.rag_qa_device --prep runs/b27/prep --lm DIR --limit 6 --out /tmp/x --tiny
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import offline

offline()
from benchmarks.rag.rag_qa_device_common import T0, Bench, Data, cfg_for, finetune, load_lm, log  # noqa: E402
from ralm.rag.evaluate import run_rag  # noqa: E402


def zero_rows(b: Bench, lm, d: Data, args, lang: str, retrievers: list[str], tag: str = "zero-shot") -> None:
    test = d.qs["test"]
    ps = {r: d.passages("test", r) for r in retrievers}
    b.row(
        d.name,
        f"{tag} closed-book",
        run_rag(lm, test, ps[retrievers[0]], cfg_for("closed-book", 3, args, lang)),
        cfg_for("closed-book", 3, args, lang),
    )
    for r in retrievers:
        for k in (1, 3, 5):
            c = cfg_for("rag", k, args, lang)
            b.row(d.name, f"{tag} rag k={k} {r}", run_rag(lm, test, ps[r], c), c, retriever=r)
    for r in retrievers:
        c = cfg_for("replug", 3, args, lang)
        b.row(d.name, f"{tag} replug k=3 {r}", run_rag(lm, test, ps[r], c), c, retriever=r)
    c = cfg_for("oracle", 1, args, lang)
    b.row(d.name, f"{tag} oracle", run_rag(lm, test, ps[retrievers[0]], c), c)


def slim_encoder(tower_dir: Path, device):
    """The dpr-cc query tower rebuilt from its slim fp16 copy, as a DualEncoder (doc tower = the same)."""
    import lzma
    import tempfile

    from safetensors.torch import load, save_file

    from ralm.retrieval.encoders import DualEncoder, EncoderConfig, Tower

    meta = json.loads((tower_dir / "encoder.json").read_text())
    sd = load(lzma.decompress((tower_dir / "tower.safetensors.xz").read_bytes()))
    key = meta["key"]
    rows, values = sd.pop(key + ".rows"), sd.pop(key + ".values")
    emb = torch.zeros((meta["vocab"], values.shape[1]), dtype=torch.float32)
    emb[rows] = values.float()
    full = {k: v.float() for k, v in sd.items()}
    full[key] = emb
    tmp = Path(tempfile.mkdtemp(prefix="tower-"))
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp / f).write_bytes((tower_dir / f).read_bytes())
    save_file(full, str(tmp / "model.safetensors"))
    cfg = EncoderConfig.from_dict(meta["config"])
    tower = Tower.load(tmp, cfg)
    return DualEncoder(tower, tower, cfg)


@torch.inference_mode()
def dense_search(enc, questions, docs: torch.Tensor, depth: int, device) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-depth (ids, scores) of each question with the query tower (what a flat index gives)."""
    enc.query_tower.eval()  # moved to the device outside inference mode (its weights must stay trainable)
    out_i, out_s = [], []
    for s in range(0, len(questions), 256):
        inputs = enc.tokenize_queries([q.question for q in questions[s : s + 256]])
        q = enc.query_tower(**{k: v.to(device) for k, v in inputs.items()}).float()
        sc, ix = torch.topk(q @ docs.T, depth, dim=1)
        out_i.append(ix.cpu().numpy())
        out_s.append(sc.cpu().numpy().astype(np.float64))
    return np.concatenate(out_i), np.concatenate(out_s)


def fuse(bm25, dense, k: int, weights, method: str) -> tuple[np.ndarray, np.ndarray]:
    from ralm.retrieval.hybrid import fuse_rankings

    ids, scores = [], []
    for bi, bs, di, ds in zip(*bm25, *dense, strict=True):
        i, s = fuse_rankings([bi, di], [bs, ds], k, method=method, weights=weights)
        ids.append(np.pad(i, (0, k - len(i)), constant_values=-1))
        scores.append(np.pad(s.astype(np.float64), (0, k - len(s))))
    return np.stack(ids), np.stack(scores)


def recall(d: Data, qs, ids: np.ndarray, ks=(1, 5, 20)) -> dict:
    from ralm.answers import has_answer

    out = {}
    hits = [
        [has_answer(d.chunks[int(c)][1], q.answers, "nb") if c >= 0 else False for c in row[: max(ks)]]
        for q, row in zip(qs, ids, strict=True)
    ]
    for k in ks:
        out[f"recall@{k}"] = round(100.0 * float(np.mean([any(h[:k]) for h in hits])), 2)
    return out


def lsr_stage(b: Bench, lm, d: Data, args) -> None:
    from ralm.rag.lsr import LSRConfig, lm_preferences, train_lsr
    from ralm.rag.prompt import PromptBuilder

    fusion = json.loads((args.prep / "fusion.json").read_text())
    w = fusion["bm25_weight"]
    dev = lm.device
    enc = slim_encoder(args.prep / "tower", dev)
    enc.query_tower.to(dev)
    docs = torch.as_tensor(np.load(args.prep / "norquad_doc_vectors.npy"), dtype=torch.float32, device=dev)
    test = d.qs["test"]
    train = d.qs["train"][: args.lsr_questions]
    n = 20
    bm25_test = d.lists("test", "bm25")
    start_test = dense_search(enc, test, docs, 100, dev)
    faiss_test = d.lists("test", "dense")
    rec = {
        "start dense (device, fp16 tower)": recall(d, test, start_test[0]),
        "start dense (prep, FAISS)": recall(d, test, faiss_test[0]),
        "start hybrid": recall(d, test, fuse(bm25_test, start_test, 20, [w, 1 - w], fusion["method"])[0]),
    }
    cand_ids, cand_scores = dense_search(enc, train, docs, n, dev)
    ps = d.passages("train", "dense", n, lists=(cand_ids, cand_scores))
    t = time.perf_counter()
    logp = lm_preferences(lm, PromptBuilder(lm.tokenizer, 1024), train, ps, batch_tokens=args.score_tokens)
    pref_s = time.perf_counter() - t
    log(f"lsr: LM preferences of {len(train)} x {n} in {pref_s:.0f} s")
    cfg = LSRConfig(n=n, epochs=args.lsr_epochs, lr=args.lsr_lr, batch_size=32)
    stats = train_lsr(enc, train, cand_ids, docs.cpu().numpy(), logp, cfg, device=dev, log=log)
    lsr_test = dense_search(enc, test, docs, 100, dev)
    lsr_hybrid = fuse(bm25_test, lsr_test, 20, [w, 1 - w], fusion["method"])
    rec["LSR dense"] = recall(d, test, lsr_test[0])
    rec["LSR hybrid"] = recall(d, test, lsr_hybrid[0])
    b.data["stages"]["lsr"] = {
        "recall": rec,
        "preference_seconds": pref_s,
        "train": stats,
        "questions": len(train),
        "n": n,
        "config": {"gamma": cfg.gamma, "beta": cfg.beta, "epochs": cfg.epochs, "lr": cfg.lr},
    }
    log(f"lsr recall: {rec}")
    b.save()
    c = cfg_for("rag", 3, args, "nb")
    start_ps = d.passages("test", "dense", 20, lists=start_test)
    b.row(
        d.name,
        "RAG-FT rag k=3 dense (start, device)",
        run_rag(lm, test, start_ps, c),
        c,
        retriever="dense start",
    )
    b.row(
        d.name,
        "RAG-FT rag k=3 LSR dense",
        run_rag(lm, test, d.passages("test", "dense", 20, lists=lsr_test), c),
        c,
        retriever="LSR dense",
    )
    b.row(
        d.name,
        "RAG-FT rag k=3 LSR hybrid",
        run_rag(lm, test, d.passages("test", "hybrid", 20, lists=lsr_hybrid), c),
        c,
        retriever="LSR hybrid",
    )


def speed_stage(b: Bench, lm, d: Data, args) -> None:
    from ralm.models.precision import autocast_context
    from ralm.rag.generate import greedy, stop_token_ids
    from ralm.rag.prompt import PromptBuilder

    ps = d.passages("test", "hybrid")
    builder = PromptBuilder(lm.tokenizer, 8000)
    prompts = [
        builder.ids(q.question, [f"{p.title}\n{p.text}".strip() for p in row[:3]])
        for q, row in zip(d.qs["test"], ps, strict=True)
    ]
    stop = stop_token_ids(lm.tokenizer)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else stop[0]

    def sync():
        if lm.device.type == "cuda":
            torch.cuda.synchronize()

    def bare(order):
        outs = []
        for s in range(0, len(order), args.batch_size):
            rows = [prompts[i] for i in order[s : s + args.batch_size]]
            width = max(len(r) for r in rows)
            x = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=lm.device)
            m = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=lm.device)
            with torch.inference_mode(), autocast_context(lm.device, lm.autocast):
                y = lm.model.generate(
                    input_ids=x,
                    attention_mask=m,
                    max_new_tokens=20,
                    do_sample=False,
                    eos_token_id=stop,
                    pad_token_id=pad,
                    temperature=None,
                    top_p=None,
                    top_k=None,
                )
            outs.append(y)
        return outs

    greedy(lm, prompts[: args.batch_size], max_new_tokens=20, batch_size=args.batch_size)  # warm-up
    times = {"ours": [], "bare_file_order": [], "bare_sorted": []}
    sorted_order = list(np.argsort([-len(p) for p in prompts], kind="stable"))
    for _ in range(args.speed_repeats):
        sync()
        t = time.perf_counter()
        greedy(lm, prompts, max_new_tokens=20, batch_size=args.batch_size)
        sync()  # noqa: E702
        times["ours"].append(time.perf_counter() - t)
        sync()
        t = time.perf_counter()
        bare(list(range(len(prompts))))
        sync()  # noqa: E702
        times["bare_file_order"].append(time.perf_counter() - t)
        sync()
        t = time.perf_counter()
        bare(sorted_order)
        sync()  # noqa: E702
        times["bare_sorted"].append(time.perf_counter() - t)
    best = {k: min(v) for k, v in times.items()}
    b.data["stages"]["speed"] = {
        "seconds": times,
        "best": best,
        "prompts": len(prompts),
        "batch_size": args.batch_size,
        "ours_vs_bare_sorted": best["ours"] / best["bare_sorted"],
        "ours_vs_bare_file_order": best["ours"] / best["bare_file_order"],
    }
    log(f"speed: {b.data['stages']['speed']}")
    b.save()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prep", type=Path, required=True)
    ap.add_argument("--gguf-parts", default=None)
    ap.add_argument("--lm", default="smollm2")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--autocast", default="auto", help="bf16 on the GPU (auto); off for a CPU check")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--stages", default="zero,cbft,ragft,lsr,speed,trivia,extra")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds: later stages are skipped past it")
    ap.add_argument("--limit", type=int, default=None, help="test questions (all by default)")
    ap.add_argument("--train-limit", type=int, default=None)
    ap.add_argument("--lsr-questions", type=int, default=2000)
    ap.add_argument("--lsr-epochs", type=float, default=3.0)
    ap.add_argument("--lsr-lr", type=float, default=2e-5)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--score-tokens", type=int, default=65536)
    ap.add_argument("--speed-repeats", type=int, default=2)
    args = ap.parse_args()
    stages = args.stages.split(",")
    env = {
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    import transformers

    env["transformers"] = transformers.__version__
    b = Bench(args.out, {"env": env, "args": {k: str(v) for k, v in vars(args).items()}})
    lm = load_lm(args)
    base_sd = {k: v.detach().clone() for k, v in lm.model.state_dict().items()}
    nq = Data(args.prep, "norquad", args.limit, args.train_limit)
    cost = {"zero": 60, "cbft": 45, "ragft": 150, "lsr": 150, "speed": 40, "trivia": 40, "extra": 200}

    def stage(name, fn):
        if name not in stages:
            return
        left = args.budget - (time.perf_counter() - T0)
        if left < cost[name]:
            b.data["errors"].append(f"{name}: skipped, {left:.0f} s left of the budget")
            log(f"skip {name}: {left:.0f} s left")
            return
        t = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # keep the other stages' rows
            b.data["errors"].append(f"{name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}")
            log(f"stage {name} failed: {exc}")
            traceback.print_exc()
        b.data["stages"].setdefault("seconds", {})[name] = time.perf_counter() - t
        b.save()

    stage("zero", lambda: zero_rows(b, lm, nq, args, "nb", ["bm25", "hybrid"]))

    def row(d: Data, lang: str, label: str, mode: str, k: int, retriever: str | None = None) -> None:
        """A row of `b`: d's test questions answered by `lm` in `mode` with k passages of `retriever`
        (None: none handed over)."""
        c = cfg_for(mode, k, args, lang)
        passages = None if retriever is None else d.passages("test", retriever)
        named = {} if retriever is None else {"retriever": retriever}
        b.row(d.name, label, run_rag(lm, d.qs["test"], passages, c), c, **named)

    def cbft():
        b.data["stages"]["cbft_train"] = finetune(lm, base_sd, nq.qs["train"], None, 3, args)
        row(nq, "nb", "CB-FT closed-book", "closed-book", 3)

    stage("cbft", cbft)

    def ragft():
        b.data["stages"]["ragft_train"] = finetune(
            lm, base_sd, nq.qs["train"], nq.passages("train", "hybrid"), 3, args
        )
        for r in ("hybrid", "bm25", "dense"):
            row(nq, "nb", f"RAG-FT rag k=3 {r}", "rag", 3, r)
        row(nq, "nb", "RAG-FT oracle", "oracle", 1)
        row(nq, "nb", "RAG-FT replug k=3 hybrid", "replug", 3, "hybrid")
        row(nq, "nb", "RAG-FT closed-book", "closed-book", 3)

    stage("ragft", ragft)
    stage("lsr", lambda: lsr_stage(b, lm, nq, args))
    stage("speed", lambda: speed_stage(b, lm, nq, args))

    def trivia():
        tv = Data(args.prep, "trivia", args.limit, args.train_limit)
        lm.model.load_state_dict(base_sd)
        zero_rows(b, lm, tv, args, "en", ["bm25"])
        b.data["stages"]["trivia_cbft_train"] = finetune(lm, base_sd, tv.qs["train"], None, 3, args)
        row(tv, "en", "CB-FT closed-book", "closed-book", 3)
        b.data["stages"]["trivia_ragft_train"] = finetune(
            lm, base_sd, tv.qs["train"], tv.passages("train", "bm25"), 3, args
        )
        row(tv, "en", "RAG-FT rag k=3 bm25", "rag", 3, "bm25")
        row(tv, "en", "RAG-FT oracle", "oracle", 1)

    stage("trivia", trivia)

    def extra():
        b.data["stages"]["ragft_gold_mix_train"] = finetune(
            lm, base_sd, nq.qs["train"], nq.passages("train", "hybrid"), 3, args, gold="mix"
        )
        row(nq, "nb", "RAG-FT (gold mixed in) rag k=3 hybrid", "rag", 3, "hybrid")
        b.data["stages"]["ragft_lora_train"] = finetune(
            lm, base_sd, nq.qs["train"], nq.passages("train", "hybrid"), 3, args, lora_r=16
        )
        row(nq, "nb", "RAG-FT LoRA r=16 rag k=3 hybrid", "rag", 3, "hybrid")

    stage("extra", extra)
    log("done")
    b.save()


if __name__ == "__main__":
    main()
