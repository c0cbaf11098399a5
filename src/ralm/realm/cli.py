"""REALM/BRENT commands: pre-train, evaluate, export, fill, plot.

ralm pretrain CONFIG.toml [--steps 300 --out runs/x ...]   (or flags only: --docstore D --out R)
ralm pretrain CONFIG.toml --resume                           (continue from the newest checkpoint)
ralm pretrain CONFIG.toml --nproc 4                          (= torchrun --nproc_per_node 4 -m ralm pretrain ...)
ralm evaluate-mlm RUN [--baseline RUN_MLM]                   (held-out salient perplexity table)
ralm export-reader RUN OUT [--retriever-out DIR]             (AutoModelForMaskedLM, or AutoModelForCausalLM, directory)
ralm fill RUN "Fermat's little theorem says ... is a [MASK] prime."
ralm plot RUN [RUN...] --out curves.png
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path

from ralm.atomic import write_json_atomic, write_text_atomic
from ralm.cli_flags import add_command_group, add_device, add_out, add_overwrite, add_quiet, add_resume
from ralm.errors import RalmError

# flag -> PretrainConfig field, for the settings worth a flag of their own; `--set NAME=VALUE` reaches the rest
FLAGS = {
    "docstore": str,
    "out": str,
    "mode": str,
    "queries": str,
    "reader": str,
    "reader_kind": str,
    "retriever": str,
    "retriever_init": str,
    "steps": int,
    "batch_size": int,
    "grad_accum": int,
    "k": int,
    "null_doc": str,
    "score_scale": str,
    "lr_scale": float,
    "marginal": str,
    "reader_backprop_top": int,
    "retriever_train": str,
    "retriever_loss": str,
    "reader_train": str,
    "distill_tau": float,
    "answer_queries": int,
    "query_masks": str,
    "lr_reader": float,
    "lr_retriever": float,
    "weight_decay": float,
    "warmup_steps": int,
    "schedule": str,
    "refresh_every": int,
    "refresh_mode": str,
    "index_kind": str,
    "initial_index": str,
    "embed_batch_size": int,
    "candidates": str,
    "candidate_depth": int,
    "bm25_lang": str,
    "checkpoint_every": int,
    "keep_checkpoints": int,
    "heldout": int,
    "seed": int,
    "data_offset": int,
    "device": str,
    "autocast": str,
}


def flag_help(name: str) -> str:
    """A flag's help: what the setting means and its default (PretrainConfig's); argparse adds the choices."""
    from ralm.realm.config import HELP, PretrainConfig

    default = PretrainConfig.__dataclass_fields__[name].default
    text = HELP[name]
    return text if default in (None, "") else f"{text} (default: {default})"


def config_from_args(args: argparse.Namespace):
    from ralm.realm.config import PretrainConfig, check_setting
    from ralm.typed_config import parse_value

    overrides: dict = {}
    for name in FLAGS:
        v = getattr(args, name, None)
        if v is not None:
            overrides[name] = v
    masking: dict = {}
    known = {f.name for f in fields(PretrainConfig)}
    for item in args.set or []:
        if "=" not in item:
            raise RalmError(f"--set {item!r}: write NAME=VALUE (e.g. --set masking.salient_rate=0.2)")
        key, val = item.split("=", 1)
        key = key.strip()
        if not key.startswith("masking.") and key not in known:
            raise RalmError(f"--set {key}: unknown setting; known: {', '.join(sorted(known))}")
        try:
            value = check_setting(key, parse_value(val))
        except RalmError as exc:
            msg = str(exc)
            if msg.startswith(f"{key} = "):  # the value as typed, not as parsed
                msg = f"{key}={val}: " + msg.rsplit(": ", 1)[1]
            raise RalmError(f"--set {msg}") from None
        if key.startswith("masking."):
            masking[key.removeprefix("masking.")] = value
        else:
            overrides[key] = value
    if args.config:
        return PretrainConfig.from_toml(args.config, **overrides, masking=masking)
    return PretrainConfig.from_dict({**overrides, "masking": masking}, source="command line")


def cmd_pretrain(args: argparse.Namespace) -> int:
    import os
    import subprocess

    from ralm.realm.config import CONFIG_FILE, PretrainConfig
    from ralm.realm.training.trainer import pretrain
    from ralm.train.distributed import torchrun_command, without_nproc

    if args.nproc is not None and args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        cmd = torchrun_command(args.nproc, without_nproc(args.argv))
        print("launching: " + " ".join(cmd), flush=True)
        return subprocess.run(cmd, check=False).returncode

    if args.resume and args.config is None and args.out and not args.docstore:
        from pathlib import Path

        saved = Path(args.out) / CONFIG_FILE
        if saved.is_file():  # `ralm pretrain --out RUN --resume`: the run's own config
            args.config = str(saved)
    cfg = config_from_args(args)
    assert isinstance(cfg, PretrainConfig)
    run = pretrain(
        cfg, resume=args.resume, overwrite=args.overwrite, progress=not args.quiet, stop_after=args.stop_after
    )
    print(f"run: {run} (metrics.jsonl, checkpoints/, config.toml)")
    return 0


def _load(run: str, device: str | None, initial: bool = False):
    from ralm.realm.training.run import load_run

    return load_run(run, device=device, initial=initial)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ralm.realm.inference.evaluate import evaluate_mlm, format_table, ratios

    run = _load(args.run, args.device, args.initial)
    base = _load(args.baseline, args.device, args.initial) if args.baseline else None
    if args.gold:
        return _evaluate_gold(args, run)
    if args.spans:
        return _evaluate_spans(args, run)
    if args.diagnose:
        from ralm.realm.inference.diagnose import diagnose, format_diagnosis

        diag = diagnose(
            run, base, n=args.n, depth=args.depth, reader_depth=args.reader_depth, batch_size=args.batch_size
        )
        print(format_diagnosis(diag.summary))
        default = "diagnose_initial.json" if args.initial else "diagnose.json"
        path = diag.save(Path(args.json_out) if args.json_out else Path(args.run) / default)
        print(f"written: {path} (and the per-span records beside it)")
        return 0
    rows = evaluate_mlm(run, base, n=args.n, batch_size=args.batch_size)
    print(format_table(rows))
    default = "eval_mlm_initial.json" if args.initial else "eval_mlm.json"
    out = Path(args.json_out) if args.json_out else Path(args.run) / default
    payload = {
        "run": args.run,
        "baseline": args.baseline,
        "checkpoint": "initial" if args.initial else run.checkpoint.name,
        "step": run.state.get("step"),
        "heldout_chunks": int(len(run.heldout_ids) if args.n is None else min(args.n, len(run.heldout_ids))),
        "rows": [r.as_dict() for r in rows],
        "ratios": ratios(rows) if len(rows) > 1 else [],
    }
    write_json_atomic(out, payload)
    print(f"written: {out}")
    return 0


def _evaluate_gold(args: argparse.Namespace, run) -> int:
    """`evaluate-mlm --gold QUERIES GOLD`: the run on a query store whose right documents are known."""
    import numpy as np

    from ralm.corpus.docstore import DocStore
    from ralm.errors import CorpusError
    from ralm.realm.inference.gold import (
        evaluate_gold,
        examples,
        format_examples,
        format_gold,
        gold_chunks,
        read_gold,
    )

    queries_dir, gold_file = args.gold
    try:
        queries = DocStore(queries_dir)
    except CorpusError as exc:
        raise RalmError(str(exc)) from None
    if args.fresh_index and not args.initial and run.refresher is not None:
        # the index as the checkpoint's document tower embeds the corpus now
        run.refresher.refresh(run.model.encoder, int(run.state.get("step", 0)))
    gold = gold_chunks(queries, run.store, read_gold(gold_file))
    ids = np.flatnonzero(gold >= 0)
    if args.n is not None:
        ids = ids[: args.n]
    if not len(ids):
        raise RalmError(f"{gold_file}: names the gold document of none of the queries in {queries_dir}")
    res = evaluate_gold(run, queries, gold, ids=ids, batch_size=args.batch_size, reader=not args.no_reader)
    print(format_gold(res["summary"]))
    if not args.no_reader and "fill_retrieval" in res["records"][0]:
        res["examples"] = examples(run, res["records"])  # the fills come from the corpus's chunks
        print(format_examples(res["examples"]))
    default = "eval_gold_initial.json" if args.initial else "eval_gold.json"
    out = Path(args.json_out) if args.json_out else Path(args.run) / default
    write_json_atomic(
        out,
        {
            "run": args.run,
            "queries": queries_dir,
            "gold": gold_file,
            "checkpoint": "initial" if args.initial else run.checkpoint.name,
            "step": run.state.get("step"),
            **res,
        },
    )
    print(f"written: {out}")
    return 0


def _evaluate_spans(args: argparse.Namespace, run) -> int:
    """`evaluate-mlm --spans`: the counted table over the run's first held-out spans."""
    from ralm.realm.inference.span_table import format_span_table, span_table

    initial = None if args.initial else _load(args.run, args.device, initial=True)
    table = span_table(run, n=args.n or 100, initial=initial, batch_size=args.batch_size)
    text = format_span_table(table)
    print(text)
    default = "span_table_initial.json" if args.initial else "span_table.json"
    out = Path(args.json_out) if args.json_out else Path(args.run) / default
    payload = {
        "run": args.run,
        "checkpoint": "initial" if args.initial else run.checkpoint.name,
        "step": run.state.get("step"),
        **table,
    }
    write_json_atomic(out, payload)
    write_text_atomic(out.with_suffix(".txt"), text + "\n")
    print(f"written: {out} (and the table as {out.with_suffix('.txt').name})")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ralm.realm.inference.export import export_reader, export_retriever

    run = _load(args.run, "cpu")
    print(f"reader: {export_reader(run, args.out, overwrite=args.overwrite)}")
    if args.retriever_out:
        print(f"retriever: {export_retriever(run, args.retriever_out, overwrite=args.overwrite)}")
    return 0


