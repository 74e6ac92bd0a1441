"""Where the event engine's calls wait for a slot: the earliest turn in virtual time first.

The event engine keeps every turn that can run in flight, and at most
``concurrency`` of their calls open at once. The others wait, and which one
gets the next free slot decides how soon the kernel can go on: the kernel
waits for the turn in flight that resolves first, so a slot goes to the
waiting call whose turn woke earliest (then the one submitted first). A
first-in-first-out queue would hand it to whatever was submitted first,
such as a turn started early for much later. Only the wall clock depends on
this order: the run's results never do.

:class:`PriorityPool` is that queue in front of worker threads (mode
``threads``), :class:`PriorityGate` the same on an event loop (mode
``asyncio``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import heapq
import itertools
import math
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

__all__ = ["PriorityGate", "PriorityPool"]

#: The priority of work with none of its own (a scenario's interviews, which the
#: kernel waits for at once): ahead of every turn.
FIRST = -math.inf


class PriorityPool(cf.Executor):
    """Up to *workers* threads running the submitted calls, the lowest priority first.

    Threads start as work arrives (as in ``ThreadPoolExecutor``) and stay
    until :meth:`shutdown`.
    """

    def __init__(self, workers: int, name: str) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._workers = workers
        self._name = name
        self._heap: list[tuple[Any, int, cf.Future[Any], Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        #: Threads waiting for work that no submit has claimed yet.
        self._idle = 0
        self._closed = False

    def submit_at(self, priority: Any, fn: Callable[..., Any], /, *args: Any) -> cf.Future[Any]:
        """Run ``fn(*args)`` once no work of a lower *priority* waits; its future."""
        future: cf.Future[Any] = cf.Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("cannot submit work to a pool that was shut down")
            heapq.heappush(self._heap, (priority, next(self._seq), future, fn, args))
            if self._idle:
                # Claim an idle thread now: the next submit, before it wakes, must
                # not count it again, or a burst runs on fewer threads than it may.
                self._idle -= 1
                self._cond.notify()
            elif len(self._threads) < self._workers:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self._name}_{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
        return future

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        """``concurrent.futures.Executor.submit``: ahead of every turn."""
        if kwargs:
            return self.submit_at(FIRST, lambda: fn(*args, **kwargs))
        return self.submit_at(FIRST, fn, *args)

    def _work(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._heap and not self._closed:
                    self._idle += 1  # the submit that wakes it takes it off
                    cond.wait()
                if not self._heap:
                    return
                _, _, future, fn, args = heapq.heappop(self._heap)
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:  # the caller's future holds it
                    future.set_exception(exc)
                else:
                    future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._cond:
            self._closed = True
            if cancel_futures:
                for item in self._heap:
                    item[2].cancel()
                self._heap.clear()
            self._cond.notify_all()
        if wait:
            for thread in self._threads:
                thread.join()


class PriorityGate:
    """At most *slots* holders at once on one event loop; a freed slot goes to the lowest priority.

    Made and used on the loop's thread only.
    """

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiting: list[tuple[Any, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    async def acquire(self, priority: Any) -> None:
        """Wait for a slot; :meth:`release` it once done."""
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._seq), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # granted, then cancelled before it could run: pass it on
            raise

    @contextlib.asynccontextmanager
    async def slot(self, priority: Any) -> AsyncIterator[None]:
        """Hold a slot (:meth:`acquire` at *priority*) for the block, then release it."""
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()

    def release(self) -> None:
        """Give the slot to the waiter of the lowest priority, or free it."""
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():
                granted.set_result(None)
                return
        self._free += 1
