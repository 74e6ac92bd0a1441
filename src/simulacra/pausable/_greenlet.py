"""Pausable agents: plain blocking functions run on greenlets, driven on virtual time.

An agent is a plain function ``def agent(ctx, *args)`` that calls
``ctx.sleep(d)``, ``ctx.wait(event)``, ``ctx.llm.complete(request)`` and
``ctx.pause(reason)``. Each agent runs on its own greenlet. The host (the code
calling :meth:`PausableHost.start` / :meth:`PausableHost.resume` /
:meth:`PausableHost.run`) and the agents hand control to each other
cooperatively: exactly one of them executes at any instant, the others are
parked in a greenlet switch. This is the "sync agent" of the thread-per-agent
design (one OS thread and two ``threading.Event`` per agent, see
``docs/pausable.md``) at the cost of a greenlet switch instead of two thread
wake-ups, and a few KiB of heap instead of an OS thread per paused agent.

Virtual time comes from a :class:`~simulacra.Sim`. A blocking call turns into
a kernel event with the agent as its callback: ``ctx.sleep(d)`` is
``sim.delay(d)``, ``ctx.wait(event)`` waits on any event of that Sim, and
``ctx.llm.complete(request)`` asks the model for the completion and then
sleeps for the duration a latency model gives it. The kernel orders those
events (SimPy's order, or the keyed order), so the same seed gives the same
trace, and kernel processes and pausable agents mix freely on one Sim: a
process can ``yield agent.finished``, an agent can ``ctx.wait(process)``.

Errors never get lost. An exception escaping an agent marks it FAILED and is
re-raised, as the same object with the agent's frames in its traceback and a
note naming the agent, at the call site that was driving it:
:meth:`~PausableHost.start` or :meth:`~PausableHost.resume` when the agent ran
from there, :meth:`~PausableHost.run` when a kernel event woke it, unless a
kernel process waits on ``agent.finished`` and handles it there.
"""

from __future__ import annotations

import enum
import functools
import importlib
import math
import threading
from collections.abc import Callable
from threading import get_ident
from typing import Any, Final, final

from simulacra.core import Event, Sim, copy_failure
from simulacra.errors import AgentStateError, ConfigError, InvalidDelay, ThreadOwnershipError
from simulacra.rng import SeedTree

__all__ = [
    "AgentStatus",
    "PausableAgent",
    "PausableContext",
    "PausableHost",
    "LLMHandle",
]

# greenlet ships no type information; everything taken from it is Any.
_greenlet_mod: Any = importlib.import_module("greenlet")
_getcurrent: Callable[[], Any] = _greenlet_mod.getcurrent
_Greenlet: Any = _greenlet_mod.greenlet
_GreenletExit: type[BaseException] = _greenlet_mod.GreenletExit


class AgentStatus(enum.Enum):
    """Where a pausable (or async) agent is in its life.

    ``NEW`` -> ``RUNNING`` -> one of the blocked states (``PAUSED``,
    ``SLEEPING``, ``WAITING``, ``CALLING``) and back to ``RUNNING``, until
    ``DONE``, ``FAILED`` or ``CLOSED``.
    """

    NEW = "new"
    """Made by ``spawn``; not started."""
    RUNNING = "running"
    """Executing its body right now (or, for an async agent, not blocked)."""
    PAUSED = "paused"
    """Suspended in ``ctx.pause(reason)`` until the host resumes it."""
    SLEEPING = "sleeping"
    """In ``ctx.sleep(d)``: wakes when the time comes."""
    WAITING = "waiting"
    """In ``ctx.wait(event)``: wakes when the event is processed."""
    CALLING = "calling"
    """In ``ctx.llm.complete(request)``: wakes when the simulated latency has passed."""
    DONE = "done"
    """Returned; ``result`` holds the return value."""
    FAILED = "failed"
    """Raised; ``exception`` holds the exception."""
    CLOSED = "closed"
    """Unwound by ``close()`` before it finished."""

    @property
    def finished(self) -> bool:
        """True for DONE, FAILED and CLOSED: the agent will never run again."""
        return self in _FINISHED

    @property
    def blocked(self) -> bool:
        """True for PAUSED, SLEEPING, WAITING and CALLING."""
        return self in _BLOCKED

    def __repr__(self) -> str:
        return f"AgentStatus.{self.name}"


