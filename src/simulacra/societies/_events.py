"""The event-driven engine: observe/act agents on a virtual clock, with lookahead concurrency.

Where the round-based engine moves every agent once per step, this engine
moves each agent when it *wakes*:

* the kernel's queue holds wake-ups and resolutions: the engine owns a keyed
  :class:`~simulacra.Sim`, each entry is one of its events, ordered by
  ``(time, tiebreak)`` (the event's key is ``(NORMAL, "", tiebreak, ...)``).
  The tiebreak is a keyed hash of the run's seed and the entry's identity
  (``wake`` or ``resolve``, the agent, its n-th such entry), never of
  insertion order, so the order does not depend on when an entry was pushed.
  A turn is a kernel process that waits on its resolution event;
* an agent that wakes at ``t`` observes the **live** world at ``t`` (every
  resolution before ``t`` applied), and calls ``act()``. Its model calls take
  *simulated* time, drawn from a latency model (never wall-clock time); its
  action resolves at ``t + d``;
* resolving an action applies its events to the world (under the game
  master's lock, on this one apply loop) and enqueues reactive triggers: an
  event's ``triggers`` (a mention, a reply to someone's post) wake those agents
  now. The acting agent then schedules its own next wake-up;
* an agent woken while its previous turn is still in flight wakes again as
  soon as that turn resolves (wake-ups are coalesced, never lost).

**Lookahead concurrency.** Every turn takes at least the latency model's
``min_duration``. So while the earliest turn in flight woke at ``t0``, nothing
can resolve before ``t0 + min_duration``, and every wake-up before that horizon
can observe and start its model call at once -- in wall-clock parallel, on
threads or on asyncio -- while resolutions still apply in timestamp order. On
the kernel this is a *harvest* event at ``wake + min_duration`` that waits for
the turn's call and schedules its resolution with the resolution's key; a
harvest sorts before every entry at its instant.
The queue order never depends on which call finishes first, so the run is
bit-identical to one that makes one call at a time (``lookahead=False``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import contextlib
import copy
import dataclasses
import functools
import hashlib
import heapq
import inspect
import io
import json
import math
import pickle
import random
import threading
import time as _time
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple, final

from simulacra._util import did_you_mean
from simulacra.agents import ActionEvent, ActionSpec, Actor, AgentId, LLMAgent, World
from simulacra.agents import canonical_line as _canonical_line
from simulacra.core import NORMAL, Sim
from simulacra.errors import AgentActionError, CheckpointError, ConfigError, InvalidAction
from simulacra.rng import SeedTree, as_seed_tree

from ._events_blocking import BlockingAgent
from ._gates import PriorityGate, PriorityPool
from ._kernel_agents import fire_at
from ._rounds import (
    SocietyEngine,
    _check_int,
    agents_digest,
    canonical_mode,
    check_latency,
    deprecated_count,
    gc_paused,
    index_agents,
    misnumbered,
)
from ._scenario import call_in_order, call_on_pool

if TYPE_CHECKING:
    from simulacra.llm import CallSite, Completion, CompletionRequest, LanguageModel

    from ._rounds import TurnTracer
    from ._scenario import SocietyScenario

__all__ = ["EVENTS_SCHEME", "EVENT_MODES", "EventEngine", "EventResult", "WindowReport"]

#: Header of the digests of an event-driven run.
EVENTS_SCHEME: Final = "simulacra.engines.events.v1"
#: How model calls run in wall-clock time.
EVENT_MODES: Final = ("sequential", "threads", "asyncio")

_WAKE: Final = 0
_RESOLVE: Final = 1
#: Key priorities on the kernel's queue, at one instant: harvests of calls in
#: flight first (they schedule resolutions), then scenario changes, then the
#: engine's entries (the kernel's NORMAL, which its own events also use).
_HARVEST: Final = -1
_CHANGE: Final = 0
_TWO_POW_53: Final = 2.0 ** -53
#: Distinct 64-bit constants separating the counter-based draws by purpose.
_PURPOSES: Final = {"first": 0x9E3779B97F4A7C15, "wake": 0xD1B54A32D192ED03}
#: Per agent index, whom it is affected by and whom it affects (World.affected_by).
_Graph = tuple[list[tuple[int, ...]], list[tuple[int, ...]]]
#: No observation given (``_start_turn`` takes one itself).
_UNSEEN: Final = object()
#: Event kinds that do not lengthen a causal chain.
_NON_ACTIONS: Final = frozenset({"idle", "turn_failed"})


@final
@dataclass(frozen=True, slots=True)
class WindowReport:
    """Telemetry of one window of virtual time ``[start, start + width)``.

    Attributes:
        index: The window's number (``start = index * width``).
        start: Its start, in virtual time.
        wakes: Wake-ups that started a turn in it.
        resolved: Turns resolved in it.
        failed: Turns that failed in it.
        events: World events made in it.
        latency_mean: The mean simulated duration of the turns resolved in it.
        latency_max: The longest of them.
        queue_max: The most entries in the queue at once.
        chain_max: The longest causal chain resolved in it: 1 for a turn that
            woke on its own, n + 1 for one woken by an event of a chain of n.
        in_flight_max: The most model calls in flight at once (wall clock).
    """

    index: int
    start: float
    wakes: int = 0
    resolved: int = 0
    failed: int = 0
    events: int = 0
    latency_mean: float = 0.0
    latency_max: float = 0.0
    queue_max: int = 0
    chain_max: int = 0
    in_flight_max: int = 0

    def telemetry(self) -> dict[str, Any]:
        """The window as one JSON object (a line of ``telemetry.jsonl``)."""
        return {"window": self.index, "start": self.start, "wakes": self.wakes,
                "resolved": self.resolved, "failed": self.failed, "events": self.events,
                "latency_mean": round(self.latency_mean, 9),
                "latency_max": round(self.latency_max, 9), "queue_max": self.queue_max,
                "chain_max": self.chain_max, "in_flight_max": self.in_flight_max}


@final
@dataclass(frozen=True, slots=True)
class EventResult:
    """What an event-driven run gives.

    Attributes:
        turns: Turns resolved.
        event_count: How many world events were made (``events`` is the
            same number under its old name, deprecated).
        failed: Turns that failed.
        time: The virtual time of the last resolution.
        events_digest: The running digest of every event, in order.
        world_digest: The world's final state digest.
        agents_digest: The digest of every agent's final ``get_state()``.
        digest: One SHA-256 over all of the above: equal runs, equal digests.
        windows: Per-window telemetry.
        chain_max: The longest causal chain of the run.
        llm_calls: Model calls made.
        peak_in_flight: The most model calls in flight at once (wall clock).
        wall_s: Wall-clock seconds.
    """

    turns: int
    event_count: int
    failed: int
    time: float
    events_digest: str
    world_digest: str
    agents_digest: str
    digest: str
    windows: tuple[WindowReport, ...] = ()
    chain_max: int = 0
    llm_calls: int = 0
    peak_in_flight: int = 0
    wall_s: float = 0.0

    @property
    def events(self) -> int:
        """Deprecated: the count :attr:`event_count` gives."""
        return deprecated_count(self, self.event_count)


class _Window:
    __slots__ = ("chain_max", "events", "failed", "in_flight_max", "latency_max",
                 "latency_sum", "queue_max", "resolved", "wakes")

    def __init__(self) -> None:
        self.wakes = self.resolved = self.failed = self.events = 0
        self.latency_sum = self.latency_max = 0.0
        self.queue_max = self.chain_max = self.in_flight_max = 0

    def report(self, index: int, width: float) -> WindowReport:
        mean = self.latency_sum / self.resolved if self.resolved else 0.0
        return WindowReport(index, index * width, self.wakes, self.resolved, self.failed,
                            self.events, mean, self.latency_max, self.queue_max,
                            self.chain_max, self.in_flight_max)


class _TurnModel:
    """The model an agent sees during a turn: forwards calls and adds up their latency.

    One per agent; a turn's calls run on one worker at a time, so no lock is
    needed for the agent's own total. The latency of each call is drawn from
    a stream keyed by the call site (agent, n): the same whatever the order.
    """

    __slots__ = ("duration", "engine", "inner")

    def __init__(self, engine: EventEngine, inner: LanguageModel) -> None:
        self.engine = engine
        self.inner = inner
        self.duration = 0.0

    def _account(self, request: CompletionRequest, completion: Completion,
                 site: CallSite | None) -> Completion:
        engine = self.engine
        rng = engine._stream("latency", "" if site is None else site.agent,
                             -1 if site is None else site.n)
        self.duration += engine._latency.duration(request, completion, rng)
        with engine._lock:
            engine._calls += 1
            engine._prompt_tokens += completion.prompt_tokens
            engine._completion_tokens += completion.completion_tokens
        return completion

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        return self._account(request, self.inner.complete(request, site=site), site)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self._account(request, await self.inner.acomplete(request, site=site), site)


class _AgentState:
    """The engine's book-keeping for one agent (all of it plain data, for checkpoints)."""

    __slots__ = ("busy", "key", "pending", "resolved", "turns", "wakes", "woke")

    def __init__(self, key: str) -> None:
        self.key = key
        self.woke = 0.0     # when its last turn started (telemetry: calls.jsonl; not state)
        self.turns = 0      # turns started
        self.resolved = 0   # turns resolved (a turn resolves once: idempotent)
        self.wakes = 0      # wake entries pushed (the identity of the next one)
        self.busy = False   # a turn is in flight or waiting to resolve
        self.pending: tuple[str, int] | None = None  # a coalesced wake: (reason, chain)


_sha256 = hashlib.sha256
_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False).encode
_MASK64: Final = (1 << 64) - 1


