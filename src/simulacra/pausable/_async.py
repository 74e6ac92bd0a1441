"""Async agents: the same blocking agent functions, on OS threads, truly concurrent.

:meth:`AsyncHost.start` and :meth:`AsyncHost.resume` return at once and the
agent's body runs on its own daemon thread, so agents overlap real I/O (an
HTTP model call in ``ctx.llm.complete``, a file, a socket). That is all they
gain, and what they give up is spelled out in ``docs/pausable.md``: there is
no virtual time (``ctx.sleep`` sleeps on the wall clock), no determinism of
interleaving, and no trace. Two async agents, or an async agent and the host,
really can run at the same instant, so any state they share must go through
a synchronisation primitive: a :class:`Channel` (bounded, FIFO, with close)
or an :class:`AgentLock`. Only what goes through those is ordered.

Errors are still never lost: an exception escaping an async agent marks it
FAILED and is raised by :meth:`AsyncHost.join` (or ``join_all``), and
:meth:`AsyncHost.close` raises the first failure nobody has joined.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, final

from simulacra.errors import AgentStateError, AgentTimeout, ChannelClosed, ConfigError, InvalidDelay

from ._greenlet import (
    _CALLING,
    _CLOSED,
    _DONE,
    _FAILED,
    _FINISHED,
    _NEW,
    _PAUSED,
    _RUNNING,
    _SLEEPING,
    _WAITING,
    AgentStatus,
    _call_site,
    _describe,
    _getcurrent,
    _is_delay,
    _is_name,
    _next_call,
)

__all__ = ["AgentLock", "AsyncAgent", "AsyncContext", "AsyncHost", "Channel"]

T = TypeVar("T")

#: How often a blocked async agent looks whether its host is closing, in seconds.
_POLL = 0.05


class _Closed(BaseException):
    """Unwinds an async agent's body when its host closes (like GreenletExit)."""


