"""A society over shards: ``sim.engine.shards=N`` runs the round engine's turns on N shards.

The agents are partitioned over the shards (round-robin in id order). Each
shard holds its agents and a *replica* of the world, built by the same
factory, and makes its agents' model calls itself. The coordinator (the
engine in the run's process) keeps the one world that resolves actions. A
step goes like this:

1. The coordinator sends each shard the events resolved since its last step,
   and the ids of its agents that take a turn now.
2. Each shard applies the events to its replica (:meth:`World.replay`), takes
   one snapshot, and runs its agents' turns against it: observe, prompt, call,
   parse. It returns each turn's action (or its error) and the model calls it
   made.
3. The coordinator passes those calls through its own model stack (meter,
   recordings, ``calls.jsonl``) in call-site order. It then resolves the
   actions in the engine's seeded order, exactly as one process does.

Who acts where never reaches the results. A turn sees the state the
unsharded engine shows it (the replica is the world as of the step's start),
its agent's own state and its model's reply for its call site. The
resolution order and every event are the coordinator's. So the digest and
``action_events.jsonl`` are byte-identical at any shard count and in any
``shard_mode`` (``inline``: shards stepped in turn in one process;
``threads``; ``processes``: one process each).

A checkpoint holds the coordinator's world and the agents' states, pulled
from the shards: the format of an unsharded run. A run therefore resumes at
any shard count, and so does its replay.

The event-driven engine on shards is ``_sharded_events.py``. What shards do
not take yet (each refused in one line before anything is written): a
scenario (it changes the world outside events), ``run.budget`` (the calls are
paid in the shards before the coordinator sees them), OpenTelemetry tracing,
and ``sim.engine.mode=asyncio`` on the round engine's shards.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import itertools
import multiprocessing
import pickle
import signal
import threading
import time as _time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from simulacra._util import ModelWrapper
from simulacra.agents import LLMAgent
from simulacra.errors import ConfigError, ShardCrashed
from simulacra.executors import RefLoader

from ._rounds import RoundEngine

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from simulacra.agents import ActionEvent, ActionSpec, Actor, AgentId, World
    from simulacra.llm import CallSite, Completion, CompletionRequest, LanguageModel

    from ._config import RunConfig

__all__ = ["SHARD_MODES", "ServedCalls", "ShardSet", "ShardSpec", "ShardedRoundEngine",
           "check_apart", "check_shards", "partition", "pass_through", "shard_parts"]

#: How shards run: stepped in turn in this process, on threads, in processes, or as
#: actors on the workers of a Dask cluster.
SHARD_MODES: Final = ("inline", "threads", "processes", "dask")

#: One call a shard made: (agent, n, request, completion or error, wall seconds).
Call = tuple[str, int, "CompletionRequest", Any, float]
#: A turn's outcome: (True, action) or (False, error).
Outcome = tuple[bool, Any]


def check_shards(config: RunConfig) -> None:
    """Refuse what shards do not take yet, before anything is built or written.

    Raises:
        ConfigError: One line naming the setting and why.
    """
    engine = config.sim.engine
    if engine.shards == 1:
        return
    why = None
    if engine.step.built_in not in ("round", "async_event"):
        why = (f"the step engine {engine.step.built_in!r} does not run on shards (the round "
               "and the event-driven engines do)")
    elif config.data.get("scenario") is not None:
        why = "a scenario changes the world outside its events, which shards cannot follow yet"
    elif config.run.budget.tokens is not None or config.run.budget.cost is not None:
        why = ("run.budget cannot be held on shards (their calls are paid before the "
               "coordinator sees them); drop the budget or use one shard")
    elif config.run.trace.otel != "off":
        why = "run.trace.otel does not follow turns into shards yet"
    elif engine.mode == "asyncio" and engine.step.built_in == "round":
        why = "sim.engine.mode=asyncio inside a shard is not built yet (use threads)"
    if why is not None:
        raise ConfigError(f"sim.engine.shards={engine.shards}: {why}")
    if engine.shard_mode == "dask":
        _check_dask(config.run.dask.scheduler_address)


def _check_dask(address: str | None) -> None:
    """The ``distributed`` package is there, and the scheduler (if named) answers.

    Raises:
        ConfigError: One line: the install command, or the address that did not answer.
    """
    from simulacra.executors import import_distributed  # noqa: PLC0415

    try:
        distributed = import_distributed()
    except Exception as exc:  # BackendUnavailable with the install hint
        raise ConfigError(f"sim.engine.shard_mode=dask: {exc}") from None
    if address is None:
        return
    try:
        client = distributed.Client(address, set_as_default=False, timeout=5)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(f"run.dask.scheduler_address={address!r}: the Dask scheduler does "
                          f"not answer ({type(exc).__name__}: {exc})") from None
    client.close()


@dataclass
class ShardSpec:
    """What a shard is built from (picklable: it crosses into a shard's process).

    Attributes:
        index: The shard's number.
        agents: The ids of its agents (as ``str``).
        config: The run's config data and its source path.
        build: ``build(config) -> (world, agents)``: the society, as the run builds it.
        model: ``model(config, agent_ids) -> LanguageModel``: the shard's model
            (None: use :attr:`shared`).
        shared: A model object the shard uses as it is (one process only).
        reuse: A recordings file whose calls the shard serves from it (a resumed
            run: the calls it already paid for), or None.
        mode: ``sequential`` or ``threads``: how the shard runs its turns.
        concurrency: Turns in flight at once inside the shard (threads).
    """

    index: int
    agents: list[str]
    config: tuple[dict[str, Any], str | None]
    build: Callable[[RunConfig], tuple[World, list[Actor]]]
    model: Callable[[RunConfig, list[str]], LanguageModel] | None = None
    shared: LanguageModel | None = None
    reuse: str | None = None
    mode: str = "sequential"
    concurrency: int = 16
    extra: dict[str, Any] = field(default_factory=dict)


class _Capture(ModelWrapper):
    """Shard side: passes calls on, keeping each (site, request, reply, wall) for the run."""

    __slots__ = ("_lock", "calls", "inner")

    inner: LanguageModel

    def __init__(self, inner: LanguageModel) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.calls: list[Call] = []

    def _keep(self, site: CallSite | None, request: CompletionRequest, result: Any,
              wall: float) -> None:
        if site is None:
            return
        with self._lock:
            self.calls.append((site.agent, site.n, request, result, wall))

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        start = _time.perf_counter()
        try:
            completion = self.inner.complete(request, site=site)
        except Exception as exc:
            self._keep(site, request, exc, _time.perf_counter() - start)
            raise
        self._keep(site, request, completion, _time.perf_counter() - start)
        return completion

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        start = _time.perf_counter()
        try:
            completion = await self.inner.acomplete(request, site=site)
        except Exception as exc:
            self._keep(site, request, exc, _time.perf_counter() - start)
            raise
        self._keep(site, request, completion, _time.perf_counter() - start)
        return completion

    def take(self) -> list[Call]:
        with self._lock:
            calls, self.calls = self.calls, []
        return calls

    def take_for(self, agent: str) -> list[Call]:
        """The calls of *agent* (one turn of it in flight at a time), leaving the others."""
        with self._lock:
            mine = [call for call in self.calls if call[0] == agent]
            if mine:
                self.calls = [call for call in self.calls if call[0] != agent]
        return mine


class _Reuse(ModelWrapper):
    """Shard side of a resumed run: a call already recorded is served from the recordings."""

    __slots__ = ("inner", "store")

    inner: LanguageModel

    def __init__(self, inner: LanguageModel, path: str) -> None:
        from simulacra.llm import RecordingStore  # noqa: PLC0415  (lazy)

        self.inner = inner
        self.store = RecordingStore(path, readonly=True)

    def _found(self, request: CompletionRequest, site: CallSite | None) -> Completion | None:
        key = request.key()
        found = self.store.get(key, site)
        if found is None:
            failure = self.store.failure(key, site)
            if failure is not None:
                raise failure
        return found

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        found = self._found(request, site)
        return found if found is not None else self.inner.complete(request, site=site)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        found = self._found(request, site)
        return found if found is not None else await self.inner.acomplete(request, site=site)

    def close(self) -> None:
        self.store.close()
        super().close()


class ServedCalls:
    """Coordinator side: the bottom of the run's model stack, answering with the shards' replies.

    Before the coordinator passes a batch's calls through its stack, it loads
    them here; each call then gets the reply (or raises the error) that its
    shard got for that call site.
    """

    def __init__(self) -> None:
        self._calls: dict[tuple[str, int], Any] = {}
        #: Wall seconds each call took in its shard, by call site (calls.jsonl).
        self.walls: dict[tuple[str, int], float] = {}

    def load(self, calls: Iterable[Call]) -> None:
        for agent, n, _request, result, wall in calls:
            self._calls[(agent, n)] = result
            self.walls[(agent, n)] = wall

    def forget(self, calls: Iterable[Call]) -> None:
        """Drop what is left of *calls* (their wall times, once written; a reused call)."""
        for agent, n, *_rest in calls:
            self._calls.pop((agent, n), None)
            self.walls.pop((agent, n), None)

    def clear(self) -> None:
        self._calls.clear()
        self.walls.clear()

    def _serve(self, site: CallSite | None) -> Completion:
        if site is None:
            raise ConfigError("a call on shards must name its call site")
        result = self._calls.pop((site.agent, site.n))
        if isinstance(result, BaseException):
            raise result
        completion: Completion = result
        return completion

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        return self._serve(site)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        return self._serve(site)


class _ShardCore:
    """One shard: its agents and its replica of the world (in any process)."""

    def __init__(self, spec: ShardSpec) -> None:
        from ._config import parse_config  # noqa: PLC0415  (lazy)

        data, source = spec.config
        config = parse_config(data, source)
        world, agents = spec.build(config)
        mine = set(spec.agents)
        self.world = world
        self.agents: dict[str, Actor] = {str(a.id): a for a in agents if str(a.id) in mine}
        missing = mine - self.agents.keys()
        if missing:
            raise ConfigError(f"shard {spec.index}: the factory built no agent "
                              f"{sorted(missing)[0]!r}")
        if spec.model is not None:
            inner = spec.model(config, list(spec.extra.get("all", sorted(mine))))
        elif spec.shared is not None:
            inner = spec.shared
        else:
            raise ConfigError(f"shard {spec.index}: no model")
        if spec.reuse is not None:
            inner = _Reuse(inner, spec.reuse)
        self.capture = _Capture(inner)
        for agent in self.agents.values():
            if isinstance(agent, LLMAgent):
                agent.bind(self.capture)
        self.mode = spec.mode
        self.concurrency = spec.concurrency
        self.pool: cf.ThreadPoolExecutor | None = None

    def step(self, events: Sequence[ActionEvent], ids: Sequence[str], spec: ActionSpec,
             ) -> tuple[list[Outcome], list[Call]]:
        """Apply *events* to the replica, then run the turns of *ids*; their outcomes and calls."""
        world = self.world
        with world.lock:
            world.replay(events)
        if not ids:
            return [], []
        snapshot = world.snapshot()
        agents = [self.agents[i] for i in ids]

        def turn(agent: Actor) -> Outcome:
            try:
                agent.observe(world.observation_for(agent.id, snapshot))
                return True, agent.act(spec)
            except Exception as exc:
                return False, exc

        if self.mode == "threads" and len(agents) > 1:
            if self.pool is None:
                self.pool = cf.ThreadPoolExecutor(self.concurrency,
                                                  thread_name_prefix="simulacra-shard")
            outcomes = list(self.pool.map(turn, agents))
        else:
            outcomes = [turn(agent) for agent in agents]
        calls = self.capture.take()
        calls.sort(key=lambda call: (call[0], call[1]))
        return outcomes, calls

    def turn(self, agent_key: str, spec: ActionSpec, observation: Any,
             ) -> tuple[bool, Any, list[Call], int]:
        """One turn of the event-driven engine: observe what the coordinator saw for it, act.

        Returns ``(ok, action or error, its model calls, the agent's calls so far)``.
        """
        agent = self.agents[agent_key]
        try:
            agent.observe(observation)
            ok, value = True, agent.act(spec)
        except Exception as exc:
            ok, value = False, exc
        calls = self.capture.take_for(agent_key)
        calls.sort(key=lambda call: call[1])
        return ok, value, calls, int(getattr(agent, "calls", 0) or 0)

    def states(self, ids: Sequence[str]) -> dict[str, Any]:
        return {i: self.agents[i].get_state() for i in ids if i in self.agents}

    def restore(self, world: Mapping[str, Any], agents: Mapping[str, Any]) -> None:
        with self.world.lock:
            self.world.set_state(world)
        for key, state in agents.items():
            agent = self.agents.get(key)
            if agent is not None:
                agent.set_state(state)

    def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        close = getattr(self.capture, "close", None)
        if callable(close):
            close()


def _portable(outcomes: list[Outcome], calls: list[Call]) -> tuple[list[Outcome], list[Call]]:
    """Errors a process cannot pickle become :class:`ShardCrashed` naming them (rare)."""
    def fix(value: Any) -> Any:
        if isinstance(value, BaseException):
            try:
                pickle.dumps(value)
            except Exception:
                return RuntimeError(f"{type(value).__name__}: {value}")
        return value

    return ([(ok, fix(value)) for ok, value in outcomes],
            [(a, n, r, fix(result), w) for a, n, r, result, w in calls])


def _shard_main(conn: Connection, spec: ShardSpec) -> None:
    """A shard process: build the shard, then answer the coordinator until told to stop.

    Each request is ``(id, command, args)`` and each answer ``(id, "ok" | "error",
    value)``. Turns of the event-driven engine (``turn``) run on the shard's
    threads, several at once, and are answered as they finish; every other
    command is answered in order.
    """
    # A Ctrl-C reaches the whole process group: the run stops at the end of its step
    # (the coordinator's handler), and a shard must still be there to finish the step.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        core = _ShardCore(spec)
    except BaseException as exc:  # reported to the coordinator
        with contextlib.suppress(OSError):
            conn.send((0, "error", f"{type(exc).__name__}: {exc}"))
        return
    sending = threading.Lock()

    def answer(rid: int, kind: str, value: Any) -> None:
        with sending, contextlib.suppress(OSError):
            conn.send((rid, kind, value))

    def turn(rid: int, args: tuple[Any, ...]) -> None:
        try:
            ok, value, calls, count = core.turn(*args)
            (ok, value), = _portable([(ok, value)], [])[0]
            calls = _portable([], calls)[1]
            answer(rid, "ok", (ok, value, calls, count))
        except BaseException as exc:  # reported to the coordinator
            answer(rid, "error", f"{type(exc).__name__}: {exc}")

    answer(0, "ok", None)
    turns: cf.ThreadPoolExecutor | None = None
    try:
        while True:
            try:
                rid, command, args = conn.recv()
            except (EOFError, OSError, KeyboardInterrupt):  # the run is gone, or stopping
                break
            if command == "turn":
                if turns is None:
                    turns = cf.ThreadPoolExecutor(max(1, spec.concurrency),
                                                  thread_name_prefix="simulacra-shard-turn")
                turns.submit(turn, rid, args)
                continue
            try:
                if command == "step":
                    result: Any = _portable(*core.step(*args))
                elif command == "states":
                    result = core.states(*args)
                elif command == "restore":
                    core.restore(*args)
                    result = None
                elif command == "close":
                    core.close()
                    answer(rid, "ok", None)
                    break
                else:
                    result = None
                answer(rid, "ok", result)
            except BaseException as exc:  # reported to the coordinator
                answer(rid, "error", f"{type(exc).__name__}: {exc}")
                if not isinstance(exc, Exception):
                    break
    finally:
        if turns is not None:
            turns.shutdown(wait=True)


class _ProcessShard:
    """The coordinator's handle on a shard in its own process.

    Requests carry an id; a reader thread hands each answer to the future of
    its request, so several threads may have turns in flight on one shard.
    """

    def __init__(self, spec: ShardSpec, context: Any) -> None:
        self.index = spec.index
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_shard_main, args=(child, spec),
                                       name=f"simulacra-shard-{spec.index}", daemon=True)
        self.process.start()
        child.close()
        self._ids = itertools.count(1)
        self._sending = threading.Lock()
        self._waiting: dict[int, cf.Future[Any]] = {}
        self._lost: ShardCrashed | None = None
        self._last: cf.Future[Any] | None = None

    def ready(self) -> None:
        """Wait until the shard is built (shards start at once, then are waited for)."""
        _rid, kind, value = self._first()
        if kind == "error":
            self.process.join(5)
            raise ShardCrashed(f"shard {self.index}: {value}")
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"simulacra-shard-{self.index}-in")
        self._reader.start()

    def _died(self) -> ShardCrashed:
        self.process.join(0.5)
        code = self.process.exitcode
        return ShardCrashed(f"shard {self.index} (pid {self.process.pid}) died"
                            + (f" with exit code {code}" if code is not None else ""))

    def _first(self) -> tuple[int, str, Any]:
        try:
            answer: tuple[int, str, Any] = self.conn.recv()
        except (EOFError, OSError):
            raise self._died() from None
        return answer

    def _read(self) -> None:
        while True:
            try:
                rid, kind, value = self.conn.recv()
            except (EOFError, OSError):
                break
            future = self._waiting.pop(rid, None)
            if future is None:
                continue
            if kind == "error":
                future.set_exception(ShardCrashed(f"shard {self.index}: {value}"))
            else:
                future.set_result(value)
        lost = self._lost = self._died()
        for rid in list(self._waiting):
            future = self._waiting.pop(rid, None)
            if future is not None and not future.done():
                future.set_exception(lost)

    def submit(self, command: str, *args: Any) -> cf.Future[Any]:
        """Send *command*; its answer arrives in the returned future."""
        future: cf.Future[Any] = cf.Future()
        if self._lost is not None:
            future.set_exception(self._lost)
            return future
        with self._sending:
            rid = next(self._ids)
            self._waiting[rid] = future
            try:
                self.conn.send((rid, command, args))
            except (BrokenPipeError, OSError):
                self._waiting.pop(rid, None)
                future.set_exception(ShardCrashed(
                    f"shard {self.index} (pid {self.process.pid}) is gone"))
        return future

    def send(self, command: str, *args: Any) -> None:
        self._last = self.submit(command, *args)

    def _answer(self) -> Any:
        future, self._last = self._last, None
        if future is None:
            raise ConfigError(f"shard {self.index}: an answer was awaited with nothing sent")
        return future.result()

    def call(self, command: str, *args: Any) -> Any:
        return self.submit(command, *args).result()

    def close(self) -> None:
        with contextlib.suppress(ShardCrashed):
            self.submit("close").result(timeout=10)
        self.conn.close()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _copied(value: Any) -> Any:
    """*value* as a shard's process would receive it: a copy, sharing no object."""
    return pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))  # noqa: S301  (our own)


