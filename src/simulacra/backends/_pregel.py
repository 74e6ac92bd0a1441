"""Pregel, per vertex: bulk-synchronous supersteps over agents: halting, combiners, aggregators.

A *superstep* is one phase run: every active agent runs the phase's action,
and what it sends is in its recipients' inboxes when the next superstep
begins -- exactly the phase boundary of a lockstep Model run. On top of that:

* **vote to halt.** ``ctx.vote_to_halt()`` makes the agent inactive from the
  next superstep on; a message delivered to it reactivates it.
* **combiners.** ``combiners={"rank": "sum"}``: the messages of one topic for
  one recipient in one superstep become one message, whose payload is the
  left fold of their payloads in the total order ``(phase, sender, seq)``
  and whose ``(phase, sender, seq)`` are those of the first of them.
* **aggregators.** ``aggregators={"err": "sum"}``: ``ctx.aggregate("err", x)``
  contributes; contributions are folded in agent id order (an agent's own in
  call order) and ``ctx.aggregated("err")`` returns the result in the next
  superstep (``None`` when nobody contributed).

Two ways in:

* ``Model(backend=PregelBackend()).run(sequence, steps=N)`` (or settings
  ``{"orchestration": {"mode": "pregel"}}``): the model's lockstep loop, where
  each phase run is a superstep, for exactly N steps; after ``max_supersteps``
  phase runs the backend runs nobody. A model that never votes to halt and
  declares no combiner gets the results of :class:`LocalBackend`, digest for
  digest.
* :func:`run_pregel` (or :meth:`PregelBackend.run`): runs a program superstep
  by superstep until every agent has halted with no message in flight, or
  until ``max_supersteps``.

The vectorised path over numpy arrays (``simulacra.backends._pregel_vector``)
has the same semantics.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import operator
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeAlias, final

from simulacra.agents import (
    Action,
    Agent,
    AgentId,
    AgentSpec,
    Entry,
    Frame,
    Message,
    MessageDigest,
    Phase,
    Sequence,
    close_context,
    expand_entries,
    freeze_world,
    new_context,
    private_copy,
    snapshot_copy_error,
    sorted_ids,
    state_digest,
)
from simulacra.errors import (
    AgentActionError,
    ConfigError,
    KernelBug,
    UncopyableState,
    UnknownRecipient,
)
from simulacra.rng import SeedTree

from ._base import AgentSnapshot, AgentStates, BackendBase, ModelView

__all__ = ["PREGEL_SCHEME", "REDUCERS", "PregelBackend", "PregelResult", "Reducer",
           "check_max_supersteps", "check_reducers", "run_pregel"]

#: Header of a Pregel run's digest.
PREGEL_SCHEME: Final = "simulacra.engines.pregel.v1"

#: The names of the built-in combiners and aggregators.
REDUCERS: Final = ("sum", "min", "max")

Reducer: TypeAlias = str | Callable[[Any, Any], Any]
"""A combiner or aggregator: ``"sum"``, ``"min"``, ``"max"``, or (per-vertex
API only) a function ``f(acc, value) -> acc`` folded left over the values."""


def _min2(a: Any, b: Any) -> Any:
    return b if b < a else a


def _max2(a: Any, b: Any) -> Any:
    return b if b > a else a


_BINARY: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "sum": operator.add, "min": _min2, "max": _max2,
}


def check_max_supersteps(value: object) -> int:
    """Return *value* as a superstep limit (an int >= 1) or raise ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"max_supersteps must be an int >= 1, got {type(value).__name__} {value!r}"
        )
    return value


