"""LUKE/DaLUKE where entities help (issue 47): the probe, the masked-entity curves, NER rows apart.

Stages (each reused from --work when its output exists):
1. probe: at initialisation (MiniLM copied into LUKE, l = L), WNUT-17 training sentences with every
   candidate span as a [MASK] entity (what NER feeds the encoder): the cosine of the word states to
   the plain encoder's (no entity tokens), per layer and at the end, for the joint softmax (LUKE,
   HF) and for the separate softmaxes with the word-to-entity gate at 0 (the new default).
2. pretrain: `ralm luke pretrain` with the new defaults (separate softmaxes, the entity side first
   for half the steps at 1e-3, entities with >= --min-mentions mentions, links + auto-annotation) at
   l = L ("luke") and l = --entity-width ("luke-reduced"), the enwiki sample in 128-token chunks.
   Masked-entity loss and accuracy per step are in each run's metrics.jsonl; masked-entity accuracy on
   fixed masks of --mep-chunks chunks (the same masks before and after) gives the gain.
3. ner: WNUT-17, --seeds seeds, the same budget for every row (`luke_ner.py`'s: 1,000 training
   sentences, 3 epochs, batch 8, lr 1e-4, heads 1e-3): the two LUKE rows (threshold decoding on
   1 - P(O), tuned on dev), the words-only span classifier on the luke run's encoder (same head,
   budget and decoding, no entity tokens), and the word-only token tagger (MiniLM, `ralm finetune ner`).
4. report: benchmarks/results/luke_entities.json (--name) with precision, recall and F1 per row.

Run: python -m benchmarks.luke.luke_entities [--work runs/luke_entities] [--pretrain-steps 300] [--seeds 1,2,3]
WNUT-17 is read from ../shared/data/wnut17 (--data).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, logger, ralm_logged, script_command, write_result
from benchmarks.luke.luke_ner import DATA, ensure_corpus, luke_ner_argv, token_ner_argv
from benchmarks.luke.luke_speed import pretrain_argv, pretrain_collator

ROWS = ("luke", "luke-reduced", "words-only-span", "token")
log = logger(stdout=True)


def pretrain_flags(args, row: str) -> list[str]:
    sets = {
        "max_seq_length": args.seq,
        "checkpoint_every": 0,
        "keep_checkpoints": 1,
        "auto_annotation": "true",
        "entity_attention": '"separate"',
        "entity_first_steps": args.pretrain_steps // 2,
        "entity_first_lr": args.entity_first_lr,
        "entity_min_mentions": args.min_mentions,
    }
    if row == "luke-reduced":
        sets["entity_hidden_size"] = args.entity_width
    return [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]


def pretrain(args, corpus: Path, work: Path, row: str, logf: Path) -> Path:
    run = work / "pretrain" / row
    if (run / "model" / "config.json").is_file():
        return run
    flag = ["--resume"] if (run / "config.toml").is_file() else []
    log(f"pretrain {row}: {args.pretrain_steps} steps")
    ralm_logged([*pretrain_argv(corpus, run, args), *pretrain_flags(args, row), *flag], logf)
    return run


# ----------------------------------------------------------------------------- probe
def probe(args, corpus: Path, n: int = 64) -> dict[str, Any]:
    """Word-state cosine to the plain encoder at initialisation, NER-style inputs (see the docstring)."""
    import torch

    from ralm.luke.init import from_bert
    from ralm.luke.spans import chunk_rows, collate, encode_sentences
    from ralm.tasks.datasets import load_task_data

    sents = load_task_data(args.data, "ner").splits["train"][:n]
    out: dict[str, Any] = {}
    for mode in ("joint", "separate"):
        torch.manual_seed(0)
        model = from_bert(None, entity_vocab_size=10000, entity_attention=mode, seed=42).luke.eval()
        tok = _tokenizer()
        feats, _ = encode_sentences(
            tok, sents, ["O", "X"], max_length=128, max_span_length=args.max_span_length
        )
        rows = chunk_rows(feats, range(len(feats)), 128)
        cos, per_layer, ents, words = [], None, 0, 0
        for r in rows:
            b = collate([r], feats, tok.pad_token_id, model.config.max_mention_length)
            with torch.no_grad():
                plain = _states(model, b, entities=False)
                withe = _states(model, b, entities=True)
            m = b["attention_mask"][0].bool()
            sims = [
                torch.nn.functional.cosine_similarity(a[0][m], c[0][m], dim=-1).mean().item()
                for a, c in zip(plain, withe, strict=True)
            ]
            per_layer = [x + y for x, y in zip(per_layer, sims, strict=True)] if per_layer else sims
            cos.append(sims[-1])
            ents += int(b["entity_attention_mask"].sum())
            words += int(m.sum())
        out[mode] = {
            "final_cosine": sum(cos) / len(cos),
            "per_layer": [x / len(rows) for x in per_layer],
            "entities_per_word": ents / max(words, 1),
            "rows": len(rows),
        }
    return out


def _tokenizer():
    from ralm.models.names import resolve_model_dir
    from ralm.models.tokenizers import load_tokenizer

    return load_tokenizer(resolve_model_dir(None))


def _states(model, batch, *, entities: bool) -> list:
    """Word states after each layer (a list of (1, T, L)) of a collated NER row, with or without its entities."""
    words = model.embeddings(batch["input_ids"], torch_zeros_like(batch["input_ids"]))
    if entities:
        ents = model.entity_embeddings(
            batch["entity_ids"], batch["entity_position_ids"], torch_zeros_like(batch["entity_ids"])
        )
        key = torch_cat(batch["attention_mask"], batch["entity_attention_mask"])
    else:
        ents = words[:, :0, : model.config.entity_hidden_size]
        key = batch["attention_mask"].bool()
    out = []
    for layer in model.encoder.layer:
        words, ents = layer(words, ents, key)
        out.append(words)
    return out


def torch_zeros_like(x):
    import torch

    return torch.zeros_like(x)


def torch_cat(a, b):
    import torch

    return torch.cat([a, b], dim=1).bool()


# ----------------------------------------------------------------------------- masked entities
def masked_entity_accuracy(model, corpus: Path, run_cfg, n_chunks: int | None) -> float:
    """Masked-entity accuracy of a LukeForPretraining on fixed masks (generator [7, chunk id]) of the
    first `n_chunks` non-empty chunks of the run's corpus (None: all of them)."""
    import numpy as np
    import torch

    from ralm.luke.pretrain_run import prepare

    prep = prepare(run_cfg)
    col = pretrain_collator(prep, run_cfg, with_entities=True)
    ids = np.flatnonzero(prep.store.lengths() > 0)[:n_chunks]
    ok = n = 0
    model.eval()
    for lo in range(0, len(ids), 16):
        part = ids[lo : lo + 16]
        batch = col(part, [np.random.default_rng([7, int(i)]) for i in part])
        with torch.no_grad():
            out = model(
                **{
                    k: batch[k]
                    for k in (
                        "input_ids",
                        "attention_mask",
                        "entity_ids",
                        "entity_attention_mask",
                        "entity_position_ids",
                    )
                }
            )
        y = batch["entity_labels"]
        keep = y != -100
        ok += int((out["entity_logits"].argmax(-1)[keep] == y[keep]).sum())
        n += int(keep.sum())
    return ok / max(n, 1)


