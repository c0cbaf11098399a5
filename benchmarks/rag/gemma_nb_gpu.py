"""Issue 36's GPU rows: gemma_nb.py's cells on all 3,808 NorQuAD train questions, on one H100/H200.

The CPU rows (benchmarks/results/gemma_nb.json) fine-tune on the first 1,000 train questions and
train the DPR towers for 10 steps. A lent GPU runs the budget the issue names instead, with the
same commands (gemma_nb.py's cells, the same recipes):

  ft-gemma, ft-smollm2   `ralm rag train` on all 3,808 questions (k=3, LoRA r=16, batch 4, 1 epoch),
                         then RAG k=3 and the oracle with the trained model
  dpr-gemma              retriever_train.py's `dpr` recipe (all train questions, validation model
                         selection, 3 epochs at batch 32) with the Gemma-3 towers; its MiniLM row
                         (benchmarks/results/retriever_train.json, dpr/recall@5) is the baseline
  zs-gemma-rest/oracle   the zero-shot rows the CPU run left out (closed-book, k=1/5, REPLUG, oracle)
  cbft-gemma             closed-book fine-tuning on the same 3,808 questions
  upr                    UPR with the RAG-fine-tuned Gemma-3: BM25's top 20 reranked, recall@1

Steps:
  prep   (CPU) the pack under --pack (default runs/gemma_gpu): the NorQuAD files, the retrieval
         files (gemma_nb.py prep --train-questions 100000: top 3 for train, top 5 for test), the pool
         DocStore, the two GGUF files with their tokenizers and configs converted here (a GGUF
         vocabulary takes minutes of Python to parse), the wheels the device image lacks (faiss,
         bm25s, PyStemmer, ir-measures, gguf) and this machine's transformers and peft; text files
         travel gzipped. Then cut into transport parts of <= 50 MiB (gpu.stages.transport).
  stash  (GPU) one part per call:  PYTHONPATH=src python -m benchmarks.rag.gemma_nb_gpu stash runs/gemma_gpu/parts/pNN
         (on the GPU every call runs from the repository root with PYTHONPATH=src: ralm is not
         installed there)
  run    (GPU) with the last part: installs the wheels, converts both GGUF weights to float32
         directories (two processes), runs the cells as parallel processes on the one GPU until
         --budget seconds, then packs every results.json, train.json, predictions and log into
         $OUT/gemma_nb_gpu.tar.gz (what did not finish is simply absent).
  report (CPU) gemma_nb.py report --gpu DIR adds the rows (named *_3808q_gpu).

The first H200 run (2026-11-26) measured the gemma, smollm2 and zs groups; dpr failed on JAX's GPU
memory reservation (fixed in ralm.retrieval since) and cbft was stopped to give the card to the
fine-tuning runs. The next GPU session: prep, stash the parts, `start --groups dpr cbft`, collect.

Run: python -m benchmarks.rag.gemma_nb_gpu prep | stash PART | start [--groups G ...] [--budget S] | collect --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

from benchmarks.common import ROOT, logger, script_argv

NORQUAD = ROOT.parent / "shared" / "data" / "norquad" / "all"
SPLITS = {
    "train": "training_dataset_flattened.reconstructed.json",
    "test": "test_dataset_flattened.json",
    "validation": "validation_dataset_flattened.json",
}
WHEELS = ("faiss_cpu", "bm25s", "pystemmer", "ir_measures", "gguf")
EXTRA_WHEELS = (
    "transformers==5.24.0",
    "peft==0.21.2",
    "pytrec_eval-terrier==0.5.11",
)  # this machine's versions (the image has 5.17)
COMPLETE, DONE = "COMPLETE", "DONE"  # markers: every part stashed; the run ended
TOP = {"train": 3, "test": 5}  # passages kept per question: k=3 training, k<=5 evaluation
# cells, one process each, in the order they are started; a cell's steps run in sequence
CELLS = {
    "gemma": ["ft-gemma", "ftoracle-gemma", "upr"],
    "smollm2": ["ft-smollm2", "ftoracle-smollm2"],
    "dpr": ["dpr-gemma"],
    "zs": ["zs-gemma-rest", "zs-gemma-oracle"],
    "cbft": ["cbft-gemma"],
}


log = logger("gemma_nb_gpu", stdout=True)


# ----------------------------------------------------------------------------- prep (CPU)
def _gz(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as fi, gzip.open(f"{dst}.gz", "wb", compresslevel=6) as fo:
        shutil.copyfileobj(fi, fo)


def _trim(src: Path, dst: Path, top: int) -> None:
    """A retrieval file with the first `top` passages of each question, gzipped."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open(encoding="utf-8") as fi, gzip.open(f"{dst}.gz", "wt", encoding="utf-8") as fo:
        for line in fi:
            r = json.loads(line)
            r["passages"] = r["passages"][:top]
            fo.write(json.dumps(r, ensure_ascii=False) + "\n")


