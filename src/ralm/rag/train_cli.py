"""`ralm rag train` and `ralm rag lsr`: fine-tuning the generator, and REPLUG LSR of a query tower.

Both run on ralm.train's backbone (ralm.rag.train_run): metrics.jsonl, checkpoints every
--save-every steps, and a rerun after any stop resumes where the run was.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ralm.atomic import write_json_atomic
from ralm.cli_flags import dataclass_from_args
from ralm.errors import RalmError
from ralm.rag.cli_shared import load_lm as _load_lm
from ralm.rag.cli_shared import log as _log
from ralm.rag.cli_shared import passages_for as _passages
from ralm.rag.cli_shared import read_question_args as _questions

__all__ = ["cmd_lsr", "cmd_train"]


def _run_options(args: argparse.Namespace, lm) -> dict[str, Any]:
    """The keywords of a resumable training run (`train_generator`, `train_lsr`): the run directory
    (--out) and its checkpoint interval (--save-every, ralm.rag.cli._run_args), the LM's device, the log."""
    return {"device": lm.device, "log": _log, "run": args.out, "save_every": args.save_every}


def cmd_train(args: argparse.Namespace) -> int:
    """`ralm rag train`."""
    from ralm.rag.finetune import GeneratorTrainConfig, save_generator, train_generator, training_examples
    from ralm.rag.prompt import PromptBuilder
    from ralm.rag.train_run import drop_checkpoints, prepare_out  # torch: loaded only when a command runs

    if prepare_out(args.out, args.save_every, args.overwrite, "train.json"):
        return _finished(args.out, "train.json")
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
    cfg = dataclass_from_args(GeneratorTrainConfig, args, lr=args.lr or (2e-4 if args.lora_r else 5e-5))
    model, stats = train_generator(
        lm.model,
        lm.tokenizer,
        examples,
        cfg,
        autocast=lm.autocast,
        progress=not args.no_progress,
        **_run_options(args, lm),
    )
    save_generator(model, lm.tokenizer, args.out / "model", card=_generator_card(args, lm.name, stats, cfg))
    write_json_atomic(
        args.out / "train.json",
        {
            "config": vars(cfg),
            "stats": stats,
            "lm": lm.name,
            "closed_book": args.closed_book,
            "k": args.k,
            "gold_passage": args.gold_passage,
        },
    )
    drop_checkpoints(args.out)
    print(
        f"{args.out / 'model'}: trained {stats['steps']} steps on {stats['examples']} examples in "
        f"{stats['seconds']:.0f} s (answer loss {stats['first_loss']:.3f} -> {stats['final_loss']:.3f})"
    )
    return 0


def cmd_lsr(args: argparse.Namespace) -> int:
    """`ralm rag lsr`."""
    import numpy as np

    from ralm.rag.lsr import (
        PREFERENCES,
        LSRConfig,
        cached_preferences,
        index_with_query_tower,
        lm_preferences,
        save_preferences,
        train_lsr,
    )
    from ralm.rag.prompt import PromptBuilder
    from ralm.rag.retrieved import retrieve
    from ralm.rag.train_run import LSR_CONFIG, drop_checkpoints, prepare_out
    from ralm.retrieval.retriever import Retriever

    cfg = dataclass_from_args(LSRConfig, args)
    cfg.check()
    if prepare_out(args.out, args.save_every, args.overwrite, "lsr.json", LSR_CONFIG, extra=(PREFERENCES,)):
        return _finished(args.out, "lsr.json")
    qs = [q for q in _questions(args) if not q.regex]
    dense = Retriever.load(args.index, "dense", log=_log)
    ps = retrieve(qs, dense, args.n)
    keep = [i for i, p in enumerate(ps) if len(p) == args.n]
    qs, ps = [qs[i] for i in keep], [ps[i] for i in keep]
    cands = np.asarray([[p.id for p in row] for row in ps], dtype=np.int64)
    lm = _load_lm(args)
    logp = cached_preferences(args.out / PREFERENCES, qs, cands, lm.name)
    if logp is None:  # the LM's scores of every (question, candidate): the costly part, kept for a rerun
        builder = PromptBuilder(lm.tokenizer, args.max_prompt_tokens)
        logp = lm_preferences(lm, builder, qs, ps, progress=not args.no_progress)
        save_preferences(args.out / PREFERENCES, qs, cands, logp, lm.name)
    else:
        _log(f"{args.out / PREFERENCES}: the LM preferences of a stopped run, reused")
    vectors = dense.doc_vectors()
    encoder = dense.encoder
    stats = train_lsr(encoder, qs, cands, vectors, logp, cfg, **_run_options(args, lm))
    encoder.query_tower.cpu()
    index_with_query_tower(args.index, encoder, args.out / "index")
    write_json_atomic(args.out / "lsr.json", {"config": vars(cfg), "stats": stats, "questions": len(qs)})
    drop_checkpoints(args.out)
    print(
        f"{args.out / 'index'}: the index with the LSR-trained query tower ({stats['steps']} steps, "
        f"KL {stats['first_loss']:.4f} -> {stats['final_loss']:.4f})"
    )
    return 0


def _finished(out: Path, result: str) -> int:
    """A rerun over a finished run: nothing is trained or written."""
    from ralm.train.run import finished_note

    print(finished_note(out, str(out / result)), file=sys.stderr)
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
