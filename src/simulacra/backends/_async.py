"""AsyncBackend: ``async def`` actions whose awaits overlap, with results in id order.

Bifurcated, as LLM-heavy models need: the *waiting* of a phase (HTTP calls to a
model server, sleeps, any awaited I/O) happens concurrently, bounded by a
semaphore, while everything that decides the result happens in a fixed order:

* every action touches only its own agent and its own outbox (the
  no-write-sharing rule: agents reach each other only through messages), so
  the order in which coroutines finish cannot change any agent's state;
* each agent's outbox is its own list; the outboxes are joined in agent id
  order when the phase ends, so messages come out in the total order
  ``(phase, sender, seq)`` whatever the completion order;
* ``ctx.rng`` is the agent's stream for ``(seed, agent, step, phase)``, as on
  every backend, so draws do not depend on interleaving;
* when actions fail, the error raised is that of the lowest agent id.

The coroutines run on one asyncio event loop on a private thread, so the
backend works the same when the model is run from plain synchronous code and
from inside a running event loop (a notebook, an async web handler): the
calling thread only waits for the phase to finish.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar, final

from simulacra.agents import Entry, Phase
from simulacra.errors import ConfigError

from ._local import _PopulationBackend

__all__ = ["AsyncBackend"]

_T = TypeVar("_T")

#: Seconds close() waits for the loop thread to stop.
_JOIN_S = 5.0


@final
class _LoopThread:
    """An asyncio event loop running forever on a daemon thread of its own."""

    __slots__ = ("_loop", "_thread")

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="simulacra-async-backend",
                                        daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run *coroutine* on the loop; block this thread until it is done."""
        if threading.current_thread() is self._thread:  # pragma: no cover (a misuse)
            coroutine.close()
            raise ConfigError("AsyncBackend cannot be driven from inside one of its own actions")
        future: cf.Future[_T] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result()

    def stop(self) -> None:
        """Stop the loop, join the thread and close the loop."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_JOIN_S)
        if not self._thread.is_alive():
            self._loop.close()


@final
class AsyncBackend(_PopulationBackend):
    """Runs each phase's actions as tasks on one event loop, awaits overlapping.

    A phase action may be an ``async def`` (``async def act(self, ctx)``):
    every eligible agent's coroutine becomes a task, at most
    *semaphore_limit* of them in flight at once, and their awaits overlap.
    Plain actions run too, one after another, in id order. Results -- agent
    states, messages, their order, digests -- are identical to
    :class:`LocalBackend`'s (which runs each coroutine to its end before the
    next agent starts): see the module docstring for why.

    Args:
        semaphore_limit: How many agents' coroutines may be in flight at
            once (an int >= 1); e.g. the concurrency an LLM server allows.

    Raises:
        ConfigError: *semaphore_limit* is not an int >= 1.
    """

    name = "async"

    def __init__(self, semaphore_limit: int = 128) -> None:
        given: object = semaphore_limit
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ConfigError(
                f"semaphore_limit must be an int >= 1, got {type(given).__name__} {given!r}"
            )
        self._limit: int = semaphore_limit
        self._loop: _LoopThread | None = None

    @property
    def semaphore_limit(self) -> int:
        """How many coroutines may be in flight at once."""
        return self._limit

    def _entries(self, phase: Phase, step: int, phase_index: int) -> list[Entry]:
        population = self._held()
        if self._loop is None:
            self._loop = _LoopThread()
        return self._loop.run(self._phase(population, phase, step, phase_index))

    async def _phase(self, population: Any, phase: Phase, step: int,
                     phase_index: int) -> list[Entry]:
        # The semaphore belongs to the loop it is used on: make it there.
        limit = asyncio.Semaphore(self._limit)
        entries: list[Entry] = await population.run_async(phase, step, phase_index, limit)
        return entries

    def close(self) -> None:
        """Drop the agents and stop the event loop's thread."""
        super().close()
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.stop()

    def __repr__(self) -> str:
        return f"AsyncBackend(semaphore_limit={self._limit})"
