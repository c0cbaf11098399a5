"""`ralm serve` under load, with dynamic batching on and off: 32 clients, then one client.

Question and targets (issues 16 and 29): with the server on loopback and 32 clients sending
mixed requests (3 searches to 1 fill), does batching concurrent requests per model (ralm.serve.
batching) give >= 3x the requests/s of the same server with batching off (`--max-batch 1`, one
request per model at a time, as before issue 29) and a p99 latency <= 1/3 of it, with 0 errors
and a flat RSS after the warm-up? With one client (sequential requests), is the p50 with
batching on within 5% of batching off (a lone request must not wait for company)? Which batch
sizes does the server run under load? And the search endpoint's p50 against the same search
called in-process (issue 16; target: overhead <= 10% at p50).

Servers: the real command, `ralm serve TARGET --port 0 --quiet --threads N` (+ `--device D` with
--device D, + `--max-batch 1` for off, + --on-args for on), as subprocesses on 127.0.0.1, both
started at the beginning; RSS from psutil. TARGET: --target, else runs/demo/realm (`make demo`),
else one of the same shape built under --work (benchmarks/serve/serve_target.py: the enwiki sample in
64-token chunks, MiniLM reader and towers, configs/demo.toml at 2 steps); --small builds a tiny
random BERT run instead (quick runs).
Load: 32 asyncio clients (httpx, one keep-alive connection each), each in a loop: a search (dense,
BM25, hybrid in turn, k=10, a chatterbot trivia question) three times in four, else a fill (a
chunk's first 300 characters with its first salient span replaced by [MASK]); per server first
--warmup seconds, then the measured --seconds; batching off first, then on. RSS is sampled during
the measured load ("start" is the RSS after the warm-up). The batch sizes are the difference of
/api/info's per-queue counts over the measured load.
One client: the same request sequence sent to both servers, alternating request by request (so
load from other processes hits both alike), --one-client requests each after 20 of warm-up.
Search vs library: on the batching-on server, one client alternates GET /api/search (dense, k=10)
with `Target.dense.search_text([q], 10)` plus `store.get` of the same 10 chunks in this process
(`load_target` of the same TARGET), in a worker thread as the app runs it; --direct-calls 0 skips it.

Run: OMP_NUM_THREADS=2 python -m benchmarks.serve.serve_load [--target runs/demo/realm] [--seconds 60]
Writes benchmarks/results/serve_load.json (--result NAME: NAME.json, for a variant's run).
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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks.common import offline, script_command, write_result

offline()
from benchmarks.serve.serve_overhead import search_vs_library, slow_roundtrip_note  # noqa: E402
from benchmarks.serve.serve_target import DEFAULT_TARGET, build_demo_like, build_small_realm  # noqa: E402

DEFAULT_WORK = Path(tempfile.gettempdir()) / "ralm-bench-serve"
SEARCH_SHARE = 0.75
RETRIEVERS = ("dense", "bm25", "hybrid")


# ----------------------------------------------------------------------------- the server
class Server:
    """`ralm serve TARGET` in a subprocess on 127.0.0.1 and a free port; stderr is drained."""

    def __init__(self, target: Path, threads: int, extra: Sequence[str] = (), wait: bool = True) -> None:
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
            *extra,
        ]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self.url: str | None = None
        self.ready = ready = threading.Event()

        def drain() -> None:
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                m = re.search(r"at (http://127\.0\.0\.1:\d+)/", line)
                if m and self.url is None:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if wait:
            self.wait()

    def wait(self) -> None:
        """Until the server listens (SystemExit when it does not start within 10 minutes)."""
        if not self.ready.wait(600) or self.url is None:
            self.stop()
            raise SystemExit("ralm serve did not start:\n" + "\n".join(self.lines[-20:]))

    def rss_mib(self) -> float:
        import psutil

        return psutil.Process(self.proc.pid).memory_info().rss / 2**20

    def anon_mib(self) -> float:
        """Anonymous resident memory (the heap: what a leak or the allocator grows; RSS adds mapped files)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"RssAnon:\s+(\d+) kB", status).group(1)) / 1024

    def info(self, key: str = "batching"):
        """A section of /api/info: batching (settings, per model queue the batch-size counts), device..."""
        import httpx

        return httpx.get(f"{self.url}/api/info", timeout=60).json()[key]

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


# ----------------------------------------------------------------------------- on vs off
def batch_sizes(before: dict, after: dict) -> dict[str, dict[str, int]]:
    """Per queue, batch size -> batches run between two /api/info batching snapshots."""
    out = {}
    for name, q in after["queues"].items():
        old = before["queues"][name]["batch_sizes"]
        diff = {s: n - old.get(s, 0) for s, n in q["batch_sizes"].items() if n - old.get(s, 0)}
        out[name] = dict(sorted(diff.items(), key=lambda kv: int(kv[0])))
    return out


