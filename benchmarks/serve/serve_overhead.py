"""The search endpoint against the same search called in-process (issue 16), for serve_load.py.

`search_vs_library(url, target, queries, n)`: one client alternates GET /api/search (dense, k=10)
with `Target.dense.search_text([q], 10)` plus `store.get` of the same 10 chunks, in a worker
thread as the app runs it; p50s, the overhead, and the bare HTTP round trip (GET /api/info).
"""

from __future__ import annotations

import time

import numpy as np


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


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