class _LocalShard:
    """A shard in this process (``inline`` or ``threads``).

    What crosses between it and the coordinator is copied, as it would be
    between processes: a world state, an event or an agent's state handed
    over must not stay shared (one world's change would show in another).
    """

    def __init__(self, spec: ShardSpec) -> None:
        self.index = spec.index
        self.core = _ShardCore(spec)

    def call(self, command: str, *args: Any) -> Any:
        if command == "step":
            events, ids, spec = args
            return _copied(_portable(*self.core.step(_copied(events), ids, spec)))
        if command == "turn":
            agent_key, spec, observation = args
            ok, value, calls, count = self.core.turn(agent_key, spec, _copied(observation))
            (ok, value), = _portable([(ok, value)], [])[0]
            return _copied((ok, value, _portable([], calls)[1], count))
        if command == "states":
            return _copied(self.core.states(*args))
        if command == "restore":
            self.core.restore(*_copied(args))
            return None
        raise ConfigError(f"unknown shard command {command!r}")

    def close(self) -> None:
        self.core.close()


class _DaskShard:
    """A shard held by a Dask actor on one worker of the cluster."""

    def __init__(self, spec: ShardSpec, client: Any, worker: str | None) -> None:
        self.index = spec.index
        self.worker = worker
        self.client = client
        self._future: Any = None
        try:
            future = client.submit(_ShardCore, spec, actor=True, pure=False,
                                   workers=None if worker is None else [worker],
                                   key=f"simulacra-shard-{spec.index}-{id(self):x}")
            with client.as_current():  # an actor's proxy talks through the current client
                self.actor = future.result()
        except Exception as exc:
            raise ShardCrashed(f"shard {self.index} could not start on the Dask cluster "
                               f"({type(exc).__name__}: {exc})") from None
        self._keep = future  # the actor lives as long as its future is held

    def submit(self, command: str, *args: Any) -> Any:
        """Call the actor's *command*; its answer is the returned future's."""
        try:
            with self.client.as_current():
                return getattr(self.actor, command)(*args)
        except Exception as exc:
            raise self._lost(exc) from None

    def wait(self, future: Any) -> Any:
        try:
            with self.client.as_current():
                return future.result()
        except (ConfigError, ShardCrashed):
            raise
        except Exception as exc:
            raise self._lost(exc) from None

    def send(self, command: str, *args: Any) -> None:
        self._future = self.submit(command, *args)

    def _lost(self, exc: BaseException) -> ShardCrashed:
        where = f" on worker {self.worker}" if self.worker else ""
        return ShardCrashed(f"shard {self.index}{where} was lost ({type(exc).__name__}: "
                            f"{exc}); resume the run from its last checkpoint")

    def _answer(self) -> Any:
        future, self._future = self._future, None
        return self.wait(future)

    def call(self, command: str, *args: Any) -> Any:
        return self.wait(self.submit(command, *args))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("close")
        with contextlib.suppress(Exception):
            self._keep.release()


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


