"""Shared by the benchmark scripts: paths, the machine description, the rerun command, settings
picked off parsed flags, the result file writer, the progress line and the `ralm` command.

The scripts live in one folder per area (benchmarks/AREA/NAME.py) of the `benchmarks` package and
run from the repository root as `python -m benchmarks.AREA.NAME`; they import this module as
`benchmarks.common` and each other as `benchmarks.AREA.NAME`. Every benchmark writes
benchmarks/results/NAME.json with `command` (how to rerun it: `script_command`), `machine`, `date`,
`metrics` (plain numbers) and `targets` (the issue's bar for each metric).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ralm.atomic import write_json_atomic

BENCH = Path(__file__).resolve().parent  # benchmarks/
ROOT = BENCH.parent  # the repository
# RALM_RESULTS_DIR: write elsewhere (gpu_pack.py's stages keep their scripts' files in scratch folders)
RESULTS = Path(os.environ.get("RALM_RESULTS_DIR") or BENCH / "results")
# Hugging Face without the network, tokenizers without their thread pool (`offline`)
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def offline() -> None:
    """Set OFFLINE in this process's environment where it is not set already. Call it before anything
    imports transformers or huggingface_hub: they read it once, on import."""
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)


def machine() -> str:
    """CPU model, core count, Python version and OS, e.g. 'AMD EPYC ..., 2 cores, Python 3.11.7, Linux'."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def script_target(file: str | os.PathLike) -> list[str]:
    """What follows `python` to run a script: ['-m', 'benchmarks.realm.realm_step'] for its __file__
    (run from the repository root, where `benchmarks` is importable); a file outside the repository:
    [its path]."""
    path = Path(file).resolve()
    try:
        rel = path.relative_to(ROOT)
    except ValueError:  # not under the repository
        return [str(path)]
    return ["-m", ".".join(rel.with_suffix("").parts)]


def script_argv(file: str | os.PathLike) -> list[str]:
    """How to start a script in a child process with this interpreter: [python, '-m', MODULE]."""
    return [sys.executable, *script_target(file)]


def script_command(
    file: str | os.PathLike, args: str | Sequence[str] | None = None, python: str = "python"
) -> str:
    """The command that reruns a script: 'python -m benchmarks.AREA.NAME ARGS' (default args: this
    process's sys.argv[1:]; a string is taken as written)."""
    if args is None:
        args = sys.argv[1:]
    rest = (args if isinstance(args, str) else " ".join(args)).strip()
    return " ".join(x for x in (python, *script_target(file), rest) if x)