# Module constants: reading an enum member off its class costs a few hundred ns on 3.11.
_NEW = AgentStatus.NEW
_RUNNING = AgentStatus.RUNNING
_PAUSED = AgentStatus.PAUSED
_SLEEPING = AgentStatus.SLEEPING
_WAITING = AgentStatus.WAITING
_CALLING = AgentStatus.CALLING
_DONE = AgentStatus.DONE
_FAILED = AgentStatus.FAILED
_CLOSED = AgentStatus.CLOSED

_FINISHED: Final = frozenset({_DONE, _FAILED, _CLOSED})
_BLOCKED: Final = frozenset(
    {_PAUSED, _SLEEPING, _WAITING, _CALLING}
)
#: Blocked on a kernel event: only the kernel wakes these.
_ON_EVENT: Final = frozenset({_SLEEPING, _WAITING, _CALLING})


@functools.cache
def _call_site_type() -> Any:
    """``simulacra.llm.CallSite``, imported on the first model call.

    The LLM layer is part of this package (standard library only), so it is
    always there: it is only left unloaded until an agent makes a model call.
    """
    return importlib.import_module("simulacra.llm").CallSite


def _call_site(agent: str, n: int) -> Any:
    """The call site (agent id, its n-th call) in the LLM layer's own type."""
    return _call_site_type()(agent, n)


def _next_call(agent: Any, give_model: str) -> tuple[Any, int]:
    """A pausable or async agent's next ``ctx.llm.complete()``: its host's model, the call's n.

    Raises:
        AgentStateError: called from outside the agent.
        ConfigError: the host has no model (*give_model* says how to give it one).
    """
    host = agent._host
    host._check_inside(agent, "ctx.llm.complete()")
    model = host._llm
    if model is None:
        raise ConfigError(
            f"agent {agent._name!r} called ctx.llm.complete() but its host has no model; "
            f"pass {give_model}"
        )
    n: int = agent._ncalls
    agent._ncalls = n + 1
    return model, n


def _describe(obj: object) -> str:
    text = repr(obj)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(obj).__name__})"


def _is_delay(value: object) -> bool:
    """True for an int or float >= 0 (not a bool, not NaN): a valid delay or timeout."""
    return not isinstance(value, bool) and isinstance(value, int | float) and value >= 0