class ShardSet:
    """The shards of one run: started on first use, stopped by :meth:`close`.

    Args:
        specs: One :class:`ShardSpec` per shard.
        mode: One of :data:`SHARD_MODES`.
        dask: ``dask`` mode: the scheduler's address (None: a LocalCluster on loopback).
    """

    def __init__(self, specs: Sequence[ShardSpec], mode: str, dask: str | None = None) -> None:
        if mode not in SHARD_MODES:
            raise ConfigError(f"shard_mode must be one of {SHARD_MODES}, got {mode!r}")
        self.specs = list(specs)
        self.mode = mode
        #: Which shard holds each agent (by its key, ``str(id)``).
        self.shard_of: dict[str, int] = {a: spec.index for spec in self.specs
                                         for a in spec.agents}
        self.shards: list[Any] = []
        self.open = False
        self._dask = dask
        self._cluster: tuple[Any, Any] | None = None
        self._inline = threading.Lock()  # inline: one shard works at a time

    def check(self, keys: Iterable[str]) -> None:
        """Every agent is on a shard.

        Raises:
            ConfigError: One is not.
        """
        unknown = [key for key in keys if key not in self.shard_of]
        if unknown:
            raise ConfigError(f"agent {unknown[0]!r} is on no shard")

    def start(self) -> bool:
        """Start the shards if they are not running; whether they were started now."""
        if self.open:
            return False
        if self.mode == "processes":
            context = _context()
            try:
                for spec in self.specs:  # every process starts and builds at once
                    self.shards.append(_ProcessShard(spec, context))
                for shard in self.shards:
                    shard.ready()
            except BaseException:
                self.close()
                raise
        elif self.mode == "dask":
            client = self._dask_client()
            workers = sorted(client.nthreads())
            try:
                for spec in self.specs:
                    worker = workers[spec.index % len(workers)] if workers else None
                    self.shards.append(_DaskShard(spec, client, worker))
            except BaseException:
                self.close()
                raise
        else:
            self.shards = [_LocalShard(spec) for spec in self.specs]
        self.open = True
        return True

    def _dask_client(self) -> Any:
        """The Dask client: of the scheduler at the address, or of a LocalCluster made here."""
        if self._cluster is not None:
            return self._cluster[1]
        from simulacra.executors import import_distributed, local_dask_client  # noqa: PLC0415

        distributed = import_distributed()
        if self._dask is None:
            cluster, client = local_dask_client(distributed, len(self.specs))
        else:
            try:
                client = distributed.Client(self._dask, set_as_default=False, timeout=10)
            except (OSError, TimeoutError) as exc:
                raise ShardCrashed(f"cannot reach the Dask scheduler at "
                                   f"run.dask.scheduler_address={self._dask!r}: {exc}") from None
            cluster = None
        self._cluster = (cluster, client)
        return client

    def each(self, command: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Send *command* to every shard (with its own args) and gather the answers, in order."""
        shards = self.shards
        if self.mode in ("processes", "dask"):
            for shard, arg in zip(shards, args, strict=True):
                shard.send(command, *arg)
            return [shard._answer() for shard in shards]
        if self.mode == "threads" and len(shards) > 1:
            with cf.ThreadPoolExecutor(len(shards), thread_name_prefix="simulacra-shards") as ex:
                return list(ex.map(lambda pair: pair[0].call(command, *pair[1]),
                                   zip(shards, args, strict=True)))
        return [shard.call(command, *arg) for shard, arg in zip(shards, args, strict=True)]

    def one(self, key: str, command: str, *args: Any) -> Any:
        """*command* on the shard of agent *key*, waiting for its answer (any thread)."""
        shard = self.shards[self.shard_of[key]]
        if self.mode == "inline":
            with self._inline:
                return shard.call(command, *args)
        return shard.call(command, *args)

    def pull(self, agents: Mapping[str, Actor], keys: Iterable[str]) -> None:
        """Set each of *agents* named by *keys* to its state in its shard."""
        if not self.open:
            return
        per: list[list[str]] = [[] for _ in self.shards]
        for key in keys:
            per[self.shard_of[key]].append(key)
        for states in self.each("states", [(wanted,) for wanted in per]):
            for key, state in states.items():
                agents[key].set_state(state)

    def push(self, world: Any, agents: Mapping[str, Any]) -> None:
        """Give every shard *world* (a world state) and its agents' states of *agents*."""
        per: list[dict[str, Any]] = [{} for _ in self.shards]
        for key, agent_state in agents.items():
            per[self.shard_of[key]][key] = agent_state
        self.each("restore", [(world, mine) for mine in per])

    def close(self) -> None:
        """Stop the shards (idempotent)."""
        shards, self.shards = self.shards, []
        self.open = False
        for shard in shards:
            with contextlib.suppress(Exception):
                shard.close()
        held, self._cluster = self._cluster, None
        if held is not None:
            cluster, client = held
            with contextlib.suppress(Exception):
                client.close()
            if cluster is not None:
                with contextlib.suppress(Exception):
                    cluster.close()


def pass_through(model: Any, served: ServedCalls, calls: Sequence[Call]) -> None:
    """The shards' *calls* through the run's own model stack, in call-site order.

    The stack (meter, recordings, ``calls.jsonl``...) sits on *served*, which
    answers each call with its shard's reply: the run records what one
    process would have, whoever made the calls.
    """
    if model is None or not calls:
        return
    from simulacra.llm import CallSite  # noqa: PLC0415  (loaded by then)

    served.load(calls)
    try:
        for agent, n, request, _result, _wall in calls:
            with contextlib.suppress(Exception):  # its turn has its error already
                model.complete(request, site=CallSite(agent, n))
    finally:
        served.forget(calls)


class ShardedRoundEngine(RoundEngine):
    """The round engine with its turns on shards (see the module's doc); results as one process.

    Args:
        world, agents: As for :class:`RoundEngine`: the coordinator's world and
            agents (the agents do not act here; their states are pulled from
            the shards for digests and checkpoints).
        specs: One :class:`ShardSpec` per shard.
        shard_mode: One of :data:`SHARD_MODES`.
        served: The bottom of *model*'s stack, answering with the shards' replies.
        dask: ``dask`` mode: the scheduler's address (None: a LocalCluster).
        **kwargs: As for :class:`RoundEngine` (*model* is the run's stack over
            *served*).
    """

    __slots__ = ("_pending", "_restored", "_served", "_set")

    def __init__(self, world: World, agents: Iterable[Actor], *, specs: Sequence[ShardSpec],
                 shard_mode: str, served: ServedCalls, dask: str | None = None,
                 **kwargs: Any) -> None:
        shards = ShardSet(specs, shard_mode, dask)
        super().__init__(world, agents, **kwargs)
        shards.check(str(i) for i in self._ids)
        self._set = shards
        self._served = served
        #: Events resolved since the shards last heard: sent with their next step.
        self._pending: list[ActionEvent] = []
        self._restored: Mapping[str, Any] | None = None

    def _start(self) -> None:
        if self._set.start() and self._restored is not None:
            self._push(self._restored)

    def close(self) -> None:
        """Stop the shards (idempotent)."""
        self._set.close()

    def run(self, steps: int, *, pause: Callable[[], bool] | None = None) -> Any:
        self._start()
        return super().run(steps, pause=pause)

    # -- a batch -----------------------------------------------------------------------

    def _run_batch(self, batch: list[AgentId], spec: ActionSpec) -> list[tuple[bool, Any]]:
        self._start()
        events, self._pending = self._pending, []
        shard_of = self._set.shard_of
        groups: list[list[str]] = [[] for _ in self._set.shards]
        for agent_id in batch:
            groups[shard_of[str(agent_id)]].append(str(agent_id))
        answers = self._set.each("step", [(events, ids, spec) for ids in groups])
        by_id: dict[str, tuple[bool, Any]] = {}
        calls: list[Call] = []
        for ids, (outcomes, made) in zip(groups, answers, strict=True):
            by_id.update(zip(ids, outcomes, strict=True))
            calls.extend(made)
        calls.sort(key=lambda call: (call[0], call[1]))
        pass_through(self._meter, self._served, calls)
        on_turn = self._on_turn
        outcomes = [by_id[str(agent_id)] for agent_id in batch]
        if on_turn is not None:
            for _ in outcomes:
                on_turn()
        return outcomes

    def _resolve(self, step: int, flow: int, batch: list[AgentId],
                 outcomes: list[tuple[bool, Any]], out: list[ActionEvent]) -> int:
        start = len(out)
        failed = super()._resolve(step, flow, batch, outcomes, out)
        self._pending.extend(out[start:])
        return failed

    # -- state -------------------------------------------------------------------------

    def _pull(self, ids: Iterable[AgentId] | None) -> None:
        """Bring the coordinator's agents up to their shards' states."""
        by_key = {str(agent_id): agent for agent_id, agent in self._agents.items()}
        self._set.pull(by_key, [str(i) for i in (self._ids if ids is None else ids)])

    def _push(self, state: Mapping[str, Any]) -> None:
        """Give every shard the world and its agents' states of *state* (a restore)."""
        self._set.push(state["world"], state["agents"])
        self._pending = []

    def state(self) -> dict[str, Any]:
        touched = self._touched
        self._pull(None if touched is None else sorted(touched))
        return super().state()

    def restore(self, state: Mapping[str, Any]) -> None:
        super().restore(state)
        self._restored = state
        if self._set.open:
            self._push(state)

    def agents_digest(self) -> str:
        self._pull(None)
        return super().agents_digest()


def partition(ids: Sequence[AgentId], shards: int) -> list[list[str]]:
    """The agents of each shard: round-robin in id order."""
    keys = [str(i) for i in ids]
    return [keys[k::shards] for k in range(shards)]


#: How ``sim.engine.partition`` is loaded (as ``sim.world.factory`` is).
_PARTITIONS = RefLoader(file_module=lambda path: f"_simulacra_partition_{path.stem}",
                        package_files=True)


def shard_parts(config: RunConfig, ids: Sequence[AgentId]) -> list[list[str]]:
    """The agents of each shard: ``sim.engine.partition``'s answer, checked, or round-robin.

    Raises:
        ConfigError: The partition names an agent the society does not have,
            puts one on two shards or none, or gives another number of shards.
    """
    shards = config.sim.engine.shards
    ref = config.sim.engine.partition
    if ref is None:
        return partition(ids, shards)
    key = "sim.engine.partition"
    function = _PARTITIONS.resolve(ref, key)
    known = [str(i) for i in ids]
    try:
        answer = function(list(known), shards)
    except Exception as exc:
        raise ConfigError(f"{key}={ref!r} raised {type(exc).__name__}: {exc}") from None
    if (isinstance(answer, str | bytes | Mapping) or not isinstance(answer, Sequence)
            or len(answer) != shards):
        raise ConfigError(f"{key}={ref!r} must return a list of {shards} lists of agent ids "
                          f"(sim.engine.shards={shards}), got {type(answer).__name__}"
                          + (f" of {len(answer)}" if isinstance(answer, Sequence) else ""))
    where: dict[str, int] = {}
    members = set(known)
    parts: list[list[str]] = []
    for index, part in enumerate(answer):
        if isinstance(part, str | bytes) or not isinstance(part, Iterable):
            raise ConfigError(f"{key}: shard {index} must be a list of agent ids, got "
                              f"{type(part).__name__}")
        names = [str(agent) for agent in part]
        for name in names:
            if name not in members:
                raise ConfigError(f"{key}: shard {index} names agent {name!r}, which the "
                                  f"society does not have ({len(known)} agents, e.g. "
                                  f"{', '.join(known[:3])})")
            if name in where:
                raise ConfigError(f"{key}: agent {name!r} is on shards {where[name]} and "
                                  f"{index}; an agent is on one shard")
            where[name] = index
        parts.append(names)
    missing = [name for name in known if name not in where]
    if missing:
        raise ConfigError(f"{key}: agent {missing[0]!r} is on no shard"
                          + (f" (nor are {len(missing) - 1} more)" if len(missing) > 1 else ""))
    return parts


def check_apart(world: World, agents: Sequence[Actor]) -> None:
    """No agent's state holds the world, another agent, or an object the world's state holds.

    On one process such sharing works (an agent sees what the world changes);
    on shards each agent has its own copy, and the run would silently differ.
    So it is refused before the run starts. (Agents may share read-only data,
    such as one settings dict: nothing here can tell it is never changed, so
    only sharing with the world and holding other actors is refused.)

    Raises:
        ConfigError: One line naming the agent, the key of its state and what it holds.
    """
    actors = {id(agent): agent for agent in agents}
    world_held: set[int] = set()
    _walk(world.get_state(), world_held, lambda _obj: None)
    for agent in agents:
        def holds(obj: Any, agent: Any = agent) -> str | None:
            if obj is world:
                return "the world"
            other = actors.get(id(obj))
            if other is not None and other is not agent:
                return f"agent {str(other.id)!r}"
            if id(obj) in world_held:
                return f"a {type(obj).__name__} the world's state holds too"
            return None

        for key, value in agent.get_state().items():
            found = _walk(value, set(), holds)
            if found is not None:
                raise ConfigError(
                    f"agent {str(agent.id)!r} holds {found} in its state ({key!r}): on shards "
                    "each agent has its own copy, so it would not see the changes; give it "
                    "what it needs through its observation instead")


def _walk(value: Any, seen: set[int], holds: Callable[[Any], str | None],
          depth: int = 0) -> str | None:
    """Walk containers and objects' attributes (to a depth of 6); the first thing *holds* names."""
    if depth > 6 or isinstance(value, str | bytes | int | float | bool | type(None)):
        return None
    found = holds(value)
    if found is not None:
        return found
    if id(value) in seen:
        return None
    if isinstance(value, list | dict | set | bytearray) or hasattr(value, "__dict__"):
        seen.add(id(value))
    if isinstance(value, Mapping):
        items: Iterable[Any] = value.values()
    elif isinstance(value, list | tuple | set | frozenset):
        items = value
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        items = vars(value).values()
    else:
        return None
    for item in items:
        found = _walk(item, seen, holds, depth + 1)
        if found is not None:
            return found
    return None
