"""REALM that learns (issue 45): the diagnosis, the ablation of each lever, the final pair, the speed.

Stages (each skipped when its output exists in --work; training runs resume after an interruption):

  diag0 LANG        eval-only diagnosis of today's configuration at step 0 (`ralm evaluate-mlm --initial
                    --diagnose`): answers in dense/BM25/hybrid candidates at depth 3/8/20, and the span
                    ratio to closed-book under p(z|x), uniform, the scale x0.5/2/4/8, best-of-K
  arm LANG NAME     one arm of the ablation (ARMS): `ralm pretrain` for --steps, checkpoints every
                    --steps/4; then evaluate-mlm at step 0 and at each checkpoint (the curves) against
                    the closed-book run of the same steps, and the diagnosis at the end. NAME closed:
                    that closed-book run alone (beside an arm on the other core)
  compute LANG NAME the compute-matched closed-book baseline of an arm (as many closed-book steps as
                    the arm's training wall time buys) and the arm's evaluation against it (the
                    data-matched one, the arms' own steps, is trained by every arm)
  formatted LANG NAME  [--fresh] the arm NAME and its closed-book run both started from the reader of the
                    closed-book run (LANG-closed, --steps): a reader that already knows the span-infill
                    format, as REALM's BERT and BRENT's checkpoint know their masked-LM objective, so that
                    step 0 and the gain from training are not dominated by learning the format; in the
                    sibling folder WORK-fmt. --fresh: both read the data order after the queries the
                    closed-book run saw (WORK-fmt-fresh); NAME closed trains only that closed-book run
  warm LANG         the retriever alone trained from a frozen reader's scores (WARM, --steps), then the
                    end diagnosis against the same reader closed-book: how far more queries move the
                    ranking toward what the reader can use (diag0 is its step 0)
  cached LANG       the retriever alone, offline (realm_learns_cached.py): the frozen reader scores the top 8
                    dense candidates of --queries training queries once (--part I/P: this process's share),
                    then the query tower learns from the cached scores for --epochs passes; the curve over
                    --sizes queries (held-out re-ranking) and the end diagnosis of the largest
  speed             queries per second of one REALM step, today's settings against the new defaults at
                    the same k (and each speed lever alone), interleaved in one process, medians
  towers nb NAME    NorQuAD-open recall@1/5/20 of the arm's towers before and after (--formatted
                    [--fresh]: the arm of that `formatted` stage)
  downstream nb NAME  the 2x2 on NorQuAD-open (realm_learns_downstream.py): `ralm rag train` + `rag
                    eval`, plain or the arm's reader by the starting or the arm's towers, 3 seeds a
                    cell, the same budget (--rag-limit, --rag-epochs; --test-limit); --part I/P: a share
  report            benchmarks/results/realm_learns.json and .md (realm_learns_report.py); --keep: merged
                    with the committed file's runs that --work lacks (one new arm on another machine)
  report-cached     benchmarks/results/realm_learns_cached.json and .md (the `cached` stage's curve and end)
  explain           benchmarks/results/realm_learns_explain.json and .md: what the frozen reader rewards
                    in a chunk, from the cached scores and diag0 (realm_learns_explain.py)

LANG is en (SmolLM2-135M reader, MiniLM towers, the demo's English Wikipedia in 64-token chunks) or nb
(Gemma-3-270M reader, the NorQuAD DPR towers of realm_causal.py, NorQuAD passages + Norwegian Debian
text in 128-token chunks); both corpora and the towers come from realm_causal.py's stages, in the same
--work folder. Run: python -m benchmarks.realm.realm_learns STAGE [LANG] [NAME] [--work runs/b45] [--steps N]
Environment: OMP_NUM_THREADS (default 1) torch threads a job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import ROOT, log, machine, offline, pick, ralm, read_json, script_argv

offline()
from benchmarks.realm.realm_causal_report import EN_CONFIG, NB_CONFIG  # noqa: E402
from benchmarks.realm.realm_learns_report import formatted_work  # noqa: E402

CONFIGS = {"en": EN_CONFIG, "nb": NB_CONFIG}
STORES = {"en": "enwiki-64", "nb": "unsup-nb-spans"}
EVAL_N = 200  # held-out spans scored at the end and at step 0
CURVE_N = 100  # held-out spans scored at the intermediate checkpoints

# the ablation: today's configuration, each lever alone, and all together (settings over the LANG's TOML)
ARMS: dict[str, dict[str, object]] = {
    "today": {},
    "scale": {"score_scale": "learned"},
    "null": {"null_doc": "logit"},
    "span": {"marginal": "span", "masking.max_spans": 2},
    "cands": {"candidates": "hybrid", "candidate_depth": 32, "k": 8, "reader_backprop_top": 2},
    "topm": {"reader_backprop_top": 1},
    "query": {"retriever_train": "query"},
    "lr": {"lr_retriever": 1e-4},
    "distill": {"retriever_loss": "distill"},
    "all": {
        "score_scale": "learned",
        "null_doc": "logit",
        "marginal": "span",
        "masking.max_spans": 2,
        "candidates": "hybrid",
        "candidate_depth": 32,
        "k": 8,
        "reader_backprop_top": 2,
        "retriever_train": "query",
        "lr_retriever": 1e-4,
    },
}
# the levers together with the packed query-first reader rows (the speed lever: the same model
# reading the query before each chunk, the query's tokens computed once for its k chunks): the
# Norwegian pair, where a Gemma-3 step is the budget
ARMS["all_packed"] = {**ARMS["all"], "reader_layout": "query_first"}
# the query tower from answer presence at every step (`retriever_loss = "answer"`: the step's own
# candidates, no reader signal; `realm_learns.py explain` and `cached --target answer` found holding
# the span to be what the reader rewards and what a tower learns from), the reader from the marginal
ARMS["answer"] = {
    "retriever_loss": "answer",
    "retriever_train": "query",
    "lr_retriever": 1e-4,
    "score_scale": "learned",
    "null_doc": "logit",
}
# the same, its retriever started from the query tower, scale and null of `cached LANG --target
# answer_free --negatives in_batch` (`retriever_init`; "{work}" and "{lang}" are filled in by `train`):
# the one tower that made fresh retrieval better for the frozen reader, as a warm start (REALM's ICT)
ARMS["answer_warm"] = {**ARMS["answer"], "retriever_init": "{work}/{lang}-cached-answer_free-in_batch"}
# the two above with 48 more masked queries a step that only the query tower reads (`answer_queries`:
# searched, checked for their spans, no reader pass), each query's softmax also over the other 47's
# chunks (in-batch negatives), and a target from the salient spans alone (a randomly masked word is
# in most chunks): what the offline answer tower had (many queries, in-batch negatives, one salient
# span a query) and the online arms lacked (4 queries a step against their own 3 chunks, every span)
ANSWER_QUERIES = {"answer_queries": 48, "answer_negatives": "in_batch", "answer_spans": "salient"}
ARMS["answer_queries"] = {**ARMS["answer"], **ANSWER_QUERIES}
ARMS["answer_warm_queries"] = {**ARMS["answer_warm"], **ANSWER_QUERIES}
# the warm one with the other queries' chunks as plain negatives (target 0 whatever they hold, DPR's
# in-batch negatives, as in the offline run it starts from): with them checked for the span
# (`answer_warm_queries`) every held-out query retrieved the same 4 chunks by step 37
ARMS["answer_warm_zero"] = {**ARMS["answer_warm_queries"], "answer_negatives": "in_batch_zero"}
# every lever at once, for Norwegian: the levers with the packed rows (`all_packed`: the reader and
# the query tower from the per-span marginal) and the answer queries of `answer_warm_zero` (48 a step,
# the other queries' chunks at target 0, salient spans): in English they kept the query tower's
# recall where the marginal alone let it drift; `all_packed` lost 0.125 of the towers' NorQuAD
# recall@5 in 100 steps
ARMS["all_answer"] = {**ARMS["all_packed"], **ANSWER_QUERIES, "answer_negatives": "in_batch_zero"}
# queries that carry signal (issue 64, benchmarks/realm/realm_signal.py): masked spans that occur in
# another chunk (`retrievable_only`), one span a query under the per-span marginal, a learned score
# scale at lr_scale 0.1 (the records world's fast scale), hybrid candidates 32 deep into today's k = 4
ARMS["retrievable"] = {"masking.retrievable_only": True}
ARMS["signal"] = {
    **ARMS["retrievable"],
    "masking.max_spans": 1,
    "marginal": "span",
    "score_scale": "learned",
    "lr_scale": 0.1,
    "candidates": "hybrid",
    "candidate_depth": 32,
}
# the retriever alone learning from a frozen reader (`warm`): the query tower at the `all` arm's
# learning rate, Atlas's perplexity distillation, a learned scale, today's dense top 3 + the empty
# null document; its end diagnosis is on the same basis as diag0's (the same reader, closed-book)
WARM = {
    "reader_train": "freeze",
    "retriever_train": "query",
    "retriever_loss": "distill",
    "score_scale": "learned",
    "lr_retriever": 1e-4,
    "reader_layout": "query_first",
}
LANG_EXTRA = {"nb": {"bm25_lang": "nb"}, "en": {"bm25_lang": "en"}}


def sets(settings: dict[str, object]) -> list[str]:
    """--set NAME=VALUE flags for `ralm pretrain`."""
    out = []
    for k, v in settings.items():
        out += ["--set", f"{k}={json.dumps(v) if isinstance(v, str) else v}"]
    return out


# the flags that override the pretrain runs' settings (the GPU stage points them at its inputs)
PRETRAIN_OVERRIDES = ("reader", "batch_size", "device", "heldout")
# set by main() from the flags of these names: --store, the PRETRAIN_OVERRIDES, --eval-n, --no-diagnose
OVERRIDES: dict[str, object] = {}
OVERRIDE_FLAGS = ("store", *PRETRAIN_OVERRIDES, "eval_n", "no_diagnose")


def store_of(work: Path, lang: str) -> Path:
    p = Path(OVERRIDES["store"]) if OVERRIDES.get("store") else work / STORES[lang]
    if not (p / "manifest.json").is_file():
        raise SystemExit(
            f"{p}: missing; run `python -m benchmarks.realm.realm_causal corpus --work {work}` first"
        )
    return p


def base_flags(work: Path, lang: str) -> list:
    flags = [CONFIGS[lang], "--docstore", store_of(work, lang)]
    for key in PRETRAIN_OVERRIDES:
        if OVERRIDES.get(key) is not None:
            flags += [f"--{key.replace('_', '-')}", OVERRIDES[key]]
    if lang == "nb":
        enc = work / "dpr-cc" / "encoder"
        if not (enc / "ralm_encoder.json").is_file():
            raise SystemExit(
                f"{enc}: missing; run `python -m benchmarks.realm.realm_causal towers --work {work}` first"
            )
        flags += ["--retriever", enc]
    return flags


def checkpointed(run: Path, step: int) -> bool:
    """Whether the pretrain run `run` has its checkpoint of step `step`."""
    return (run / "checkpoints" / f"step-{step:07d}" / "state.json").is_file()


def pretrain_run(run: Path, mode: str, steps: int, flags: Sequence, more: Sequence = ()) -> None:
    """`ralm pretrain FLAGS --out RUN --mode MODE --steps STEPS --quiet MORE`, resumed (--resume)
    where RUN holds a started run."""
    resume = ["--resume"] if (run / "config.toml").is_file() else []
    ralm("pretrain", *flags, "--out", run, "--mode", mode, "--steps", steps, "--quiet", *more, *resume)


def train(
    work: Path, lang: str, name: str, mode: str, steps: int, settings: dict, stop_after: int | None = None
) -> Path:
    """`ralm pretrain` of one run, resumed when a checkpoint exists, skipped when finished;
    `stop_after`: end after that step (the schedule still follows `steps`; a later call resumes)."""
    run = work / f"{lang}-{name}"
    if checkpointed(run, steps) or (stop_after is not None and checkpointed(run, stop_after)):
        return run
    every = max(1, steps // 4)
    settings = {
        k: v.format(work=work.resolve(), lang=lang) if isinstance(v, str) and "{" in v else v
        for k, v in settings.items()
    }
    if OVERRIDES.get("data_offset"):
        settings = {**settings, "data_offset": OVERRIDES["data_offset"]}
    more = ["--checkpoint-every", every, "--keep-checkpoints", 8, *sets({**LANG_EXTRA[lang], **settings})]
    more += ["--stop-after", stop_after] if stop_after is not None else []
    pretrain_run(run, mode, steps, base_flags(work, lang), more)
    return run


def evaluate(
    run: Path, closed: Path, *, initial: bool = False, n: int | None = None, out: Path | None = None
) -> Path:
    """evaluate-mlm of `run` against the closed-book run (the JSON path)."""
    n = n or int(OVERRIDES.get("eval_n") or EVAL_N)
    out = out or run / ("eval_mlm_initial.json" if initial else "eval_mlm.json")
    if not out.is_file():
        extra = ["--initial"] if initial else []
        ralm("evaluate-mlm", run, "--baseline", closed, "--n", n, "--json-out", out, *extra)
    return out


def diagnose(run: Path, closed: Path | None, *, initial: bool, n: int | None = None) -> Path:
    n = n or int(OVERRIDES.get("eval_n") or EVAL_N)
    out = run / ("diagnose_initial.json" if initial else "diagnose.json")
    if not out.is_file() and not OVERRIDES.get("no_diagnose"):
        base = ["--baseline", closed] if closed is not None else []
        ralm(
            "evaluate-mlm",
            run,
            *base,
            "--diagnose",
            "--n",
            n,
            "--json-out",
            out,
            *(["--initial"] if initial else []),
        )
    return out


def init_run(work: Path, lang: str, name: str, settings: dict, steps: int) -> Path:
    """A run folder with its config and held-out split, nothing trained (what --initial reads)."""
    from ralm.corpus.docstore import DocStore
    from ralm.realm.config import PretrainConfig
    from ralm.realm.data import split_ids
    from ralm.realm.training.run import write_split

    run = work / f"{lang}-{name}"
    if (run / "split.json").is_file():
        return run
    flags = base_flags(work, lang)
    over = {"docstore": str(flags[2]), "out": str(run), "steps": steps}
    over.update({k: v for k, v in OVERRIDES.items() if k in PRETRAIN_OVERRIDES and v is not None})
    if lang == "nb":
        over["retriever"] = str(flags[flags.index("--retriever") + 1])
    merged = {**LANG_EXTRA[lang], **settings}
    masking = {k.removeprefix("masking."): v for k, v in merged.items() if k.startswith("masking.")}
    over.update({k: v for k, v in merged.items() if not k.startswith("masking.")})
    cfg = PretrainConfig.from_toml(flags[0], **over, masking=masking)
    run.mkdir(parents=True, exist_ok=True)
    cfg.save(run)
    write_split(run, *split_ids(cfg, DocStore(cfg.docstore)))
    return run


# ----------------------------------------------------------------------------- stages
def diag0_stage(work: Path, lang: str, steps: int) -> None:
    run = init_run(work, lang, "diag0", ARMS["today"], steps)
    diagnose(run, None, initial=True)


def compute_stage(work: Path, lang: str, arm: str, steps: int) -> None:
    """The compute-matched closed-book baseline of `arm`: as many closed-book steps as the arm's
    training wall time buys (the data-matched one's step time), then the arm evaluated against it."""
    closed = train(work, lang, "closed", "mlm", steps, {})
    run = work / f"{lang}-{arm}"
    if not (run / "metrics.jsonl").is_file():
        raise SystemExit(f"{run}: train the arm first")
    # the two step times measured side by side in one process (same load; the wall times of the
    # runs themselves were taken under different loads on a shared machine), at the runs' own
    # grad_accum: a step's answer queries cost once a step, not once a micro-batch
    from ralm.realm.config import PretrainConfig

    accum = PretrainConfig.from_toml(run / "config.toml").grad_accum
    speed = speed_path(work, lang, [arm, "closed"], accum)
    if not speed.is_file():  # in its own process: its two models would stay in this one's memory
        cmd = [*script_argv(__file__), "speed", lang, "--work", str(work)]
        subprocess.run([*cmd, "--variants", f"{arm},closed", "--speed-accum", str(accum)], check=True)
    timed = read_json(speed)
    ratio, basis = timed[f"{arm}_step_seconds"] / timed["closed_step_seconds"], str(speed)
    n = max(steps, int(round(steps * ratio / 4)) * 4)
    matched = train(work, lang, f"closed-compute-{arm}", "mlm", n, {})
    (matched / "compute_match.json").write_text(
        json.dumps(
            {
                "arm": arm,
                "arm_seconds": wall(run),
                "closed_seconds_per_step": wall(closed) / steps,
                "step_time_ratio": ratio,
                "ratio_from": basis,
                "steps": n,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    evaluate(run, matched, out=run / "eval_mlm_compute.json")


def wall(run: Path) -> float:
    """Seconds a run spent in its training steps (sum of step_seconds and refresh_seconds)."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return sum(r.get("step_seconds", 0.0) + r.get("refresh_seconds", 0.0) for r in rows)


def masking_of(settings: dict) -> dict:
    """An arm's masking settings: its closed-book run masks (and holds out) the same way."""
    return {k: v for k, v in settings.items() if k.startswith("masking.")}


def closed_name(settings: dict) -> str:
    """A closed-book run of an arm's own masking (realm_signal.py: `closed`, or one per masking)."""
    m = masking_of(settings)
    return "closed" + "".join(f"-{k.split('.', 1)[1]}{v}" for k, v in sorted(m.items())).replace("True", "")


def arm_stage(work: Path, lang: str, name: str, steps: int, curves: bool) -> None:
    """Train the arm `name` and the closed-book run of the same steps, then evaluate. NAME `closed`
    trains only that closed-book run (to run it beside an arm's training on the other core)."""
    if name == "closed":
        train(work, lang, "closed", "mlm", steps, {})
        return
    run = train(work, lang, name, "realm", steps, ARMS[name])
    closed = train(work, lang, "closed", "mlm", steps, {})  # every arm against one closed-book run
    evaluate(run, closed, initial=True)
    evaluate(run, closed)
    diagnose(run, closed, initial=False)
    if curves:
        for ck in sorted((run / "checkpoints").glob("step-*")):
            step = int(ck.name.split("-")[1])
            if step == steps:
                continue
            cclosed = closed / "checkpoints" / ck.name
            out = run / f"eval_mlm_step{step}.json"
            if cclosed.is_dir() and not out.is_file():
                evaluate_pair_at(run, closed, ck, cclosed, out)


def formatted_stage(work: Path, lang: str, name: str, steps: int, fresh: bool) -> None:
    """The arm `name` and its data-matched closed-book run, both from the closed-book run's reader:
    a reader that has learnt the span-infill format in `steps` steps (REALM starts from BERT, BRENT
    from a Norwegian BERT: readers that already know their objective's format). The held-out split,
    store and towers are the same as the arm's in `work`. `fresh`: both read the data order from
    where the format run stopped (queries it did not see), in WORK-fmt-fresh. NAME `closed` trains
    only the closed-book continuation (to run it beside the arm's training)."""
    closed = train(work, lang, "closed", "mlm", steps, {})
    reader = work / f"{lang}-closed-reader"
    if not (reader / "ralm_export.json").is_file():
        ralm("export-reader", closed, reader, "--overwrite")
    OVERRIDES["store"] = str(store_of(work, lang).resolve())
    OVERRIDES["reader"] = str(reader)
    if fresh:
        rows = [json.loads(x) for x in (closed / "metrics.jsonl").read_text().splitlines() if x.strip()]
        OVERRIDES["data_offset"] = max(int(r.get("examples_seen", 0)) for r in rows)
    fmt = formatted_work(work, fresh)
    fmt.mkdir(parents=True, exist_ok=True)
    if lang == "nb" and not (fmt / "dpr-cc").exists():
        (fmt / "dpr-cc").symlink_to((work / "dpr-cc").resolve(), target_is_directory=True)
    if name == "closed":
        train(fmt, lang, "closed", "mlm", steps, {})
        return
    arm_stage(fmt, lang, name, steps, curves=False)


def warm_stage(work: Path, lang: str, steps: int) -> None:
    run = train(work, lang, "warm", "realm", steps, WARM)
    diagnose(run, None, initial=False)


def part_of(text: str) -> tuple[int, int]:
    """--part I/P as (I, P): this process's share of P."""
    i, p = (int(x) for x in text.split("/"))
    if not 0 <= i < p:
        raise SystemExit(f"--part {text}: give I/P with 0 <= I < P")
    return i, p


def cached_main(args) -> None:
    """`cached LANG`: score a share (--part I/P), or learn from all the shares and diagnose."""
    from benchmarks.realm.realm_learns_cached import CACHED, cached_stage, score_part

    run = init_run(args.work, args.lang, "cached", CACHED, args.steps)
    scores = run
    tags = [t for t, default in ((args.target, "reader"), (args.negatives, "none")) if t != default]
    if tags:  # its own run, learning from the same cached scores
        run = init_run(args.work, args.lang, "cached-" + "-".join(tags), CACHED, args.steps)
    if args.part:
        score_part(run, args.queries, *part_of(args.part))
        return
    sizes = [int(x) for x in args.sizes.split(",")]
    cached_stage(
        args.work,
        args.lang,
        run,
        parts=args.parts,
        sizes=sizes,
        epochs=args.epochs,
        batch_size=args.tower_batch,
        negatives=args.negatives,
        scores_dir=scores,
        target=args.target,
        queries=args.queries,
    )
    diagnose(run, None, initial=False)


def evaluate_pair_at(run: Path, closed: Path, ck: Path, cclosed: Path, out: Path) -> None:
    """evaluate-mlm of a REALM checkpoint against the closed-book run's checkpoint of the same step."""
    from ralm.realm.inference.evaluate import evaluate_mlm, ratios
    from ralm.realm.training.run import load_run

    r, c = load_run(run, ck), load_run(closed, cclosed)
    rows = evaluate_mlm(r, c, n=min(CURVE_N, int(OVERRIDES.get("eval_n") or CURVE_N)))
    payload = {"step": int(r.state["step"]), "rows": [x.as_dict() for x in rows], "ratios": ratios(rows)}
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def towers_stage(work: Path, name: str, run_work: Path) -> None:
    """NorQuAD-open recall of the nb arm's towers, before (the dpr-cc encoder) and after. The arm's run
    is in `run_work` (`work`, or a `formatted` folder); the pool and the questions are `work`'s."""
    from benchmarks.retrieval.retriever_train import evaluate as eval_retrieval
    from benchmarks.retrieval.retriever_train import qa_jsonl

    run = run_work / f"nb-{name}"
    out = run / "towers.json"
    if out.is_file():
        return
    towers = run_work / f"nb-{name}-towers"
    if not (towers / "ralm_encoder.json").is_file():
        ralm("export-reader", run, run_work / f"nb-{name}-reader", "--retriever-out", towers, "--overwrite")
    # the pool's embeddings are cached under the run, so that two runs' "after" towers never share them
    ev = eval_retrieval(
        run,
        work / "pool",
        {"before": work / "dpr-cc" / "encoder", "after": towers},
        qa_jsonl("test", work / "test.jsonl"),
        "test",
    )
    rows = {
        k: {f"recall@{n}": round(rep.recall[n], 4) for n in (1, 5, 20)} for k, rep in ev["reports"].items()
    }
    out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


SPEED_DEFAULT = "today,topm,query,packed,new,new_one_group"


def speed_path(work: Path, lang: str, variants: list[str], accum: int = 1) -> Path:
    """Where `speed` keeps its medians: speed-LANG.json for the default variants, else named by them
    (and by the micro-batches a step when not 1)."""
    tail = "" if accum == 1 else f"-accum{accum}"
    if variants == SPEED_DEFAULT.split(","):
        return work / f"speed-{lang}{tail}.json"
    return work / f"speed-{lang}-{'-'.join(variants)}{tail}.json"


def speed_stage(work: Path, lang: str, steps: int, variants: list[str], accum: int = 1) -> dict:
    """Queries per second of a REALM step: today's settings vs the speed levers at the same k, the
    variants interleaved step by step in one process (same machine, same load), medians. A step is
    `accum` micro-batches of the config's batch size (1: the speed table's single micro-batch)."""
    import torch

    from ralm.corpus.docstore import DocStore
    from ralm.models.precision import autocast_dtype
    from ralm.realm.config import PretrainConfig
    from ralm.realm.data import split_ids
    from ralm.realm.modeling.candidates import candidate_search
    from ralm.realm.refresh.sync import SyncRefresher
    from ralm.realm.training.build import build_model, make_collator, optimizer_for
    from ralm.realm.training.trainer import train_step
    from ralm.train.optim import warmup_schedule

    out = speed_path(work, lang, variants, accum)
    if out.is_file():
        return read_json(out)
    flags = base_flags(work, lang)
    over = {"docstore": str(flags[2]), "out": "-", "warmup_steps": 0, "grad_accum": accum, **LANG_EXTRA[lang]}
    if lang == "nb":
        over["retriever"] = str(flags[flags.index("--retriever") + 1])
    dev = torch.device("cpu")
    setups = {}
    index_dir = None
    for name in variants:
        settings = SPEED_VARIANTS[name]
        masking = {k.removeprefix("masking."): v for k, v in settings.items() if k.startswith("masking.")}
        plain = {k: v for k, v in settings.items() if not k.startswith("masking.")}
        cfg = PretrainConfig.from_toml(flags[0], **over, **plain, masking=masking)
        store = DocStore(cfg.docstore)
        torch.manual_seed(0)
        model, tok = build_model(cfg, store)
        ref = None  # the closed-book variant retrieves nothing
        if cfg.mode == "realm":
            ref = SyncRefresher(model.docs, every=0, autocast=cfg.autocast, root=work / f"speed-index-{lang}")
            if index_dir is None:
                ref.refresh(model.encoder, 0)  # the same towers in every variant: one index
                index_dir = ref.version_dir(0)
            else:
                ref.load(index_dir)
        opt = optimizer_for(model, cfg)
        # the candidates the trainer would use (hybrid ones wrap the index's search)
        search = candidate_search(cfg, model, ref.search) if ref is not None else None
        setups[name] = dict(
            cfg=cfg,
            model=model,
            opt=opt,
            sched=warmup_schedule(opt, cfg.schedule, 0, cfg.steps),
            col=make_collator(cfg, store, tok, model, return_tensors="pt"),
            ids=split_ids(cfg, store)[0],
            ref=ref,
            search=search,
            ac=autocast_dtype(dev, cfg.autocast, torch.float32),
            t=[],
        )
    for step in range(1, steps + 2):  # the first step of each variant is a warm-up
        for name, s in setups.items():
            t0 = time.perf_counter()
            train_step(
                s["model"],
                s["opt"],
                s["sched"],
                s["col"],
                s["ids"],
                s["cfg"],
                step,
                s["search"],
                dev,
                s["ac"],
            )
            if step > 1:
                s["t"].append(time.perf_counter() - t0)
            log(f"speed {name} step {step}: {time.perf_counter() - t0:.2f} s")
    res = {
        "steps_measured": steps,
        "queries_per_step": setups[variants[0]]["cfg"].batch_size * accum,
        "machine": machine(),
        "autocast": str(setups[variants[0]]["ac"]),
    }
    for name, s in setups.items():
        med = statistics.median(s["t"])
        res[f"{name}_step_seconds"] = med
        res[f"{name}_queries_per_s"] = s["cfg"].batch_size * accum / med
    base = res[f"{variants[0]}_queries_per_s"]
    for name in variants[1:]:
        res[f"{name}_over_{variants[0]}"] = res[f"{name}_queries_per_s"] / base
    out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return res


SPEED_VARIANTS: dict[str, dict[str, object]] = {
    "today": {},
    "topm": {"reader_backprop_top": 1},
    "query": {"retriever_train": "query"},
    "packed": {"reader_layout": "query_first"},
    "new": {"reader_backprop_top": 1, "retriever_train": "query", "reader_layout": "query_first"},
    # for compute matching (`compute`): the combined arms and the closed-book run, timed side by side
    "all": ARMS["all"],
    "all_packed": ARMS["all_packed"],
    "all_answer": ARMS["all_answer"],
    "closed": {"mode": "mlm"},
}
# the new settings with every packed row in one padded batch (no length groups)
SPEED_VARIANTS["new_one_group"] = {**SPEED_VARIANTS["new"], "reader_bucket_slack": float("inf")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "stage",
        choices=[
            "diag0",
            "arm",
            "compute",
            "formatted",
            "warm",
            "cached",
            "speed",
            "towers",
            "downstream",
            "report",
            "report-cached",
            "explain",
        ],
    )
    ap.add_argument("lang", nargs="?", choices=["en", "nb"], default="en")
    ap.add_argument(
        "name",
        nargs="?",
        default="today",
        help="arm: one of " + ", ".join(ARMS) + ", or closed (the closed-book run alone)",
    )
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b45")
    ap.add_argument("--steps", type=int, default=200, help="pre-training steps of every run (default 200)")
    ap.add_argument("--curves", action="store_true", help="arm: also score the intermediate checkpoints")
    ap.add_argument("--speed-steps", type=int, default=4)
    ap.add_argument("--speed-accum", type=int, default=1, help="speed: micro-batches a step (default 1)")
    ap.add_argument("--variants", default=SPEED_DEFAULT, help="speed: variants (the first is the base)")
    ap.add_argument("--store", help="the DocStore (default: LANG's under --work)")
    ap.add_argument("--reader", help="the reader (default: the LANG config's)")
    ap.add_argument("--batch-size", type=int, help="queries a step (default: the LANG config's)")
    ap.add_argument("--device", help="auto, cpu, cuda (default: the config's)")
    ap.add_argument("--heldout", type=int, help="chunks held out (default: the config's)")
    ap.add_argument("--eval-n", type=int, help=f"held-out spans scored (default {EVAL_N})")
    ap.add_argument(
        "--fresh", action="store_true", help="formatted: read the queries after those the format run saw"
    )
    ap.add_argument("--formatted", action="store_true", help="towers: the arm of the `formatted` stage")
    ap.add_argument("--queries", type=int, default=4000, help="cached: training queries to score")
    ap.add_argument(
        "--part", help="cached, downstream: only share I of P (I/P), e.g. 0/2 and 1/2 side by side"
    )
    ap.add_argument("--parts", type=int, default=2, help="cached: the shares the scores were cached in")
    ap.add_argument(
        "--sizes", default="250,500,1000,2000,4000", help="cached: the curve's numbers of queries"
    )
    ap.add_argument("--epochs", type=int, default=5, help="cached: passes over the cached scores")
    ap.add_argument(
        "--negatives",
        default="none",
        choices=["none", "in_batch"],
        help="cached: in_batch adds the batch's other chunks at target 0 (run LANG-cached-in_batch)",
    )
    ap.add_argument(
        "--target",
        default="reader",
        choices=["reader", "answer", "answer_free"],
        help="cached: answer learns from which of the cached chunks hold the masked span, not from the "
        "reader's scores (run LANG-cached-answer); answer_free the same from the first --queries training "
        "chunks with no reader pass (run LANG-cached-answer_free)",
    )
    ap.add_argument("--tower-batch", type=int, default=16, help="cached: queries a query-tower step")
    ap.add_argument("--rag-limit", type=int, default=200, help="downstream: training questions a run")
    ap.add_argument("--rag-epochs", type=float, default=1.0, help="downstream: epochs a run")
    ap.add_argument("--test-limit", type=int, help="downstream: test questions scored (default all 472)")
    ap.add_argument(
        "--cells",
        help="downstream: only these READER-TOWERS cells, e.g. plain-start,realm-realm (default all)",
    )
    ap.add_argument("--no-diagnose", action="store_true", help="arm: leave out the end-of-training diagnosis")
    ap.add_argument(
        "--keep",
        action="store_true",
        help="report: keep what the committed realm_learns.json holds of runs the --work folder lacks",
    )
    args = ap.parse_args()
    OVERRIDES.update(pick(args, *OVERRIDE_FLAGS))
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "diag0":
        diag0_stage(args.work, args.lang, args.steps)
    elif args.stage == "arm":
        arm_stage(args.work, args.lang, args.name, args.steps, args.curves)
    elif args.stage == "compute":
        compute_stage(args.work, args.lang, args.name, args.steps)
    elif args.stage == "formatted":
        formatted_stage(args.work, args.lang, args.name, args.steps, args.fresh)
    elif args.stage == "warm":
        warm_stage(args.work, args.lang, args.steps)
    elif args.stage == "cached":
        cached_main(args)
    elif args.stage == "speed":
        speed_stage(args.work, args.lang, args.speed_steps, args.variants.split(","), args.speed_accum)
    elif args.stage == "towers":
        run_work = formatted_work(args.work, args.fresh) if args.formatted or args.fresh else args.work
        towers_stage(args.work, args.name, run_work)
    elif args.stage == "downstream":
        from benchmarks.realm.realm_learns_downstream import CELLS, cells_of, downstream_stage

        run_work = formatted_work(args.work, args.fresh) if args.formatted or args.fresh else args.work
        part = part_of(args.part or "0/1")
        cells = cells_of(args.cells) if args.cells else CELLS
        downstream_stage(
            args.work, args.name, run_work, args.rag_limit, args.rag_epochs, args.test_limit, part, cells
        )
    elif args.stage == "report-cached":
        from benchmarks.realm.realm_learns_cached import report_cached

        report_cached(args.work)
    elif args.stage == "explain":
        from benchmarks.realm.realm_learns_explain import explain_stage

        explain_stage(args.work, ("en", "nb"), store_of)
    elif args.stage == "report":
        from benchmarks.realm.realm_learns_report import report

        report(args.work, keep=args.keep)


if __name__ == "__main__":
    main()