def under_load(server: Server, args, queries: list[str], fills: list[str]) -> dict:
    """--warmup then --seconds of `args.clients` clients on `server`: throughput, latency, RSS, batches."""
    samples: list[float] = []
    stop = threading.Event()

    def sample_rss() -> None:
        while not stop.wait(args.seconds / 12):
            samples.append(round(server.rss_mib(), 1))

    if args.warmup > 0:
        asyncio.run(load(server.url, args.clients, args.warmup, queries, fills))
    rss_start, before, cpu = server.rss_mib(), server.info(), time.process_time()
    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    res = asyncio.run(load(server.url, args.clients, args.seconds, queries, fills))
    stop.set()
    sampler.join()
    rss_end, after = server.rss_mib(), server.info()
    lat = res["lat"]
    both = lat["search"] + lat["fill"]
    sizes = batch_sizes(before, after)
    runs = {name: sum(int(s) * n for s, n in h.items()) for name, h in sizes.items()}
    return {
        "seconds": round(res["wall"], 2),
        "client_cpu_share": round((time.process_time() - cpu) / res["wall"], 2),  # ~1: the clients limit
        "requests": len(both) + len(res["errors"]),
        "search_requests": len(lat["search"]),
        "fill_requests": len(lat["fill"]),
        "requests_per_s": round(len(both) / res["wall"], 2),
        "p50_ms": round(1000 * pct(both, 50), 1),
        "p99_ms": round(1000 * pct(both, 99), 1),
        "search_p50_ms": round(1000 * pct(lat["search"], 50), 1),
        "search_p99_ms": round(1000 * pct(lat["search"], 99), 1),
        "fill_p50_ms": round(1000 * pct(lat["fill"], 50), 1),
        "fill_p99_ms": round(1000 * pct(lat["fill"], 99), 1),
        "errors": len(res["errors"]),
        "first_errors": res["errors"][:3],
        "server_rss_start_mib": round(rss_start, 1),
        "server_rss_end_mib": round(rss_end, 1),
        "server_rss_during_mib": samples,
        "server_rss_growth_pct": round(100 * (rss_end / rss_start - 1), 2),
        "batch_sizes": sizes,
        "mean_batch_size": {
            name: round(runs[name] / max(1, sum(h.values())), 2) for name, h in sizes.items()
        },
    }


