"""A population: the agents one backend (or one worker of it) holds, and the phase runner.

This is the pure middle of the agents layer: it holds agents, their inboxes
and nothing else, and it advances only when told to (run a phase, take these
messages, report the state). Where it runs -- this thread, a pool of
threads, a worker process -- is the engine's business (``simulacra.engines``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from collections.abc import Sequence as AbstractSequence
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, final

from simulacra.errors import AgentActionError, ConfigError, KernelBug, UnknownRecipient

from ._agent import Agent, AgentId, AgentSpec, check_id, private_copy
from ._context import _CLOSED, Context, Frame, Message

if TYPE_CHECKING:
    from simulacra.rng import SeedTree

    from ._phase import Phase

__all__ = ["Population", "freeze_world", "sorted_ids"]

_PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def freeze_world(world: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """Return a deeply read-only copy of *world*, or ``None``.

    Mappings become ``MappingProxyType`` views of private copies, lists and
    tuples become tuples, sets become frozensets; numbers, strings, bytes and
    ``None`` are kept. Anything else is refused: a shared object that one
    agent could mutate would let agents in one process see each other's
    writes, and agents in other processes not, so results would depend on the
    backend.

    Raises:
        ConfigError: *world* is not a mapping with str keys, or holds a value
            that is not plain data; the message gives its path.
    """
    if world is None:
        return None
    if not isinstance(world, Mapping):
        raise ConfigError(
            f"world must be a mapping (str -> plain data) or None, got {type(world).__name__}"
        )
    frozen = _freeze(world, "world")
    if not isinstance(frozen, Mapping):  # pragma: no cover (a Mapping freezes to a Mapping)
        raise KernelBug("freeze_world lost the mapping")
    return frozen


def _freeze(value: object, path: str) -> object:
    if isinstance(value, _PLAIN_SCALARS):
        return value
    if isinstance(value, Mapping):
        out: dict[object, object] = {}
        for key, item in value.items():
            if not isinstance(key, _PLAIN_SCALARS):
                raise ConfigError(
                    f"{path} has a key of type {type(key).__name__} ({key!r}); world keys "
                    "must be str, int, float, bool, bytes or None"
                )
            out[key] = _freeze(item, f"{path}[{key!r}]")
        return MappingProxyType(out)
    if isinstance(value, list | tuple):
        return tuple(_freeze(item, f"{path}[{i}]") for i, item in enumerate(value))
    if isinstance(value, AbstractSet):
        return frozenset(_freeze(item, f"{path}{{...}}") for item in value)
    raise ConfigError(
        f"{path} must be plain data (None, bool, int, float, str, bytes, and lists, tuples, "
        f"sets and dicts of those), got {type(value).__qualname__}: agents would share it"
    )


def sorted_ids(ids: Iterable[object], field: str = "ids") -> list[AgentId]:
    """Return *ids* checked (one type, int or str, no duplicates) and sorted.

    Raises:
        ConfigError: An id is not an int or a str, ids mix the two types, or an
            id repeats.
    """
    checked = [check_id(i, f"{field}[{n}]") for n, i in enumerate(ids)]
    kinds = {type(i) for i in checked}
    if len(kinds) > 1:
        first = checked[0]
        other = next(i for i in checked if type(i) is not type(first))
        raise ConfigError(
            f"{field}: all agent ids of a model must have one type, got {type(first).__name__} "
            f"{first!r} and {type(other).__name__} {other!r}"
        )
    checked.sort()  # one type: int or str, both ordered
    for a, b in itertools.pairwise(checked):
        if a == b:
            raise ConfigError(f"{field}: agent id {a!r} appears twice")
    return checked


@final
class Population:
    """The agents held in one place, with their inboxes; runs phases on them.

    Engines make one per backend (or per worker process) from
    :class:`AgentSpec` data and drive it: :meth:`run` a phase, :meth:`deliver`
    the messages sorted in total order, :meth:`snapshot` the state. Several
    threads may call :meth:`run` at once with disjoint *ids*; nothing else is
    thread-safe.

    Args:
        specs: The agents to build and hold (any order).
        seed: The model's seed-tree node.
        world: The model's shared world (plain data), or ``None``; frozen here.
        all_ids: Every agent id of the whole model, when this population holds
            only part of it (a worker's partition). Defaults to the held ids.

    Raises:
        ConfigError: Ids are invalid or repeat, or the world is not plain data.
        AgentActionError: An agent's ``__init__`` raised.
    """

    __slots__ = ("_agents", "_all_ids", "_eligible", "_ids", "_inboxes", "_seed", "_world")

    #: The held agents, by id.
    _agents: dict[AgentId, Agent]
    #: Every id of the model, and sorted (broadcast(to=None) goes to these in order).
    _ids: frozenset[AgentId] | range
    _all_ids: tuple[AgentId, ...]
    #: Inboxes delivered at the last phase boundary; an agent without messages has none.
    #: Replaced (never mutated) at each boundary, so concurrent runs only read it.
    _inboxes: dict[AgentId, list[Message]]
    #: Per phase: the (id, agent) pairs of the held agents of the phase's classes, in id order.
    _eligible: dict[Phase, list[tuple[AgentId, Agent]]]
    _seed: SeedTree
    _world: Mapping[str, Any] | None

    def __init__(self, specs: Iterable[AgentSpec], seed: SeedTree,
                 world: Mapping[str, Any] | None = None, *,
                 all_ids: Iterable[AgentId] | None = None) -> None:
        specs = list(specs)
        held = sorted_ids([spec.id for spec in specs], "agent ids")
        everyone = held if all_ids is None else sorted_ids(all_ids, "all_ids")
        if all_ids is not None and not set(everyone).issuperset(held):
            missing = sorted(set(held) - set(everyone))
            raise ConfigError(f"all_ids lacks ids of agents this population holds: {missing[:5]}")
        ids: frozenset[AgentId] | range
        first, last = (everyone[0], everyone[-1]) if everyone else (None, None)
        if isinstance(first, int) and isinstance(last, int) and last - first == len(everyone) - 1:
            ids = range(first, last + 1)  # consecutive ints (sorted, no repeats)
        else:
            ids = frozenset(everyone)
        self._world = freeze_world(world)
        by_id = {spec.id: spec for spec in specs}
        self._agents = {agent_id: by_id[agent_id].build() for agent_id in held}
        self._ids = ids
        self._all_ids = tuple(everyone)
        self._inboxes = {}
        self._eligible = {}
        self._seed = seed

    @property
    def ids(self) -> tuple[AgentId, ...]:
        """The ids of the agents held here, sorted."""
        return tuple(self._agents)

    @property
    def world(self) -> Mapping[str, Any] | None:
        """The frozen world every context sees."""
        return self._world

    def _pairs(self, phase: Phase) -> list[tuple[AgentId, Agent]]:
        pairs = self._eligible.get(phase)
        if pairs is None:
            only = phase.only
            pairs = [(i, a) for i, a in self._agents.items() if only is None or isinstance(a, only)]
            self._eligible[phase] = pairs
        if phase.receivers_only:
            inboxes = self._inboxes
            return [pair for pair in pairs if pair[0] in inboxes]
        return pairs

    def eligible(self, phase: Phase) -> list[AgentId]:
        """The ids of the held agents that *phase* runs on now, sorted."""
        return [agent_id for agent_id, _ in self._pairs(phase)]

    def run(self, phase: Phase, step: int, phase_index: int,
            ids: AbstractSequence[AgentId] | None = None) -> list[Message]:
        """Run *phase*'s action on the eligible agents, in id order; return what they sent.

        Args:
            phase: The phase.
            step: The step number (part of each agent's random-stream path).
            phase_index: The phase's index in the sequence (part of the
                random-stream path and of every message's order key).
            ids: Run only these held agents, in this order (a backend's chunk
                of :meth:`eligible`); ``None`` runs every eligible agent.

        Returns:
            The messages, grouped by sender in the order the agents ran, each
            sender's in ``seq`` order: in total order when the agents ran in
            id order.

        Raises:
            AgentActionError: An action raised; it names the agent, the phase
                and the step, and chains the exception. No later agent runs.
            UnknownRecipient: An agent sent to an id the model lacks.
        """
        if ids is None:
            pairs = self._pairs(phase)
        else:
            agents = self._agents
            pairs = [(agent_id, agents[agent_id]) for agent_id in ids]
        frame = Frame(seed=self._seed, step=step, phase=phase.name, phase_index=phase_index,
                      world=self._world, ids=self._ids, all_ids=self._all_ids)
        out: list[Message] = []
        action = phase.action
        get_inbox = self._inboxes.get
        new = object.__new__
        empty: tuple[()] = ()
        agent_id: AgentId = 0
        try:
            for agent_id, agent in pairs:
                # Inlines agents._context.new_context: one Context per agent per phase.
                ctx: Context = new(Context)
                ctx._frame = frame
                ctx._id = agent_id
                ctx._inbox = get_inbox(agent_id, empty)
                ctx._out = out
                ctx._rng = None
                ctx._seq = 0
                action(agent, ctx)
                ctx._out = _CLOSED
        except UnknownRecipient:
            raise
        except Exception as exc:
            agent = self._agents[agent_id]
            error = AgentActionError(
                f"agent {agent_id!r} ({type(agent).__qualname__}) raised "
                f"{type(exc).__name__} in phase {phase.name!r} at step {step}: {exc}"
            )
            error.agent, error.phase, error.step = agent_id, phase.name, step
            raise error from exc
        return out

    def deliver(self, messages: Iterable[Message]) -> None:
        """Replace every inbox with *messages*, appended in the order given.

        The engine passes them sorted in total order; the inboxes of the last
        boundary are dropped, read or not.

        Raises:
            KernelBug: A message is for an agent not held here (the backend
                routed it wrongly).
        """
        inboxes: dict[AgentId, list[Message]] = {}
        get = inboxes.get
        for message in messages:
            recipient = message.recipient
            box = get(recipient)
            if box is None:
                inboxes[recipient] = [message]
            else:
                box.append(message)
        if not self._agents.keys() >= inboxes.keys():
            stray = next(r for r in inboxes if r not in self._agents)
            raise KernelBug(f"a message for agent {stray!r} reached a population without it")
        self._inboxes = inboxes

    def snapshot(self) -> dict[AgentId, tuple[str, dict[str, Any]]]:
        """Return ``{id: (class qualname, copy of vars(agent))}`` in id order.

        Each state value is copied by the no-sharing rule (immutable values as
        they are, the rest deep-copied), so the snapshot never changes later.
        """
        return {
            agent_id: (type(agent).__qualname__,
                       {key: private_copy(value) for key, value in vars(agent).items()})
            for agent_id, agent in self._agents.items()
        }

    def __repr__(self) -> str:
        return f"<Population of {len(self._agents)} agents>"
