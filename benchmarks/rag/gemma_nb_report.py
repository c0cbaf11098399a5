"""`python -m benchmarks.rag.gemma_nb report`: benchmarks/results/gemma_nb.{json,md} from the cells' folders
under --work (and the GPU rows of benchmarks/results/gemma_nb_gpu.json, where a GPU run wrote them)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.common import RESULTS, logger, write_result

LMS = {"gemma": "gemma3", "smollm2": "smollm2"}  # the generators: key -> `ralm rag eval --lm` name
log = logger("gemma_nb", stdout=True)


def done(d: Path) -> bool:
    """Whether a cell's folder holds its results.json."""
    return (d / "results.json").is_file()


def _metrics(d: Path) -> dict:
    return json.loads((d / "results.json").read_text())["metrics"]


def report(a) -> None:
    w = a.work
    m: dict[str, float] = {}
    rows: dict[str, dict] = {}

    def take(label: str, d: Path) -> None:
        if done(d):
            r = _metrics(d)
            rows[label] = {
                k: round(r[k], 2) for k in ("em", "f1", "contains", "seconds_per_question") if k in r
            }

    for key in LMS:
        take(f"{key} zero-shot rag k=3", w / f"zs-{key}-k3")
        for sub, label in (
            ("closed-book", "closed-book"),
            ("rag-k1", "rag k=1"),
            ("rag-k5", "rag k=5"),
            ("replug-k3", "replug k=3"),
        ):
            take(f"{key} zero-shot {label}", w / f"zs-{key}-rest" / sub)
        take(f"{key} zero-shot oracle", w / f"zs-{key}-oracle")
        take(f"{key} rag-ft rag k=3", w / f"ft-{key}-eval" / "rag-k3")
        take(f"{key} rag-ft oracle", w / f"ft-{key}-eval" / "oracle")
        take(f"{key} closed-book-ft", w / f"cbft-{key}-eval")
    for key in LMS:
        if f"{key} rag-ft rag k=3" in rows:
            m[f"{key}_ragft_em"] = rows[f"{key} rag-ft rag k=3"]["em"]
        if f"{key} zero-shot rag k=3" in rows:
            m[f"{key}_zeroshot_rag_f1"] = rows[f"{key} zero-shot rag k=3"]["f1"]
    retrieval: dict[str, dict] = {}
    # two LSR runs on the same 150 questions' preferences: the CLI defaults (1 epoch at batch 32: 5
    # steps), and 10 epochs at batch 8 (190 steps, the step count of rag_qa's H200 LSR run); the
    # longer one gives the metric when it exists
    for name in ("lsr", "lsr-190steps"):
        if (w / name / "results.json").is_file():
            r = json.loads((w / name / "results.json").read_text())
            retrieval[name] = r
            m["lsr_dense_recall@5_before"] = round(100 * r["before"]["recall@5"], 2)
            m["lsr_dense_recall@5_after"] = round(100 * r["after"]["recall@5"], 2)
            tag = {"lsr": "lsr_5steps", "lsr-190steps": "lsr_190steps"}[name]
            m[f"{tag}_dense_recall@1_after"] = round(100 * r["after"]["recall@1"], 2)
            m[f"{tag}_dense_recall@5_after"] = round(100 * r["after"]["recall@5"], 2)
    for tower, label in (("gemma", "gemma"), ("minilm", "minilm")):
        f = w / f"dpr-{tower}" / "eval.json"
        if f.is_file():
            r = json.loads(f.read_text())
            retrieval[f"dpr-{tower}"] = r
            m[f"{label}_dpr_recall@5"] = round(100 * r[tower]["recall@5"], 2)
            if tower == "gemma":
                m["fused_gemma_dpr_recall@5"] = round(100 * r["fused:gemma"]["recall@5"], 2)
    for tower in ("gemma", "minilm"):
        f = w / f"dpr-{tower}" / "eval.json"
        if f.is_file():
            for k, v in json.loads(f.read_text())["_speed"].items():
                if isinstance(v, int | float):  # metrics are plain numbers; notes stay in `retrieval`
                    m[f"{tower}_dpr_{k}"] = v
    da = w / "transfer-da" / "results.json"  # the Danish transfer rows (40 questions, 2,172 chunks)
    if da.is_file():
        r = json.loads(da.read_text())
        retrieval["transfer-da"] = {k: v for k, v in r.items() if not k.startswith("_")}
        for name in ("gemma", "minilm", "fused:gemma", "fused:minilm", "bm25:da"):
            tag = name.replace("fused:", "fused_").replace("bm25:da", "bm25_da")
            m[f"da_{tag}_recall@5"] = round(100 * r[name]["recall@5"], 2)
            m[f"da_{tag}_recall@20"] = round(100 * r[name]["recall@20"], 2)
    gpu = RESULTS / "gemma_nb_gpu.json"  # the 3,808-question rows of a lent GPU (gemma_nb_gpu.py)
    if gpu.is_file():
        gm = json.loads(gpu.read_text())["metrics"]
        for k in ("gemma_ragft_em_3808q", "smollm2_ragft_em_3808q", "gemma_over_smollm2_ragft_em_3808q"):
            if k in gm:
                m[f"{k}_gpu"] = gm[k]
    targets = {
        "gemma_ragft_em": ">= 1.5 x smollm2_ragft_em (same budget)",
        "gemma_zeroshot_rag_f1": ">= 3 x smollm2_zeroshot_rag_f1",
        "lsr_dense_recall@5_after": ">= lsr_dense_recall@5_before + 1",
        "gemma_dpr_recall@5": ">= minilm_dpr_recall@5 + 5 (same recipe and epochs)",
        "fused_gemma_dpr_recall@5": ">= 85.9 (Norwegian BM25's 80.9 + 5)",
    }
    verdict = {}
    if {"gemma_ragft_em", "smollm2_ragft_em"} <= m.keys():
        verdict["gemma_ragft_em"] = m["gemma_ragft_em"] >= 1.5 * m["smollm2_ragft_em"]
    if {"gemma_zeroshot_rag_f1", "smollm2_zeroshot_rag_f1"} <= m.keys():
        verdict["gemma_zeroshot_rag_f1"] = m["gemma_zeroshot_rag_f1"] >= 3 * m["smollm2_zeroshot_rag_f1"]
    if "lsr_dense_recall@5_after" in m:
        verdict["lsr_dense_recall@5_after"] = (
            m["lsr_dense_recall@5_after"] >= m["lsr_dense_recall@5_before"] + 1
        )
    if {"gemma_dpr_recall@5", "minilm_dpr_recall@5"} <= m.keys():
        verdict["gemma_dpr_recall@5"] = m["gemma_dpr_recall@5"] >= m["minilm_dpr_recall@5"] + 5
    if "fused_gemma_dpr_recall@5" in m:
        verdict["fused_gemma_dpr_recall@5"] = m["fused_gemma_dpr_recall@5"] >= 85.9
    write_result(
        "gemma_nb",
        "python -m benchmarks.rag.gemma_nb prep zs-gemma-k3 zs-smollm2-k3 ft-gemma ft-smollm2 lsr dpr-minilm dpr-gemma "
        "zs-gemma-rest zs-gemma-oracle cbft-gemma report",
        m,
        {
            k: f"{v} ({'met' if verdict[k] else 'not met'})" if k in verdict else f"{v} (not measured)"
            for k, v in targets.items()
        },
        rows=rows,
        retrieval=retrieval,
        settings={
            "train_questions": a.train_questions,
            "lsr_questions": a.lsr_questions,
            "dpr_questions": a.dpr_questions,
            "dpr_epochs": a.dpr_epochs,
            "test_questions": 472,
            "pool_chunks": 5859,
            "generation_retrieval": "BM25 nb 0.7 + dpr-cc 0.3, weighted min-max, top 20 per question",
            "device": "cpu, 1 thread per job",
        },
    )
    (RESULTS / "gemma_nb.md").write_text(markdown(rows, retrieval, m), encoding="utf-8")
    log(json.dumps(m, indent=1))


