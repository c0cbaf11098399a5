"""The model calls behind /api/search and /api/fill, for a batch of requests, and the queues that
gather the batches (`TargetQueues`, one `ModelQueue` per model of a TARGET).

    search_many(t, "dense", 10, ["fjords", "kings of norway"])   -> [SearchResponse dict, ...]
    fill_many_dicts(t, ["Oslo is the capital of [MASK]."], 3, 5) -> [FillResponse dict]

Each takes the model's locks (`Target.model_lock`, then `bm25_lock`, then `store_lock`, as
ralm.serve.loaders orders them) for the whole batch and gives one answer per request, the same as
that request alone (float rounding aside: the queries are padded to the longest in the batch).
Which queue a request joins: dense and hybrid search and fill use the query tower (the "model"
queue; hybrid also takes bm25_lock inside), BM25 search its own ("bm25"), so a BM25 search never
waits behind a fill. Requests of one batch share their kind and parameters (retriever and k; k
and top for fill), so no answer depends on what it was batched with.
Ask questions (ralm.serve.ask) have a queue of their own ("generator") that runs them one at a
time: the LM never runs two requests at once, and the queue's cap and 503 hold for them too.
Left out: batching generation (SUREALM keeps `model_lock`, Ask its "generator" queue: one request
at a time).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.requests import Request

from ralm.serve.batching import BatchConfig, ModelQueue
from ralm.serve.loaders import Target, held
from ralm.serve.markup import highlight_spans

__all__ = ["TargetQueues", "disconnected", "fill_many_dicts", "search_many"]


def search_many(t: Target, retriever: str, k: int, queries: list[str]) -> list[dict[str, Any]]:
    """Top-k chunks for each query with scores and highlighted query terms (SearchResponse dicts).

    The checks of the endpoint (non-empty queries, k <= chunks, a retriever t offers) come first.
    """
    r, locks = t.retriever(retriever)
    with held(locks):
        res = r.search_text(list(queries), k)
    if t.bm25 is not None:
        analyzer = t.bm25.analyzer
    else:
        from ralm.retrieval.analysis import Analyzer

        analyzer = Analyzer()
    ids = [[int(i) for i in row if int(i) >= 0] for row in res.ids]
    with t.store_lock:
        rows = {i: t.store.get(i) for i in sorted({i for row in ids for i in row})}
    out = []
    for q, row_ids, scores in zip(queries, ids, res.scores.tolist(), strict=True):
        terms = analyzer.analyze(q)
        hits = [
            {
                "rank": rank,
                "id": i,
                "score": float(score),
                "title": rows[i]["title"],
                "text": rows[i]["text"],
                "article": rows[i]["article"],
                "position": rows[i]["position"],
                "highlights": highlight_spans(rows[i]["text"], terms, analyzer),
            }
            for rank, (i, score) in enumerate(zip(row_ids, scores, strict=False), start=1)
        ]
        out.append(
            {"query": q, "retriever": retriever, "k": k, "terms": list(dict.fromkeys(terms)), "results": hits}
        )
    return out


def fill_many_dicts(t: Target, texts: list[str], k: int | None, top: int) -> list[dict[str, Any]]:
    """`ralm.realm.inference.fill.fill_many` on the run, as FillResponse dicts."""
    from ralm.realm.inference.fill import fill_many

    with t.model_lock:
        results = fill_many(t.realm, texts, k=k, top=top)
    out = []
    for res in results:
        d = res.as_dict()
        null = [x.p_z for x in res.docs if x.chunk_id < 0]
        d["null_mass"] = null[0] if null else None
        d["retrieval"] = bool(t.realm.model.retrieval)
        out.append(d)
    return out


async def disconnected(request: Request) -> None:
    """Finish when the client of `request` goes away (its body, if any, already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class TargetQueues:
    """The batching queues of one TARGET: "model" (query tower: dense, hybrid, fill), "bm25" and,
    with a generator, "generator" (Ask, unbatched)."""

    def __init__(self, target: Target, config: BatchConfig) -> None:
        self.target = target
        self.config = config
        self.fill_batch = config.fill_batch(target.device)
        self.model = ModelQueue("model", config)
        self.bm25 = ModelQueue("bm25", config)
        self.generator = ModelQueue("generator", replace(config, max_batch=1, max_fill_batch=None))

    async def search(self, request: Request, q: str, k: int, retriever: str) -> dict[str, Any]:
        """One search, batched with the waiting searches of the same retriever and k."""
        t = self.target
        queue = self.bm25 if retriever == "bm25" else self.model
        return await queue.submit(
            ("search", retriever, k),
            lambda qs: search_many(t, retriever, k, list(qs)),
            q,
            gone=lambda: disconnected(request),
        )

    async def fill(self, request: Request, text: str, k: int | None, top: int) -> dict[str, Any]:
        """One fill, batched with the waiting fills of the same k and top (at most fill_batch)."""
        t = self.target
        return await self.model.submit(
            ("fill", k, top),
            lambda texts: fill_many_dicts(t, list(texts), k, top),
            text,
            gone=lambda: disconnected(request),
            max_batch=self.fill_batch,
        )

    async def ask(
        self, request: Request, question: str, k: int | None, mode: str | None, retriever: str | None
    ):
        """One question (ralm.serve.ask.ask_one), after the questions queued before it, alone."""
        from ralm.serve.ask import ask_one

        t = self.target
        return await self.generator.submit(
            ("ask",),
            lambda payloads: [ask_one(t, *p) for p in payloads],
            (question, k, mode, retriever),
            gone=lambda: disconnected(request),
        )

    def info(self) -> dict[str, Any]:
        """/api/info's `batching`: the settings and each queue's state."""
        queues = (self.model, self.bm25) + ((self.generator,) if self.target.generator is not None else ())
        return {
            "enabled": self.config.enabled,
            "max_batch": self.config.max_batch,
            "max_fill_batch": self.fill_batch,
            "max_wait_ms": self.config.max_wait_ms,
            "max_queue": self.config.max_queue,
            "queues": {q.name: q.stats() for q in queues},
        }
