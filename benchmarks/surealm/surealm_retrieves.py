"""SUREALM whose gain comes from what it retrieves (issue 46): the controls, the curves, the ablation.

Data: the first --groups chitchat conversations (every turn a sentence, split by conversation), a
data store of MiniLM-token entries with all-MiniLM-L6-v2 prefix/suffix embeddings (m=10, K=8, exact
index; --suffix whole: the authors' suffix encoding). Its build rate gives the cost of all 7,168
conversations (--groups 7168 builds them).

Runs, the same backbone (MiniLM as a causal LM), batches, steps, learning rates and seed:
  retrieved   SUREALM, memory through the gated cross-attention pathway (`--pathway`, default cross)
  random      the same, K random training entries per retrieval (never the sentence's own)
  null        the same, the slots there but zeroed: the baseline with null slots
  baseline    no retrieval
  dropout     retrieved, with memory slot dropout --memory-dropout in training (each slot nulled anew
              at every read, so the fixed offline neighbours are no code to memorise a sentence by);
              not in the default --runs
Validation perplexity every --eval-every steps (the curves); the model of lowest validation
perplexity is kept per run and scored on test. Also: the step-0 ratio (a fresh SUREALM model against
its fresh backbone on the validation sentences: the memory must be inert), the memory ablation of the
retrieved run on test (its memory retrieved, random, null, and masked out), the share of attention
on memory per layer and the gates at the end (cross pathway), and kNN-LM over the same data store on
top of the baseline.

Writes benchmarks/results/surealm_retrieves.json (--name). `--fold-gpu GPU.json` trains nothing: it
makes the GPU stage's run (gpu_surealm_retrieves.json, metrics prefixed gpu_) the file's headline,
under the issue's names, and keeps the CPU run beside it with every metric suffixed _cpu
(surealm_ppl_reduction_cpu, ...) and its record under "cpu_run". Run:
  python -m benchmarks.surealm.surealm_retrieves [--groups 500] [--steps 2000] [--runs retrieved,random,baseline,null]
  [--parallel] [--device cuda]   (gpu/stages/surealm.py runs it with 8,000 steps)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

from benchmarks.common import RESULTS, logger, script_command, write_result
from benchmarks.surealm.surealm_quality import add_shared_flags, training

RUNS = ("retrieved", "random", "null", "baseline")
# the neighbours each retrieval run reads (the baseline reads none); "dropout" is not in the default --runs
NEIGHBOURS = {"retrieved": "retrieved", "random": "random", "null": "null", "dropout": "retrieved"}
# 1 - A / B on test, when both runs are in --runs: (metric, A, B)
REDUCTIONS = (
    ("surealm_ppl_reduction", "retrieved", "baseline"),
    ("surealm_retrieved_vs_random_reduction", "retrieved", "random"),
    ("dropout_ppl_reduction", "dropout", "baseline"),
    ("dropout_vs_retrieved_reduction", "dropout", "retrieved"),
    ("null_slots_vs_baseline_reduction", "null", "baseline"),
)
# what --fold-gpu takes over from the GPU run besides its metrics
GPU_TABLES = ("curves", "step0", "settings", "memory_ablation_test", "attention_share_on_memory", "gates_end")
ALL_CONVERSATIONS = 7168
log = logger(stdout=True)


def train_config(args, ds: Path, work: Path, name: str):
    from ralm.surealm.train import TrainConfig

    common = dict(
        datastore=str(ds), out=str(work / name), seed=args.seed, device=args.train_device, **training(args)
    )
    if name == "baseline":
        return TrainConfig(retrieval=False, **common)
    return TrainConfig(
        retrieval=True,
        pathway=args.pathway,
        neighbours=NEIGHBOURS[name],
        memory_bias=args.memory_bias,
        memory_dropout=args.memory_dropout if name == "dropout" else 0.0,
        **common,
    )


def finished_seconds(cfg) -> float | None:
    """Training seconds of a run in cfg.out that finished with these very settings, else None (so a
    rerun after an interruption trains only what is missing)."""
    from dataclasses import asdict

    from ralm.surealm.train import TRAIN_FILE
    from ralm.train.logging import METRICS_FILE, read_metric_rows

    out = Path(cfg.out)
    info, metrics = out / TRAIN_FILE, out / METRICS_FILE
    if not (info.is_file() and metrics.is_file()):
        return None
    saved = json.loads(info.read_text())["config"]
    given = json.loads(json.dumps(asdict(cfg)))
    # settings left unset (None) are filled in by training (the LM from the data store's manifest); a
    # setting newer than the run (not in its train.json) has a default that keeps the old behaviour
    if any(k in saved and saved[k] != v for k, v in given.items() if v is not None):
        return None
    rows = read_metric_rows(metrics)
    if not rows or rows[-1].get("step") != cfg.steps:
        return None
    return float(sum(r.get("step_seconds", 0.0) for r in rows))


def timed_train(cfg) -> float:
    """Seconds `train(cfg)` took (top level: --parallel runs it in a process of its own); a run
    already finished with the same settings is kept and its recorded step time returned."""
    from ralm.surealm.train import train

    done = finished_seconds(cfg)
    if done is not None:
        return done
    t = time.perf_counter()
    train(cfg, overwrite=True, progress=False)
    return time.perf_counter() - t


def die_with_parent() -> None:
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)


def step0_ratio(args, ds: Path, n: int = 400) -> dict:
    """Validation perplexity of a fresh SUREALM model (retrieved memory) over its fresh backbone's."""
    import numpy as np
    import torch

    from ralm.models.causal import load_as_causal_lm
    from ralm.models.tokenizers import load_lm_tokenizer
    from ralm.surealm.data import SentenceBatcher
    from ralm.surealm.datastore import Datastore
    from ralm.surealm.model import SurealmConfig, SurealmLM
    from ralm.surealm.train import evaluate
    from ralm.train.device import resolve_device

    store = Datastore(ds)
    lm = str(store.manifest.get("lm", "minilm"))
    tok, _ = load_lm_tokenizer(lm)
    dev = resolve_device(args.train_device)
    torch.manual_seed(args.seed)
    cfg = SurealmConfig(
        lm=lm, k=args.k, mem_dim=store.dim, pathway=args.pathway, memory_bias=args.memory_bias
    )
    sure = SurealmLM(load_as_causal_lm(lm), cfg).to(dev).eval()
    base = SurealmLM(sure.backbone, SurealmConfig(lm=lm, retrieval=False, mem_dim=store.dim)).to(dev).eval()
    ids = store.split_ids("valid")[:n]
    c_s = evaluate(sure, SentenceBatcher(store, tok, k=args.k, delta=1), ids, device=dev)
    c_b = evaluate(base, SentenceBatcher(store, tok, k=args.k, delta=1, retrieval=False), ids, device=dev)
    return {
        "step0_ppl_surealm": c_s.token_ppl,
        "step0_ppl_baseline": c_b.token_ppl,
        "step0_ratio": c_s.token_ppl / c_b.token_ppl,
        "step0_sentences": int(len(ids)),
        "step0_nll_diff": float(np.abs(c_s.nll - c_b.nll)),
    }


