"""In-process backends: the sequential reference, and a pool of threads."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterable, Mapping
from typing import Any, final

from simulacra.agents import (
    AgentId,
    AgentSpec,
    Entry,
    Message,
    Phase,
    Population,
    expand_entries,
)
from simulacra.errors import ConfigError
from simulacra.rng import SeedTree

from ._base import AgentSnapshot, BackendBase

__all__ = ["LocalBackend", "ThreadPoolBackend", "check_max_workers"]


def check_max_workers(value: object, *, allow_none: bool) -> int | None:
    """Return *value* as a worker count (an int >= 1, or None if allowed) or raise ConfigError."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        expected = "an int >= 1 or None" if allow_none else "an int >= 1"
        raise ConfigError(f"max_workers must be {expected}, got {type(value).__name__} {value!r}")
    return value


class _PopulationBackend(BackendBase):
    """A backend that holds every agent in one Population of this process."""

    _population: Population | None = None

    def start(self, specs: Iterable[AgentSpec], seed: SeedTree,
              world: Mapping[str, Any] | None) -> None:
        """Build every agent here, dropping those of a previous run."""
        self._population = None
        self._population = Population(specs, seed, world)

    def _held(self) -> Population:
        population = self._population
        if population is None:
            raise ConfigError(f"{type(self).__name__} is not started: call start() first")
        return population

    def deliver_messages(self, messages: list[Message]) -> None:
        """Make *messages* the inboxes of the next phase."""
        self._held().deliver(messages)

    def get_agents_for(self, phase: Phase) -> list[AgentId]:
        """The ids of the agents *phase* would run on now, sorted."""
        return self._held().eligible(phase)

    def execute_action(self, phase: Phase, step: int, phase_index: int) -> list[Message]:
        """Run the phase on each eligible agent; return the messages (in total order)."""
        return expand_entries(self._entries(phase, step, phase_index))

    def execute_and_deliver(self, phase: Phase, step: int, phase_index: int,
                            keep: bool) -> tuple[int, list[Message] | None]:
        """Run the phase and deliver what it sent, in one call (the engine's fast path).

        Equivalent to ``execute_action``, sorting and ``deliver_messages``:
        the agents' outboxes come back in total order already (agents run,
        or their outboxes are joined, in id order), so nothing is sorted, and
        a broadcast of an immutable payload travels as one fan-out entry
        instead of one Message per recipient.

        Args:
            phase: The phase.
            step: The step number.
            phase_index: The phase's index in the step's sequence.
            keep: Also return the messages (built from the entries), e.g. for
                digests.

        Returns:
            How many messages were sent, and the messages in total order (or
            ``None`` unless *keep*).
        """
        entries = self._entries(phase, step, phase_index)
        count = self._held().deliver(entries)
        return count, (expand_entries(entries) if keep else None)

    def _entries(self, phase: Phase, step: int, phase_index: int) -> list[Entry]:
        """The outbox entries of one phase run, in total order."""
        raise NotImplementedError

    def snapshot(self) -> AgentSnapshot:
        """Deep copies of every agent's state, in id order."""
        return self._held().snapshot()

    def close(self) -> None:
        """Drop the agents."""
        self._population = None


@final
class LocalBackend(_PopulationBackend):
    """Runs every agent in this thread, in id order: the reference backend.

    Every other backend must give exactly its results. It is also the
    fastest for models whose actions are cheap.
    """

    name = "local"

    def _entries(self, phase: Phase, step: int, phase_index: int) -> list[Entry]:
        # One population, agents in id order, each sender's messages in seq order:
        # the outbox is in total order as it is made.
        return self._held().run_entries(phase, step, phase_index)

    def __repr__(self) -> str:
        return "LocalBackend()"


@final
class ThreadPoolBackend(_PopulationBackend):
    """Runs the agents of each phase on a pool of threads.

    The eligible agents of a phase are cut into *max_workers* contiguous runs
    of ids; each thread runs one run in id order with its own outbox, and the
    outboxes are joined in id order, so the messages come back exactly as the
    reference would make them. Agents never share mutable state, so this is
    safe; with the GIL it pays off for actions that block (I/O, calls into
    code that releases the GIL), not for pure-Python computation.

    Args:
        max_workers: Threads in the pool (an int >= 1).

    Raises:
        ConfigError: *max_workers* is not an int >= 1.
    """

    name = "threaded"

    def __init__(self, max_workers: int = 4) -> None:
        self._workers: int = check_max_workers(max_workers, allow_none=False) or 1
        self._pool: cf.ThreadPoolExecutor | None = None

    @property
    def max_workers(self) -> int:
        """The number of threads."""
        return self._workers

    def start(self, specs: Iterable[AgentSpec], seed: SeedTree,
              world: Mapping[str, Any] | None) -> None:
        """Build every agent here and start the threads (kept across runs)."""
        super().start(specs, seed, world)
        if self._pool is None:
            self._pool = cf.ThreadPoolExecutor(self._workers, thread_name_prefix="simulacra-agents")

    def _entries(self, phase: Phase, step: int, phase_index: int) -> list[Entry]:
        # Each thread runs a contiguous run of ids in order; joined in id order, the
        # outboxes are in total order.
        population = self._held()
        pool = self._pool
        if pool is None:
            raise ConfigError("ThreadPoolBackend is not started: call start() first")
        ids = population.eligible(phase)
        size = -(-len(ids) // self._workers) or 1
        chunks = [ids[i:i + size] for i in range(0, len(ids), size)]
        if len(chunks) <= 1:
            return population.run_entries(phase, step, phase_index, ids)
        futures = [pool.submit(population.run_entries, phase, step, phase_index, chunk)
                   for chunk in chunks]
        cf.wait(futures)
        out: list[Entry] = []
        for future in futures:  # in id order: the first failure is the reference's
            exc = future.exception()
            if exc is not None:
                raise exc
            out += future.result()
        return out

    def close(self) -> None:
        """Drop the agents and stop the threads."""
        super().close()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __repr__(self) -> str:
        return f"ThreadPoolBackend(max_workers={self._workers})"