def mep(args, corpus: Path, run: Path) -> dict[str, float]:
    from ralm.luke.io import load_model
    from ralm.luke.pretrain_run import prepare, read_run_config

    cfg = read_run_config(run)
    start = masked_entity_accuracy(prepare(cfg).model, corpus, cfg, args.mep_chunks)
    end = masked_entity_accuracy(load_model(run / "model"), corpus, cfg, args.mep_chunks)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "mep_loss" in r]
    return {
        "acc_start": start,
        "acc_end": end,
        "acc_gain": end - start,
        "mep_loss_first20": sum(r["mep_loss"] for r in steps[:20]) / max(len(steps[:20]), 1),
        "mep_loss_last20": sum(r["mep_loss"] for r in steps[-20:]) / max(len(steps[-20:]), 1),
        "mep_acc_first20": sum(r["mep_acc"] for r in steps[:20]) / max(len(steps[:20]), 1),
        "mep_acc_last20": sum(r["mep_acc"] for r in steps[-20:]) / max(len(steps[-20:]), 1),
        "entity_vocab": next((r["entity_vocab"] for r in rows if "entity_vocab" in r), 0),
        "curve": [[r["step"], r["mep_loss"], r["mep_acc"]] for r in steps],
    }


# ----------------------------------------------------------------------------- NER
def ner(args, row: str, work: Path, logf: Path) -> dict[str, Any]:
    out = work / "ner" / row
    if not (out / "results.json").is_file():
        if row == "token":
            cmd = token_ner_argv(args, out, row)
        else:
            run = work / "pretrain" / ("luke-reduced" if row == "luke-reduced" else "luke")
            words_only = ["--words-only"] if row == "words-only-span" else []
            cmd = luke_ner_argv(args, run, out, row, "--decode", args.decode, *words_only)
        log(f"ner {row}")
        ralm_logged(cmd, logf)
    res = json.loads((out / "results.json").read_text())
    return res


