"""The `ralm serve` application: `create_app(target)` and `ServerThread`, to run it on a free port.

`create_app` loads TARGET once (or takes a loaded `Target`) and wires the JSON API
(ralm.serve.api) with its batching queues (ralm.serve.batched, settings in `BatchConfig`), the pages (ralm.serve.pages), the static files (our CSS/JS, vendored uPlot
and Swagger UI: nothing comes from a CDN) and /docs + /openapi.json. Errors: a RalmError is
{"error": one line} with 400 (404 for unknown things), a validation error 422 with a line naming
the field and the cap, a full batching queue 503 with Retry-After, anything else 500 with one line (the traceback goes to the server log,
never to the client); pages get the same as an HTML page. Responses carry nosniff, no-referrer
and, on our pages, a Content-Security-Policy allowing scripts from this server only.

`ServerThread(app).start()` runs uvicorn in a thread on 127.0.0.1 and a free port (`.url`),
for browser tests and benchmarks; `.stop()` shuts it down.
Left out: TLS and authentication (it binds loopback; put a reverse proxy in front to share it).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ralm import __version__
from ralm.errors import RalmError
from ralm.serve import api, pages
from ralm.serve.batched import TargetQueues
from ralm.serve.batching import BatchConfig
from ralm.serve.loaders import Target, load_target
from ralm.serve.runs import MetricsReader
from ralm.serve.schemas import validation_line

__all__ = ["ServerThread", "create_app"]

logger = logging.getLogger("ralm.serve")
STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
DESCRIPTION = (
    "Explore a ralm artifact: REALM fill with retrieval provenance, dense/BM25 search, the corpus, "
    "SUREALM generation, RAG question answering (with --generator) and training curves. Read-only; every endpoint returns JSON, errors as "
    '{"error": "one line"}.'
)


def create_app(
    target: Target | str | os.PathLike,
    *,
    device: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
    batching: BatchConfig | None = None,
) -> FastAPI:
    """The ASGI app for `target` (a loaded Target, or a path loaded here with `device`).

    batching: how concurrent search and fill requests are batched per model (default BatchConfig()).
    allowed_hosts: Host headers to accept (e.g. ["127.0.0.1", "localhost"]: a page on another
    site cannot reach a loopback server through DNS rebinding); None accepts any.
    """
    t = target if isinstance(target, Target) else load_target(target, device)
    import torch  # noqa: F401  (imported here, not on the event loop at the first /api/info)

    app = FastAPI(
        title="ralm serve", version=__version__, description=DESCRIPTION, docs_url=None, redoc_url=None
    )
    app.state.target = t
    app.state.queues = TargetQueues(t, batching if batching is not None else BatchConfig())
    app.state.metrics = MetricsReader(t.metrics_path) if t.metrics_path is not None else None
    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url,
            title="ralm serve: API",
            swagger_js_url="/static/vendor/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url="/static/vendor/swagger-ui/swagger-ui.css",
            swagger_favicon_url="/static/favicon.svg",
        )

    app.add_exception_handler(RalmError, _ralm_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(Guard)
    if allowed_hosts:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    return app


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith(("/api", "/static", "/openapi")) or request.method != "GET"


def _error(request: Request, status: int, message: str, detail=None):
    message = " ".join(str(message).split()) or "error"
    if _wants_json(request):
        body = {"error": message, "status": status}
        if detail is not None:
            body["detail"] = detail
        return JSONResponse(body, status_code=status)
    return pages.error_page(request, status, message)


async def _ralm_error(request: Request, exc: RalmError):
    resp = _error(request, getattr(exc, "status", 400), str(exc))
    for k, v in (getattr(exc, "headers", None) or {}).items():  # Retry-After of a 503
        resp.headers[k] = v
    return resp


async def _validation_error(request: Request, exc: RequestValidationError):
    errors = exc.errors()
    detail = [{"loc": list(e.get("loc", ())), "type": e.get("type"), "msg": e.get("msg")} for e in errors]
    return _error(request, 422, validation_line(errors), detail)


async def _http_error(request: Request, exc: StarletteHTTPException):
    message = exc.detail if exc.status_code != 404 else f"{request.url.path}: no such page or endpoint"
    resp = _error(request, exc.status_code, message)
    for k, v in (exc.headers or {}).items():
        resp.headers[k] = v
    return resp


class Guard:
    """Pure ASGI middleware: security headers on every response, and any exception that got this
    far logged with its traceback and answered with one line of JSON (500), never a traceback."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        own_page = not scope.get("path", "").startswith("/docs")

        async def send_with_headers(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Referrer-Policy", "no-referrer")
                if own_page:
                    headers.setdefault("Content-Security-Policy", CSP)
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as exc:
            logger.exception("ralm serve: error answering %s %s", scope.get("method"), scope.get("path"))
            if started:
                return  # the response is under way; the client sees a cut-off body
            what = type(exc).__name__
            resp = JSONResponse(
                {"error": f"internal error ({what}); the server log has the details", "status": 500},
                status_code=500,
            )
            await resp(scope, receive, send_with_headers)


class ServerThread:
    """uvicorn serving `app` from a daemon thread, on `host` and a free port (or `port`).

    with ServerThread(app) as server:   # or server = ServerThread(app).start() ... server.stop()
        requests.get(server.url + "/api/info")
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        import uvicorn

        self.sock = bind_socket(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to (host, port); RalmError when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY only then
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise RalmError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); pass another --port or --host"
        ) from None
    sock.set_inheritable(True)
    return sock