def cmd_prep(a) -> int:
    from benchmarks.gpu.stages import transport
    from benchmarks.gpu.stages.transport import split_parts, write_manifest
    from benchmarks.gpu.stages.weights import convert
    from ralm.models.encoder import load_auto
    from ralm.models.names import resolve_lm

    pack = a.pack
    retrieved = a.b36 / "retrieved"
    if not (retrieved / "train.jsonl").is_file():
        raise SystemExit(
            f"{retrieved}: run `python -m benchmarks.rag.gemma_nb prep --work {a.b36} --train-questions 100000` first"
        )
    shutil.rmtree(pack, ignore_errors=True)
    data = pack / "data"
    for name in SPLITS.values():
        _gz(NORQUAD / name, data / "norquad" / name)
    for split, top in TOP.items():
        _trim(retrieved / f"{split}.jsonl", data / "retrieved" / f"{split}.jsonl", top)
    shutil.copytree(a.b35 / "pool", data / "pool")
    _gz(a.b35 / "test.jsonl", data / "test.jsonl")
    for key, spec in (("gemma", "gemma3"), ("smollm2", "smollm2")):
        d, gguf = resolve_lm(spec)
        src = Path(d) / gguf
        m = pack / "models" / key
        m.mkdir(parents=True)
        (m / src.name).symlink_to(src.resolve())  # split_parts reads through the link
        convert("tokenizer", src, m / "tokenizer")
        (m / "config").mkdir()
        cfg = load_auto("AutoConfig", src.parent, gguf_file=src.name, local_files_only=True)
        cfg.to_json_file(str(m / "config" / "config.json"))
        for f in (m / "tokenizer").iterdir():  # the vocabulary files are large and compress well
            if f.stat().st_size > 2**20:
                _gz(f, f)
                f.unlink()
    wheels = pack / "wheels"
    wheels.mkdir()
    for w in Path(a.wheels).iterdir():
        if w.name.lower().startswith(WHEELS):
            shutil.copy2(w, wheels / w.name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            "--platform",
            "manylinux_2_28_x86_64",
            "-d",
            str(wheels),
            *EXTRA_WHEELS,
        ],
        check=True,
    )
    write_manifest(pack, date=time.strftime("%Y-%m-%dT%H:%M:%S"))
    transport.PART_BYTES = int(a.part_mib * 2**20)
    parts = split_parts(
        pack, pack / "parts", ["pack.json", "wheels", "data", "models/gemma", "models/smollm2"]
    )
    log(
        f"{len(parts)} parts under {pack / 'parts'}: "
        + ", ".join(
            f"{p.name} {sum(f.stat().st_size for f in p.rglob('*') if f.is_file()) / 2**20:.1f} MiB"
            for p in parts
        )
    )
    return 0


# ----------------------------------------------------------------------------- stash, run (GPU)
def cmd_stash(a) -> int:
    from benchmarks.gpu.stages.transport import stash

    joined = stash(a.part, a.dest)
    log(f"{a.part} -> {a.dest}" + (f" (joined {', '.join(joined)})" if joined else ""))
    return 0


def _gunzip_all(root: Path) -> None:
    for f in list(root.rglob("*.gz")):
        with gzip.open(f, "rb") as fi, open(f.with_suffix(""), "wb") as fo:
            shutil.copyfileobj(fi, fo)
        f.unlink()


def _convert(pack: Path, key: str) -> Path:
    """One carried GGUF reader as a float32 model directory with its tokenizer (converted by prep)."""
    m = pack / "models" / key
    gguf, d = next(m.glob("*.gguf")), m / "fp32"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.gpu.stages.weights",
        "convert",
        "model",
        str(gguf),
        str(d),
        "--config",
        str(m / "config"),
    ]
    subprocess.run(cmd, check=True)
    for f in (m / "tokenizer").iterdir():
        shutil.copy2(f, d / f.name)
    return d