def read_json(path: str | os.PathLike) -> dict:
    """A JSON file's content (UTF-8)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def pick(source: object, *names: str, **renamed: str) -> dict[str, Any]:
    """Keyword arguments read off `source` (parsed flags, a config): NAME=source.NAME for each of
    `names`, KEY=source.ATTR for each KEY="ATTR" of `renamed`. E.g. pick(args, "k", "lr",
    seed="world_seed") == {"k": args.k, "lr": args.lr, "seed": args.world_seed}."""
    return {**{n: getattr(source, n) for n in names}, **{k: getattr(source, a) for k, a in renamed.items()}}


def write_result(name: str, command: str, metrics: dict, targets: dict, **extra) -> dict:
    """Write benchmarks/results/NAME.json atomically and return what was written."""
    result = {
        "command": command,
        "machine": machine(),
        "date": dt.date.today().isoformat(),
        "metrics": metrics,
        "targets": targets,
        **extra,
    }
    write_json_atomic(RESULTS / f"{name}.json", result)
    return result


def logger(
    tag: str = "", *, stdout: bool = False, clock: bool = True, since: float | None = None
) -> Callable[[str], None]:
    """A progress-line printer: '[20:41:07] msg', '[TAG 20:41:07] msg' with a tag, '[TAG] msg' with
    clock=False, '[TAG   12.3s] msg' with `since` (a time.perf_counter() reading: the seconds since);
    on stderr, or on stdout with stdout=True; flushed at once."""
    head = [tag] if tag else []

    def log(msg: str) -> None:
        if since is not None:
            stamp = " ".join([*head, f"{time.perf_counter() - since:7.1f}s"])
        else:
            stamp = " ".join([*head, time.strftime("%H:%M:%S")] if clock else head)
        print(f"[{stamp}] {msg}", file=sys.stdout if stdout else sys.stderr, flush=True)

    return log


log = logger()  # '[20:41:07] msg' on stderr


def ralm(
    *args: object,
    env: Mapping[str, str] | None = None,
    output: str | os.PathLike | None = None,
    say: Callable[[str], None] | None = log,
) -> None:
    """Run `ralm ARGS...` with this interpreter, as a user would from the shell; fails on a non-zero
    exit (CalledProcessError). `env`: variables added to this process's environment; `output`: a file
    its stdout and stderr are appended to (os.devnull: dropped), else they are this process's; `say`
    is handed 'ralm ARGS' first (None: nothing said)."""
    argv = [str(a) for a in args]
    if say is not None:
        say("ralm " + " ".join(argv))
    cmd = [sys.executable, "-m", "ralm", *argv]
    full = None if env is None else {**os.environ, **env}
    if output is None:
        subprocess.run(cmd, check=True, env=full)
        return
    with open(output, "a", encoding="utf-8") as f:
        subprocess.run(cmd, check=True, env=full, stdout=f, stderr=subprocess.STDOUT)


def ralm_stdout(*args: object, env: Mapping[str, str] | None = None) -> str:
    """What `ralm ARGS` (run with this interpreter, `env` added to this process's environment) prints
    on stdout; its stderr is dropped; fails on a non-zero exit."""
    cmd = [sys.executable, "-m", "ralm", *[str(a) for a in args]]
    full = None if env is None else {**os.environ, **env}
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=full).stdout


def sample_store(path: str | os.PathLike, *flags: object) -> Path:
    """The English Wikipedia sample as a DocStore at `path` (`ralm corpus build --sample enwiki --out
    PATH FLAGS...`, nothing said first), built unless one is there; returns the path."""
    path = Path(path)
    if not (path / "manifest.json").is_file():
        ralm("corpus", "build", "--sample", "enwiki", "--out", path, *flags, say=None)
    return path


def tiny_bert(out: str | os.PathLike, **sizes: int) -> Path:
    """A random BERT (seed 0) on the bundled MiniLM's vocabulary, with its tokenizer files, at `out`
    (made once): 2 layers of hidden 64 (tests/conftest.py's), or the BertConfig `sizes` given."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    from ralm.models.names import default_backbone_path

    out = Path(out)
    if (out / "config.json").is_file():
        return out
    torch.manual_seed(0)
    shape = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "max_position_embeddings": 256,
    }
    BertModel(BertConfig(vocab_size=30522, **{**shape, **sizes}), add_pooling_layer=False).save_pretrained(
        out
    )
    src = default_backbone_path()
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / f, out / f)
    return out


def ralm_logged(
    args: Sequence[object],
    log_file: str | os.PathLike,
    *,
    on_line: Callable[[str], None] | None = None,
    program: Sequence[str] | None = None,
) -> float:
    """Run `ralm ARGS` with OFFLINE in its environment, its output appended to `log_file` after a line
    '$ ralm ARGS' (and each line handed to `on_line` as it comes, where one is given); returns its wall
    seconds. A non-zero exit ends this process (SystemExit naming the log). `program`: what to run
    instead of `python -m ralm` with this interpreter (e.g. a virtual environment's `ralm`)."""
    argv = [str(a) for a in args]
    cmd = [*(program or [sys.executable, "-m", "ralm"]), *argv]
    env = {**os.environ, **OFFLINE}
    t0 = time.perf_counter()
    with open(log_file, "a", encoding="utf-8") as f:
        f.write(f"\n$ ralm {' '.join(argv)}\n")
        f.flush()
        if on_line is None:
            rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
        else:
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert p.stdout is not None
            for line in p.stdout:
                f.write(line)
                f.flush()
                on_line(line)
            rc = p.wait()
    if rc:
        raise SystemExit(f"ralm {' '.join(argv[:2])} failed (exit {rc}); see {log_file}")
    return time.perf_counter() - t0
