"""REALM/BRENT with a causal-LM reader (issue 35): Norwegian with Gemma-3-270M, English with SmolLM2-135M.

Stages (each skipped when its output exists in --work; training runs resume after an interruption):

  towers      the NorQuAD pool and the unsupervised Norwegian DocStore (NorQuAD passages + Norwegian
              Debian text, 128 MiniLM tokens a chunk, as `retriever_train.py` builds them) and the best
              NorQuAD DPR encoder of `retriever_train.py` (dpr-cc: `ralm retriever train contrastive` on
              the unsupervised text, then `dpr` on NorQuAD train from it, batch 64 through gradient caching)
  corpus      the REALM corpus: the same Norwegian text with names, numbers and dates as salient spans
              (`--names --numbers`), the English demo corpus, and how often each kind of span recurs
              elsewhere in its corpus (what retrieval can find at all)
  nb          BRENT Fig. 2 in Norwegian: `ralm pretrain` with the Gemma-3 reader and the dpr-cc towers,
              and the closed-book baseline (the same LM generating the spans without a chunk), same steps
              and data; held-out span perplexity at step 0 (`evaluate-mlm --initial`) and at the end, per
              span kind; curves (`ralm plot`)
  table2      REALM Table 2 in Norwegian: NorQuAD-open answer recall@1/5/20 (472 test questions, the
              5,859-chunk pool) of the towers after REALM pre-training against the dpr-cc towers they
              started from
  en          the same in English: SmolLM2-135M reader on the demo's Wikipedia sample, MiniLM towers
  downstream  BRENT Table 1's question: `ralm rag train` on NorQuAD-open twice with the same budget (the
              first --rag-limit train questions, 1 epoch, batch 8, LoRA r=16, dense top 3 of each arm's own
              towers), from the REALM reader + towers and from plain Gemma-3 + the dpr-cc towers; test EM/F1
              of RAG k=3 and closed-book on the first --test-limit of the 472 test questions (default all)
  speed       a causal REALM step (`train_step`) against the bare passes of the same models over the same
              (z, x, y) rows: towers forward, LM forward with the output layer on the span positions,
              backward and the AdamW step, interleaved, medians
  report      benchmarks/results/realm_causal.json and .md (realm_causal_report.py)

Run: python -m benchmarks.realm.realm_causal all [--work runs/b35] [--steps 300]   (or one stage at a time)
The committed results (2-core CPU, one core a job, OMP_NUM_THREADS=1): towers, corpus; `en --steps 300`;
`nb --steps 100`; table2; `downstream --rag-limit 200` (one arm per core with --arms; all 472 test questions);
speed; report. 300 Norwegian steps would take ~3 h a run on one core of this machine (~35 s a step, the other core busy).
Reads ../shared/data/norquad by path. Environment: OMP_NUM_THREADS (default 2) torch threads.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.common import RESULTS, ROOT, log, offline, ralm, read_json

offline()
from benchmarks.realm.realm_causal_report import EN_CONFIG, KS, NB_CONFIG, report  # noqa: E402
from benchmarks.realm.realm_causal_spans import span_recurrence  # noqa: E402
from benchmarks.realm.realm_learns import checkpointed, pretrain_run  # noqa: E402
from benchmarks.realm.realm_learns_downstream import dense_index, rag_eval, rag_train  # noqa: E402
from benchmarks.realm.realm_step import StepRig, time_steps  # noqa: E402


# ----------------------------------------------------------------------------- towers
def towers(work: Path) -> Path:
    """The dpr-cc encoder of retriever_train.py (same corpus, settings and order); returns its directory."""
    from benchmarks.retrieval.retriever_train import build_stores, dpr_cc, unsupervised

    pool, unsup = build_stores(work)
    contrastive = unsupervised(work, unsup, "contrastive", 600, 64, 5e-5)
    return dpr_cc(work, pool, contrastive, 4)


# ----------------------------------------------------------------------------- corpora
def corpora(work: Path) -> tuple[Path, Path]:
    """(Norwegian REALM corpus with names/numbers/dates, English demo corpus)."""
    from benchmarks.retrieval.retriever_train import build_stores

    build_stores(work)
    nb = work / "unsup-nb-spans"
    if not (nb / "manifest.json").is_file():
        ralm(
            "corpus",
            "build",
            work / "pool.jsonl",
            work / "nordic_nb.jsonl",
            "--out",
            nb,
            "--chunk-size",
            128,
            "--lang",
            "nb",
            "--names",
            "--numbers",
            "--quiet",
        )
    en = work / "enwiki-64"
    if not (en / "manifest.json").is_file():
        ralm("corpus", "build", "--sample", "enwiki", "--out", en, "--chunk-size", 64, "--quiet")
    for name, store in (("nb", nb), ("en", en)):
        out = work / f"recurrence-{name}.json"
        if not out.is_file():
            out.write_text(json.dumps(span_recurrence(store), indent=2) + "\n", encoding="utf-8")
    return nb, en


# ----------------------------------------------------------------------------- pre-training runs
def pretrain_pair(
    work: Path, tag: str, config: Path, store: Path, steps: int, extra: list, eval_n: int | None = None
) -> tuple[Path, Path]:
    """The REALM run and its closed-book baseline (resumed when interrupted), evaluated at step 0 and at the end."""
    runs = {}
    for mode, name in (("mlm", "closed"), ("realm", "realm")):
        run = work / f"{tag}-{name}"
        runs[name] = run
        if not checkpointed(run, steps):
            pretrain_run(run, mode, steps, [config, "--docstore", store], extra)
    realm, closed = runs["realm"], runs["closed"]
    n = [] if eval_n is None else ["--n", eval_n]
    if not (realm / "eval_mlm_initial.json").is_file():
        ralm("evaluate-mlm", realm, "--baseline", closed, "--initial", *n)
    if not (realm / "eval_mlm.json").is_file():
        ralm("evaluate-mlm", realm, "--baseline", closed, *n)
    curves = RESULTS / f"realm_causal_{tag}_curves.png"
    if not curves.is_file():
        ralm("plot", realm, closed, "--out", curves)
    return realm, closed


def nb_stage(work: Path, steps: int, eval_n: int | None = None) -> None:
    enc = work / "dpr-cc" / "encoder"
    if not (enc / "ralm_encoder.json").is_file():
        raise SystemExit(f"{enc}: missing; run the towers stage first")
    nb, _ = corpora(work)
    pretrain_pair(work, "nb", NB_CONFIG, nb, steps, ["--retriever", enc], eval_n)


def en_stage(work: Path, steps: int, eval_n: int | None = None) -> None:
    _, en = corpora(work)
    pretrain_pair(work, "en", EN_CONFIG, en, steps, [], eval_n)


# ----------------------------------------------------------------------------- REALM Table 2
def table2_stage(work: Path) -> None:
    from benchmarks.retrieval.retriever_train import evaluate, qa_jsonl

    out = work / "table2.json"
    if out.is_file():
        return
    realm = work / "nb-realm"
    if not (work / "nb-realm-towers" / "ralm_encoder.json").is_file():
        ralm(
            "export-reader",
            realm,
            work / "nb-realm-reader",
            "--retriever-out",
            work / "nb-realm-towers",
            "--overwrite",
        )
    ev = evaluate(
        work,
        work / "pool",
        {"before": work / "dpr-cc" / "encoder", "after": work / "nb-realm-towers"},
        qa_jsonl("test", work / "test.jsonl"),
        "test",
    )
    rows = {
        name: {f"recall@{k}": round(rep.recall[k], 4) for k in KS}
        | {"hub@20": round(rep.hubness["hub_share"], 4)}
        for name, rep in ev["reports"].items()
    }
    out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------- downstream
def downstream_stage(
    work: Path, limit: int, epochs: float, which: list[str], test_limit: int | None = None
) -> None:
    """`ralm rag train` + `rag eval` twice: REALM reader + towers, plain Gemma-3 + dpr-cc towers."""
    from benchmarks.retrieval.retriever_train import qa_jsonl

    train_q = qa_jsonl("train", work / "train.jsonl")
    test_q = qa_jsonl("test", work / "test.jsonl")
    if "realm" in which and not (work / "nb-realm-towers" / "ralm_encoder.json").is_file():
        table2_stage(work)
    arms = {
        "realm": (work / "nb-realm-reader", work / "nb-realm-towers"),
        "plain": ("gemma3", work / "dpr-cc" / "encoder"),
    }
    for arm, (lm, enc) in arms.items():
        if arm not in which:
            continue
        index = dense_index(enc, work / "pool", work / f"index-{arm}")
        gen = work / f"rag-{arm}"
        if not (gen / "model" / "config.json").is_file():
            rag_train(train_q, lm, index, 3, epochs, limit, gen)
        ev = work / f"rag-eval-{arm}"
        if not (ev / "rag-k3" / "results.json").is_file():
            rag_eval(test_q, gen / "model", index, ("rag", "closed-book"), 3, arm, ev, test_limit)


# ----------------------------------------------------------------------------- speed
def speed_stage(work: Path, steps: int, warmup: int, cfg=None) -> dict:
    """A causal REALM step vs the bare passes of its models over the same rows (see the module
    docstring); `cfg` (a PretrainConfig) defaults to the Norwegian run's."""
    from ralm.models.precision import autocast_context
    from ralm.realm.config import PretrainConfig
    from ralm.realm.training.build import make_collator

    out = work / "speed.json"
    if out.is_file():
        return read_json(out)
    if cfg is None:
        nb, _ = corpora(work)
        cfg = PretrainConfig.from_toml(
            NB_CONFIG,
            docstore=str(nb),
            out="-",
            retriever=str(work / "dpr-cc" / "encoder"),
            warmup_steps=0,
            grad_accum=1,  # one micro-batch a step: the bare passes below run one batch's rows
        )
    rig = StepRig.build(
        cfg, lambda store, tok, model: make_collator(cfg, store, tok, model, return_tensors="pt")
    )
    model, opt = rig.model, rig.opt

    def inputs(step: int):
        batch, doc_ids = rig.retrieved(step)
        rows = model.reader.build_rows(batch, [[*map(int, r), -1] for r in doc_ids])
        return batch, model.docs.tower_batch(doc_ids.ravel()), rows

    def bare(batch, dbatch, rows, head_only: bool) -> float:
        model.zero_grad(set_to_none=True)
        lm = model.reader.lm
        t0 = time.perf_counter()
        with autocast_context(rig.dev, rig.ac):
            q = model.encoder.query_tower(batch["input_ids"], batch["attention_mask"])
            d = model.encoder.doc_tower(**dbatch)
            if head_only:
                h = lm.base_model(
                    input_ids=rows.input_ids, attention_mask=rows.attention_mask
                ).last_hidden_state
                logits = lm.get_output_embeddings()(h[rows.rows, rows.cols - 1])
            else:
                logits = lm(input_ids=rows.input_ids, attention_mask=rows.attention_mask).logits
                logits = logits[rows.rows, rows.cols - 1]
            loss = q.float().mean() + d.float().mean() + logits.float().logsumexp(-1).mean()
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    tokens = 0  # the reader tokens of a step (the last one's)

    def say(step: int, tf: float, tb: float, th: float, x: tuple) -> None:
        nonlocal tokens
        tokens = int(x[2].attention_mask.sum())
        log(
            f"speed step {step}: full {tf:.2f}s  bare {tb:.2f}s  bare (full logits) {th:.2f}s  ({tokens} reader tokens)"
        )

    full, b, h = time_steps(rig, inputs, bare, steps, warmup, say)
    res = {
        "step_seconds_median": full,
        "bare_seconds_median": b,
        "step_vs_bare": full / b,
        "bare_full_logits_seconds_median": h,
        "step_vs_bare_full_logits": full / h,
        "reader_tokens_per_step": tokens,
        "steps_measured": steps,
        "autocast": str(rig.ac),
    }
    out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    stages = ["towers", "corpus", "nb", "table2", "en", "downstream", "speed", "report", "all"]
    ap.add_argument("stage", choices=stages)
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b35")
    ap.add_argument("--steps", type=int, default=300, help="pre-training steps of every run (default 300)")
    ap.add_argument("--rag-limit", type=int, default=500, help="NorQuAD train questions for rag train")
    ap.add_argument("--rag-epochs", type=float, default=1.0)
    ap.add_argument("--arms", default="realm,plain", help="downstream arms to run (default: both)")
    ap.add_argument("--speed-steps", type=int, default=6)
    ap.add_argument(
        "--eval-n", type=int, default=None, help="held-out chunks per evaluate-mlm (default: all)"
    )
    ap.add_argument("--test-limit", type=int, default=None, help="NorQuAD-open test questions for rag eval")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    todo = stages[:-1] if args.stage == "all" else [args.stage]
    for stage in todo:
        log(f"stage {stage}")
        if stage == "towers":
            towers(work)
        elif stage == "corpus":
            corpora(work)
        elif stage == "nb":
            nb_stage(work, args.steps, args.eval_n)
        elif stage == "table2":
            table2_stage(work)
        elif stage == "en":
            en_stage(work, args.steps, args.eval_n)
        elif stage == "downstream":
            downstream_stage(work, args.rag_limit, args.rag_epochs, args.arms.split(","), args.test_limit)
        elif stage == "speed":
            speed_stage(work, args.speed_steps, 1)
        elif stage == "report":
            report(work)


if __name__ == "__main__":
    main()
