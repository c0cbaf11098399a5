"""`ralm serve` under load: 32 concurrent clients for 60 s, and the search endpoint vs the library.

Question and targets (issue 16): with the server on loopback and 32 clients sending mixed
search/fill requests for 60 s, report requests/s, p50 and p99 latency, the errors (target 0) and
the server's RSS at the start and the end of the load (target: flat); and the search endpoint's
p50 latency against the same search called in-process (target: overhead <= 10% at p50).

Server: the real command, `ralm serve TARGET --port 0 --quiet --threads N`, as a subprocess on
127.0.0.1 (the port is read from the line it prints); RSS of that process from psutil.
TARGET: a REALM run, by default runs/demo/realm (`make demo`). When there is none, a small one is
built under --work the way tests/serve/conftest.py does it (a random 2-layer BERT as reader and
towers, 2 training steps) on the first --articles articles of the English sample.
Load: 32 asyncio clients (httpx, one keep-alive connection each), each in a loop: a search (dense,
BM25, hybrid in turn, k=10, a chatterbot trivia question) three times in four, else a fill (a
chunk's first 300 characters with its first salient span replaced by [MASK]); first --warmup (60)
seconds, then the measured --seconds (60). Under 32 clients the server's RSS climbs for about a
minute (worker threads and the allocator's arenas come up), then levels off: "start" is the RSS
after the warm-up, and it is sampled throughout. The app answers one request per model at a time,
so latency under 32 clients is mostly queueing; what one request costs alone is the next part.
Search vs library: once the load is over, one client alternates GET /api/search (dense, k=10) with
the same search run in this process on the same TARGET loaded by `load_target`:
`Target.dense.search_text([q], 10)`, the very object the endpoint calls (for a REALM run: the query
tower, then `DenseIndex.search`), plus `store.get` of the same 10 chunks (the rows the endpoint
returns), in a worker thread as the app calls it, on --threads torch threads. What the endpoint adds
is HTTP, JSON and the query-term highlights. overhead = p50 api / p50 direct - 1; the HTTP round trip alone (GET /api/info, no model)
is reported beside it, and the direct call from the main thread too.

Run: OMP_NUM_THREADS=2 python benchmarks/serve_load.py [--target runs/demo/realm] [--seconds 60]
Writes benchmarks/results/serve_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_result  # noqa: E402

DEFAULT_TARGET = Path("runs/demo/realm")
DEFAULT_WORK = Path(tempfile.gettempdir()) / "ralm-bench-serve"
SEARCH_SHARE = 0.75
RETRIEVERS = ("dense", "bm25", "hybrid")


# ----------------------------------------------------------------------------- a small REALM run
def tiny_bert(out: Path) -> Path:
    """A random 2-layer BERT (hidden 64) on the bundled MiniLM's vocabulary (tests/conftest.py's)."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    from ralm.backbones import default_backbone_path

    if (out / "config.json").is_file():
        return out
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=256,
    )  # fmt: skip
    BertModel(cfg, add_pooling_layer=False).save_pretrained(out)
    src = default_backbone_path()
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / f, out / f)
    return out


def build_small_realm(work: Path, articles: int = 40) -> Path:
    """A REALM run under `work` (reused when there): the first `articles` articles of the English
    sample in 64-token chunks, a random tiny BERT as reader and towers, 2 steps."""
    import torch

    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.realm.config import PretrainConfig
    from ralm.realm.trainer import pretrain
    from ralm.samples import sample_path

    run = work / "realm"
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
        return run
    work.mkdir(parents=True, exist_ok=True)
    bert = tiny_bert(work / "tiny-bert")
    store = work / "corpus"
    if not (store / "manifest.json").is_file():
        build_docstore(
            [sample_path("enwiki")], store, BuildConfig(chunk_size=64, tokenizer=str(bert), max_articles=articles),
            overwrite=True, progress=False, log=lambda m: None,
        )  # fmt: skip
    torch.manual_seed(0)
    cfg = PretrainConfig(
        docstore=str(store), out=str(run), reader=str(bert), steps=2, batch_size=2, k=4, encoder_max_length=64,
        reader_max_length=160, heldout=2, refresh_every=0, checkpoint_every=0, warmup_steps=1, device="cpu",
        autocast="off", tensorboard=False,
    )  # fmt: skip
    return pretrain(cfg, progress=False)


