"""A population: the agents one backend (or one worker of it) holds, and the phase runner.

This is the pure middle of the agents layer: it holds agents, their inboxes
and nothing else, and it advances only when told to (run a phase, take these
messages, report the state). Where it runs -- this thread, a pool of
threads, a worker process -- is the backend's business (``simulacra.backends``).
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import sys
import sysconfig
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from collections.abc import Sequence as AbstractSequence
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, final

from simulacra.errors import (
    AgentActionError,
    ConfigError,
    KernelBug,
    UncopyableState,
    UnknownRecipient,
)

from ._agent import Agent, AgentId, AgentSpec, check_id, is_immutable, private_copy
from ._context import _CLOSED, Context, Entry, Frame, Message, expand_entries
from ._copies import COPY_ADVICE, first_failure, state_error

#: Reference counts tell whether an action kept its Context (see Population.run_entries).
_refcount = sys.getrefcount
#: Reuse contexts nobody kept: only where reference counts are exact (not free-threaded).
_REUSE_CONTEXTS = not sysconfig.get_config_var("Py_GIL_DISABLED")


if TYPE_CHECKING:
    from simulacra.rng import SeedTree

    from ._phase import Phase

__all__ = ["Population", "freeze_world", "snapshot_when", "sorted_ids"]

_PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes)
#: The same as a set: a state value of one of these types is copied as it is.
_SCALAR_TYPES: frozenset[type] = frozenset(_PLAIN_SCALARS)
_INT: set[type] = {int}
_TUPLE: set[type] = {tuple}
#: An entry's recipient field: an id (a Message) or a tuple of ids (a fan-out).
_RECIPIENTS = operator.itemgetter(3)
_STR: set[type] = {str}


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


def snapshot_when(ran: tuple[str, int] | None, done: str) -> str:
    """``"when its state <done> for a snapshot after phase 'p' at step s"`` (or before any)."""
    if ran is None:
        return f"when its state {done} for a snapshot before any phase ran"
    return f"when its state {done} for a snapshot after phase {ran[0]!r} at step {ran[1]}"


def snapshot_copy_error(agent_id: AgentId, agent: object, ran: tuple[str, int] | None,
                        exc: Exception) -> UncopyableState:
    """The error for *agent*, whose state did not copy for a snapshot after phase *ran*.

    It names the first attribute that does not copy alone (see ``first_failure``),
    and the phase and step.
    """
    found = first_failure(vars(agent).items(), private_copy)
    phase, step = ran or (None, None)
    return state_error(agent_id, type(agent).__qualname__, found, exc, pickled=False,
                       when=snapshot_when(ran, "was copied"), advice=COPY_ADVICE,
                       phase=phase, step=step)


def sorted_ids(ids: Iterable[object], field: str = "ids") -> list[AgentId]:
    """Return *ids* checked (one type, int or str, no duplicates) and sorted.

    Raises:
        ConfigError: An id is not an int or a str, ids mix the two types, or an
            id repeats.
    """
    checked: list[Any] = list(ids)
    kinds = set(map(type, checked))
    if kinds in (_INT, _STR):  # plain ints or strs: check_id keeps them as they are
        checked.sort()
        if not any(map(operator.eq, checked, itertools.islice(checked, 1, None))):
            return checked
    else:
        checked = [check_id(i, f"{field}[{n}]") for n, i in enumerate(checked)]
        kinds = set(map(type, checked))
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

    __slots__ = ("_agents", "_all_ids", "_eligible", "_ids", "_inboxes", "_known", "_ran",
                 "_seed", "_start", "_world")

    #: The held agents, by id.
    _agents: dict[AgentId, Agent]
    #: Every id of the model, and sorted (broadcast(to=None) goes to these in order).
    _ids: frozenset[AgentId] | range
    _all_ids: tuple[AgentId, ...]
    #: Inboxes delivered at the last phase boundary; an agent without messages has none.
    #: Replaced (never mutated) at each boundary, so concurrent runs only read it.
    #: Each holds Messages and fan-outs (one entry per message: see agents._context.Entry).
    #: A list indexed by ``id - _start`` when this population holds every agent of the
    #: model and their ids are consecutive ints (a list index is the cheapest lookup
    #: there is, and delivery does one per message); else a dict that answers () for
    #: an agent without mail.
    _inboxes: _Inboxes | list[list[Entry]]
    #: The first id when _inboxes is a list, else None.
    _start: int | None
    #: Recipient tuples checked in this run (see Frame.known).
    _known: dict[int, tuple[AgentId, ...]]
    #: Per phase: the (id, agent) pairs of the held agents of the phase's classes, in id order.
    _eligible: dict[Phase, list[tuple[AgentId, Agent]]]
    _seed: SeedTree
    _world: Mapping[str, Any] | None
    #: (phase name, step) of the last phase run, for errors; None before the first.
    _ran: tuple[str, int] | None

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
        if [spec.id for spec in specs] != held:  # not added in id order
            by_id = {spec.id: spec for spec in specs}
            specs = [by_id[agent_id] for agent_id in held]
        self._agents = {spec.id: spec.build() for spec in specs}
        self._ids = ids
        self._all_ids = tuple(everyone)
        self._start = ids.start if isinstance(ids, range) and len(held) == len(everyone) else None
        self._inboxes = _Inboxes() if self._start is None else [[] for _ in everyone]
        self._known = {}
        self._eligible = {}
        self._seed = seed
        self._ran = None

    @property
    def last_phase(self) -> tuple[str, int] | None:
        """``(phase name, step)`` of the last phase run here, or ``None`` before the first."""
        return self._ran

    def class_name(self, agent_id: AgentId) -> str | None:
        """The class (qualified name) of held agent *agent_id*, or ``None`` if not held."""
        agent = self._agents.get(agent_id)
        return None if agent is None else type(agent).__qualname__

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
            inbox = self._inbox_getter()
            return [pair for pair in pairs if inbox(pair[0])]
        return pairs

    def _inbox_getter(self) -> Callable[[AgentId], list[Entry] | tuple[()]]:
        """A function from a held agent's id to its inbox (empty if it has no mail)."""
        inboxes, start = self._inboxes, self._start
        if not start:
            return inboxes.__getitem__  # type: ignore[return-value]  # list: ids are positions
        boxes: list[list[Entry]] = inboxes  # type: ignore[assignment]
        return lambda agent_id: boxes[agent_id - start]  # type: ignore[operator]

    def eligible(self, phase: Phase) -> list[AgentId]:
        """The ids of the held agents that *phase* runs on now, sorted."""
        return [agent_id for agent_id, _ in self._pairs(phase)]

    def _frame(self, phase: Phase, step: int, phase_index: int) -> Frame:
        return Frame(seed=self._seed, step=step, phase=phase.name, phase_index=phase_index,
                     world=self._world, ids=self._ids, all_ids=self._all_ids, known=self._known)

    def run(self, phase: Phase, step: int, phase_index: int,
            ids: AbstractSequence[AgentId] | None = None) -> list[Message]:
        """Run *phase*'s action on the eligible agents, in id order; return what they sent.

        An action may be an ``async def``: its coroutine is run to completion
        (on this thread's event loop) before the next agent's action starts.

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
            UncopyableState: An agent sent a mutable payload that cannot be
                deep-copied.
        """
        return expand_entries(self.run_entries(phase, step, phase_index, ids))

    def run_entries(self, phase: Phase, step: int, phase_index: int,
                    ids: AbstractSequence[AgentId] | None = None) -> list[Entry]:
        """:meth:`run`, returning the outbox as entries: Messages and fan-outs.

        A broadcast of an immutable payload is one fan-out entry, however many
        recipients it has (:func:`~simulacra.agents.expand_entries` turns
        entries into Messages); :meth:`deliver` takes entries as they are.
        """
        if ids is None:
            pairs = self._pairs(phase)
        else:
            agents = self._agents
            pairs = [(agent_id, agents[agent_id]) for agent_id in ids]
        frame = self._frame(phase, step, phase_index)
        self._ran = (phase.name, step)
        out: list[Entry] = []
        action = phase.action
        inboxes = self._inboxes
        # Each pair with its inbox: by position when the pairs are every agent in id
        # order and the inboxes a list by position (no lookup per agent), else by id.
        boxes: Iterable[list[Entry] | tuple[()]]
        if type(inboxes) is list and len(pairs) == len(inboxes) and ids is None:
            boxes = inboxes
        else:
            boxes = map(self._inbox_getter(), [pair[0] for pair in pairs])
        new = object.__new__
        refcount = _refcount
        agent_id: AgentId = 0
        # Inlines agents._context.new_context. A context nobody kept after its
        # action returned (its reference count is back to what it was) is reused
        # for the next agent; one that was kept is closed -- so using it later
        # raises ContextClosed -- and replaced. Where reference counts cannot be
        # trusted for this (free-threaded builds), every agent gets a new one.
        ctx: Context = new(Context)
        ctx._frame = frame
        ctx._out = out
        alone = refcount(ctx) if _REUSE_CONTEXTS else -1
        try:
            for (agent_id, agent), inbox in zip(pairs, boxes, strict=True):
                ctx._id = agent_id
                ctx._inbox = inbox
                ctx._rng = None
                ctx._seq = 0
                result = action(agent, ctx)
                if result is not None:
                    if isinstance(result, Awaitable):
                        run_awaitable(result)  # an async def action: run it to its end here
                    result = None
                if refcount(ctx) != alone:
                    ctx._out = _CLOSED
                    ctx = new(Context)
                    ctx._frame = frame
                    ctx._out = out
        except (UnknownRecipient, UncopyableState):
            raise
        except Exception as exc:
            raise self._failure(agent_id, phase, step, exc) from exc
        finally:
            ctx._out = _CLOSED
        return out

    async def run_async(self, phase: Phase, step: int, phase_index: int,
                        limit: asyncio.Semaphore) -> list[Entry]:
        """Run *phase* with its ``async def`` actions overlapping; return the outbox entries.

        Must run on an event loop. Actions are called in id order; each
        coroutine an action returns becomes a task that holds *limit* while it
        runs, so at most that many are in flight and their awaits (I/O, LLM
        calls) overlap. An action touches only its own agent and its own
        outbox, and outboxes are joined in id order afterwards, so the result
        does not depend on which task finishes first: it equals :meth:`run`'s.

        Raises:
            AgentActionError: Of the lowest agent id whose action raised (its
                coroutine included). When a plain (non-async) action raises, no
                later agent's action is called, as in :meth:`run`; tasks
                already started run to their end first.
            UnknownRecipient: Of the lowest sender, likewise (and
                UncopyableState, for a payload that cannot be copied).
        """
        frame = self._frame(phase, step, phase_index)
        self._ran = (phase.name, step)
        action = phase.action
        get_inbox = self._inbox_getter()
        new = object.__new__
        outs: list[list[Entry]] = []
        tasks: list[tuple[AgentId, asyncio.Task[object]]] = []
        contexts: list[Context] = []
        failures: list[tuple[AgentId, BaseException]] = []
        for agent_id, agent in self._pairs(phase):
            out: list[Entry] = []
            outs.append(out)
            ctx: Context = new(Context)
            ctx._frame = frame
            ctx._id = agent_id
            ctx._inbox = get_inbox(agent_id)
            ctx._out = out
            ctx._rng = None
            ctx._seq = 0
            contexts.append(ctx)
            try:
                result = action(agent, ctx)
            except Exception as exc:
                failures.append((agent_id, exc))
                break
            if result is None:
                ctx._out = _CLOSED
            elif isinstance(result, Awaitable):
                tasks.append((agent_id, asyncio.ensure_future(_limited(limit, result))))
        if tasks:
            await asyncio.wait([task for _, task in tasks])
            for agent_id, task in tasks:
                raised = task.exception()
                if raised is not None:
                    failures.append((agent_id, raised))
        for ctx in contexts:
            ctx._out = _CLOSED
        if failures:
            failed, first = min(failures, key=_first)
            if isinstance(first, UnknownRecipient | UncopyableState) or not isinstance(
                    first, Exception):
                raise first
            raise self._failure(failed, phase, step, first) from first
        return [entry for out in outs for entry in out]

    def _failure(self, agent_id: AgentId, phase: Phase, step: int,
                 exc: BaseException) -> AgentActionError:
        agent = self._agents[agent_id]
        error = AgentActionError(
            f"agent {agent_id!r} ({type(agent).__qualname__}) raised "
            f"{type(exc).__name__} in phase {phase.name!r} at step {step}: {exc}"
        )
        error.agent, error.phase, error.step = agent_id, phase.name, step
        return error

    def deliver(self, messages: Iterable[Entry]) -> int:
        """Replace every inbox with *messages*, appended in the order given; return their number.

        *messages* may hold fan-out entries (see :meth:`run_entries`): each
        goes to every recipient it names. The engine passes them sorted in
        total order; the inboxes of the last boundary are dropped, read or not.

        Raises:
            KernelBug: A message is for an agent not held here (the backend
                routed it wrongly).
        """
        if self._start is not None:
            return self._deliver_to_list(messages, self._start)
        inboxes = _Inboxes()
        get = inboxes.get
        count = 0
        for message in messages:
            recipients: Any = message[3]
            if type(recipients) is tuple:
                count += len(recipients)
                for recipient in recipients:
                    box = get(recipient)
                    if box is None:
                        inboxes[recipient] = [message]
                    else:
                        box.append(message)
            else:
                count += 1
                box = get(recipients)
                if box is None:
                    inboxes[recipients] = [message]
                else:
                    box.append(message)
        if not self._agents.keys() >= inboxes.keys():
            stray = next(r for r in inboxes if r not in self._agents)
            raise KernelBug(f"a message for agent {stray!r} reached a population without it")
        self._inboxes = inboxes
        return count

    def _deliver_to_list(self, messages: Iterable[Entry], start: int) -> int:
        """:meth:`deliver` for consecutive int ids, all held here: inboxes by position."""
        size = len(self._all_ids)
        boxes: list[list[Entry]] = [[] for _ in itertools.repeat(None, size)]
        entries = messages if type(messages) is list else list(messages)
        targets: list[Any] = list(map(_RECIPIENTS, entries))
        if not start and set(map(type, targets)) <= _TUPLE:
            # Only fan-outs (a model that only broadcasts immutable payloads): their
            # recipients were checked against the model's ids when they were sent
            # (Context.broadcast), and the ids are exactly 0..size-1, so they are
            # positions. One loop of appends, as a hand-written model would have.
            fanout: Any
            for fanout in entries:
                for recipient in fanout[3]:
                    boxes[recipient].append(fanout)
            self._inboxes = boxes
            return sum(map(len, targets))
        count = 0
        for message in entries:
            recipients: Any = message[3]
            if type(recipients) is tuple:
                # A fan-out's recipients were checked against the model's ids when it
                # was sent (Context.broadcast), and the ids are exactly 0..size-1 + start.
                count += len(recipients)
                if start:
                    for recipient in recipients:
                        boxes[recipient - start].append(message)
                else:
                    for recipient in recipients:
                        boxes[recipient].append(message)
            else:
                count += 1
                if type(recipients) is not int or not start <= recipients < start + size:
                    raise KernelBug(
                        f"a message for agent {recipients!r} reached a population without it"
                    )
                boxes[recipients - start].append(message)
        self._inboxes = boxes
        return count

    def snapshot(self) -> dict[AgentId, tuple[str, dict[str, Any]]]:
        """Return ``{id: (class qualname, copy of vars(agent))}`` in id order.

        Each state value is copied by the no-sharing rule (immutable values as
        they are, the rest deep-copied), so the snapshot never changes later.

        Raises:
            UncopyableState: A state value cannot be deep-copied (a lock, an
                open file); names the agent, its class, the attribute and the
                last phase and step that ran.
        """
        scalars = _SCALAR_TYPES
        out: dict[AgentId, tuple[str, dict[str, Any]]] = {}
        agent_id: AgentId = 0
        try:
            for agent_id, agent in self._agents.items():
                state = vars(agent)
                for value in state.values():
                    if type(value) not in scalars and not is_immutable(value):
                        state = {key: private_copy(value) for key, value in state.items()}
                        break
                else:
                    state = state.copy()  # every value immutable: a shallow copy is a private one
                out[agent_id] = (type(agent).__qualname__, state)
        except Exception as exc:
            raise snapshot_copy_error(agent_id, self._agents[agent_id], self._ran, exc) from exc
        return out

    def __repr__(self) -> str:
        return f"<Population of {len(self._agents)} agents>"