def cmd_start(a) -> int:
    """Install the wheels, then `run` detached (setsid), so that later calls can still stash parts."""
    from benchmarks.gpu.stages.transport import device_env

    _gunzip_all(a.dest)
    env = device_env(a.dest, Path(a.site), log=log)
    a.work.mkdir(parents=True, exist_ok=True)
    cmd = [
        *script_argv(__file__),
        "run",
        "--dest",
        str(a.dest),
        "--work",
        str(a.work),
        "--budget",
        str(a.budget),
        "--groups",
        *a.groups,
    ]
    full = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "3",
    }
    with (a.work / "run.log").open("w") as logf:
        subprocess.Popen(
            cmd,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full,
            start_new_session=True,
            cwd=ROOT,
        )
    log(f"started: {' '.join(cmd)} (log {a.work / 'run.log'})")
    return 0


def cmd_run(a) -> int:
    """The cells, as parallel processes on the one GPU, until --budget seconds; SmolLM2's cells start
    once the last part has been stashed (the file COMPLETE in --dest)."""
    t0 = time.monotonic()
    pack, work = a.dest, a.work
    groups = [g for g in CELLS if g in a.groups]
    if any(g != "smollm2" for g in groups):  # every other group reads Gemma-3
        _convert(pack, "gemma")
        log(f"gemma ready after {time.monotonic() - t0:.0f} s")
    deadline = t0 + a.budget
    procs: dict = {}

    def launch(name: str) -> None:
        cmd = [
            *script_argv(__file__),
            "cells",
            *CELLS[name],
            "--dest",
            str(pack),
            "--work",
            str(work),
        ]
        logf = (work / f"{name}.log").open("w")
        procs[name] = (
            subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True),
            logf,
        )
        log(f"{name}: started")

    for name in groups:
        if name != "smollm2":
            launch(name)
    smol, smol_ready = None, threading.Event()  # SmolLM2 converts (in its own process) once its parts are in
    while time.monotonic() < deadline:
        if smol is None and "smollm2" in groups and (pack / COMPLETE).is_file():
            _gunzip_all(pack / "models" / "smollm2")
            smol = threading.Thread(target=lambda: (_convert(pack, "smollm2"), smol_ready.set()), daemon=True)
            smol.start()
        if smol_ready.is_set() and "smollm2" not in procs:
            launch("smollm2")
        if len(procs) == len(groups) and all(p.poll() is not None for p, _ in procs.values()):
            break
        time.sleep(2)
    for name, (p, logf) in procs.items():
        if p.poll() is None:
            log(f"{name}: stopped at the budget ({a.budget:.0f} s)")
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        logf.close()
        log(f"{name}: exit {p.returncode}")
    import torch

    (work / "device.json").write_text(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "seconds": round(time.monotonic() - t0, 1),
                "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            indent=2,
        )
        + "\n"
    )
    (work / DONE).write_text("done\n")
    log(f"done in {time.monotonic() - t0:.0f} s")
    return 0


def cmd_collect(a) -> int:
    """Wait for `run` (at most --wait seconds), then pack what it wrote into OUT/gemma_nb_gpu.tar.gz."""
    t0 = time.monotonic()
    while not (a.work / DONE).is_file() and time.monotonic() - t0 < a.wait:
        time.sleep(3)
    a.out.mkdir(parents=True, exist_ok=True)
    keep = {
        "results.json",
        "train.json",
        "eval.json",
        "train_seconds.json",
        "metrics.jsonl",
        "predictions.jsonl",
        "device.json",
    }
    with tarfile.open(a.out / "gemma_nb_gpu.tar.gz", "w:gz") as tar:
        for f in sorted(a.work.rglob("*")):
            if f.is_file() and not f.is_symlink() and (f.name in keep or f.suffix == ".log"):
                tar.add(f, arcname=str(f.relative_to(a.work)))
    for name in ("run", *CELLS):
        f = a.work / f"{name}.log"
        if f.is_file():
            print(
                f"--- {name}.log (end)\n" + "".join(f.read_text(errors="replace").splitlines(True)[-8:]),
                flush=True,
            )
    log(f"collected ({'finished' if (a.work / DONE).is_file() else 'still running'})")
    return 0


