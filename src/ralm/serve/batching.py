"""Dynamic batching: concurrent requests that reach the same model run as one batch.

Each model of a TARGET (the REALM run or index encoder: dense/hybrid search and fill; BM25) has
one `ModelQueue`: a FIFO of waiting requests and one worker task on the event loop. The worker
takes the oldest request, gathers the waiting requests of the same kind (`key`: operation and
parameters such as k) up to `max_batch`, waiting at most `max_wait_ms` after the oldest arrived
for more, and runs the batch function once in a worker thread; each request gets its own answer.
While a batch runs, new requests queue up, so under load batches fill by themselves and a lone
request waits for nothing (`max_wait_ms` 0, the default; see benchmarks/serve/serve_load.py).

    queue = ModelQueue("model", BatchConfig())
    answer = await queue.submit(("search", 10), run_searches, "fjords", gone=lambda: disconnect(request))

Rules: a request whose client goes away (disconnects, times out) while it waits is taken out
of the queue and never runs (`gone()` gives an awaitable that finishes on disconnect); when
`max_queue` requests already wait, `submit` raises `Overloaded` (HTTP 503 with Retry-After);
if a batch function raises for the batch, each request is run alone, so one bad request gets its
own error and the others their answers. `max_batch=1` turns batching off (one request at a
time, in arrival order: the server before batching). Per batch, the size, the oldest request's
wait and the run time go to the `ralm.serve` log at debug level.
Left out: batching across models (a request never waits on another model's queue), priorities,
and continuous batching inside generation (SUREALM generation keeps its own lock, unbatched).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from ralm.errors import RalmError

__all__ = ["BatchConfig", "ClientGone", "ModelQueue", "Overloaded"]

logger = logging.getLogger("ralm.serve")

BatchFn = Callable[[Sequence[Any]], Sequence[Any]]  # payloads -> one answer (or exception) each


@dataclass(frozen=True)
class BatchConfig:
    """How requests are batched per model (`ralm serve --max-batch/--max-wait-ms/--max-queue`)."""

    max_batch: int = 32  # requests per batch; 1 = no batching (benchmarks/serve/serve_load.py: 32 clients)
    # fills per batch; None: 4 on a CPU (a fill is compute-bound there: a batch of 2-4 costs the
    # same per fill as one alone, of 16 9% more, and every fill of a batch waits for the last;
    # benchmarks/serve/serve_batch_cost.py; under load 4 and 1 measure alike), max_batch on a GPU
    max_fill_batch: int | None = None
    max_wait_ms: float = 0.0  # wait after the oldest request for more; 0: take what is queued
    max_queue: int = 256  # waiting requests per model; beyond it: 503 with Retry-After

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise RalmError(f"--max-batch {self.max_batch}: must be >= 1 (1 turns batching off)")
        if self.max_fill_batch is not None and self.max_fill_batch < 1:
            raise RalmError(f"--max-fill-batch {self.max_fill_batch}: must be >= 1")
        if not (self.max_wait_ms >= 0 and math.isfinite(self.max_wait_ms)):
            raise RalmError(f"--max-wait-ms {self.max_wait_ms}: must be a number >= 0")
        if self.max_queue < 1:
            raise RalmError(f"--max-queue {self.max_queue}: must be >= 1")

    @property
    def enabled(self) -> bool:
        return self.max_batch > 1

    def fill_batch(self, device: str) -> int:
        """The fills per batch on `device` (see max_fill_batch), never more than max_batch."""
        cap = (
            self.max_fill_batch
            if self.max_fill_batch is not None
            else 4
            if device == "cpu"
            else self.max_batch
        )
        return min(cap, self.max_batch)


class Overloaded(RalmError):
    """The model's queue is full: answered with 503 and a Retry-After header."""

    status = 503

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


class ClientGone(RalmError):
    """The client left before its request ran (nothing is sent back; 499 in the server's terms)."""

    status = 499


@dataclass(eq=False)
class _Item:
    key: Hashable
    fn: BatchFn
    payload: Any
    future: asyncio.Future
    cap: int
    queued: float = field(default_factory=time.perf_counter)


