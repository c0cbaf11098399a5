"""Stage 2 of the GPU pack: the causal-reader REALM in Norwegian at GPU scale, with issue 45's levers.

The CPU row it scales (benchmarks/results/realm_learns.json, `realm_learns.py arm nb all_packed
--steps 100`): Gemma-3-270M generates the masked names, numbers and dates of a Norwegian chunk
after retrieved ones, towers from the dpr-cc NorQuAD encoder, benchmarks/data/realm_causal_nb.toml
with the levers together (`ARMS["all_packed"]`: a learned score scale and null logit, the per-span
marginal with at most 2 spans a chunk, hybrid candidates 32 deep with k = 8 and the reader's
gradient from the top 2 and the null document, query-side training at lr 1e-4, the packed
query-first reader rows), 100 steps x 4 queries = 400 queries; held-out content-token span
perplexity REALM / closed-book 0.471 at step 0 and 0.565 after (the issue's bar: <= 0.5, and a
gain from training >= 0.10). Here the same corpus, towers, config, levers, seed and held-out chunks
at 500 steps x 16 queries (one micro-batch: the CPU run accumulated 2 x 2 to fit its memory) =
8,000 queries a run planned (20x; see the time below), REALM and the closed-book baseline alike;
then `ralm evaluate-mlm` at step 0 (`--initial`) and at the end (the 200 held-out chunks, content
tokens and all, with paired bootstrap intervals) and realm_causal.py's table2 (the towers'
NorQuAD-open recall before/after).

The reader travels as the Gemma-3 GGUF file (~250 MB, carried by the pack). transformers parses a
GGUF file's 262k-token vocabulary in Python on every read, and a load reads it three times (config,
weights, tokenizer): 2-2.5 min on a busy core of the CPU machine. So `run` first converts it into a float32
model directory in its scratch folder, in two processes at once, each reading the file once (the
tokenizer; the weights, with the config.json `prep` wrote): 26 and 20 s of CPU time here, the
same weights, config, tokens and logits as a direct load; every later command loads the directory
(seconds).

GPU time (estimated, not yet measured; the card's own numbers come back as gpu_nb_*_seconds): the
conversion ~30 s; then the REALM and closed-book runs at once (a 270M reader leaves the GPU idle
between launches, and a closed-book step, one reader row a query and no towers, costs a fraction
of a REALM step): start, models onto the GPU, the 7,394 chunks embedded once (the document tower
is frozen), BM25 built, 4 checkpoints (2.4 GB each) ~25 s (RUN_OVERHEAD_S); then the steps. The
one step time measured on the card so far is causal_en's closed-book SmolLM2 step, 835 ms for 16
queries (2026-11-27, H200): host-bound, the rows built in Python. A REALM step here (16 queries,
each one packed row of the query and its 7 chunks with their spans, ~1,300 Gemma tokens, scored
without gradient, then the top 2 and the null document again with it, plus BM25 and the towers)
is taken as ~1.5 s (STEP_S), so the 500 planned steps need ~13 min: more than one device call.
Within BUDGET_S the plan shrinks to ~140 steps (~2,200 queries, 5.6x the CPU run), and the
report says so (`gpu_nb_steps` against `gpu_nb_steps_planned`, `gpu_nb_examples`); the first
measured step time recalibrates STEP_S. The two evaluations and table2 run at once after the
training, ~40 s (FULL["reserve_s"] keeps 60 s for them). Both runs checkpoint every quarter: if the
REALM run is stopped at the reserve before its end, both runs are evaluated at the newest step both
checkpointed, so they keep the same budget.

prep (full) copies from runs/b45 (realm_learns.py's work folder; realm_causal.py's towers and
corpus stages must have run there: `realm_causal.py towers --work runs/b45`, then `corpus`): the
REALM corpus with salient spans (unsup-nb-spans, ~7 MB), the NorQuAD pool (~5 MB), the 472 test
questions, the dpr-cc towers as fp16 safetensors (~90 MB; restored to fp32 by `run`),
the reader's config.json and a symlink to the GGUF file. --tiny: 40 articles of the `lee` sample in
64-token chunks (names, numbers, dates), a random 2-layer Gemma-3 (hidden 32) on a byte-level BPE
trained on them as reader, serve_target's random 2-layer BERT as towers, 12 questions made from the
corpus's name spans, 2 steps x 2 queries, the same commands on the CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import threading
import time
from pathlib import Path

from benchmarks.common import ROOT
from benchmarks.gpu.stages import transport, weights
from benchmarks.gpu.stages.context import StageContext
from benchmarks.realm.realm_causal_report import NB_CONFIG
from benchmarks.realm.realm_learns import ARMS, LANG_EXTRA, sets

NAME = "causal_nb"
TITLE = (
    "Causal-reader REALM in Norwegian (Gemma-3-270M, dpr-cc towers, the levers), "
    "500 steps x 16 planned (20x the CPU run)"
)
BUDGET_S = 300.0
MIN_S = 150.0
TARGETS = {
    "gpu_nb_ratio_content_end": "<= 0.5",
    "gpu_nb_ratio_gain_from_training": ">= 0.10",
    "gpu_nb_towers_recall@5_after": ">= gpu_nb_towers_recall@5_before",
}

WORK = ROOT / "runs" / "b45"  # realm_learns.py's default --work

ARM = "all_packed"  # the levers of realm_learns.py's Norwegian row
FULL = {"steps": 500, "batch": 16, "accum": 1, "eval_batch": 16, "reserve_s": 60.0}
TINY = {"steps": 2, "batch": 2, "accum": 1, "eval_batch": 8, "reserve_s": 0.0, "heldout": 8}
# full mode, estimated (see the module docstring): seconds of a REALM step with the closed-book run
# beside it, and a run's seconds besides its steps (start, corpus embedding, re-indexing, checkpoints)
STEP_S, RUN_OVERHEAD_S, MIN_STEPS = 1.5, 25.0, 40
TINY_ARTICLES = 40
TINY_QUESTIONS = 12

CORPUS, POOL, TOWERS, QUESTIONS, READER_CONFIG = "corpus", "pool", "towers", "test.jsonl", "reader-config"
FP16_WEIGHTS = "model.fp16.safetensors"


# ----------------------------------------------------------------------------- prep
def prep(ctx: StageContext) -> None:
    """Full: copies from runs/b45 (towers in fp16) and the GGUF symlink; tiny: a toy set built here."""
    ctx.inputs.mkdir(parents=True, exist_ok=True)
    if ctx.tiny:
        _prep_tiny(ctx)
        return
    from benchmarks.retrieval.retriever_train import qa_jsonl

    if WORK.is_dir():
        qa_jsonl("test", WORK / "test.jsonl")  # NorQuAD's 472 test questions, as table2 reads them
    need = [WORK / "unsup-nb-spans", WORK / "pool", WORK / "test.jsonl", WORK / "dpr-cc" / "encoder"]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        raise FileNotFoundError(
            f"{', '.join(missing)}: missing; run `python -m benchmarks.realm.realm_causal towers --work {WORK}` "
            "and `corpus` first"
        )
    for name, src in ((CORPUS, need[0]), (POOL, need[1])):
        shutil.rmtree(ctx.inputs / name, ignore_errors=True)
        shutil.copytree(src, ctx.inputs / name)
    shutil.copy2(need[2], ctx.inputs / QUESTIONS)
    weights.to_fp16(need[3], ctx.inputs / TOWERS)

    from ralm.models.encoder import load_auto
    from ralm.models.names import gemma3_gguf

    gguf = gemma3_gguf()
    link = ctx.inputs / gguf.name
    link.unlink(missing_ok=True)
    link.symlink_to(gguf)  # the pack carries what it points to
    cfg = load_auto("AutoConfig", gguf.parent, gguf_file=gguf.name, local_files_only=True)
    (ctx.inputs / READER_CONFIG).mkdir(exist_ok=True)
    cfg.to_json_file(str(ctx.inputs / READER_CONFIG / "config.json"))
    sizes = transport.sizes(ctx.inputs)
    ctx.log(f"{NAME}: inputs " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items()))


def _prep_tiny(ctx: StageContext) -> None:
    """The toy inputs: corpus (also the pool), reader, towers and questions, all built here."""
    from benchmarks.common import tiny_bert
    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.encoders import DualEncoder, EncoderConfig
    from ralm.samples import sample_format, sample_path

    corpus = ctx.inputs / CORPUS  # `ralm corpus build --sample lee --max-articles 40 --chunk-size 64 ...`
    cfg = BuildConfig(
        chunk_size=64,
        format=sample_format("lee"),
        lang="nb",
        names=True,
        numbers=True,
        max_articles=TINY_ARTICLES,
    )
    build_docstore([sample_path("lee")], corpus, cfg, overwrite=True, progress=False, log=ctx.log)
    shutil.rmtree(ctx.inputs / POOL, ignore_errors=True)
    shutil.copytree(corpus, ctx.inputs / POOL)
    store = DocStore(corpus)
    rows = [
        (t, s)
        for b in store.iter_batches(512, columns=["text", "salient"])
        for t, s in zip(b["text"], b["salient"], strict=True)
    ]
    _tiny_reader([t for t, _ in rows], ctx.inputs / "reader")
    qa = []
    for text, spans in rows:
        names = [s for s in spans if s["source"] == "name"]
        if names and len(qa) < TINY_QUESTIONS:
            s = names[0]
            q = " ".join((text[: s["start"]] + " what " + text[s["end"] :]).split()[:24])
            qa.append(json.dumps({"question": q, "answers": [text[s["start"] : s["end"]]]}))
    (ctx.inputs / QUESTIONS).write_text("\n".join(qa) + "\n", encoding="utf-8")
    scratch = ctx.work / "prep"
    shutil.rmtree(scratch, ignore_errors=True)
    bert = tiny_bert(scratch / "tiny-bert")
    enc = DualEncoder.from_pretrained(bert, EncoderConfig(normalize=True, score_scale=20.0))
    enc.save(scratch / "encoder")
    weights.to_fp16(scratch / "encoder", ctx.inputs / TOWERS)


def _tiny_reader(texts: list[str], out: Path) -> None:
    """A random 2-layer Gemma-3 (hidden 32) on a byte-level BPE trained on `texts` that adds <bos>."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<bos>", "<eos>"]
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=specials
    )
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        architectures=["Gemma3ForCausalLM"],
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=512,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
        final_logit_softcapping=30.0,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    shutil.rmtree(out, ignore_errors=True)
    Gemma3ForCausalLM(cfg).save_pretrained(out)
    fast.save_pretrained(out)


