"""Answers at interactive speed on a CPU (issue 66): Ask's latency and quality per inference backend.

Gemma-3-270M answers NorQuAD-open questions over the NorQuAD pool (the distinct contexts of every
split in 128-token chunks, `openqa_retrievers.build_pool`) with Norwegian BM25, k = 3, on 2
threads. Cells (each writes its JSON under --work and is skipped when that exists):

  prep              the pool DocStore and the test questions (NorQuAD-open, JSONL)
  latency BACKEND   `ralm serve POOL --generator gemma3 --generator-backend BACKEND --ask-k 3` in a
                    subprocess: the seconds from its start to the first answer (model load
                    included), then --questions questions one at a time through POST /api/ask
                    (end to end: HTTP, retrieval, prompt, generation), with the server's own
                    split into retrieval and generation
  bare              the runtimes alone on the same prompts (the ones the server built): HF
                    `generate` float32 and bf16 (autocast), and llama-cpp-python's
                    `create_completion` on the same GGUF with the same prompt ids and token cap
  converted         Gemma-3's float32 weights as a Hugging Face directory through `convert-gguf`
                    (F32, Q8_0): llama.cpp's greedy answers against torch's on the latency prompts
  quality BACKEND   `ralm rag eval` on the first --quality-questions test questions, k = 3: EM, F1
                    and questions per second, per backend (torch: float32, the reference; auto:
                    the command's default, whose batches decode in torch under autocast "auto")
  report            benchmarks/results/ask_latency.json

Run: python -m benchmarks.serve.ask_latency prep latency:torch latency:torch-int8 latency:llama.cpp bare \
        converted quality:torch quality:auto quality:torch-int8 quality:llama.cpp quality:converted-q8_0 \
        report [--work runs/b66]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.common import ROOT, log, offline, ralm, script_command, write_result

offline()
from benchmarks.downstream.openqa_retrievers import build_pool  # noqa: E402
from benchmarks.serve.serve_load import Server  # noqa: E402

NORQUAD_TEST = ROOT.parent / "shared" / "data" / "norquad" / "all" / "test_dataset_flattened.json"
BACKENDS = ("torch", "torch-int8", "llama.cpp", "auto", "converted-q8_0")
CELLS = (
    "prep latency:torch latency:torch-int8 latency:llama.cpp bare converted "
    "quality:torch quality:auto quality:torch-int8 quality:llama.cpp quality:converted-q8_0 report --work runs/b66"
)
LM, K, THREADS, MAX_NEW = "gemma3", 3, 2, 32
TARGETS = {
    "ask_p50_seconds": "<= 2.0",
    "ask_p95_seconds": "<= 3.0",
    "first_answer_seconds": "<= 10",
    "f1_default_minus_torch_fp32": ">= -1.0",
    "rag_eval_questions_per_s_over_torch": ">= 3",
    "ralm_over_bare_runtime": "<= 1.10",
}


def questions(work: Path) -> list[dict]:
    return [json.loads(x) for x in (work / "test.jsonl").read_text(encoding="utf-8").splitlines() if x]


def prep(a) -> None:
    from ralm.rag.data import read_questions

    a.work.mkdir(parents=True, exist_ok=True)
    build_pool(a.work, 128)
    if not (a.work / "test.jsonl").is_file():
        rows = [{"question": q.question, "answer": list(q.answers)} for q in read_questions(NORQUAD_TEST)]
        (a.work / "test.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    log(f"prep: {len(questions(a.work))} test questions, pool {a.work / 'pool'}")


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def latency(a, backend: str) -> None:
    import httpx

    out = a.work / f"latency-{backend}.json"
    if out.is_file():
        return
    qs = questions(a.work)[: a.questions]
    env_extra = [
        "--generator",
        LM,
        "--generator-backend",
        backend,
        "--ask-k",
        str(K),
        "--ask-max-new-tokens",
        str(MAX_NEW),
    ]
    t0 = time.perf_counter()
    server = Server(a.work / "pool", THREADS, env_extra)
    rows = []
    try:
        first = None
        for i, q in enumerate(qs):
            t = time.perf_counter()
            r = httpx.post(f"{server.url}/api/ask", json={"question": q["question"]}, timeout=600)
            r.raise_for_status()
            took = time.perf_counter() - t
            if first is None:
                first = time.perf_counter() - t0
            body = r.json()
            rows.append(
                {
                    "question": q["question"],
                    "gold": q["answer"],
                    "answer": body["answer"],
                    "seconds": took,
                    "retrieve_seconds": body["retrieve_seconds"],
                    "generate_seconds": body["generate_seconds"],
                    "prompt": body["prompt"],
                }
            )
            if i % 10 == 0:
                log(f"latency {backend}: {i + 1}/{len(qs)} {took:.2f} s")
        info = server.info("generator")
    finally:
        server.stop()
    secs = [r["seconds"] for r in rows[1:]]  # the first answer is counted apart (warm-up)
    res = {
        "backend": backend,
        "server_backend": info.get("backend"),
        "first_answer_seconds": first,
        "p50_seconds": statistics.median(secs),
        "p95_seconds": percentile(secs, 0.95),
        "max_seconds": max(secs),
        "retrieve_p50_seconds": statistics.median(r["retrieve_seconds"] for r in rows[1:]),
        "generate_p50_seconds": statistics.median(r["generate_seconds"] for r in rows[1:]),
        "rows": rows,
    }
    out.write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log(
        f"latency {backend}: p50 {res['p50_seconds']:.2f} s, p95 {res['p95_seconds']:.2f} s, first {first:.1f} s"
    )


def served_prompts(a, lm) -> list[list[int]]:
    """The prompts the torch server built (latency-torch.json's `prompt` texts), as `lm`'s token ids
    the way the prompt builder encodes them (the tokenizer's ids, its BOS included)."""
    rows = json.loads((a.work / "latency-torch.json").read_text(encoding="utf-8"))["rows"]
    return [lm.tokenizer(r["prompt"], add_special_tokens=False)["input_ids"] for r in rows]


def bare(a) -> None:
    """The runtimes alone on the prompts the torch server built (its `prompt` texts, re-encoded the
    way the prompt builder encodes them: the tokenizer's ids with its BOS). Rows already in
    bare.json are kept."""
    out = a.work / "bare.json"
    res: dict = json.loads(out.read_text()) if out.is_file() else {}
    import torch

    from ralm.frozen.lm import load_frozen_lm, model_gguf
    from ralm.rag.generate import stop_token_ids

    torch.set_num_threads(THREADS)
    lm = load_frozen_lm(LM, device="cpu", autocast="off", backend="torch")
    stop = stop_token_ids(lm.tokenizer)
    prompts = served_prompts(a, lm)
    res["prompt_tokens_p50"] = statistics.median(len(p) for p in prompts)

    def hf(dtype, n: int) -> list[float]:
        times = []
        for p in prompts[:n]:
            x = torch.tensor([p])
            t = time.perf_counter()
            with (
                torch.inference_mode(),
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"),
            ):
                lm.model.generate(
                    input_ids=x,
                    attention_mask=torch.ones_like(x),
                    max_new_tokens=MAX_NEW,
                    do_sample=False,
                    eos_token_id=stop,
                    pad_token_id=stop[0],
                )
            times.append(time.perf_counter() - t)
        return times

    for dtype in ("fp32", "bf16"):
        key = f"hf_generate_{dtype}_p50_seconds"
        if key not in res:
            ts = hf(dtype, a.bare_questions)
            res[key] = statistics.median(ts)
            log(f"bare hf {dtype}: p50 {res[key]:.2f} s")
    try:
        import llama_cpp
    except ImportError:
        res["llama_cpp"] = "not installed"
    else:
        llm = llama_cpp.Llama(
            model_path=str(model_gguf(LM)),
            n_ctx=2048,
            n_threads=THREADS,
            n_threads_batch=THREADS,
            verbose=False,
        )
        # as llama.cpp users call it: the token cap alone, and the cap with a stop at the line end
        # (the bare runtime's way of ralm's first-line rule: the same work as ralm's path)
        for name, kw in (("llama_cpp", {}), ("llama_cpp_stop_newline", {"stop": ["\n"]})):
            if f"{name}_p50_seconds" in res:
                continue
            ts, gen = [], []
            for p in prompts:
                t = time.perf_counter()
                c = llm.create_completion(prompt=p, max_tokens=MAX_NEW, temperature=0.0, top_k=1, **kw)
                ts.append(time.perf_counter() - t)
                gen.append(c["usage"]["completion_tokens"])
            res[f"{name}_p50_seconds"] = statistics.median(ts)
            res[f"{name}_completion_tokens_p50"] = statistics.median(gen)
            log(f"bare {name}: p50 {statistics.median(ts):.2f} s")
        if "paired_ralm_over_bare_p50" not in res:
            paired(res, lm, llm, prompts, stop)
    out.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")


def paired(res: dict, lm, llm, prompts: list[list[int]], stop: list[int]) -> None:
    """ralm's llama.cpp path against the bare runtime on the same prompt and the same number of new
    tokens, one after the other per prompt (so that a busy moment hits both): ralm's `greedy` with
    the first-line stop through `LlamaCppDecoder`, then `create_completion` capped at the number of
    tokens ralm generated. `paired_ralm_over_bare_p50` is the median of the per-prompt ratios."""
    from ralm.frozen.backends import LlamaCppDecoder
    from ralm.rag.generate import greedy

    lm.decoder = LlamaCppDecoder(Path(llm.model_path), n_ctx=2048, threads=THREADS)
    ours, theirs, ratios = [], [], []
    for p in prompts:
        t = time.perf_counter()
        ids = greedy(lm, [p], max_new_tokens=MAX_NEW, stop_ids=stop, first_line=True)[0]
        ours.append(time.perf_counter() - t)
        n = min(MAX_NEW, len(ids) + 1)  # the tokens it decoded, the stop token included
        t = time.perf_counter()
        llm.create_completion(prompt=p, max_tokens=n, temperature=0.0, top_k=1)
        theirs.append(time.perf_counter() - t)
        ratios.append(ours[-1] / theirs[-1])
    lm.decoder = None
    res["paired_ralm_llama_cpp_p50_seconds"] = statistics.median(ours)
    res["paired_bare_llama_cpp_p50_seconds"] = statistics.median(theirs)
    res["paired_ralm_over_bare_p50"] = statistics.median(ratios)
    log(f"paired: ralm {statistics.median(ours):.2f} s, bare {statistics.median(theirs):.2f} s")


def converted(a) -> None:
    """A model trained in ralm, run by llama.cpp: Gemma-3's float32 weights as a Hugging Face
    directory (the de-quantised copy the GGUF cache holds; a fine-tuned generator or an exported
    causal reader takes the same path), through `ralm.frozen.to_gguf.convert` as F32 and as Q8_0,
    then the greedy answers (first-line stop, the same token cap) to the latency prompts: torch
    float32 on the directory against llama.cpp on each file. Writes converted.json."""
    out = a.work / "converted.json"
    if out.is_file():
        return
    import shutil

    import torch

    from ralm.frozen.backends import LlamaCppDecoder
    from ralm.frozen.lm import load_frozen_lm
    from ralm.frozen.to_gguf import convert
    from ralm.models import gguf_cache
    from ralm.models.names import resolve_lm
    from ralm.rag.generate import answer_text, greedy, stop_token_ids

    torch.set_num_threads(THREADS)
    d, name = resolve_lm(LM)
    model_dir = a.work / "gemma3-hf"
    if not (model_dir / "config.json").is_file():
        shutil.copytree(gguf_cache.lookup(d / name), model_dir)
    lm = load_frozen_lm(model_dir, device="cpu", autocast="off", backend="torch")
    stop = stop_token_ids(lm.tokenizer)
    prompts = served_prompts(a, lm)

    def answers() -> list[list[int]]:
        return [greedy(lm, [p], max_new_tokens=MAX_NEW, stop_ids=stop, first_line=True)[0] for p in prompts]

    want = answers()
    res: dict[str, float] = {"prompts": len(prompts)}
    for qtype in ("f32", "q8_0"):
        path = convert(model_dir, qtype=qtype)
        lm.decoder = LlamaCppDecoder(path, n_ctx=2048, threads=THREADS)
        got = answers()
        lm.decoder = None
        res[f"converted_{qtype}_same_tokens_as_torch"] = sum(
            x == y for x, y in zip(got, want, strict=True)
        ) / len(want)
        res[f"converted_{qtype}_same_answer_as_torch"] = sum(
            answer_text(lm.tokenizer, x) == answer_text(lm.tokenizer, y)
            for x, y in zip(got, want, strict=True)
        ) / len(want)
        log(f"converted {qtype}: {res[f'converted_{qtype}_same_answer_as_torch']:.3f} same answers")
    out.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")


def quality(a, backend: str) -> None:
    """`ralm rag eval` on backend `backend`; "converted-q8_0": llama.cpp on the Q8_0 file
    `convert-gguf` wrote for the float32 directory of the `converted` cell."""
    out = a.work / f"quality-{backend}"
    if (out / "results.json").is_file():
        return
    lm: str | Path = LM
    if backend == "converted-q8_0":
        from ralm.frozen.to_gguf import convert

        lm, backend = a.work / "gemma3-hf", "llama.cpp"
        record = json.loads((lm / "ralm-model.gguf.json").read_text(encoding="utf-8"))
        if record.get("type") != "q8_0":
            convert(lm, qtype="q8_0")
    t = time.perf_counter()
    ralm(
        "rag",
        "eval",
        a.work / "test.jsonl",
        "--lm",
        lm,
        "--corpus",
        a.work / "pool",
        "--retriever",
        "bm25",
        "--lang",
        "nb",
        "--mode",
        "rag",
        "-k",
        K,
        "--backend",
        backend,
        "--limit",
        a.quality_questions,
        "--max-new-tokens",
        MAX_NEW,
        "--out",
        out,
        "--no-progress",
        *(["--autocast", "off"] if backend == "torch" else []),  # the float32 reference
    )
    (out / "wall.json").write_text(json.dumps({"seconds": time.perf_counter() - t}) + "\n")


def predictions(out: Path) -> list[str]:
    """The answers of a `ralm rag eval` run, in question order."""
    rows = (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(x)["prediction"] for x in rows if x]


def report(a) -> None:
    from ralm.frozen.backends import DEFAULT_BACKEND, llama_cpp_installed

    lat = {b: json.loads(p.read_text()) for b in BACKENDS if (p := a.work / f"latency-{b}.json").is_file()}
    qual = {}
    for b in BACKENDS:
        p = a.work / f"quality-{b}" / "results.json"
        if p.is_file():
            qual[b] = json.loads(p.read_text())
    default = "llama.cpp" if llama_cpp_installed() else "torch"
    m: dict[str, float] = {}
    for b, r in lat.items():
        for key in (
            "p50_seconds",
            "p95_seconds",
            "max_seconds",
            "first_answer_seconds",
            "retrieve_p50_seconds",
            "generate_p50_seconds",
        ):
            m[f"ask_{b}_{key}"] = round(r[key], 3)
    for b, r in qual.items():
        mm = r.get("metrics", r)
        m[f"em_{b}"] = round(mm["em"], 2)
        m[f"f1_{b}"] = round(mm["f1"], 2)
        m[f"rag_eval_questions_per_s_{b}"] = round(1.0 / mm["seconds_per_question"], 3)
    if default in lat:
        m["ask_p50_seconds"] = m[f"ask_{default}_p50_seconds"]
        m["ask_p95_seconds"] = m[f"ask_{default}_p95_seconds"]
        m["first_answer_seconds"] = m[f"ask_{default}_first_answer_seconds"]
    if default in qual and "torch" in qual:
        m["f1_default_minus_torch_fp32"] = round(m[f"f1_{default}"] - m["f1_torch"], 2)
    # `ralm rag eval` under its default setting (auto: a batch of prompts decodes in torch)
    eval_default = "auto" if "auto" in qual else default
    if eval_default in qual and "torch" in qual:
        m["rag_eval_questions_per_s_over_torch"] = round(
            m[f"rag_eval_questions_per_s_{eval_default}"] / m["rag_eval_questions_per_s_torch"], 2
        )
    bp = a.work / "bare.json"
    if bp.is_file():
        b = json.loads(bp.read_text())
        for key, v in b.items():
            if isinstance(v, (int, float)):
                m[f"bare_{key}"] = round(v, 3)
        bare_same_work = b.get("llama_cpp_stop_newline_p50_seconds")
        if bare_same_work and "llama.cpp" in lat:
            # ralm's llama.cpp path (prompt building, decoding with the first-line stop) against the
            # bare runtime doing the same work; and the whole /ask round trip against it
            r = lat["llama.cpp"]
            m["ralm_server_generate_over_bare_stop_newline"] = round(
                r["generate_p50_seconds"] / bare_same_work, 3
            )
            m["ralm_end_to_end_over_bare_runtime"] = round(r["p50_seconds"] / bare_same_work, 3)
    cp = a.work / "converted.json"
    if cp.is_file():
        for key, v in json.loads(cp.read_text()).items():
            if key != "prompts":
                m[key] = round(v, 3)
    if bp.is_file() and "paired_ralm_over_bare_p50" in b:
        m["ralm_over_bare_runtime"] = round(b["paired_ralm_over_bare_p50"], 3)
    if "torch" in qual:
        ref = predictions(a.work / "quality-torch")
        for bk in qual:
            got = predictions(a.work / f"quality-{bk}")
            m[f"quality_{bk}_same_answer_as_torch"] = round(
                sum(x == y for x, y in zip(got, ref, strict=True)) / len(ref), 3
            )
    same = {}
    if "torch" in lat:
        ref = [r["answer"] for r in lat["torch"]["rows"]]
        for bk, r in lat.items():
            same[bk] = sum(x["answer"] == y for x, y in zip(r["rows"], ref, strict=False)) / len(ref)
            m[f"ask_{bk}_same_answer_as_torch"] = round(same[bk], 3)
    write_result(
        "ask_latency",
        script_command(__file__, CELLS),  # every cell: the file holds all of them, whichever ran last
        m,
        TARGETS,
        default_backend=default,
        default_setting=DEFAULT_BACKEND,
        model=LM,
        threads=THREADS,
        k=K,
        questions_latency=a.questions,
        questions_quality=a.quality_questions,
    )
    log(json.dumps(m, indent=1))


# what each cell NAME (NAME:BACKEND for the first) runs
CELLS_OF_A_BACKEND = {"latency": latency, "quality": quality}
PLAIN_CELLS = {"prep": prep, "bare": bare, "converted": converted, "report": report}


def main() -> None:
    os.environ["OMP_NUM_THREADS"] = str(THREADS)  # `ralm rag eval` in a subprocess: the same 2 threads
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="+")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b66")
    ap.add_argument("--questions", type=int, default=51, help="latency questions (the first is the warm-up)")
    ap.add_argument("--bare-questions", type=int, default=20, help="prompts for the HF generate anchors")
    ap.add_argument("--quality-questions", type=int, default=300)
    a = ap.parse_args()
    for cell in a.cells:
        name, _, arg = cell.partition(":")
        log(f"cell {cell}")
        if name in CELLS_OF_A_BACKEND:
            CELLS_OF_A_BACKEND[name](a, arg)
        elif name in PLAIN_CELLS:
            PLAIN_CELLS[name](a)
        else:
            raise SystemExit(f"{cell}: no such cell (prep, latency:B, bare, converted, quality:B, report)")


if __name__ == "__main__":
    main()
