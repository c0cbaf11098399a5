"""The JSON API under /api: every page's data, for the pages' scripts and for notebooks alike.

Each endpoint checks what it can cheaply on the event loop. Search and fill then join their
model's batching queue (ralm.serve.batched: concurrent requests run as one batch, a full queue is
a 503 with Retry-After), ask the generator's queue (one question at a time, ralm.serve.ask); the
other model calls run in a worker thread (anyio.to_thread) holding
the locks of the models they use (`Target.model_lock`, then `bm25_lock`, then `store_lock`), so
requests never race on a model and the loop keeps answering.
Errors a user can cause are RalmErrors: 400, or `status` where a subclass sets it (404 for an
unknown chunk, a page this TARGET does not have). The app turns them into {"error": one line}.
Left out: streaming answers (a generation is returned whole).
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Path, Query, Request

from ralm import __version__
from ralm.errors import RalmError
from ralm.serve import schemas as S
from ralm.serve.batched import TargetQueues, fill_many_dicts, search_many
from ralm.serve.loaders import Target
from ralm.serve.runs import run_status

__all__ = ["NotFound", "router"]

KIND_NAMES = {
    "realm": "REALM run",
    "surealm": "SUREALM run",
    "index": "index directory",
    "docstore": "DocStore",
    "run": "run directory",
}
PAGE_NEEDS = {
    "fill": "a REALM run with a finished checkpoint",
    "generate": "a trained SUREALM run",
    "ask": "a generator: start `ralm serve` on a REALM run, an index directory or a DocStore with "
    "--generator LM (smollm2, a causal LM directory or a .gguf file)",
    "search": "a REALM run, an index directory or a DocStore",
    "corpus": "a REALM run, an index directory or a DocStore",
    "runs": "a run directory with metrics.jsonl",
}


class NotFound(RalmError):
    """Something the request names does not exist here (answered with 404)."""

    status = 404


def target_of(request: Request) -> Target:
    return request.app.state.target


def require(t: Target, page: str) -> None:
    """NotFound unless this TARGET has `page`."""
    if page not in t.pages:
        raise NotFound(
            f"this {KIND_NAMES[t.kind]} has no {page} page ({page} needs {PAGE_NEEDS[page]}); "
            f"it has: {', '.join(t.pages)}"
        )


async def in_thread(fn, *args, **kwargs):
    """Run fn(*args, **kwargs) in a worker thread (the event loop stays free)."""
    return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))


def queues_of(request: Request) -> TargetQueues:
    return request.app.state.queues


router = APIRouter(prefix="/api", tags=["api"], responses={400: {"model": S.Error}, 422: {"model": S.Error}})


# ----------------------------------------------------------------------------- info, config
@router.get("/info", response_model=S.Info, summary="What TARGET is and which pages it has")
async def info(request: Request) -> dict[str, Any]:
    import torch

    t = target_of(request)
    return {
        "kind": t.kind,
        "target": str(t.path),
        "pages": t.pages,
        "retrievers": t.retrievers,
        "chunks": len(t.store) if t.store is not None else None,
        "mask_token": (t.realm.tokenizer.mask_token or "[MASK]") if t.realm is not None else None,
        "device": t.device,
        "threads": torch.get_num_threads(),
        "batching": queues_of(request).info(),
        "notes": t.notes,
        "generator": t.generator.info() if t.generator is not None else None,
        "version": __version__,
    }


def status_of(request: Request, t: Target) -> dict[str, Any] | None:
    reader = request.app.state.metrics
    if reader is None:
        return None
    return run_status(t.path, t.metrics_path, reader.rows(), t.steps, t.checkpoint)


@router.get("/config", response_model=S.ConfigResponse, summary="The configuration TARGET was made with")
async def config(request: Request) -> dict[str, Any]:
    t = target_of(request)
    return {"kind": t.kind, "config": t.config, "status": await in_thread(status_of, request, t)}


@router.get("/metrics", response_model=S.MetricsResponse, summary="Rows of the run's metrics.jsonl")
async def metrics(
    request: Request,
    offset: Annotated[
        int, Query(ge=0, description="rows the caller already has (poll with the last total)")
    ] = 0,
) -> dict[str, Any]:
    t = target_of(request)
    require(t, "runs")

    def work() -> dict[str, Any]:
        rows = request.app.state.metrics.rows()
        reset = offset > len(rows)
        start = 0 if reset else offset
        status = run_status(t.path, t.metrics_path, rows, t.steps, t.checkpoint)
        return {"offset": start, "total": len(rows), "reset": reset, "rows": rows[start:], "status": status}

    return await in_thread(work)


# ----------------------------------------------------------------------------- search
def check_search(t: Target, q: str, k: int, retriever: str | None) -> str:
    """The retriever to use (None: the first t offers); RalmError for an empty query, k over the
    corpus, a retriever t does not offer."""
    if not q.strip():
        raise RalmError("empty query; pass some words to search for")
    n = len(t.store)
    if k > n:
        raise RalmError(f"k={k} is more than the {n} chunks of the corpus; ask for at most {n}")
    name = retriever if retriever is not None else (t.retrievers[0] if t.retrievers else "dense")
    t.retriever(name)  # RalmError naming what t offers
    return name


def search(t: Target, q: str, k: int, retriever: str | None = None) -> dict[str, Any]:
    """Top-k chunks for `q` with their scores and highlighted query terms (SearchResponse), unbatched."""
    name = check_search(t, q, k, retriever)
    return search_many(t, name, k, [q])[0]


@router.get(
    "/search",
    response_model=S.SearchResponse,
    responses={503: {"model": S.Error}},
    summary="Dense, BM25 or hybrid search over the corpus",
)
async def search_endpoint(
    request: Request,
    q: Annotated[str, Query(max_length=S.MAX_QUERY_CHARS, description="the query text")],
    k: Annotated[int, Query(ge=1, le=S.MAX_K, description="results to return")] = 10,
    retriever: Annotated[
        S.Retriever | None,
        Query(description="dense, bm25 or hybrid (both fused by RRF); default: the first TARGET offers"),
    ] = None,
) -> dict[str, Any]:
    t = target_of(request)
    require(t, "search")
    name = check_search(t, q, k, retriever)
    return await queues_of(request).search(request, q, k, name)


# ----------------------------------------------------------------------------- fill
def fill_text(t: Target, text: str, k: int | None, top: int) -> dict[str, Any]:
    """`ralm.realm.inference.fill.fill` on the run, as FillResponse (unbatched)."""
    return fill_many_dicts(t, [text], k, top)[0]


@router.post(
    "/fill",
    response_model=S.FillResponse,
    responses={503: {"model": S.Error}},
    summary="Predict the [MASK] tokens (REALM Table 3)",
)
async def fill_endpoint(request: Request, body: S.FillRequest) -> dict[str, Any]:
    t = target_of(request)
    require(t, "fill")
    mask = t.realm.tokenizer.mask_token or "[MASK]"
    if mask not in body.text:
        what = (
            "a span should be generated"
            if getattr(t.realm.model, "causal", False)
            else "a token should be predicted"
        )
        raise RalmError(f"the text has no {mask}; put {mask} where {what}")
    return await queues_of(request).fill(request, body.text, body.k, body.top)


# ----------------------------------------------------------------------------- corpus
def chunk(t: Target, i: int) -> dict[str, Any]:
    """Chunk `i` as stored (DocStore.get) and its neighbours in the same article."""
    n = len(t.store)
    if not 0 <= i < n:
        raise NotFound(f"chunk id {i} is unknown: {t.store.root} has ids 0..{n - 1}")
    with t.store_lock:
        row = dict(t.store.get(i))
        prev = i - 1 if i > 0 and t.store.get(i - 1)["article"] == row["article"] else None
        nxt = i + 1 if i + 1 < n and t.store.get(i + 1)["article"] == row["article"] else None
    return {"chunk": row, "prev": prev, "next": nxt}


@router.get(
    "/chunk/{chunk_id}",
    response_model=S.ChunkResponse,
    responses={404: {"model": S.Error}},
    summary="One chunk of the DocStore, with its salient spans and neighbours",
)
async def chunk_endpoint(
    request: Request, chunk_id: Annotated[int, Path(description="the chunk id")]
) -> dict:
    t = target_of(request)
    require(t, "corpus")
    return await in_thread(chunk, t, chunk_id)


def corpus(t: Target) -> dict[str, Any]:
    with t.store_lock:
        summary = t.corpus_summary()
    return {
        "root": str(t.store.root),
        "chunks": len(t.store),
        "summary": summary,
        "manifest": t.store.manifest,
    }


@router.get("/corpus", response_model=S.CorpusResponse, summary="The DocStore's manifest and summary")
async def corpus_endpoint(request: Request) -> dict[str, Any]:
    t = target_of(request)
    require(t, "corpus")
    return await in_thread(corpus, t)


# ----------------------------------------------------------------------------- generate
def generate_text(t: Target, req: S.GenerateRequest) -> dict[str, Any]:
    """`ralm.surealm.generate.generate` on the run, with every retrieval it made (GenerateResponse)."""
    from ralm.surealm.cli import decoding_options
    from ralm.surealm.generate import PrefixRetriever, generate

    if not req.prefix.strip():
        raise RalmError("the prefix is empty; give the start of a sentence")
    if req.strategy == "greedy" and req.num_return > 1:
        raise RalmError(
            f"num_return={req.num_return}: greedy decoding gives one continuation; use top-p or beam"
        )
    s = t.surealm
    with t.model_lock:
        retriever = PrefixRetriever(s.store, s.tokenizer, s.model.config.k, embedder=s.embedder)
        res = generate(
            s.model, s.tokenizer, s.store, req.prefix, retriever=retriever, **decoding_options(req)
        )
        steps = retrieval_steps(s, res.retriever.log, req.show_entries) if s.model.config.retrieval else []
    return {
        "prefix": req.prefix,
        "continuations": [
            {"text": x, "token_ids": ids} for x, ids in zip(res.texts, res.token_ids, strict=True)
        ],
        "retrieval": bool(s.model.config.retrieval),
        "retrievals": steps,
    }


def retrieval_steps(s, log, show: int) -> list[dict[str, Any]]:
    """Each retrieval of `log`: its query prefix and its first `show` entries as text (SUREALM Table 1)."""
    tok, store = s.tokenizer, s.store
    out = []
    for r in log:
        entries = []
        for e in r.entries[:show]:
            sid, pos = store.entry(int(e))
            word_id, suffix = store.entry_tokens(int(e))
            toks = store.tokens(sid)
            entries.append(
                {
                    "entry": int(e),
                    "sentence_id": sid,
                    "sentence": store.text(sid),
                    "prefix": tok.decode(toks[: pos - 1].tolist(), skip_special_tokens=True),
                    "word": tok.decode([word_id], skip_special_tokens=True).strip(),
                    "suffix": tok.decode(suffix.tolist(), skip_special_tokens=True),
                }
            )
        query = tok.decode(list(r.prefix), skip_special_tokens=True)
        out.append({"query": query, "prefix_tokens": len(r.prefix), "entries": entries})
    return out


@router.post("/generate", response_model=S.GenerateResponse, summary="Continue a prefix with SUREALM")
async def generate_endpoint(request: Request, body: S.GenerateRequest) -> dict[str, Any]:
    t = target_of(request)
    require(t, "generate")
    return await in_thread(generate_text, t, body)


# ----------------------------------------------------------------------------- ask
def ask_dict(request: Request, answer, retriever: str | None) -> dict[str, Any]:
    """`Answer.as_dict()` with the retriever used and each passage's rank and corpus page (AskResponse)."""
    d = answer.as_dict()
    d["retriever"] = retriever
    d["passages"] = [
        {"rank": rank, **p, "url": request.url_for("chunk_page", chunk_id=p["id"]).path}
        for rank, p in enumerate(d["passages"], start=1)
    ]
    return d


@router.post(
    "/ask",
    response_model=S.AskResponse,
    responses={404: {"model": S.Error}, 503: {"model": S.Error}},
    summary="Answer a question with the generator, from the passages retrieved for it (RAG)",
)
async def ask_endpoint(request: Request, body: S.AskRequest) -> dict[str, Any]:
    """The generator (`ralm serve --generator`) answers `question` from the top-k passages of the
    retriever; one question at a time (a queue of its own). Errors: 404 without a generator."""
    from ralm.serve.ask import check_ask

    t = target_of(request)
    require(t, "ask")
    check_ask(t, body.question, body.k, body.mode, body.retriever)
    answer, name = await queues_of(request).ask(request, body.question, body.k, body.mode, body.retriever)
    return ask_dict(request, answer, name)