def summary(res: dict) -> dict[str, float]:
    """Mean and std over seeds of test precision, recall and F1 (results.json of `ralm finetune`/`luke ner`)."""
    import statistics

    seeds = res.get("seeds") or res.get("runs") or []
    out: dict[str, float] = {}
    for key in ("precision", "recall", "f1"):
        vals = [float(s["test"][key]) for s in seeds if "test" in s and key in s["test"]]
        if vals:
            out[key] = statistics.mean(vals)
            out[f"{key}_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
    out["seeds"] = float(len(seeds))
    thr = [s["threshold"] for s in seeds if "threshold" in s]
    if thr:
        out["threshold_mean"] = sum(thr) / len(thr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "luke_entities"))
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--pretrain-steps", type=int, default=300)
    ap.add_argument("--pretrain-batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--entity-width", type=int, default=120)
    ap.add_argument("--entity-first-lr", type=float, default=1e-3)
    ap.add_argument("--min-mentions", type=int, default=3)
    ap.add_argument("--mep-chunks", type=int, default=256)
    ap.add_argument("--decode", default="threshold", choices=("argmax", "threshold"))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--train-limit", type=int, default=1000)
    ap.add_argument("--max-eval", type=int, default=300)
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--lr-head", type=float, default=1e-3)
    ap.add_argument("--schedule", default="linear")
    ap.add_argument("--warmup-ratio", type=float, default=0.06)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--max-span-length", type=int, default=5)
    ap.add_argument("--corpus", type=Path, help="a built enwiki DocStore (default: built under --work)")
    ap.add_argument("--name", default="luke_entities")
    ap.add_argument("--metric-prefix", default="")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    logf = work / "log.txt"
    corpus = args.corpus or ensure_corpus(work, logf)
    rows = args.rows.split(",")
    p = args.metric_prefix
    metrics: dict[str, float] = {}
    extra: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}}
    pf = work / "probe.json"
    if not pf.is_file():
        pf.write_text(json.dumps(probe(args, corpus), indent=2) + "\n", encoding="utf-8")
    pr = json.loads(pf.read_text())
    extra["probe"] = pr
    metrics[f"{p}luke_init_word_cosine"] = pr["separate"]["final_cosine"]
    metrics[f"{p}luke_init_word_cosine_joint"] = pr["joint"]["final_cosine"]
    for row in ("luke", "luke-reduced"):
        if row not in rows and not (row == "luke" and "words-only-span" in rows):
            continue
        run = pretrain(args, corpus, work, row, logf)
        mf = run / "mep.json"
        if not mf.is_file():
            mf.write_text(json.dumps(mep(args, corpus, run)) + "\n", encoding="utf-8")
        m = json.loads(mf.read_text())
        extra[f"mep_{row}"] = m
        tag = "" if row == "luke" else "_reduced"
        metrics[f"{p}luke_masked_entity_acc_gain{tag}"] = m["acc_gain"]
        metrics[f"{p}luke_masked_entity_acc_start{tag}"] = m["acc_start"]
        metrics[f"{p}luke_masked_entity_acc_end{tag}"] = m["acc_end"]
        metrics[f"{p}luke_mep_loss_first20{tag}"] = m["mep_loss_first20"]
        metrics[f"{p}luke_mep_loss_last20{tag}"] = m["mep_loss_last20"]
    names = {
        "luke": "luke_ner",
        "luke-reduced": "luke_reduced_ner",
        "words-only-span": "word_only_span_ner",
        "token": "word_only_token_ner",
    }
    for row in rows:
        s = summary(ner(args, row, work, logf))
        extra[f"ner_{row}"] = s
        for k, v in s.items():
            metrics[f"{p}{names[row]}_{k}"] = v
    if f"{p}luke_ner_f1" in metrics and f"{p}luke_reduced_ner_f1" in metrics:
        metrics[f"{p}luke_reduced_dim_f1_cost"] = (
            metrics[f"{p}luke_ner_f1"] - metrics[f"{p}luke_reduced_ner_f1"]
        )
    targets = {
        f"{p}luke_init_word_cosine": ">= 0.99",
        f"{p}luke_masked_entity_acc_gain": "> 0",
        f"{p}luke_ner_f1": f">= {p}word_only_token_ner_f1",
        f"{p}word_only_span_ner_f1": f"<= {p}luke_ner_f1 - 1",
        f"{p}luke_reduced_dim_f1_cost": "<= 1",
    }
    write_result(args.name, script_command(__file__), metrics, targets, **extra)
    for k, v in metrics.items():
        log(f"{k} = {v:.4f}")


if __name__ == "__main__":
    main()
