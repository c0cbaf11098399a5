"""Precision and mode helpers shared by every model in ralm: bf16 autocast where it pays, eval mode.

`autocast_dtype(device, "auto", param_dtype)` picks bf16 on CUDA GPUs that have it and on CPUs
whose bf16 matrix products are measurably faster than float32 (timed once per process), else
None (float32); `autocast_context` enters it; `eval_on` runs a module in eval mode, optionally on
another device, and puts everything back.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from ralm.errors import RalmError

__all__ = [
    "BATCH_ROWS",
    "autocast_context",
    "autocast_dtype",
    "cpu_bf16_is_faster",
    "cpu_has_native_bf16",
    "eval_on",
]


def cpu_has_native_bf16() -> bool:
    """True when the CPU has bf16 matrix instructions (AVX512_BF16 or AMX-BF16).

    `torch.backends.cpu.get_cpu_capability()` only says "AVX512" (Skylake has that too, and
    emulates bf16 slowly), so this reads the Linux /proc/cpuinfo flags; elsewhere it is False.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


_BF16_FASTER: dict[str, bool] = {}
# the shapes autocast "auto" times: full products, one-row ones (decoding one prompt), and 32-row
# ones (decoding a batch of prompts)
WORK_SHAPES = {  # (rows, n, m, reps) of the products timed for each kind of work
    "matmul": (512, 512, 512, 4),
    "decode": (1, 1024, 1024, 64),
    "batch": (32, 1024, 1024, 16),
}
WORKS = tuple(WORK_SHAPES)
BATCH_ROWS = 8  # a decoding batch of at least this many rows is timed as "batch", a smaller one as "decode"


def cpu_bf16_is_faster(work: str = "matmul") -> bool:
    """Whether bf16 matrix products run faster than float32 on this CPU, timed once per process
    and per kind of work: "matmul" (512 x 512 by 512 x 512: training, scoring, encoding),
    "decode" (one row by 1024 x 1024: a decoding step, which streams the weights once a token) or
    "batch" (32 rows by 1024 x 1024: a decoding step of a batch of prompts).

    The flags are not enough: with AVX512_BF16 a Zen 5 multiplies in bf16 ~3.9x faster than in
    fp32, while a Xeon with the same flag measured 0.5x here (torch 2.13, 2 threads). So "auto"
    times the work's product in both dtypes (well under a second, best of 3) on CPUs with the flag,
    and takes bf16 only when it is at least 1.2x faster. The two kinds disagree on some CPUs: on an
    AVX512_BF16 EPYC, Gemma-3-270M answered a 350-token prompt in 6.34 s under bf16 autocast and in
    3.43 s in float32 (issue 66), so generation asks about "decode" alone. On a Xeon with AMX the
    same flags gave bf16 75x at 512 x 512, 4.5x at 32 rows and 0.3x at one row: a batch of prompts
    decodes faster in bf16, one prompt slower ("batch" against "decode").

    The environment variable RALM_CPU_BF16 decides instead when set: "off" (never bf16 on a CPU
    under "auto", e.g. for results that must not depend on the machine: the test suite sets it) or
    "on" (bf16 wherever the CPU has the instructions).
    """
    import os

    forced = os.environ.get("RALM_CPU_BF16", "").strip().lower()
    if forced in ("off", "0", "false"):
        return False
    if forced in ("on", "1", "true"):
        return cpu_has_native_bf16()
    if work not in WORKS:
        raise RalmError(f"work {work!r}: choose one of {', '.join(WORKS)}")
    if work not in _BF16_FASTER:
        _BF16_FASTER[work] = (
            cpu_has_native_bf16() and _matmul_speedup(torch.bfloat16, *WORK_SHAPES[work]) >= 1.2
        )
    return _BF16_FASTER[work]


def _matmul_speedup(dtype: torch.dtype, rows: int = 512, n: int = 512, m: int = 512, reps: int = 4) -> float:
    """fp32 time / `dtype` time of `reps` products (rows x n) @ (n x m), best of 3 each."""
    import time

    gen = torch.Generator().manual_seed(0)  # its own generator: the probe must not move a seeded run's RNG
    a32, b32 = torch.randn(rows, n, generator=gen), torch.randn(n, m, generator=gen)
    a, b = a32.to(dtype), b32.to(dtype)

    def best(x, y) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                x @ y
            times.append(time.perf_counter() - t0)
        return min(times)

    best(a, b)  # warm-up (kernel selection)
    return best(a32, b32) / max(best(a, b), 1e-9)


def autocast_dtype(
    device: torch.device, autocast: str | bool | None, param_dtype: torch.dtype, work: str = "matmul"
) -> torch.dtype | None:
    """The autocast dtype to run under: "auto" -> bf16 on CUDA with bf16 / CPUs where bf16 products
    of the `work`'s shape are faster than fp32 (`cpu_bf16_is_faster(work)`).

    autocast: "auto" | "bf16" ("bfloat16", True) | "off" ("none", None, False). A model whose
    weights are already half precision runs as it is (None).
    """
    a = (
        {None: "off", False: "off", True: "bf16"}[autocast]
        if autocast in (None, False, True)
        else str(autocast)
    )
    a = a.lower()
    if a in ("off", "none", "false", "fp32", "float32"):
        return None
    if a not in ("auto", "bf16", "bfloat16"):
        raise RalmError(f"autocast {autocast!r}: choose auto, bf16 or off")
    if param_dtype != torch.float32:
        return None
    if a == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
        return torch.bfloat16 if device.type == "cpu" and cpu_bf16_is_faster(work) else None
    return torch.bfloat16


def autocast_context(device: torch.device, dtype: torch.dtype | None):
    """torch.autocast for `device` at `dtype`, or a no-op context when dtype is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def eval_on(module: nn.Module, device: torch.device | None):
    """Run `module` in eval mode (on `device` if given); restore each submodule's mode and the device."""
    modes = [(m, m.training) for m in module.modules()]
    old = next(module.parameters()).device
    module.eval()
    if device is not None and device != old:
        module.to(device)
    try:
        yield
    finally:
        if device is not None and device != old:
            module.to(old)
        for m, training in modes:
            m.training = training