def memory_ablation(run: Path, split: str = "test") -> dict:
    """The trained retrieved run on `split` with its memory retrieved, random, null and masked out."""
    from ralm.surealm.data import SentenceBatcher
    from ralm.surealm.train import evaluate, load_trained

    model, tok, store, batcher = load_trained(run)
    ids = store.split_ids(split)
    out = {}
    for name, kw in (
        ("retrieved", {}),
        ("random", {"neighbours": "random"}),
        ("null", {"neighbours": "null"}),
        ("masked", {"retrieval": False}),
    ):
        b = SentenceBatcher(
            store, tok, k=model.config.k, delta=model.config.delta, **{"retrieval": True, **kw}
        )
        out[name] = evaluate(model, b, ids).token_ppl
    return out


def attention_share(run: Path, n: int = 64) -> list[float]:
    """Per cross-attention block, the mean share of its attention on memory slots, over the positions
    of the first n test sentences that see at least one slot."""
    import torch

    from ralm.surealm.train import load_trained

    model, _tok, store, batcher = load_trained(run)
    if model.cross is None:
        return []
    ids = store.split_ids("test")[:n]
    batch = batcher.batch(ids)
    dev = next(model.parameters()).device
    shares: list[list[float]] = [[] for _ in model.cross]
    seen: list = []

    def capture(i):
        def hook(block, args):
            h, mk, mv, mask = args
            w = block.attention_weights(h, mk, mv, mask)  # (B, heads, T, J + T)
            J = mk.shape[1]
            visible = mask[:, 0, :, :J].any(-1)  # (B, T)
            mem = w[..., :J].sum(-1).mean(1)  # (B, T)
            if visible.any():
                shares[i].append(float(mem[visible].mean()))
            seen.append(i)

        return hook

    handles = [b.register_forward_pre_hook(capture(i)) for i, b in enumerate(model.cross)]
    try:
        with torch.no_grad():
            keep = ("input_ids", "attention_mask", "mem_keys", "mem_values", "mem_block")
            model(**{k: batch[k].to(dev) for k in keep})
    finally:
        for h in handles:
            h.remove()
    return [sum(s) / len(s) if s else 0.0 for s in shares]


