"""Multi-process training on torch.distributed, as `torchrun` launches it.

`init_distributed()` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR...),
joins the process group (NCCL on GPU, gloo on CPU) and returns a `Dist` that the trainers pass
around; without torchrun it returns the single-process `Dist` and nothing else happens, so the
same code runs everywhere. Multi-node runs use torchrun's usual rendezvous flags; nothing here
launches processes or implements a collective.

Fault handling: collectives time out after `timeout_s` instead of torch's 30 minutes, and a rank
that torchrun stops because another rank failed prints one line saying so before exiting.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as tdist

from ralm.errors import RalmError

__all__ = ["Dist", "init_distributed", "job", "peer_failure_message", "torchrun_command", "without_nproc"]


@dataclass
class Dist:
    """This process's place in the job. Single process: rank 0 of 1, every collective a no-op."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            tdist.barrier()

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of a list of numbers over ranks (float64 on the CPU/GPU of the group)."""
        if not self.enabled:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._coll_device)
        tdist.all_reduce(t)
        return t.tolist()

    def broadcast_object(self, obj):
        """Rank 0's `obj` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        tdist.broadcast_object_list(box, src=0, device=self._coll_device)
        return box[0]

    def on_main(self, fn: Callable[[], Any]) -> Any:
        """Run `fn()` on rank 0 only; its value, or its RalmError as the same one line, on every rank."""
        got: tuple = ("ok", None)
        if self.is_main:
            try:
                got = ("ok", fn())
            except RalmError as exc:
                got = ("error", str(exc))
        status, value = self.broadcast_object(got)
        if status == "error":
            raise RalmError(value)
        return value

    def together(self, fn: Callable[[], Any]) -> Any:
        """Run `fn()` on every rank; its value here, or the first rank's RalmError (as
        "rank R: ...") on every rank, so no rank is left waiting in the next collective."""
        got, error = None, None
        try:
            got = fn()
        except RalmError as exc:
            error = f"rank {self.rank}: {exc}" if self.enabled else str(exc)
        if not self.enabled:
            if error is not None:
                raise RalmError(error)
            return got
        errors: list = [None] * self.world
        tdist.all_gather_object(errors, error)
        first = next((e for e in errors if e), None)
        if first is not None:
            raise RalmError(first)
        return got

    def wrap(self, model: torch.nn.Module, *, find_unused_parameters: bool = False) -> torch.nn.Module:
        """`model` in DistributedDataParallel when the job has several processes, else `model` itself."""
        if not self.enabled:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(model, device_ids=ids, find_unused_parameters=find_unused_parameters)

    def share(self, n: int) -> tuple[int, int]:
        """[start, stop) of this rank's contiguous share of n items (the first ranks take the remainder)."""
        base, extra = divmod(n, self.world)
        start = self.rank * base + min(self.rank, extra)
        return start, start + base + (1 if self.rank < extra else 0)

    @property
    def _coll_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    def close(self) -> None:
        if self.enabled and tdist.is_initialized():
            tdist.destroy_process_group()


PEER_FAILURE_SIGNS = (
    "gloo",
    "nccl",
    "connection reset",
    "connection closed",
    "broken pipe",
    "timed out",
    "socket",
)


def peer_failure_message(dist: Dist, exc: BaseException) -> str | None:
    """One line for an error that means another rank died or hung (a collective broke), else None."""
    if not dist.enabled:
        return None
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, getattr(tdist, "DistError", ())) or any(s in text.lower() for s in PEER_FAILURE_SIGNS):
        _STATE["reported"] = True  # the launcher's SIGTERM that may follow need not say it again
        return (
            f"rank {dist.rank}: lost another process of the job ({text[:160]}); it failed or was killed, "
            "see its error above. Resume with --resume."
        )
    return None


@contextmanager
def job(dist: Dist) -> Iterator[Dist]:
    """The body of a distributed command: a broken collective (another rank died or hung) becomes
    `peer_failure_message`'s one-line RalmError, and the process group is closed at the end."""
    try:
        yield dist
    except RuntimeError as exc:
        msg = peer_failure_message(dist, exc)
        if msg is None:
            raise
        raise RalmError(msg) from None
    finally:
        dist.close()


_STATE = {"reported": False}


def _on_sigterm(rank: int):
    def handler(signum, frame):  # torchrun stops the others when one rank fails
        if _STATE["reported"]:
            os._exit(1)
        print(
            f"ralm: rank {rank} stopped by the launcher (signal {signum}): another process of the job "
            "failed or was killed; see its error above. Resume with --resume.",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)

    return handler


def init_distributed(device: str = "auto", timeout_s: float = 600.0) -> Dist:
    """Join the torchrun job if there is one; returns this process's `Dist` (see the module docstring)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if world <= 1:
        dev = torch.device(device)
        return Dist(0, 1, 0, dev)
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        backend = "nccl"
    else:
        dev = torch.device("cpu")
        backend = "gloo"
    if not tdist.is_initialized():
        tdist.init_process_group(backend=backend, timeout=dt.timedelta(seconds=timeout_s))
    signal.signal(signal.SIGTERM, _on_sigterm(rank))
    return Dist(rank, world, local, dev)


def torchrun_command(nproc: int, argv: list[str]) -> list[str]:
    """The torchrun command line that runs `ralm ARGV...` in `nproc` local processes."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        "-m",
        "ralm",
        *argv,
    ]


def without_nproc(argv: list[str]) -> list[str]:
    """`argv` less `--nproc N` / `--nproc=N`: what each torchrun worker is started with."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out