# ----------------------------------------------------------------------------- the server
class Server:
    """`ralm serve TARGET` in a subprocess on 127.0.0.1 and a free port; stderr is drained."""

    def __init__(self, target: Path, threads: int) -> None:
        cmd = [
            sys.executable,
            "-m",
            "ralm",
            "serve",
            str(target),
            "--port",
            "0",
            "--quiet",
            "--threads",
            str(threads),
        ]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self.url: str | None = None
        ready = threading.Event()

        def drain() -> None:
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                m = re.search(r"at (http://127\.0\.0\.1:\d+)/", line)
                if m and self.url is None:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(600) or self.url is None:
            self.stop()
            raise SystemExit("ralm serve did not start:\n" + "\n".join(self.lines[-20:]))

    def rss_mib(self) -> float:
        import psutil

        return psutil.Process(self.proc.pid).memory_info().rss / 2**20

    def anon_mib(self) -> float:
        """Anonymous resident memory (the heap: what a leak or the allocator grows; RSS adds mapped files)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"RssAnon:\s+(\d+) kB", status).group(1)) / 1024

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ----------------------------------------------------------------------------- requests
def search_queries() -> list[str]:
    from ralm.samples import trivia_qa_pairs

    return [q for q, _ in trivia_qa_pairs()]


def fill_texts(store, n: int, seed: int = 0) -> list[str]:
    """`n` texts: a chunk's first 300 characters with its first salient span (else a word) masked."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        row = store.get(rng.randrange(len(store)))
        text = row["text"][:300]
        spans = [s for s in row["salient"] if s["end"] <= len(text)]
        if spans:
            s = spans[0]
            out.append(text[: s["start"]] + "[MASK]" + text[s["end"] :])
        elif len(text.split()) > 4:
            words = text.split()
            words[rng.randrange(len(words))] = "[MASK]"
            out.append(" ".join(words))
    return out


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


async def load(url: str, clients: int, seconds: float, queries: list[str], fills: list[str]) -> dict:
    """`clients` concurrent loops for `seconds`: per kind, the latencies (s) of the answered requests."""
    import httpx

    lat: dict[str, list[float]] = {"search": [], "fill": []}
    errors: list[str] = []
    deadline = time.perf_counter() + seconds

    async def client(c: int) -> None:
        rng = random.Random(c)
        async with httpx.AsyncClient(base_url=url, timeout=300) as http:
            n = 0
            while time.perf_counter() < deadline:
                kind = "search" if rng.random() < SEARCH_SHARE else "fill"
                t0 = time.perf_counter()
                try:
                    if kind == "search":
                        params = {"q": rng.choice(queries), "k": 10, "retriever": RETRIEVERS[(c + n) % 3]}
                        r = await http.get("/api/search", params=params)
                    else:
                        r = await http.post("/api/fill", json={"text": rng.choice(fills)})
                    if r.status_code != 200:
                        errors.append(f"{kind}: HTTP {r.status_code}: {r.text[:200]}")
                        continue
                    r.json()
                except Exception as exc:  # counted, not raised: the benchmark reports errors
                    errors.append(f"{kind}: {type(exc).__name__}: {exc}")
                    continue
                lat[kind].append(time.perf_counter() - t0)
                n += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return {"lat": lat, "errors": errors, "wall": time.perf_counter() - t0}


