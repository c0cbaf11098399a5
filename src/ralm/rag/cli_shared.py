"""What the `ralm rag` commands share: the log line, reading questions, loading the LM, getting passages."""

from __future__ import annotations

import sys

from ralm.errors import RalmError

__all__ = ["load_lm", "log", "passages_for", "read_question_args"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr)


def read_question_args(args):
    from ralm.rag.data import read_questions

    notes: list[str] = []
    qs = read_questions(args.questions, answers=getattr(args, "answers", "auto"), notes=notes)
    if args.limit is not None:
        qs = qs[: args.limit]
    for n in notes:
        log(f"note: {n}")
    return qs


def load_lm(args):
    from ralm.frozen.lm import load_frozen_lm

    return load_frozen_lm(
        args.lm,
        gguf_file=args.gguf_file,
        device=args.device,
        autocast=args.autocast,
        backend=getattr(args, "backend", "torch"),  # training commands decode nothing
        note=log,
    )


def passages_for(args, questions, k: int, lm=None):
    """Passages per question (None when no retrieval is asked for); gold chunks from the index's store."""
    from ralm.rag.retrieved import read_retrieved, rerank_by_lm, retrieve

    if args.retrieved is not None:
        ps = read_retrieved(args.retrieved, questions)
    elif args.index is not None or args.corpus is not None:
        from ralm.rag.data import gold_chunks
        from ralm.retrieval.retriever import Retriever

        retriever = Retriever.from_args(args, log=log)
        store = retriever.store
        args.lang = args.lang or store.lang or "en"  # answer normalisation as the corpus's language
        log(f"retrieval: {retriever.description}")
        ps = retrieve(questions, retriever, min(max(k, args.rerank or 0), len(store)))
        if any(q.context for q in questions):
            found = gold_chunks(questions, store, args.lang)
            log(
                f"gold passages: {found} of {len(questions)} questions have their answer's chunk in {store.root}"
            )
    else:
        return None
    if args.rerank:
        if lm is None:
            raise RalmError("--rerank needs the LM: use it with `ralm rag eval` or `train`")
        ps = rerank_by_lm(lm, questions, ps, max(k, 1))
    return ps