def curves(work: Path, names: list[str]) -> dict[str, list[list[float]]]:
    from ralm.train.logging import METRICS_FILE, read_metric_rows

    out = {}
    for name in names:
        rows = read_metric_rows(work / name / METRICS_FILE)
        out[name] = [[r["step"], r["valid_token_ppl"]] for r in rows if "valid_token_ppl" in r]
    return out


def fold_gpu(cpu: dict, gpu: dict, prefix: str = "gpu_") -> tuple[dict, dict, dict]:
    """(metrics, targets, extra) of a results file whose headline is the GPU run `gpu` (its metrics
    named with `prefix`) and which keeps the CPU run `cpu` beside it: its metrics suffixed _cpu, its
    record under "cpu_run". `cpu` may be such a folded file already (its cpu_run is used)."""
    cpu = cpu.get("cpu_run", cpu)
    metrics = {k[len(prefix) :]: v for k, v in gpu["metrics"].items() if k.startswith(prefix)}
    metrics.update({f"{k}_cpu": v for k, v in cpu["metrics"].items()})
    targets = {k[len(prefix) :]: v for k, v in gpu["targets"].items() if k.startswith(prefix)}
    targets.update({f"{k}_cpu": "reported" for k in cpu["targets"] if k != "surealm_step0_ppl_ratio"})
    targets["surealm_step0_ppl_ratio_cpu"] = cpu["targets"].get("surealm_step0_ppl_ratio", "reported")
    extra = {k: gpu[k] for k in GPU_TABLES if k in gpu}
    extra["gpu_run"] = {k: gpu[k] for k in ("command", "machine", "date")}
    extra["cpu_run"] = cpu
    return metrics, targets, extra


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shared_flags(ap, groups=500, steps=2000)
    ap.add_argument("--train-device", default="auto")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--pathway", default="cross", choices=("cross", "self"))
    ap.add_argument("--memory-bias", type=float, default=None)
    ap.add_argument("--memory-dropout", type=float, default=0.5, help="the dropout run's slot dropout")
    ap.add_argument("--suffix", default="truncate", choices=("truncate", "whole"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="runs/surealm_retrieves")
    ap.add_argument("--name", default="surealm_retrieves")
    ap.add_argument(
        "--metric-prefix", default="", help="prepended to every metric name (gpu_: the GPU stage)"
    )
    ap.add_argument("--fold-gpu", default=None, help="GPU.json: make that run the headline (see above)")
    args = ap.parse_args()
    if args.fold_gpu:
        cpu = json.loads((RESULTS / f"{args.name}.json").read_text(encoding="utf-8"))
        gpu = json.loads(Path(args.fold_gpu).read_text(encoding="utf-8"))
        metrics, targets, extra = fold_gpu(cpu, gpu)
        pack = RESULTS / "gpu_pack.json"  # the card the stage ran on, as the pack recorded it
        card = (
            json.loads(pack.read_text())["stages"].get("surealm", {}).get("device")
            if pack.is_file()
            else None
        )
        extra["machine"] = (
            f"{gpu['machine']}, {card or 'a GPU'} (the headline); CPU run: {extra['cpu_run']['machine']}"
        )
        write_result(args.name, script_command(__file__), metrics, targets, **extra)
        log(f"{args.name}: the GPU run ({gpu['command']}) is the headline, the CPU run is kept under _cpu")
        return

    from ralm.surealm.datastore import Datastore
    from ralm.surealm.datastore_build import DatastoreConfig, build_datastore
    from ralm.surealm.evaluation import evaluate_models
    from ralm.surealm.sentences import read_sentences

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tag = Path(args.sentences).stem if args.sentences else f"chitchat-{args.groups}"
    ds = work / f"{tag}-{args.suffix}"
    if not (ds / "manifest.json").is_file():
        log(f"data store {ds}")
        sents = read_sentences([args.sentences or "chitchat"], limit_groups=args.groups)
        build_datastore(
            sents,
            ds,
            DatastoreConfig(k=args.k, device=args.device, suffix=args.suffix),
            overwrite=True,
            progress=False,
        )
    store = Datastore(ds)
    s0 = step0_ratio(args, ds)
    log(f"step 0: {s0}")
    names = [n for n in args.runs.split(",") if n]
    known = [*NEIGHBOURS, "baseline"]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"--runs: unknown run {', '.join(unknown)}; choose from {', '.join(known)}")
    cfgs = {n: train_config(args, ds, work, n) for n in names}
    seconds: dict[str, float] = {}
    if args.parallel and len(cfgs) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(
            len(cfgs), mp_context=mp.get_context("spawn"), initializer=die_with_parent
        ) as pool:
            jobs = {n: pool.submit(timed_train, c) for n, c in cfgs.items()}
            seconds = {n: j.result() for n, j in jobs.items()}
    else:
        for n, c in cfgs.items():
            log(f"train {n}")
            seconds[n] = timed_train(c)
    rows = evaluate_models(
        [str(work / n) for n in names],
        "test",
        None,
        str(work / "baseline") if "baseline" in names else None,
        "auto",
        args.knn_k,
    )
    test = {n: r for n, r in zip(names, rows, strict=False)}
    p = args.metric_prefix
    m: dict[str, float] = {f"{p}surealm_step0_ppl_ratio": s0["step0_ratio"]}
    for n in names:
        m[f"{p}test_token_ppl_{n}"] = test[n]["token_ppl"]
        info = json.loads((work / n / "train.json").read_text())
        m[f"{p}valid_token_ppl_{n}"] = info["valid"]["token_ppl"]
        m[f"{p}best_step_{n}"] = info["best_step"]
        m[f"{p}train_seconds_{n}"] = seconds[n]
    for metric, a, b in REDUCTIONS:
        if a in test and b in test:
            m[f"{p}{metric}"] = 1 - test[a]["token_ppl"] / test[b]["token_ppl"]
    if len(rows) > len(names):
        knn = rows[-1]
        m[f"{p}knnlm_ppl_reduction"] = 1 - knn["token_ppl"] / test["baseline"]["token_ppl"]
        m[f"{p}test_token_ppl_knnlm"] = knn["token_ppl"]
    extra: dict = {"curves": curves(work, names), "step0": s0, "settings": vars(args)}
    if "retrieved" in names:
        abl = memory_ablation(work / "retrieved")
        extra["memory_ablation_test"] = abl
        for k, v in abl.items():
            m[f"{p}ablation_test_ppl_memory_{k}"] = v
        share = attention_share(work / "retrieved")
        extra["attention_share_on_memory"] = share
        from ralm.surealm.model import SurealmLM

        gates = SurealmLM.load(work / "retrieved")[0].gates()
        extra["gates_end"] = gates
        if gates:
            m[f"{p}gate_mean_abs_end"] = sum(abs(g) for g in gates) / len(gates)
        if share:
            m[f"{p}attention_share_on_memory_mean"] = sum(share) / len(share)
    man = store.manifest
    m[f"{p}datastore_entries"] = man["entries"]
    m[f"{p}datastore_entries_per_second"] = man["entries_per_second"]
    m[f"{p}datastore_build_seconds"] = man["seconds"]["total"]
    m[f"{p}train_sentences"] = man["split_sentences"]["train"]
    m[f"{p}groups"] = args.groups
    # what all 7,168 conversations would cost at this rate (~2.8M entries)
    m[f"{p}datastore_all_conversations_seconds_estimate"] = (
        man["seconds"]["total"] * ALL_CONVERSATIONS / max(args.groups, 1)
    )
    targets = {
        f"{p}surealm_step0_ppl_ratio": "between 0.9999 and 1.0001",
        f"{p}surealm_ppl_reduction": ">= 0.07",
        f"{p}surealm_retrieved_vs_random_reduction": ">= 0.03",
    }
    write_result(args.name, script_command(__file__), m, targets, **extra)
    for k, v in m.items():
        log(f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}")


if __name__ == "__main__":
    main()