def check_reducers(value: object, field: str, *,
                   allow_callables: bool = True) -> dict[str, Reducer]:
    """Validate a ``{name: reducer}`` mapping of combiners (by topic) or aggregators.

    Args:
        value: ``None`` (none) or a mapping of non-empty str keys to ``"sum"``,
            ``"min"``, ``"max"`` or, if *allow_callables*, a two-argument function.
        field: The argument's name, for messages.
        allow_callables: Whether functions are accepted (the vectorised path
            takes names only).

    Raises:
        ConfigError: Not a mapping, a key is not a non-empty str, or a value
            is not a known reducer; the message names the key and the value.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{field} must be a mapping of names to reducers, got {type(value).__name__} "
            f"{value!r}"
        )
    out: dict[str, Reducer] = {}
    expected = ", ".join(repr(n) for n in REDUCERS)
    if allow_callables:
        expected += " or a function (acc, value) -> acc"
    for key, reducer in value.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{field} keys must be non-empty str, got {key!r}")
        if isinstance(reducer, str):
            if reducer not in REDUCERS:
                raise ConfigError(f"{field}[{key!r}] must be one of {expected}, got {reducer!r}")
        elif not (allow_callables and callable(reducer)):
            raise ConfigError(
                f"{field}[{key!r}] must be one of {expected}, got {type(reducer).__name__} "
                f"{reducer!r}"
            )
        out[key] = reducer
    return out


def _binary(reducer: Reducer) -> Callable[[Any, Any], Any]:
    return _BINARY[reducer] if isinstance(reducer, str) else reducer


def _undeclared(name: object, declared: Mapping[str, Any]) -> ConfigError:
    known = ", ".join(repr(n) for n in declared) or "none"
    return ConfigError(f"aggregator {name!r} was not declared (declared: {known})")


@final
class _Hooks:
    """One superstep's halting votes and aggregator contributions (see agents.PregelHooks)."""

    __slots__ = ("_previous", "contributions", "halts")

    def __init__(self, declared: Iterable[str], previous: Mapping[str, Any]) -> None:
        self.halts: list[AgentId] = []
        self.contributions: dict[str, list[Any]] = {name: [] for name in declared}
        self._previous = previous

    def vote_to_halt(self, agent_id: AgentId) -> None:
        self.halts.append(agent_id)

    def aggregate(self, name: str, agent_id: AgentId, value: Any) -> None:
        values = self.contributions.get(name)
        if values is None:
            raise _undeclared(name, self.contributions)
        values.append(private_copy(value))

    def aggregated(self, name: str) -> Any:
        if name not in self.contributions:
            raise _undeclared(name, self.contributions)
        return private_copy(self._previous.get(name))


