"""Ask in `ralm serve`: one question answered with the generator `--generator` names (ralm.serve.generator).

    t = load_target("index/")
    attach_generator(t, AskConfig("smollm2", k=3, mode="rag"))   # t.pages gains "ask"
    ask_one(t, "Who founded Oslo?")   -> (ralm.rag.ask.Answer, "dense")

The generator is a `ralm.frozen.lm.FrozenLM` loaded once at start (`load_frozen_lm`), beside the
TARGET's other models, on `--device` (auto where unset: a GPU when there is one). A question is
answered by `ralm.rag.ask.Asker` over a retriever TARGET already serves for Search (the same
objects, no second copy of an index): the passages are retrieved under that retriever's locks and
`store_lock`, as a search is, and the answer is generated under `Target.generator_lock`, so a
search never waits for a generation. /api/ask puts questions on their own queue ("generator",
ralm.serve.batched), one at a time: the LM never runs two requests at once.
Ask needs a corpus to retrieve from: a REALM run, an index directory or a DocStore; `--generator`
with a SUREALM or metrics-only run is refused at start, with one line, before anything loads.
Left out: batching questions together, sampling, streaming the answer token by token.
"""

from __future__ import annotations

import time

from ralm.errors import RalmError
from ralm.rag.ask import MAX_K, Answer, Asker
from ralm.serve.generator import ASK_MODES, AskConfig, Generator, attach_generator, no_corpus
from ralm.serve.loaders import Target, held

__all__ = ["ASK_MODES", "AskConfig", "Generator", "ask_one", "attach_generator", "check_ask", "no_corpus"]


def check_ask(
    t: Target, question: str, k: int | None, mode: str | None, retriever: str | None
) -> tuple[str, int, str | None]:
    """(mode, k, retriever name; None in closed-book mode) of an Ask request, defaults filled in
    from the generator's config and the first retriever `t` offers; RalmError for an empty
    question, k over the corpus, a retriever `t` does not offer."""
    if not question.strip():
        raise RalmError("empty question; type a question")
    cfg = t.generator.config
    mode = mode or cfg.mode
    k = cfg.k if k is None else k
    if not 1 <= k <= MAX_K:
        raise RalmError(f"k={k}: choose 1 to {MAX_K} passages")
    n = len(t.store)
    if k > n:
        raise RalmError(f"k={k} is more than the {n} chunks of the corpus; ask for at most {n}")
    if mode == "closed-book":
        return mode, k, None
    name = retriever if retriever is not None else t.retrievers[0]
    t.retriever(name)  # RalmError naming what t offers
    return mode, k, name


def ask_one(
    t: Target, question: str, k: int | None = None, mode: str | None = None, retriever: str | None = None
) -> tuple[Answer, str | None]:
    """`Asker.ask` with `t`'s generator and retriever, each under its locks: (the Answer, the
    retriever used or None). The checks of `check_ask` come first."""
    mode, k, name = check_ask(t, question, k, mode, retriever)
    g = t.generator
    r, locks = t.retriever(name) if name is not None else (None, [])
    asker = Asker(g.lm, r, t.store, k=k, mode=mode, max_new_tokens=g.config.max_new_tokens)
    t0 = time.perf_counter()
    with held([*locks, t.store_lock]):  # model, bm25, store: the order of ralm.serve.loaders
        passages = asker.retrieve(question, k)
    seconds = time.perf_counter() - t0
    with t.generator_lock:
        return asker.answer(question, passages, seconds), name
