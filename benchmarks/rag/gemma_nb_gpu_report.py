"""`python -m benchmarks.rag.gemma_nb_gpu report`: benchmarks/results/gemma_nb_gpu.{json,md} from a GPU run.

The run is `collect`'s tarball, unpacked (default runs/b36gpu-h200): each cell's results.json and
train.json, and device.json (the card, torch, CUDA, the run's seconds).
"""

from __future__ import annotations

import json

from benchmarks.common import RESULTS, logger, write_result

log = logger("gemma_nb_gpu report", stdout=True, clock=False)


ROWS = {  # label -> the cell's results folder under the unpacked run
    "gemma rag-ft rag k=3": "ft-gemma-eval/rag-k3",
    "smollm2 rag-ft rag k=3": "ft-smollm2-eval/rag-k3",
    "gemma rag-ft oracle": "ft-gemma-eval/oracle",
    "smollm2 rag-ft oracle": "ft-smollm2-eval/oracle",
    "gemma zero-shot closed-book": "zs-gemma-rest/closed-book",
    "gemma zero-shot rag k=1": "zs-gemma-rest/rag-k1",
    "gemma zero-shot rag k=5": "zs-gemma-rest/rag-k5",
    "gemma zero-shot replug k=3": "zs-gemma-rest/replug-k3",
    "gemma zero-shot oracle": "zs-gemma-oracle",
    "gemma closed-book-ft": "cbft-gemma-eval",
    "bm25 top 1 (rag-ft gemma reads it)": "upr-bm25",
    "upr: rag-ft gemma reranks bm25's top 20": "upr-ftgemma",
}
NOT_RUN = {  # why a row of CELLS has no result in the first H200 run (2026-11-26)
    "dpr-gemma": "failed at start: bm25s imported JAX, whose XLA reserved 105 GiB of the GPU (75%), and "
    "moving the Gemma-3 towers onto it ran out of memory (fixed: ralm.retrieval keeps XLA from preallocating)",
    "cbft-gemma": "stopped at step 200 of 952 to give the two RAG fine-tuning runs the GPU",
    "gemma zero-shot replug k=3": "stopped at the device call's limit (the machine's last minutes)",
}


def cmd_report(a) -> int:
    """benchmarks/results/gemma_nb_gpu.json and .md from an unpacked run (`collect`'s tarball)."""

    run = a.run
    dev = json.loads((run / "device.json").read_text())
    rows = {}
    for label, rel in ROWS.items():
        f = run / rel / "results.json"
        if f.is_file():
            m = json.loads(f.read_text())["metrics"]
            rows[label] = {
                k: round(v, 2)
                for k, v in m.items()
                if k in ("em", "f1", "contains", "recall@1", "recall@3", "seconds_per_question")
            }
    m: dict[str, float] = {}
    for key in ("gemma", "smollm2"):
        for what, label in (("ragft", "rag-ft rag k=3"), ("ragft_oracle", "rag-ft oracle")):
            r = rows.get(f"{key} {label}")
            if r:
                m[f"{key}_{what}_em_3808q"], m[f"{key}_{what}_f1_3808q"] = r["em"], r["f1"]
        t = run / f"ft-{key}" / "train.json"
        if t.is_file():
            st = json.loads(t.read_text())["stats"]
            m[f"{key}_ragft_train_seconds"] = round(st["seconds"], 1)
            m[f"{key}_ragft_train_tokens_per_s"] = round(st["tokens"] / st["seconds"], 1)
    for label, key in (
        ("closed-book", "closedbook"),
        ("rag k=1", "rag_k1"),
        ("rag k=5", "rag_k5"),
        ("oracle", "oracle"),
    ):
        if f"gemma zero-shot {label}" in rows:
            m[f"gemma_zeroshot_{key}_f1"] = rows[f"gemma zero-shot {label}"]["f1"]
    if "upr: rag-ft gemma reranks bm25's top 20" in rows:
        m["upr_bm25_recall@1"] = rows["bm25 top 1 (rag-ft gemma reads it)"]["recall@1"]
        m["upr_ftgemma_recall@1"] = rows["upr: rag-ft gemma reranks bm25's top 20"]["recall@1"]
    ratio = m.get("gemma_ragft_em_3808q", 0) / max(m.get("smollm2_ragft_em_3808q", 0), 1e-9)
    m["gemma_over_smollm2_ragft_em_3808q"] = round(ratio, 2)
    targets = {
        "gemma_over_smollm2_ragft_em_3808q": f">= 1.5 (the issue's bar, same budget): {'met' if ratio >= 1.5 else 'not met'}",
        "upr_ftgemma_recall@1": f"no bar; BM25's own order gives upr_bm25_recall@1 "
        f"({'raised' if m.get('upr_ftgemma_recall@1', 0) > m.get('upr_bm25_recall@1', 0) else 'lowered'})",
    }
    write_result(
        "gemma_nb_gpu",
        "python -m benchmarks.rag.gemma_nb_gpu prep; on the GPU: stash p00..p06, start, collect (see the module "
        "docstring); python -m benchmarks.rag.gemma_nb_gpu report --run DIR",
        m,
        targets,
        machine=f"{dev['device']} (a lent device; torch {dev['torch']}, CUDA {dev['cuda']}, transformers 5.24.0 "
        "carried), the cells as parallel processes on the one GPU",
        rows=rows,
        not_run={k: v for k, v in NOT_RUN.items() if k not in rows},
        settings={
            "train_questions": 3808,
            "test_questions": 472,
            "pool_chunks": 5859,
            "k": 3,
            "lora_r": 16,
            "batch_size": 4,
            "epochs": 1,
            "generation_retrieval": "the same hybrid files as gemma_nb.py",
            "run_seconds": dev["seconds"],
            "run_date": dev["date"],
        },
    )
    md = [
        f"# Gemma-3-270M vs SmolLM2-135M on all 3,808 NorQuAD train questions ({dev['device']})",
        "",
        "| row | EM | F1 | contains | recall@1 | s/question |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, r in rows.items():
        md.append(
            f"| {label} | {r['em']:.2f} | {r['f1']:.2f} | {r['contains']:.2f} | "
            f"{r.get('recall@1', float('nan')):.2f} | {r['seconds_per_question']:.3f} |"
        )
    md += ["", *[f"- not measured: {k}: {v}" for k, v in NOT_RUN.items() if k not in rows]]
    (RESULTS / "gemma_nb_gpu.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    log(json.dumps(m, indent=1))
    return 0
