"""What luke_ner.py reports besides the NER rows: the corpus's entity annotation, the pre-trained
models' sizes and runs, the gold spans the span classifier can reach, and its markdown table."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from benchmarks.luke.luke_speed import VARIANTS

WORD_ONLY = "word-only"
# control row: the bundled MiniLM copied into LUKE (l = L, entity side freshly initialised) with no
# pre-training step, fine-tuned like the others: what the pre-training adds to the span classifier
INIT = "init"
LABELS = {INIT: "no pre-training (l = L)", WORD_ONLY: "word-only (MiniLM)"}


def annotation(corpus: Path) -> dict[str, Any]:
    from ralm.luke.annotations import annotation_stats

    st = annotation_stats(corpus)
    if not (st.spans.get("link") and st.spans.get("auto")):
        raise SystemExit(
            f"{corpus}: needs both link and auto spans, has {st.spans}; rebuild it with auto-annotation"
        )
    out = st.as_dict()
    print(
        f"annotation: {st.words} words; entities per 1,000 words: links {st.per_1k_words(['link']):.1f}, "
        f"links + auto {st.per_1k_words(['link', 'auto']):.1f} (DaLUKE, links alone: 5)",
        flush=True,
    )
    return out


def model_record(run: Path) -> dict[str, Any]:
    """Parameters (exact) and entity width of the model saved in RUN/model."""
    from ralm.luke.io import load_model

    model = load_model(run / "model")
    ent = model.luke.entity_embeddings
    table = ent.entity_embeddings.weight.numel() + (
        ent.entity_embedding_dense.weight.numel() if ent.entity_embedding_dense is not None else 0
    )
    return {
        "params_pretraining": sum(p.numel() for p in model.parameters()),
        "params_encoder": sum(p.numel() for p in model.luke.parameters()),
        "params_entity_table": table,
        "entity_hidden_size": model.config.entity_hidden_size,
    }


def pretrain_record(run: Path) -> dict[str, Any]:
    """Parameters (exact, from the saved model), step times and losses of a finished run."""
    from ralm.train.logging import read_metric_rows

    rows = read_metric_rows(run / "metrics.jsonl")
    first = next(r for r in rows if "parameters" in r)
    steps = [r for r in rows if "step_seconds" in r]
    k = min(20, len(steps))
    return {
        **model_record(run),
        "entity_vocab": first.get("entity_vocab"),
        "entities_per_1k_words": first["entities_per_1k_words"],
        "seconds_per_step": statistics.median(r["step_seconds"] for r in steps),
        "seconds": sum(r["step_seconds"] for r in steps),
        "steps": len(steps),
        "mlm_loss_first20": statistics.fmean(r["mlm_loss"] for r in steps[:k]),
        "mlm_loss_last20": statistics.fmean(r["mlm_loss"] for r in steps[-k:]),
        "mep_loss_first20": statistics.fmean(r["mep_loss"] for r in steps[:k]),
        "mep_loss_last20": statistics.fmean(r["mep_loss"] for r in steps[-k:]),
    }


def span_coverage(data: Path, max_eval: int, max_span: int) -> dict[str, float]:
    """Share of gold test entities with at most `max_span` words (evaluated sentences, and all)."""
    from ralm.tasks.datasets import load_task_data

    def lengths(examples) -> list[int]:
        out = []
        for ex in examples:
            n = 0
            for t in [*ex.labels, "O"]:
                if (t == "O" or t.startswith("B-")) and n:
                    out.append(n)
                n = 1 if t.startswith("B-") else (n + 1 if t.startswith("I-") and n else 0)
        return out

    test = load_task_data(str(data), "ner").splits["test"]
    ev, al = lengths(test[: max_eval or None]), lengths(test)
    return {
        "test_entities_evaluated": len(ev),
        "test_entities_within_max_span": sum(x <= max_span for x in ev) / max(len(ev), 1),
        "test_entities_within_max_span_all": sum(x <= max_span for x in al) / max(len(al), 1),
    }


def word_only_params() -> int:
    from ralm.models.encoder import load_auto
    from ralm.models.names import resolve_model_dir

    return sum(p.numel() for p in load_auto("AutoModel", resolve_model_dir(None)).parameters())


def table_md(rows: dict[str, dict], ann: dict, speed: dict, args: argparse.Namespace) -> str:
    link, both = (ann["entities_per_1k_words"][k] for k in ("link", "link+auto"))
    lines = [
        f"WNUT-17 entity F1 (test, first {args.max_eval} sentences; seeds {args.seeds}; {args.train_limit} "
        f"training sentences, {args.epochs:g} epochs). Pre-training: {args.pretrain_steps} steps x "
        f"{args.pretrain_batch} chunks of <= {args.seq} tokens, enwiki sample.",
        "",
        "| row | entity sources | l | entities / 1k words | params (encoder) | pretrain s/step "
        "| F1 mean ± std | sentences/s |",
        "|" + " --- |" * 8,
    ]
    for row, r in rows.items():
        sps = f"{r['sentences_per_s']:.1f}" if r.get("sentences_per_s") else "–"
        if row == WORD_ONLY:
            src, width, rate = "–", "–", "–"
        elif row == INIT:
            src, width, rate = "none", str(r["entity_hidden_size"]), "–"
        else:
            src = "link + auto" if VARIANTS[row][1] else "link"
            width, rate = str(r["entity_hidden_size"]), f"{both if VARIANTS[row][1] else link:.1f}"
        step = f"{r['seconds_per_step']:.2f}" if "seconds_per_step" in r else "–"
        f1 = f"{r['f1_mean']:.2f} ± {r['f1_std']:.2f}" if "f1_mean" in r else "–"
        label = VARIANTS[row][0] if row in VARIANTS else LABELS[row]
        if row == WORD_ONLY:
            label = "word-only (MiniLM token classifier)"
        lines.append(
            f"| {label} | {src} | {width} | {rate} | {r['params_encoder']:,} | {step} | {f1} | {sps} |"
        )
    if not speed:
        return "\n".join(lines) + "\n"
    lines += ["", "Step time vs the plain MLM step (same words, interleaved, medians): "]
    lines[-1] += ", ".join(f"{VARIANTS[v][0]} {x:.2f}x" for v, x in speed["ratio_to_mlm"].items())
    hf = speed.get("mlm_to_hf_bert", "–")
    lines[-1] += f" (target <= 1.3 for Baseline); mlm step / HF BertForMaskedLM step {hf}."
    return "\n".join(lines) + "\n"
