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
import json
import shutil
import sys
from pathlib import Path

from ralm.errors import RalmError

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
    p.add_argument("--device", default="auto", help="cuda, cpu or auto (default)")
    p.add_argument("--autocast", default="auto", help="bf16 compute where the device has it (auto), or off")


def _retrieval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", type=Path, default=None, help="a retrieval index directory (ralm index build)")
    p.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="a DocStore: BM25 built in memory (with --index: its DocStore)",
    )
    p.add_argument("--retriever", default="bm25", choices=["bm25", "dense", "hybrid"], help="default bm25")
    p.add_argument(
        "--lang", default="en", help="BM25 analysis and answer normalisation language (en, nb, da, ...)"
    )
    p.add_argument(
        "--retrieved", type=Path, default=None, help="passages per question from `ralm rag retrieve`"
    )
    p.add_argument("--rerank", type=int, default=0, metavar="M",
                   help="rerank the top M passages by the LM's likelihood of the question (UPR); 0 = off")  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    """Add `rag` and its subcommands to the top-level parser."""
    p = sub.add_parser("rag", help="question answering with a generator over retrieved passages (RAG, REPLUG, LSR)",
                       description=__doc__.split("\n\n")[0])  # fmt: skip
    rs = p.add_subparsers(dest="rag_command", metavar="SUBCOMMAND")

    r = rs.add_parser("retrieve", help="the top-k passages of each question, as a portable JSONL file")
    r.add_argument("questions", type=Path)
    _retrieval_args(r)
    r.add_argument("-k", type=int, default=20)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--answers", default="auto", choices=["auto", "string", "regex"])
    r.set_defaults(func=cmd_retrieve)

    e = rs.add_parser("eval", help="answer questions in one or more modes and score EM/F1/contains")
    e.add_argument("questions", type=Path)
    _lm_args(e)
    _retrieval_args(e)
    e.add_argument("--mode", nargs="+", default=["rag"], choices=["closed-book", "rag", "replug", "oracle"])
    e.add_argument(
        "-k", type=int, nargs="+", default=[3], help="passages in the prompt (several: one row each)"
    )
    e.add_argument("--max-new-tokens", type=int, default=20)
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--max-prompt-tokens", type=int, default=None, help="default: the LM's positions")
    e.add_argument("--replug-temperature", type=float, default=1.0)
    e.add_argument("--oracle-depth", type=int, default=100,
                   help="oracle on data without gold passages: the answer-bearing passage is sought among this many retrieved (default 100)")  # fmt: skip
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
    e.add_argument("--out", type=Path, required=True)
    e.add_argument("--no-progress", action="store_true")
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
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--limit", type=int, default=None)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument(
        "--save-every",
        type=int,
        default=200,
        help="checkpoint every N steps (OUT/checkpoints): a stopped run resumes when rerun; 0 = never",
    )
    t.add_argument(
        "--overwrite", action="store_true", help="start over in an OUT that holds an unfinished run"
    )
    t.add_argument("--no-progress", action="store_true")
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
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_lsr)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


def _questions(args):
    from ralm.rag.data import read_questions

    notes: list[str] = []
    qs = read_questions(args.questions, answers=getattr(args, "answers", "auto"), notes=notes)
    if args.limit is not None:
        qs = qs[: args.limit]
    for n in notes:
        _log(f"note: {n}")
    return qs


def _load_lm(args):
    from ralm.frozen.lm import load_frozen_lm

    return load_frozen_lm(args.lm, gguf_file=args.gguf_file, device=args.device, autocast=args.autocast)