def _check_timeout(where: str, timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if not _is_delay(timeout):
        raise ConfigError(f"{where}: timeout expected None or a number >= 0, got "
                          f"{_describe(timeout)}")
    return float(timeout)


def _is_capacity(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def _greenlet_guard(what: str) -> None:
    """Refuse to block a thread from inside a pausable (greenlet) agent: it would stall the host."""
    if _getcurrent().parent is not None:
        raise AgentStateError(
            f"{what} would block inside a pausable (greenlet) agent, which stops its host thread "
            "and every other pausable agent; use timeout=0, or a kernel event and ctx.wait()"
        )


@final
class Channel(Generic[T]):
    """A bounded FIFO channel, safe between async agents, threads and the host.

    ``send`` blocks while the channel is full, ``recv`` while it is empty.
    Items come out in the order they went in; an item is received exactly
    once. ``close()`` wakes everyone: later sends raise
    :class:`~simulacra.errors.ChannelClosed`, receives drain what is left and
    then raise it. Iterating receives until the channel is closed and empty.

    Args:
        capacity: How many items it holds before ``send`` blocks (>= 1).
    """

    __slots__ = ("_capacity", "_closed", "_cond", "_items", "_received", "_sent")

    def __init__(self, capacity: int = 1) -> None:
        if not _is_capacity(capacity):
            raise ConfigError(f"Channel(capacity=...): expected an int >= 1, got "
                              f"{_describe(capacity)}")
        self._capacity = capacity
        self._items: deque[T] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._sent = 0
        self._received = 0

    @property
    def capacity(self) -> int:
        """How many items the channel holds before ``send`` blocks."""
        return self._capacity

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

    @property
    def sent(self) -> int:
        """How many items were sent so far."""
        return self._sent

    @property
    def received(self) -> int:
        """How many items were received so far."""
        return self._received

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def send(self, item: T, timeout: float | None = None) -> None:
        """Put *item* at the end; block while the channel is full.

        Args:
            item: Anything.
            timeout: Seconds to wait for room (``0``: do not wait); None waits forever.

        Raises:
            ChannelClosed: the channel is closed (also if it closes while waiting).
            AgentTimeout: no room came within *timeout*.
            AgentStateError: it would block inside a pausable (greenlet) agent.
        """
        limit = _check_timeout("Channel.send()", timeout)
        with self._cond:
            deadline: float | None = None
            while True:
                if self._closed:
                    raise ChannelClosed(f"Channel.send(): the channel is closed (item {item!r})")
                if len(self._items) < self._capacity:
                    self._items.append(item)
                    self._sent += 1
                    self._cond.notify_all()
                    return
                deadline = self._wait("Channel.send()", limit, deadline, "for room")

    def recv(self, timeout: float | None = None) -> T:
        """Take the first item; block while the channel is empty and open.

        Args:
            timeout: Seconds to wait for an item (``0``: do not wait); None waits forever.

        Raises:
            ChannelClosed: the channel is closed and empty.
            AgentTimeout: no item came within *timeout*.
            AgentStateError: it would block inside a pausable (greenlet) agent.
        """
        limit = _check_timeout("Channel.recv()", timeout)
        with self._cond:
            deadline: float | None = None
            while True:
                if self._items:
                    item = self._items.popleft()
                    self._received += 1
                    self._cond.notify_all()
                    return item
                if self._closed:
                    raise ChannelClosed("Channel.recv(): the channel is closed and empty")
                deadline = self._wait("Channel.recv()", limit, deadline, "for an item")

    def close(self) -> None:
        """Close the channel (idempotent); items already in it can still be received."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __iter__(self) -> Iterator[T]:
        while True:
            try:
                yield self.recv()
            except ChannelClosed:
                return

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Channel {state} {len(self._items)}/{self._capacity}>"

    def _wait(self, what: str, limit: float | None, deadline: float | None, for_what: str) -> float:
        """Wait on the condition once (lock held); return the deadline."""
        now = time.monotonic()
        if deadline is None:
            deadline = now + limit if limit is not None else float("inf")
        if now >= deadline:
            raise AgentTimeout(f"{what}: nothing came {for_what} within timeout={limit!r}s")
        _greenlet_guard(what)
        remaining = deadline - now
        self._cond.wait(None if remaining == float("inf") else remaining)
        return deadline


@final
class AgentLock:
    """A mutual-exclusion lock, safe between async agents, threads and the host.

    Use it as ``with lock:`` around a check-then-write on shared state. It is
    not reentrant: acquiring it again from its holder raises
    :class:`~simulacra.errors.AgentStateError` instead of deadlocking, and so
    does a pausable (greenlet) agent trying to take a lock that another
    greenlet of its own thread holds (the holder could never run to release
    it). Releasing a lock one does not hold is an error too.
    """

    __slots__ = ("_acquisitions", "_cond", "_owner")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        #: (thread id, greenlet) of the holder, or None.
        self._owner: tuple[int, Any] | None = None
        self._acquisitions = 0

    @property
    def acquisitions(self) -> int:
        """How many times the lock has been acquired."""
        return self._acquisitions

    def locked(self) -> bool:
        """True while someone holds the lock."""
        return self._owner is not None

    def acquire(self, timeout: float | None = None) -> None:
        """Take the lock; block while another holds it.

        Raises:
            AgentTimeout: it did not come free within *timeout* seconds.
            AgentStateError: the caller holds it already, or the holder is
                another greenlet of the caller's thread.
        """
        limit = _check_timeout("AgentLock.acquire()", timeout)
        me = (threading.get_ident(), _getcurrent())
        with self._cond:
            deadline: float | None = None
            while self._owner is not None:
                owner = self._owner
                if owner[0] == me[0]:
                    who = "the caller" if owner[1] is me[1] else "another greenlet of this thread"
                    raise AgentStateError(
                        f"AgentLock.acquire(): the lock is held by {who}; waiting would deadlock "
                        "(the lock is not reentrant)"
                    )
                now = time.monotonic()
                if deadline is None:
                    deadline = now + limit if limit is not None else float("inf")
                if now >= deadline:
                    raise AgentTimeout(f"AgentLock.acquire(): not free within timeout={limit!r}s")
                remaining = deadline - now
                self._cond.wait(None if remaining == float("inf") else remaining)
            self._owner = me
            self._acquisitions += 1

    def release(self) -> None:
        """Give the lock back.

        Raises:
            AgentStateError: the caller does not hold it.
        """
        with self._cond:
            owner = self._owner
            if owner is None or owner[0] != threading.get_ident() or owner[1] is not _getcurrent():
                raise AgentStateError("AgentLock.release(): the caller does not hold the lock")
            self._owner = None
            self._cond.notify()

    def __enter__(self) -> AgentLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<AgentLock {'locked' if self._owner is not None else 'unlocked'}>"


@final
class AsyncAgent:
    """A handle on one agent function running on its own thread under an :class:`AsyncHost`.

    Every property is safe to read from any thread; it is a snapshot.
    """

    __slots__ = (
        "_args",
        "_closing",
        "_cond",
        "_ctx",
        "_exception",
        "_fn",
        "_host",
        "_kwargs",
        "_name",
        "_ncalls",
        "_reason",
        "_reported",
        "_result",
        "_resume",
        "_status",
        "_thread",
    )

    def __init__(self, host: AsyncHost, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], name: str) -> None:
        self._host = host
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._status = _NEW
        self._reason: Any = None
        self._result: Any = None
        self._exception: BaseException | None = None
        self._reported = False
        #: (value,) handed over by resume() and not yet taken by the agent.
        self._resume: tuple[Any] | None = None
        self._closing = False
        self._ncalls = 0
        self._thread: threading.Thread | None = None
        self._ctx = AsyncContext(self)

    @property
    def name(self) -> str:
        """The agent's name, unique within its host."""
        return self._name

    @property
    def status(self) -> AgentStatus:
        """Where the agent is now (it may change the next instant)."""
        return self._status

    @property
    def pause_reason(self) -> Any:
        """The *reason* given to ``ctx.pause(reason)`` while PAUSED, else None."""
        with self._cond:
            return self._reason if self._status is _PAUSED else None

    @property
    def exception(self) -> BaseException | None:
        """The exception that escaped the agent (FAILED), else None."""
        return self._exception

    @property
    def result(self) -> Any:
        """The agent's return value.

        Raises:
            AgentStateError: the agent is not DONE.
        """
        with self._cond:
            if self._status is _DONE:
                return self._result
            status = self._status
        raise AgentStateError(
            f"agent {self._name!r} is {status.name}, so it has no result yet; join() it first"
        ) from self._exception

    def __repr__(self) -> str:
        return f"<AsyncAgent {self._name!r} {self._status.name}>"

    def _main(self) -> None:
        try:
            result = self._fn(self._ctx, *self._args, **self._kwargs)
        except _Closed:
            outcome, value = _CLOSED, None
        except BaseException as exc:
            tb = exc.__traceback__
            exc.__traceback__ = tb.tb_next if tb is not None else None
            outcome, value = _FAILED, exc
        else:
            outcome, value = _DONE, result
        with self._cond:
            if outcome is _DONE:
                self._result = value
            elif outcome is _FAILED:
                self._exception = value
            self._status = outcome
            self._cond.notify_all()

    def _set(self, status: AgentStatus) -> None:
        with self._cond:
            if self._closing:
                raise _Closed
            self._status = status
            self._cond.notify_all()


@final
class _AsyncLLM:
    """``ctx.llm`` of an async agent: calls the model on the agent's own thread."""

    __slots__ = ("_agent",)

    def __init__(self, agent: AsyncAgent) -> None:
        self._agent = agent

    def complete(self, request: Any) -> Any:
        """Call ``model.complete(request, site=CallSite(name, n))`` on this thread (real I/O)."""
        agent = self._agent
        model, n = _next_call(agent, "AsyncHost(llm=...)")
        agent._set(_CALLING)
        try:
            return model.complete(request, site=_call_site(agent._name, n))
        finally:
            agent._set(_RUNNING)


@final
class AsyncContext:
    """``ctx`` of an async agent: the same calls as a pausable agent's, on the wall clock."""

    __slots__ = ("_agent", "llm")

    def __init__(self, agent: AsyncAgent) -> None:
        self._agent = agent
        self.llm: Any = _AsyncLLM(agent)

    @property
    def name(self) -> str:
        """The agent's name."""
        return self._agent._name

    @property
    def closing(self) -> bool:
        """True once the host is closing: the next blocking call will unwind the agent."""
        return self._agent._closing

    def sleep(self, delay: float) -> None:
        """Sleep *delay* seconds of wall-clock time (status SLEEPING); ``close()`` cuts it short.

        Raises:
            InvalidDelay: *delay* is negative, NaN or not a number.
        """
        agent = self._agent
        agent._host._check_inside(agent, "ctx.sleep()")
        if not _is_delay(delay):
            raise InvalidDelay(
                f"ctx.sleep(delay): expected a number >= 0, got {_describe(delay)} "
                f"(agent {agent._name!r})"
            )
        deadline = time.monotonic() + delay
        with agent._cond:
            if agent._closing:
                raise _Closed
            agent._status = _SLEEPING
            agent._cond.notify_all()
            while not agent._closing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                agent._cond.wait(remaining)
            if agent._closing:
                raise _Closed
            agent._status = _RUNNING

    def wait(self, waitable: Any, timeout: float | None = None) -> Any:
        """Block until ``waitable.wait(...)`` succeeds (a ``threading.Event`` and the like).

        Raises:
            AgentTimeout: it did not succeed within *timeout* seconds.
            ConfigError: *waitable* has no ``wait`` method.
        """
        agent = self._agent
        agent._host._check_inside(agent, "ctx.wait()")
        if not callable(getattr(waitable, "wait", None)):
            raise ConfigError(f"ctx.wait(waitable): expected an object with wait(timeout), got "
                              f"{_describe(waitable)} (agent {agent._name!r})")
        limit = _check_timeout("ctx.wait()", timeout)
        deadline = None if limit is None else time.monotonic() + limit
        agent._set(_WAITING)
        while True:  # in slices, so that close() can unwind the agent
            step = _POLL if deadline is None else min(_POLL, max(0.0, deadline - time.monotonic()))
            if waitable.wait(step):
                agent._set(_RUNNING)
                return True
            if agent._closing:
                raise _Closed
            if deadline is not None and time.monotonic() >= deadline:
                agent._set(_RUNNING)
                raise AgentTimeout(f"ctx.wait(): {waitable!r} did not come within "
                                   f"timeout={limit!r}s (agent {agent._name!r})")

    def pause(self, reason: Any = None) -> Any:
        """Suspend this agent's thread (status PAUSED) until ``host.resume(agent, value)``.

        Returns:
            The value given to ``resume``.
        """
        agent = self._agent
        agent._host._check_inside(agent, "ctx.pause()")
        with agent._cond:
            if agent._closing:
                raise _Closed
            agent._reason = reason
            agent._status = _PAUSED
            agent._cond.notify_all()
            while agent._resume is None and not agent._closing:
                agent._cond.wait()
            if agent._closing:
                raise _Closed
            (value,) = agent._resume
            agent._resume = None
            agent._reason = None
            return value

    def __repr__(self) -> str:
        return f"<AsyncContext of {self._agent._name!r}>"


@final
class AsyncHost:
    """Runs agent functions on their own daemon threads; ``start``/``resume`` return at once.

    Args:
        llm: The model behind ``ctx.llm`` (``complete(request, *, site=...)``).
            It is called from many threads at once, so it must be thread-safe
            (the ``simulacra.llm`` providers are).

    Use it as a context manager: leaving the block closes every agent and
    raises the first failure nobody joined.
    """

    __slots__ = ("_agents", "_by_name", "_closed", "_llm", "_lock")

    def __init__(self, *, llm: Any = None) -> None:
        if llm is not None and not callable(getattr(llm, "complete", None)):
            raise ConfigError(
                f"AsyncHost(llm=...): expected an object with complete(request, *, site=...), "
                f"got {_describe(llm)}"
            )
        self._llm = llm
        self._agents: list[AsyncAgent] = []
        self._by_name: dict[str, AsyncAgent] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def agents(self) -> tuple[AsyncAgent, ...]:
        """Every agent spawned on this host, in spawn order."""
        with self._lock:
            return tuple(self._agents)

    def results(self) -> dict[str, Any]:
        """The return values of the DONE agents, by name, in spawn order (not completion order)."""
        return {a._name: a._result for a in self.agents if a._status is _DONE}

    def spawn(self, fn: Callable[..., Any], /, *args: Any, name: str | None = None,
              **kwargs: Any) -> AsyncAgent:
        """Make an agent that will run ``fn(ctx, *args, **kwargs)`` on its own thread.

        Raises:
            ConfigError: *fn* is not callable, or *name* is taken.
            AgentStateError: the host is closed.
        """
        if not callable(fn):
            raise ConfigError(f"spawn(fn): expected a function def fn(ctx, ...), got "
                              f"{_describe(fn)}")
        with self._lock:
            if self._closed:
                raise AgentStateError("spawn(): this AsyncHost is closed")
            if name is None:
                name = f"{getattr(fn, '__name__', 'agent')}-{len(self._agents)}"
            elif not _is_name(name):
                raise ConfigError(f"spawn(name=...): expected a non-empty str, got "
                                  f"{_describe(name)}")
            if name in self._by_name:
                raise ConfigError(f"spawn(name=...): an agent named {name!r} already exists")
            agent = AsyncAgent(self, fn, args, kwargs, name)
            self._agents.append(agent)
            self._by_name[name] = agent
        return agent

    def start(self, agent: AsyncAgent) -> None:
        """Start a NEW agent on its own thread and return at once.

        Raises:
            AgentStateError: the agent is not NEW, or belongs to another host.
        """
        self._check_own(agent, "start")
        with agent._cond:
            if agent._status is not _NEW:
                raise AgentStateError(
                    f"start(agent): agent {agent._name!r} is {agent._status.name}; only a NEW "
                    "agent can be started, and only once"
                )
            agent._status = _RUNNING
            thread = threading.Thread(target=agent._main, name=f"simulacra-agent-{agent._name}",
                                      daemon=True)
            agent._thread = thread
        thread.start()

    def resume(self, agent: AsyncAgent, value: Any = None) -> None:
        """Hand *value* to a PAUSED agent's ``ctx.pause()`` and return at once.

        Raises:
            AgentStateError: the agent is not PAUSED (call ``join`` to wait until it is).
        """
        self._check_own(agent, "resume")
        with agent._cond:
            if agent._status is not _PAUSED or agent._resume is not None:
                raise AgentStateError(
                    f"resume(agent): agent {agent._name!r} is {agent._status.name}, not PAUSED; "
                    "join(agent) waits until it pauses or ends"
                )
            agent._resume = (value,)
            agent._status = _RUNNING
            agent._cond.notify_all()

    def join(self, agent: AsyncAgent, timeout: float | None = None) -> AgentStatus:
        """Wait until the agent is PAUSED or has finished; raise its exception if it FAILED.

        Returns:
            PAUSED, DONE or CLOSED.

        Raises:
            AgentTimeout: it neither paused nor finished within *timeout* seconds.
            AgentStateError: the agent is NEW (it would never settle).
            BaseException: the agent's own exception (with a note naming it).
        """
        self._check_own(agent, "join")
        limit = _check_timeout("join()", timeout)
        deadline = None if limit is None else time.monotonic() + limit
        with agent._cond:
            if agent._status is _NEW:
                raise AgentStateError(f"join(agent): agent {agent._name!r} was never started")
            while not (agent._status is _PAUSED or agent._status in _FINISHED):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise AgentTimeout(
                        f"join(agent): agent {agent._name!r} is still {agent._status.name} after "
                        f"timeout={limit!r}s"
                    )
                agent._cond.wait(remaining)
            status = agent._status
            if status is _FAILED:
                agent._reported = True
        if status is _FAILED:
            raise self._annotated(agent)
        if status in _FINISHED and agent._thread is not None:
            agent._thread.join()
        return status

    def join_all(self, timeout: float | None = None) -> dict[str, AgentStatus]:
        """Join every started agent in spawn order; raise the first failure met.

        Returns:
            The status of each agent by name, in spawn order.
        """
        limit = _check_timeout("join_all()", timeout)
        deadline = None if limit is None else time.monotonic() + limit
        out: dict[str, AgentStatus] = {}
        for agent in self.agents:
            if agent._status is _NEW:
                out[agent._name] = _NEW
                continue
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            out[agent._name] = self.join(agent, left)
        return out

    def close(self, timeout: float | None = 10.0) -> None:
        """Unwind every unfinished agent, wait for their threads, raise any unjoined failure.

        A blocked agent (paused, sleeping, waiting) unwinds at its blocking
        call; ``finally`` blocks run. A NEW agent becomes CLOSED unrun.

        Raises:
            AgentTimeout: a thread did not end within *timeout* seconds (it is
                still running, for example in a long model call).
            BaseException: the first failure (spawn order) that no ``join`` raised.
        """
        limit = _check_timeout("close()", timeout)
        with self._lock:
            self._closed = True
            agents = list(self._agents)
        for agent in agents:
            with agent._cond:
                agent._closing = True
                if agent._status is _NEW:
                    agent._status = _CLOSED
                agent._cond.notify_all()
        deadline = None if limit is None else time.monotonic() + limit
        for agent in agents:
            if agent._thread is not None:
                agent._thread.join(None if deadline is None else
                                   max(0.0, deadline - time.monotonic()))
                if agent._thread.is_alive():
                    raise AgentTimeout(f"close(): agent {agent._name!r} is still running after "
                                       f"timeout={limit!r}s")
        for agent in agents:
            if agent._status is _FAILED and not agent._reported:
                agent._reported = True
                raise self._annotated(agent)

    def __enter__(self) -> AsyncHost:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:  # do not hide the exception already on its way out
            try:
                self.close()
            except Exception:  # noqa: S110 - the first exception wins
                pass

    def __repr__(self) -> str:
        return f"<AsyncHost agents={len(self._agents)}{' closed' if self._closed else ''}>"

    def _annotated(self, agent: AsyncAgent) -> BaseException:
        exc = agent._exception
        assert exc is not None  # noqa: S101
        note = f"in async agent {agent._name!r} (FAILED)"
        if note not in getattr(exc, "__notes__", ()):
            exc.add_note(note)
        return exc

    def _check_own(self, agent: object, what: str) -> None:
        if not isinstance(agent, AsyncAgent):
            raise ConfigError(f"{what}(agent): expected an AsyncAgent, got {_describe(agent)}")
        if agent._host is not self:
            raise AgentStateError(f"{what}(agent): agent {agent._name!r} belongs to another host")

    def _check_inside(self, agent: AsyncAgent, what: str) -> None:
        if agent._thread is not threading.current_thread():
            raise AgentStateError(
                f"{what} must be called from inside agent {agent._name!r} (its own thread); "
                f"host code drives agents with start/resume/join"
            )