class ModelQueue:
    """One model's queue of requests and the worker that runs them in batches (see the module)."""

    def __init__(self, name: str, config: BatchConfig) -> None:
        self.name = name
        self.config = config
        self._items: deque[_Item] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self.running = 0  # requests in the batch now running
        self.batches = 0  # batches run so far
        self.requests = 0  # requests run so far (in batches)
        self.dropped = 0  # requests taken out of the queue because their client left
        self.rejected = 0  # requests answered 503
        self.sizes: Counter[int] = Counter()  # batch size -> batches of that size
        self._batch_seconds = 0.0  # run time of the batches, summed (for Retry-After)

    @property
    def waiting(self) -> int:
        return len(self._items)

    def stats(self) -> dict[str, Any]:
        """What /api/info reports for this queue."""
        return {
            "waiting": self.waiting,
            "running": self.running,
            "batches": self.batches,
            "requests": self.requests,
            "dropped": self.dropped,
            "rejected": self.rejected,
            "batch_sizes": {str(s): n for s, n in sorted(self.sizes.items())},
        }

    async def submit(
        self,
        key: Hashable,
        fn: BatchFn,
        payload: Any,
        gone: Callable[[], Awaitable] | None = None,
        max_batch: int | None = None,
    ) -> Any:
        """Queue `payload` for `fn` (batched with waiting payloads of the same `key`, at most
        `max_batch` of them, default the config's) and return its answer. Raises Overloaded when
        the queue is full, ClientGone when `gone()` finishes first (the request is then out of the
        queue), and whatever `fn` raised for this payload."""
        if len(self._items) >= self.config.max_queue:
            self.rejected += 1
            raise Overloaded(
                f"the {self.name} queue is full ({self.config.max_queue} requests waiting); retry shortly",
                self._retry_after(),
            )
        loop = asyncio.get_running_loop()
        cap = self.config.max_batch if max_batch is None else min(max_batch, self.config.max_batch)
        item = _Item(key, fn, payload, loop.create_future(), cap)
        self._items.append(item)
        self._start(loop)
        watcher = asyncio.ensure_future(gone()) if gone is not None else None
        try:
            if watcher is None:
                return await item.future
            await asyncio.wait({item.future, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if item.future.done():
                return item.future.result()
            raise ClientGone("the client went away before its request ran")
        finally:
            if watcher is not None:
                watcher.cancel()
            if not item.future.done():  # client gone or this task cancelled: leave no work behind
                item.future.cancel()
                try:
                    self._items.remove(item)
                    self.dropped += 1
                except ValueError:
                    pass  # already taken into a running batch; its answer is dropped

    def _retry_after(self) -> int:
        """Seconds until the queue has likely drained: waiting batches x mean batch time (>= 1)."""
        mean = self._batch_seconds / self.batches if self.batches else 1.0
        return max(1, math.ceil(math.ceil(self.waiting / self.config.max_batch) * mean))

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:  # first use, or a new event loop (a TestClient makes one per request)
            self._loop, self._wake, self._worker = loop, asyncio.Event(), None
        assert self._wake is not None
        self._wake.set()
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run(), name=f"ralm-batch-{self.name}")

    def _same_key(self, key: Hashable) -> int:
        return sum(1 for it in self._items if it.key == key)

    async def _run(self) -> None:
        assert self._wake is not None
        cfg = self.config
        while True:
            if not self._items:
                self._wake.clear()
                await self._wake.wait()
                continue
            first = self._items[0]
            deadline = first.queued + cfg.max_wait_ms / 1000
            while self._items and self._same_key(first.key) < first.cap:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except TimeoutError:
                    break
            if first not in self._items:
                continue  # the oldest request left while we waited: start over from the new oldest
            batch = [it for it in self._items if it.key == first.key][: first.cap]
            for it in batch:
                self._items.remove(it)
            await self._run_batch(batch)

    async def _run_batch(self, batch: list[_Item]) -> None:
        start = time.perf_counter()
        self.running = len(batch)
        try:
            answers = await anyio.to_thread.run_sync(_answers, batch[0].fn, [it.payload for it in batch])
        except BaseException as exc:  # the worker itself was cancelled (server shutdown)
            for it in batch:
                if not it.future.done():
                    it.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            raise
        finally:
            self.running = 0
        took = time.perf_counter() - start
        self.batches += 1
        self.requests += len(batch)
        self.sizes[len(batch)] += 1
        self._batch_seconds += took
        logger.debug(
            "batch %s %s: %d requests, oldest waited %.1f ms, ran %.1f ms",
            self.name,
            batch[0].key,
            len(batch),
            1000 * (start - batch[0].queued),
            1000 * took,
        )
        for it, answer in zip(batch, answers, strict=True):
            if it.future.done():  # its client left while the batch ran
                continue
            if isinstance(answer, BaseException):
                it.future.set_exception(answer)
            else:
                it.future.set_result(answer)


def _answers(fn: BatchFn, payloads: list[Any]) -> list[Any]:
    """fn(payloads), or, when that raises, fn([p]) for each payload alone: an answer or an exception each."""
    try:
        out = list(fn(payloads))
        if len(out) != len(payloads):
            raise RuntimeError(f"a batch function gave {len(out)} answers for {len(payloads)} requests")
        return out
    except Exception as exc:
        if len(payloads) == 1:
            return [exc]
    answers: list[Any] = []
    for p in payloads:
        try:
            answers.append(fn([p])[0])
        except Exception as exc:  # this request's own error
            answers.append(exc)
    return answers
