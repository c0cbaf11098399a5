"""`rag_qa.py report`: the device run's JSON -> benchmarks/results/rag_qa.json and rag_qa.md."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.common import RESULTS, write_result

COLUMNS = ("em", "f1", "contains", "recall@1", "recall@3", "recall@5", "seconds_per_question")


def _row_map(rows: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["dataset"], r["row"]): r for r in rows}


def table(rows: list[dict], dataset: str) -> list[str]:
    lines = [
        f"### {dataset}",
        "",
        "| row | questions | EM | F1 | contains | R@1 | R@3 | R@5 | s/question |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if r["dataset"] != dataset:
            continue
        cells = [
            f"{r[c]:.2f}" if c in r and c != "seconds_per_question" else (f"{r[c]:.3f}" if c in r else "–")
            for c in COLUMNS
        ]
        lines.append(f"| {r['row']} | {int(r['questions'])} | " + " | ".join(cells) + " |")
    return lines + [""]


def report(args) -> None:
    data = json.loads(Path(args.device_json).read_text())
    rows, st = data["rows"], data["stages"]
    if args.lsr_json is not None:  # a second device run of the lsr stage alone, with the zero-shot LM
        extra = json.loads(Path(args.lsr_json).read_text())
        st["lsr"] = {**extra["stages"]["lsr"], "supervising_lm": "zero-shot SmolLM2 (its own device run)"}
        for r in extra["rows"]:
            rows.append({**r, "row": r["row"].replace("RAG-FT ", "zero-shot ")})
        data["errors"] = [e for e in data.get("errors", []) if not e.startswith("lsr:")] + extra.get(
            "errors", []
        )
    rm = _row_map(rows)
    metrics: dict[str, float] = {}
    for r in rows:
        for c in COLUMNS:
            if c in r:
                metrics[f"{r['dataset']}/{r['row']}/{c}"] = r[c]

    def get(ds, row, m="em"):
        return rm.get((ds, row), {}).get(m)

    cb, rag = get("norquad", "CB-FT closed-book"), get("norquad", "RAG-FT rag k=3 hybrid")
    if cb is not None and rag is not None:
        metrics["norquad/ragft_em_over_cbft_em"] = round(rag / cb, 3) if cb else float("inf") if rag else 0.0
    for tag in ("zero-shot", "RAG-FT"):
        o, r3 = get("norquad", f"{tag} oracle"), get("norquad", f"{tag} rag k=3 hybrid")
        if o is not None and r3 is not None:
            metrics[f"norquad/{tag} oracle_em_minus_rag_k3_em"] = round(o - r3, 2)
    if "lsr" in st:
        rec = st["lsr"]["recall"]
        for name, vals in rec.items():
            for k, v in vals.items():
                metrics[f"norquad/lsr/{name}/{k}"] = v
        metrics["norquad/lsr/recall@5_gain_dense"] = round(
            rec["LSR dense"]["recall@5"] - rec["start dense (device, fp16 tower)"]["recall@5"], 2
        )
        metrics["norquad/lsr/recall@5_gain_hybrid"] = round(
            rec["LSR hybrid"]["recall@5"] - rec["start hybrid"]["recall@5"], 2
        )
        metrics["norquad/lsr/preference_seconds"] = round(st["lsr"]["preference_seconds"], 1)
        metrics["norquad/lsr/train_seconds"] = round(st["lsr"]["train"]["seconds"], 1)
    for key in (
        "cbft_train",
        "ragft_train",
        "ragft_gold_mix_train",
        "ragft_lora_train",
        "trivia_cbft_train",
        "trivia_ragft_train",
    ):
        if key in st:
            metrics[f"finetune/{key}/seconds"] = round(st[key]["seconds"], 1)
            metrics[f"finetune/{key}/steps"] = st[key]["steps"]
            metrics[f"finetune/{key}/final_loss"] = round(st[key]["final_loss"], 4)
    if "speed" in st:
        sp = st["speed"]
        metrics["speed/ours_over_bare_generate_sorted"] = round(sp["ours_vs_bare_sorted"], 3)
        metrics["speed/ours_over_bare_generate_file_order"] = round(sp["ours_vs_bare_file_order"], 3)
        metrics["speed/ours_seconds_per_question"] = round(sp["best"]["ours"] / sp["prompts"], 4)
    targets = {
        "norquad/ragft_em_over_cbft_em": ">= 3",
        "norquad/zero-shot oracle_em_minus_rag_k3_em": ">= 0",
        "norquad/RAG-FT oracle_em_minus_rag_k3_em": ">= 0",
        "norquad/lsr/recall@5_gain_dense": ">= 0 (LSR's answer recall@5 >= its starting retriever's)",
        "speed/ours_over_bare_generate_sorted": "<= 1.10",
    }
    env = data["meta"]["env"]
    md = [
        "# RAG QA with SmolLM2-135M-Instruct (issue 27)",
        "",
        f"Device: {env.get('cuda') or 'CPU'}; torch {env['torch']}, transformers {env['transformers']}. "
        "EM/F1/contains in percent; R@k: answer recall of the passages the row used.",
        "",
    ]
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        md += table(rows, ds)
    if "lsr" in st:
        md += [
            "### REPLUG LSR (answer recall on the 472 test questions)",
            "",
            "| retriever | R@1 | R@5 | R@20 |",
            "| --- | --- | --- | --- |",
        ]
        md += [
            f"| {n} | {v['recall@1']:.2f} | {v['recall@5']:.2f} | {v['recall@20']:.2f} |"
            for n, v in st["lsr"]["recall"].items()
        ]
        md.append("")
    if data.get("errors"):
        md += (
            ["### Stages that failed or were skipped", ""]
            + [f"- {e.splitlines()[0]}" for e in data["errors"]]
            + [""]
        )
    (RESULTS / "rag_qa.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    write_result(
        "rag_qa",
        "python -m benchmarks.rag.rag_qa prep && python -m benchmarks.rag.rag_qa pack && (device) PYTHONPATH=src python -m benchmarks.rag.rag_qa_device "
        "--prep .devC/prep --gguf-parts .devA/part,.devB/part --out $OUT && python -m benchmarks.rag.rag_qa report --device-json OUT/rag_qa_device.json",
        metrics,
        targets,
        device=env.get("cuda") or "CPU",
        device_env=env,
        stages={k: v for k, v in st.items() if k != "lsr"},
        lsr=st.get("lsr"),
        errors=[e.splitlines()[0] for e in data.get("errors", [])],
        device_seconds=data["meta"].get("elapsed_s"),
    )
