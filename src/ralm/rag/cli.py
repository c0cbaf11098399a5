"""`ralm rag`: question answering with a generator that reads retrieved passages.

    ralm rag retrieve test.jsonl --index INDEX --retriever bm25 --lang nb -k 20 --out test.retrieved.jsonl
    ralm rag eval test.jsonl --lm smollm2 --index INDEX --retriever hybrid --mode rag -k 3 --out runs/rag
    ralm rag eval test.jsonl --lm smollm2 --retrieved test.retrieved.jsonl --mode closed-book rag replug --out runs/rag
    ralm rag train train.jsonl --lm smollm2 --retrieved train.retrieved.jsonl -k 3 --out runs/gen
    ralm rag lsr train.jsonl --lm smollm2 --index INDEX -n 20 --out runs/lsr

Questions: NQ-open JSONL, DPR TSV, WebQuestions or SQuAD v1.1 (answers as strings or regular
expressions); SQuAD contexts give the oracle mode its gold passage (the chunk of the index's
DocStore that holds the answer, when the DocStore was built from those contexts).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ralm.cli_flags import (
    add_autocast,
    add_command_group,
    add_device,
    add_no_progress,
    add_out,
    add_overwrite,
    add_seed,
    dataclass_from_args,
)
from ralm.errors import RalmError
from ralm.rag.cli_shared import load_lm as _load_lm
from ralm.rag.cli_shared import log as _log
from ralm.rag.cli_shared import passages_for as _passages
from ralm.rag.cli_shared import read_question_args as _questions
from ralm.rag.train_cli import cmd_lsr, cmd_train
from ralm.retrieval.options import add_retrieval_args

__all__ = ["register"]


def _lm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lm",
        default="smollm2",
        help="smollm2 (default), gemma3 (reads Norwegian, Danish), a causal LM directory or a .gguf file",
    )
    p.add_argument(
        "--gguf-file", default=None, help="the .gguf file inside --lm's directory, when it holds several"
    )
    add_device(p, "cuda, cpu or auto (default)", default="auto")
    add_autocast(p, "bf16 compute where the device has it (auto), or off", default="auto", choices=None)


def _backend_arg(p: argparse.ArgumentParser) -> None:
    from ralm.frozen.backends import BACKENDS, DEFAULT_BACKEND

    p.add_argument(
        "--backend",
        default=DEFAULT_BACKEND,
        choices=BACKENDS,
        help="where greedy decoding runs: torch (the reference), torch-int8, llama.cpp (a GGUF file; "
        "`ralm convert-gguf` writes one for a trained model) or auto (default: llama.cpp on a CPU "
        "where it is installed and the model has a GGUF, else torch)",
    )


def _retrieval_args(p: argparse.ArgumentParser) -> None:
    add_retrieval_args(
        p,
        lang_help="BM25 analysis and answer normalisation language (en, nb, da, ...; default: the "
        "DocStore's, else en)",
    )
    p.add_argument(
        "--retrieved", type=Path, default=None, help="passages per question from `ralm rag retrieve`"
    )
    p.add_argument(
        "--rerank",
        type=int,
        default=0,
        metavar="M",
        help="rerank the top M passages by the LM's likelihood of the question (UPR); 0 = off",
    )


def _run_args(p: argparse.ArgumentParser, save_every: int) -> None:
    """The options of a resumable training run (rag train, rag lsr)."""
    p.add_argument(
        "--save-every",
        type=int,
        default=save_every,
        help="checkpoint every N steps (OUT/checkpoints): a stopped run resumes when rerun; 0 = never",
    )
    add_overwrite(
        p, "start over in an OUT that holds a run (unfinished, or finished: a rerun without it does nothing)"
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add `rag` and its subcommands to the top-level parser."""
    rs = add_command_group(
        sub,
        "rag",
        "question answering with a generator over retrieved passages (RAG, REPLUG, LSR)",
        dest="rag_command",
        description=__doc__.split("\n\n")[0],
    )

    r = rs.add_parser("retrieve", help="the top-k passages of each question, as a portable JSONL file")
    r.add_argument("questions", type=Path)
    _retrieval_args(r)
    r.add_argument("-k", type=int, default=20)
    add_out(r)
    r.add_argument("--answers", default="auto", choices=["auto", "string", "regex"])
    r.set_defaults(func=cmd_retrieve)

    e = rs.add_parser("eval", help="answer questions in one or more modes and score EM/F1/contains")
    e.add_argument("questions", type=Path)
    _lm_args(e)
    _backend_arg(e)
    _retrieval_args(e)
    e.add_argument("--mode", nargs="+", default=["rag"], choices=["closed-book", "rag", "replug", "oracle"])
    e.add_argument(
        "-k", type=int, nargs="+", default=[3], help="passages in the prompt (several: one row each)"
    )
    e.add_argument("--max-new-tokens", type=int, default=20)
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--max-prompt-tokens", type=int, default=None, help="default: the LM's positions")
    e.add_argument("--replug-temperature", type=float, default=1.0)
    e.add_argument(
        "--oracle-depth",
        type=int,
        default=100,
        help="oracle on data without gold passages: the answer-bearing passage is sought among this many retrieved (default 100)",
    )
    e.add_argument(
        "--fewshot", type=int, default=0, help="few-shot examples from --fewshot-from (closed-book style)"
    )
    e.add_argument("--fewshot-from", type=Path, default=None, help="a train question file for --fewshot")
    e.add_argument(
        "--no-chat",
        action="store_true",
        help="plain-text prompts even when the tokenizer has a chat template",
    )
    e.add_argument("--limit", type=int, default=None, help="the first N questions only")
    e.add_argument("--answers", default="auto", choices=["auto", "string", "regex"])
    e.add_argument("--name", default=None, help="row label in tables (default: the LM's name)")
    add_out(e)
    add_no_progress(e)
    e.set_defaults(func=cmd_eval)

    t = rs.add_parser("train", help="fine-tune the generator on question + passages -> answer (full or LoRA)")
    t.add_argument("questions", type=Path, help="training questions with answers")
    _lm_args(t)
    _retrieval_args(t)
    t.add_argument("--closed-book", action="store_true", help="the control: train without passages")
    t.add_argument("-k", type=int, default=3)
    t.add_argument("--gold-passage", default="off", choices=["off", "mix"])
    t.add_argument("--gold-rate", type=float, default=0.5)
    t.add_argument("--epochs", type=float, default=2.0)
    t.add_argument("--lr", type=float, default=None, help="default 5e-5 (full) or 2e-4 (LoRA)")
    t.add_argument("--batch-size", type=int, default=16)
    t.add_argument("--lora-r", type=int, default=0, help="LoRA rank (peft); 0 = full fine-tuning")
    t.add_argument("--max-prompt-tokens", type=int, default=1024)
    t.add_argument("--no-chat", action="store_true")
    add_seed(t)
    t.add_argument("--limit", type=int, default=None)
    add_out(t)
    _run_args(t, save_every=200)
    add_no_progress(t)
    t.set_defaults(func=cmd_train)

    s = rs.add_parser("lsr", help="REPLUG LSR: train a dense index's query tower from the LM's preferences")
    s.add_argument("questions", type=Path, help="training questions with answers")
    _lm_args(s)
    s.add_argument(
        "--index", type=Path, required=True, help="a dense retrieval index (its doc tower stays fixed)"
    )
    s.add_argument("-n", type=int, default=20, help="candidates per question (REPLUG: 20)")
    s.add_argument("--gamma", type=float, default=1.0)
    s.add_argument("--beta", type=float, default=1.0)
    s.add_argument("--epochs", type=float, default=1.0)
    s.add_argument("--lr", type=float, default=2e-5)
    s.add_argument("--batch-size", type=int, default=32)
    s.add_argument("--max-prompt-tokens", type=int, default=1024)
    s.add_argument("--lang", default="en")
    s.add_argument("--limit", type=int, default=None)
    add_seed(s)
    add_out(s)
    add_no_progress(s)
    _run_args(s, save_every=50)
    s.set_defaults(func=cmd_lsr)


