"""Stage 4 of the GPU pack: `ralm serve` under load on the GPU, dynamic batching on against off.

benchmarks/serve/serve_load.py as committed for the CPU (32 clients, 3 searches to 1 fill, the same
`ralm serve` with `--max-batch 1` and with the defaults), with both servers' models on the GPU
(`--device cuda`). On a CPU batching gave 1.07x the requests/s (benchmarks/results/serve_load.json:
a CPU fill is compute-bound); on a GPU, where a batch costs little more than one request, the
issue expects >= 3x the requests/s at <= 1/3 the p99.

Target: serve_load's demo-shaped REALM run (serve_target.build_demo_like: the enwiki sample in
64-token chunks, 12,284 chunks; configs/demo.toml at 2 steps; MiniLM reader and towers). Its run
directory is 796 MB (model.safetensors 259, optim.pt 519, index 18), too much to travel even
without optim.pt or in fp16, so `prep` builds only the DocStore (9 MB) and `run` trains the 2
steps on the GPU into its scratch folder, then serves it. --tiny: the same commands on the first 5
articles with serve_target's random 2-layer BERT (hidden 64) as reader and towers, on the CPU,
with seconds of load.

GPU time, estimated, not measured on a card: the 2-step run ~25 s (process start, three MiniLMs to
the GPU, the 12,284 chunks embedded, an 800 MB checkpoint written); serve_load ~25 s around the
load (its imports, both servers loading at once, 50 one-client requests per server, both stopping
at once; SERVE_OVERHEAD_S budgets 45); per server 10 s of warm-up and 20 s measured: ~110 s in
all, hence BUDGET_S (130). With less time left (a slow build, a short pack) the load shrinks, down
to 5 + 10 s per server. The in-process search comparison (issue 16's) is skipped. Should the stage
be stopped, the `ralm serve` processes serve_load leaves behind are ended (they would hold the GPU).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from benchmarks.gpu.stages.context import StageContext
from benchmarks.serve.serve_target import demo_like_args

NAME = "serve"
TITLE = "ralm serve on the GPU: 32 clients, 3 searches to 1 fill, dynamic batching on vs off"
BUDGET_S = 130.0
MIN_S = 100.0
TARGETS = {
    "gpu_serve_throughput_on_over_off": ">= 3",
    "gpu_serve_p99_on_over_off": "<= 0.34",
}

CLIENTS = 32
WARMUP_S, SECONDS = 10.0, 20.0  # full mode, per server
MIN_WARMUP_S, MIN_SECONDS = 5.0, 10.0  # the least the stage shortens them to
SERVE_OVERHEAD_S = 45.0  # serve_load around the load: imports, both servers loading, one client, stop
ONE_CLIENT = 50
TINY = {"warmup": 1.0, "seconds": 2.0, "one_client": 5}
TINY_ARTICLES = 5
RESULT = "serve_load"
# serve_load's numbers per server (load.on/off) that the stage reports as gpu_serve_{on,off}_NAME;
# client_cpu_share near 1: the one client process, not the server, limited the requests/s
PER_SERVER = (
    "requests_per_s",
    "p50_ms",
    "p99_ms",
    "search_p50_ms",
    "search_p99_ms",
    "fill_p50_ms",
    "fill_p99_ms",
    "requests",
    "errors",
    "seconds",
    "client_cpu_share",
    "server_rss_growth_pct",
)


def _pretrain_args(ctx: StageContext, corpus: Path, out: Path) -> list:
    """serve_target.build_demo_like's `ralm pretrain` (2 steps of configs/demo.toml) on ctx.device."""
    args = demo_like_args(corpus, out, ctx.device)
    if ctx.tiny:
        args += ["--reader", ctx.inputs / "tiny-bert"]  # also the towers' backbone
    return args


def prep(ctx: StageContext) -> None:
    """The demo DocStore (tiny: 5 articles cut by the tiny BERT's tokenizer, and that BERT)."""
    corpus = ctx.inputs / "corpus"
    build = ["corpus", "build", "--sample", "enwiki", "--out", corpus, "--chunk-size", 64, "--overwrite"]
    if ctx.tiny:
        from benchmarks.common import tiny_bert

        bert = tiny_bert(ctx.inputs / "tiny-bert")
        build += ["--tokenizer", bert, "--max-articles", TINY_ARTICLES]
    ctx.ralm(*build)


