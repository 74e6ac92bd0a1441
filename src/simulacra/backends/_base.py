"""The execution-backend seam: three methods plus a lifecycle."""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType, TracebackType
from typing import Any, ClassVar, Protocol, TypeAlias, runtime_checkable

from simulacra.agents import AgentId, AgentSpec, Message, Phase, canonical_line, state_digest
from simulacra.errors import ConfigError
from simulacra.rng import SeedTree

__all__ = ["AgentSnapshot", "AgentStates", "BackendBase", "ExecutionBackend", "ModelView"]

AgentSnapshot: TypeAlias = dict[AgentId, tuple[str, dict[str, Any]]]
"""``{agent id: (class qualname, state)}``: agent states, for digests and results."""


class AgentStates:
    """What a run result holds: final agent states, per-step counts and digests, one run digest.

    ``agents``, ``state(id)`` and their digest; per step, the messages sent
    and (when the run had ``digests=True``) the state and message digests;
    and :attr:`digest`, one SHA-256 over the run under the result's
    ``_scheme``, with the fields its ``_digest_fields`` adds in front.
    """

    __slots__ = ("_digest", "_final", "agents", "message_counts", "message_digests",
                 "state_digests")

    agents: Mapping[AgentId, tuple[str, dict[str, Any]]]
    #: The header of :attr:`digest` (one scheme a result class).
    _scheme: ClassVar[str]

    def __init__(self, agents: AgentSnapshot, message_counts: tuple[int, ...],
                 state_digests: tuple[str, ...], message_digests: tuple[str, ...]) -> None:
        self.agents = MappingProxyType(agents)
        self.message_counts = message_counts
        self.state_digests = state_digests
        self.message_digests = message_digests
        self._final: str | None = None
        self._digest: str | None = None

    def state(self, agent_id: AgentId) -> dict[str, Any]:
        """The final ``vars()`` of agent *agent_id*.

        Raises:
            ConfigError: The model has no such agent.
        """
        try:
            return self.agents[agent_id][1]
        except KeyError:
            raise ConfigError(f"agent_id {agent_id!r} is not an agent of this model") from None

    @property
    def final_state_digest(self) -> str:
        """The state digest of :attr:`agents` (computed on first use)."""
        if self._final is None:
            self._final = state_digest(self.agents)
        return self._final

    @property
    def digest(self) -> str:
        """One SHA-256 over the whole run: steps, per-step digests and final state.

        A Pregel result's covers its halting, message counts and aggregates
        too. Compare digests of runs with the same ``digests`` setting:
        without per-step digests, it covers the final state only.
        """
        if self._digest is None:
            h = hashlib.sha256((self._scheme + "\n").encode("ascii"))
            h.update(canonical_line({
                **self._digest_fields(),
                "state_digests": list(self.state_digests),
                "message_digests": list(self.message_digests),
                "final_state": self.final_state_digest,
            }))
            self._digest = h.hexdigest()
        return self._digest

    def _digest_fields(self) -> dict[str, Any]:
        """What :attr:`digest` covers before the per-step digests and the final state."""
        raise NotImplementedError


class ModelView(Protocol):
    """What a backend that runs a whole model itself (Pregel) reads of a ``Model``."""

    @property
    def seed(self) -> SeedTree:
        """The model's seed tree."""
        ...

    @property
    def world(self) -> Mapping[str, Any] | None:
        """The model's read-only world."""
        ...

    @property
    def specs(self) -> tuple[AgentSpec, ...]:
        """The model's agents, as specs."""
        ...


@runtime_checkable
class ExecutionBackend(Protocol):
    """Runs the agents of one model, wherever it holds them.

    The engine drives a backend through one run like this::

        backend.start(specs, seed, world)
        for step in range(steps):
            for index, phase in enumerate(sequence):
                messages = backend.execute_action(phase, step, index)
                messages.sort()                    # total order: (phase, sender, seq)
                backend.deliver_messages(messages)
        states = backend.snapshot()
        backend.close()                            # when the engine owns the backend

    A backend holds agent state where it runs the agents (a worker process
    owns its partition for the whole run); only phases, step numbers and
    messages travel. It must give results identical to :class:`LocalBackend`,
    the sequential reference: every parallel backend has a same-seed-same-result
    test against it (``tests/backends/test_conformance.py``).
    """

    @property
    def name(self) -> str:
        """The backend's registry name ("local", "threaded", "processes"...)."""
        ...

    def start(self, specs: Iterable[AgentSpec], seed: SeedTree,
              world: Mapping[str, Any] | None) -> None:
        """Build the agents from *specs* (in their final place) for a new run.

        A backend that is already started drops its agents and starts over.
        """
        ...

    def execute_action(self, phase: Phase, step: int, phase_index: int) -> list[Message]:
        """Run *phase*'s action on every eligible agent; return their outgoing messages.

        Raises:
            AgentActionError: An action raised. When several did (concurrently),
                the one of the lowest agent id: the one the reference would hit.
            UnknownRecipient: An agent sent to an id the model lacks.
            WorkerLost: A worker holding agents died.
        """
        ...

    def deliver_messages(self, messages: list[Message]) -> None:
        """Make *messages* (already in total order) the inboxes of the next phase.

        Every agent's previous inbox is dropped.
        """
        ...

    def get_agents_for(self, phase: Phase) -> list[AgentId]:
        """The ids of the agents *phase* would run on now, sorted."""
        ...

    def snapshot(self) -> AgentSnapshot:
        """The state of every agent, as independent copies, in id order."""
        ...

    def close(self) -> None:
        """Release threads, processes and agents. Idempotent."""
        ...


class BackendBase(abc.ABC):
    """A helper base for backends: the abstract methods, a context manager, a repr."""

    #: The backend's registry name.
    name: str = "?"

    @abc.abstractmethod
    def start(self, specs: Iterable[AgentSpec], seed: SeedTree,
              world: Mapping[str, Any] | None) -> None:
        """See :meth:`ExecutionBackend.start`."""

    @abc.abstractmethod
    def execute_action(self, phase: Phase, step: int, phase_index: int) -> list[Message]:
        """See :meth:`ExecutionBackend.execute_action`."""

    @abc.abstractmethod
    def deliver_messages(self, messages: list[Message]) -> None:
        """See :meth:`ExecutionBackend.deliver_messages`."""

    @abc.abstractmethod
    def get_agents_for(self, phase: Phase) -> list[AgentId]:
        """See :meth:`ExecutionBackend.get_agents_for`."""

    @abc.abstractmethod
    def snapshot(self) -> AgentSnapshot:
        """See :meth:`ExecutionBackend.snapshot`."""

    def close(self) -> None:  # noqa: B027  (a no-op default is the point)
        """See :meth:`ExecutionBackend.close`. The default does nothing."""

    def __enter__(self) -> BackendBase:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