def _is_name(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _payload(value: object) -> object:
    """A trace payload: plain scalars as they are, anything else as its repr."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


@final
class PausableAgent:
    """A handle on one blocking-style agent run by a :class:`PausableHost`.

    Made by :meth:`PausableHost.spawn`; driven by the host's ``start``,
    ``resume``, ``throw``, ``run`` and ``close``. Read :attr:`status`,
    :attr:`pause_reason`, :attr:`result` and :attr:`exception` from host code.
    Kernel processes can wait for it with ``yield agent.finished``.
    """

    __slots__ = (
        "_args",
        "_closing",
        "_ctx",
        "_exception",
        "_fn",
        "_glet",
        "_host",
        "_index",
        "_kwargs",
        "_name",
        "_ncalls",
        "_reason",
        "_result",
        "_status",
        "_target",
        "finished",
    )

    #: Succeeds with the return value when the agent is DONE; fails with its
    #: exception when it is FAILED; stays pending if it is CLOSED.
    finished: Event[Any]

    def __init__(self, host: PausableHost, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], *, name: str, index: int) -> None:
        self._host = host
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        self._name = name
        self._index = index
        self._status = _NEW
        self._glet: Any = None
        self._reason: Any = None
        self._result: Any = None
        self._exception: BaseException | None = None
        self._ncalls = 0
        self._target: Event[Any] | None = None
        self._closing = False
        self._ctx = PausableContext(self)
        self.finished = host.sim.event()

    @property
    def name(self) -> str:
        """The agent's name, unique within its host (also its LLM call-site id)."""
        return self._name

    @property
    def host(self) -> PausableHost:
        """The host that runs this agent."""
        return self._host

    @property
    def status(self) -> AgentStatus:
        """Where the agent is now (see :class:`AgentStatus`)."""
        return self._status

    @property
    def pause_reason(self) -> Any:
        """The *reason* given to ``ctx.pause(reason)`` while PAUSED, else None."""
        return self._reason if self._status is _PAUSED else None

    @property
    def exception(self) -> BaseException | None:
        """The exception that escaped the agent (FAILED), else None."""
        return self._exception

    @property
    def llm_calls(self) -> int:
        """How many ``ctx.llm.complete`` calls the agent has made (the next call site's n)."""
        return self._ncalls

    @property
    def result(self) -> Any:
        """The agent's return value.

        Raises:
            AgentStateError: the agent is not DONE (for a FAILED agent the
                exception is chained as ``__cause__``).
        """
        if self._status is _DONE:
            return self._result
        raise AgentStateError(
            f"agent {self._name!r} is {self._status.name}, so it has no result yet; "
            "a result exists once the status is DONE"
        ) from self._exception

    def __repr__(self) -> str:
        extra = f" reason={self._reason!r}" if self._status is _PAUSED else ""
        return f"<PausableAgent {self._name!r} {self._status.name}{extra}>"

    # -- the greenlet body ----------------------------------------------------

    def _main(self, _start: object = None) -> None:
        """Run the agent function; record how it ended (never lets an exception out)."""
        try:
            result = self._fn(self._ctx, *self._args, **self._kwargs)
        except _GreenletExit:
            self._status = _CLOSED
        except BaseException as exc:
            tb = exc.__traceback__  # drop this frame: the traceback starts in the agent
            exc.__traceback__ = tb.tb_next if tb is not None else None
            self._exception = exc
            self._status = _FAILED
        else:
            if self._closing:  # swallowed GreenletExit and returned: still closed
                self._status = _CLOSED
            else:
                self._result = result
                self._status = _DONE

    def _block(self, status: AgentStatus, target: Event[Any] | None) -> Any:
        """Park the agent in *status* and hand control back to whoever ran it."""
        if self._closing:
            raise AgentStateError(
                f"agent {self._name!r} is being closed; it cannot block again "
                "(do not swallow GreenletExit in an agent)"
            )
        self._status = status
        self._target = target
        return self._glet.parent.switch()

    def _on_event(self, event: Event[Any]) -> None:
        """Kernel callback: the event this agent blocks on was processed."""
        if self._target is not event:
            return  # closed meanwhile (close() clears the target)
        self._target = None
        if event.ok:
            self._host._enter(self, event.value, None, from_kernel=True)
        else:
            event.defused = True  # handled: it is thrown into the agent
            self._host._enter(self, None, copy_failure(event.value), from_kernel=True)


@final
class LLMHandle:
    """``ctx.llm``: the language model as one blocking agent sees it."""

    __slots__ = ("_agent",)

    def __init__(self, agent: PausableAgent) -> None:
        self._agent = agent

    def complete(self, request: Any) -> Any:
        """Ask the host's model for a completion; block for its simulated latency.

        The model is called as ``model.complete(request, site=CallSite(name, n))``
        where *n* counts this agent's calls from 0, so replay and caches key
        on the call site, never on the interleaving. The agent then sleeps
        for ``latency.duration(request, completion, rng)`` units of virtual
        time (status CALLING), drawn from its own stream
        ``llm-latency/<agent name>``; with no latency model the call takes no
        virtual time but is still a hand-off.

        Returns:
            The completion the model returned.

        Raises:
            ConfigError: the host has no model, or the latency model returned
                a bad duration.
            AgentStateError: called from outside this agent.
        """
        agent = self._agent
        host = agent._host
        model, n = _next_call(
            agent, "PausableHost(llm=...) (an object with complete(request, *, site=...))")
        completion = model.complete(request, site=_call_site(agent._name, n))
        latency = host._latency
        duration = 0.0
        if latency is not None:
            rng = host.sim.rng(f"llm-latency/{agent._name}")
            duration = latency.duration(request, completion, rng)
            low = getattr(latency, "min_duration", 0.0)
            if not (isinstance(duration, int | float) and math.isfinite(duration)
                    and duration >= 0 and duration >= low):
                raise ConfigError(
                    f"latency.duration(): expected a finite number >= min_duration ({low!r}), "
                    f"got {_describe(duration)} from {type(latency).__name__} for agent "
                    f"{agent._name!r}, call {n}"
                )
        sim = host.sim
        sim.record("agent.llm", agent._name, (n, float(duration)))
        event = sim.delay(duration, completion)
        event.callbacks.append(agent._on_event)  # type: ignore[union-attr]
        return agent._block(_CALLING, event)


@final
class PausableContext:
    """``ctx``: what a blocking agent function receives as its first argument.

    Every blocking method must be called from inside the agent that owns
    the context; from anywhere else it raises :class:`AgentStateError`.
    """

    __slots__ = ("_agent", "llm")

    #: The language model, as this agent sees it (``ctx.llm.complete(request)``).
    llm: LLMHandle

    def __init__(self, agent: PausableAgent) -> None:
        self._agent = agent
        self.llm = LLMHandle(agent)

    @property
    def name(self) -> str:
        """The agent's name."""
        return self._agent._name

    @property
    def now(self) -> float:
        """The current virtual time."""
        return self._agent._host.sim.now

    @property
    def sim(self) -> Sim:
        """The Sim the agent lives on (to make events, or to mix with kernel processes)."""
        return self._agent._host.sim

    def rng(self, name: str) -> Any:
        """The agent's own seeded ``random.Random`` stream *name* (``agent/<agent>/<name>``)."""
        return self._agent._host.sim.rng(f"agent/{self._agent._name}/{name}")

    def record(self, kind: str, payload: object = None) -> None:
        """Add a record ``(now, kind, agent name, payload)`` to the Sim's trace."""
        self._agent._host.sim.record(kind, self._agent._name, payload)

    def sleep(self, delay: float) -> None:
        """Block for *delay* units of virtual time (status SLEEPING).

        Raises:
            InvalidDelay: *delay* is negative, NaN or not a number.
            AgentStateError: called from outside this agent.
        """
        agent = self._agent
        host = agent._host
        host._check_inside(agent, "ctx.sleep()")
        if not _is_delay(delay):
            raise InvalidDelay(
                f"ctx.sleep(delay): expected a number >= 0, got {_describe(delay)} "
                f"(agent {agent._name!r})"
            )
        sim = host.sim
        if host._traced:
            sim.record("agent.sleep", agent._name, float(delay))
        event = sim.delay(delay)
        event.callbacks.append(agent._on_event)  # type: ignore[union-attr]
        agent._block(_SLEEPING, event)

    def wait(self, event: Event[Any]) -> Any:
        """Block until *event* (of this agent's Sim) is processed; return its value.

        A failed event raises its exception here (and counts as handled). An
        event that was already processed returns at once, as in a kernel
        process.

        Raises:
            ConfigError: *event* is not an event of this agent's Sim.
            AgentStateError: called from outside this agent.
        """
        agent = self._agent
        host = agent._host
        host._check_inside(agent, "ctx.wait()")
        if not (isinstance(event, Event) and event.sim is host.sim):  # type: ignore[redundant-expr]
            raise ConfigError(
                f"ctx.wait(event): expected an event of this agent's Sim, got {_describe(event)} "
                f"(agent {agent._name!r})"
            )
        callbacks = event.callbacks
        if callbacks is None:  # already processed
            if event.ok:
                return event.value
            raise copy_failure(event.value)
        host.sim.record("agent.wait", agent._name, None)
        callbacks.append(agent._on_event)
        return agent._block(_WAITING, event)

    def pause(self, reason: Any = None) -> Any:
        """Suspend the agent (status PAUSED) until the host resumes it.

        Control returns to whoever ran the agent (``start``, ``resume`` or
        ``run``). The agent continues exactly here, with every local variable
        intact.

        Returns:
            The value given to ``host.resume(agent, value)``.

        Raises:
            AgentStateError: called from outside this agent.
            BaseException: whatever ``host.throw(agent, exc)`` throws in.
        """
        agent = self._agent
        host = agent._host
        host._check_inside(agent, "ctx.pause()")
        agent._reason = reason
        if host._traced:
            host.sim.record("agent.pause", agent._name, _payload(reason))
        return agent._block(_PAUSED, None)

    def __repr__(self) -> str:
        return f"<PausableContext of {self._agent._name!r}>"


@final
class PausableHost:
    """Runs blocking-style agents on greenlets, one at a time, on a Sim's virtual time.

    Args:
        sim: The Sim to run on. ``None`` makes ``Sim(seed, trace=trace)``.
        seed: The master seed when *sim* is None.
        trace: Record a trace when *sim* is None (see ``Sim(trace=...)``).
        llm: The model behind ``ctx.llm``: any object with
            ``complete(request, *, site=...)`` (a ``simulacra.llm``
            ``LanguageModel``, such as ``ScriptedModel``).
        latency: Gives each call's simulated duration: any object with
            ``duration(request, completion, rng)`` and (optionally)
            ``min_duration`` (such as ``simulacra.llm.LatencyModel``).

    The host, its Sim and its agents belong to the thread that made the host.
    """

    __slots__ = (
        "_agents", "_by_name", "_latency", "_llm", "_sim", "_thread", "_traced", "_unreported",
    )

    def __init__(self, sim: Sim | None = None, *, seed: int | str | bytes | SeedTree | None = 0,
                 trace: bool = False, llm: Any = None, latency: Any = None) -> None:
        if sim is None:
            sim = Sim(seed, trace=trace)
        elif not isinstance(sim, Sim):
            raise ConfigError(
                f"PausableHost(sim=...): expected a Sim or None, got {_describe(sim)}"
            )
        if llm is not None and not callable(getattr(llm, "complete", None)):
            raise ConfigError(
                f"PausableHost(llm=...): expected an object with complete(request, *, site=...), "
                f"got {_describe(llm)}"
            )
        if latency is not None and not callable(getattr(latency, "duration", None)):
            raise ConfigError(
                "PausableHost(latency=...): expected an object with "
                f"duration(request, completion, rng), got {_describe(latency)}"
            )
        self._sim = sim
        #: A Sim's tracer is fixed at construction: skip building payloads without one.
        self._traced = sim.tracer is not None
        self._llm = llm
        self._latency = latency
        self._agents: list[PausableAgent] = []
        self._by_name: dict[str, PausableAgent] = {}
        self._thread = threading.get_ident()
        #: Agents that failed inside run() and whose failure run() has not raised yet.
        self._unreported: list[PausableAgent] = []

    @property
    def sim(self) -> Sim:
        """The Sim giving virtual time to the agents."""
        return self._sim

    @property
    def now(self) -> float:
        """The current virtual time."""
        return self._sim.now

    @property
    def agents(self) -> tuple[PausableAgent, ...]:
        """Every agent spawned on this host, in spawn order."""
        return tuple(self._agents)

    def agent(self, name: str) -> PausableAgent:
        """The agent called *name*.

        Raises:
            ConfigError: no agent has that name.
        """
        try:
            return self._by_name[name]
        except KeyError:
            raise ConfigError(f"agent(name): no agent named {name!r} on this host") from None

    def results(self) -> dict[str, Any]:
        """The return values of the DONE agents, by name, in spawn order."""
        return {a._name: a._result for a in self._agents if a._status is _DONE}

    def spawn(self, fn: Callable[..., Any], /, *args: Any, name: str | None = None,
              **kwargs: Any) -> PausableAgent:
        """Make an agent that will run ``fn(ctx, *args, **kwargs)``; it stays NEW until ``start``.

        Args:
            fn: A plain function (not a generator or ``async def``).
            *args: Positional arguments after ``ctx``.
            name: Unique within the host; defaults to ``<fn name>-<index>``.
            **kwargs: Keyword arguments for *fn*.

        Raises:
            ConfigError: *fn* is not a plain callable, or *name* is taken.
        """
        self._check_thread("spawn()")
        code = getattr(fn, "__code__", None)
        if not callable(fn) or (code is not None and code.co_flags & 0x2A0):  # type: ignore[redundant-expr]
            # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
            raise ConfigError(
                f"spawn(fn): expected a plain function def fn(ctx, ...), got {_describe(fn)}; "
                "generators and async def functions are kernel processes (sim.spawn)"
            )
        index = len(self._agents)
        if name is None:
            name = f"{getattr(fn, '__name__', 'agent')}-{index}"
        elif not _is_name(name):
            raise ConfigError(f"spawn(name=...): expected a non-empty str, got {_describe(name)}")
        if name in self._by_name:
            raise ConfigError(f"spawn(name=...): an agent named {name!r} already exists")
        agent = PausableAgent(self, fn, args, kwargs, name=name, index=index)
        self._agents.append(agent)
        self._by_name[name] = agent
        return agent

    def start(self, agent: PausableAgent) -> AgentStatus:
        """Run a NEW agent now until it blocks (pauses, sleeps, waits, calls) or ends.

        Returns:
            The agent's status afterwards.

        Raises:
            AgentStateError: the agent is not NEW, or belongs to another host.
            BaseException: the agent's own exception if it failed (the agent is FAILED).
        """
        self._check_own(agent, "start")
        if agent._status is not _NEW:
            raise AgentStateError(
                f"start(agent): agent {agent._name!r} is {agent._status.name}; only a NEW agent "
                "can be started, and only once"
            )
        agent._glet = _Greenlet(agent._main)
        self._sim.record("agent.start", agent._name, None)
        self._enter(agent, None, None, from_kernel=False)
        return self._settled(agent)

    def resume(self, agent: PausableAgent, value: Any = None) -> AgentStatus:
        """Continue a PAUSED agent from its ``ctx.pause()``, which returns *value*.

        Runs the agent now until it blocks again or ends.

        Returns:
            The agent's status afterwards.

        Raises:
            AgentStateError: the agent is not PAUSED, or belongs to another host.
            BaseException: the agent's own exception if it failed (the agent is FAILED).
        """
        if (type(agent) is not PausableAgent or agent._host is not self  # type: ignore[redundant-expr]
                or agent._status is not _PAUSED or get_ident() != self._thread):
            self._check_paused(agent, "resume")  # raises the precise error
        if self._traced:
            self._sim.record("agent.resume", agent._name, _payload(value))
        self._enter(agent, value, None, from_kernel=False)
        return self._settled(agent)

    def throw(self, agent: PausableAgent, exception: BaseException) -> AgentStatus:
        """Raise *exception* inside a PAUSED agent, at its ``ctx.pause()``.

        The agent may handle it and go on; if it does not, it fails and the
        exception comes back out of this call.

        Raises:
            AgentStateError: the agent is not PAUSED, or belongs to another host.
            ConfigError: *exception* is not an exception instance.
        """
        self._check_paused(agent, "throw")
        if not isinstance(exception, BaseException):
            raise ConfigError(
                f"throw(agent, exception): expected an exception instance, got "
                f"{_describe(exception)}"
            )
        self._sim.record("agent.throw", agent._name, type(exception).__name__)
        self._enter(agent, None, exception, from_kernel=False)
        return self._settled(agent)

    def run(self, until: float | Event[Any] | None = None) -> Any:
        """Advance virtual time (``sim.run(until)``), waking agents as their events come.

        Returns:
            What ``sim.run`` returns.

        Raises:
            BaseException: the exception of an agent that failed while a kernel
                event drove it, as itself (unless a process waiting on
                ``agent.finished`` handled it); the rest of the Sim can go on
                with another ``run``.
        """
        self._check_thread("run()")
        failure: BaseException | None = None
        try:
            return self._sim.run(until)
        except BaseException as exc:
            failure = self._reported_failure(exc)
            if failure is None:
                raise
        raise failure  # outside the handler: the agent's exception, not chained to the copy

    def close(self) -> None:
        """Unwind every unfinished agent (GreenletExit at its blocking call), in spawn order.

        ``finally`` blocks and ``with`` exits in the agents run; the agents
        end CLOSED. NEW agents become CLOSED without running.
        """
        self._check_thread("close()")
        for agent in self._agents:
            if agent._status is _NEW:
                agent._status = _CLOSED
            elif agent._status in _BLOCKED:
                agent._closing = True
                agent._target = None
                agent._glet.parent = _getcurrent()
                agent._glet.throw(_GreenletExit)
                agent._glet = None
                self._sim.record("agent.close", agent._name, None)
                if agent._status is _FAILED:
                    # An exception raised while unwinding replaces the GreenletExit.
                    agent.finished.fail(agent._exception)  # type: ignore[arg-type]
                    agent.finished.defused = True
                    raise self._annotated(agent)

    def __enter__(self) -> PausableHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for agent in self._agents:
            counts[agent._status.name] = counts.get(agent._status.name, 0) + 1
        summary = ", ".join(f"{k}={v}" for k, v in counts.items())
        return f"<PausableHost t={self._sim.now} agents={len(self._agents)} {summary}>"

    # -- hand-off ---------------------------------------------------------------

    def _enter(self, agent: PausableAgent, value: Any, exception: BaseException | None, *,
               from_kernel: bool) -> None:
        """Switch into *agent* (value or exception) and return when it blocks or ends."""
        glet = agent._glet
        agent._status = _RUNNING
        agent._reason = None
        glet.parent = _getcurrent()  # where the agent's next block (or its end) switches to
        if exception is None:
            glet.switch(value)
        else:
            glet.throw(exception)
        status = agent._status
        if status is _RUNNING:  # pragma: no cover - a switch we did not make
            raise AgentStateError(
                f"agent {agent._name!r} switched away without blocking; do not switch greenlets "
                "by hand inside a pausable agent"
            )
        if status is _DONE or status is _FAILED or (
                status is _CLOSED):
            agent._glet = None
            sim = self._sim
            if status is _DONE:
                sim.record("agent.done", agent._name, _payload(agent._result))
                agent.finished.succeed(agent._result)
            elif status is _FAILED:
                exc = agent._exception
                assert exc is not None  # noqa: S101
                sim.record("agent.fail", agent._name, f"{type(exc).__name__}: {exc}")
                agent.finished.fail(exc)
                if from_kernel:
                    # Undefused: run() raises it unless a process waiting on
                    # `finished` handles it first.
                    self._unreported.append(agent)
                else:
                    agent.finished.defused = True  # raised at start/resume/throw

    def _settled(self, agent: PausableAgent) -> AgentStatus:
        if agent._status is _FAILED:
            raise self._annotated(agent)
        return agent._status

    def _annotated(self, agent: PausableAgent) -> BaseException:
        exc = agent._exception
        assert exc is not None  # noqa: S101
        note = f"in pausable agent {agent._name!r} (FAILED at t={self._sim.now})"
        if note not in getattr(exc, "__notes__", ()):
            exc.add_note(note)
        return exc

    def _reported_failure(self, exc: BaseException) -> BaseException | None:
        """The agent exception that *exc* (raised by sim.run) stands for, if any."""
        for index, agent in enumerate(self._unreported):
            if exc is agent._exception or exc.__cause__ is agent._exception:
                del self._unreported[index]
                return self._annotated(agent)
        return None

    # -- checks -----------------------------------------------------------------

    def _check_thread(self, what: str) -> None:
        if threading.get_ident() != self._thread:
            raise ThreadOwnershipError(
                f"PausableHost.{what} called from another thread; a host, its Sim and its agents "
                "belong to the thread that made the host"
            )

    def _check_own(self, agent: object, what: str) -> None:
        self._check_thread(f"{what}()")
        if not isinstance(agent, PausableAgent):
            raise ConfigError(f"{what}(agent): expected a PausableAgent, got {_describe(agent)}")
        if agent._host is not self:
            raise AgentStateError(f"{what}(agent): agent {agent._name!r} belongs to another host")

    def _check_paused(self, agent: PausableAgent, what: str) -> None:
        self._check_own(agent, what)
        if agent._status is not _PAUSED:
            status = agent._status
            hint = {
                _NEW: "start it first",
                _RUNNING: "it is running (an agent cannot resume itself)",
            }.get(status, "it wakes by itself when its event comes" if status in _ON_EVENT
                  else "it has finished")
            raise AgentStateError(
                f"{what}(agent): agent {agent._name!r} is {status.name}, not PAUSED; {hint}"
            )

    def _check_inside(self, agent: PausableAgent, what: str) -> None:
        glet = agent._glet
        if glet is None or _getcurrent() is not glet:
            raise AgentStateError(
                f"{what} must be called from inside agent {agent._name!r} (its status is "
                f"{agent._status.name}); host code drives agents with start/resume/run"
            )
