"""What rag_qa_device.py's stages share: the log line, the result collector (Bench), the prepared data
(Data), loading the LM, fine-tuning it, and a RagConfig per mode."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.common import logger
from ralm.atomic import write_text_atomic
from ralm.rag.data import RagQuestion
from ralm.rag.evaluate import RagConfig
from ralm.retrieval.base import Hit

T0 = time.perf_counter()
log = logger("device", stdout=True, since=T0)


class Bench:
    """Rows and their predictions, saved after each row."""

    def __init__(self, out: Path, meta: dict) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.data = {"meta": meta, "rows": [], "stages": {}, "errors": []}
        self.preds = {}

    def save(self) -> None:
        self.data["meta"]["elapsed_s"] = time.perf_counter() - T0
        text = json.dumps(self.data, indent=1, ensure_ascii=False) + "\n"
        write_text_atomic(self.out / "rag_qa_device.json", text)
        for ds, rows in self.preds.items():
            with gzip.open(self.out / f"predictions_{ds}.jsonl.gz", "wt", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")

    def row(self, dataset: str, label: str, run, cfg: RagConfig, **extra) -> dict:
        m = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in run.metrics.items()}
        rec = {
            "dataset": dataset,
            "row": label,
            "mode": cfg.mode,
            "k": cfg.k,
            **m,
            **extra,
            "notes": run.notes,
        }
        self.data["rows"].append(rec)
        keep_prompt = label in ("zero-shot rag k=3 hybrid", "RAG-FT rag k=3 hybrid", "zero-shot rag k=3 bm25")
        self.preds.setdefault(dataset, []).extend(
            {"row": label, **{k: v for k, v in r.items() if k != "prompt" or keep_prompt}}
            for r in run.records
        )
        log(
            f"{dataset} | {label}: EM {m.get('em', 0):.2f} F1 {m.get('f1', 0):.2f} contains {m.get('contains', 0):.2f} "
            f"R@k {[v for k, v in m.items() if k.startswith('recall@')]} ({m['seconds_per_question']:.3f} s/q)"
        )
        self.save()
        return rec


class Data:
    """Questions, chunk texts and retrieval lists of one dataset from the prep folder."""

    def __init__(self, prep: Path, name: str, limit: int | None, train_limit: int | None) -> None:
        self.prep, self.name = prep, name
        self.chunks = json.loads((prep / f"{name}_chunks.json").read_text())
        self.qs = {}
        self.index = {}
        for split, lim in (("test", limit), ("train", train_limit)):
            rows = json.loads((prep / f"{name}_{split}.json").read_text())[:lim]
            self.qs[split] = [RagQuestion(r["id"], r["question"], r["answers"], gold=r["gold"]) for r in rows]

    def lists(self, split: str, retriever: str) -> tuple[np.ndarray, np.ndarray]:
        z = np.load(self.prep / f"{self.name}_{split}_{retriever}.npz")
        n = len(self.qs[split])
        return z["ids"][:n].astype(np.int64), z["scores"][:n].astype(np.float64)

    def passages(self, split: str, retriever: str, depth: int = 20, lists=None) -> list[list[Hit]]:
        ids, scores = lists if lists is not None else self.lists(split, retriever)
        return [
            [
                Hit(int(c), float(s), *self.chunks[int(c)], rank=r)
                for r, (c, s) in enumerate(
                    ((c, s) for c, s in zip(ri[:depth], rs[:depth], strict=True) if c >= 0), start=1
                )
            ]
            for ri, rs in zip(ids, scores, strict=True)
        ]


def load_lm(args):
    from ralm.frozen.lm import load_frozen_lm

    if args.gguf_parts:
        path = Path("/tmp/rag_qa_lm/SmolLM2-135M-Instruct.Q4_1.gguf")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            for part in args.gguf_parts.split(","):
                f.write(Path(part).read_bytes())
        spec = path
    else:
        spec = args.lm
    lm = load_frozen_lm(spec, device=args.device, autocast=args.autocast)
    log(
        f"LM {spec} on {lm.device} ({lm.dtype_name}); {sum(p.numel() for p in lm.model.parameters()) / 1e6:.1f}M parameters"
    )
    return lm


def finetune(lm, base_sd, qs, ps, k, args, *, gold="off", lora_r=0, lr=None):
    """Fine-tune a fresh copy of the base weights; returns (stats). The model is left trained in lm.model."""
    from ralm.rag.finetune import GeneratorTrainConfig, train_generator, training_examples
    from ralm.rag.prompt import PromptBuilder

    lm.model.load_state_dict(base_sd)
    builder = PromptBuilder(lm.tokenizer, 1024)
    ex = training_examples(builder, qs, ps, k, gold=gold, seed=0)
    cfg = GeneratorTrainConfig(
        epochs=args.epochs,
        lr=lr or (2e-4 if lora_r else args.lr),
        batch_size=args.train_batch,
        lora_r=lora_r,
        seed=0,
    )
    model, stats = train_generator(
        lm.model, lm.tokenizer, ex, cfg, device=lm.device, autocast=lm.autocast, log=log
    )
    lm.model = model
    for p in lm.model.parameters():
        p.requires_grad_(False)
    stats["truncated_prompts"] = builder.truncated
    stats["config"] = {
        "epochs": cfg.epochs,
        "lr": cfg.lr,
        "batch_size": cfg.batch_size,
        "lora_r": lora_r,
        "gold": gold,
        "k": k,
    }
    log(
        f"fine-tuned: {stats['steps']} steps, {stats['seconds']:.0f} s, loss {stats['first_loss']:.3f} -> {stats['final_loss']:.3f}"
    )
    return stats


def cfg_for(mode: str, k: int, args, lang: str) -> RagConfig:
    return RagConfig(mode=mode, k=k, max_new_tokens=20, batch_size=args.batch_size, lang=lang)
