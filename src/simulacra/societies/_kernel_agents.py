"""LLM agents as kernel processes: one clock for queues, timeouts and language models.

An LLM agent here is a generator process of a keyed :class:`~simulacra.Sim`.
Between model calls it may yield any kernel event -- a ``Resource`` request, a
``Store`` get, ``sim.delay(...)``, a condition (``req | sim.delay(patience)``)
-- and its model calls are kernel events too::

    sim = Sim(seed=1, ordering="keyed", trace=True)
    llm = LLMRuntime(sim, ScriptedModel(seed=1), mode="threads", concurrency=16)
    doctors = Resource(sim, capacity=2)

    def patient(sim, ctx):
        reply = yield ctx.complete(CompletionRequest.chat("Wait or leave?"))
        with doctors.request() as req:
            yield req | sim.delay(30.0)

    llm.spawn(patient, agent="ann")
    sim.run()

So a queueing model can hold LLM agents, and SimPy-style processes and LLM
agents share one clock, one event queue and one trace.

**A call is an event.** ``ctx.complete(request)`` returns an event that
succeeds with the :class:`~simulacra.llm.Completion` at ``t0 + d``: ``t0`` is
the virtual time of the call and ``d`` the latency model's simulated duration
of that completion (never wall-clock time), at least ``min_duration``. The
call site is ``(agent, n)`` -- the agent's n-th call -- so recordings and the
scripted model answer it the same way in every run.

**Why any concurrency gives the same trace.** The kernel orders events by
``(time, key)``. The completion event's key is reserved at the call, from the
calling process (``sim._next_key()``, exactly the key ``sim.delay`` would have
taken), so it does not depend on when the reply arrived. In ``sequential``
mode the call is made there and then. In ``threads`` and ``asyncio`` mode it
is started on a pool, and a *harvest* event at ``t0 + min_duration`` waits
for it and schedules the completion at ``t0 + d`` with the reserved key.
Nothing that happens before ``t0 + min_duration`` can depend on the reply
(``d >= min_duration``), so every call started inside that window runs at
once in wall-clock time -- the kernel's lookahead -- and the harvest sorts
before every model event at its instant (its key's priority is below the
kernel's ``URGENT``), so a completion due at that very instant still takes
its place among them by its own key. Harvests call no model code and write
no trace record. The event order, hence the trace, is that of a run that
makes one call at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import functools
import hashlib
import random
import threading
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any, Final, final

import simulacra.llm as _llm
from simulacra._util import plural
from simulacra.core import Event, Process, Sim
from simulacra.errors import ConfigError, ForeignEvent, NotAnEvent

from ._rounds import _check_int, canonical_mode, check_latency

if TYPE_CHECKING:
    from simulacra.llm import Completion, CompletionRequest, LanguageModel

__all__ = ["KERNEL_AGENT_MODES", "LLMContext", "LLMRuntime"]

#: Where model calls run in wall-clock time (the trace is the same in each).
KERNEL_AGENT_MODES: Final = ("sequential", "threads", "asyncio")
#: A harvest's key priority: before the kernel's URGENT (0) and NORMAL (1) events.
_HARVEST: Final = -1


_MASK64: Final = (1 << 64) - 1
_TWO_POW_53: Final = 2.0 ** -53


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a bijective 64-bit mix (Steele, Lea and Flood, 2014)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class _Draws(random.Random):
    """A ``random.Random`` whose draws are SplitMix64 of a counter: no state to seed.

    Seeding a Mersenne Twister costs more than the few draws a latency model
    makes per call; this stream starts in O(1). ``random()`` and
    ``getrandbits()`` are replaced, so every method of ``random.Random``
    (``lognormvariate``, ``gauss``, ``randrange``...) draws from the counter.
    """

    def __init__(self, state: int) -> None:  # no super().__init__: nothing to seed
        self._state = state
        self.gauss_next = None

    def random(self) -> float:
        self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK64
        return (_mix64(self._state) >> 11) * _TWO_POW_53

    def getrandbits(self, k: int) -> int:
        bits, have = 0, 0
        while have < k:
            self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK64
            bits, have = (bits << 64) | _mix64(self._state), have + 64
        return bits >> (have - k)

    def seed(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a latency stream is seeded by the runtime, not reseeded")


def fire_at(sim: Sim, when: float, key: tuple[Any, ...], value: Any = None, *,
            event: Event[Any] | None = None, ok: bool = True,
            callback: Callable[[Event[Any]], object] | None = None) -> Event[Any]:
    """Trigger *event* (a new one when None) with *value* and schedule it at *when* under *key*.

    The triggered-but-not-yet-scheduled event is how the societies put work on a
    keyed Sim at a key chosen elsewhere (reserved at a call, or a seeded tiebreak).
    """
    if event is None:
        event = sim.event()
    event._ok = ok
    event._value = value
    if callback is not None:
        callbacks = event.callbacks
        assert callbacks is not None  # noqa: S101  (not processed yet)
        callbacks.append(callback)
    sim._schedule_keyed(event, when, key)
    return event


def _describe(value: object) -> str:
    if isinstance(value, Generator):
        return (f"a generator ({getattr(value, '__name__', 'generator')}: did you mean "
                "`yield from` or `sim.spawn(...)`?)")
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} (a {type(value).__name__})"


async def _drain() -> None:
    """Wait for every other task of the running loop to finish (they were cancelled)."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    await asyncio.gather(*tasks, return_exceptions=True)