def search_vs_library(url: str, target, queries: list[str], n: int) -> dict:
    """p50 (ms) of GET /api/search (dense, k=10) and of the same search plus the same chunk rows
    in-process (what a script calling the library does to get the results), interleaved.

    The in-process call runs in a worker thread, as the app runs it (anyio.to_thread): on a busy
    machine, torch's OpenMP threads behave very differently in the main thread (see the notes).
    """
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    api, direct, info = [], [], []
    perf = time.perf_counter
    worker = ThreadPoolExecutor(1)

    def timed_search(q: str) -> float:
        """The endpoint's work without the serving: the same search, then the same chunk rows."""
        t = perf()
        res = target.dense.search_text([q], 10)
        [target.store.get(int(i)) for i in res.ids[0] if int(i) >= 0]
        return perf() - t

    with httpx.Client(base_url=url, timeout=60) as http:
        for i in range(n + 10):
            q = queries[i % len(queries)]

            def call_api(q=q) -> float:
                t = perf()
                r = http.get("/api/search", params={"q": q, "k": 10, "retriever": "dense"})
                r.raise_for_status()
                r.json()
                return perf() - t

            def call_direct(q=q) -> float:
                return worker.submit(timed_search, q).result()

            def call_info() -> float:
                t = perf()
                http.get("/api/info").raise_for_status()
                return perf() - t

            order = (call_api, call_direct) if i % 2 else (call_direct, call_api)
            times = {}
            for f in order:  # a pause first, so the server's or this process's last call has wound down
                time.sleep(0.02)
                times[f] = f()
            time.sleep(0.02)
            ti = call_info()
            if i >= 10:  # the first 10: warm-up
                api.append(times[call_api])
                direct.append(times[call_direct])
                info.append(ti)
    worker.shutdown()
    main = [timed_search(queries[i % len(queries)]) for i in range(25)][5:]
    a, d, h = (1000 * pct(x, 50) for x in (api, direct, info))
    return {
        "api_p50_ms": round(a, 3),
        "direct_p50_ms": round(d, 3),
        "overhead_p50": round(a / d - 1, 4),
        "overhead_p50_ms": round(a - d, 3),
        "http_roundtrip_p50_ms": round(h, 3),
        "api_p99_ms": round(1000 * pct(api, 99), 3),
        "direct_p99_ms": round(1000 * pct(direct, 99), 3),
        "calls": n,
        "direct_main_thread_p50_ms": round(1000 * pct(main, 50), 3),
    }


