"""Quality (BRENT Figure 2's claim): held-out salient-span perplexity, REALM vs the MLM-only baseline.

BRENT continues pre-training from an existing masked LM (NorBERT2). The bundled MiniLM has no
MLM head, so stage 0 (`--warm-steps`, 0 to skip) makes one: MiniLM trained as a plain MLM
(BERT's random-token masking with 80/10/10, no retrieval) on the training chunks, then exported
as a Hugging Face masked LM. Stage 0 holds out the same chunks as the runs below.

From that reader both runs see the same training chunks in the same order with the same masks
for the same number of steps; one retrieves (k documents incl. the null one, MiniLM query and
document towers, exact index refreshed every --refresh-every steps), the other does not. Then
`evaluate_mlm` scores the held-out chunks (never training queries) with salient masking only.

Corpus: the gensim English Wikipedia sample chunked to --chunk-size tokens (the sample has
106 articles; shorter chunks make more of them and a cheaper reader on 2 CPU cores).

Run: python -m benchmarks.realm.realm_quality [--steps 600] [--chunk-size 64]
(--store: a DocStore built beforehand; --backbone: another encoder, e.g. a tiny one for a smoke run)
Writes benchmarks/results/realm_quality.json (and keeps the runs under --work).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import sample_store, script_command, write_result


def ensure_store(path: Path, chunk_size: int) -> Path:
    """The English sample DocStore in `chunk_size`-token chunks at `path`, built once."""
    return sample_store(path, "--chunk-size", chunk_size, "--overwrite")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--chunk-size", type=int, default=64)
    ap.add_argument("--refresh-every", type=int, default=100)
    ap.add_argument("--lr-reader", type=float, default=1e-4)
    ap.add_argument("--lr-retriever", type=float, default=1e-5)
    ap.add_argument("--null-doc", default="empty")
    ap.add_argument("--no-scale", action="store_true", help="plain q.d scores (REALM) instead of q.d/sqrt(d)")
    ap.add_argument("--heldout", type=int, default=200)
    ap.add_argument(
        "--warm-steps", type=int, default=1000, help="stage-0 MLM steps (0: start from fresh heads)"
    )
    ap.add_argument("--warm-batch-size", type=int, default=16)
    ap.add_argument("--warm-lr", type=float, default=3e-4)
    ap.add_argument("--work", default="/tmp/ralm-bench-realm")
    ap.add_argument("--store", help="a DocStore to use (default: the sample, built under --work)")
    ap.add_argument("--backbone", help="HF encoder dir for the towers and the first reader (default: MiniLM)")
    ap.add_argument("--name", default="realm_quality")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a PretrainConfig setting of the REALM run (TOML value; masking.NAME for the [masking] table), "
        "e.g. --set score_scale='\"learned\"' (repeatable; masking.NAME goes to the MLM-only run too, the rest not)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep a stage whose run under --work finished with the same config (its time is read from its metrics)",
    )
    args = ap.parse_args()

    from ralm.realm.config import PretrainConfig
    from ralm.realm.inference.evaluate import evaluate_mlm, format_table
    from ralm.realm.inference.export import export_reader
    from ralm.realm.masking.mlm import BERT_REPLACE, MaskingConfig
    from ralm.realm.training.run import load_run, read_run_config
    from ralm.realm.training.trainer import pretrain
    from ralm.train.checkpoint import latest_checkpoint

    work = Path(args.work)

    def run_stage(cfg: PretrainConfig) -> float:
        """Train `cfg` (or keep its finished run under --reuse); returns its training seconds."""
        out = Path(cfg.out)
        if args.reuse and (out / "config.toml").is_file():
            done = read_run_config(out).to_dict() == cfg.to_dict() and latest_checkpoint(out) is not None
            log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()] if done else []
            last = [r for r in log if r.get("step") == cfg.steps and "elapsed_seconds" in r]
            if last:
                print(f"reusing {out} (finished {cfg.steps} steps)")
                return float(last[-1]["elapsed_seconds"])
        t = time.perf_counter()
        pretrain(cfg, overwrite=True, progress=False)
        return time.perf_counter() - t

    sample = work / f"enwiki-{args.chunk_size}"
    store = Path(args.store) if args.store else ensure_store(sample, args.chunk_size)
    reader = args.backbone
    seconds = {}
    if args.warm_steps:
        warm = PretrainConfig(
            docstore=str(store),
            out=str(work / "warm"),
            mode="mlm",
            steps=args.warm_steps,
            reader=reader,
            batch_size=args.warm_batch_size,
            lr_reader=args.warm_lr,
            warmup_steps=50,
            heldout=args.heldout,
            checkpoint_every=0,
            tensorboard=False,
            masking=MaskingConfig(strategy="uniform", replace_probs=BERT_REPLACE),
        )
        seconds["warm"] = run_stage(warm)
        reader = str(export_reader(load_run(work / "warm"), work / "warm-reader", overwrite=True))
    common = dict(
        docstore=str(store),
        steps=args.steps,
        batch_size=args.batch_size,
        k=args.k,
        null_doc=args.null_doc,
        scale_by_sqrt_dim=not args.no_scale,
        refresh_every=args.refresh_every,
        lr_reader=args.lr_reader,
        lr_retriever=args.lr_retriever,
        heldout=args.heldout,
        encoder_max_length=max(args.chunk_size, 16),
        checkpoint_every=0,
        tensorboard=False,
        reader=reader,
        retriever=args.backbone or "minilm",  # the towers start from MiniLM (or --backbone) either way
    )
    from ralm.realm.config import check_setting
    from ralm.typed_config import parse_value

    levers: dict = {}
    masking_levers: dict = {}
    for item in args.set:
        key, val = item.split("=", 1)
        value = check_setting(key, parse_value(val))
        if key.startswith("masking."):
            masking_levers[key.removeprefix("masking.")] = value
        else:
            levers[key] = value
    for mode in ("realm", "mlm"):  # masking settings go to both runs: they must see the same masks
        extra = dict(levers) if mode == "realm" else {}
        if masking_levers:
            extra["masking"] = MaskingConfig(**masking_levers)
        seconds[mode] = run_stage(PretrainConfig(out=str(work / mode), mode=mode, **{**common, **extra}))
    run, base = load_run(work / "realm"), load_run(work / "mlm")
    rows = {r.name: r for r in evaluate_mlm(run, base)}
    print(format_table(list(rows.values())))
    realm_ppl = rows["realm (retrieval)"].ppl
    mlm_ppl = rows["mlm-only baseline"].ppl
    log = [json.loads(x) for x in (work / "realm" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in log if "loss" in r]
    tail = steps[-50:]
    cmd = script_command(__file__)
    write_result(
        args.name,
        cmd.strip(),
        {
            "heldout_ppl_realm_retrieval": realm_ppl,
            "heldout_ppl_realm_reader_alone": rows["realm reader alone"].ppl,
            "heldout_ppl_mlm_baseline": mlm_ppl,
            "ppl_ratio_realm_vs_mlm": realm_ppl / mlm_ppl,
            "heldout_masked_tokens": rows["mlm-only baseline"].tokens,
            "heldout_chunks": rows["mlm-only baseline"].examples,
            "steps": args.steps,
            "examples_per_step": args.batch_size,
            "train_seconds_realm": seconds["realm"],
            "train_seconds_mlm": seconds["mlm"],
            "train_seconds_warm": seconds.get("warm", 0.0),
            "heldout_answers_in_docs": rows["realm (retrieval)"].answers_in_docs,
            "last50_null_mass": sum(r.get("null_mass", 0) for r in tail) / len(tail),
            "last50_utility_1": sum(r.get("utility_1", 0) for r in tail) / len(tail),
            "last50_entropy": sum(r.get("entropy", 0) for r in tail) / len(tail),
            "last50_answers_in_docs": sum(r.get("answers_in_docs", 0) for r in tail) / len(tail),
        },
        {"ppl_ratio_realm_vs_mlm": "<= 0.5"},
        settings={k: v for k, v in vars(args).items()},
    )


if __name__ == "__main__":
    main()