def _json_line(obj: dict[str, Any]) -> bytes:
    """Canonical JSON (sorted keys, no spaces, shortest float repr) plus a newline.

    Events hold plain JSON data, for which this is canonical and far cheaper
    than the general trace encoding.
    """
    return (_ENCODE(obj) + "\n").encode()


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a bijective 64-bit mix (Steele, Lea and Flood, 2014)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _check_float(name: str, value: object, *, positive: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (positive and value <= 0) or (not positive and value < 0):  # type: ignore[operator]
        bound = "> 0" if positive else ">= 0"
        raise ConfigError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


class EventEngine(SocietyEngine):
    """Runs observe/act agents on a virtual clock: wake, observe live, act, resolve.

    ::

        engine = EventEngine(world, agents, model=ScriptedModel(seed=1),
                             latency=LatencyModel(), mode="threads", concurrency=64)
        result = engine.run(max_turns=20)     # each agent acts 20 times
        result.digest   # the same with lookahead=False, sequentially, on threads, on asyncio

    Args:
        world: The game master that owns the state and resolves actions.
        agents: Objects with ``id``, ``observe``, ``act``, ``get_state``,
            ``set_state`` (the agents of the round-based engine run unchanged).
            An agent may define ``next_wake(now, rng) -> float | None`` to
            schedule its own wake-ups (``None``: no more); by default it wakes
            again after an exponential pause of mean *wake_interval*.
        model: A language model bound to every :class:`~simulacra.agents.LLMAgent`
            (``None``: agents keep their own).
        latency: The latency model: ``duration(request, completion, rng)`` and
            ``min_duration`` (a :class:`simulacra.llm.LatencyModel`). A turn
            takes the sum of its calls' durations, and at least ``min_duration``.
        seed: Master seed of the engine's draws (wake-ups, latency noise, tiebreaks).
        mode: ``"sequential"``, ``"threads"`` or ``"asyncio"``: where model calls run.
        concurrency: Model calls in flight at once.
        lookahead: Start every wake-up inside the lookahead window at once
            (``False``: one turn at a time; the same results, slower).
        wake_interval: Mean pause between an agent's own wake-ups.
        reaction_delay: Virtual time from an event to the wake-up it triggers.
        window: Width of a telemetry window, in virtual time.
        fail_fast: Raise on the first failed turn instead of recording it.
        on_event: Called with each resolved :class:`ActionEvent`, in order.
        on_window: Called with each finished :class:`WindowReport`.
        on_turn: Called with no arguments after each turn resolves (progress bars).
        fatal: Exception types that stop the run when a turn raises them
            (a replay's ``ReplayMiss``), instead of failing that turn.
        dependencies: Where the world names who affects whom
            (:meth:`World.affected_by <simulacra.World.affected_by>`), start a
            turn early, while calls far away are in flight (threads or asyncio,
            with *lookahead*; the same results). ``docs/events.md``, "Early starts".
        out_of_order: With *dependencies*, also commit turns out of timestamp
            order to a forward copy of the world, and start an agent's next
            turns from it while calls far away are still out (``docs/events.md``,
            "Out-of-order commit"). The world's identities must not depend on
            the order of independent turns; the check that guards early starts
            stops a run whose world's do.

    Raises:
        ConfigError: A bad option, duplicate or mixed-type agent ids, or a
            latency model without a positive ``min_duration``; during a run, a
            world whose ``affected_by`` left out an agent that affected a turn
            started early.
    """

    def __init__(self, world: World, agents: Iterable[Actor], *,
                 model: LanguageModel | None = None, latency: Any = None,
                 seed: int | str | bytes | SeedTree | None = 0, mode: str = "threads",
                 concurrency: int = 16, lookahead: bool = True, wake_interval: float = 1.0,
                 reaction_delay: float = 0.0, window: float = 1.0, fail_fast: bool = False,
                 on_event: Callable[[ActionEvent], None] | None = None,
                 on_window: Callable[[WindowReport], None] | None = None,
                 on_turn: Callable[[], None] | None = None,
                 fatal: tuple[type[BaseException], ...] = (),
                 dependencies: bool = True, out_of_order: bool = False) -> None:
        if not isinstance(world, World):
            raise ConfigError(f"world must be a simulacra World, got {type(world).__name__}")
        mode = canonical_mode(mode)  # type: ignore[assignment]
        if mode not in EVENT_MODES:
            raise ConfigError(f"mode must be one of {', '.join(EVENT_MODES)}, got {mode!r}")
        self._concurrency = _check_int("concurrency", concurrency, 1)
        self._wake_interval = _check_float("wake_interval", wake_interval, positive=True)
        self._reaction = _check_float("reaction_delay", reaction_delay, positive=False)
        self._width = _check_float("window", window, positive=True)
        #: What an event's ``step`` holds: its window (this release), or the acting
        #: agent's turn (runs written before ActionEvent.turn; see use_event_step).
        self._event_step = "window"
        self._takes_turn: tuple[bool, bool] | None = None
        self._latency, self._min = check_latency(latency)
        self._world = world
        self._mode = mode
        for name, flag in (("lookahead", lookahead), ("fail_fast", fail_fast),
                           ("dependencies", dependencies), ("out_of_order", out_of_order)):
            if not isinstance(flag, bool):
                raise ConfigError(
                    f"{name} must be true or false, got {type(flag).__name__} {flag!r}")
        if out_of_order and not dependencies:
            raise ConfigError("out_of_order needs dependencies: it commits turns ahead where the "
                              "world names who affects whom (dependencies=True)")
        self._lookahead = lookahead
        self._fail_fast = fail_fast
        #: Start turns early where the world names who affects whom (affected_by).
        self._dependencies = dependencies
        #: Commit turns ahead of the kernel to a forward world (_Forward), or not.
        self._out_of_order = out_of_order
        #: The forward world and its book-keeping, made when a run starts (None: none
        #: yet, or thrown away by restore() or a scenario).
        self._fwd: _Forward | None = None
        #: Turns started early so far (telemetry, not state: the run is the same without).
        self.early_starts = 0
        #: Turns committed to the forward world before the kernel reached them
        #: (out_of_order; telemetry, not state).
        self.committed_ahead = 0
        #: Turns whose calls were still in flight at the end of a ``run(drain=False)``,
        #: carried into the next (telemetry, not state).
        self.carried = 0
        self._calls_reported = 0  # self._calls as the last run()'s result counted them
        #: Why a run() raised (its state is cut mid-way: state() refuses), or None.
        self._stopped: str | None = None
        #: Turns started early whose time no run has reached yet, with their outcomes
        #: (state: kept by a run that ended, or a checkpoint, for a later run to adopt).
        self._stashed: dict[AgentId, _Early] = {}
        self._graph: _Graph | bool | None = False  # False: not asked yet
        self._index: dict[AgentId, int] = {}  # an agent's place in _ids (the graph's)
        self._on_event = on_event
        self._on_window = on_window
        self._on_turn = on_turn
        self._fatal = tuple(fatal)
        self._seed = as_seed_tree(seed)
        self._key = self._seed.child("simulacra.engines.events").seed.to_bytes(16, "big")
        self._agents: dict[AgentId, Actor] = index_agents(agents)
        self._ids: list[AgentId] = list(self._agents)
        self._by_key = {str(agent_id): agent_id for agent_id in self._ids}
        self._book = {agent_id: _AgentState(str(agent_id)) for agent_id in self._ids}
        self._choosers: dict[AgentId, Callable[[float, random.Random], float | None]] = {}
        for agent_id, agent in self._agents.items():
            chooser = getattr(agent, "next_wake", None)
            if callable(chooser):
                self._choosers[agent_id] = chooser
        self._salts: dict[str, int] = {}
        self._model = model
        self._observed: Any = None
        self._blocking: dict[AgentId, BlockingAgent] = {
            agent_id: agent for agent_id, agent in self._agents.items()
            if isinstance(agent, BlockingAgent)}
        if self._blocking and model is None:
            first = next(iter(self._blocking))
            raise ConfigError(f"blocking agent {first!r} needs a model: EventEngine(model=...)")
        self._turn_models: dict[AgentId, _TurnModel] = {}
        for agent_id, agent in self._agents.items():
            if isinstance(agent, LLMAgent):
                inner = model if model is not None else agent.model
                if inner is not None:
                    turn_model = _TurnModel(self, inner)
                    self._turn_models[agent_id] = turn_model
                    agent.bind(turn_model)
        self._lock = threading.Lock()
        self._calls = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        # The queue is the kernel's: every entry (time, tiebreak, kind, agent key, n,
        # payload) is an event of this keyed Sim, keyed (NORMAL, "", tiebreak, kind,
        # agent key, n). _entries holds the entries not yet processed, by identity.
        self._sim = Sim(ordering="keyed")
        self._entries: dict[tuple[int, str, int], tuple[float, int, int, str, int, Any]] = {}
        self._runner: _Runner | None = None
        #: Each agent's model calls when its turn in flight started, and per window
        #: the turns that asked the model nothing (state: checkpointed beside it).
        self._calls_at_start: dict[str, int] = {}
        #: The same for an agent's later turns, started out of order before it resolved.
        self._calls_next: dict[str, list[int]] = {}
        self._quiet: dict[int, int] = {}
        self._harvests = 0
        self._scenario_at: float | None = None
        #: Wake-ups of agents that had used up max_turns, for the next run().
        self._parked: list[tuple[float, int, int, str, int, Any]] = []
        self._now = 0.0
        self._started = False
        self._turns = self._events = self._failed = 0
        #: The running digest of the events: a hash chain, so it can be checkpointed.
        self._digest = hashlib.sha256((EVENTS_SCHEME + ":events\n").encode("ascii")).digest()
        self._windows: dict[int, _Window] = {}
        self._window_index = -1
        self._window_now = _Window()
        self._reported = 0
        self._chain_max = 0
        self._peak = 0
        self._scenario: SocietyScenario | None = None
        #: The tracer of ``run.trace.otel`` (a :class:`~simulacra.societies.TurnTracer`),
        #: or None: spans of windows, turns and (through the model) calls.
        self.tracer: TurnTracer | None = None
        #: The last window whose span the tracer was told of (telemetry, not state).
        self._traced_window = -1

    def use_event_step(self, meaning: str) -> None:
        """Say what an event's ``step`` holds: ``"window"`` (the default) or ``"turn"``.

        ``"turn"`` is how runs written before :attr:`ActionEvent.turn` stamped their
        events (the acting agent's turn number in ``step``); a replay or resume of
        such a run directory uses it, so that it ends on the digest it was made with.
        """
        if meaning not in ("window", "turn"):
            raise ConfigError(f"an event's step is its 'window' or its 'turn', got {meaning!r}")
        self._event_step = meaning

    def use_scenario(self, scenario: SocietyScenario | None) -> None:
        """Apply *scenario*'s changes at their virtual times.

        Call it before :meth:`run` and :meth:`restore`. A change goes before
        any wake-up or resolution at its time.
        """
        self._scenario = scenario
        self._fwd = None  # out of order: a world that scenarios change is not copied

    # -- properties (world, agents, mode: SocietyEngine) ------------------------------

    @property
    def now(self) -> float:
        """The virtual time of the last entry processed."""
        return self._now

    # -- keyed draws -------------------------------------------------------------------

    def _tiebreak(self, kind: int, agent: str, n: int) -> int:
        """The seeded tiebreak of entry (kind, agent, n): a keyed hash, not an insertion count.

        Each agent's 64-bit salt is a keyed BLAKE2b of the run's seed and the
        agent's id; the entry's key mixes it with (n, kind) through
        SplitMix64's bijective finaliser, so keys of one agent never collide.
        """
        salt = self._salts.get(agent)
        if salt is None:
            salt = self._salts[agent] = int.from_bytes(hashlib.blake2b(
                agent.encode(), key=self._key, digest_size=8, person=b"tiebreak").digest(),
                "big")
        return _mix64(salt ^ ((n << 1) | kind))

    def _stream(self, purpose: str, agent: str, n: int) -> random.Random:
        data = f"{purpose}\x1f{agent}\x1f{n}".encode()
        return random.Random(int.from_bytes(
            hashlib.blake2b(data, key=self._key, digest_size=16).digest(), "big"))

    def _uniform(self, purpose: str, agent: str, n: int) -> float:
        """One draw in [0, 1) keyed by (purpose, agent, n): cheaper than a stream.

        The agent's seeded salt (see :meth:`_tiebreak`) is mixed with the
        purpose and n through SplitMix64 twice: a counter-based generator.
        """
        salt = self._salts.get(agent)
        if salt is None:
            self._tiebreak(0, agent, 0)
            salt = self._salts[agent]
        bits = _mix64(_mix64(salt ^ _PURPOSES[purpose]) ^ n)
        return (bits >> 11) * _TWO_POW_53

    def _pause(self, purpose: str, agent: str, n: int) -> float:
        """An exponential pause of mean wake_interval, keyed by (purpose, agent, n)."""
        return -math.log(1.0 - self._uniform(purpose, agent, n)) * self._wake_interval

    def _push(self, when: float, kind: int, agent: str, n: int, payload: Any) -> None:
        self._schedule((when, self._tiebreak(kind, agent, n), kind, agent, n, payload))

    def _schedule(self, entry: tuple[float, int, int, str, int, Any]) -> None:
        """Put *entry* on the kernel's queue: a wake-up event, or a turn's resolution."""
        when, tiebreak, kind, agent, n, _ = entry
        sim = self._sim
        self._entries[kind, agent, n] = entry
        key = (NORMAL, "", tiebreak, kind, agent, n)
        if kind == _WAKE:
            fire_at(sim, when, key, entry, callback=self._on_wake)
        else:  # a resolution read back from a checkpoint: its turn's process waits on it
            event = sim.event()
            sim.spawn(self._turn(event), name=f"turn {agent} {n}")
            fire_at(sim, when, key, entry, event=event)

    def _schedule_harvest(self, when: float, callback: Callable[..., None]) -> None:
        """Call *callback* at *when*, before every entry at that time."""
        self._harvests += 1
        fire_at(self._sim, when, (_HARVEST, "", self._harvests), callback=callback)

    def _schedule_act(self, flight: _Flight, when: float, outcome: tuple[bool, Any, float]
                      ) -> None:
        """Schedule a turn's resolution: its act event, keyed as the resolve entry."""
        spec = flight.spec
        key = self._book[flight.agent].key
        entry = (when, self._tiebreak(_RESOLVE, key, spec.step), _RESOLVE, key, spec.step,
                 (spec, outcome, flight.chain))
        self._entries[_RESOLVE, key, spec.step] = entry
        fire_at(self._sim, when, (NORMAL, "", entry[1], _RESOLVE, key, spec.step), entry,
                event=flight.act)

    def _end_turn(self, act: Any) -> None:
        """End a turn's process with no resolution (a blocking agent's function returned)."""
        self._harvests += 1
        fire_at(self._sim, self._sim.now, (_HARVEST, "r", self._harvests), event=act)

    def _note_queue(self, window: _Window) -> None:
        """Keep *window*'s deepest queue: the entries waiting, this one included."""
        queued = self._queued()
        if queued >= window.queue_max:
            window.queue_max = queued + 1

    def _queued(self) -> int:
        """Entries waiting: those scheduled, and the resolutions of the turns in flight.

        A turn in flight has a resolution whether or not its call has returned, so
        the count is the same in every mode (sequential schedules it at once).
        """
        runner = self._runner
        return len(self._entries) + (0 if runner is None else len(runner.flight))

    def _turn(self, act: Any) -> Any:
        """A turn, as a process of the kernel: wait for the resolution, then resolve."""
        entry = yield act
        if entry is None:
            return
        when, _, _, key, n, (spec, outcome, chain) = entry
        del self._entries[_RESOLVE, key, n]
        self._now = when
        self._note_queue(self._window(when))
        self._resolve(self._by_key[key], when, spec, outcome, chain)
        self._flush_windows(final=False)

    def _on_wake(self, event: Any) -> None:
        """A wake-up entry's time has come: start the agent's turn (or coalesce, or park)."""
        entry = event._value
        when, _, kind, key, n, payload = entry
        del self._entries[kind, key, n]
        self._now = when
        agent_id = self._by_key[key]
        window = self._window(when)
        self._note_queue(window)
        reason, chain = payload
        runner = self._runner
        assert runner is not None  # noqa: S101  (entries run inside run())
        if runner.early and agent_id in runner.early:
            runner.adopt(agent_id, entry, window, chain + 1)
            return
        book = self._book[agent_id]
        if book.busy:  # coalesce: it wakes again when its turn resolves
            if book.pending is None or chain > book.pending[1]:
                book.pending = (reason, chain)
            return
        if not runner.admissible(agent_id):
            self._parked.append(entry)  # woken again by a later run() with more turns
            return
        spec = self._start_turn(agent_id, when, reason)
        window.wakes += 1
        # The turn's causal chain: one longer than the event that woke it.
        runner.start(agent_id, when, spec, chain + 1)

    def _schedule_scenario(self) -> None:
        """Put the scenario's next change on the queue (before every entry at its time)."""
        scenario = self._scenario
        if scenario is None:
            return
        at = scenario.next_time()
        if not math.isfinite(at) or self._scenario_at == at:
            return
        self._scenario_at = at
        self._harvests += 1
        fire_at(self._sim, max(at, self._sim.now), (_CHANGE, "", self._harvests),
                callback=self._on_scenario)

    def _on_scenario(self, _: object) -> None:
        self._scenario_at = None
        runner = self._runner
        self._apply_scenario(math.inf, None if runner is None else runner.pool)
        self._schedule_scenario()

    def _wake(self, agent_id: AgentId, when: float, reason: str, chain: int) -> None:
        book = self._book[agent_id]
        n = book.wakes
        book.wakes = n + 1
        self._push(when, _WAKE, book.key, n, (reason, chain))

    def _own_wake(self, agent_id: AgentId, now: float, turns: int) -> None:
        """Push *agent_id*'s own next wake-up after its turn *turns* - 1 resolved at *now*."""
        book = self._book[agent_id]
        chooser = self._choosers.get(agent_id)
        if chooser is not None:
            when = chooser(now, self._stream("wake", book.key, turns))
            if when is None:
                return
            valid: object = when
            if not isinstance(valid, int | float) or not when >= now:
                raise ConfigError(
                    f"agent {agent_id!r}: next_wake() must return a time >= now ({now}) or "
                    f"None, got {when!r}")
            self._wake(agent_id, float(when), "wake", 0)
        else:
            self._wake(agent_id, now + self._pause("wake", book.key, turns), "wake", 0)

    def _open_window(self, index: int) -> None:
        """Tell the tracer that window *index* has begun (once; it has one, or nothing).

        A run's cut includes its end: ``run(until=t)`` processes what is due at
        ``t`` itself, the first instant of the next window. A turn or a
        scenario change there opens that window's span, and the window's own
        ``step_started`` finds it open.
        """
        tracer = self.tracer
        if tracer is not None and index > self._traced_window:
            self._traced_window = index
            tracer.step_started(index, index * self._width)

    def _window(self, when: float) -> _Window:
        index = int(when // self._width)
        if index == self._window_index:
            return self._window_now
        window = self._windows.get(index)
        if window is None:
            window = self._windows[index] = _Window()
        self._window_index, self._window_now = index, window
        return window

    def _exhausted(self, limit: int | None) -> bool:
        """Whether :meth:`run` with *limit* could do nothing more, however far it ran.

        It has started, no entry is queued (a wake-up, or a resolution of a
        turn that ran), no turn is in flight, no scenario change is to come,
        and every parked wake-up is of an agent that *limit* keeps parked.
        What is left on the kernel's queue then is inert: harvests of turns
        that were finished at the end of a run, ends of retired agents' turns.
        """
        if not self._started or self._entries or self._runner is not None or self._stashed:
            return False
        scenario = self._scenario
        if scenario is not None and math.isfinite(scenario.next_time()):
            return False
        if not self._parked:
            return True
        book, by_key = self._book, self._by_key
        return limit is not None and all(book[by_key[entry[3]]].turns >= limit
                                         for entry in self._parked)

    # -- running -----------------------------------------------------------------------

    def run(self, *, max_turns: int | None = None, until: float | None = None,
            drain: bool = True, early_until: float | None = None) -> EventResult:
        """Run until every agent has had *max_turns* turns, or virtual time *until*.

        At least one of the two must be given. A second call continues the run.
        Cutting a run at a virtual time and continuing it gives exactly the
        uncut run (``run(until=5); run(until=10)`` equals ``run(until=10)``);
        *max_turns* is not a cut in time -- agents that reach it stop while
        others go on -- so a later call with a higher *max_turns* wakes them
        again from where they stopped, but is not the same run as one with
        the higher limit from the start.

        With *drain* (the default) the run ends once every turn in flight has
        its outcome, and :meth:`state` may be called. ``drain=False`` leaves the
        calls of turns that resolve after *until* in flight: the next call goes
        on with them (the same run; only wall-clock time differs), and
        :meth:`drain` or :meth:`state` waits for them; the result of such a
        call has empty world, agents and run digests (agents still acting on
        other threads have no digest yet), and its events digest. *early_until* (at least
        *until*) lets turns start early (``World.affected_by``) up to that time
        rather than *until*: a later call that runs past it adopts them, and a
        turn started early whose time the run did not reach is kept, with its
        outcome, in :meth:`state`. The caller promises to run to *early_until*
        before the run's end (a run must not end with an agent that acted
        beyond it): until then the agents (their digest, their states in
        :meth:`state`) include the turns they started early beyond *until*,
        and a resumed run adopts those turns rather than acting them again.

        Raises:
            ConfigError: Neither limit, or a bad one.
            AgentActionError: A turn failed and *fail_fast* is set.
        """
        if max_turns is None and until is None:
            raise ConfigError("run(): give max_turns (per agent), until (virtual time), or both")
        limit = None if max_turns is None else _check_int("max_turns", max_turns, 1)
        horizon = math.inf if until is None else _check_float("until", until, positive=False)
        if not isinstance(drain, bool):
            raise ConfigError(f"drain must be true or false, got {type(drain).__name__} "
                              f"{drain!r}")
        if early_until is not None:
            early_until = _check_float("early_until", early_until, positive=False)
        if limit is not None:  # a turn started early under a higher limit cannot be undone
            pending = [*_all_early(self._stashed),
                       *(() if self._runner is None else _all_early(self._runner.early))]
            over = sorted((e for e in pending if e.spec.step >= limit),
                          key=lambda e: e.entry[:2])
            if over:
                raise ConfigError(
                    f"run(max_turns={limit}): turn {over[0].spec.step} of agent "
                    f"{over[0].entry[3]!r} started early under an earlier run's max_turns "
                    f"(at t={over[0].when:.6g}); a later run cannot lower max_turns below it")
        start = _time.perf_counter()
        parked, self._parked = self._parked, []
        now = self._sim.now
        for entry in parked:  # agents that used up an earlier max_turns
            if limit is None or self._book[self._by_key[entry[3]]].turns < limit:
                # Woken again now if its time has passed (the clock never goes back).
                self._schedule((max(entry[0], now), *entry[1:]))
            else:
                self._parked.append(entry)
        if not self._started:
            self._started = True
            for agent_id in self._ids:
                self._wake(agent_id, self._pause("first", self._book[agent_id].key, 0), "wake", 0)
        self._schedule_scenario()
        runner = self._runner
        if runner is None:
            runner = self._runner = _Runner(self, limit, horizon)
            runner.early.update(self._stashed)  # turns started early, kept by a run before
            self._stashed.clear()
            if runner.graph is not None:  # out of order: the forward world, before any call
                self._forward()
        else:  # held by the run before (drain=False): its calls in flight go on
            runner.limit, runner.until = limit, horizon
        runner.early_limit = horizon if early_until is None else max(horizon, early_until)
        held = ended = False
        try:
            runner.loop()
            held = not drain and bool(runner.flight or runner.early)
            if held:
                for flight in runner.flight.values():
                    if not flight.carried:  # a turn, once, however many window ends it spans
                        flight.carried = True
                        self.carried += 1
            else:
                runner.finish_all()
                runner.stash()
                self._raise_fatal()
            ended = True
        except BaseException as exc:
            # Its turns and the kernel are cut where the error came: no state to take.
            self._stopped = f"{type(exc).__name__}: {exc}"[:200]
            raise
        finally:
            if not held:
                self._runner = None
                if not ended:  # an error: what was started early is given up
                    runner.early.clear()
                runner.close()
        self._flush_windows(final=True)
        with self._lock:  # the calls that returned since the last run() (between runs too)
            calls, self._calls_reported = (self._calls - self._calls_reported, self._calls)
        return self._result(_time.perf_counter() - start, calls, digests=not held)

    def _counts(self) -> tuple[int, int, int]:
        """(model calls, prompt tokens, completion tokens) returned so far."""
        with self._lock:
            return self._calls, self._prompt_tokens, self._completion_tokens

    def drain(self) -> None:
        """Wait for the calls a ``run(drain=False)`` left in flight (if any).

        Their turns' resolutions are scheduled, as a run with *drain* would have.
        """
        runner = self._runner
        if runner is not None:
            try:
                runner.finish_all()
                runner.stash()
            finally:
                self._runner = None
                runner.close()
        self._raise_fatal()

    def _raise_fatal(self) -> None:
        """Raise the fatal error (*fatal*) of a turn whose outcome is known but not reached.

        A turn that a budget refused, or a replay could not serve, stops the run
        when the kernel reaches its resolution. One still ahead of the kernel
        where a run returns (its calls carried on, or it started early) stops
        it there: no checkpoint may hold it, and no run may end with it.
        """
        fatal = self._fatal
        if not fatal:
            return
        found: list[tuple[tuple[float, int], BaseException]] = []
        for entry in self._entries.values():
            if entry[2] == _RESOLVE:
                ok, action, _ = entry[5][1]
                if not ok and isinstance(action, fatal):
                    found.append(((entry[0], entry[1]), action))
        for early in _all_early(self._stashed):  # stash() waited for their calls
            ok, action, _ = early.future.result()
            if not ok and isinstance(action, fatal):
                found.append(((early.entry[0], early.entry[1]), action))
        if found:
            raise min(found, key=lambda item: item[0])[1]

    def abandon(self) -> None:
        """Stop what a ``run(drain=False)`` left in flight, without its outcomes (if any).

        For a run that is being given up on (an error).
        """
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.close()

    # -- early starts (World.affected_by) ---------------------------------------------

    def _dependency_graph(self) -> _Graph | None:
        """``(affected_by, affects)`` per agent index (``_ids``), from the world, or None.

        Asked once, at the first run that could start turns early. None when
        early starts are off (``dependencies=False``, ``lookahead=False``, the
        sequential mode) or the world answers None for every agent. An agent
        answered None is taken to be affected by every other agent.

        Raises:
            ConfigError: ``affected_by`` returned something other than None or
                a collection of the engine's agent ids.
        """
        graph = self._graph
        if graph is not False:
            return graph  # type: ignore[return-value]
        self._graph = None
        if not (self._dependencies and self._lookahead and self._mode != "sequential"):
            return None
        world = self._world
        if type(world).affected_by is World.affected_by:
            return None
        known = self._book
        affected: dict[AgentId, tuple[AgentId, ...]] = {}
        unknown: list[AgentId] = []  # answered None: affected by anyone, as far as we know
        for agent_id in self._ids:
            named = world.affected_by(agent_id)
            if named is None:
                unknown.append(agent_id)
                continue
            if isinstance(named, (str, bytes)) or not hasattr(named, "__iter__"):
                raise ConfigError(
                    f"{type(world).__name__}.affected_by({agent_id!r}) must return None or a "
                    f"collection of agent ids, got {type(named).__name__} {named!r}"[:300])
            others = []
            for other in named:
                if isinstance(other, bool) or not isinstance(other, int | str):
                    raise ConfigError(
                        f"{type(world).__name__}.affected_by({agent_id!r}) must return agent "
                        f"ids (int or str), got {type(other).__name__} {other!r} in it"[:300])
                if other not in known:
                    raise ConfigError(
                        f"{type(world).__name__}.affected_by({agent_id!r}) names {other!r}, "
                        f"which is not an agent of this run"
                        f"{did_you_mean(str(other), [str(a) for a in self._ids])}")
                if other != agent_id:
                    others.append(other)
            affected[agent_id] = tuple(sorted(set(others), key=str))
        if len(unknown) == len(self._ids):
            return None
        for agent_id in unknown:  # every other agent: a superset, which is always safe
            affected[agent_id] = tuple(a for a in self._ids if a != agent_id)
        index = self._index = {agent_id: i for i, agent_id in enumerate(self._ids)}
        by_index = [tuple(index[a] for a in affected[agent_id]) for agent_id in self._ids]
        affects: list[list[int]] = [[] for _ in self._ids]
        for i, sources in enumerate(by_index):
            for source in sources:
                affects[source].append(i)
        graph = self._graph = (by_index, [tuple(e) for e in affects])
        return graph

    def _forward(self) -> _Forward | None:
        """The forward world (``out_of_order``), made now if it may be; or None."""
        fwd = self._fwd
        if fwd is None and self._out_of_order and self._scenario is None and self._graph:
            fwd = self._fwd = _Forward(self._world, len(self._ids))
        return fwd

    def _commit_forward(self, fwd: _Forward, agent_id: AgentId, when: float, spec: ActionSpec,
                        outcome: tuple[bool, Any, float]) -> tuple[tuple[str, str], ...]:
        """Resolve a turn in the forward world, as :meth:`_resolve` does in the world.

        Returns ``(key, event kind)`` of each wake-up its events give other agents, in
        the order the kernel gives them.
        """
        ok, action, _ = outcome
        world = fwd.world
        with world.lock:
            events, _ = self._apply_turn(world, agent_id, when, spec, action=action,
                                         failure=None if ok else action, fail_fast=False)
        i = self._index[agent_id]
        fwd.last[i] = when
        if fwd.as_of:
            times = fwd.times[i]
            times.append(when)
            while times[0] < self._now:
                times.popleft()
        key = self._book[agent_id].key
        return tuple((t, e.kind) for e in events for t in e.triggers
                     if t != key and t in self._by_key)

    # -- turns -------------------------------------------------------------------------

    def _start_turn(self, agent_id: AgentId, when: float, reason: str,
                    observation: Any = _UNSEEN) -> ActionSpec:
        """Start *agent_id*'s turn woken at *when*: its book-keeping and its observation.

        An early start passes the *observation* it has already taken (and pickled).
        """
        book = self._book[agent_id]
        spec = ActionSpec(book.turns, when, reason)
        calls = int(getattr(self._agents[agent_id], "calls", 0) or 0)
        if book.key in self._calls_at_start:  # a turn started ahead of its previous one's end
            self._calls_next.setdefault(book.key, []).append(calls)
        else:
            self._calls_at_start[book.key] = calls
        book.turns += 1
        book.busy = True
        book.woke = when
        turn_model = self._turn_models.get(agent_id)
        if turn_model is not None:
            turn_model.duration = 0.0
        tracer = self.tracer
        if tracer is not None:  # the turn's span: its observation, act() and calls
            index = int(when // self._width)
            self._open_window(index)
            tracer.turn_started(book.key, index, when, spec.step)
        if observation is _UNSEEN:
            observation = self._world.observation_for(agent_id, None)
        live = _live_part(observation, self._world)
        if live is not None:
            raise ConfigError(
                f"{type(self._world).__name__}.observation_for({agent_id!r}): {live}; return a "
                "copy (a list, a tuple, a dict of copies): on a worker thread the agent would "
                "read what later turns change, and a threaded run would differ from a "
                "sequential one")
        if agent_id in self._blocking:
            self._observed = observation
        else:
            self._observe(agent_id, observation)
        return spec

    def _observe(self, agent_id: AgentId, observation: Any) -> None:
        """Hand the agent its observation (a sharded engine sends it where the agent acts)."""
        self._agents[agent_id].observe(observation)

    def _act(self, agent_id: AgentId, spec: ActionSpec) -> tuple[bool, Any, float]:
        try:
            action = self._agents[agent_id].act(spec)
            ok = True
        except Exception as exc:
            action, ok = exc, False
        if self.tracer is not None:
            self._turn_traced(agent_id, ok, action)
        return ok, action, self._turn_duration(agent_id)

    async def _aact(self, agent_id: AgentId, spec: ActionSpec) -> tuple[bool, Any, float]:
        agent = self._agents[agent_id]
        try:
            if isinstance(agent, LLMAgent):
                action = await agent.aact(spec)
            else:
                action = await asyncio.to_thread(agent.act, spec)
            ok = True
        except Exception as exc:
            action, ok = exc, False
        if self.tracer is not None:
            self._turn_traced(agent_id, ok, action)
        return ok, action, self._turn_duration(agent_id)

    def _turn_traced(self, agent_id: AgentId, ok: bool, outcome: Any) -> None:
        """The turn's act() returned (*ok*) or raised *outcome*: its span ends (on the worker).

        Called only with a tracer (its callers check, so an untraced turn makes no call).
        """
        tracer = self.tracer
        assert tracer is not None  # noqa: S101
        tracer.turn_ended(self._book[agent_id].key, ok,
                          None if ok or not isinstance(outcome, BaseException) else outcome)

    def _turn_duration(self, agent_id: AgentId) -> float:
        turn_model = self._turn_models.get(agent_id)
        duration = 0.0 if turn_model is None else turn_model.duration
        return max(self._min, duration)

    def _resolve(self, agent_id: AgentId, when: float, spec: ActionSpec,
                 outcome: tuple[bool, Any, float], chain: int) -> None:
        ok, action, duration = outcome
        book = self._book[agent_id]
        if spec.step < book.resolved:  # resolved already: resolution is idempotent
            return
        book.resolved = spec.step + 1
        runner = self._runner
        if runner is not None and runner.early:
            runner.resolved.append(agent_id)
        world = self._world
        failure: BaseException | None = None if ok else action
        if failure is not None and isinstance(failure, self._fatal):
            raise failure
        with world.lock:
            expected = world.events
            events, failure = self._apply_turn(world, agent_id, when, spec, action=action,
                                               failure=failure, fail_fast=self._fail_fast)
            for event in events:
                if event.index != expected:
                    raise misnumbered(world, event, expected)
                expected += 1
        fwd = self._fwd
        # The forward world has it too: committed ahead, or now.
        if fwd is not None and fwd.ahead.pop((book.key, spec.step), None) is None:
            self._commit_forward(fwd, agent_id, when, spec, outcome)
        window = self._window(when)
        window.resolved += 1
        start = self._calls_at_start.pop(book.key, None)
        later = self._calls_next.get(book.key)
        if later:  # its next turn started out of order: its calls began where this one's ended
            end = self._calls_at_start[book.key] = later.pop(0)
            if not later:
                del self._calls_next[book.key]
        else:
            end = int(getattr(self._agents[agent_id], "calls", 0) or 0)
        if start is not None and end == start:
            index = int(when // self._width)
            self._quiet[index] = self._quiet.get(index, 0) + 1
        window.latency_sum += duration
        window.latency_max = max(window.latency_max, duration)
        if chain > window.chain_max and any(e.kind not in _NON_ACTIONS for e in events):
            # A turn that only idled or failed ends a chain without lengthening it.
            window.chain_max = chain
            self._chain_max = max(self._chain_max, chain)
        self._turns += 1
        if failure is not None:
            window.failed += 1
            self._failed += 1
        for event in events:
            self._record(event)
            window.events += 1
            for target in event.triggers:
                target_id = self._by_key.get(target)
                if target_id is not None and target_id != agent_id:
                    runner = self._runner
                    if (runner is not None and target_id in runner.early
                            and not runner.busy_in_kernel(target_id)):
                        if runner.foreseen(target_id, when + self._reaction, event.kind, chain):
                            # The wake-up its turn started early was predicted with.
                            self._wake(target_id, when + self._reaction, event.kind, chain)
                            continue
                        runner.check_trigger(agent_id, target_id, when + self._reaction)
                    self._trigger(target_id, when + self._reaction, event.kind, chain)
        if self._on_turn is not None:
            self._on_turn()
        book = self._book[agent_id]
        # Not busy, unless its next turn started early, out of order, before this one resolved.
        book.busy = book.turns > spec.step + 1
        if book.pending is not None:
            reason, pending_chain = book.pending
            book.pending = None
            self._wake(agent_id, when, reason, pending_chain)
        else:
            self._own_wake(agent_id, when, spec.step + 1)

    def _apply_turn(self, world: World, agent_id: AgentId, when: float, spec: ActionSpec, *,
                    action: Any, failure: BaseException | None, fail_fast: bool
                    ) -> tuple[list[ActionEvent], BaseException | None]:
        """Resolve a turn in *world* (the world, or the forward one): its events, and its failure.

        The caller holds ``world.lock``. A turn that failed, or whose action the world
        refused (InvalidAction), makes the world's ``failed`` event, or with
        *fail_fast* raises AgentActionError.
        """
        if self._event_step == "window":
            step, turn = int(when // self._width), spec.step
        else:  # a run directory written before ActionEvent.turn: as it was made
            step, turn = spec.step, None
        takes = self._takes_turn
        if takes is None:  # a world that overrides resolve()/failed() may not take turn=
            takes = self._takes_turn = (_accepts(world.resolve, "turn"),
                                        _accepts(world.failed, "turn"))
        events: list[ActionEvent] = []
        if failure is None:
            try:
                events = (world.resolve(agent_id, action, step=step, time=when, turn=turn)
                          if turn is not None and takes[0] else
                          world.resolve(agent_id, action, step=step, time=when))
            except InvalidAction as exc:
                failure = exc
        if failure is not None:
            if fail_fast:
                error = AgentActionError(
                    f"agent {agent_id!r} failed in turn {spec.step} at t={spec.time}: "
                    f"{type(failure).__name__}: {failure}")
                error.agent, error.step, error.phase = agent_id, spec.step, "act"
                raise error from failure
            events = [world.failed(agent_id, failure, step=step, time=when, turn=turn)
                      if turn is not None and takes[1] else
                      world.failed(agent_id, failure, step=step, time=when)]
        if turn is not None and not all(takes):  # stamped here, as resolve() would
            events = [e if e.turn is not None else dataclasses.replace(e, turn=turn)
                      for e in events]
        return events, failure

    def _apply_scenario(self, until: float, pool: cf.Executor | None) -> None:
        """Apply the scenario's changes due at the next change's time (at most *until*)."""
        scenario = self._scenario
        if scenario is None:
            return
        at = scenario.next_time()
        if at > until:
            return
        self._now = max(self._now, at)
        model = self._model
        turn_models = self._turn_models
        agents = self._agents

        def model_of(agent_id: AgentId) -> Any:
            if model is not None:
                return model
            turn_model = turn_models.get(agent_id)
            return (turn_model.inner if turn_model is not None
                    else getattr(agents[agent_id], "model", None))

        def counted(requests: list[Any]) -> list[Any]:
            answers = (call_in_order(model_of) if pool is None
                       else call_on_pool(pool, model_of))(requests)
            with self._lock:
                for answer in answers:
                    if not isinstance(answer, BaseException):
                        self._calls += 1
                        self._prompt_tokens += answer.prompt_tokens
                        self._completion_tokens += answer.completion_tokens
            return answers

        window = self._window(at)
        if self.tracer is not None:  # its interviews' calls: children of its window's span
            self._open_window(int(at // self._width))
        events = scenario.apply_due(self._world, agents, at, step=int(at // self._width),
                                    time=lambda change: change.time, call=counted,
                                    fatal=self._fatal)
        for event in events:
            self._record(event)
            window.events += 1
            for target in event.triggers:
                target_id = self._by_key.get(target)
                if target_id is not None:
                    self._trigger(target_id, event.time + self._reaction, event.kind, 0)

    def _trigger(self, agent_id: AgentId, when: float, reason: str, chain: int) -> None:
        book = self._book[agent_id]
        if book.busy:
            if book.pending is None or chain > book.pending[1]:
                book.pending = (reason, chain)
            return
        self._wake(agent_id, when, reason, chain)

    def _record(self, event: ActionEvent) -> None:
        self._events += 1
        self._digest = _sha256(self._digest + _json_line(event.to_json())).digest()
        if self._on_event is not None:
            self._on_event(event)

    def _flush_windows(self, *, final: bool) -> None:
        if self._on_window is None:
            return
        current = int(self._now // self._width)
        if not final and current <= self._reported:
            return
        for index in sorted(self._windows):
            if index < self._reported or (index >= current and not final):
                continue
            self._on_window(self._windows[index].report(index, self._width))
            self._reported = index + 1

    # -- checkpoints --------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs, as data: call it between two :meth:`run` calls.

        It holds the virtual clock; the pending queue (wake-ups, and the
        resolutions of calls that had finished, with their actions); every
        agent's ``get_state()`` (which includes its model-call count: its
        position in the LLM recordings) and the engine's book-keeping of it;
        the world's ``get_state()``; the running event digest and counters.
        The engine's own draws are counter-based (keyed by agent and turn),
        so those counters are its random state.
        """
        if self._stopped is not None:
            raise CheckpointError(
                f"no state of a run that stopped on an error ({self._stopped}): continue "
                "from a state taken before it")
        self.drain()  # a run(drain=False) left calls in flight: their outcomes are state
        return {
            "scheme": EVENTS_SCHEME, "now": self._now, "started": self._started,
            "queue": [_plain_entry(entry)
                      for entry in sorted(self._entries.values(), key=lambda e: e[:5])],
            "parked": list(self._parked),
            "book": {book.key: (book.turns, book.wakes, book.busy, book.pending, book.resolved)
                     for book in self._book.values()},
            "agents": {str(agent_id): agent.get_state()
                       for agent_id, agent in self._agents.items()},
            "world": self._world.get_state(),
            "counters": (self._turns, self._events, self._failed, self._chain_max, self._peak),
            "digest": self._digest,
            "windows": {index: (w.wakes, w.resolved, w.failed, w.events, w.latency_sum,
                                w.latency_max, w.queue_max, w.chain_max, w.in_flight_max)
                        for index, w in self._windows.items()},
            "reported": self._reported,
            "calls_at_start": dict(self._calls_at_start), "quiet": dict(self._quiet),
            **({"calls_next": {k: list(v) for k, v in self._calls_next.items()}}
               if self._calls_next else {}),
            # Turns started early beyond the run's time (run's early_until), done.
            "early": {self._book[agent_id].key: (early.entry, early.spec, early.observation,
                                                 _plain_outcome(early.future.result()))
                      for agent_id, early in sorted(self._stashed.items(),
                                                    key=lambda item: self._book[item[0]].key)},
            # An agent's further turns started early, out of order (out_of_order), in order.
            **({"early_more": {
                self._book[agent_id].key: [(e.entry, e.spec, e.observation,
                                            _plain_outcome(e.future.result())) for e in early.later]
                for agent_id, early in sorted(self._stashed.items(),
                                              key=lambda item: self._book[item[0]].key)
                if early.later}}
               if any(e.later for e in self._stashed.values()) else {}),
            **({} if self._scenario is None else {"scenario": self._scenario.state()}),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state` of an engine built the same way.

        Raises:
            CheckpointError: *state* is not an event-engine state, or names
                agents this engine does not have.
        """
        self.abandon()
        self._stopped = None
        given: object = state
        if not isinstance(given, Mapping) or given.get("scheme") != EVENTS_SCHEME:
            raise CheckpointError(
                f"not a state of the event-driven engine (expected scheme {EVENTS_SCHEME!r})")
        if sorted(state["agents"]) != sorted(self._by_key):
            raise CheckpointError(
                "the checkpoint's agents are not this engine's agents: "
                f"{len(state['agents'])} saved, {len(self._by_key)} here")
        self._now = state["now"]
        self._started = state["started"]
        self._sim = Sim(ordering="keyed", start=state["now"])
        self._entries = {}
        self._harvests = 0
        self._scenario_at = None
        for entry in state["queue"]:
            self._schedule(_live_entry(tuple(entry)))
        self._parked = list(state["parked"])
        for key, (turns, wakes, busy, pending, resolved) in state["book"].items():
            book = self._book[self._by_key[key]]
            book.turns, book.wakes, book.busy, book.pending = turns, wakes, busy, pending
            book.resolved = resolved
        for key, agent_state in state["agents"].items():
            self._agents[self._by_key[key]].set_state(agent_state)
        self._world.set_state(state["world"])
        (self._turns, self._events, self._failed, self._chain_max,
         self._peak) = state["counters"]
        self._digest = state["digest"]
        self._windows = {}
        for index, values in state["windows"].items():
            window = self._windows[index] = _Window()
            (window.wakes, window.resolved, window.failed, window.events, window.latency_sum,
             window.latency_max, window.queue_max, window.chain_max,
             window.in_flight_max) = values
        self._window_index = -1
        self._reported = state["reported"]
        self._calls_at_start = dict(state.get("calls_at_start", {}))
        self._calls_next = {k: list(v) for k, v in state.get("calls_next", {}).items()}
        self._fwd = None  # made again from the restored world when the next run starts
        self._quiet = dict(state.get("quiet", {}))
        self._stashed = {}
        for key, (entry, spec, observation, outcome) in state.get("early", {}).items():
            done: cf.Future[Any] = cf.Future()
            done.set_result(_live_outcome(tuple(outcome)))
            self._stashed[self._by_key[key]] = _Early(tuple(entry), spec, observation, done, 0)
        for key, more in state.get("early_more", {}).items():
            first = self._stashed[self._by_key[key]]
            for entry, spec, observation, outcome in more:
                done = cf.Future()
                done.set_result(_live_outcome(tuple(outcome)))
                first.later.append(_Early(tuple(entry), spec, observation, done, 0))
        if self._scenario is not None:
            self._scenario.restore(state.get("scenario", 0))

    # -- results -----------------------------------------------------------------------

    def agents_digest(self) -> str:
        """SHA-256 over every agent's ``get_state()``, in id order."""
        return agents_digest(EVENTS_SCHEME, self._agents)

    def _result(self, wall: float, calls: int, *, digests: bool = True) -> EventResult:
        """The result so far.

        Without *digests* (turns still in flight are changing their agents'
        states on other threads) the world, agents and run digests are empty.
        """
        events_digest = self._digest.hex()
        if not digests:
            world_digest = agents_digest = digest = ""
        else:
            with gc_paused():  # as the round engine: a million states, no cycles among them
                world_digest = self._world.state_digest()
                agents_digest = self.agents_digest()
            h = hashlib.sha256((EVENTS_SCHEME + "\n").encode("ascii"))
            h.update(_canonical_line({"turns": self._turns, "events": events_digest,
                                      "world": world_digest, "agents": agents_digest}))
            digest = h.hexdigest()
        windows = tuple(self._windows[i].report(i, self._width) for i in sorted(self._windows))
        return EventResult(self._turns, self._events, self._failed, self._now, events_digest,
                           world_digest, agents_digest, digest, windows,
                           self._chain_max, calls, self._peak, wall)

    def __repr__(self) -> str:
        return (f"<EventEngine: {len(self._ids)} agents, {self._mode}, t={self._now}, "
                f"{self._turns} turns>")


class _Failure(NamedTuple):
    """A failed turn's exception in a checkpoint: its class and message, as plain data.

    An exception object can drag anything into a pickle (whatever its
    attributes hold); the event the failure becomes names only its class
    and message (``World.failed``), so that is what is kept.
    """

    module: str
    name: str
    message: str

    def exception(self) -> BaseException:
        """An exception of the same class name and message (the class itself if it can)."""
        if self.module == "simulacra.errors":
            from simulacra import errors  # noqa: PLC0415

            cls = getattr(errors, self.name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                try:
                    return cls(self.message)
                except Exception:  # noqa: S110  (a class with other arguments)
                    pass
        made: BaseException = type(self.name, (Exception,), {"__module__": self.module})(
            self.message)
        return made


def _plain_outcome(outcome: tuple[bool, Any, float]) -> tuple[bool, Any, float]:
    """A turn's outcome for a checkpoint: a failed turn's exception as a :class:`_Failure`."""
    ok, action, duration = outcome
    if ok or not isinstance(action, BaseException):
        return outcome
    return ok, _Failure(type(action).__module__, type(action).__qualname__, str(action)), duration


def _live_outcome(outcome: tuple[bool, Any, float]) -> tuple[bool, Any, float]:
    """The inverse of :func:`_plain_outcome` (old checkpoints hold the exception itself)."""
    ok, action, duration = outcome
    return (ok, action.exception(), duration) if isinstance(action, _Failure) else outcome


def _plain_entry(entry: tuple[Any, ...]) -> tuple[Any, ...]:
    """*entry* for a checkpoint: a failed resolution's exception as a :class:`_Failure`."""
    if entry[2] != _RESOLVE:
        return entry
    spec, outcome, chain = entry[5]
    return (*entry[:5], (spec, _plain_outcome(outcome), chain))


def _live_entry(entry: tuple[Any, ...]) -> tuple[Any, ...]:
    """The inverse of :func:`_plain_entry`."""
    if entry[2] != _RESOLVE:
        return entry
    spec, outcome, chain = entry[5]
    return (*entry[:5], (spec, _live_outcome(outcome), chain))


class _Flight:
    """A turn in flight: started at *when*, its outcome not yet scheduled."""

    __slots__ = ("act", "agent", "carried", "chain", "future", "op", "outcome", "spec", "when")

    def __init__(self, agent: AgentId, when: float, spec: ActionSpec, chain: int,
                 act: Any) -> None:
        self.agent = agent
        self.carried = False  # counted in EventEngine.carried (a window's end passed it)
        self.when = when
        self.spec = spec
        self.chain = chain
        self.act = act              # the kernel event the turn's process waits on
        self.future: cf.Future[Any] | None = None
        self.outcome: Any = None    # (ok, action, duration), once known without a future
        self.op: Any = None         # a blocking agent's last op: ("call", ...), ("act", ...)


#: Objects that read the world's state when used, not when made: dict views, mapping
#: proxies, iterators (generators, ``map``, ``zip``...). Found in an observation, they are
#: refused (:func:`_live_part`).
_LIVE_TYPES: Final[tuple[type, ...]] = (
    type({}.keys()), type({}.values()), type({}.items()), types.MappingProxyType, Iterator)
#: The mutable containers an observation may share with its world by mistake.
_SHARED_TYPES: Final = (list, dict, set, bytearray)
_SUSPECT: Final = (*_LIVE_TYPES, *_SHARED_TYPES)


def _live_part(observation: Any, world: World) -> str | None:
    """Where *observation* holds a live view of *world*'s state, in words; or None.

    A cheap check of the common mistakes, at the top and one level down (the
    fields of a dataclass, named tuple or plain object; the items of a list,
    tuple or dict): a dict view, a mapping proxy or an iterator, and a list,
    dict, set or bytearray that *is* one of the world's own attributes. Such an
    observation changes under a turn on a worker thread as later turns resolve,
    so a threaded run would differ from a sequential one without an error. A
    copy nested deeper, or shared through another object, is not seen.
    """
    if isinstance(observation, _SUSPECT):
        found = _live_value(observation, "the observation", world)
        if found is not None:
            return found
    if isinstance(observation, dict):
        names: Iterable[Any] = observation
        values: Iterable[Any] = observation.values()
        where = "the observation[{!r}]"
    elif isinstance(observation, tuple) and hasattr(observation, "_fields"):
        names, values, where = observation._fields, observation, "the observation.{}"
    elif isinstance(observation, (list, tuple)):
        names, values, where = range(len(observation)), observation, "the observation[{}]"
    elif hasattr(observation, "__dataclass_fields__"):
        names = observation.__dataclass_fields__
        values = [getattr(observation, name, None) for name in names]
        where = "the observation.{}"
    elif hasattr(observation, "__dict__") and not isinstance(observation, type):
        attributes = vars(observation)
        names, values, where = attributes, attributes.values(), "the observation.{}"
    else:
        return None
    for name, value in zip(names, values, strict=False):
        if isinstance(value, _SUSPECT):
            found = _live_value(value, where.format(name), world)
            if found is not None:
                return found
    return None


def _live_value(value: Any, where: str, world: World) -> str | None:
    """*value* (at *where*) as a live view of *world*'s state, in words; or None."""
    if isinstance(value, _LIVE_TYPES):
        return f"{where} is a {type(value).__name__}, which reads the world when used"
    for name, mine in getattr(world, "__dict__", {}).items():
        if mine is value:
            return f"{where} is the world's own {name!r} ({type(value).__name__}), not a copy"
    return None


def _snapshot(observation: Any) -> bytes | None:
    """*observation*'s pickled bytes: what a turn started early is checked against; or None.

    Bytes, not ``==``: equal values that an agent can tell apart (``0.0`` and
    ``-0.0``, ``1`` and ``True``, sets or dicts in another order) pickle apart,
    and a live view of the world's state (a list it keeps, a mapping proxy) is
    frozen as it was, not compared with itself later. Without pickle's memo
    (``fast``): a value shared twice is written twice, so the bytes do not
    depend on which equal objects are one object, which a checkpoint's
    unpickling changes. An observation that will not pickle (a cycle
    included) gives None, and its turn is not started early.
    """
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.fast = True  # no memo: the bytes of the values, not of their sharing
    try:
        pickler.dump(observation)
    except Exception:
        return None
    return buffer.getvalue()


async def _cancel_tasks() -> None:
    """Cancel every other task of the running loop and wait for them to end."""
    me = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not me]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class _Early:
    """A turn started early (World.affected_by): its wake entry, not yet reached by the kernel.

    ``observation`` holds the pickled bytes of what it saw (:func:`_snapshot`).
    """

    __slots__ = ("entry", "future", "later", "mark", "observation", "spec", "when")

    def __init__(self, entry: tuple[Any, ...], spec: ActionSpec, observation: Any,
                 future: cf.Future[Any], mark: int) -> None:
        self.entry = entry
        self.mark = mark  # where the runner's log of resolutions stood when it started
        self.when: float = entry[0]
        self.spec = spec
        self.observation = observation
        self.future: cf.Future[Any] = future
        #: The agent's next turns started early after this one (out of order), in order.
        self.later: list[_Early] = []


def _all_early(early: Mapping[AgentId, _Early]) -> Iterator[_Early]:
    """Every turn started early in *early*: each agent's first, then its later ones."""
    for first in early.values():
        yield first
        yield from first.later


class _Forward:
    """The forward world (``out_of_order``): the world with turns committed ahead of the kernel.

    A copy of the world to which a turn's resolution is applied as soon as no
    turn it could be ordered against is still to come (``_Runner.prestart``),
    and every other resolution when the kernel reaches it. Turns started early
    observe it; the world itself, and so the digest and the events, still
    resolves every turn in timestamp order on the kernel.
    """

    __slots__ = ("ahead", "as_of", "commutes", "hood", "last", "times", "world")

    def __init__(self, world: World, size: int) -> None:
        commutes = world.commutes()
        if not isinstance(commutes, bool):
            raise ConfigError(f"{type(world).__name__}.commutes() must return True or False, "
                              f"got {type(commutes).__name__} {commutes!r}"[:300])
        #: World.commutes: a turn waits for no other agent's turn, only for its observers.
        self.commutes = commutes
        #: With World.observation_at too: for nothing (a turn started early reads as of
        #: its time).
        self.as_of = commutes and type(world).observation_at is not World.observation_at
        #: Per agent index (as_of only): the times of its resolutions in the forward world
        #: from the kernel's time on; a turn may not start early at one of them (the
        #: kernel's order at one instant is its keys').
        self.times: list[collections.deque[float]] = (
            [collections.deque() for _ in range(size)] if self.as_of else [])
        try:
            self.world: World = copy.deepcopy(world, {id(world.lock): threading.Lock()})
        except Exception as exc:
            raise ConfigError(
                f"out_of_order: {type(world).__name__} cannot be copied for the forward world "
                f"({type(exc).__name__}: {exc})"[:300]) from exc
        #: Turns committed ahead of the kernel, (agent key, turn) -> (time, the (key, event
        #: kind) of each wake-up its events give, in order, its wake time, its chain).
        self.ahead: dict[tuple[str, int],
                         tuple[float, tuple[tuple[str, str], ...], float, int]] = {}
        #: Per agent index: the time of its latest resolution in the forward world.
        self.last: list[float] = [-math.inf] * size
        #: Per agent index: the other agents within two hops in the graph (either way).
        self.hood: list[tuple[int, ...]] | None = None

    def wakes_given(self) -> dict[str, list[tuple[float, str, int]]]:
        """Per agent key: each wake-up a turn committed ahead gives it, in kernel order.

        As (time, event kind, chain), in the order of the commits, which go in time order
        for each target unless the world commutes (:meth:`_Runner._next_wake` sorts them).
        """
        given: dict[str, list[tuple[float, str, int]]] = {}
        for r, targets, _, chain in self.ahead.values():
            for target, kind in targets:
                given.setdefault(target, []).append((r, kind, chain))
        return given


def _inbound_matrix(affected: Sequence[Sequence[int]], widest: int = 64) -> Any:
    """Each agent's inbound neighbours (*affected*) as a numpy index matrix, or False.

    Rows are padded with ``len(affected)``, the index of an infinite bound that
    :func:`_relax_vector` appends. False where some agent has more than
    *widest* (the matrix would be too wide to pay) or none has any.
    """
    import numpy as np  # noqa: PLC0415  (lazy: only runs that start turns early need it)

    size = len(affected)
    width = max((len(a) for a in affected), default=0)
    if not 0 < width <= widest:
        return False
    matrix = np.full((size, width), size, dtype=np.intp)
    for j, sources in enumerate(affected):
        matrix[j, :len(sources)] = sources
    return matrix


def _relax_vector(dist: list[float], pinned: list[bool], inbound: Any, step: float,
                  horizon: float, *, fold: list[float] | None = None,
                  least: float = 0.0) -> list[float]:
    """The bounds *dist* lowered along the agents' inbound edges: shortest paths, *step* a hop.

    An agent is reached from one it is affected by at that one's bound plus
    *step*, where that is at most *horizon* (later bounds decide nothing) and
    the agent is not *pinned* (a pinned one still reaches others). An agent
    whose latest turn resolves at ``fold[i]`` and that a neighbour may wake
    before then (a bound below it) is reached at ``fold[i] + least`` instead:
    the kernel folds that wake-up into the turn out, and wakes it again at once
    when it resolves, sooner than the reaction delay. A fixed point over
    *inbound* (:func:`_inbound_matrix`), one numpy operation per hop; the
    numbers equal :func:`_relax_heap`'s, each the least of the same sums.
    """
    import numpy as np  # noqa: PLC0415  (lazy: only runs that start turns early need it)

    size = len(dist)
    bound = np.array([*dist, math.inf])
    free = ~np.array(pinned, dtype=bool)
    folds = None if fold is None else np.array(fold)
    while True:
        nearest = bound[inbound].min(axis=1)
        reach = nearest + step
        if folds is not None:
            reach = np.where(nearest < folds, folds + least, reach)
        lower = free & (reach < bound[:size]) & (reach <= horizon)
        if not lower.any():
            return bound[:size].tolist()  # type: ignore[no-any-return]
        bound[:size][lower] = reach[lower]


def _relax_heap(dist: list[float], pinned: list[bool], affects: Sequence[Sequence[int]],
                step: float, horizon: float, *, fold: list[float] | None = None,
                least: float = 0.0) -> list[float]:
    """:func:`_relax_vector` by Dijkstra's algorithm on the outbound edges (*affects*), in place.

    The reach through an edge never falls below the time it leaves (a fold is
    at ``fold[j] + least``, after a source below ``fold[j]``), so the least
    bound first still settles each agent.
    """
    heap = [(t, i) for i, t in enumerate(dist) if t <= horizon]
    heapq.heapify(heap)
    while heap:
        t, i = heapq.heappop(heap)
        if t > dist[i]:
            continue
        for j in affects[i]:
            reach = (fold[j] + least if fold is not None and t < fold[j] else t + step)
            if reach <= horizon and reach < dist[j] and not pinned[j]:
                dist[j] = reach
                heapq.heappush(heap, (reach, j))
    return dist


class _Runner:
    """One call of :meth:`EventEngine.run`: the kernel's run loop and the calls in flight.

    Every entry of the engine is a kernel event of the engine's keyed
    :class:`~simulacra.Sim`: a wake-up is an event whose callback starts the
    turn, and a turn is a process that waits on its *act* event, scheduled
    with the resolution's key once its outcome is known. A turn's model call
    starts on the pool at once; a *harvest* event at ``wake + min_duration``
    waits for it (nothing can resolve earlier) and schedules the act event.
    """

    def __init__(self, engine: EventEngine, limit: int | None, until: float) -> None:
        self.engine = engine
        self.limit = limit
        self.until = until
        #: How far turns may start early (``EventEngine.run``'s *early_until*).
        self.early_limit = until
        self.flight: dict[AgentId, _Flight] = {}
        #: Turns started early (World.affected_by), by agent, until the kernel reaches them.
        self.early: dict[AgentId, _Early] = {}
        #: The agents resolved while a turn started early waits (to name in an error).
        self.resolved: list[AgentId] = []
        #: Set by finish_all: the run returns once its calls are in, so none starts early.
        self.draining = False
        #: Set when any call of this run returns (the kernel's wait looks again then).
        self.returned = threading.Event()
        #: Calls that returned, as their done-callbacks put them (any thread; only where
        #: turns start early, whose looks take them off), and those the kernel has read
        #: (:meth:`_landed`): the outcome of each that returned one, else None (cancelled
        #: or raised), for as long as its future is held. The kernel reads a call's state
        #: once, not at each look: a future's ``done()`` takes a lock the worker threads
        #: contend for.
        self.returned_calls: collections.deque[cf.Future[Any]] = collections.deque()
        self.landed: weakref.WeakKeyDictionary[cf.Future[Any], Any] = (
            weakref.WeakKeyDictionary())
        #: The agents' inbound neighbours (``World.affected_by``) as a padded index matrix
        #: for :meth:`_relax`, or False where some agent has too many; None: not made yet.
        self.inbound: Any = None
        self.graph = engine._dependency_graph() if engine.tracer is None else None
        #: Threads: at most ``concurrency`` calls open, a freed slot to the earliest turn
        #: waiting (``_gates``); asyncio: the same gate on the loop.
        self.pool: PriorityPool | None = None
        self.loop_thread: threading.Thread | None = None
        self.aloop: asyncio.AbstractEventLoop | None = None
        self.gate: PriorityGate | None = None
        if engine.mode == "threads":
            self.pool = PriorityPool(engine._concurrency, "simulacra-events")
        elif engine.mode == "asyncio":
            self.gate = PriorityGate(engine._concurrency)  # used on the loop's thread only
            self.aloop = asyncio.new_event_loop()
            self.loop_thread = threading.Thread(target=self.aloop.run_forever,
                                                name="simulacra-events-asyncio", daemon=True)
            self.loop_thread.start()

    def stash(self) -> None:
        """Keep the turns started early that the kernel has not reached, once done.

        Their calls return first; the engine adopts them in a later run, or
        checkpoints them.
        """
        if self.early:
            cf.wait([e.future for e in _all_early(self.early)])
        self.engine._stashed.update(self.early)
        self.early.clear()

    def close(self) -> None:
        pending: list[_Flight | _Early] = [*self.flight.values(), *_all_early(self.early)]
        for flight in pending:
            if flight.future is not None:
                flight.future.cancel()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        if self.aloop is not None:
            # Models that keep a client per event loop (OpenAICompatible) drop
            # this loop's client before the loop goes away.
            for model in {id(m.inner): m.inner for m in self.engine._turn_models.values()}.values():
                # Wrappers (simulacra._util.ModelWrapper) pass this on to the model
                # at the bottom of their chain, which owns the client.
                release = getattr(model, "aclose_loop", None)
                if callable(release):
                    asyncio.run_coroutine_threadsafe(release(), self.aloop).result()
            # Cancel what is still running (a run that stopped on an error) before the loop
            # stops, or every pending task says "Task was destroyed but it is pending!".
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_tasks(), self.aloop).result(timeout=10)
            self.aloop.call_soon_threadsafe(self.aloop.stop)
            if self.loop_thread is not None:
                self.loop_thread.join()
            self.aloop.close()

    # -- starting and finishing turns ------------------------------------------------------

    def start(self, agent_id: AgentId, when: float, spec: ActionSpec, chain: int) -> None:
        """Start the turn woken at *when*: its process, then its call (on the pool)."""
        engine = self.engine
        flight = self._fly(agent_id, when, spec, chain, engine._window(when))
        blocking = engine._blocking.get(agent_id)
        if blocking is not None:
            stream = functools.partial(engine._stream, "agent", engine._book[agent_id].key)
            self._step_blocking(agent_id, flight, functools.partial(
                blocking.wake, engine._observed, when, spec.step, stream))
        elif self.pool is not None:
            flight.future = self._watch(self.pool.submit_at(when, engine._act, agent_id, spec))
        elif self.aloop is not None:
            flight.future = self._watch(asyncio.run_coroutine_threadsafe(
                self._gated(agent_id, spec, when), self.aloop))
        else:
            flight.outcome = engine._act(agent_id, spec)
        if not engine._lookahead or flight.future is None:
            self.finish(agent_id, flight)  # known now (or one turn at a time, to its end)
        else:
            engine._schedule_harvest(when + engine._min, functools.partial(
                self._harvest, agent_id, flight))

    def _fly(self, agent_id: AgentId, when: float, spec: ActionSpec, chain: int,
             window: _Window) -> _Flight:
        """Put the turn in flight: its kernel process waiting on its act event (telemetry too)."""
        engine = self.engine
        flights = self.flight
        act = engine._sim.event()
        engine._sim.spawn(engine._turn(act), name=f"turn {engine._book[agent_id].key} "
                                                     f"{spec.step}")
        flight = flights[agent_id] = _Flight(agent_id, when, spec, chain, act)
        # At most ``concurrency`` calls are open (the pool or gate, ``_gates``); as many
        # again wait for a slot, the earliest turn first. Past that the kernel waits for
        # the earliest turn in flight: a stop or a checkpoint waits for at most two
        # rounds of calls. The new turn is in flight first: while the kernel waits, turns
        # start early (prestart), and its bound must hold it back as any turn's does.
        while len(flights) > 2 * engine._concurrency:
            oldest = next(iter(flights))
            self.finish(oldest, flights[oldest])
        engine._peak = max(engine._peak, len(flights))
        window.in_flight_max = max(window.in_flight_max, len(flights))
        return flight

    def adopt(self, agent_id: AgentId, entry: tuple[Any, ...], window: _Window,
              chain: int) -> None:
        """The kernel reached the wake-up of a turn started early: it is in flight from now.

        Raises:
            ConfigError: the agent was woken by another entry first, or its
                observation now differs from the one its turn started with:
                ``World.affected_by`` left out an agent that affects it.
        """
        engine = self.engine
        early = self.early.pop(agent_id)
        if early.later:  # its next turn, started out of order, waits for the kernel in turn
            after = early.later.pop(0)
            after.later, early.later = early.later, []
            self.early[agent_id] = after
        world = engine._world
        if entry[:5] != early.entry[:5] or tuple(entry[5]) != tuple(early.entry[5]):
            raise ConfigError(
                f"agent {agent_id!r} was woken at t={entry[0]:.6g} ({entry[5][0]}) before its "
                f"turn started early for t={early.when:.6g}: {type(world).__name__}.affected_by"
                f"({agent_id!r}) leaves out an agent that can wake it{self._claims()}")
        if _snapshot(world.observation_for(agent_id, None)) != early.observation:
            # A turn kept by a checkpoint may be adopted by a run with no graph (another
            # mode): then no agent counts as named.
            named = (set() if self.graph is None else
                     {engine._ids[i] for i in self.graph[0][engine._index[agent_id]]})
            since = sorted({str(a) for a in self.resolved[early.mark:]
                            if a not in named and a != agent_id})
            who = (f" (of those resolved since it started and not named: "
                   f"{', '.join(map(repr, since[:5]))}{', ...' if len(since) > 5 else ''})"
                   if since else "")
            raise ConfigError(
                f"agent {agent_id!r} sees another world at t={early.when:.6g} than when its turn "
                f"started early: {type(world).__name__}.affected_by({agent_id!r}) leaves out "
                f"an agent whose actions it observes{who} (or its observation reads state that "
                f"no agent's action changes, such as the number of all posts{self._claims()})")
        if not self.early:
            self.resolved.clear()
        engine._book[agent_id].busy = True  # its turn is in flight from now
        window.wakes += 1
        flight = self._fly(agent_id, early.when, early.spec, chain, window)
        flight.future = early.future
        engine._schedule_harvest(early.when + engine._min, functools.partial(
            self._harvest, agent_id, flight))

    def _claims(self) -> str:
        """The end of a failed check's message where the world says its turns commute."""
        fwd = self.engine._fwd
        if fwd is None or not fwd.commutes:
            return ""
        return (f"; or {type(self.engine._world).__name__}.commutes() is True while what it "
                "shows depends on the order of other agents' turns, such as an inbox in order "
                "of arrival" + (", or its observation_at() shows turns of the time it is given "
                                "or later" if fwd.as_of else ""))

    def busy_in_kernel(self, agent_id: AgentId) -> bool:
        """Whether a turn of *agent_id* that the kernel has reached is still to resolve.

        It is then busy as in a sequential run, whatever turns it started early
        after that one: a wake-up given it now folds into the pending one, which
        its next turn started early (out of order) was predicted with, and the
        kernel checks that when it reaches that turn (:meth:`adopt`).
        """
        early = self.early.get(agent_id)
        ahead = 0 if early is None else 1 + len(early.later)
        book = self.engine._book[agent_id]
        return book.turns - book.resolved > ahead

    def foreseen(self, target: AgentId, when: float, kind: str, chain: int) -> bool:
        """Whether the wake-up of *target* at *when* is the one its turn started early awaits.

        A turn started early between the agent's turns (``_next_wake``) was
        predicted with the wake-up another agent's turn gives it: the kernel
        then pushes that wake-up, which the turn is adopted at, rather than
        refusing it (:meth:`check_trigger`).
        """
        early = self.early[target]
        book = self.engine._book[target]
        n = book.wakes
        return (early.entry[:5] == (when, self.engine._tiebreak(_WAKE, book.key, n), _WAKE,
                                    book.key, n)
                and tuple(early.entry[5]) == (kind, chain))

    def check_trigger(self, source: AgentId, target: AgentId, when: float) -> None:
        """*source*'s event wakes *target*, whose turn started early and is not busy: refused.

        *source* resolved before the kernel reached *target*'s wake-up, so it
        could affect *target* there; had the world named it, the turn would
        not have started early. Even a wake-up after the early turn's time
        would change the run: it would be folded into the turn in flight.

        Raises:
            ConfigError: naming both agents.
        """
        early = self.early[target]
        world = self.engine._world
        raise ConfigError(
            f"agent {source!r} woke agent {target!r} (for t={when:.6g}) before the kernel "
            f"reached the turn {target!r} started early for t={early.when:.6g}: "
            f"{type(world).__name__}.affected_by({target!r}) does not name {source!r}")

    def prestart(self, awaited: cf.Future[Any] | None = None) -> None:
        """Start early the turns whose wake-ups no turn still to resolve can reach.

        A turn of agent ``a`` waking at ``t`` may start now, before the kernel
        reaches ``t``, when no agent ``a`` is affected by can resolve at or
        before ``t``. Each agent's earliest possible resolution is its turn in
        flight's (known once its call returned, else its start plus
        ``min_duration``), or its next wake-up plus ``min_duration``, or, when
        an agent that affects it can wake it first, that one's plus the
        reaction delay and ``min_duration``: shortest paths over the world's
        ``affects`` graph from every agent's own bound. Resolutions still go in
        timestamp order on the kernel, so the run is the one without early
        starts; only the calls begin sooner in wall-clock time.

        Out of order (``out_of_order``), the same bounds count only the turns
        not yet in the forward world (:class:`_Forward`), and first commit
        there, in time order, each turn whose outcome is known and that no turn
        within two hops can still precede. Turns then observe the forward world,
        and an agent whose last turn is committed there starts its next one at
        the wake-up the kernel will give it (its own pause after that turn, or
        at once if a wake-up is pending for it). A commit there also waits for
        every agent that observes the committing one and may still observe
        before its time: what it sees must not hold the future. A pass that
        committed a turn is followed by another (up to four): the agents it
        lets wake may start at once, unless the call the kernel waits for
        (*awaited*) has returned meanwhile.
        """
        for _ in range(4):
            if not self._prestart_pass() or (awaited is not None and awaited.done()):
                return  # (the kernel's awaited call is in: it goes on, and looks again later)

    def _prestart_pass(self) -> bool:
        """One pass of :meth:`prestart`; whether it committed a turn ahead (and room is left)."""
        graph = self.graph
        if graph is None or self.draining:
            return False
        engine = self.engine
        # Calls not yet returned, kernel turns' and early ones': early starts only fill
        # free slots (a turn started early waits behind every earlier turn anyway).
        running: list[tuple[AgentId, _Flight | _Early]] = [*self.flight.items()]
        for agent_id, early in self.early.items():
            running.append((agent_id, early))
            running.extend((agent_id, later) for later in early.later)
        landed = self._landed()
        room = engine._concurrency - sum(
            1 for _, f in running if f.future is not None and f.future not in landed)
        if room <= 0:
            return False
        fwd = engine._forward()
        affected = graph[0]
        index = engine._index
        by_key = engine._by_key
        book = engine._book
        m = engine._min
        inf = math.inf
        limit = self.early_limit
        scenario = engine._scenario
        if scenario is not None:
            limit = min(limit, math.nextafter(scenario.next_time(), -inf))
        ahead = {} if fwd is None else fwd.ahead
        #: Wake-ups that turns committed ahead give (_Forward.wakes_given).
        given = {} if fwd is None else fwd.wakes_given()
        step = engine._reaction + m
        dist = [inf] * len(affected)
        #: Out of order: the earliest time each agent may take its next observation
        #: (before wake-ups that others give it: _commit_ahead adds those).
        seen = [inf] * len(affected)
        #: Agents with a turn started and not yet resolved (in the forward world, out of
        #: order): a wake-up given them before it resolves folds into it, so their
        #: earliest resolution is that turn's, whatever wakes them.
        pinned = [False] * len(affected)
        #: Agents that have started every turn this run allows (max_turns): nothing wakes
        #: them into another, so they neither resolve again nor pass a wake-up on; pinned,
        #: so that no bound is lowered through them.
        spent = [False] * len(affected)
        if self.limit is not None:
            limit_turns = self.limit
            for agent_id, i in index.items():
                if book[agent_id].turns >= limit_turns:
                    spent[i] = pinned[i] = True
        #: Out of order: each agent's latest turn in the forward world and not yet resolved
        #: by the kernel, its time; a wake-up given it before then folds into that turn
        #: (_relax_vector).
        fold = [-inf] * len(affected)
        first: dict[int, tuple[Any, ...]] = {}
        #: Turns whose outcome is known, not yet in the forward world: (time, index, spec,
        #: outcome, chain).
        ready: list[tuple[float, int, ActionSpec, tuple[bool, Any, float], int]] = []
        blocking = engine._blocking
        # Wake-ups whose turns started early: their turns are running (below), not to come.
        begun = {(e.entry[3], e.entry[4]) for _, e in running if isinstance(e, _Early)}
        for entry in engine._entries.values():
            when, _, kind, key, n, payload = entry
            i = index[by_key[key]]
            if kind == _RESOLVE:
                if (key, n) in ahead:
                    continue
                if fwd is not None and by_key[key] not in blocking:
                    ready.append((when, i, payload[0], payload[1], payload[2]))
                dist[i] = min(dist[i], when)
                seen[i] = min(seen[i], when)  # it wakes again once this turn has resolved
                pinned[i] = True
            elif (key, n) not in begun and not spent[i]:
                dist[i] = min(dist[i], when + m)
                seen[i] = min(seen[i], when)
                best = first.get(i)
                if best is None or entry[:2] < best[:2]:
                    first[i] = entry
        for agent_id, flight in running:
            if ahead and (book[agent_id].key, flight.spec.step) in ahead:
                continue
            bound = flight.when + m
            future = flight.future
            outcome = None if future is None else landed.get(future)
            if outcome is not None and agent_id not in blocking:
                bound = flight.when + outcome[2]
                if fwd is not None:
                    chain = (flight.chain if isinstance(flight, _Flight)
                             else int(flight.entry[5][1]) + 1)  # as adopt() will make it
                    ready.append((bound, index[agent_id], flight.spec, outcome, chain))
            i = index[agent_id]
            dist[i] = min(dist[i], bound)
            seen[i] = min(seen[i], bound)  # it wakes again once this turn has resolved
            pinned[i] = True
        candidates = [(entry[:2], i, entry) for i, entry in first.items()
                      if entry[0] <= limit and not book[engine._ids[i]].busy]
        #: Candidates at a wake-up predicted (_next_wake), by index: (turn, time, woke).
        predicted: dict[int, tuple[int, float, float]] = {}
        if fwd is not None:
            for (key, n), (r, _, woke, _) in ahead.items():
                agent_id = by_key[key]
                i = index[agent_id]
                if spent[i] or n != book[agent_id].turns - 1:
                    continue  # its last turn, or one that a later turn of it follows
                fold[i] = r
                wake = self._next_wake(agent_id, n, r, woke, first=first, given=given)
                if wake is None:  # a wake-up is queued for it, or it chooses its own
                    dist[i] = min(dist[i], r + m)
                    seen[i] = min(seen[i], r)
                    continue
                # Its next turn resolves after the wake-up the kernel will give it, unless
                # an agent it is affected by wakes it first (the shortest paths, below).
                dist[i] = min(dist[i], wake[0] + m)
                seen[i] = min(seen[i], wake[0])
                if wake[0] <= limit and self.admissible(agent_id):
                    candidates.append((wake[:2], i, wake))
                    predicted[i] = (n, r, woke)
            for key, times in given.items():
                j = index[by_key[key]]
                if not spent[j]:
                    dist[j] = min(dist[j], min(t for t, _, _ in times) + step)
        if not candidates and not ready:
            return False
        candidates.sort()
        horizon = candidates[-1][0][0] if candidates else -inf
        if ready:
            ready.sort(key=lambda item: item[:2])
            horizon = max(horizon, ready[-1][0])
        dist = self._relax(dist, pinned, step, horizon, fold if fwd is not None else None)
        cap = inf  # bounds past it would need the shortest paths again (a commit woke someone)
        committed = False
        if fwd is not None and ready:
            cap, committed = self._commit_ahead(fwd, ready, dist=dist, seen=seen, pinned=pinned,
                                                first=first, given=given)
        ids = engine._ids
        last = None if fwd is None else fwd.last
        world = engine._world if fwd is None else fwd.world
        for (when, _), i, entry in candidates:
            if when >= cap:
                break
            agent_id = ids[i]
            if (agent_id in blocking or not self.admissible(agent_id)
                    or any(dist[c] <= when for c in affected[i])):
                continue
            if last is not None:
                assert fwd is not None  # noqa: S101
                # A wake-up a turn committed ahead gives it before then: a queued
                # wake-up's turn would change. A predicted one has them folded in,
                # those committed in this pass too (the prediction is made again).
                wakes_at = None if i in predicted else given.get(entry[3])
                if i in predicted:
                    again = self._next_wake(agent_id, *predicted[i], first=first, given=given)
                    if again != entry:
                        continue
                if (last[i] > when or (wakes_at and min(t for t, _, _ in wakes_at) <= when)
                        or (any(when in fwd.times[c] for c in affected[i]) if fwd.as_of
                            else any(last[c] >= when for c in affected[i]))):
                    continue
            observation = (world.observation_at(agent_id, when) if fwd is not None and fwd.as_of
                           else world.observation_for(agent_id, None))
            snapshot = _snapshot(observation)
            if snapshot is None:  # cannot be checked at its own time: not started early
                continue
            spec = engine._start_turn(agent_id, when, entry[5][0], observation)
            if self.pool is not None:
                future = self._watch(self.pool.submit_at(when, engine._act, agent_id, spec))
            else:
                assert self.aloop is not None  # noqa: S101  (no graph in sequential mode)
                future = self._watch(asyncio.run_coroutine_threadsafe(
                    self._gated(agent_id, spec, when), self.aloop))
            started = _Early(entry, spec, snapshot, future, len(self.resolved))
            before = self.early.get(agent_id)
            if before is None:
                self.early[agent_id] = started
            else:  # out of order: after the turns it started early before
                before.later.append(started)
            engine.early_starts += 1
            room -= 1
            if room <= 0:
                return False
        return committed

    def _relax(self, dist: list[float], pinned: list[bool], step: float,
               horizon: float, fold: list[float] | None = None) -> list[float]:
        """*dist* lowered along the ``affects`` edges: :func:`_relax_vector`.

        :func:`_relax_heap` where some agent has over 64 inbound neighbours.
        """
        assert self.graph is not None  # noqa: S101
        if self.inbound is None:
            self.inbound = _inbound_matrix(self.graph[0])
        if self.inbound is False:
            return _relax_heap(dist, pinned, self.graph[1], step, horizon, fold=fold,
                               least=self.engine._min)
        return _relax_vector(dist, pinned, self.inbound, step, horizon, fold=fold,
                             least=self.engine._min)

    def _next_wake(self, agent_id: AgentId, n: int, r: float, woke: float, *,
                   first: Mapping[int, Any], given: Mapping[str, list[tuple[float, str, int]]]
                   ) -> tuple[Any, ...] | None:
        """The wake entry the kernel will push for *agent_id* when its turn *n* resolves at *r*.

        For a turn committed ahead that is the agent's latest, with no wake-up
        queued for it: its coalesced wake-up at *r* if one is pending for it,
        else its own pause after *r* (the (wakes + turns still to resolve - 1)-th entry).
        The wake-ups that turns committed ahead give it (*given*) while turn *n*
        (woken at *woke*) is out fold into the pending one, as the kernel will
        fold them.
        None where that is not known: a later turn has started, a wake-up is
        queued (it would fold into a turn, or start one), a turn committed ahead
        wakes it between *r* and that wake-up (or at either instant), the agent
        chooses its own wake-ups (``next_wake``), or it blocks. Something may
        still wake it first: an agent it is affected by that resolves before (the
        callers' bounds see to that).
        """
        engine = self.engine
        mine = engine._book[agent_id]
        if (n != mine.turns - 1 or engine._index[agent_id] in first
                or agent_id in engine._choosers or agent_id in engine._blocking):
            return None
        key = mine.key
        fwd = engine._fwd
        before = None if fwd is None else fwd.ahead.get((key, n - 1))
        if before is not None and woke not in (before[0],
                                               before[0] + engine._pause("wake", key, n)):
            # Turn n was woken by another agent between its turns (below): the wake-up
            # that turn n - 1 gave it is still to come, and no prediction holds it.
            return None
        wake = mine.wakes + mine.turns - mine.resolved - 1
        # A coalesced wake-up is the oldest unresolved turn's: it is *n*'s if n is that one.
        pending = mine.pending if n == mine.resolved else None
        later: list[tuple[float, str, int]] = []
        folded: set[float] = set()
        early = False
        for t, kind, chain in sorted(given.get(key, ()), key=lambda item: item[0]):  # stable
            if t < woke:  # before turn n started, which allowed for it
                early = True
                continue
            if t in (woke, r) or t in folded:
                # The same instant: the order is the kernel's keys' (two turns that
                # commute may have gone in either way round).
                return None
            folded.add(t)
            if t < r:  # while turn n is out: folded, as _trigger folds it
                if pending is None or chain > pending[1]:
                    pending = (kind, chain)
            else:
                later.append((t, kind, chain))
        when = r if pending is not None else r + engine._pause("wake", key, n + 1)
        if later and later[0][0] <= when:
            # Woken between its turns, at the first wake-up another agent's turn gives it,
            # if that comes before its own: the kernel pushes that one right after turn
            # n's own (the callers' bounds see that no other can come between).
            t, kind, chain = later[0]
            at = t + engine._reaction
            if (pending is not None or early or at >= when
                    or (len(later) > 1 and later[1][0] <= at)):
                # Another wake-up given it before that one fires would fold into the
                # turn it starts (or come first): not known.
                return None
            wake += 1
            return (at, engine._tiebreak(_WAKE, key, wake), _WAKE, key, wake, (kind, chain))
        return (when, engine._tiebreak(_WAKE, key, wake), _WAKE, key, wake, pending or ("wake", 0))

    def _commit_ahead(self, fwd: _Forward,
                      ready: list[tuple[float, int, ActionSpec, tuple[bool, Any, float], int]], *,
                      dist: list[float], seen: list[float], pinned: list[bool],
                      first: Mapping[int, Any], given: dict[str, list[tuple[float, str, int]]]
                      ) -> tuple[float, bool]:
        """Commit to the forward world, in time order, the *ready* turns nothing can precede.

        A turn of agent ``b`` resolving at ``r`` goes in when no agent within two
        hops of ``b`` (``World.affected_by`` either way) can still resolve at or
        before ``r`` outside the forward world (*dist*, which this updates), and
        none has a resolution there at or after ``r``: each agent then sees its
        neighbours' turns in the forward world in the order the kernel will
        resolve them. And no agent that ``b`` affects may still observe at or
        before ``r`` (*seen*, or a wake-up a neighbour gives it): what it sees
        there must not hold ``b``'s turn. Where the world says turns of different
        agents commute (``World.commutes``), the first condition is only ``b``'s
        own order: each observer's view is then the same whatever order its
        neighbours' turns went in. Returns the time from which *dist* may
        be too late (a commit woke an agent: the shortest paths from it were not
        followed), and whether any turn went in. *first* (agents with a wake-up
        queued) and *given* (_Forward.wakes_given, which this updates) are the pass's.
        """
        engine = self.engine
        graph = self.graph
        assert graph is not None  # noqa: S101
        affected, affects = graph
        if fwd.hood is None and not fwd.commutes:
            near = [set(affected[i]).union(affects[i]) for i in range(len(affected))]
            fwd.hood = [tuple(sorted(near[i].union(*(near[j] for j in near[i])) - {i}))
                        for i in range(len(near))]
        hood = fwd.hood or []
        last = fwd.last
        ids = engine._ids
        book = engine._book
        by_key = engine._by_key
        index = engine._index
        m = engine._min
        step = engine._reaction + m
        cap = math.inf
        committed = False
        reaction = engine._reaction

        def observes_by(a: int, r: float) -> bool:
            """Whether agent *a* may take an observation at or before *r*."""
            if seen[a] <= r:
                return True
            if pinned[a]:  # busy until after r: a wake-up given it now folds into that turn
                return False
            times = given.get(book[ids[a]].key)
            if times and min(t for t, _, _ in times) + reaction <= r:
                return True
            return any(dist[j] + reaction <= r for j in affected[a])

        commutes = fwd.commutes
        for r, i, spec, outcome, chain in ready:
            if r >= cap:
                break
            # Its own bound is this turn's (pinned): only the others' count. Where turns
            # of different agents commute (World.commutes), their order does not either.
            if last[i] >= r or (not commutes and any(dist[c] <= r or last[c] >= r
                                                     for c in hood[i])):
                continue
            if not fwd.as_of and any(observes_by(a, r) for a in affects[i]):
                continue
            ok, action, _ = outcome
            if not ok and (engine._fail_fast or isinstance(action, engine._fatal)):
                continue  # the kernel stops the run there: nothing may go ahead of it
            agent_id = ids[i]
            targets = engine._commit_forward(fwd, agent_id, r, spec, outcome)
            fwd.ahead[book[agent_id].key, spec.step] = (r, targets, spec.time, chain)
            engine.committed_ahead += 1
            committed = True
            for target, kind in targets:
                given.setdefault(target, []).append((r, kind, chain))
            # Its next resolution: after its next wake-up, or one that an agent it is
            # affected by gives it.
            wake = self._next_wake(agent_id, spec.step, r, spec.time, first=first, given=given)
            own = r + m if wake is None else wake[0] + m
            nearest = min((dist[j] for j in affected[i]), default=math.inf)
            seen[i] = own - m
            if nearest < r:
                # A turn not yet in may wake it before r, while this one is out: the
                # kernel folds that into a wake-up at r, which no prediction saw.
                dist[i] = min(own, r + m)
                seen[i] = r
            else:
                dist[i] = min(own, nearest + step)
            pinned[i] = False
            for target, _ in targets:
                j = index[by_key[target]]
                if not pinned[j]:  # a busy one folds it into its turn out
                    dist[j] = min(dist[j], r + step)
                cap = min(cap, r + 2 * step)
        return cap, committed

    def _harvest(self, agent_id: AgentId, flight: _Flight, _: object = None) -> None:
        if self.flight.get(agent_id) is flight:
            self.finish(agent_id, flight)

    def finish(self, agent_id: AgentId, flight: _Flight) -> None:
        """Wait for the turn's outcome; schedule its resolution (its act event)."""
        engine = self.engine
        blocking = engine._blocking.get(agent_id)
        if blocking is not None:
            while flight.op is not None and flight.op[0] == "call":
                request, site, completion = self._wait(flight)
                if not isinstance(completion, BaseException):
                    with engine._lock:
                        engine._prompt_tokens += completion.prompt_tokens
                        engine._completion_tokens += completion.completion_tokens
                    rng = engine._stream("latency", site.agent, site.n)
                    blocking.extra += engine._latency.duration(request, completion, rng)
                self._step_blocking(agent_id, flight,
                                    functools.partial(blocking.deliver, completion))
            del self.flight[agent_id]
            kind, value = flight.op
            if engine.tracer is not None:  # it acted, failed, or returned (retired)
                engine._turn_traced(agent_id, kind != "failed", value)
            duration = max(engine._min, blocking.extra)
            if kind in ("act", "failed"):
                engine._schedule_act(flight, flight.when + duration,
                                     (kind == "act", value, duration))
            else:  # the function returned: the agent is retired, with no turn to resolve
                book = engine._book[agent_id]
                book.busy = False
                book.pending = None
                engine._calls_at_start.pop(book.key, None)
                engine._end_turn(flight.act)
            return
        outcome = self._wait(flight) if flight.future is not None else flight.outcome
        del self.flight[agent_id]
        engine._schedule_act(flight, flight.when + outcome[2], outcome)

    def finish_all(self) -> None:
        """At the end of a run: every turn in flight gets its resolution scheduled.

        No turn starts early meanwhile: the run returns (a stop, a checkpoint)
        once these calls are in, and a turn started now would only make it wait
        longer, for a call the checkpoint then keeps.
        """
        self.draining = True
        for agent_id in sorted(self.flight, key=lambda a: self.engine._book[a].key):
            self.finish(agent_id, self.flight[agent_id])

    def _wait(self, flight: _Flight) -> Any:
        """The outcome of *flight*'s call; while it is out, start turns early (prestart)."""
        future, flight.future = flight.future, None
        if future is None:
            return flight.outcome
        if self.graph is not None:
            # Any call that returns may tighten a bound: look again after each, those
            # that return while the engine looks (a turn it started early) included.
            returned = self.returned
            while not future.done():
                returned.clear()
                self.prestart(future)
                if not future.done():
                    returned.wait()
        return future.result()

    def _watch(self, future: cf.Future[Any]) -> cf.Future[Any]:
        """*future*, which wakes the kernel's wait (:meth:`_wait`) when it is done."""
        future.add_done_callback(self._returned)
        return future

    def _returned(self, future: cf.Future[Any]) -> None:
        if self.graph is not None:
            self.returned_calls.append(future)
        self.returned.set()

    def _landed(self) -> weakref.WeakKeyDictionary[cf.Future[Any], Any]:
        """:attr:`landed`, with the calls returned since the last look read in."""
        landed = self.landed
        calls = self.returned_calls
        while calls:
            future = calls.popleft()
            landed[future] = (None if future.cancelled() or future.exception() is not None
                              else future.result())
        return landed

    async def _gated(self, agent_id: AgentId, spec: ActionSpec,
                     when: float) -> tuple[bool, Any, float]:
        assert self.gate is not None  # noqa: S101  (made with the loop)
        async with self.gate.slot(when):
            return await self.engine._aact(agent_id, spec)

    # -- blocking agents -----------------------------------------------------------------

    def _step_blocking(self, agent_id: AgentId, flight: _Flight,
                       step: Callable[[], Any]) -> None:
        """Run a blocking agent to its next blocking call; start that call."""
        agent = self.engine._blocking[agent_id]
        try:
            kind, value = step()
        except Exception as exc:  # its function raised: the turn fails, the agent retires
            kind, value = "failed", exc
        flight.op = (kind, value)
        if kind == "call":
            from simulacra.llm import CallSite  # noqa: PLC0415  (lazy: layer-1 import)

            site = CallSite(str(agent_id), agent.calls)
            agent.calls += 1
            self._submit_call(flight, value, site)

    def _submit_call(self, flight: _Flight, request: Any, site: Any) -> None:
        model = self.engine._model

        def call() -> tuple[Any, Any, Any]:
            try:
                return request, site, model.complete(request, site=site)  # type: ignore[union-attr]
            except Exception as exc:
                return request, site, exc

        async def acall() -> tuple[Any, Any, Any]:
            assert self.gate is not None  # noqa: S101  (made with the loop)
            async with self.gate.slot(flight.when):
                try:
                    return request, site, await model.acomplete(  # type: ignore[union-attr]
                        request, site=site)
                except Exception as exc:
                    return request, site, exc

        with self.engine._lock:
            self.engine._calls += 1
        if self.pool is not None:
            flight.future = self._watch(self.pool.submit_at(flight.when, call))
        elif self.aloop is not None:
            flight.future = self._watch(asyncio.run_coroutine_threadsafe(acall(), self.aloop))
        else:
            flight.future, flight.outcome = None, call()

    def admissible(self, agent_id: AgentId) -> bool:
        return self.limit is None or self.engine._book[agent_id].turns < self.limit

    def loop(self) -> None:
        """Process the kernel's events up to *until* (the caller finishes what is in flight)."""
        sim = self.engine._sim
        until = self.until
        step = sim.step
        peek = sim.peek
        while True:
            when = peek()
            if when > until or when == math.inf:
                break
            step()


def _accepts(method: Callable[..., Any], name: str) -> bool:
    """Whether *method* takes the keyword argument *name* (or any keyword)."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


# -- the run-config seam: ``sim.engine.step.built_in: async_event`` --------------------------

#: The options ``sim.engine.step.options`` takes for this engine.
STEP_OPTIONS: Final = frozenset({"wake_interval", "reaction_delay", "window", "lookahead",
                                 "max_turns", "dependencies", "out_of_order", "barrier"})


class EventSteps:
    """The event-driven engine behind the step-engine interface of run configs.

    A step is one window of virtual time (``window`` units, default 1.0):
    ``run(steps)`` runs the engine up to ``steps * window`` -- a cut in
    virtual time, so running 3 steps and then 2 more equals running 5 -- and
    reports each window as a :class:`~simulacra.societies.StepReport` (its
    events, telemetry and the running digest), which is what run directories,
    progress bars and replays consume.

    Once nothing can happen any more (:attr:`done`: every agent has used up
    ``max_turns``, or stopped waking itself, and nothing is queued -- no
    wake-up, no resolution, no scenario change), the windows left are
    reported without running the engine: each is empty, with the digest it
    would have had, at the cost of its report alone.
    """

    def __init__(self, engine: EventEngine, *, width: float, max_turns: int | None,
                 on_step: Callable[[Any], None] | None, barrier: bool = False) -> None:
        self.engine = engine
        self.width = width
        self.max_turns = max_turns
        self.on_step = on_step
        #: Every window's end waits for the calls in flight (else they carry on into
        #: the next window, and only the last window of a run() call, or one
        #: after which *pause* says to return, waits for them).
        self.barrier = barrier
        #: (calls, prompt tokens, completion tokens) of the engine already reported.
        self._counted = (0, 0, 0)
        #: Wall-clock seconds the last run() waited at its end for the calls in flight.
        self.drain_s = 0.0
        self.step = 0
        self.step_digests: list[str] = []
        self.wall = 0.0
        self.calls = 0
        #: The windows this object ran the engine for (telemetry, not state): the
        #: others were empty, reported without running it once it was :attr:`done`.
        self.windows_run = 0
        #: Known to be done (it stays so: nothing runs the engine any more).
        self._done = False
        self._events: list[ActionEvent] = []
        engine._on_event = self._events.append

    @property
    def tracer(self) -> TurnTracer | None:
        """The engine's tracer (``run.trace.otel``): a span per window, turn and call."""
        return self.engine.tracer

    @tracer.setter
    def tracer(self, tracer: TurnTracer | None) -> None:
        self.engine.tracer = tracer

    @property
    def done(self) -> bool:
        """Whether every window from now on is empty, whatever its length.

        True once the run has started and nothing is queued that could act:
        no wake-up, no turn in flight or waiting to resolve, no scenario change
        to come, and no agent parked at ``max_turns`` that ``max_turns`` lets
        wake (it never does: the limit is the run's). Agents that reached
        ``max_turns`` and agents whose ``next_wake`` returned None wake no
        more, and no one is left to act and wake them.
        """
        if not self._done:
            self._done = self.engine._exhausted(self.max_turns)
        return self._done

    def call_context(self, agent: str) -> tuple[int, int, float]:
        """``(turn, window, wake time)`` of the turn *agent* is in now (``calls.jsonl``).

        A call site that is no agent's (a scenario's ``interview:NAME``) is
        called outside any turn, while a scenario change is applied: turn 0,
        and the change's window and time.
        """
        engine = self.engine
        agent_id = engine._by_key.get(agent)
        if agent_id is None:
            now = engine._now
            return 0, int(now // self.width), now
        book = engine._book[agent_id]
        return book.turns - 1, int(book.woke // self.width), book.woke

    def simulated_latency(self, request: Any, completion: Any, site: Any) -> float:
        """The virtual time a call takes: the draw its turn's duration adds up (keyed by site)."""
        engine = self.engine
        rng = engine._stream("latency", site.agent, site.n)
        return float(engine._latency.duration(request, completion, rng))

    def use_scenario(self, scenario: Any) -> None:
        """Apply *scenario*'s changes at their virtual times (``EventEngine.use_scenario``)."""
        self.engine.use_scenario(scenario)
        self._done = False

    def use_event_step(self, meaning: str) -> None:
        """What an event's ``step`` holds (``EventEngine.use_event_step``)."""
        self.engine.use_event_step(meaning)

    def state(self) -> dict[str, Any]:
        """The engine's state plus this adapter's step count (checkpoints).

        With the calls that returned after the last window's report (a run
        that returned after a window whose calls carried on), which the next
        report counts, in this run or in one resumed from this state.
        """
        engine_state = self.engine.state()  # waits for the calls in flight
        return {"engine": engine_state, "step": self.step,
                "step_digests": list(self.step_digests), "unreported": self.unreported()}

    def unreported(self, *, take: bool = False) -> tuple[int, int, int]:
        """What returned after the last window's report, which the next one counts.

        That is ``(calls, prompt tokens, completion tokens)``; *take*: a report
        counts them now.
        """
        now = self.engine._counts()
        late = (now[0] - self._counted[0], now[1] - self._counted[1],
                now[2] - self._counted[2])
        if take:
            self._counted = now
        return late

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state`."""
        self.engine.restore(state["engine"])
        self._done = False
        self.step = state["step"]
        self.step_digests = list(state["step_digests"])
        # The calls no report had counted (older checkpoints: none): the next report's.
        late = state.get("unreported") or (0, 0, 0)
        now = self.engine._counts()
        self._counted = (now[0] - late[0], now[1] - late[1], now[2] - late[2])

    def run(self, steps: int, *, pause: Callable[[], bool] | None = None) -> Any:
        """Run *steps* more windows of virtual time; return a ``RoundResult``.

        *pause* is called after each window; True returns after it (see
        ``RoundEngine.run``). The calls of turns that resolve after a
        window's end carry on into the next window, unless :attr:`barrier`
        (or a tracer) asks each window to wait for them; the run returns once
        they have returned (a checkpoint may come next). Either way it is the
        same run: only the wall clock differs.
        """
        from ._rounds import RoundResult  # noqa: PLC0415  (sibling, no cycle)

        engine = self.engine
        calls, wall_total = 0, 0.0
        # A tracer's window spans hold their turns: each window ends with its calls.
        barrier = self.barrier or engine.tracer is not None
        # Turns may start early up to this call's last window's end, which it reaches
        # unless *pause* returns it sooner (then state() keeps them for the next run).
        end = (self.step + steps) * self.width
        try:
            for left in range(steps - 1, -1, -1):
                window_calls, wall = self._window(engine, left == 0 or barrier, end, pause)
                calls += window_calls
                wall_total += wall
                if pause is not None and pause():
                    break
        except BaseException:
            engine.abandon()
            raise
        # A checkpoint may come next: its state holds the outcomes of the turns in flight.
        # The wait is what the checkpoint costs the run (automatic ones are spaced by it).
        waited = _time.perf_counter()
        engine.drain()
        self.drain_s = _time.perf_counter() - waited
        self.calls += calls
        self.wall += wall_total
        result = engine._result(wall_total, calls)
        # Like RoundEngine.run: the calls and wall clock of *this* call, not running totals.
        return RoundResult(self.step, result.event_count, result.failed, tuple(self.step_digests),
                           result.world_digest, result.agents_digest, result.digest,
                           calls, wall_total)

    def _window(self, engine: EventEngine, drain: bool, early_until: float,
                pause: Callable[[], bool] | None) -> tuple[int, float]:
        """Run the next window (*drain*: it ends with its calls); report it.

        Returns its model calls and wall-clock seconds.

        A report counts the calls that returned since the last one: those of
        turns carried over from earlier windows too, and, after a run() that
        returned once a window's report was out (*pause*), those that the
        window's end waited for (:meth:`state` keeps them for the next report).
        """
        from ._rounds import StepReport  # noqa: PLC0415  (sibling, no cycle)

        step = self.step
        self._events.clear()
        before = (engine._turns, engine._failed)
        start = _time.perf_counter()
        engine._open_window(step)
        if self.done:
            # Nothing can happen: the window is empty, as engine.run would leave
            # it, without its run loop, pool and digests of every agent.
            digest = engine._digest.hex()
        else:
            result = engine.run(max_turns=self.max_turns, until=(step + 1) * self.width,
                                drain=drain, early_until=early_until)
            self.windows_run += 1
            digest = result.events_digest
            if engine._runner is not None and pause is not None and pause():
                # The run returns after this window (a checkpoint, a stop): its report
                # counts the calls its end waits for. (*pause* only reads: asked twice.)
                engine.drain()
        calls, prompt, completion = self.unreported(take=True)
        wall = _time.perf_counter() - start
        self.step_digests.append(digest)
        self.step = step + 1
        tracer = engine.tracer
        if tracer is not None:
            traced = engine._windows.get(step)
            tracer.step_ended(step, *((0, 0, 0) if traced is None else
                                      (traced.wakes, traced.failed, traced.events)))
        if self.on_step is not None:
            window = engine._windows.get(step)
            report = (WindowReport(step, step * self.width) if window is None
                      else window.report(step, self.width))
            self.on_step(StepReport(
                step, engine._turns - before[0], engine._failed - before[1],
                tuple(self._events), digest, wall, calls, prompt, completion,
                engine.world.probe(step), window=report.telemetry(),
                quiet=engine._quiet.get(step, 0)))
        return calls, wall


def check_step_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``sim.engine.step.options`` for this engine; return them as a dict.

    Raises:
        ConfigError: An option this engine does not take (with the closest
            name), or a value of the wrong type, naming the dotted key.
    """
    options = dict(given)
    prefix = "sim.engine.step.options"
    unknown = sorted(set(options) - STEP_OPTIONS)
    if unknown:
        hint = did_you_mean(unknown[0], sorted(STEP_OPTIONS))
        raise ConfigError(
            f"{prefix}.{unknown[0]} is not an option of the async_event engine "
            f"(it takes: {', '.join(sorted(STEP_OPTIONS))}){hint}")
    if options.get("max_turns") is not None:
        _check_int(f"{prefix}.max_turns", options["max_turns"], 1)
    for name, positive in (("window", True), ("wake_interval", True),
                           ("reaction_delay", False)):
        if name in options:
            options[name] = _check_float(f"{prefix}.{name}", options[name], positive=positive)
    for name in ("lookahead", "dependencies", "out_of_order", "barrier"):
        if name in options and not isinstance(options[name], bool):
            value = options[name]
            raise ConfigError(f"{prefix}.{name} must be true or false, got "
                              f"{type(value).__name__} {value!r}")
    if options.get("out_of_order") and options.get("dependencies") is False:
        raise ConfigError(f"{prefix}.out_of_order needs {prefix}.dependencies: it commits turns "
                          "ahead where the world names who affects whom")
    return options


def engine_options(config: Any) -> tuple[dict[str, Any], float, int | None, bool]:
    """What a run config gives the event engine: ``(kwargs, window, max_turns, barrier)``.

    The last three are :class:`EventSteps`'s. The keyword arguments are the
    latency model, mode, concurrency, fail_fast, window and the checked
    ``sim.engine.step.options``; the seed, the world and its agents, the model
    and the callbacks are the caller's.
    """
    from simulacra.llm import LatencyModel  # noqa: PLC0415  (lazy: layer-1 import)

    settings = config.sim.engine
    options = check_step_options(settings.step.options)
    latency = config.sim.llm.latency
    max_turns = options.pop("max_turns", None)
    # A budget is checked at each step's end against the calls that returned: with one,
    # every step waits for its calls, so that the check sees what the step spent.
    budget = config.run.budget
    barrier = (options.pop("barrier", False) or budget.tokens is not None
               or budget.cost is not None)
    width = options.pop("window", 1.0)
    kwargs = dict(
        latency=LatencyModel(base=latency.base, prefill_per_token=latency.prefill_per_token,
                             decode_per_token=latency.decode_per_token,
                             noise_sigma=latency.noise_sigma,
                             min_duration=latency.min_duration),
        mode=settings.mode, concurrency=settings.concurrency, fail_fast=settings.fail_fast,
        window=width, **options)
    return kwargs, width, max_turns, barrier


def _step_factory(world: World, agents: list[Actor], *, model: LanguageModel | None,
                  seed: SeedTree, config: Any, on_step: Callable[[Any], None] | None,
                  on_turn: Callable[[], None] | None,
                  fatal: tuple[type[BaseException], ...] = ()) -> EventSteps:
    """Build the engine a run config asks for (``sim.engine.step.built_in: async_event``)."""
    kwargs, width, max_turns, barrier = engine_options(config)
    engine = EventEngine(world, agents, model=model, seed=seed, fatal=fatal, on_turn=on_turn,
                         **kwargs)
    return EventSteps(engine, width=width, max_turns=max_turns, on_step=on_step,
                      barrier=barrier)