def markdown(rows: dict, retrieval: dict, m: dict) -> str:
    """benchmarks/results/gemma_nb.md: the generator rows, then the retrieval rows."""
    out = [
        "# Gemma-3-270M in every role, NorQuAD-open (472 test questions, 5,859-chunk pool)",
        "",
        "| row | EM | F1 | contains | s/question |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, r in rows.items():
        out.append(
            f"| {label} | {r.get('em', 0):.2f} | {r.get('f1', 0):.2f} | {r.get('contains', 0):.2f} | "
            f"{r.get('seconds_per_question', 0):.2f} |"
        )
    out += ["", "| retriever | recall@1 | recall@5 | recall@20 | hub@20 |", "| --- | --- | --- | --- | --- |"]
    for group, r in retrieval.items():
        for name, v in r.items():
            if not name.startswith("_"):
                out.append(
                    f"| {group}: {name} | {v['recall@1']:.3f} | {v['recall@5']:.3f} | "
                    f"{v['recall@20']:.3f} | {v['hub@20']:.3f} |"
                )
    speed = {k: v for k, v in m.items() if "_dpr_" in k and not k.endswith("recall@5")}
    if speed:
        out += ["", "| DPR towers | value |", "| --- | --- |", *[f"| {k} | {v} |" for k, v in speed.items()]]
    return "\n".join(out) + "\n"