def slow_roundtrip_note(ms: float) -> str:
    return (
        f"GET /api/info (no model) takes {ms:.1f} ms at p50 on loopback (it should take ~1 ms): replies wait "
        "for TCP delayed ACKs, as the listening socket made by ralm.serve.app.bind_socket has proto 0 and "
        "asyncio then leaves TCP_NODELAY off on its connections; most of the search overhead is that wait"
    )


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--target", type=Path, default=None, help="a REALM run (default: runs/demo/realm, else built)"
    )
    ap.add_argument(
        "--work", type=Path, default=DEFAULT_WORK, help="where a small REALM run is built if needed"
    )
    ap.add_argument("--articles", type=int, default=40, help="articles of the small run's corpus")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument(
        "--warmup", type=float, default=60.0, help="seconds of load before the measured RSS start"
    )
    ap.add_argument("--direct-calls", type=int, default=200, help="search calls of each kind, interleaved")
    ap.add_argument("--no-write", action="store_true", help="print, do not write the result file")
    args = ap.parse_args()

    import torch

    from ralm.serve.loaders import load_target

    threads = torch.get_num_threads()
    if args.target is not None:
        target_path, built = args.target, False
    elif (DEFAULT_TARGET / "config.toml").is_file():
        target_path, built = DEFAULT_TARGET, False
    else:
        print(f"no {DEFAULT_TARGET}: building a small REALM run under {args.work}", file=sys.stderr)
        target_path, built = build_small_realm(args.work, args.articles), True

    load_avg_start = os.getloadavg()
    server = Server(target_path, threads)
    try:
        rss_loaded = server.rss_mib()
        target = load_target(
            target_path, "cpu", log=lambda m: None
        )  # this process's copy, for the library calls
        if target.dense is None:
            raise SystemExit(
                f"{target_path}: no dense retriever to compare with (a REALM run with retrieval)"
            )
        queries = search_queries()
        fills = fill_texts(target.store, 200)
        # RSS every --seconds/12 from now on; the warm-up at full concurrency brings up the worker
        # threads and the allocator's arenas, then the RSS the measured load starts from
        samples: list[tuple[float, float]] = []  # (RSS, anonymous RSS), MiB
        stop = threading.Event()

        def sample_rss() -> None:
            while not stop.wait(args.seconds / 12):
                samples.append((round(server.rss_mib(), 1), round(server.anon_mib(), 1)))

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        if args.warmup > 0:
            asyncio.run(load(server.url, args.clients, args.warmup, queries, fills))
        rss_start, anon_start = server.rss_mib(), server.anon_mib()
        n_warm = len(samples)
        res = asyncio.run(load(server.url, args.clients, args.seconds, queries, fills))
        stop.set()
        sampler.join()
        rss_end, anon_end = server.rss_mib(), server.anon_mib()
        rss_samples = [r for r, _ in samples[n_warm:]]
        cmp = search_vs_library(server.url, target, queries, args.direct_calls)
    finally:
        server.stop()

    lat = res["lat"]
    both = lat["search"] + lat["fill"]
    n_ok = len(both)
    metrics = {
        "clients": args.clients,
        "seconds": round(res["wall"], 2),
        "requests": n_ok + len(res["errors"]),
        "search_requests": len(lat["search"]),
        "fill_requests": len(lat["fill"]),
        "requests_per_s": round(n_ok / res["wall"], 2),
        "p50_ms": round(1000 * pct(both, 50), 1),
        "p99_ms": round(1000 * pct(both, 99), 1),
        "search_p50_ms": round(1000 * pct(lat["search"], 50), 1),
        "search_p99_ms": round(1000 * pct(lat["search"], 99), 1),
        "fill_p50_ms": round(1000 * pct(lat["fill"], 50), 1),
        "fill_p99_ms": round(1000 * pct(lat["fill"], 99), 1),
        "errors": len(res["errors"]),
        "server_rss_loaded_mib": round(rss_loaded, 1),
        "server_rss_start_mib": round(rss_start, 1),
        "server_rss_end_mib": round(rss_end, 1),
        "server_rss_max_mib": round(max(rss_samples + [rss_end]), 1),
        "server_rss_during_mib": rss_samples,
        "server_rss_during_warmup_mib": [r for r, _ in samples[:n_warm]],
        "server_rss_growth_mib": round(rss_end - rss_start, 1),
        "server_rss_growth_pct": round(100 * (rss_end / rss_start - 1), 2),
        "server_anon_start_mib": round(anon_start, 1),
        "server_anon_end_mib": round(anon_end, 1),
        "server_anon_during_mib": [a for _, a in samples[n_warm:]],
        "search_vs_library": cmp,
    }
    targets = {
        "errors": 0,
        "server_rss_growth": "flat (end ~ start)",
        "search_vs_library.overhead_p50": "<= 0.10",
    }
    notes = [
        f"target: {target_path}"
        + (" (built here: tiny random BERT, 2 steps)" if built else "")
        + f"; {len(target.store)} chunks; server `ralm serve --threads {threads}` in a subprocess on 127.0.0.1",
        f"shared 2-core machine (other jobs running): load average {load_avg_start[0]:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; the clients run on the same cores as the server",
        "requests are serialised per model (model lock), so latency under 32 clients is mostly queueing",
    ]
    if res["errors"]:
        notes.append("first errors: " + " | ".join(res["errors"][:3]))
    if cmp["http_roundtrip_p50_ms"] > 5:
        notes.append(slow_roundtrip_note(cmp["http_roundtrip_p50_ms"]))
    cmd = f"OMP_NUM_THREADS={threads} python benchmarks/serve_load.py {shlex.join(sys.argv[1:])}"
    out = {"metrics": metrics, "targets": targets, "notes": notes}
    if args.no_write:
        import json

        print(json.dumps(out, indent=2))
    else:
        write_result("serve_load", cmd.strip(), metrics, targets, notes=notes)
        print(f"wrote benchmarks/results/serve_load.json: {metrics}")


if __name__ == "__main__":
    main()