def cmd_cells(a) -> int:
    """One process's cells (run by `run`): gemma_nb.py's functions with the pack's paths."""
    from benchmarks.rag import gemma_nb as g

    data = a.dest / "data"
    g.TEST, g.TRAIN = data / "norquad" / SPLITS["test"], data / "norquad" / SPLITS["train"]
    if a.test_file is not None:  # a smoke test on the CPU: a few questions
        g.TEST = a.test_file
    g.LMS = {k: a.dest / "models" / k / "fp32" for k in ("gemma", "smollm2")}
    ns = argparse.Namespace(
        work=a.work,
        b35=data,
        index=None,
        pool=data / "pool",
        train_questions=a.train_questions,
        dpr_full=data / "norquad" / SPLITS["validation"],
        dpr_questions=None,
        dpr_epochs=3.0,
    )
    ns.gemma_tower = g.LMS["gemma"]  # the same weights as `--encoder gemma3` (no package cache there)
    (a.work / "retrieved").mkdir(parents=True, exist_ok=True)
    for split in TOP:
        dst = a.work / "retrieved" / f"{split}.jsonl"
        if not dst.exists():
            dst.symlink_to(data / "retrieved" / f"{split}.jsonl")
    for cell in a.cells:
        t = time.perf_counter()
        log(f"cell {cell}")
        if cell.startswith("zs-"):
            _, key, part = cell.split("-")
            g.zero_shot(ns, key, part)
        elif cell.startswith(("ft-", "cbft-", "ftoracle-")):
            kind, key = cell.split("-")
            g.fine_tune(ns, key, closed_book=kind == "cbft", oracle=kind == "ftoracle")
        elif cell.startswith("dpr-"):
            g.dpr(ns, cell.split("-")[1])
        elif cell == "upr":
            upr(ns, g)
        log(f"cell {cell}: {time.perf_counter() - t:.0f} s")
    return 0


def upr(ns, g) -> None:
    """UPR with the RAG-fine-tuned Gemma-3: Norwegian BM25's top 20 reranked by the LM's likelihood of
    the question; recall@1 (rag k=1's R@k) against BM25's own order."""
    model = ns.work / "ft-gemma" / "model"
    for name, rerank in (("upr-bm25", 0), ("upr-ftgemma", 20)):
        d = ns.work / name
        if not g.done(d):
            g.rag_eval(
                ns,
                d,
                model,
                "--corpus",
                ns.pool,
                "--retriever",
                "bm25",
                "--rerank",
                rerank,
                "--mode",
                "rag",
                "-k",
                1,
                "--no-chat",
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prep")
    p.add_argument("--pack", type=Path, default=ROOT / "runs" / "gemma_gpu")
    p.add_argument("--b35", type=Path, default=ROOT / "runs" / "b35")
    p.add_argument(
        "--b36", type=Path, default=ROOT / "runs" / "b36gpu", help="gemma_nb.py prep's work folder"
    )
    p.add_argument(
        "--wheels", type=Path, default=ROOT / "runs" / "gpupack" / "wheels", help="gpu_pack.py prep's wheels"
    )
    p.add_argument(
        "--part-mib",
        type=float,
        default=56.0,
        help="a part's size: with the ~6.3 MiB working tree a call carries <= 64 MiB",
    )
    p = sub.add_parser("stash")
    p.add_argument("part", type=Path)
    p.add_argument("--dest", type=Path, default=Path("/tmp/gemma_gpu"))
    for name in ("start", "run"):
        p = sub.add_parser(name)
        p.add_argument("--dest", type=Path, default=Path("/tmp/gemma_gpu"))
        p.add_argument("--work", type=Path, default=Path("/tmp/gemma_gpu_work"))
        p.add_argument("--site", default="/tmp/site")
        p.add_argument("--budget", type=float, default=540.0)
        p.add_argument(
            "--groups",
            nargs="+",
            default=list(CELLS),
            choices=list(CELLS),
            help="cell groups to run (one process each); the next GPU session: dpr cbft",
        )
    p = sub.add_parser("collect")
    p.add_argument("--work", type=Path, default=Path("/tmp/gemma_gpu_work"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--wait", type=float, default=500.0)
    p = sub.add_parser("report")
    p.add_argument(
        "--run", type=Path, default=ROOT / "runs" / "b36gpu-h200", help="collect's tarball, unpacked"
    )
    p = sub.add_parser("cells")
    p.add_argument("cells", nargs="+")
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--train-questions", type=int, default=100000, help="fewer: a smoke test")
    p.add_argument("--test-file", type=Path, default=None, help="other test questions: a smoke test")
    a = ap.parse_args(argv)
    from benchmarks.rag.gemma_nb_gpu_report import cmd_report

    cmds = {
        "prep": cmd_prep,
        "stash": cmd_stash,
        "start": cmd_start,
        "run": cmd_run,
        "collect": cmd_collect,
        "cells": cmd_cells,
        "report": cmd_report,
    }
    return cmds[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