@final
class LLMContext:
    """What an LLM agent process holds: its id, its Sim, and its model calls.

    Attributes:
        agent: The agent's id (a str): the process's name and the call site's agent.
        calls: The model calls this agent has made so far (the next call's ``n``).
    """

    __slots__ = ("_processes", "_runtime", "_salt", "agent", "calls")

    def __init__(self, runtime: LLMRuntime, agent: str) -> None:
        self._runtime = runtime
        self.agent = agent
        self.calls = 0
        self._processes = 0
        #: The seed of this agent's latency draws: a keyed BLAKE2b of the Sim's
        #: seed and the agent id; call n draws from Random(mix64(salt ^ n)).
        self._salt = int.from_bytes(hashlib.blake2b(
            agent.encode(), key=runtime._key, digest_size=8, person=b"latency").digest(), "big")

    @property
    def sim(self) -> Sim:
        """The Sim the agent lives in."""
        return self._runtime.sim

    def complete(self, request: CompletionRequest) -> Event[Completion]:
        """Ask the model; return the event that succeeds with its completion.

        The event fires at ``now + d``, ``d`` the latency model's simulated
        duration of the call (at least ``min_duration``). If the model raises
        (a provider error, a replay miss), the event fails with that exception
        at ``now + min_duration``: it is thrown into the agent at its
        ``yield``, where the agent may catch it.

        Raises:
            ConfigError: *request* is not a :class:`~simulacra.llm.CompletionRequest`.
        """
        return self._runtime._call(self, request)

    def record(self, kind: str, payload: object = None) -> None:
        """Write a model-level record ``(now, kind, agent, payload)`` to the Sim's trace."""
        self._runtime.sim.record(kind, self.agent, payload)

    def __repr__(self) -> str:
        return f"<LLMContext {self.agent!r} calls={self.calls}>"