class _Inboxes(dict[AgentId, list[Entry]]):
    """Inboxes by agent id; an agent without mail has the empty inbox ``()``."""

    __slots__ = ()

    def __missing__(self, key: AgentId) -> tuple[()]:
        return ()


def _first(failure: tuple[AgentId, BaseException]) -> AgentId:
    return failure[0]


async def _limited(limit: asyncio.Semaphore, awaitable: Awaitable[object]) -> object:
    async with limit:
        return await awaitable


# --------------------------------------------------------------------------- async actions
#
# An ``async def`` action returns a coroutine; a backend without its own loop
# runs it to completion right away, on an event loop of the calling thread
# that lives as long as the thread (one loop per thread, made on first use).
# When that thread already runs a loop (a model run from inside async code),
# the coroutine runs on a helper thread's loop instead and this thread waits.

_LOCAL = threading.local()
_HELPER_LOCK = threading.Lock()
_HELPER: list[asyncio.AbstractEventLoop] = []


@final
class _LoopHolder:
    """Owns one thread's event loop; closes it when the thread's locals are dropped."""

    __slots__ = ("loop",)

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __del__(self) -> None:
        if not self.loop.is_running():
            self.loop.close()


def _thread_loop() -> asyncio.AbstractEventLoop:
    holder: _LoopHolder | None = getattr(_LOCAL, "holder", None)
    if holder is None or holder.loop.is_closed():
        holder = _LOCAL.holder = _LoopHolder()
    return holder.loop


def _helper_loop() -> asyncio.AbstractEventLoop:
    with _HELPER_LOCK:
        if not _HELPER:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="simulacra-async-actions",
                                      daemon=True)
            thread.start()
            _HELPER.append(loop)
        return _HELPER[0]


async def _await(awaitable: Awaitable[object]) -> object:
    return await awaitable


def run_awaitable(awaitable: Awaitable[object]) -> object:
    """Run *awaitable* to completion from synchronous code; return its result."""
    coroutine: Coroutine[Any, Any, object] = _await(awaitable)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _thread_loop().run_until_complete(coroutine)
    return asyncio.run_coroutine_threadsafe(coroutine, _helper_loop()).result()