def _durations(ctx: StageContext) -> tuple[float, float]:
    """(warm-up, measured) seconds per server: the full ones, shortened to fit the time left."""
    if ctx.tiny:
        return TINY["warmup"], TINY["seconds"]
    per_server = (ctx.left() - SERVE_OVERHEAD_S) / 2
    warmup = max(MIN_WARMUP_S, min(WARMUP_S, per_server / 3))
    return round(warmup, 1), round(max(MIN_SECONDS, min(SECONDS, per_server - warmup)), 1)


def _stop_servers(target: Path, log) -> None:
    """End the `ralm serve TARGET` processes left running: serve_load stops its servers, but when it
    is itself stopped at the stage's deadline (killed), they outlive it and would hold the GPU."""
    import psutil

    want = ["ralm", "serve", str(target)]
    left = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(cmd[i : i + 3] == want for i in range(len(cmd))):
            left.append(p)
    for p in left:
        p.terminate()
    _, alive = psutil.wait_procs(left, timeout=10)
    for p in alive:
        p.kill()
    if left:
        log(f"{NAME}: stopped {len(left)} `ralm serve` left running")


def run(ctx: StageContext) -> dict:
    corpus, target = ctx.work / "corpus", ctx.work / "demo-realm"
    if not (ctx.inputs / "corpus" / "manifest.json").is_file():
        raise FileNotFoundError(f"{ctx.inputs / 'corpus'}: no DocStore (run `gpu_pack.py prep` first)")
    shutil.rmtree(corpus, ignore_errors=True)  # the run's config names its corpus: a copy in scratch
    shutil.copytree(ctx.inputs / "corpus", corpus)
    t0 = time.monotonic()
    ctx.ralm("pretrain", *_pretrain_args(ctx, corpus, target))
    build_s = time.monotonic() - t0
    warmup, seconds = _durations(ctx)
    one = TINY["one_client"] if ctx.tiny else ONE_CLIENT
    ctx.log(f"{NAME}: target built in {build_s:.0f} s; {warmup:.0f} + {seconds:.0f} s of load per server")
    try:
        ctx.python(
            "benchmarks.serve.serve_load",
            "--target",
            target,
            "--device",
            ctx.device,
            "--clients",
            CLIENTS,
            "--warmup",
            warmup,
            "--seconds",
            seconds,
            "--one-client",
            one,
            "--direct-calls",
            0,
            "--result",
            RESULT,
        )
    finally:
        _stop_servers(target, ctx.log)
    m = ctx.read_result(RESULT)["metrics"]
    for name, s in m["settings"].items():  # the models must be where they were asked to be
        if not str(s["device"]).startswith(ctx.device):
            raise RuntimeError(f"{NAME}: the batching-{name} server ran on {s['device']}, not {ctx.device}")
    on, off = m["load"]["on"], m["load"]["off"]
    out = {
        "gpu_serve_throughput_on_over_off": m["throughput_on_over_off"],
        "gpu_serve_p99_on_over_off": m["p99_on_over_off"],
        "gpu_serve_errors": m["errors"],
        "gpu_serve_one_client_p50_on_over_off": m["one_client_p50_on_over_off"],
        "gpu_serve_clients": m["clients"],
        "gpu_serve_target_build_s": round(build_s, 1),
        "gpu_serve_warmup_s": warmup,
    }
    for side, r in (("on", on), ("off", off)):
        for k in PER_SERVER:
            out[f"gpu_serve_{side}_{k}"] = r[k]
        for queue, sizes in r["batch_sizes"].items():  # e.g. model (dense search, fill), bm25
            out[f"gpu_serve_{side}_mean_batch_{queue}"] = r["mean_batch_size"][queue]
            out[f"gpu_serve_{side}_max_batch_{queue}"] = max((int(s) for s in sizes), default=0)
    return out