@final
class LLMRuntime:
    """Runs LLM agents as processes of a keyed :class:`~simulacra.Sim`.

    Args:
        sim: The Sim; it must order ties by model identity
            (``Sim(ordering="keyed")``), which is what makes the trace the same
            at every *mode* and *concurrency*.
        model: The language model every agent asks (a
            :class:`~simulacra.llm.LanguageModel`: the scripted model, an
            OpenAI-compatible client, a :class:`~simulacra.llm.RecordingModel`
            or :class:`~simulacra.llm.ReplayModel`).
        latency: The latency model (``duration(request, completion, rng)`` and
            ``min_duration > 0``); default :class:`~simulacra.llm.LatencyModel`.
        mode: ``"sequential"`` (calls made one at a time, in the run loop),
            ``"threads"`` or ``"asyncio"`` (calls run concurrently inside the
            lookahead window).
        concurrency: Model calls in flight at once (threads and asyncio).

    Use it as a context manager, or call :meth:`close` when done, to stop
    its threads.

    Raises:
        ConfigError: A Sim that is not keyed, a bad mode, concurrency or
            latency model, or a model without ``complete``.
    """

    __slots__ = (
        "_calls",
        "_closed",
        "_completion_tokens",
        "_concurrency",
        "_contexts",
        "_harvests",
        "_inflight",
        "_key",
        "_latency",
        "_loop",
        "_loop_thread",
        "_min",
        "_mode",
        "_model",
        "_names",
        "_pool",
        "_prompt_tokens",
        "_semaphore",
        "sim",
    )

    def __init__(self, sim: Sim, model: LanguageModel, *, latency: Any = None,
                 mode: str = "sequential", concurrency: int = 16) -> None:
        if not isinstance(sim, Sim):
            raise ConfigError(f"LLMRuntime(sim=...): expected a simulacra Sim, got "
                              f"{type(sim).__name__} {sim!r}")
        if not sim._keyed:
            raise ConfigError(
                "LLMRuntime needs Sim(ordering='keyed'): its model calls complete at "
                "keys reserved when they are made, so the trace is the same at every "
                "mode and concurrency; this Sim orders ties fifo")
        if isinstance(model, type):
            raise ConfigError(f"LLMRuntime(model=...): got the class {model.__name__}; pass an "
                              f"instance ({model.__name__}(...))")
        if not callable(getattr(model, "complete", None)):
            raise ConfigError(f"LLMRuntime(model=...): expected a language model with "
                              f"complete(request, site=...), got {type(model).__name__}")
        mode = canonical_mode(mode)  # type: ignore[assignment]
        if mode not in KERNEL_AGENT_MODES:
            raise ConfigError(f"LLMRuntime(mode=...): expected one of "
                              f"{', '.join(KERNEL_AGENT_MODES)}, got {mode!r}")
        self._concurrency = _check_int("concurrency", concurrency, 1)
        latency, minimum = check_latency(latency, "LLMRuntime(latency=...)")
        self.sim = sim
        self._model = model
        self._latency = latency
        self._min = minimum
        self._mode = mode
        self._key = sim.seed.child("simulacra.societies.kernel_agents").seed.to_bytes(16, "big")
        self._contexts: dict[str, LLMContext] = {}
        self._calls = self._prompt_tokens = self._completion_tokens = 0
        self._harvests = 0
        self._closed = False
        self._names: set[str] = set()
        self._inflight: set[cf.Future[Any]] = set()
        self._pool: cf.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._semaphore: asyncio.Semaphore | None = None

    # -- agents -------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """Where model calls run: sequential, threads or asyncio."""
        return str(self._mode)

    @property
    def min_duration(self) -> float:
        """The latency model's lower bound: the lookahead window of concurrent calls."""
        return self._min

    def context(self, agent: str) -> LLMContext:
        """The context of *agent* (one per id: its call count goes on across processes)."""
        given: object = agent
        if not isinstance(given, str) or not given:
            raise ConfigError(f"agent must be a non-empty str, got {agent!r}")
        ctx = self._contexts.get(agent)
        if ctx is None:
            ctx = self._contexts[agent] = LLMContext(self, agent)
        return ctx

    def spawn(self, fn: Callable[..., Generator[Any, Any, Any]], /, *args: Any, agent: str,
              **kwargs: Any) -> Process[Any]:
        """Start ``fn(sim, ctx, *args, **kwargs)`` as the process of *agent*.

        The process is named *agent* (so it is who the trace names, and its
        keyed identity does not depend on spawn order); an agent's second and
        later processes are named ``agent#2``, ``agent#3``... Everything it yields
        is checked: a value that is not an event of this Sim stops the run
        with one error naming the agent, the time, its calls so far and what
        it yielded.

        Raises:
            ConfigError: *fn* is not callable, or *agent* is not a non-empty str.
        """
        if not callable(fn):
            raise ConfigError(f"LLMRuntime.spawn: expected a generator function, got {fn!r}")
        ctx = self.context(agent)
        body = fn(self.sim, ctx, *args, **kwargs)
        if not isinstance(body, Generator):
            raise ConfigError(
                f"LLMRuntime.spawn: {getattr(fn, '__name__', fn)!r} for agent {agent!r} "
                f"returned {_describe(body)}; expected a generator (a function that yields "
                "events)")
        ctx._processes += 1
        # The agent's first process is named after it; later ones agent#2, agent#3...
        # (keyed order needs a name per process).
        name = agent if ctx._processes == 1 else f"{agent}#{ctx._processes}"
        if name in self._names:
            body.close()
            raise ConfigError(
                f"LLMRuntime.spawn: a process named {name!r} exists already (agent {agent!r}'s "
                f"process #{ctx._processes} takes that name); choose agent ids without '#'")
        self._names.add(name)
        return self.sim.spawn(self._guard(ctx, body), name=name)

    def _guard(self, ctx: LLMContext, body: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
        """Forward *body*'s yields to the kernel, refusing anything that is not this Sim's event."""
        sim = self.sim
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                item = body.send(value) if error is None else body.throw(error)
            except StopIteration as stop:
                return stop.value
            error = None
            if not isinstance(item, Event) or item.sim is not sim:
                what = ("an event of another Sim" if isinstance(item, Event)
                        else _describe(item))
                body.close()
                kind = ForeignEvent if isinstance(item, Event) else NotAnEvent
                bad = kind(
                    f"agent {ctx.agent!r} at t={sim.now:g} (after "
                    f"{plural(ctx.calls, 'model call')}) yielded {what}; expected an event of "
                    "this Sim: ctx.complete(...), sim.delay(...), a resource or store request, "
                    "a condition (a | b)")
                raise bad
            try:
                value = yield item
            except BaseException as exc:
                if isinstance(exc, GeneratorExit):
                    body.close()
                    raise
                error, value = exc, None

    # -- calls ----------------------------------------------------------------------------

    def _call(self, ctx: LLMContext, request: CompletionRequest) -> Event[Completion]:
        if self._closed:
            raise ConfigError(
                f"agent {ctx.agent!r}: ctx.complete() after the LLMRuntime was closed; run the "
                "Sim inside `with LLMRuntime(...):`")
        if not isinstance(request, _llm.CompletionRequest):
            raise ConfigError(
                f"agent {ctx.agent!r}: ctx.complete() takes a CompletionRequest "
                f"(CompletionRequest.chat(...)), got {_describe(request)}")
        sim = self.sim
        site = _llm.CallSite(ctx.agent, ctx.calls)
        ctx.calls += 1
        key = sim._next_key()  # the key sim.delay() would take here: mode-independent
        start = sim.now
        done: Event[Completion] = sim.event()
        # The trace record's callback is attached now, before the agent waits on
        # the event, in every mode: callbacks and the waiter keep one order.
        payload: dict[str, Any] = {"n": site.n, "request": request.key()}
        callbacks = done.callbacks
        assert callbacks is not None  # noqa: S101  (a fresh event)
        callbacks.append(functools.partial(self._delivered, site.agent, payload))
        if self._mode == "sequential":
            try:
                outcome: tuple[bool, Any] = (True, self._model.complete(request, site=site))
            except Exception as exc:
                outcome = (False, exc)
            self._finish(done, request, site, start=start, key=key, outcome=outcome,
                         payload=payload)
            return done
        future = self._submit(request, site)
        self._inflight.add(future)
        future.add_done_callback(self._inflight.discard)
        def collect(_: Event[None]) -> None:
            if future.cancelled() or (self._closed and not future.done()):
                raise ConfigError(
                    f"agent {ctx.agent!r}: its model call {site.n} was in flight when the "
                    "LLMRuntime was closed; run the Sim inside `with LLMRuntime(...):`")
            try:
                result: tuple[bool, Any] = (True, future.result())
            except Exception as exc:  # delivered into the agent
                result = (False, exc)
            self._finish(done, request, site, start=start, key=key, outcome=result,
                         payload=payload)

        self._harvests += 1
        fire_at(sim, start + self._min, (_HARVEST, "", self._harvests), callback=collect)
        return done

    def _finish(self, done: Event[Completion], request: CompletionRequest, site: Any, *,
                start: float, key: tuple[Any, ...], outcome: tuple[bool, Any],
                payload: dict[str, Any]) -> None:
        ok, value = outcome
        if ok:
            completion: Completion = value
            if not isinstance(completion, _llm.Completion):
                raise ConfigError(
                    f"agent {site.agent!r}, call {site.n}: the model "
                    f"{type(self._model).__name__} returned {_describe(completion)}; expected "
                    "a simulacra.llm.Completion")
            rng = self._latency_rng(site.agent, site.n)
            duration = max(self._min, float(self._latency.duration(request, completion, rng)))
            payload["latency"] = duration
            payload["tokens"] = [completion.prompt_tokens, completion.completion_tokens]
        else:
            duration = self._min
            payload["error"] = type(value).__name__
        fire_at(self.sim, start + duration, key, value, event=done, ok=ok)

    def _delivered(self, agent: str, payload: dict[str, Any], event: Event[Any]) -> None:
        """A call's completion event is processed: count it, and write its trace record.

        Counting here, in virtual time, makes :attr:`calls` the same in every mode.
        """
        if event._ok:
            completion = event._value
            self._calls += 1
            self._prompt_tokens += completion.prompt_tokens
            self._completion_tokens += completion.completion_tokens
        self.sim.record("llm", agent, payload)

    def _latency_rng(self, agent: str, n: int) -> random.Random:
        """The stream call *n* of *agent* draws its latency noise from (a pure function)."""
        return _Draws(_mix64(self.context(agent)._salt ^ n))

    def _submit(self, request: CompletionRequest, site: Any) -> cf.Future[Completion]:
        if self._mode == "threads":
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(self._concurrency,
                                                   thread_name_prefix="simulacra-llm")
            return self._pool.submit(self._model.complete, request, site=site)
        loop = self._event_loop()
        return asyncio.run_coroutine_threadsafe(self._acall(request, site), loop)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                ready.set()
                loop.run_forever()

            thread = threading.Thread(target=serve, name="simulacra-llm-loop", daemon=True)
            thread.start()
            ready.wait()
            self._loop, self._loop_thread = loop, thread
        return self._loop

    async def _acall(self, request: CompletionRequest, site: Any) -> Completion:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._concurrency)
        async with self._semaphore:
            acomplete = getattr(self._model, "acomplete", None)
            if acomplete is None:
                return await asyncio.to_thread(self._model.complete, request, site=site)
            result: Completion = await acomplete(request, site=site)
            return result

    # -- accounting and cleanup --------------------------------------------------------------

    @property
    def calls(self) -> int:
        """Model calls answered so far, counted when the agent gets the reply.

        Counted in virtual time, so the count is the same in every mode; a
        failed call is not counted.
        """
        return self._calls

    @property
    def tokens(self) -> tuple[int, int]:
        """(prompt, completion) tokens of the calls answered so far."""
        return self._prompt_tokens, self._completion_tokens

    @property
    def agents(self) -> Iterator[str]:
        """The ids of the agents that have a context, in the order they got one."""
        return iter(self._contexts)

    def close(self) -> None:
        """Stop the pool or event loop; no call can be made after it.

        Calls not started yet are cancelled; on threads, calls running are
        waited for; on asyncio they are cancelled. A Sim run on afterwards
        stops with one error at the first call that was left in flight.
        """
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        loop, thread = self._loop, self._loop_thread
        self._loop = self._loop_thread = None
        if loop is not None and thread is not None:
            for future in list(self._inflight):
                future.cancel()
            # Let the cancelled tasks finish on the loop, so none is destroyed pending.
            asyncio.run_coroutine_threadsafe(_drain(), loop).result()
            # A model that keeps a client per event loop (OpenAICompatible, also
            # behind wrappers) closes this loop's client before the loop goes.
            release = getattr(self._model, "aclose_loop", None)
            if callable(release):
                asyncio.run_coroutine_threadsafe(release(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()

    def __enter__(self) -> LLMRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<LLMRuntime {self._mode} concurrency={self._concurrency} "
                f"agents={len(self._contexts)} calls={self._calls}>")
