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
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

__all__ = ["PriorityGate", "PriorityPool"]

#: The priority of work with none of its own (a scenario's interviews, which the
#: kernel waits for at once): ahead of every turn.
FIRST = -math.inf


#: A piece of a pool's work: (priority, submission number, future, function, arguments).
_Work = tuple[Any, int, "cf.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class PriorityPool(cf.Executor):
    """Up to *workers* threads running the submitted calls, the lowest priority first.

    Threads start as work arrives (as in ``ThreadPoolExecutor``) and stay
    until :meth:`shutdown`.

    The submitting thread (the engine's kernel) never waits: it takes no lock
    that the workers hold and starts no thread itself. A submit puts the work
    and a token on two ``queue.SimpleQueue`` objects, which never block a
    ``put``; a worker takes a token, moves the submitted work into the heap
    (under a lock only the workers share) and runs the lowest there. There is
    one token per piece of work, so no work waits in the heap while a worker
    sleeps. New threads are started by a spawner thread of the pool's own: a
    ``Thread.start`` waits until the new thread runs, which under a busy GIL
    took the kernel about 10 ms a thread (about 5 s of a 1,000-agent run's 30).
    """

    def __init__(self, workers: int, name: str) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._workers = workers
        self._name = name
        #: Submitted work not yet in the heap, and one token a piece (None: a worker's exit).
        self._inbox: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._tokens: queue.SimpleQueue[bool | None] = queue.SimpleQueue()
        #: Work moved from the inbox, the lowest priority first (the workers' lock).
        self._heap: list[_Work] = []
        self._lock = threading.Lock()
        self._seq = itertools.count()
        #: Work submitted and work finished (the kernel reads the second without a lock:
        #: a stale count can only start a thread more, never one fewer).
        self._submitted = 0
        self._finished = itertools.count()
        self._done = 0
        #: Threads asked for (the submitter's count), and the spawner's queue and thread.
        self._asked = 0
        self._spawn: queue.SimpleQueue[bool | None] = queue.SimpleQueue()
        self._spawner: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._closed = False
        #: Taken by submitters only (the kernel's one thread, uncontended): two threads
        #: submitting at once count right.
        self._submitting = threading.Lock()

    def submit_at(self, priority: Any, fn: Callable[..., Any], /, *args: Any) -> cf.Future[Any]:
        """Run ``fn(*args)`` once no work of a lower *priority* waits; its future."""
        if self._closed:
            raise RuntimeError("cannot submit work to a pool that was shut down")
        future: cf.Future[Any] = cf.Future()
        self._inbox.put((priority, next(self._seq), future, fn, args))
        self._tokens.put(True)
        with self._submitting:
            self._submitted += 1
            # Work not finished beyond the threads asked for: one more, up to *workers*.
            if self._asked < self._workers and self._submitted - self._done > self._asked:
                self._asked += 1
                if self._spawner is None:
                    self._spawner = threading.Thread(target=self._spawning, daemon=True,
                                                     name=f"{self._name}_spawner")
                    self._spawner.start()
                self._spawn.put(True)
        return future

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        """``concurrent.futures.Executor.submit``: ahead of every turn."""
        if kwargs:
            return self.submit_at(FIRST, lambda: fn(*args, **kwargs))
        return self.submit_at(FIRST, fn, *args)

    def _spawning(self) -> None:
        while self._spawn.get():
            thread = threading.Thread(target=self._work, daemon=True,
                                      name=f"{self._name}_{len(self._threads)}")
            self._threads.append(thread)
            thread.start()

    def _take(self) -> _Work | None:
        """The lowest work submitted so far, or None (it was cancelled at shutdown)."""
        with self._lock:
            heap = self._heap
            while True:
                try:
                    heapq.heappush(heap, self._inbox.get_nowait())
                except queue.Empty:
                    break
            return heapq.heappop(heap) if heap else None

    def _work(self) -> None:
        while self._tokens.get():
            work = self._take()
            if work is None:
                continue
            _, _, future, fn, args = work
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:  # the caller's future holds it
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            self._done = next(self._finished) + 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._closed:
            return
        self._closed = True
        if cancel_futures:
            with self._lock:
                while True:
                    try:
                        self._heap.append(self._inbox.get_nowait())
                    except queue.Empty:
                        break
                for item in self._heap:
                    item[2].cancel()
                self._heap.clear()
        with self._submitting:
            spawner = self._spawner
        if spawner is not None:
            self._spawn.put(None)
            spawner.join()  # every thread asked for has started
        for _ in self._threads:
            self._tokens.put(None)  # after every piece of work's token: the work runs first
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