def _passages(args, questions, k: int, lm=None):
    """Passages per question (None when no retrieval is asked for); gold chunks from the index's store."""
    from ralm.rag.retrieved import read_retrieved, rerank_by_lm, retrieve

    if args.retrieved is not None:
        ps = read_retrieved(args.retrieved, questions)
    elif args.index is not None or args.corpus is not None:
        from ralm.rag.data import gold_chunks
        from ralm.retrieval.retriever import Retriever

        retriever = Retriever.open(
            index=args.index, corpus=args.corpus, kind=args.retriever, lang=args.lang, log=_log
        )
        store = retriever.store
        _log(f"retrieval: {retriever.description}")
        ps = retrieve(questions, retriever, min(max(k, args.rerank or 0), len(store)))
        if any(q.context for q in questions):
            found = gold_chunks(questions, store, args.lang)
            _log(
                f"gold passages: {found} of {len(questions)} questions have their answer's chunk in {store.root}"
            )
    else:
        return None
    if args.rerank:
        if lm is None:
            raise RalmError("--rerank needs the LM: use it with `ralm rag eval` or `train`")
        ps = rerank_by_lm(lm, questions, ps, max(k, 1))
    return ps


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
            cfg = RagConfig(mode=mode, k=k, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                            max_prompt_tokens=args.max_prompt_tokens, lang=args.lang,
                            replug_temperature=args.replug_temperature, chat=False if args.no_chat else None)  # fmt: skip
            run = run_rag(lm, qs, ps, cfg, fewshot=fewshot, progress=not args.no_progress)
            for n in run.notes:
                _log(f"note: {n}")
            label = mode if mode in ("closed-book", "oracle") else f"{mode}-k{k}"
            out = args.out / label if len(args.mode) > 1 or len(args.k) > 1 else args.out
            write_run(out, run, cfg, name=args.name or f"{Path(str(args.lm)).name} {label}", data=str(args.questions),
                      lm_name=lm.name, retriever=None if ps is None else str(args.retrieved or args.retriever))  # fmt: skip
            rows.append((label, run.metrics, out))
    print("| mode | EM | F1 | contains | R@k | s/question |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, m, _ in rows:
        rk = next((v for key, v in m.items() if key.startswith("recall@")), None)
        print(f"| {label} | {m.get('em', 0):.2f} | {m.get('f1', float('nan')):.2f} | {m.get('contains', 0):.2f} | "
              f"{'–' if rk is None else f'{rk:.1f}'} | {m['seconds_per_question']:.3f} |")  # fmt: skip
    print(f"predictions and results.json under {args.out}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """`ralm rag train`."""
    from ralm.rag.finetune import GeneratorTrainConfig, save_generator, train_generator, training_examples
    from ralm.rag.prompt import PromptBuilder

    qs = _questions(args)
    lm = _load_lm(args)
    ps = None if args.closed_book else _passages(args, qs, args.k, lm)
    if ps is None and not args.closed_book:
        raise RalmError("RAG fine-tuning needs passages (--index, --corpus or --retrieved), or --closed-book")
    builder = PromptBuilder(lm.tokenizer, args.max_prompt_tokens, chat=False if args.no_chat else None)
    examples = training_examples(
        builder, qs, ps, args.k, gold=args.gold_passage, gold_rate=args.gold_rate, seed=args.seed
    )
    if builder.truncated:
        _log(
            f"note: {builder.truncated} prompts had their passages cut to fit {args.max_prompt_tokens} tokens"
        )
    cfg = GeneratorTrainConfig(epochs=args.epochs, lr=args.lr or (2e-4 if args.lora_r else 5e-5),
                               batch_size=args.batch_size, lora_r=args.lora_r, seed=args.seed)  # fmt: skip
    from ralm.rag.train_run import start_over

    if args.save_every < 0:
        raise RalmError(f"--save-every {args.save_every}: must be >= 0")
    if args.overwrite or (args.out / "train.json").is_file():  # a finished run is trained again, as before
        start_over(args.out)
        (args.out / "train.json").unlink(missing_ok=True)  # so that this run, if stopped, resumes
    model, stats = train_generator(lm.model, lm.tokenizer, examples, cfg, device=lm.device, autocast=lm.autocast,
                                   log=_log, progress=not args.no_progress, run=args.out,
                                   save_every=args.save_every)  # fmt: skip
    save_generator(model, lm.tokenizer, args.out / "model", card=_generator_card(args, lm.name, stats, cfg))
    (args.out / "train.json").write_text(json.dumps({"config": vars(cfg), "stats": stats, "lm": lm.name,
        "closed_book": args.closed_book, "k": args.k, "gold_passage": args.gold_passage}, indent=2) + "\n")  # fmt: skip
    from ralm.train.checkpoint import CKPT_DIR

    shutil.rmtree(
        args.out / CKPT_DIR, ignore_errors=True
    )  # the model is saved: its checkpoints served resuming
    print(f"{args.out / 'model'}: trained {stats['steps']} steps on {stats['examples']} examples in "
          f"{stats['seconds']:.0f} s (answer loss {stats['first_loss']:.3f} -> {stats['final_loss']:.3f})")  # fmt: skip
    return 0


def cmd_lsr(args: argparse.Namespace) -> int:
    """`ralm rag lsr`."""
    import numpy as np

    from ralm.rag.lsr import LSRConfig, index_with_query_tower, lm_preferences, train_lsr
    from ralm.rag.prompt import PromptBuilder
    from ralm.rag.retrieved import retrieve
    from ralm.retrieval.retriever import Retriever

    cfg = LSRConfig(n=args.n, gamma=args.gamma, beta=args.beta, epochs=args.epochs, lr=args.lr,
                    batch_size=args.batch_size, seed=args.seed)  # fmt: skip
    cfg.check()
    qs = [q for q in _questions(args) if not q.regex]
    dense = Retriever.load(args.index, "dense", log=_log)
    ps = retrieve(qs, dense, args.n)
    keep = [i for i, p in enumerate(ps) if len(p) == args.n]
    qs, ps = [qs[i] for i in keep], [ps[i] for i in keep]
    lm = _load_lm(args)
    builder = PromptBuilder(lm.tokenizer, args.max_prompt_tokens)
    logp = lm_preferences(lm, builder, qs, ps, progress=not args.no_progress)
    cands = np.asarray([[p.id for p in row] for row in ps], dtype=np.int64)
    vectors = np.load(args.index / "embeddings.npy", mmap_mode="r")
    encoder = dense.backend.encoder
    stats = train_lsr(encoder, qs, cands, vectors, logp, cfg, device=lm.device, log=_log)
    encoder.query_tower.cpu()
    index_with_query_tower(args.index, encoder, args.out / "index")
    (args.out / "lsr.json").write_text(
        json.dumps({"config": vars(cfg), "stats": stats, "questions": len(qs)}, indent=2) + "\n"
    )
    print(
        f"{args.out / 'index'}: the index with the LSR-trained query tower ({stats['steps']} steps, "
        f"KL {stats['first_loss']:.4f} -> {stats['final_loss']:.4f})"
    )
    return 0


def _generator_card(args, lm_name: str, stats: dict, cfg) -> str:
    """README.md model card of a generator trained by `ralm rag train`."""
    from ralm.model_card import model_card

    how = "without passages (closed-book control)" if args.closed_book else f"with the top {args.k} passages"
    return model_card(
        f"{args.out.name}: a generator fine-tuned for RAG question answering with ralm",
        f"`{lm_name}` fine-tuned to answer questions {how}, the loss on the answer tokens only "
        "(`ralm rag train`). Prompt it as `ralm rag eval` does (the chat template's user turn holds "
        "the instruction, numbered passages and the question).",
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=["ralm", "rag", "question-answering"],
        details={
            "training questions": f"`{args.questions.name}` ({stats['examples']} examples)",
            "passages": "none"
            if args.closed_book
            else f"top {args.k} ({args.retrieved or args.retriever}), gold passage {args.gold_passage}",
            "fine-tuning": f"{'LoRA r=' + str(cfg.lora_r) + ' (merged)' if cfg.lora_r else 'full'}, {stats['steps']} steps, "
            f"lr {cfg.lr:g}, batch {cfg.batch_size}",
            "answer loss": f"{stats['first_loss']:.3f} -> {stats['final_loss']:.3f}",
        },
        usage=f"""
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{args.out.name}/model")
model = AutoModelForCausalLM.from_pretrained("{args.out.name}/model")
""",
    )
