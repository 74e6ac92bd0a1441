"""The round-based engine: fixed steps of simultaneous moves by observe/act agents.

Each step:

1. chooses the participants (all agents, or each with a seeded probability);
2. cuts them into flow batches, which run one after the other;
3. runs each batch's turns concurrently -- sequentially, on a pool of threads
   or on asyncio with a semaphore. A turn is: observe the snapshot taken at the
   start of the batch, then ``act()`` (the model call, outside any lock);
4. resolves the batch's actions in a deterministic order -- by agent id, or a
   seeded permutation -- one at a time under the world's lock. Never in the
   order the model calls finished: that order changes from run to run.

A turn that raises (the model call failed, the reply was not an action, the
world refused it) is recorded as a ``turn_failed`` event and the run goes on,
unless ``fail_fast`` is set. So the events, the world's state and the digest
are a pure function of the seed, the agents, the world and the model's
replies, whatever the mode and concurrency.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import gc
import hashlib
import json
import threading
import time as _time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, final

from simulacra.agents import ActionEvent, ActionSpec, Actor, AgentId, LLMAgent, World
from simulacra.agents import canonical_line as _canonical_line
from simulacra.errors import AgentActionError, CheckpointError, ConfigError, InvalidAction
from simulacra.rng import SeedTree, as_seed_tree

from ._scenario import call_in_order, call_on_pool

if TYPE_CHECKING:
    from simulacra.llm import CallSite, Completion, CompletionRequest, LanguageModel

    from ._scenario import SocietyScenario

__all__ = ["MODES", "MODE_ALIASES", "RESOLUTIONS", "ROUNDS_SCHEME", "RoundEngine", "RoundResult",
           "StepReport", "TurnTracer", "canonical_mode"]

#: Header of the digests of a round-based run.
ROUNDS_SCHEME: Final = "simulacra.engines.rounds.v1"
#: How turns within a flow batch run.
MODES: Final = ("sequential", "threads", "asyncio")
#: Other names for the modes: the words the agent backends and the executors use
#: for the same ideas, so that one vocabulary works everywhere.
MODE_ALIASES: Final = {"local": "sequential", "inline": "sequential", "threaded": "threads",
                       "thread": "threads", "async": "asyncio"}


def canonical_mode(mode: object) -> object:
    """*mode* under its own name (an alias of :data:`MODE_ALIASES` replaced)."""
    return MODE_ALIASES.get(mode, mode) if isinstance(mode, str) else mode
#: The orders in which a batch's actions are resolved.
RESOLUTIONS: Final = ("id", "seeded")

#: (ok, action or exception) for one turn.
_Outcome = tuple[bool, Any]

_FAST = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                         allow_nan=False).encode


def deprecated_count(owner: object, value: int) -> int:
    """*value*, with a DeprecationWarning for the old name ``events`` of a count."""
    warnings.warn(
        f"{type(owner).__name__}.events is deprecated: it is a count, now called event_count",
        DeprecationWarning, stacklevel=3)
    return value


def _line(value: object) -> bytes:
    """The canonical line of *value*: plain JSON fast, anything else through ``canonical``.

    For plain JSON data (str keys; str, int, finite float, bool, None, lists,
    tuples and dicts) both give the same bytes; the fast path only skips the walk.
    """
    try:
        return (_FAST(value) + "\n").encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        return _canonical_line(value)


@final
@dataclass(frozen=True, slots=True)
class StepReport:
    """What one step did: its events and its telemetry.

    Attributes:
        step: The step number.
        participants: How many agents took a turn.
        failed: How many turns failed.
        events: The events resolved in this step, in resolution order.
        digest: The running digest of the run's events after this step.
        wall_s: Wall-clock seconds the step took (telemetry only).
        llm_calls: Model calls made during the step.
        prompt_tokens: Prompt tokens of those calls.
        completion_tokens: Completion tokens of those calls.
        probes: The world's :meth:`~simulacra.agents.World.probe` after the step.
    """

    step: int
    participants: int
    failed: int
    events: tuple[ActionEvent, ...]
    digest: str
    wall_s: float = 0.0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    probes: Mapping[str, Any] = field(default_factory=dict)
    #: The event-driven engine's telemetry of the window (wake-ups, simulated
    #: latency, queue depth, calls in flight, causal chain); empty for rounds.
    window: Mapping[str, Any] = field(default_factory=dict)
    #: Turns of the step that asked the model nothing, when the engine counts them
    #: (the event engine: an agent may take several turns in a window); None: the
    #: run counts them as its turns less the distinct agents that asked.
    quiet: int | None = None

    def telemetry(self) -> dict[str, Any]:
        """The step as one JSON object (a line of ``telemetry.jsonl``)."""
        kinds: dict[str, int] = {}
        for event in self.events:
            kinds[event.kind] = kinds.get(event.kind, 0) + 1
        line = {"step": self.step, "participants": self.participants, "failed": self.failed,
                "events": len(self.events), "kinds": dict(sorted(kinds.items())),
                "llm_calls": self.llm_calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "wall_s": round(self.wall_s, 6),
                "probes": dict(self.probes), "digest": self.digest}
        if self.window:
            line["window"] = dict(self.window)
        return line


@final
@dataclass(frozen=True, slots=True)
class RoundResult:
    """What a round-based run gives.

    Attributes:
        steps: How many steps ran (in total, over every :meth:`RoundEngine.run`).
        event_count: How many events were resolved (``events`` is the same
            number under its old name, deprecated).
        failed: How many turns failed.
        step_digests: The running event digest after each step.
        world_digest: The world's final state digest.
        agents_digest: The digest of every agent's final ``get_state()``.
        digest: One SHA-256 over all of the above: equal runs, equal digests.
        llm_calls: Model calls made (0 for a replay that is served from recordings
            counts the calls served, not provider calls).
        wall_s: Wall-clock seconds.
    """

    steps: int
    event_count: int
    failed: int
    step_digests: tuple[str, ...]
    world_digest: str
    agents_digest: str
    digest: str
    llm_calls: int = 0
    wall_s: float = 0.0

    @property
    def events(self) -> int:
        """Deprecated: the count :attr:`event_count` gives."""
        return deprecated_count(self, self.event_count)


class Metered:
    """A language model wrapper that counts calls and tokens (thread-safe).

    The round engine counts its calls through one: the model it is given if
    that is a ``Metered`` already (a society run's, which also counts per
    agent), else one around it.
    """

    __slots__ = ("_lock", "calls", "completion_tokens", "inner", "prompt_tokens")

    def __init__(self, inner: LanguageModel) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def _count(self, completion: Completion) -> Completion:
        with self._lock:
            self.calls += 1
            self.prompt_tokens += completion.prompt_tokens
            self.completion_tokens += completion.completion_tokens
        return completion

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        return self._count(self.inner.complete(request, site=site))

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self._count(await self.inner.acomplete(request, site=site))


class TurnTracer(Protocol):
    """What an engine tells a tracer (``run.trace.otel``): steps and the turns in them.

    The engine calls it only when one is set (``engine.tracer``), and nothing
    it returns or does reaches the run: the events and the digest are those of
    a run without it. ``turn_started`` and ``turn_ended`` are called from the
    worker that runs the turn (a thread, or an asyncio task); an agent has at
    most one turn in flight.
    """

    def step_started(self, step: int, time: float) -> None:
        """Step (window) *step* begins at virtual *time*."""

    def step_ended(self, step: int, participants: int, failed: int, events: int) -> None:
        """Step *step* has been resolved: *participants* turns, *failed* of them failed."""

    def turn_started(self, agent: str, step: int, time: float, turn: int) -> None:
        """*agent* starts its turn *turn* (the events' ``step``) in step *step*, at *time*."""

    def turn_ended(self, agent: str, ok: bool, error: BaseException | None) -> None:
        """*agent*'s turn returned an action (*ok*) or raised *error*."""


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an int >= {low}, got {type(value).__name__} {value!r}")
    return value


def check_latency(latency: Any, name: str = "latency") -> tuple[Any, float]:
    """*latency* (a :class:`simulacra.llm.LatencyModel` when None) and its ``min_duration``.

    Raises:
        ConfigError: It has no ``duration(request, completion, rng)`` or no
            ``min_duration > 0`` (the lookahead of the event engines).
    """
    if latency is None:
        from simulacra.llm import LatencyModel  # noqa: PLC0415  (lazy: layer-1 import)

        latency = LatencyModel()
    minimum = getattr(latency, "min_duration", None)
    if not callable(getattr(latency, "duration", None)) or not (
            isinstance(minimum, int | float) and minimum > 0):
        raise ConfigError(
            f"{name} must have duration(request, completion, rng) and a min_duration > 0 "
            f"(the lookahead), got {latency!r}")
    return latency, float(minimum)


class SocietyEngine:
    """What both society engines give: their world, agents and mode.

    The round engine's and the event-driven engine's accessors, written once.
    """

    __slots__ = ()

    _world: World
    _agents: dict[AgentId, Actor]
    _mode: str

    @property
    def world(self) -> World:
        """The world (game master)."""
        return self._world

    @property
    def agents(self) -> Mapping[AgentId, Actor]:
        """The agents by id, in id order."""
        return self._agents

    @property
    def mode(self) -> str:
        """How turns run and model calls are made: sequential, threads or asyncio."""
        return self._mode


class RoundEngine(SocietyEngine):
    """Runs observe/act agents and a world in fixed, lockstep steps.

    ::

        engine = RoundEngine(world, agents, model=ScriptedModel(seed=1), mode="threads",
                             concurrency=64)
        result = engine.run(steps=5)
        result.digest     # the same sequentially, on threads and on asyncio

    Args:
        world: The game master that owns the state and resolves actions.
        agents: The agents (objects with ``id``, ``observe``, ``act``,
            ``get_state``, ``set_state``); ids must be unique and of one type.
        model: A language model to bind to every :class:`~simulacra.agents.LLMAgent`
            (``None``: agents keep their own).
        seed: Master seed of the engine's draws (participation, seeded order).
        mode: ``"sequential"``, ``"threads"`` or ``"asyncio"``.
        concurrency: Turns in flight at once (threads, or the asyncio semaphore).
        flows: Flow batches per step: an int (the participants dealt round-robin
            in id order), or ``flows(step, participant_ids) -> list of id lists``.
        participation: Each agent's probability of taking a turn in a step (1.0:
            every agent, every step); drawn from the seed, per step.
        resolution: ``"id"`` (ascending agent id) or ``"seeded"`` (a seeded
            permutation per batch).
        fail_fast: Raise on the first failed turn (in resolution order) instead of
            recording it.
        on_step: Called with each :class:`StepReport` after the step (the run
            directory writes its files here).
        on_turn: Called with no arguments after each turn completes, from the
            worker that ran it (progress bars); must be thread-safe.
        fatal: Exception types that stop the run (as with ``fail_fast``) even
            when other failures are recorded; a strict replay passes ``ReplayMiss``.

    Raises:
        ConfigError: A bad option, duplicate or mixed-type agent ids.
    """

    __slots__ = ("_agents", "_concurrency", "_events", "_fail_fast", "_failed", "_fatal",
                 "_flows", "_hash", "_ids", "_meter", "_mode", "_on_step", "_on_turn",
                 "_participation", "_pool", "_resolution", "_scenario", "_seed", "_step",
                 "_step_digests", "_touched", "_world", "calls_done", "defer_digests", "tracer")

    def __init__(self, world: World, agents: Iterable[Actor], *,
                 model: LanguageModel | None = None,
                 seed: int | str | bytes | SeedTree | None = 0,
                 mode: str = "threads", concurrency: int = 16,
                 flows: int | Callable[[int, list[AgentId]], Sequence[Sequence[AgentId]]] = 1,
                 participation: float = 1.0, resolution: str = "id", fail_fast: bool = False,
                 on_step: Callable[[StepReport], None] | None = None,
                 on_turn: Callable[[], None] | None = None,
                 fatal: tuple[type[BaseException], ...] = ()) -> None:
        if not isinstance(world, World):
            raise ConfigError(f"world must be a simulacra World, got {type(world).__name__}")
        mode = canonical_mode(mode)  # type: ignore[assignment]
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if resolution not in RESOLUTIONS:
            raise ConfigError(
                f"resolution must be one of {', '.join(RESOLUTIONS)}, got {resolution!r}")
        self._concurrency = _check_int("concurrency", concurrency, 1)
        if not callable(flows):
            _check_int("flows", flows, 1)
        rate: object = participation
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 < rate <= 1.0:
            raise ConfigError(f"participation must be a number in (0, 1], got {rate!r}")
        self._agents: dict[AgentId, Actor] = index_agents(agents)
        self._ids: list[AgentId] = list(self._agents)
        self._world = world
        self._meter = (None if model is None else model if isinstance(model, Metered)
                       else Metered(model))
        if self._meter is not None:
            for agent in self._agents.values():
                if isinstance(agent, LLMAgent):
                    agent.bind(self._meter)
        self._seed = as_seed_tree(seed)
        self._mode = mode
        self._flows = flows
        self._participation = float(participation)
        self._resolution = resolution
        self._fail_fast = fail_fast
        self._fatal = tuple(fatal)
        self._on_step = on_step
        self._on_turn = on_turn
        self._step = 0
        self._events = 0
        self._failed = 0
        self._step_digests: list[str] = []
        self._hash = hashlib.sha256((ROUNDS_SCHEME + "\n").encode("ascii"))
        self._pool: cf.ThreadPoolExecutor | None = None
        self._scenario: SocietyScenario | None = None
        #: While True, :meth:`run` leaves the result's world, agents and run
        #: digests empty (``""``): a driver that runs many chunks and only
        #: reports the last (the society runner) digests the state once, at the
        #: end, instead of after every chunk: a walk over every agent.
        self.defer_digests = False
        #: Agents that may have changed since they were built (took a turn, or
        #: a scenario acted while they could be asked): the only ones whose
        #: state a checkpoint holds. None: all of them.
        self._touched: set[AgentId] | None = set()
        #: Told of every step and turn when set (``run.trace.otel``); None: no
        #: per-turn work at all.
        self.tracer: TurnTracer | None = None
        #: Called once a step's turns are over (its model calls all made), before its
        #: last batch is resolved: a run commits the step's recordings there, so that
        #: they are written while the step's events are resolved and written.
        self.calls_done: Callable[[], object] | None = None

    def use_scenario(self, scenario: SocietyScenario | None) -> None:
        """Apply *scenario*'s changes at the start of the steps they are due in.

        Call it before the first step (and before :meth:`restore`).
        """
        self._scenario = scenario

    # -- properties (world, agents, mode: SocietyEngine) ------------------------------

    @property
    def step(self) -> int:
        """How many steps have run."""
        return self._step

    # -- running -------------------------------------------------------------------

    def run(self, steps: int, *, pause: Callable[[], bool] | None = None) -> RoundResult:
        """Run *steps* more steps and return the result so far.

        *pause*, if given, is called after each step; when it returns True
        the run returns after that step (a safe point: the caller may write a
        checkpoint or stop), and ``result.steps`` says how far it got.

        Raises:
            AgentActionError: With ``fail_fast``, the first failed turn in
                resolution order (the agent's exception is chained); or the
                world raised something other than InvalidAction while resolving.
            ConfigError: *steps* is not an int >= 0.
        """
        _check_int("steps", steps, 0)
        start = _time.perf_counter()
        calls0 = self._meter.calls if self._meter is not None else 0
        if self._mode == "asyncio":
            asyncio.run(self._run_async(steps, pause))
        else:
            if self._mode == "threads":
                self._pool = cf.ThreadPoolExecutor(self._concurrency,
                                                   thread_name_prefix="simulacra-turn")
            try:
                for _ in range(steps):
                    self._one_step()
                    if pause is not None and pause():
                        break
            finally:
                pool, self._pool = self._pool, None
                if pool is not None:
                    pool.shutdown(wait=True)
        calls = (self._meter.calls if self._meter is not None else 0) - calls0
        return self._result(_time.perf_counter() - start, calls)

    def _participants(self, step: int) -> list[AgentId]:
        if self._participation >= 1.0:
            return list(self._ids)
        draw = self._seed.child("participation", step).stream("agents").random
        rate = self._participation
        return [i for i in self._ids if draw() < rate]

    def _batches(self, step: int, ids: list[AgentId]) -> list[list[AgentId]]:
        flows = self._flows
        if callable(flows):
            batches = [list(b) for b in flows(step, list(ids))]
            seen = [i for b in batches for i in b]
            if sorted(seen) != ids:
                raise ConfigError(
                    f"flows(step={step}, ...) must return every participant exactly once")
            return batches
        if flows == 1:
            return [ids]
        return [b for b in (ids[k::flows] for k in range(flows)) if b]

    def _order(self, step: int, flow: int, ids: list[AgentId]) -> list[AgentId]:
        if self._resolution == "id":
            return sorted(ids)
        order = sorted(ids)
        self._seed.child("resolution", step, flow).stream("order").shuffle(order)
        return order

    def _turn(self, agent: Actor, snapshot: Any, spec: ActionSpec) -> _Outcome:
        try:
            agent.observe(self._world.observation_for(agent.id, snapshot))
            outcome: _Outcome = (True, agent.act(spec))
        except Exception as exc:  # isolated per turn; fail_fast re-raises in order
            outcome = (False, exc)
        if self._on_turn is not None:
            self._on_turn()
        return outcome

    def _traced_turn(self, agent: Actor, snapshot: Any, spec: ActionSpec) -> _Outcome:
        tracer = self.tracer
        if tracer is None:  # chosen only with a tracer; never here
            return self._turn(agent, snapshot, spec)
        tracer.turn_started(str(agent.id), spec.step, spec.time, spec.step)
        outcome = self._turn(agent, snapshot, spec)
        tracer.turn_ended(str(agent.id), outcome[0], None if outcome[0] else outcome[1])
        return outcome

    async def _traced_aturn(self, agent: Actor, snapshot: Any, spec: ActionSpec) -> _Outcome:
        tracer = self.tracer
        if tracer is None:  # chosen only with a tracer; never here
            return await self._aturn(agent, snapshot, spec)
        tracer.turn_started(str(agent.id), spec.step, spec.time, spec.step)
        outcome = await self._aturn(agent, snapshot, spec)
        tracer.turn_ended(str(agent.id), outcome[0], None if outcome[0] else outcome[1])
        return outcome

    async def _aturn(self, agent: Actor, snapshot: Any, spec: ActionSpec) -> _Outcome:
        try:
            agent.observe(self._world.observation_for(agent.id, snapshot))
            aact = getattr(agent, "aact", None)
            if aact is not None:
                value = await aact(spec)
            else:
                value = await asyncio.to_thread(agent.act, spec)
            outcome: _Outcome = (True, value)
        except Exception as exc:
            outcome = (False, exc)
        if self._on_turn is not None:
            self._on_turn()
        return outcome

    def _run_batch(self, batch: list[AgentId], spec: ActionSpec) -> list[_Outcome]:
        snapshot = self._world.snapshot()
        agents = [self._agents[i] for i in batch]
        turn = self._turn if self.tracer is None else self._traced_turn
        pool = self._pool
        if pool is None or len(batch) == 1:
            return [turn(agent, snapshot, spec) for agent in agents]
        # At most `concurrency` workers, each taking the next turn when it is free:
        # one task per worker rather than per turn, and no worker idles while turns wait.
        outcomes: list[_Outcome] = [(False, None)] * len(agents)
        indices = iter(range(len(agents)))  # next() on it is atomic under the GIL

        def work() -> None:
            for k in indices:
                outcomes[k] = turn(agents[k], snapshot, spec)

        for future in [pool.submit(work) for _ in range(min(self._concurrency, len(agents)))]:
            future.result()
        return outcomes

    async def _arun_batch(self, batch: list[AgentId], spec: ActionSpec) -> list[_Outcome]:
        snapshot = self._world.snapshot()
        agents = [self._agents[i] for i in batch]
        aturn = self._aturn if self.tracer is None else self._traced_aturn
        outcomes: list[_Outcome] = [(False, None)] * len(agents)
        indices = iter(range(len(agents)))

        # `concurrency` worker tasks take turns from one iterator: the semaphore of
        # the design, without a task and a semaphore round trip per turn.
        async def work() -> None:
            for k in indices:
                outcomes[k] = await aturn(agents[k], snapshot, spec)

        await asyncio.gather(*(work() for _ in range(min(self._concurrency, len(agents)))))
        return outcomes

    def _resolve(self, step: int, flow: int, batch: list[AgentId], outcomes: list[_Outcome],
                 out: list[ActionEvent]) -> int:
        """Resolve a batch in the deterministic order; return how many turns failed."""
        results = dict(zip(batch, outcomes, strict=True))
        world = self._world
        time = float(step)
        failed = 0
        update = self._hash.update
        with world.lock:
            expected = world.events
            for agent_id in self._order(step, flow, batch):
                ok, value = results[agent_id]
                if ok:
                    try:
                        events = world.resolve(agent_id, value, step=step, time=time)
                    except InvalidAction as exc:
                        ok, value = False, exc
                    except Exception as exc:
                        raise _action_error(agent_id, step, exc, "resolving") from exc
                if not ok:
                    if self._fail_fast or isinstance(value, self._fatal):
                        raise _action_error(agent_id, step, value, "its turn") from value
                    failed += 1
                    events = [world.failed(agent_id, value, step=step, time=time)]
                for event in events:
                    if event.index != expected:
                        raise misnumbered(world, event, expected)
                    expected += 1
                    update(_line([event.time, event.kind, event.agent, event.payload()]))
                out.extend(events)
        return failed

    def _begin_step(self) -> tuple[int, list[list[AgentId]], float, tuple[int, int, int]]:
        step = self._step
        ids = self._participants(step)
        meter = self._meter
        tokens = (0, 0, 0) if meter is None else (meter.calls, meter.prompt_tokens,
                                                   meter.completion_tokens)
        if self.tracer is not None:
            self.tracer.step_started(step, float(step))
        return step, self._batches(step, ids), _time.perf_counter(), tokens

    def _end_step(  # noqa: PLR0917
            self, step: int, participants: int, failed: int, events: list[ActionEvent],
            start: float, tokens: tuple[int, int, int]) -> None:
        digest = self._hash.hexdigest()
        self._step_digests.append(digest)
        # A chain: the next step's hash starts from this step's digest, so the
        # running digest is plain data at every step boundary (checkpoints).
        self._hash = hashlib.sha256(bytes.fromhex(digest))
        self._events += len(events)
        self._failed += failed
        self._step = step + 1
        if self.tracer is not None:
            self.tracer.step_ended(step, participants, failed, len(events))
        if self._on_step is None:
            return
        meter = self._meter
        calls, prompt, completion = (0, 0, 0) if meter is None else (
            meter.calls - tokens[0], meter.prompt_tokens - tokens[1],
            meter.completion_tokens - tokens[2])
        self._on_step(StepReport(step, participants, failed, tuple(events), digest,
                                 _time.perf_counter() - start, calls, prompt, completion,
                                 self._world.probe(step)))

    def _touch(self, batches: list[list[AgentId]]) -> None:
        touched = self._touched
        if touched is not None:
            for batch in batches:
                touched.update(batch)

    def _apply_scenario(self, step: int, out: list[ActionEvent]) -> None:
        """The scenario's changes due at this step, before anyone observes: events, in order."""
        scenario = self._scenario
        if scenario is None or scenario.next_time() > step:
            return
        self._touched = None  # an interview may ask any agent: checkpoints hold them all
        meter = self._meter
        agents = self._agents

        def model_of(agent_id: AgentId) -> Any:
            return meter if meter is not None else getattr(agents[agent_id], "model", None)

        call = (call_in_order(model_of) if self._pool is None
                else call_on_pool(self._pool, model_of))
        events = scenario.apply_due(self._world, agents, float(step), step=step,
                                    time=lambda _: float(step), call=call, fatal=self._fatal)
        update = self._hash.update
        for event in events:
            update(_line([event.time, event.kind, event.agent, event.payload()]))
        out.extend(events)

    def _open_step(self) -> tuple[int, list[list[AgentId]], float, tuple[int, int, int],
                                  ActionSpec, list[ActionEvent]]:
        """Begin a step: its batches, its scenario's changes (its first events), its spec."""
        step, batches, start, tokens = self._begin_step()
        events: list[ActionEvent] = []
        self._apply_scenario(step, events)
        self._touch(batches)
        return step, batches, start, tokens, ActionSpec(step, float(step)), events

    def _settle(self, step: int, flow: int, batches: list[list[AgentId]],
                outcomes: list[_Outcome], events: list[ActionEvent]) -> int:
        """Resolve a batch's outcomes; after the step's last turns, say its calls are done."""
        if flow == len(batches) - 1 and self.calls_done is not None:
            self.calls_done()
        return self._resolve(step, flow, batches[flow], outcomes, events)

    def _one_step(self) -> None:
        step, batches, start, tokens, spec, events = self._open_step()
        failed = 0
        for flow, batch in enumerate(batches):
            failed += self._settle(step, flow, batches, self._run_batch(batch, spec), events)
        self._end_step(step, sum(map(len, batches)), failed, events, start, tokens)

    async def _run_async(self, steps: int, pause: Callable[[], bool] | None) -> None:
        for index in range(steps):
            if index and pause is not None and pause():
                break
            step, batches, start, tokens, spec, events = self._open_step()
            failed = 0
            for flow, batch in enumerate(batches):
                outcomes = await self._arun_batch(batch, spec)
                failed += self._settle(step, flow, batches, outcomes, events)
            self._end_step(step, sum(map(len, batches)), failed, events, start, tokens)

    # -- checkpoints -----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs, as data, between two steps.

        The step number and counters, the running digest (a hash chain over
        steps), the ``get_state()`` of every agent that has taken a turn (with
        its model-call count: its position in the LLM recordings; an agent
        that never acted is as the factory built it, and a resumed run builds
        it so) and the world's ``get_state()``. The
        engine's draws (participation, seeded order) are keyed by step, so the
        step number is their state.
        """
        touched = self._touched
        agents = self._agents
        chosen = agents if touched is None else {i: agents[i] for i in sorted(touched)}
        state = {"scheme": ROUNDS_SCHEME, "step": self._step, "events": self._events,
                 "failed": self._failed, "step_digests": list(self._step_digests),
                 "agents": {str(agent_id): agent.get_state()
                            for agent_id, agent in chosen.items()},
                 "world": self._world.get_state()}
        if touched is not None:
            # The others are as the factory built them, and a resume builds them so.
            state["agents_touched_only"] = True
        if self._scenario is not None:
            state["scenario"] = self._scenario.state()
        return state

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state` of an engine built the same way.

        Raises:
            CheckpointError: *state* is not a round-engine state, or names
                other agents.
        """
        given: object = state
        if not isinstance(given, Mapping) or given.get("scheme") != ROUNDS_SCHEME:
            raise CheckpointError(
                f"not a state of the round-based engine (expected scheme {ROUNDS_SCHEME!r})")
        by_key = {str(agent_id): agent_id for agent_id in self._agents}
        partial = bool(state.get("agents_touched_only"))
        saved = set(state["agents"])
        if (not saved <= by_key.keys()) if partial else saved != by_key.keys():
            raise CheckpointError(
                "the checkpoint's agents are not this engine's agents: "
                f"{len(state['agents'])} saved, {len(by_key)} here")
        self._step = state["step"]
        self._events = state["events"]
        self._failed = state["failed"]
        self._step_digests = list(state["step_digests"])
        # The running hash of the next step starts from the last step's digest.
        self._hash = (hashlib.sha256(bytes.fromhex(self._step_digests[-1]))
                      if self._step_digests else hashlib.sha256((ROUNDS_SCHEME + "\n").encode()))
        for key, agent_state in state["agents"].items():
            self._agents[by_key[key]].set_state(agent_state)
        self._touched = {by_key[key] for key in saved} if partial else None
        self._world.set_state(state["world"])
        if self._scenario is not None:
            self._scenario.restore(state.get("scenario", 0))

    # -- results -------------------------------------------------------------------

    def agents_digest(self) -> str:
        """SHA-256 over every agent's ``get_state()``, in id order."""
        return agents_digest(ROUNDS_SCHEME, self._agents)

    def _result(self, wall: float, calls: int) -> RoundResult:
        if self.defer_digests:
            return RoundResult(self._step, self._events, self._failed,
                               tuple(self._step_digests), "", "", "", calls, wall)
        with gc_paused():
            world_digest = self._world.state_digest()
            agents_digest = self.agents_digest()
        events_digest = self._hash.hexdigest()
        h = hashlib.sha256((ROUNDS_SCHEME + "\n").encode("ascii"))
        h.update(_canonical_line({"steps": self._step, "events": events_digest,
                                  "world": world_digest, "agents": agents_digest}))
        return RoundResult(self._step, self._events, self._failed, tuple(self._step_digests),
                           world_digest, agents_digest, h.hexdigest(), calls, wall)

    def __repr__(self) -> str:
        return (f"<RoundEngine: {len(self._ids)} agents, {self._mode}, step {self._step}, "
                f"{self._events} events>")


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside (as it was, after).

    Digesting a million agents' states makes millions of short-lived
    containers (the encoder's sorted items, the states); with the collector on,
    its full collections over them doubled the time (1M agents: 22 s -> 11 s).
    Nothing they make is a cycle, so nothing waits for the collector.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def index_agents(agents: Iterable[Actor]) -> dict[AgentId, Actor]:
    """The agents by id, in id order; every engine of observe/act agents takes them so.

    Raises:
        ConfigError: An id is not an int or a str, ids mix the two, or two agents
            share an id.
    """
    by_id: dict[AgentId, Actor] = {}
    kind: type | None = None
    for agent in agents:
        agent_id = getattr(agent, "id", None)
        if isinstance(agent_id, bool) or not isinstance(agent_id, int | str):
            raise ConfigError(f"agent {agent!r} must have an int or str id, got {agent_id!r}")
        if kind is None:
            kind = type(agent_id)
        elif type(agent_id) is not kind:
            raise ConfigError(f"agent ids must all be int or all str, got {agent_id!r} too")
        if agent_id in by_id:
            raise ConfigError(f"two agents have the id {agent_id!r}")
        by_id[agent_id] = agent
    if not by_id:
        raise ConfigError("agents: expected at least one agent, got none")
    return {agent_id: by_id[agent_id] for agent_id in sorted(by_id)}


#: A string between two agents' records in one encoded chunk (see _lines): the C encoder
#: writes it as ``"\\u0000simulacra.split"``.
_SPLIT: Final = "\x00simulacra.split"
_SPLIT_TEXT: Final = "," + _FAST(_SPLIT) + ","
#: Agents' records encoded in one call of the C encoder.
_CHUNK: Final = 512


def _lines(values: list[Any]) -> bytes:
    """``b"".join(_line(v) for v in values)``, with one call of the encoder for all of them.

    The list of *values* with a marker between any two is encoded at once, and
    the text cut at the markers: the C encoder writes a list as its items'
    texts joined by commas, so each part is the item's own text. A value that
    holds the marker itself would be cut into more parts than there are
    values; then (or when a value is not plain JSON) each is encoded alone.
    """
    spaced: list[Any] = [_SPLIT] * (2 * len(values) - 1)
    spaced[::2] = values
    try:
        parts = _FAST(spaced)[1:-1].split(_SPLIT_TEXT)
    except (TypeError, ValueError):
        parts = []
    if len(parts) != len(values):
        return b"".join(_line(value) for value in values)
    parts.append("")
    return "\n".join(parts).encode("utf-8", "surrogatepass")


def agents_digest(scheme: str, agents: Mapping[AgentId, Actor]) -> str:
    """SHA-256 over every agent's ``get_state()``, in the order of *agents* (id order).

    Each agent's record is the canonical line of ``[id, class name, state]``;
    they are encoded a chunk at a time (:func:`_lines`: the same bytes, a
    million agents in a few seconds).
    """
    h = hashlib.sha256((scheme + ":agents\n").encode("ascii"))
    chunk: list[Any] = []
    for agent_id, agent in agents.items():
        chunk.append([agent_id, type(agent).__qualname__, agent.get_state()])
        if len(chunk) == _CHUNK:
            h.update(_lines(chunk))
            chunk = []
    if chunk:
        h.update(_lines(chunk))
    return h.hexdigest()


def misnumbered(world: World, event: ActionEvent, expected: int) -> ConfigError:
    """The error for a world whose events are not numbered 0, 1, 2... in resolution order."""
    return ConfigError(
        f"{type(world).__qualname__} numbered an event {event.index}, expected {expected}: "
        "events are numbered by World.resolve and World.failed; an override of either must "
        "number them from world.events and apply them with self.apply (whose overrides call "
        "super().apply(event))")


def _action_error(agent_id: AgentId, step: int, exc: BaseException,
                  where: str) -> AgentActionError:
    error = AgentActionError(
        f"agent {agent_id!r} failed in step {step} ({where}): {type(exc).__name__}: {exc}")
    error.agent, error.step, error.phase = agent_id, step, "act"
    return error