def cmd_fill(args: argparse.Namespace) -> int:
    from ralm.realm.inference.fill import fill

    run = _load(args.run, args.device)
    for text in args.text:
        res = fill(run, text, k=args.k, top=args.top)
        print(json.dumps(res.as_dict(), ensure_ascii=False) if args.json else res.format())
        if not args.json and len(args.text) > 1:
            print()
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from ralm.realm.inference.plot import plot_runs

    print(f"written: {plot_runs(args.runs, args.out, alpha=args.alpha)}")
    return 0


def cmd_run_verify(args: argparse.Namespace) -> int:
    from ralm.realm.training.verify import verify_run

    problems, notes, checked = verify_run(args.run)
    for note in notes:
        print(f"note: {note}")
    for p in problems:
        print(p)
    if problems:
        raise RalmError(
            f"{args.run}: {len(problems)} problem(s) (listed above); resume from an intact checkpoint "
            "(damaged ones are skipped) or start over with `ralm pretrain --overwrite`"
        )
    print(f"ok: {args.run}: {checked} files and indexes match what was recorded")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from ralm.realm.options import CHOICES

    p = sub.add_parser(
        "pretrain",
        help="REALM/BRENT retrieval-augmented pre-training (or --mode mlm, the baseline)",
        description="Pre-train from a TOML config and/or flags; the config is saved in the run directory. "
        "Flags override the config file; a default is what applies when neither gives the setting.",
    )
    p.add_argument(
        "config", nargs="?", help="TOML config: settings as top-level keys, plus a [masking] table"
    )
    for name, typ in FLAGS.items():
        choices = list(CHOICES[name]) if name in CHOICES else None
        p.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=typ,
            default=None,
            choices=choices,
            help=flag_help(name),
        )
    p.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="any other setting, in TOML syntax, e.g. --set masking.salient_rate=0.2 --set tensorboard=false "
        "(repeatable)",
    )
    add_resume(
        p, "continue from the newest intact checkpoint of --out (with its config.toml if no config is given)"
    )
    add_overwrite(
        p, "delete an existing run directory and start over (refused while another process writes it)"
    )
    add_quiet(p, "no progress bars")
    p.add_argument(
        "--stop-after",
        type=int,
        default=None,
        metavar="STEP",
        help="checkpoint and stop after this step; the schedule still follows --steps (continue with --resume)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help="run N local processes through torchrun (DDP; gloo on CPU, NCCL on GPU) (default: 1)",
    )
    p.set_defaults(func=cmd_pretrain)

    p = sub.add_parser(
        "evaluate-mlm", help="held-out salient-masked perplexity: with retrieval, reader alone, baseline"
    )
    p.add_argument("run", help="a `ralm pretrain` run directory (its newest intact checkpoint is used)")
    p.add_argument(
        "--baseline", metavar="RUN", help="an MLM-only run on the same corpus and split, for comparison"
    )
    p.add_argument("--n", type=int, default=None, help="use only the first N held-out chunks (default: all)")
    p.add_argument("--batch-size", type=int, default=8, help="held-out chunks per batch (default: 8)")
    add_device(p, "auto, cpu, cuda or cuda:N (default: the run's device setting)")
    p.add_argument(
        "--json-out", metavar="FILE", help="where to write the table as JSON (default: RUN/eval_mlm.json)"
    )
    p.add_argument(
        "--initial",
        action="store_true",
        help="score the runs' starting points (their config's reader and towers before step 1) instead of "
        "their checkpoints: a curve's step-0 point (default JSON: RUN/eval_mlm_initial.json)",
    )
    p.add_argument(
        "--diagnose",
        action="store_true",
        help="instead of the table, diagnose a causal REALM run: answers in dense/BM25/hybrid candidates at "
        "depth 3, 8, 20, and the span ratio to closed-book under the run's p(z|x), a uniform one, the score "
        "scale x0.5/2/4/8 and the best single document (default JSON: RUN/diagnose.json)",
    )
    p.add_argument(
        "--gold",
        nargs=2,
        metavar=("QUERIES", "GOLD"),
        help="instead of the table, score the run on the query DocStore QUERIES whose right documents GOLD "
        'names (JSONL of {"query", "document"} source ids, as a world\'s gold.jsonl): recall@1/3 of the '
        "right document, p(right|x), and the span's exact match and NLL with retrieval, closed-book and given "
        "the right document (default JSON: RUN/eval_gold.json)",
    )
    p.add_argument(
        "--no-reader",
        action="store_true",
        help="--gold: the retrieval measures alone (recall@1/3, p(right|x), p(null|x)), no reader pass",
    )
    p.add_argument(
        "--spans",
        action="store_true",
        help="instead of the table, count a causal REALM run on its first N held-out spans (--n, default "
        "100): exact match, token F1 and span perplexity closed-book, with retrieval (at step 0 too) and "
        "given the chunk that holds the span, how often such a chunk is retrieved, and three examples "
        "(default JSON: RUN/span_table.json, the printed table beside it as .txt)",
    )
    p.add_argument(
        "--fresh-index",
        action="store_true",
        help="--gold: re-embed the corpus with the checkpoint's document tower first (the saved index is as "
        "of the run's last refresh)",
    )
    p.add_argument("--depth", type=int, default=20, help="--diagnose: candidates per source (default: 20)")
    p.add_argument(
        "--reader-depth", type=int, default=8, help="--diagnose: candidates the reader scores (default: 8)"
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "export-reader",
        help="write the run's reader as an AutoModelForMaskedLM directory (a causal reader: AutoModelForCausalLM)",
    )
    p.add_argument("run", help="a `ralm pretrain` run directory (its newest intact checkpoint is used)")
    p.add_argument("out", help="directory to write the reader to (Hugging Face layout, safetensors)")
    p.add_argument(
        "--retriever-out", metavar="DIR", help="also write the query/doc towers as a DualEncoder directory"
    )
    add_overwrite(p, "replace an existing export in OUT")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("fill", help="predict [MASK] tokens, showing retrieved documents (REALM Table 3)")
    p.add_argument("run", help="a `ralm pretrain` run directory (its newest intact checkpoint is used)")
    p.add_argument(
        "text",
        nargs="+",
        help="text(s) with [MASK] where tokens should be predicted (spans, for a causal reader)",
    )
    p.add_argument("--k", type=int, default=None, help="documents incl. the null one (default: the run's k)")
    p.add_argument("--top", type=int, default=5, help="alternatives shown per mask (default: 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object per text instead of the table")
    add_device(p, "auto, cpu, cuda or cuda:N (default: the run's device setting)")
    p.set_defaults(func=cmd_fill)

    p = sub.add_parser("plot", help="PNG of loss and perplexity curves of one or more runs")
    p.add_argument("runs", nargs="+", help="`ralm pretrain` run directories (their metrics.jsonl)")
    add_out(p, "PNG file to write", type=None)
    p.add_argument(
        "--alpha", type=float, default=0.9, help="EMA smoothing, 0 = none (BRENT: 0.99) (default: 0.9)"
    )
    p.set_defaults(func=cmd_plot)

    rsub = add_command_group(sub, "run", "inspect a pre-training run directory", dest="run_command")
    v = rsub.add_parser(
        "verify",
        help="check every checkpoint and index of a run against its recorded sizes and checksums",
        description="Re-hash each checkpoint's files against its state.json, each index version against its "
        "index.json, and read config.toml, split.json and metrics.jsonl. Exit 0 when intact, 2 otherwise.",
    )
    v.add_argument("run", type=Path, help="run directory (`ralm pretrain --out`)")
    v.set_defaults(func=cmd_run_verify)