def cmd_retrieve(args: argparse.Namespace) -> int:
    """`ralm rag retrieve`."""
    from ralm.rag.retrieved import write_retrieved

    args.limit = None
    qs = _questions(args)
    if args.rerank:
        raise RalmError("--rerank belongs to `ralm rag eval`/`train` (it needs the LM)")
    ps = _passages(args, qs, args.k)
    if ps is None:
        raise RalmError("retrieval needs --index INDEX or --corpus STORE")
    write_retrieved(args.out, qs, ps)
    print(f"{args.out}: top-{args.k} passages of {len(qs)} questions")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """`ralm rag eval`: one row per mode (and per k for rag/replug)."""
    from ralm.rag.data import read_questions
    from ralm.rag.evaluate import RagConfig, run_rag, write_run

    qs = _questions(args)
    needs = [m for m in args.mode if m in ("rag", "replug")]
    if needs and args.retrieved is None and args.index is None and args.corpus is None:
        raise RalmError(f"--mode {needs[0]} needs passages: pass --index, --corpus or --retrieved")
    fewshot = []
    if args.fewshot:
        if args.fewshot_from is None:
            raise RalmError("--fewshot needs --fewshot-from TRAIN (examples from a train split)")
        fewshot = [(q.question, q.answers[0]) for q in read_questions(args.fewshot_from)[: args.fewshot]]
    lm = _load_lm(args)
    depth = (
        max(args.k)
        if "oracle" not in args.mode or all(q.gold for q in qs)
        else max(max(args.k), args.oracle_depth)
    )
    ps = _passages(args, qs, depth, lm)
    rows = []
    for mode in args.mode:
        for k in args.k if mode in ("rag", "replug") else [max(args.k)]:
            cfg = dataclass_from_args(
                RagConfig, args, mode=mode, k=k, lang=args.lang or "en", chat=False if args.no_chat else None
            )
            run = run_rag(lm, qs, ps, cfg, fewshot=fewshot, progress=not args.no_progress)
            for n in run.notes:
                _log(f"note: {n}")
            label = mode if mode in ("closed-book", "oracle") else f"{mode}-k{k}"
            out = args.out / label if len(args.mode) > 1 or len(args.k) > 1 else args.out
            write_run(
                out,
                run,
                cfg,
                name=args.name or f"{Path(str(args.lm)).name} {label}",
                data=str(args.questions),
                lm_name=lm.name,
                retriever=None if ps is None else str(args.retrieved or args.retriever),
            )
            rows.append((label, run.metrics, out))
    print("| mode | EM | F1 | contains | R@k | s/question |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, m, _ in rows:
        rk = next((v for key, v in m.items() if key.startswith("recall@")), None)
        print(
            f"| {label} | {m.get('em', 0):.2f} | {m.get('f1', float('nan')):.2f} | {m.get('contains', 0):.2f} | "
            f"{'–' if rk is None else f'{rk:.1f}'} | {m['seconds_per_question']:.3f} |"
        )
    print(f"predictions and results.json under {args.out}")
    return 0