def one_client(servers: dict[str, Server], n: int, queries: list[str], fills: list[str]) -> dict:
    """p50 (ms) of one client's sequential requests on each server, the same requests alternating."""
    import httpx

    rng = random.Random(1)
    lat: dict[str, list[float]] = {name: [] for name in servers}
    clients = {name: httpx.Client(base_url=s.url, timeout=120) for name, s in servers.items()}
    try:
        for i in range(n + 20):
            if rng.random() < SEARCH_SHARE:
                params = {"q": rng.choice(queries), "k": 10, "retriever": RETRIEVERS[i % 3]}
                req = ("GET", "/api/search", {"params": params})
            else:
                req = ("POST", "/api/fill", {"json": {"text": rng.choice(fills)}})
            names = list(servers) if i % 2 else list(servers)[::-1]
            for name in names:
                time.sleep(0.01)  # the other server's last call has wound down
                t = time.perf_counter()
                r = clients[name].request(req[0], req[1], **req[2])
                r.raise_for_status()
                r.json()
                if i >= 20:
                    lat[name].append(time.perf_counter() - t)
    finally:
        for c in clients.values():
            c.close()
    return {f"{name}_p50_ms": round(1000 * pct(x, 50), 2) for name, x in lat.items()} | {"requests": n}


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--target", type=Path, default=None, help="a REALM run (default: runs/demo/realm, else built)"
    )
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="where a stand-in REALM run is built")
    ap.add_argument(
        "--small", action="store_true", help="build a tiny random BERT run instead of a demo-like one"
    )
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds of load before the measured load")
    ap.add_argument("--one-client", type=int, default=200, help="sequential requests per server")
    ap.add_argument("--on-args", default="", help="extra `ralm serve` flags of the batching-on server")
    ap.add_argument("--device", default=None, help="the servers' `--device` (default: the run's)")
    ap.add_argument("--direct-calls", type=int, default=200, help="search calls of each kind (0: skip)")
    ap.add_argument("--result", default="serve_load", help="write benchmarks/results/RESULT.json")
    ap.add_argument("--no-write", action="store_true", help="print, do not write the result file")
    args = ap.parse_args()

    import torch

    from ralm.realm.training.run import open_stores, read_run_config
    from ralm.serve.batching import BatchConfig
    from ralm.serve.loaders import load_target

    threads = torch.get_num_threads()
    if args.target is not None:
        target_path, built = args.target, ""
    elif (DEFAULT_TARGET / "config.toml").is_file():
        target_path, built = DEFAULT_TARGET, ""
    elif args.small:
        target_path, built = build_small_realm(args.work), " (built here: tiny random BERT, 2 steps)"
    else:
        print(f"no {DEFAULT_TARGET}: building a demo-like REALM run under {args.work}", file=sys.stderr)
        target_path, built = build_demo_like(args.work), " (built here: configs/demo.toml at 2 steps)"

    load_avg_start = os.getloadavg()
    dev = ["--device", args.device] if args.device else []
    servers = {  # both load while this process does (they are ready before any load)
        "off": Server(target_path, threads, [*dev, "--max-batch", "1"], wait=False),
        "on": Server(target_path, threads, [*dev, *shlex.split(args.on_args)], wait=False),
    }
    try:
        if args.direct_calls > 0:  # this process's copy of the models (the library calls)
            target = load_target(target_path, args.device or "cpu", log=lambda m: None)
            store = target.store
        else:  # the requests need only the corpus
            store = open_stores(read_run_config(target_path))[0]
        queries = search_queries()
        fills = fill_texts(store, 200)
        for s in servers.values():
            s.wait()
        rss_loaded = {name: round(s.rss_mib(), 1) for name, s in servers.items()}
        settings = {
            name: {k: v for k, v in s.info().items() if k != "queues"} | {"device": s.info("device")}
            for name, s in servers.items()
        }
        loads = {}
        for name in ("off", "on"):
            msg = f"batching {name}: {args.warmup:.0f} s warm-up, {args.seconds:.0f} s measured"
            print(msg, file=sys.stderr)
            loads[name] = under_load(servers[name], args, queries, fills)
        print(f"one client: {args.one_client} requests per server", file=sys.stderr)
        single = one_client(servers, args.one_client, queries, fills)
        cmp = None
        if args.direct_calls > 0 and target.dense is not None:
            cmp = search_vs_library(servers["on"].url, target, queries, args.direct_calls)
    finally:
        with ThreadPoolExecutor() as pool:  # both at once (an interpreter with torch takes seconds to exit)
            list(pool.map(Server.stop, servers.values()))

    on, off = loads["on"], loads["off"]
    metrics = {
        "clients": args.clients,
        "throughput_on_over_off": round(on["requests_per_s"] / off["requests_per_s"], 2),
        "p99_on_over_off": round(on["p99_ms"] / off["p99_ms"], 3),
        "errors": on["errors"] + off["errors"],
        "one_client_p50_on_over_off": round(single["on_p50_ms"] / single["off_p50_ms"], 4),
        "batch_sizes_under_load": on["batch_sizes"],
        "load": loads,
        "one_client": single,
        "settings": settings,
        "server_rss_loaded_mib": rss_loaded,
        "defaults": {k: getattr(BatchConfig(), k) for k in ("max_batch", "max_wait_ms", "max_queue")},
    }
    if cmp is not None:
        metrics["search_vs_library"] = cmp
    targets = {
        "throughput_on_over_off": ">= 3",
        "p99_on_over_off": "<= 0.333",
        "errors": 0,
        "server_rss_growth": "flat after the warm-up (load.*.server_rss_growth_pct ~ 0)",
        "one_client_p50_on_over_off": "<= 1.05",
        "search_vs_library.overhead_p50": "<= 0.10",
    }
    notes = [
        f"target: {target_path}{built}; {len(store)} chunks; servers `ralm serve --threads {threads}` "
        f"(off: --max-batch 1; on: defaults{' ' + args.on_args if args.on_args else ''}) in subprocesses on 127.0.0.1"
        + (f", models on {args.device}" if args.device else ""),
        f"shared 2-core machine (other jobs running): load average {load_avg_start[0]:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; the clients run on the same cores as the servers",
    ]
    for name in ("off", "on"):
        if loads[name]["errors"]:
            notes.append(f"first errors ({name}): " + " | ".join(loads[name]["first_errors"]))
    if cmp is not None and cmp["http_roundtrip_p50_ms"] > 5:
        notes.append(slow_roundtrip_note(cmp["http_roundtrip_p50_ms"]))
    cmd = script_command(__file__, shlex.join(sys.argv[1:]), python=f"OMP_NUM_THREADS={threads} python")
    if args.no_write:
        import json

        print(json.dumps({"metrics": metrics, "targets": targets, "notes": notes}, indent=2))
    else:
        write_result(args.result, cmd.strip(), metrics, targets, notes=notes)
        print(f"wrote benchmarks/results/{args.result}.json: {metrics}")


if __name__ == "__main__":
    main()
