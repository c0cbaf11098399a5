"""DaLUKE's experiment table at CPU scale: four LUKE/DaLUKE pre-trainings, NER on WNUT-17, 5 seeds.

Steps (each reused from --work when it already exists with the same settings, so a rerun after a
crash continues where it stopped):
1. corpus: `ralm corpus build --sample enwiki --chunk-size 128` (gensim's English Wikipedia sample,
   106 articles; links and DaLUKE's auto-annotation, which the build does by default).
2. annotation: entity spans per 1,000 words with links alone and with links + auto
   (`ralm.luke.annotations.annotation_stats`; DaLUKE counts 1 per 200 words, i.e. 5, from links alone).
3. speed: a pre-training step of each row vs the plain MLM step (mode = "mlm") of the same model on
   the same word tokens, interleaved in this process (`luke_speed.measure`); target <= 1.3x. Its
   step times also give the pre-training time estimate printed before step 4.
4. pre-training: `ralm luke pretrain configs/luke_demo.toml` for each row, same data, steps,
   batch and seed: Baseline (sources = link, l = L = 384), +auto (link + auto), +ent (link,
   l = --entity-width), +auto+ent. DaLUKE used l = 252 with L = 768 (its 256-wide entity embedding
   rounded down to a multiple of its 12 heads); here 384/3 = 128 rounded down to a multiple of
   MiniLM's 12 heads: l = 120. An interrupted run is continued with --resume.
5. NER: `ralm luke ner` per row and `ralm finetune ner` for the word-only row (the bundled MiniLM,
   the checkpoint every LUKE run starts from: a token classifier), with the same seeds, the same
   seeded training subset (--train-limit / --max-train draw the same sample), the same first
   --max-eval dev and test sentences and the same budget (epochs, batch, lr, head lr, schedule,
   warm-up, weight decay, max length). Candidate spans are at most --max-span-length words: WNUT-17
   entities are short (98% of the test entities have at most 5 words; the exact share over the
   evaluated sentences is in the JSON), and a longer gold entity counts as missed.
   The span classifier's inference rate (sentences/s, words in to IOB2 tags out) comes from
   `ralm luke ner`'s results.

   The control row "no pre-training" is the Baseline's model as `ralm luke pretrain` builds it
   before its first step (MiniLM's word side, LUKE's copied queries, a fresh entity side), fine-tuned
   the same way: the difference to Baseline is what the pre-training steps add.

The fine-tuning budget (1,000 training sentences, 3 epochs = 375 steps, batch 8, lr 1e-4 with heads
at 1e-3, linear decay, 6% warm-up): at 300 sentences x 2 epochs (76 steps) the span classifier and
the word-only tagger both predicted only "O" (test F1 0, one seed); at 600 x 2 (150 steps) the span
classifier had barely left "O" (F1 2-4 against 39 word-only, 3 seeds). A LUKE seed costs about 5x a
word-only one at l = L and 3x at l = 120: a tweet of ~20 words has ~90 candidate spans, and each is
an entity token in the same transformer.

Writes benchmarks/results/luke_ner.json (common.write_result) and luke_ner.md (the table, then
`ralm table` over the NER result directories). WNUT-17 is read from ../shared/data/wnut17.

Run: python -m benchmarks.luke.luke_ner [--work runs/luke_ner] [--pretrain-steps 300] [--seeds 1,2,3,4,5]
(about 2.5 h with OMP_NUM_THREADS=1; rows can run in two processes at once with --rows and the same
--work, about 1.5 h on 2 cores, and a final run with all rows reuses them and writes the table)
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from benchmarks.common import OFFLINE, RESULTS, ROOT, ralm_logged, ralm_stdout, script_command, write_result
from benchmarks.luke.luke_ner_stats import (
    INIT,
    LABELS,
    WORD_ONLY,
    annotation,
    model_record,
    pretrain_record,
    span_coverage,
    table_md,
    word_only_params,
)
from benchmarks.luke.luke_speed import (
    ENTITY_WIDTH,
    VARIANTS,
    make_config,
    measure,
    pretrain_argv,
    variant_settings,
)
from ralm.atomic import write_json_atomic

DATA = ROOT.parent / "shared" / "data" / "wnut17"


def _same(path: Path, settings: dict) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")) == settings
    except (OSError, ValueError):
        return False


# ----------------------------------------------------------------------------- steps 1-2
def ensure_corpus(work: Path, log: Path) -> Path:
    corpus = work / "corpus"
    if not (corpus / "manifest.json").is_file():
        print("corpus: building the enwiki sample (chunk size 128) ...", flush=True)
        ralm_logged(
            [
                "corpus",
                "build",
                "--sample",
                "enwiki",
                "--out",
                str(corpus),
                "--chunk-size",
                "128",
                "--overwrite",
            ],
            log,
        )
    return corpus


# ----------------------------------------------------------------------------- step 4
def pretrain_settings(args: argparse.Namespace, corpus: Path, variant: str) -> dict[str, Any]:
    return {
        "docstore": str(corpus),
        "steps": args.pretrain_steps,
        "batch_size": args.pretrain_batch,
        "max_seq_length": args.seq,
        "seed": args.pretrain_seed,
        **variant_settings(variant, args.entity_width),
    }


def ensure_pretrained(args: argparse.Namespace, corpus: Path, variant: str, work: Path, log: Path) -> Path:
    """RUN = work/pretrain/VARIANT: reused when finished with these settings, resumed when interrupted."""
    from ralm.luke.pretrain_run import read_run_config

    run = work / "pretrain" / variant
    want = pretrain_settings(args, corpus, variant)
    flag = []
    if (run / "config.toml").is_file():
        saved = read_run_config(run)
        same = all(getattr(saved, k) == v for k, v in want.items())
        if same and (run / "model" / "config.json").is_file():
            print(f"pretrain {VARIANTS[variant][0]}: reusing {run}", flush=True)
            return run
        flag = ["--resume"] if same else ["--overwrite"]
    elif run.exists():
        flag = ["--overwrite"]
    sets = [f"max_seq_length={args.seq}", f"checkpoint_every={args.checkpoint_every}", "keep_checkpoints=1"]
    sets.append(f"auto_annotation={'true' if want['auto_annotation'] else 'false'}")
    if want["entity_hidden_size"] is not None:
        sets.append(f"entity_hidden_size={want['entity_hidden_size']}")
    t0 = time.perf_counter()
    print(f"pretrain {VARIANTS[variant][0]}: {args.pretrain_steps} steps {' '.join(flag)} ...", flush=True)
    pretrain = pretrain_argv(corpus, run, args, seed=args.pretrain_seed)
    ralm_logged([*pretrain, *flag, *(x for s in sets for x in ("--set", s))], log)
    print(f"  {time.perf_counter() - t0:.0f} s", flush=True)
    return run


def ensure_init(args: argparse.Namespace, corpus: Path, work: Path) -> Path:
    """work/init/model: the Baseline's model as `ralm luke pretrain` builds it before its first step
    (same backbone, entity vocabulary and seed), saved without training."""
    from ralm.luke.io import save_model
    from ralm.luke.pretrain_run import prepare

    run = work / "init"
    cfg = make_config(corpus, "baseline", args.pretrain_batch, args.seq, seed=args.pretrain_seed)
    want = {"docstore": str(corpus), "seed": args.pretrain_seed, "vocab": cfg.entity_vocab_size}
    if (run / "model" / "config.json").is_file() and _same(run / "settings.json", want):
        print(f"{LABELS[INIT]}: reusing {run}", flush=True)
        return run
    prep = prepare(cfg)
    save_model(prep.model, run / "model", extra={"backbone": str(prep.backbone), "step": 0})
    write_json_atomic(run / "settings.json", want)
    print(f"{LABELS[INIT]}: saved {run / 'model'}", flush=True)
    return run


# ----------------------------------------------------------------------------- step 5
def budget(args: argparse.Namespace, dataset: str = "wnut17") -> list[str]:
    """Flags that both `ralm luke ner` and `ralm finetune ner` take, with equal meaning (--max-eval only
    where args.max_eval is not None)."""
    max_eval = [] if args.max_eval is None else ["--max-eval", str(args.max_eval)]
    return [
        "--seeds",
        args.seeds,
        "--epochs",
        str(args.epochs),
        "--batch-size",
        str(args.batch_size),
        "--lr",
        str(args.lr),
        "--lr-head",
        str(args.lr_head),
        "--schedule",
        args.schedule,
        "--warmup-ratio",
        str(args.warmup_ratio),
        "--weight-decay",
        str(args.weight_decay),
        "--max-length",
        str(args.max_length),
        *max_eval,
        "--dataset",
        dataset,
        "--no-save",
        "--no-progress",
        "--overwrite",
    ]


def luke_ner_argv(args: argparse.Namespace, run: Path, out: Path, name: str, *extra: str) -> list[str]:
    """`ralm luke ner` of the LUKE run `run` on args.data into `out` as the row `name`: the first
    args.train_limit training sentences, spans of up to args.max_span_length words, `extra`, then
    the budget (`budget(args)`)."""
    return [
        "luke",
        "ner",
        str(args.data),
        "--model",
        str(run),
        "--out",
        str(out),
        "--name",
        name,
        "--train-limit",
        str(args.train_limit),
        "--max-span-length",
        str(args.max_span_length),
        *extra,
        *budget(args),
    ]


def token_ner_argv(args: argparse.Namespace, out: Path, name: str) -> list[str]:
    """`ralm finetune ner` (a token tagger on the bundled MiniLM) on args.data into `out` as the row
    `name`: the first args.train_limit training sentences, then the budget (`budget(args)`)."""
    limit = ["--max-train", str(args.train_limit)]
    return ["finetune", "ner", str(args.data), "--out", str(out), "--name", name, *limit, *budget(args)]


class Estimate:
    """Prints, after the first seed finished in this process, the time the remaining seeds will take."""

    def __init__(self, seeds_left: int) -> None:
        self.left, self.done = seeds_left, False

    def __call__(self, line: str) -> None:
        m = re.match(r"seed \d+: .*; (\d+) s", line)
        if not m:
            return
        self.left -= 1
        print("   " + line.rstrip(), flush=True)
        if not self.done and self.left:
            self.done = True
            s = int(m.group(1))
            print(
                f"   first seed {s} s: about {s * self.left / 60:.0f} min for the {self.left} seeds left",
                flush=True,
            )


def ner_row(args, row: str, run: Path | None, work: Path, log: Path, est: Estimate) -> Path:
    """work/ner/ROW/results.json; reused when work/ner/ROW.settings.json records the same command."""
    out = work / "ner" / row
    label = VARIANTS[row][0] if row in VARIANTS else LABELS[row]
    if run is not None:
        cmd = luke_ner_argv(args, run, out, label)
        # the run's weights as they are now: a retrained run makes the row stale
        model_key: Any = [str(run / "model"), (run / "model" / "model.safetensors").stat().st_mtime_ns]
    else:
        cmd = token_ner_argv(args, out, label)
        model_key = "bundled MiniLM"
    settings = {"cmd": [c for c in cmd if c != str(out)], "model": model_key}
    marker = work / "ner" / f"{row}.settings.json"
    if (out / "results.json").is_file() and _same(marker, settings):
        print(f"ner {label}: reusing {out}", flush=True)
        return out
    t0 = time.perf_counter()
    print(f"ner {label} ...", flush=True)
    marker.unlink(missing_ok=True)
    ralm_logged(cmd, log, on_line=est)
    marker.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(marker, settings)
    print(f"  {time.perf_counter() - t0:.0f} s", flush=True)
    return out


# ----------------------------------------------------------------------------- output


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "luke_ner"), help="corpus, runs and NER outputs")
    ap.add_argument("--data", default=str(DATA), help="WNUT-17 directory (read by path)")
    ap.add_argument("--rows", default=",".join([*VARIANTS, INIT, WORD_ONLY]))
    ap.add_argument("--pretrain-steps", type=int, default=300)
    ap.add_argument("--pretrain-batch", type=int, default=16)
    ap.add_argument("--pretrain-seed", type=int, default=42)
    ap.add_argument("--seq", type=int, default=128, help="max_seq_length: the corpus's 128-token chunks")
    ap.add_argument("--checkpoint-every", type=int, default=100)
    ap.add_argument("--entity-width", type=int, default=ENTITY_WIDTH, help="l of the +ent rows (L = 384)")
    ap.add_argument("--speed-repeats", type=int, default=15, help="timed steps per model (0: skip)")
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument(
        "--train-limit", type=int, default=1000, help="training sentences per seed (seeded sample)"
    )
    ap.add_argument("--max-eval", type=int, default=300, help="first N dev and test sentences")
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--batch-size", type=int, default=8, help="sentences per step (DaLUKE: 8)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--lr-head", type=float, default=1e-3, help="span classifier / token classifier head")
    ap.add_argument("--schedule", default="linear")
    ap.add_argument("--warmup-ratio", type=float, default=0.06)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--max-length", type=int, default=128, help="tokens per sentence")
    ap.add_argument("--max-span-length", type=int, default=5, help="longest candidate span in words")
    ap.add_argument("--name", default="luke_ner")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "bench.log"
    rows = args.rows.split(",")
    variants = [r for r in rows if r in VARIANTS]
    bad = [r for r in rows if r not in VARIANTS and r not in LABELS]
    if bad or not Path(args.data).is_dir():
        raise SystemExit(f"unknown rows {bad}" if bad else f"{args.data}: no such directory (WNUT-17)")

    corpus = ensure_corpus(work, log)
    ann = annotation(corpus)
    speed: dict[str, Any] = {}
    speed_file = work / "speed.json"
    speed_key = [str(corpus), args.pretrain_batch, args.seq, args.speed_repeats, args.entity_width, variants]
    if args.speed_repeats and variants:
        cached = json.loads(speed_file.read_text()) if speed_file.is_file() else {}
        if cached.get("key") == speed_key:
            speed = cached["speed"]
            print("speed: reusing " + str(speed_file), flush=True)
        else:
            speed = measure(
                corpus,
                variants=variants,
                batch_size=args.pretrain_batch,
                seq=args.seq,
                repeats=args.speed_repeats,
                entity_width=args.entity_width,
            )
            write_json_atomic(speed_file, {"key": speed_key, "speed": speed})
        todo = [v for v in variants if not (work / "pretrain" / v / "model" / "config.json").is_file()]
        est = sum(speed["step_seconds_median"][f"luke/{v}"] for v in todo) * args.pretrain_steps
        if todo:
            print(
                f"pretrain: about {est / 60:.0f} min for {len(todo)} runs of {args.pretrain_steps} steps "
                "at the speed step's medians",
                flush=True,
            )

    runs = {v: ensure_pretrained(args, corpus, v, work, log) for v in variants}
    if INIT in rows:
        runs[INIT] = ensure_init(args, corpus, work)
    n_seeds = len(args.seeds.split(","))
    est = Estimate(n_seeds * len(rows))
    outs = {row: ner_row(args, row, runs.get(row), work, log, est) for row in rows}

    results: dict[str, dict] = {}
    for row in rows:
        if row == WORD_ONLY:
            r: dict[str, Any] = {"params_encoder": word_only_params()}
        else:
            r = model_record(runs[row]) if row == INIT else pretrain_record(runs[row])
        res = json.loads((outs[row] / "results.json").read_text(encoding="utf-8"))
        f1 = res["summary"]["test"]["f1"]
        r.update(f1_mean=f1["mean"], f1_std=f1["std"], seeds=f1["n"], ner_seconds=res["seconds"])
        if res.get("inference"):
            r["sentences_per_s"] = res["inference"]["sentences_per_s"]["mean"]
        results[row] = r
    table = ralm_stdout("table", *(outs[r] for r in rows), env=OFFLINE)
    md = table_md(results, ann, speed, args)
    text = md + "\n`ralm table` of the NER result directories:\n\n" + table
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.md").write_text(text, encoding="utf-8")
    print(text)

    metrics: dict[str, float] = {
        "entities_per_1k_words_link": round(ann["entities_per_1k_words"]["link"], 2),
        "entities_per_1k_words_link_auto": round(ann["entities_per_1k_words"]["link+auto"], 2),
        "corpus_words": ann["words"],
        **span_coverage(Path(args.data), args.max_eval, args.max_span_length),
    }
    if speed:
        metrics["step_ratio"] = speed["ratio_to_mlm"].get("baseline")
        metrics.update({f"step_ratio/{v}": x for v, x in speed["ratio_to_mlm"].items()})
        metrics.update({f"step_seconds/{n}": x for n, x in speed["step_seconds_median"].items()})
        fastest = speed["step_seconds_min"]
        metrics["step_ratio_best_of"] = (
            round(fastest["luke/baseline"] / fastest["mlm"], 3) if "luke/baseline" in fastest else None
        )
        metrics["mlm_to_hf_bert_step"] = speed.get("mlm_to_hf_bert")
    for row, r in results.items():
        for k, v in r.items():
            metrics[f"{row}/{k}"] = round(v, 4) if isinstance(v, float) else v
    write_result(
        args.name,
        script_command(__file__),
        metrics,
        {
            "step_ratio": "<= 1.3 (Baseline LUKE pre-training step / plain MLM step, same words; issue 15)",
            "f1": "no bar (issue 15: report the table). DaLUKE's direction cannot be quoted: the results "
            "section of shared/seeds/daluke-entity-aware-danish-lm.tex is empty; its stated aims are more "
            "entities from auto-annotation (4.7M -> 115M) and fewer parameters with l < L",
            "annotation": "reported; DaLUKE: 1 entity per 200 words (5 per 1,000) from links alone",
        },
        settings={k: v for k, v in vars(args).items() if k not in ("work", "name")},
        speed=speed,
        table=table,
    )


if __name__ == "__main__":
    main()