@final
class PregelBackend(BackendBase):
    """Bulk-synchronous supersteps: halting, reactivation by messages, combiners, aggregators.

    Runs every agent in this thread, in id order, like :class:`LocalBackend`;
    each :meth:`execute_action` is one superstep. An agent that called
    ``ctx.vote_to_halt()`` is skipped until a message reaches it; with
    combiners, the messages of one topic for one recipient are folded into
    one before they leave the superstep; aggregator contributions are folded
    and visible through ``ctx.aggregated(name)`` in the next superstep.

    Under ``Model.run(sequence, steps)`` the run has exactly *steps* steps;
    once *max_supersteps* phase runs have happened the backend runs no agent
    (the remaining steps change nothing). :meth:`run` instead runs until
    every agent has halted with no message in flight, or the limit.

    Args:
        max_supersteps: The most supersteps (phase runs) of a run, an int >= 1.
        combiners: ``{topic: "sum" | "min" | "max" | f(acc, payload)}``.
        aggregators: ``{name: "sum" | "min" | "max" | f(acc, value)}``.

    Raises:
        ConfigError: *max_supersteps* is not an int >= 1, or a combiner or
            aggregator is not one of the above.
    """

    name = "pregel"

    def __init__(self, max_supersteps: int = 100, *,
                 combiners: Mapping[str, Reducer] | None = None,
                 aggregators: Mapping[str, Reducer] | None = None) -> None:
        self._max = check_max_supersteps(max_supersteps)
        self._combiner_specs = check_reducers(combiners, "combiners")
        self._aggregator_specs = check_reducers(aggregators, "aggregators")
        self._combiners = {t: _binary(r) for t, r in self._combiner_specs.items()}
        self._aggregators = {n: _binary(r) for n, r in self._aggregator_specs.items()}
        self._agents: dict[AgentId, Agent] | None = None
        self._ids: frozenset[AgentId] | range = range(0)
        self._all_ids: tuple[AgentId, ...] = ()
        self._seed: SeedTree | None = None
        self._world: Mapping[str, Any] | None = None
        self._inboxes: dict[AgentId, list[Entry]] = {}
        self._halted: set[AgentId] = set()
        self._eligible: dict[Phase, list[tuple[AgentId, Agent]]] = {}
        self._known: dict[int, tuple[AgentId, ...]] = {}
        self._superstep = 0
        self._aggregates: dict[str, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: (phase name, step) of the last superstep, for errors.
        self._ran: tuple[str, int] | None = None

    # ------------------------------------------------------------------ properties

    @property
    def max_supersteps(self) -> int:
        """The superstep limit."""
        return self._max

    @property
    def combiners(self) -> Mapping[str, Reducer]:
        """The combiners, by topic."""
        return MappingProxyType(self._combiner_specs)

    @property
    def aggregators(self) -> Mapping[str, Reducer]:
        """The aggregators, by name."""
        return MappingProxyType(self._aggregator_specs)

    @property
    def superstep(self) -> int:
        """How many supersteps the current run has had."""
        return self._superstep

    @property
    def halted(self) -> tuple[AgentId, ...]:
        """The ids of the agents that are halted now, sorted."""
        return tuple(sorted(self._halted))

    @property
    def aggregates(self) -> Mapping[str, Any]:
        """Every aggregator's value reduced over the last superstep (``None``: no contribution)."""
        return MappingProxyType({name: self._aggregates.get(name) for name in self._aggregators})

    @property
    def quiescent(self) -> bool:
        """Whether every agent has halted and no message is in flight: the run is over."""
        agents = self._held()
        return not self._inboxes and len(self._halted) == len(agents)

    # ------------------------------------------------------------------ the backend seam

    def start(self, specs: Iterable[AgentSpec], seed: SeedTree,
              world: Mapping[str, Any] | None) -> None:
        """Build every agent here for a new run (superstep 0, nobody halted)."""
        self._agents = None
        specs = list(specs)
        everyone = sorted_ids([spec.id for spec in specs], "agent ids")
        first, last = (everyone[0], everyone[-1]) if everyone else (None, None)
        if isinstance(first, int) and isinstance(last, int) and last - first == len(everyone) - 1:
            self._ids = range(first, last + 1)  # membership is arithmetic (as Population does)
        else:
            self._ids = frozenset(everyone)
        self._all_ids = tuple(everyone)
        self._world = freeze_world(world)
        self._seed = seed
        by_id = {spec.id: spec for spec in specs}
        agents = {agent_id: by_id[agent_id].build() for agent_id in everyone}
        self._inboxes = {}
        self._halted = set()
        self._eligible = {}
        self._known = {}
        self._superstep = 0
        self._aggregates = {}
        self._ran = None
        self._agents = agents

    def _held(self) -> dict[AgentId, Agent]:
        agents = self._agents
        if agents is None:
            raise ConfigError("PregelBackend is not started: call start() first")
        return agents

    def _pairs(self, phase: Phase) -> list[tuple[AgentId, Agent]]:
        agents = self._held()
        if self._superstep >= self._max:
            return []
        pairs = self._eligible.get(phase)
        if pairs is None:
            pairs = [(i, a) for i, a in agents.items() if phase.applies_to(a)]
            self._eligible[phase] = pairs
        if phase.receivers_only:
            inboxes = self._inboxes
            pairs = [pair for pair in pairs if pair[0] in inboxes]
        halted = self._halted
        if halted:  # delivery removed the reactivated ones
            pairs = [pair for pair in pairs if pair[0] not in halted]
        return pairs

    def execute_action(self, phase: Phase, step: int, phase_index: int) -> list[Message]:
        """Run one superstep: *phase* on every eligible active agent, in id order.

        Returns:
            The messages in total order, combined where a combiner is declared
            for their topic; ``[]`` once the superstep limit is reached.

        Raises:
            AgentActionError: An action raised (names the agent, the phase and
                the step); no later agent runs.
            UnknownRecipient: An agent sent to an id the model lacks.
        """
        agents = self._held()
        if self._superstep >= self._max:
            return []
        pairs = self._pairs(phase)
        hooks = _Hooks(self._aggregators, self._aggregates)
        seed = self._seed
        if seed is None:  # pragma: no cover (start() sets it with the agents)
            raise KernelBug("PregelBackend started without a seed")
        frame = Frame(seed=seed, step=step, phase=phase.name, phase_index=phase_index,
                      world=self._world, ids=self._ids, all_ids=self._all_ids, pregel=hooks,
                      known=self._known)
        out: list[Entry] = []
        action = phase.action
        get_inbox = self._inboxes.get
        empty: tuple[()] = ()
        agent_id: AgentId = 0
        try:
            for agent_id, agent in pairs:
                ctx = new_context(frame, agent_id, get_inbox(agent_id, empty), out)
                result = action(agent, ctx)
                if result is not None and inspect.isawaitable(result):
                    self._run_to_end(result)  # an async def action runs to its end here
                close_context(ctx)
        except (UnknownRecipient, UncopyableState):
            raise
        except Exception as exc:
            agent = agents[agent_id]
            error = AgentActionError(
                f"agent {agent_id!r} ({type(agent).__qualname__}) raised "
                f"{type(exc).__name__} in phase {phase.name!r} at step {step}: {exc}"
            )
            error.agent, error.phase, error.step = agent_id, phase.name, step
            raise error from exc
        self._superstep += 1
        self._ran = (phase.name, step)
        if hooks.halts:
            self._halted.update(hooks.halts)
        aggregates: dict[str, Any] = {}
        for name, values in hooks.contributions.items():
            if values:
                aggregates[name] = _fold(self._aggregators[name], values, "aggregator", name)
        self._aggregates = aggregates
        if self._combiners and out:
            return self._combine(out)
        return expand_entries(out)

    def _run_to_end(self, awaitable: Any) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.new_event_loop()

        async def wait() -> None:
            await awaitable

        loop.run_until_complete(wait())

    def _combine(self, entries: list[Entry]) -> list[Message]:
        """The messages of *entries*, each (recipient, combined topic) folded into its first.

        Works on the outbox entries (a broadcast is one fan-out entry), so
        that no Message is built for a message that is folded away.
        """
        combiners = self._combiners
        out: list[Message] = []
        append = out.append
        first: dict[str, dict[AgentId, int]] = {topic: {} for topic in combiners}
        folded: dict[int, Any] = {}
        topic = ""
        try:
            for entry in entries:
                index, sender, seq, to, topic, payload = entry
                combine = combiners.get(topic)
                recipients: tuple[AgentId, ...] = to if type(to) is tuple else (to,)  # type: ignore[assignment]
                if combine is None:
                    out.extend(expand_entries([entry]))
                    continue
                slots = first[topic]
                for n, recipient in enumerate(recipients, seq):
                    slot = slots.get(recipient)
                    if slot is None:
                        slots[recipient] = len(out)
                        append(Message(index, sender, n, recipient, topic, payload))
                    elif slot in folded:
                        folded[slot] = combine(folded[slot], payload)
                    else:
                        folded[slot] = combine(out[slot][5], payload)
        except Exception as exc:
            raise ConfigError(
                f"combiner for topic {topic!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        for slot, payload in folded.items():
            out[slot] = out[slot]._replace(payload=payload)
        return out

    def deliver_messages(self, messages: list[Message]) -> None:
        """Make *messages* the inboxes of the next superstep; reactivate their recipients."""
        agents = self._held()
        inboxes: dict[AgentId, list[Entry]] = {}
        get = inboxes.get
        for message in messages:
            recipient = message.recipient
            box = get(recipient)
            if box is None:
                inboxes[recipient] = [message]
            else:
                box.append(message)
        if not agents.keys() >= inboxes.keys():
            stray = next(r for r in inboxes if r not in agents)
            raise KernelBug(f"a message for agent {stray!r} reached a population without it")
        self._inboxes = inboxes
        if self._halted and inboxes:
            self._halted.difference_update(inboxes)

    def get_agents_for(self, phase: Phase) -> list[AgentId]:
        """The ids of the active agents *phase* would run on now, sorted."""
        return [agent_id for agent_id, _ in self._pairs(phase)]

    def snapshot(self) -> AgentSnapshot:
        """Copies of every agent's state, in id order.

        Raises:
            UncopyableState: A state value cannot be deep-copied; names the
                agent, the attribute and the last superstep's phase and step.
        """
        out: AgentSnapshot = {}
        agents = self._held()
        agent_id: AgentId = 0
        try:
            for agent_id, agent in agents.items():
                out[agent_id] = (type(agent).__qualname__,
                                 {key: private_copy(value) for key, value in vars(agent).items()})
        except Exception as exc:
            raise snapshot_copy_error(agent_id, agents[agent_id], self._ran, exc) from exc
        return out

    def close(self) -> None:
        """Drop the agents (and the event loop of ``async def`` actions)."""
        self._agents = None
        self._inboxes = {}
        self._eligible = {}
        self._known = {}
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.close()

    # ------------------------------------------------------------------ the Pregel loop

    def run(self, model: ModelView, program: Sequence | Phase | Action, *,
            digests: bool = False) -> PregelResult:
        """Run *program* on *model*'s agents until all have halted, or *max_supersteps*.

        Superstep *s* runs phase ``s % len(program)`` with ``ctx.step ==
        s // len(program)``: a one-phase program has ``ctx.step == s``. Before
        each superstep the run ends if every agent of the model has halted and
        no message is in flight (agents that no phase runs on never halt, so
        they keep such a run going until the limit). The model's own backend
        is not used; the agents are dropped after the run.

        Args:
            model: The agents, seed and world.
            program: The vertex program: an action, a Phase or a Sequence.
            digests: Record a state digest and a message digest after each
                superstep (for determinism checks; costs a canonical encoding
                of every agent per superstep).

        Raises:
            AgentActionError: An action raised.
            UnknownRecipient: An agent sent to an id the model lacks.
            ConfigError: *program* is not an action, Phase or Sequence.
        """
        phases = Sequence.of(program).phases
        # Model keeps its world private; this module is part of the same package.
        self.start(model.specs, model.seed, model.world)
        counts: list[int] = []
        aggregates: list[Mapping[str, Any]] = []
        state_digests: list[str] = []
        message_digests: list[str] = []
        try:
            while not self.quiescent and self._superstep < self._max:
                superstep = self._superstep
                phase_index = superstep % len(phases)
                messages = self.execute_action(phases[phase_index], superstep // len(phases),
                                               phase_index)
                messages.sort()
                counts.append(len(messages))
                aggregates.append(self.aggregates)
                if digests:
                    hasher = MessageDigest()
                    hasher.update(messages)
                    message_digests.append(hasher.hexdigest())
                self.deliver_messages(messages)
                if digests:
                    state_digests.append(state_digest(self.snapshot()))
            halted = self.quiescent
            agents = self.snapshot()
        finally:
            self.close()
        return PregelResult(supersteps=len(counts), halted=halted, agents=agents,
                            aggregates=tuple(aggregates), message_counts=tuple(counts),
                            state_digests=tuple(state_digests),
                            message_digests=tuple(message_digests))

    def __repr__(self) -> str:
        parts = [f"max_supersteps={self._max}"]
        if self._combiner_specs:
            parts.append(f"combiners={self._combiner_specs!r}")
        if self._aggregator_specs:
            parts.append(f"aggregators={self._aggregator_specs!r}")
        return f"PregelBackend({', '.join(parts)})"


def _fold(reduce: Callable[[Any, Any], Any], values: list[Any], kind: str, name: str) -> Any:
    try:
        return functools.reduce(reduce, values)
    except Exception as exc:
        raise ConfigError(f"{kind} {name!r} raised {type(exc).__name__}: {exc}") from exc


@final
class PregelResult(AgentStates):
    """What a Pregel run gives (:func:`run_pregel`, and the vectorised path's arrays aside).

    Attributes:
        supersteps: How many supersteps ran.
        halted: ``True`` if the run ended because every agent had halted with
            no message in flight; ``False`` if it stopped at ``max_supersteps``.
        agents: The final state of every agent, ``{id: (class qualname, vars)}``.
        aggregates: Per superstep, every aggregator's value reduced over it.
        message_counts: Per superstep, the messages sent (after combining).
        state_digests: Per superstep, the state digest (empty unless ``digests=True``).
        message_digests: Per superstep, the message digest (empty unless ``digests=True``).
    """

    __slots__ = ("aggregates", "halted", "supersteps")
    _scheme = PREGEL_SCHEME

    def __init__(self, *, supersteps: int, halted: bool, agents: AgentSnapshot,
                 aggregates: tuple[Mapping[str, Any], ...], message_counts: tuple[int, ...],
                 state_digests: tuple[str, ...] = (),
                 message_digests: tuple[str, ...] = ()) -> None:
        super().__init__(agents, message_counts, state_digests, message_digests)
        self.supersteps = supersteps
        self.halted = halted
        self.aggregates = aggregates

    def _digest_fields(self) -> dict[str, Any]:
        return {
            "supersteps": self.supersteps,
            "halted": self.halted,
            "message_counts": list(self.message_counts),
            "aggregates": [dict(a) for a in self.aggregates],
        }

    def __repr__(self) -> str:
        how = "all halted" if self.halted else "at the superstep limit"
        return (f"<PregelResult: {len(self.agents)} agents, {self.supersteps} supersteps "
                f"({how}), digest {self.digest[:12]}>")


def run_pregel(model: ModelView, program: Sequence | Phase | Action, *, max_supersteps: int = 100,
               combiners: Mapping[str, Reducer] | None = None,
               aggregators: Mapping[str, Reducer] | None = None,
               digests: bool = False) -> PregelResult:
    """Run a vertex program on *model*'s agents until all have halted, or *max_supersteps*.

    ``run_pregel(model, Page.compute, combiners={"rank": "sum"})`` is
    ``PregelBackend(max_supersteps, combiners=..., aggregators=...).run(model,
    program, digests=digests)``; see :meth:`PregelBackend.run`.

    Raises:
        ConfigError: A bad *max_supersteps*, combiner, aggregator or program.
        AgentActionError: An action raised.
    """
    backend = PregelBackend(max_supersteps, combiners=combiners, aggregators=aggregators)
    return backend.run(model, program, digests=digests)
