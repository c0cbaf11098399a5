"""The HTML pages: server-side Jinja2 templates (autoescaped); their scripts call the JSON API.

Corpus is rendered here in full (a chunk with its salient spans, escaped piece by piece); Fill,
Search, Generate, Ask and Runs render their forms and containers, and their scripts fill them in from
/api/... with text nodes only. Every page carries stable ids and data-testid attributes for
browser tests (listed in the templates).
Left out: pages without JavaScript for the computed views (use the JSON API).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from ralm import __version__
from ralm.corpus.docstore import SALIENT_SOURCES
from ralm.serve import schemas as S
from ralm.serve.api import KIND_NAMES, chunk, in_thread, require, target_of
from ralm.serve.markup import SOURCE_ORDER, salient_segments

__all__ = ["router", "templates"]

TEMPLATES = Path(__file__).parent / "templates"
PAGE_TITLES = {
    "fill": "Fill",
    "generate": "Generate",
    "ask": "Ask",
    "search": "Search",
    "corpus": "Corpus",
    "runs": "Runs",
}
RETRIEVER_NAMES = {"dense": "dense", "bm25": "BM25", "hybrid": "hybrid (BM25 + dense, RRF)"}
SOURCE_NAMES = {"link": "link", "ner": "NER", "date": "date", "auto": "auto (entity match)"}

templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
)
router = APIRouter(include_in_schema=False)


def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """Render templates/NAME.html with what every page shows (the TARGET, the navigation)."""
    t = target_of(request)
    base = {
        "page": name,
        "kind_name": KIND_NAMES[t.kind],
        "target_name": t.path.name or str(t.path),
        "target_path": str(t.path),
        "pages": [(p, PAGE_TITLES[p]) for p in S.PAGES if p in t.pages],
        "notes": t.notes,
        "version": __version__,
        "caps": S.Caps(),
        "root": request.scope.get("root_path", "").rstrip("/"),
        "has_corpus": "corpus" in t.pages,
    }
    return templates.TemplateResponse(request, f"{name}.html", {**base, **context}, status_code=status)


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    return page(request, "error", status=status, code=status, message=message)


@router.get("/")
async def home(request: Request) -> RedirectResponse:
    t = target_of(request)
    first = next(p for p in S.PAGES if p in t.pages)
    return RedirectResponse(request.url_for(f"{first}_page").path, status_code=303)


@router.get("/fill", name="fill_page")
async def fill_page(
    request: Request, text: str = "", k: int | None = None, top: int | None = None
) -> HTMLResponse:
    """Fill; `?text=...&k=...&top=...` fills the form and runs it (a shareable link to a prediction)."""
    t = target_of(request)
    require(t, "fill")
    cfg = t.realm.cfg
    mask = t.realm.tokenizer.mask_token or "[MASK]"
    return page(
        request,
        "fill",
        mask=mask,
        retrieval=bool(t.realm.model.retrieval),
        null_doc=cfg.null_doc,
        causal=bool(getattr(t.realm.model, "causal", False)),
        text=text[: S.MAX_QUERY_CHARS] or f"Oslo is the capital of {mask}.",
        run_now=bool(text.strip()),
        k=min(max(k, 1), S.MAX_K) if k is not None else cfg.k,
        top=min(max(top, 1), S.MAX_TOP) if top is not None else 5,
    )


@router.get("/search", name="search_page")
async def search_page(request: Request, q: str = "", k: int = 10, retriever: str = "both") -> HTMLResponse:
    t = target_of(request)
    require(t, "search")
    choices = []
    if "dense" in t.retrievers and "bm25" in t.retrievers:
        choices.append(("both", "dense and BM25 side by side"))
    choices += [(r, RETRIEVER_NAMES[r]) for r in t.retrievers]
    chosen = retriever if retriever in dict(choices) else choices[0][0]
    k = min(max(k, 1), S.MAX_K)
    return page(request, "search", q=q[: S.MAX_QUERY_CHARS], k=k, choices=choices, chosen=chosen)


@router.get("/corpus", name="corpus_page")
async def corpus_index(request: Request, id: int | None = None) -> RedirectResponse:  # noqa: A002
    t = target_of(request)
    require(t, "corpus")
    return RedirectResponse(
        request.url_for("chunk_page", chunk_id=id if id is not None else 0).path, status_code=303
    )


@router.get("/corpus/{chunk_id}", name="chunk_page")
async def chunk_page(request: Request, chunk_id: int) -> HTMLResponse:
    t = target_of(request)
    require(t, "corpus")
    data = await in_thread(chunk, t, chunk_id)
    summary = await in_thread(_summary, t)
    row = data["chunk"]
    used = {s["source"] for s in row["salient"]}
    legend = [
        (s, SOURCE_NAMES.get(s, s), s in used)
        for s in SOURCE_ORDER + tuple(x for x in SALIENT_SOURCES if x not in SOURCE_ORDER)
    ]
    return page(
        request,
        "corpus",
        row=row,
        prev=data["prev"],
        next=data["next"],
        n_chunks=len(t.store),
        segments=salient_segments(row["text"], row["salient"]),
        legend=legend,
        summary=summary,
    )


def _summary(t) -> str:
    with t.store_lock:
        return t.corpus_summary()


@router.get("/generate", name="generate_page")
async def generate_page(request: Request) -> HTMLResponse:
    t = target_of(request)
    require(t, "generate")
    cfg = t.surealm.model.config
    return page(request, "generate", retrieval=bool(cfg.retrieval), k=cfg.k, delta=cfg.delta)


@router.get("/ask", name="ask_page")
async def ask_page(
    request: Request, q: str = "", k: int | None = None, mode: str = "", retriever: str = ""
) -> HTMLResponse:
    """Ask; `?q=...&k=...&mode=...&retriever=...` fills the form and runs it (a shareable link)."""
    from ralm.serve.generator import ASK_MODES

    t = target_of(request)
    require(t, "ask")
    g = t.generator
    return page(
        request,
        "ask",
        q=q[: S.MAX_QUERY_CHARS],
        generator=g.info(),
        k=min(max(k, 1), S.MAX_ASK_K) if k is not None else g.config.k,
        modes=ASK_MODES,
        mode=mode if mode in ASK_MODES else g.config.mode,
        retrievers=[(r, RETRIEVER_NAMES[r]) for r in t.retrievers],
        retriever=retriever if retriever in t.retrievers else t.retrievers[0],
    )


@router.get("/runs", name="runs_page")
async def runs_page(request: Request) -> HTMLResponse:
    t = target_of(request)
    require(t, "runs")
    config = [
        (k, v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v))
        for k, v in t.config.items()
    ]
    return page(request, "runs", config=config)