# ----------------------------------------------------------------------------- run
def run(ctx: StageContext) -> dict:
    s = TINY if ctx.tiny else FULL
    t_start = time.monotonic()
    if not ctx.tiny and "OMP_NUM_THREADS" not in {**os.environ, **ctx.env}:
        ctx.env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) // 2))  # two processes at a time
    # realm_causal.py's work layout (table2 reads nb-realm, dpr-cc/encoder, pool, test.jsonl)
    work = ctx.work / "b45"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in (CORPUS, POOL):
        shutil.copytree(ctx.inputs / name, work / name)  # small; the inputs stay untouched
    shutil.copy2(ctx.inputs / QUESTIONS, work / QUESTIONS)
    towers = weights.to_fp32(ctx.inputs / TOWERS, work / "dpr-cc" / "encoder")

    t0 = time.monotonic()
    reader = _convert_reader(ctx, work / "reader")
    convert_s = time.monotonic() - t0

    train_s = ctx.left() - s["reserve_s"]
    steps = s["steps"]
    if not ctx.tiny:  # fewer steps (the same schedule over them) when the stage got less than its budget
        steps = max(MIN_STEPS, min(steps, int((train_s - RUN_OVERHEAD_S) / STEP_S) // 10 * 10))
    runs = {"realm": work / "nb-realm", "mlm": work / "nb-closed"}
    # checkpoints every quarter, all kept: where the REALM run is stopped before its end, both runs
    # are evaluated at the newest step both reached
    common = [
        "--docstore",
        work / CORPUS,
        "--retriever",
        towers,
        "--reader",
        reader,
        "--steps",
        steps,
        "--batch-size",
        s["batch"],
        "--grad-accum",
        s["accum"],
        "--checkpoint-every",
        max(1, steps // 4),
        "--keep-checkpoints",
        4,
        "--device",
        ctx.device,
        "--quiet",
        "--set",
        "tensorboard=false",
    ]
    if ctx.tiny:
        common += ["--heldout", s["heldout"]]

    levers = sets({**LANG_EXTRA["nb"], **ARMS[ARM]})

    def pretrain(mode: str) -> None:
        extra = levers if mode == "realm" else []
        ctx.ralm("pretrain", NB_CONFIG, "--out", runs[mode], "--mode", mode, *common, *extra, timeout=train_s)

    errors = [e for e in _parallel(lambda: pretrain("realm"), lambda: pretrain("mlm")) if e is not None]
    step = _common_step(list(runs.values()))
    if step is None:
        raise errors[0] if errors else RuntimeError(f"{NAME}: the runs left no common checkpoint")
    if errors:
        ctx.log(f"{NAME}: {errors[0]}; both runs evaluated at step {step}")

    realm, closed = runs["realm"], runs["mlm"]
    evaluate = [
        "evaluate-mlm",
        realm,
        "--baseline",
        closed,
        "--device",
        ctx.device,
        "--batch-size",
        s["eval_batch"],
    ]
    initial = [*evaluate, "--initial", "--json-out", realm / "eval_mlm_initial.json"]
    ev_error, ev0_error, table2_error = _parallel(
        lambda: ctx.ralm(*evaluate),
        lambda: ctx.ralm(*initial),
        lambda: ctx.python("benchmarks.realm.realm_causal", "table2", "--work", work),
    )
    if ev_error is not None:
        raise ev_error
    if ev0_error is not None:
        raise ev0_error
    ev = {r["name"]: r for r in json.loads((realm / "eval_mlm.json").read_text(encoding="utf-8"))["rows"]}
    rb, cb = ev["realm (retrieval)"], ev["closed-book baseline"]
    from benchmarks.realm.realm_learns_report import arm_record

    rec = arm_record(work, "nb", "realm")
    if rec is None:
        raise RuntimeError(f"{NAME}: {realm / 'eval_mlm.json'} was not written")
    m = {
        "gpu_nb_ratio_content_end": rec["ratio_content_end"],
        "gpu_nb_ratio_content_end_low": rec["ratio_content_end_low"],
        "gpu_nb_ratio_content_end_high": rec["ratio_content_end_high"],
        "gpu_nb_ratio_content_step0": rec["ratio_content_step0"],
        "gpu_nb_ratio_gain_from_training": rec["gain_from_training"],
        **{
            f"gpu_nb_ratio_gain_from_training_{e}": rec[f"gain_from_training_{e}"]
            for e in ("low", "high")
            if f"gain_from_training_{e}" in rec
        },
        **{
            f"gpu_nb_{k}_last20": rec[f"train_{k}_last20"]
            for k in ("entropy", "null_mass", "score_scale")
            if f"train_{k}_last20" in rec
        },
        "gpu_nb_span_ppl_ratio": rb["ppl"] / cb["ppl"],
        "gpu_nb_span_ppl_realm": rb["ppl"],
        "gpu_nb_span_ppl_closed_book": cb["ppl"],
        "gpu_nb_span_ppl_realm_reader_alone": ev["realm reader alone, closed-book"]["ppl"],
        "gpu_nb_heldout_tokens": rb["tokens"],
    }
    if "answers_in_docs" in rb:
        m["gpu_nb_answers_in_docs"] = rb["answers_in_docs"]
    for kind, v in rb.get("by_kind", {}).items():
        m[f"gpu_nb_span_ppl_ratio/{kind}"] = v["ppl"] / cb["by_kind"][kind]["ppl"]
    table2 = work / "table2.json"
    if table2.is_file():
        rows = json.loads(table2.read_text(encoding="utf-8"))
        for when in ("before", "after"):
            m.update({f"gpu_nb_towers_{k}_{when}": v for k, v in rows[when].items()})
    else:
        ctx.log(f"{NAME}: table2 failed ({table2_error}); no recall numbers")
    realm_rows, closed_rows = _metrics(realm, step), _metrics(closed, step)
    m.update(
        gpu_nb_steps=step,
        gpu_nb_steps_planned=steps,
        gpu_nb_examples_per_step=s["batch"] * s["accum"],
        gpu_nb_examples=step * s["batch"] * s["accum"],
        gpu_nb_step_seconds=statistics.median(r["step_seconds"] for r in realm_rows),
        gpu_nb_closed_step_seconds=statistics.median(r["step_seconds"] for r in closed_rows),
        gpu_nb_train_seconds=realm_rows[-1]["elapsed_seconds"],
        gpu_nb_closed_train_seconds=closed_rows[-1]["elapsed_seconds"],
        gpu_nb_convert_seconds=convert_s,
        gpu_nb_seconds=time.monotonic() - t_start,
    )
    return m


def _parallel(*jobs) -> list[Exception | None]:
    """Run the callables in threads at once; per callable the exception it raised, or None."""
    errors: list[Exception | None] = [None] * len(jobs)

    def call(i: int) -> None:
        try:
            jobs[i]()
        except Exception as exc:
            errors[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _steps(run: Path) -> list[int]:
    """Steps of the run's checkpoints that finished writing (state.json comes last)."""
    d = run / "checkpoints"
    if not d.is_dir():
        return []
    return sorted(int(c.name.split("-")[1]) for c in d.glob("step-*") if (c / "state.json").is_file())


def _common_step(runs) -> int | None:
    """The newest step every run checkpointed; newer checkpoints are removed so that evaluate-mlm and
    export-reader (which take the newest) read that one."""
    steps = [set(_steps(r)) for r in runs]
    both = set.intersection(*steps) if steps else set()
    if not both:
        return None
    step = max(both)
    for r in runs:
        for c in (r / "checkpoints").glob("step-*"):
            if int(c.name.split("-")[1]) > step:
                shutil.rmtree(c)
    return step


def _metrics(run: Path, step: int) -> list[dict]:
    """The run's per-step metrics rows up to `step` (a line cut off by a stopped run is skipped)."""
    rows = []
    for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return [r for r in rows if "step_seconds" in r and r["step"] <= step]


# ----------------------------------------------------------------------------- the reader, once
def _convert_reader(ctx: StageContext, out: Path) -> Path:
    """The carried reader (a .gguf file in inputs, or a model directory) as a float32 model directory."""
    ggufs = sorted(ctx.inputs.glob("*.gguf"))
    src = ggufs[0] if ggufs else ctx.inputs / "reader"
    config = ctx.inputs / READER_CONFIG
    cfg = ["--config", config] if config.is_dir() else []
    parts = {"tokenizer": out.with_name("reader-tokenizer"), "model": out}
    if ctx.tiny:  # the same conversion in this process: two more interpreters would double the tiny run
        for part, d in parts.items():
            weights.convert(part, src, d, config if config.is_dir() else None)
    else:  # two processes at once: each reads the GGUF file once
        jobs = [
            (lambda p=p, d=d: ctx.python(weights.__name__, "convert", p, src, d, *cfg))
            for p, d in parts.items()
        ]
        for error in _parallel(*jobs):
            if error is not None:
                raise error
    for f in parts["tokenizer"].iterdir():
        shutil.move(str(f), out / f.name)
    return out
