"""The discrete-event kernel: Sim, Event, Process and conditions.

Semantics are SimPy 4's: events fire in ``(time, priority, scheduling order)``
order, process starts and interrupts are urgent, and a failed event that nobody
handles crashes :meth:`Sim.run`. What differs is how the work is laid out:

* **One concrete event class.** Timeouts, plain events, resource requests and
  releases, store puts and gets and conditions are all instances of
  :class:`Event`; what kind of event it is lives in data (``_owner``,
  ``_data``), not in the type. CPython 3.11 specialises attribute access per
  type, so the run loop stays monomorphic. Only :class:`Process` is a subclass,
  and a process event reaches the heap only when it finishes.
* **A single-waiter slot.** Almost every event has exactly one process waiting
  on it. That process lives in ``_waiter``; a callbacks list (``_cbs``) is only
  allocated for a second subscriber or a callback. The waiter is always the
  first subscriber, so callback order is SimPy's.
* **A fused resume path.** :meth:`Sim.run` resumes the waiting generator inline
  and subscribes it to the next event it yields without a function call. The
  general path (:func:`_resume`) handles everything else; both are exercised by
  the differential tests against SimPy, run both through ``run()`` and
  ``step()``.
* **No sequence numbers in the default ordering.** SimPy's order is
  ``(time, priority, sequence)``. The kernel keeps a heap of the *distinct*
  future times, a dict from each time to its events in scheduling order, and,
  for the current time, one deque of urgent events, one of normal events
  scheduled in advance and one of normal events scheduled now. Events in a
  list or deque are in scheduling order by construction, so that layout *is*
  the total order, with no per-event key or tuple: ties cost O(1) and the
  heap compares plain floats.
* **Elided delays.** A process that yields a fresh ``sim.delay(d)`` nothing
  else holds takes the event's place in the schedule, and the event is freed
  (see ``_ELIDE_REFS`` and ``_unelide``): 88 bytes less per waiting process.
* **Keyed ordering** uses one heap of ``(time, key, event)`` where the key is
  ``(priority, origin, n)``: who scheduled the event and how many it had
  scheduled before (see ``docs/design.md``).

A :class:`Sim` and everything attached to it belong to one thread. The kernel
takes no locks.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator
from heapq import heappop, heappush
from types import GeneratorType
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    NamedTuple,
    Protocol,
    TypeVar,
    cast,
    final,
    overload,
)

from simulacra.errors import (
    AlreadyTriggered,
    ConfigError,
    DeadProcess,
    EmptySchedule,
    EventNotReady,
    ForeignEvent,
    Interrupt,
    InvalidDelay,
    KernelBug,
    NotAnEvent,
    SelfInterrupt,
    SimError,
    ThreadOwnershipError,
    UntilInPast,
)
from simulacra.rng import SeedTree, Streams, as_seed_tree

if TYPE_CHECKING:
    import random

__all__ = [
    "NORMAL",
    "PENDING",
    "URGENT",
    "ConditionValue",
    "Event",
    "Process",
    "ProcessGenerator",
    "Sim",
    "TieStats",
    "Tracer",
]

T = TypeVar("T")
R = TypeVar("R")

#: Priority of process starts and interrupts: before everything else at the same time.
URGENT = 0
#: Priority of every other event.
NORMAL = 1

# `object.__new__` bound once: `Event.__new__` is looked up on the type at every call.
_new = object.__new__


class _Bucket(list[Any]):
    """The events of one future time once there are two or more, in scheduling order.

    ``when`` is the time itself: a process whose delay was elided (see
    ``Sim._run_fifo``) keeps it, so every process waiting for that time shares
    one float.
    """

    __slots__ = ("when",)

    def __init__(self, when: float, events: Iterable[Any] = ()) -> None:
        super().__init__(events)
        self.when = when


#: Makes a Sim's heap of future times: a list. (The compiled kernel replaces
#: it with its own heap of unboxed times, and heappush/heappop with functions
#: that take either; see core/_ckernel.c.)
_new_times: Callable[[], list[float]] = list

#: Makes a Sim's map from future times to their events: a dict. (The compiled
#: kernel replaces it with a map keyed by the times' bits; see core/_ckernel.c.)
_new_buckets: Callable[[], dict[float, Any]] = dict

#: The ``_cbs`` of a delay scheduled in the future (its ``_data`` is its time):
#: "no callbacks" like None, and it tells the run loop the event may be elided.
_FUTURE: tuple[()] = ()

# Elided delays. A process that yields a fresh `sim.delay(d)` which nothing else
# references can wait without the event: the process takes the event's place in
# its time bucket and the event is freed (88 bytes less per waiting process).
# "Nothing else references it" is a reference count: the bucket's, the run
# loop's local and getrefcount's argument. Interpreters that may count
# differently (borrowed references on the evaluation stack, no reference
# counts at all) never elide.
_ELIDE_REFS = (
    3 if sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] <= (3, 13) else -1
)

ProcessGenerator = Generator["Event[Any]", Any, R]
"""The type of a generator process that returns *R*: ``Generator[Event[Any], Any, R]``."""


class _Pending:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"

    def __reduce__(self) -> str:  # pickled and copied as itself: the kernel tests identity
        return "PENDING"


#: The value of an event that has not been triggered yet.
PENDING: Any = _Pending()


class _Processed(list[Any]):
    """The ``_cbs`` of a processed event: an empty, immutable marker."""

    __slots__ = ()

    def append(self, _: object) -> None:  # pragma: no cover - never reached
        raise KernelBug("callback added to a processed event")

    def __reduce__(self) -> str:  # pickled and copied as itself
        return "_DONE"


_DONE: Any = _Processed()




class _StopRun(Exception):
    """Raised by the ``until`` callback to leave the run loop."""


def _stop(_: Event[Any]) -> None:
    raise _StopRun


#: The ``_owner`` of the stop event of ``run(until=<number>)``: not a model
#: event, so pop observers (tie counts, PDES merge tags) skip it.
_UNTIL: Any = type("_Until", (), {"__repr__": lambda self: "<run-until stop>",
                                   "__reduce__": lambda self: "_UNTIL"})()


class TieStats(NamedTuple):
    """How many events of a traced run shared their instant with the event before them.

    Events at the same simulated time are ordered by the tie-break rule, not by
    time: scheduling order (fifo) or model identity (keyed). A tie is an event
    processed at the same instant as the event processed before it, so an
    instant with *n* events holds *n - 1* ties. Ties are where an ordering rule,
    not the model's timing, decides what happens first; in a sharded run,
    ``across_shards`` counts those whose instant also had events on another
    shard (there, the order of the shards' events came from their keys alone).
    Counted for model events only (the stop events of ``run(until=...)`` are
    not), so the counts of a partitioned run equal the unpartitioned run's
    ``events`` and ``ties``.
    """

    #: Events processed (process starts, timeouts, triggered events, messages...).
    events: int
    #: Events processed at the same instant as the event before them.
    ties: int
    #: Of ``ties``, those at an instant that had events on more than one shard
    #: (always 0 for one Sim).
    across_shards: int = 0


class _TieCounter:
    """The pop observer of a traced Sim: counts events and same-instant ties."""

    __slots__ = ("events", "last", "ties")

    def __init__(self) -> None:
        self.events = 0
        self.ties = 0
        self.last: float | None = None

    def __call__(self, now: float, key: Any, event: Event[Any]) -> None:
        self.events += 1
        if now == self.last:
            self.ties += 1
        else:
            self.last = now


class Tracer(Protocol):
    """Receives trace records; the kernel's only instrumentation seam.

    ``Sim(trace=True)`` keeps records in memory; ``simulacra.trace`` has a
    streaming JSONL tracer. The kernel calls :meth:`record` behind one
    ``is not None`` check, so a Sim without a tracer pays nothing else.
    """

    def record(self, time: float, kind: str, who: str, payload: object) -> None:
        """Receive one record: *kind* happened to *who* at *time*."""


@final
class _ListTracer:
    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[tuple[float, str, str, object]] = []

    def record(self, time: float, kind: str, who: str, payload: object) -> None:
        self.records.append((time, kind, who, payload))


def _copy_exception(exc: BaseException) -> BaseException:
    """A fresh copy of *exc* whose ``__cause__`` is *exc* (SimPy's failure copy).

    Each process that receives a failure gets its own exception object, so
    tracebacks of different receivers do not pile onto one object.
    """
    try:
        copy = type(exc)(*exc.args)
    except Exception:
        return exc
    copy.__cause__ = exc
    return copy


def _describe(obj: object) -> str:
    text = repr(obj)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(obj).__name__})"


class Event(Generic[T]):
    """Something that happens at a point in simulated time.

    An event is *pending* until :meth:`succeed` or :meth:`fail` triggers it;
    it is then scheduled, and once the simulation reaches it it is
    *processed*: the processes waiting on it resume and its callbacks run.
    Yield an event from a generator process (or ``await`` it from an
    ``async def`` process) to wait for it; the value of the ``yield`` is the
    event's value.

    Events combine with ``&`` (all of) and ``|`` (any of).
    """

    # `_owner` and `_data` are the kernel's extension slots: resources and
    # conditions keep what kind of event this is there, so that every event in
    # the hot loop has the same type.
    __slots__ = ("_cbs", "_data", "_ok", "_owner", "_value", "_waiter", "sim")

    sim: Sim
    #: The value, or PENDING until triggered.
    _value: Any
    #: True if succeeded, False if failed and not (yet) handled, None if failed
    #: and defused (handled: it will not crash run). Meaningful once triggered.
    _ok: bool | None
    #: The first process to wait on this event, or None. It is resumed before
    #: any list of callbacks and after an owner's tuple of callbacks.
    _waiter: Process[Any] | None
    #: None if nobody else subscribed yet; a tuple of owner callbacks shared by
    #: all events of a resource (installed at creation, so they run first); a
    #: list of further subscribers in subscription order; _DONE once processed.
    _cbs: Any
    _owner: Any
    _data: Any

    def __init__(self, sim: Sim) -> None:
        if not isinstance(sim, Sim):
            raise ConfigError(f"Event(sim): expected a Sim, got {_describe(sim)}")
        self.sim = sim
        self._value = PENDING
        self._ok = True
        self._waiter = None
        self._cbs = None

    def __repr__(self) -> str:
        owner = getattr(self, "_owner", None)
        kind = type(owner).__name__ if owner is not None else "Event"
        state = "processed" if self._cbs is _DONE else (
            "pending" if self._value is PENDING else "triggered"
        )
        return f"<{kind} event {state} at 0x{id(self):x}>"

    @property
    def triggered(self) -> bool:
        """True once :meth:`succeed` or :meth:`fail` was called (or a timeout was made)."""
        return self._value is not PENDING

    @property
    def processed(self) -> bool:
        """True once the simulation has reached this event and run its callbacks."""
        return self._cbs is _DONE

    @property
    def ok(self) -> bool:
        """True if the event succeeded, False if it failed.

        Raises:
            EventNotReady: the event has not been triggered yet.
        """
        if self._value is PENDING:
            raise EventNotReady(f"{self!r} has not been triggered yet, so it has no outcome")
        return self._ok is True

    @property
    def value(self) -> T:
        """The value of the event (the exception if it failed).

        Raises:
            EventNotReady: the event has not been triggered yet.
        """
        if self._value is PENDING:
            raise EventNotReady(f"the value of {self!r} is not yet available")
        return cast("T", self._value)

    @property
    def defused(self) -> bool:
        """True if the failure of this event was handled, so it will not crash ``run``."""
        return self._ok is None

    @defused.setter
    def defused(self, value: bool) -> None:
        if value and self._ok is not True:
            self._ok = None
        elif not value and self._ok is None:
            self._ok = False

    @property
    def callbacks(self) -> list[Callable[[Event[Any]], object]] | None:
        """Callables run with this event when it is processed; None once processed.

        Appending to this list subscribes a callback (SimPy compatible).
        """
        if self._cbs is _DONE:
            return None
        if self._cbs is None:
            self._cbs = []
        elif type(self._cbs) is tuple:
            return _own_callbacks(self)
        return cast("list[Callable[[Event[Any]], object]]", self._cbs)

    def succeed(self, value: T | None = None) -> Event[T]:
        """Trigger the event successfully with *value* and schedule it now.

        Raises:
            AlreadyTriggered: the event was already triggered.
        """
        if self._value is not PENDING:
            raise AlreadyTriggered(f"{self!r} has already been triggered")
        self._ok = True
        self._value = value
        sim = self.sim
        sim._now_append(self)
        return self

    def fail(self, exception: BaseException) -> Event[T]:
        """Trigger the event as failed with *exception* and schedule it now.

        Processes waiting on it get the exception thrown in; if nobody handles
        it, :meth:`Sim.run` raises it.

        Raises:
            AlreadyTriggered: the event was already triggered.
            ConfigError: *exception* is not an exception instance.
        """
        if self._value is not PENDING:
            raise AlreadyTriggered(f"{self!r} has already been triggered")
        if not isinstance(exception, BaseException):
            raise ConfigError(
                f"fail(exception): expected an exception instance, got {_describe(exception)}"
            )
        # A pending event may have been defused in advance (SimPy allows it).
        self._ok = None if self._ok is None else False
        self._value = exception
        sim = self.sim
        sim._now_append(self)
        return self

    def trigger(self, event: Event[Any]) -> None:
        """Trigger this event with the outcome and value of *event* (usable as a callback)."""
        if self._value is not PENDING:
            raise AlreadyTriggered(f"{self!r} has already been triggered")
        self._ok = event._ok is True  # the outcome, not whether it was defused
        self._value = event._value
        sim = self.sim
        sim._now_append(self)

    def __and__(self, other: Event[Any]) -> Event[ConditionValue]:
        return self.sim.all_of((self, other))

    def __or__(self, other: Event[Any]) -> Event[ConditionValue]:
        return self.sim.any_of((self, other))

    def __await__(self) -> Generator[Event[T], Any, T]:
        return (yield self)  # type: ignore[no-any-return]

    # Context manager protocol: only resource requests use it (release on exit).
    def cancel(self) -> None:
        """Withdraw a resource, container or store request that is still waiting.

        SimPy's ``Request.cancel()`` / ``Get.cancel()``: the reneging idiom
        ``if req not in (yield req | sim.delay(patience)): req.cancel()``.
        A request already granted (or a get already served) is left as it is:
        give a granted slot back with ``resource.release(req)``. Leaving a
        ``with`` block cancels or releases on its own.

        Raises:
            ConfigError: The event is not a request of a resource, container or store.
        """
        owner = getattr(self, "_owner", None)
        exit_request = getattr(owner, "_exit_request", None)
        if exit_request is None:
            raise ConfigError(f"cancel(): {self!r} is not a resource, container or store "
                              "request; only requests can be cancelled")
        if self._value is PENDING:
            # As when a process is closed inside `with`: a waiting request only leaves the queue.
            exit_request(self, GeneratorExit)

    def __enter__(self) -> Event[T]:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            owner = self._owner
            marker = owner._marker
        except AttributeError:
            marker = None
        if marker is not None and exc_type is not GeneratorExit:
            # The end of `with res.request()`, one per customer in queueing
            # models: Resource._exit_request inlined. An owner with a `_marker`
            # (simulacra.resources.Resource) keeps its granted requests in
            # `users` and the busy time in `_busy`, cancels a waiting request
            # with `_cancel(request, now)`, and schedules `_marker` as the
            # release event.
            sim = self.sim
            try:
                owner.users.remove(self)
            except ValueError:
                if self._value is PENDING:
                    owner._cancel(self, sim.now)
            else:
                owner._busy += sim.now
            sim._now_append(marker)
            return
        try:
            self._owner._exit_request(self, exc_type)
        except AttributeError:
            if hasattr(getattr(self, "_owner", None), "_exit_request"):
                raise  # from inside the resource: not ours to rename
            raise ConfigError(
                f"{self!r} is not a resource request; only requests work with `with`"
            ) from None

    async def __aenter__(self) -> Event[T]:
        try:
            await self
        except BaseException as exc:
            # `async with` never calls __aexit__ when __aenter__ raises (an
            # interrupt while waiting for the grant): cancel the request here.
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.__exit__(exc_type, exc, tb)


# What a process is resumed with when it starts: a processed, succeeded
# event with the value None. A process is queued as itself to start (urgent);
# a queued event that is still pending can only be such a process.
_START: Event[None] = _new(Event)
_START._value = None
_START._ok = True
_START._waiter = None
_START._cbs = _DONE


class ConditionValue:
    """The value of an ``all_of`` / ``any_of`` condition: the events that fired, and their values.

    Supports ``ev in value``, ``value[ev]``, iteration over the events, and
    :meth:`todict`. Events appear in the order they were given.
    """

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[Event[Any]] = []

    def __getitem__(self, key: Event[T]) -> T:
        if key not in self.events:
            raise KeyError(str(key))
        return cast("T", key._value)

    def __contains__(self, key: object) -> bool:
        return key in self.events

    def __eq__(self, other: object) -> bool:
        if type(other) is ConditionValue:
            return self.events == other.events
        return self.todict() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<ConditionValue {self.todict()}>"

    def __iter__(self) -> Iterator[Event[Any]]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def keys(self) -> Iterator[Event[Any]]:
        """The events that had fired when the condition was processed."""
        return iter(self.events)

    def values(self) -> Iterator[Any]:
        """Their values, in the same order."""
        return (event._value for event in self.events)

    def items(self) -> Iterator[tuple[Event[Any], Any]]:
        """``(event, value)`` pairs, in the same order."""
        return ((event, event._value) for event in self.events)

    def todict(self) -> dict[Event[Any], Any]:
        """A dict from event to value."""
        return {event: event._value for event in self.events}


@final
class _Condition:
    """What makes an Event a condition: its sub-events and how to evaluate them."""

    __slots__ = ("count", "event", "events", "need_all")

    def __init__(self, event: Event[ConditionValue], events: tuple[Event[Any], ...],
                 need_all: bool) -> None:
        self.event = event
        self.events = events
        self.need_all = need_all
        self.count = 0

    def check(self, event: Event[Any]) -> None:
        cond = self.event
        if cond._value is not PENDING:
            return
        self.count += 1
        if not event._ok:
            event._ok = None  # defused
            cond.fail(event._value)
        elif not self.need_all or self.count == len(self.events):
            cond.succeed()

    def build_value(self, event: Event[Any]) -> None:
        self.remove_checks()
        if event._ok:
            value = ConditionValue()
            self.populate(value)
            event._value = value

    def populate(self, value: ConditionValue) -> None:
        for event in self.events:
            sub = getattr(event, "_owner", None)
            if type(sub) is _Condition:
                sub.populate(value)
            elif event._cbs is _DONE:
                value.events.append(event)

    def remove_checks(self) -> None:
        check = self.check
        for event in self.events:
            cbs = event._cbs
            if cbs and cbs is not _DONE and check in cbs:
                cbs.remove(check)
            sub = getattr(event, "_owner", None)
            if type(sub) is _Condition:
                sub.remove_checks()


def _events_of(bucket: Any) -> list[Event[Any]]:
    """The events of a future-time bucket: a lone event or a list of them."""
    return bucket if type(bucket) is _Bucket else [bucket]


def _subscribe(event: Event[Any], callback: Callable[[Event[Any]], object]) -> None:
    """Run *callback* when *event* is processed, after earlier subscribers."""
    cbs = event._cbs
    if cbs is None:
        event._cbs = [callback]
    elif type(cbs) is tuple:
        _own_callbacks(event).append(callback)
    else:
        cbs.append(callback)


def _own_callbacks(event: Event[Any]) -> list[Callable[[Event[Any]], object]]:
    """Turn an event's shared owner callbacks (a tuple) into its own list.

    A resource installs its callbacks as a shared tuple when it makes an event;
    they run before the waiter. Once anything else subscribes, the event gets
    a list in the exact order: owner callbacks, the waiter, the rest.
    """
    cbs: list[Callable[[Event[Any]], object]] = list(event._cbs)
    waiter = event._waiter
    if waiter is not None:
        event._waiter = None
        cbs.append(waiter._on_event)
    event._cbs = cbs
    return cbs


@final
class _ProcessInfo:
    """What only some processes need: an explicit name, and keyed-ordering identity."""

    __slots__ = ("ident", "name", "nsched", "nspawn")

    def __init__(self, name: str | None, ident: str) -> None:
        self.name = name
        #: Keyed ordering: the partition-independent identity of the process.
        self.ident = ident
        #: Keyed ordering: events scheduled and processes spawned so far.
        self.nsched = 0
        self.nspawn = 0


class Process(Event[R]):
    """A generator or ``async def`` coroutine driven by the simulation.

    A process is itself an event: it succeeds with the generator's return
    value when it finishes, or fails with the exception that escaped it, so
    other processes can wait for it with ``yield proc``.
    """

    # Two slots of its own: a process waits in memory for most of its life.
    # The inherited `_owner` holds the pid, `_data` a _ProcessInfo or None.
    __slots__ = ("_gen", "_target")

    _gen: Generator[Any, Any, R] | Coroutine[Any, Any, R]
    #: The event this process waits on (None before it starts and once finished),
    #: or the time of its elided delay (see Sim._run_fifo and _unelide).
    _target: Any

    def __init__(self, sim: Sim, generator: Generator[Any, Any, R] | Coroutine[Any, Any, R],
                 *, name: str | None = None) -> None:
        if not isinstance(sim, Sim):
            raise ConfigError(f"Process(sim, ...): expected a Sim, got {_describe(sim)}")
        sim._init_process(self, generator, name)

    @property
    def name(self) -> str:
        """The name given to ``spawn(name=...)``, or the generator's name."""
        info = self._data
        if info is not None and info.name is not None:
            return cast("str", info.name)
        return cast("str", getattr(self._gen, "__name__", type(self._gen).__name__))

    @property
    def pid(self) -> int:
        """The process number within its Sim: 1 for the first process spawned, and so on."""
        return cast("int", self._owner)

    @property
    def who(self) -> str:
        """The name used in traces: the given name, or ``<generator name>#<pid>``.

        Under keyed ordering an unnamed process is ``<generator name>#<identity>``
        instead (such as ``item#n:cell-3/2``): the pid counts spawns in one Sim,
        which depends on the partition; the identity does not.
        """
        info = self._data
        if info is not None:
            if info.name is not None:
                return cast("str", info.name)
            if info.ident:
                return f"{self.name}#{info.ident}"
        return f"{self.name}#{self._owner}"

    @property
    def target(self) -> Event[Any] | None:
        """The event this process is waiting on; None before it starts and once it has finished."""
        target = self._target
        if target is None or isinstance(target, Event):
            return target
        return _unelide(self)  # waiting on an elided delay: give it its event back

    @property
    def is_alive(self) -> bool:
        """True until the process has finished (returned or raised)."""
        return self._value is PENDING

    def __repr__(self) -> str:
        state = "alive" if self._value is PENDING else "finished"
        return f"<Process {self.who} {state}>"

    def interrupt(self, cause: Any = None) -> None:
        """Throw :class:`~simulacra.Interrupt` with *cause* into this process, urgently.

        The process stops waiting on its current event (which is not
        cancelled) and receives the interrupt at the current time, before any
        normal event.

        Raises:
            DeadProcess: the process has already finished.
            SelfInterrupt: a process tried to interrupt itself.
        """
        sim = self.sim
        if self._value is not PENDING:
            raise DeadProcess(
                f"process {self.who!r} has finished and cannot be interrupted "
                f"(cause {cause!r}); check proc.is_alive first"
            )
        if self is sim.active_process:
            raise SelfInterrupt(f"process {self.who!r} tried to interrupt itself")
        event: Event[Any] = _new(Event)
        event.sim = sim
        event._value = Interrupt(cause)
        event._ok = None  # failed, and defused: the process always receives it
        event._waiter = None
        event._cbs = [_deliver_interrupt]
        event._owner = self
        sim._urgent_append(event)

    def _finish(self, ok: bool, value: Any) -> None:
        """Record the outcome of the finished process and schedule it as an event."""
        self._ok = ok
        self._value = value
        self._target = None
        sim = self.sim
        sim._now_append(self)
        tracer = sim._tracer
        if tracer is not None:
            tracer.record(sim.now, "exit" if ok else "fail", self.who, value)

    def _on_event(self, event: Event[Any]) -> None:
        """Resume this process with *event* (the callback form of the waiter slot)."""
        _resume(self.sim, self, event)


def _deliver_interrupt(event: Event[Any]) -> None:
    proc: Process[Any] = event._owner
    if proc._value is not PENDING:
        return  # finished meanwhile: a second interrupt in the same instant
    target = proc._target
    sim = proc.sim
    if target is None and sim._keyed:
        # Not started yet. In fifo order its start is always ahead of the
        # interrupt (both urgent, the start scheduled first); keyed order sorts
        # by who scheduled them, so put the interrupt right after the start, in
        # the order the interrupts were made.
        event._cbs = [_deliver_interrupt]
        key = (URGENT, proc._data.ident, 0, sim._cur_key)
        heappush(sim._heap, (sim.now, key, event))
        return
    if target is not None:
        if not isinstance(target, Event):
            target = _unelide(proc)
        if target._waiter is proc:
            target._waiter = None
        else:
            cbs = target._cbs
            if cbs and cbs is not _DONE:
                for index, cb in enumerate(cbs):
                    if getattr(cb, "__self__", None) is proc:
                        del cbs[index]
                        break
    if sim._tracer is not None:
        sim._tracer.record(sim.now, "interrupt", proc.who, event._value.cause)
    _resume(sim, proc, event)


def _unelide(proc: Process[Any]) -> Event[Any]:
    """Give *proc*'s elided delay back its event, in the schedule where the process stood.

    Whatever needs the event itself (``proc.target``, an interrupt) calls this
    first; from then on the wait is an ordinary one.
    """
    sim = proc.sim
    when = proc._target
    event: Event[Any] = _new(Event)
    event.sim = sim
    event._value = None
    event._ok = True
    event._waiter = proc
    event._cbs = _FUTURE
    event._data = when
    bucket = sim._buckets.get(when)
    if bucket is proc:
        sim._buckets[when] = event
    elif type(bucket) is _Bucket:
        bucket[bucket.index(proc)] = event
    else:  # its time has come: it is queued to run now
        timedq = sim._timedq
        timedq[timedq.index(proc)] = event
    proc._target = event
    return event


def _resume(sim: Sim, proc: Process[Any], event: Event[Any]) -> None:
    """Drive *proc* with the outcome of *event* until it waits on a pending event or ends.

    The run loop has an inlined copy of the common case (event succeeded, next
    event pending with no waiter); everything else comes here.
    """
    sim.active_process = proc
    gen = proc._gen
    tracer = sim._tracer
    while True:
        try:
            if event._ok:
                if tracer is not None:
                    tracer.record(sim.now, "resume", proc.who, event._value)
                nxt = gen.send(event._value)
            else:
                event._ok = None  # defused
                if tracer is not None:
                    tracer.record(sim.now, "throw", proc.who, event._value)
                nxt = gen.throw(_copy_exception(event._value))
        except StopIteration as stop:
            proc._finish(True, stop.value)
            sim.active_process = None
            return
        except BaseException as exc:
            tb = exc.__traceback__
            exc.__traceback__ = tb.tb_next if tb is not None else None
            proc._finish(False, exc)
            sim.active_process = None
            return
        try:  # the common case inline, as in the run loop
            fast = nxt._waiter is None and nxt.sim is sim and (
                (cbs := nxt._cbs) is None or type(cbs) is tuple
            )
        except AttributeError:
            fast = False
        if fast:
            nxt._waiter = proc
            proc._target = nxt
            break
        again = sim._wait_on(proc, nxt)
        if again is None:
            break
        event = again
    sim.active_process = None


@final
class Sim:
    """One simulation: a clock, an event heap and the processes living on it.

    Args:
        seed: The master seed of the random streams (an int, str, bytes or a
            :class:`~simulacra.SeedTree` node). ``None`` draws one from the OS
            and is not reproducible.
        trace: ``True`` to record a trace in memory (see ``trace_records``), a
            :class:`Tracer` to receive the records, or ``False`` (the default)
            for none.
        ordering: ``"fifo"`` (the default) breaks ties between events at the
            same time and priority by scheduling order, exactly as SimPy does.
            ``"keyed"`` breaks them by model identity: which process scheduled
            the event and how many it had scheduled before. Keyed order does
            not depend on how a model is partitioned (see ``docs/design.md``).
        start: The simulated time the clock starts at (default 0.0).

    Attributes:
        now: The current simulated time: the time of the event being
            processed, or of the last one (a float; it never goes back).
        active_process: The process being resumed right now, or None (between
            processes, and in event callbacks).

    A Sim and every object attached to it belong to one thread.
    """

    # `__weakref__`: layers above key their per-Sim bookkeeping (the monitors
    # of simulacra.resources) by a weak reference, so it goes with the Sim.
    __slots__ = (
        "__weakref__",
        "_buckets",
        "_cur_key",
        "_extras",
        "_heap",
        "_keyed",
        "_now_append",
        "_nowq",
        "_npid",
        "_nroot",
        "_on_pop",
        "_origin",
        "_owner_thread",
        "_plain",
        "_root_ident",
        "_running",
        "_streams",
        "_timedq",
        "_times",
        "_tracer",
        "_ubuckets",
        "_urgent_append",
        "_urgentq",
        "active_process",
        "now",
    )

    #: The current simulated time.
    now: float
    #: The process being resumed right now, or None between processes.
    active_process: Process[Any] | None

    def __init__(self, seed: int | str | bytes | SeedTree | None = None,
                 trace: bool | Tracer = False, *, ordering: str = "fifo",
                 start: float = 0.0) -> None:
        self.now = start
        self.active_process = None
        # The fifo ordering's schedule. At time t the order is: urgent events
        # scheduled for t in advance (only run(until=t) makes those), urgent
        # events scheduled at t, normal events scheduled for t in advance,
        # normal events scheduled at t, each group in scheduling order. Every
        # container below is appended to in scheduling order, so no keys.
        #: Heap of the distinct future times that have events.
        self._times: list[float] = _new_times()
        #: Future time -> its normal event, or a list of them in scheduling
        #: order once there are two (most times in continuous models have one).
        self._buckets: dict[float, Any] = _new_buckets()
        #: Future time -> its urgent events (run-until stops), in scheduling order.
        self._ubuckets: dict[float, list[Event[Any]]] = {}
        #: Urgent events at the current time (process starts, interrupts).
        self._urgentq: deque[Event[Any]] = deque()
        #: Normal events scheduled in advance for the current time (a bucket's).
        self._timedq: deque[Event[Any]] = deque()
        #: Normal events scheduled at the current time: all after the timed ones.
        self._nowq: deque[Event[Any]] = deque()
        #: The keyed ordering's schedule: (time, key, event).
        self._heap: list[tuple[float, Any, Event[Any]]] = []
        self._streams = Streams(as_seed_tree(seed))
        if trace is True:
            self._tracer: Tracer | None = _ListTracer()
        elif trace is False or trace is None:
            self._tracer = None
        elif callable(getattr(trace, "record", None)):
            self._tracer = trace
        else:
            raise ConfigError(
                f"Sim(trace=...): expected True, False or an object with a record() method, "
                f"got {_describe(trace)}"
            )
        if ordering in ("fifo", "keyed"):
            # Only the keyed ordering has keys; the fifo layout needs none.
            self._keyed = ordering == "keyed"
        else:
            raise ConfigError(f"Sim(ordering=...): expected 'fifo' or 'keyed', got {ordering!r}")
        #: Schedule an event at the current time, normal or urgent priority.
        self._now_append: Callable[[Event[Any]], None] = (
            self._push_now if self._keyed else self._nowq.append
        )
        self._urgent_append: Callable[[Event[Any]], None] = (
            self._push_urgent if self._keyed else self._urgentq.append
        )
        #: Neither keyed nor traced: the inlined fast paths apply.
        self._plain = not self._keyed and self._tracer is None
        self._npid = 0
        self._running = False
        self._owner_thread = 0
        #: Layer-2 data kept per Sim (the monitors' registry): held by the Sim,
        #: so it goes with the Sim (a module-level map of Sims would keep them).
        self._extras: dict[str, Any] | None = None
        # Keyed ordering: the identity of host code outside any process, and
        # the key of the event whose callbacks are running (their origin).
        self._root_ident = "root"
        self._nroot = 0
        self._origin: Any = None
        #: Keyed ordering: the key of the event being processed (or last processed).
        self._cur_key: Any = None
        #: Called as ``_on_pop(time, key, event)`` for every model event popped
        #: by a traced or keyed Sim (not the stop events of run(until=...); never
        #: on the untraced fifo fast path); a traced
        #: Sim counts ties with it, PDES shards replace it (see simulacra.parallel).
        self._on_pop: Callable[[float, Any, Event[Any]], None] | None = (
            _TieCounter() if self._tracer is not None else None
        )

    def __repr__(self) -> str:
        return f"<Sim now={self.now!r} pending={self._pending_count()}>"

    def _pending_count(self) -> int:
        future = sum(len(_events_of(b)) for b in self._buckets.values())
        future += sum(map(len, self._ubuckets.values()))
        queued = len(self._urgentq) + len(self._timedq) + len(self._nowq)
        return len(self._heap) + queued + future

    # -- random streams -------------------------------------------------------

    @property
    def seed(self) -> SeedTree:
        """The seed-tree node all of this Sim's random streams derive from."""
        return self._streams.root

    @property
    def streams(self) -> Streams:
        """The named random streams of this Sim (for checkpoints: ``getstate``/``setstate``)."""
        return self._streams

    def rng(self, name: str) -> random.Random:
        """The ``random.Random`` stream called *name*, made on first use.

        Each stream is derived from the seed by its name, so adding a stream
        never shifts the draws of another.
        """
        return self._streams.rng(name)

    def np_rng(self, name: str) -> Any:
        """The numpy ``Generator`` stream called *name* (needs the ``[numpy]`` extra)."""
        return self._streams.np_rng(name)

    def small_rng(self, name: str) -> Any:
        """The :class:`~simulacra.rng.SmallRandom` stream called *name* (32 bytes of state).

        For one stream per member of a large population, where a
        ``random.Random`` each (2.5 kB) would not fit in the cache.
        """
        return self._streams.small_rng(name)

    # -- tracing --------------------------------------------------------------

    @property
    def tracer(self) -> Tracer | None:
        """The tracer receiving records, or None when tracing is off."""
        return self._tracer

    @property
    def trace_records(self) -> list[tuple[float, str, str, object]] | None:
        """The in-memory trace of ``Sim(trace=True)``; None when records go elsewhere or nowhere."""
        tracer = self._tracer
        return tracer.records if isinstance(tracer, _ListTracer) else None

    @property
    def ties(self) -> TieStats | None:
        """Events processed so far and how many shared their instant (see :class:`TieStats`).

        None when tracing is off: only a traced Sim counts them.
        """
        counter = self._on_pop
        if not isinstance(counter, _TieCounter):  # untraced, or a PDES shard's observer
            return None
        return TieStats(counter.events, counter.ties)

    def record(self, kind: str, who: str, payload: object = None) -> None:
        """Add a model-level record to the trace (a no-op when tracing is off)."""
        if self._tracer is not None:
            self._tracer.record(self.now, kind, who, payload)

    # -- keyed ordering -------------------------------------------------------

    # A keyed key is (priority, ident, n): ident is a str naming who scheduled
    # the event (a process path such as "r/3/1", "n:<name>" for a named process,
    # "e:<ident>@<n>" for the callbacks of an event, or "root" for host code) and
    # n counts the events it has scheduled. All three are partition-independent.

    def _origin_key(self) -> tuple[str, int]:
        proc = self.active_process
        if proc is not None:
            info: _ProcessInfo = proc._data
            info.nsched += 1
            return info.ident, info.nsched
        origin = self._origin
        if origin is not None:
            origin[1] += 1
            return origin[0], origin[1]
        self._nroot += 1
        return self._root_ident, self._nroot

    def _keyed_normal(self) -> tuple[Any, ...]:
        if self.active_process is None:
            origin = self._origin
            if origin is not None:  # an event's callbacks (a message handler): inlined
                n = origin[1] = origin[1] + 1
                return (NORMAL, origin[0], n)
        ident, n = self._origin_key()
        return (NORMAL, ident, n)

    def _keyed_urgent(self) -> tuple[Any, ...]:
        ident, n = self._origin_key()
        return (URGENT, ident, n)

    # -- scheduling -----------------------------------------------------------

    def _push_now(self, event: Event[Any]) -> None:
        heappush(self._heap, (self.now, self._keyed_normal(), event))

    def _push_urgent(self, event: Event[Any]) -> None:
        heappush(self._heap, (self.now, self._keyed_urgent(), event))

    def _at(self, when: float, event: Event[Any], *, urgent: bool = False) -> None:
        """Schedule *event* at *when* > now (delay() inlines the normal case)."""
        if self._keyed:
            key = self._keyed_urgent() if urgent else self._keyed_normal()
            heappush(self._heap, (when, key, event))
            return
        buckets = self._buckets
        if when not in buckets:
            buckets[when] = _Bucket(when)
            heappush(self._times, when)
        if urgent:
            self._ubuckets.setdefault(when, []).append(event)
        else:
            bucket = buckets[when]
            if type(bucket) is _Bucket:
                bucket.append(event)
            else:
                buckets[when] = _Bucket(when, (bucket, event))

    def _advance(self) -> bool:
        """Move the clock to the next future time; False if there is none (fifo ordering)."""
        times = self._times
        if not times:
            return False
        when = heappop(times)
        self.now = when
        bucket = self._buckets.pop(when)
        if type(bucket) is _Bucket:
            self._timedq.extend(bucket)
        else:
            self._timedq.append(bucket)
        if self._ubuckets:
            urgent = self._ubuckets.pop(when, None)
            if urgent:
                self._urgentq.extend(urgent)
        return True

    # -- low-level hooks for simulacra.parallel (keyed ordering only) ---------

    def _require_keyed(self, what: str) -> None:
        if not self._keyed:
            raise ConfigError(f"{what} needs Sim(ordering='keyed'), this Sim orders ties fifo")

    def _next_key(self) -> tuple[Any, ...]:
        """Reserve the key the current origin gives its next normal event.

        A cross-shard message reserves its key on the sending shard, so the
        receiving shard orders it exactly as one Sim would have.
        """
        self._require_keyed("_next_key()")
        return self._keyed_normal()

    def _schedule_keyed(self, event: Event[Any], when: float, key: tuple[Any, ...]) -> None:
        """Schedule a triggered *event* at *when* with a key reserved elsewhere."""
        self._require_keyed("_schedule_keyed()")
        if event._value is PENDING:
            raise KernelBug("_schedule_keyed() needs a triggered event")
        if when < self.now:
            raise KernelBug(f"_schedule_keyed() at {when}, before now ({self.now})")
        heappush(self._heap, (when, key, event))

    def _post_keyed(self, when: float, key: tuple[Any, ...], value: Any,
                    callback: Callable[[Event[Any]], object]) -> None:
        """Schedule a triggered event carrying *value*, its one callback *callback*.

        At *when* (not before now), with a key reserved by :meth:`_next_key`: a
        sharded model's message, the cheap form of :meth:`_schedule_keyed`.
        """
        event: Event[Any] = _new(Event)
        event.sim = self
        event._value = value
        event._ok = True
        event._waiter = None
        event._cbs = [callback]
        heappush(self._heap, (when, key, event))

    # -- making events --------------------------------------------------------

    def event(self) -> Event[Any]:
        """A plain pending event; trigger it with ``succeed`` or ``fail``."""
        # Inlines Event.__init__ (one per call site in hot models).
        event: Event[Any] = _new(Event)
        event.sim = self
        event._value = PENDING
        event._ok = True
        event._waiter = None
        event._cbs = None
        return event

    def delay(self, delay: float, value: T | None = None) -> Event[T | None]:
        """An event that succeeds with *value* after *delay* units of simulated time.

        Raises:
            InvalidDelay: *delay* is negative, NaN or not a number.
        """
        # Inlines Event.__init__: one of these per `yield sim.delay(...)`.
        event: Event[T | None] = _new(Event)
        event.sim = self
        event._value = value
        event._ok = True
        event._waiter = None
        now = self.now
        try:
            when = now + delay
            if when > now:
                if self._keyed:
                    event._cbs = None
                    heappush(self._heap, (when, self._keyed_normal(), event))
                    return event
                # Tagged so that the run loop can elide it (see _ELIDE_REFS).
                event._cbs = _FUTURE
                event._data = when
                # Inlines Sim._at: one entry per distinct time, in scheduling order.
                # One hash of *when* in the common case (a new time).
                bucket = self._buckets.setdefault(when, event)
                if bucket is event:
                    heappush(self._times, when)
                elif type(bucket) is _Bucket:
                    bucket.append(event)
                else:
                    self._buckets[when] = _Bucket(when, (bucket, event))
                return event
            if delay >= 0:  # zero, or too small to move a clock this large
                event._cbs = None
                self._now_append(event)
                return event
        except TypeError:
            pass
        raise InvalidDelay(self._delay_message(delay))  # negative, NaN or not a number

    def _delay_message(self, delay: object) -> str:
        proc = self.active_process
        where = f"process {proc.who!r}" if proc is not None else "host code"
        return f"delay: expected a number >= 0, got {_describe(delay)} (in {where})"

    timeout = delay  # SimPy's name, for people porting models

    def all_of(self, events: Iterable[Event[Any]]) -> Event[ConditionValue]:
        """An event that succeeds once every event in *events* has (immediately if empty).

        It fails as soon as one of them fails. Its value is a :class:`ConditionValue`.
        """
        return self._condition(events, need_all=True)

    def any_of(self, events: Iterable[Event[Any]]) -> Event[ConditionValue]:
        """An event that succeeds once any event in *events* has (immediately if empty)."""
        return self._condition(events, need_all=False)

    def _condition(self, events: Iterable[Event[Any]], *, need_all: bool) -> Event[ConditionValue]:
        subs = tuple(events)
        cond: Event[ConditionValue] = self.event()
        state = _Condition(cond, subs, need_all)
        cond._owner = state
        if not subs:
            cond.succeed(ConditionValue())
            return cond
        for sub in subs:
            what = "all_of" if need_all else "any_of"
            if not isinstance(sub, Event):
                raise NotAnEvent(
                    f"{what}: expected events, got {_describe(sub)} "
                    "(a resource needs .request(), a store .get() or .put(...))"
                )
            if sub.sim is not self:
                raise ForeignEvent(f"{what}: {sub!r} belongs to another Sim")
        check = state.check
        for sub in subs:
            if sub._cbs is _DONE:
                check(sub)
            else:
                _subscribe(sub, check)
        _subscribe(cond, state.build_value)
        return cond

    # -- processes ------------------------------------------------------------

    @overload
    def spawn(self, fn: Generator[Any, Any, R] | Coroutine[Any, Any, R], /, *,
              name: str | None = None) -> Process[R]: ...

    @overload
    def spawn(self, fn: Callable[..., Generator[Any, Any, R] | Coroutine[Any, Any, R]], /,
              *args: Any, name: str | None = None, **kwargs: Any) -> Process[R]: ...

    def spawn(self, fn: Any, /, *args: Any, name: str | None = None, **kwargs: Any) -> Process[Any]:
        """Start a process and return it.

        *fn* is a generator function or ``async def`` function, called as
        ``fn(sim, *args, **kwargs)``, or an already created generator or
        coroutine object. The process starts at the current time, before any
        normal event.

        Args:
            fn: The generator or ``async def`` function (or object) to run.
            *args: Passed to *fn* after the Sim.
            name: The process's name in traces (``who``); by default the
                function's name and the process number (or, in keyed
                ordering, its identity).
            **kwargs: Passed to *fn*.

        Raises:
            ConfigError: *fn* is neither.
        """
        if type(fn) is GeneratorType and self._plain and name is None and not args and not kwargs:
            # Inlines _init_process for the common `sim.spawn(gen(...))` call.
            proc: Process[Any] = _new(Process)
            proc.sim = self
            proc._value = PENDING
            proc._ok = True
            proc._waiter = None
            proc._cbs = None
            proc._gen = fn
            self._npid += 1
            proc._owner = self._npid
            proc._data = None
            proc._target = None
            self._urgentq.append(proc)  # it starts when popped (see _START)
            return proc
        if hasattr(fn, "send"):
            if args or kwargs:
                raise ConfigError(
                    "spawn(): arguments were given with a generator object; pass the "
                    "generator function instead: sim.spawn(fn, *args)"
                )
            gen = fn
        elif callable(fn):
            gen = fn(self, *args, **kwargs)
            if not hasattr(gen, "send"):
                raise ConfigError(
                    f"spawn(): {getattr(fn, '__qualname__', fn)!r} returned {_describe(gen)}; "
                    "expected a generator function (with `yield`) or an `async def` function"
                )
        else:
            raise ConfigError(
                f"spawn(): expected a generator function, async def function, generator or "
                f"coroutine, got {_describe(fn)}"
            )
        return self._spawn_generator(gen, name)

    def _spawn_generator(self, gen: Any, name: str | None) -> Process[Any]:
        proc: Process[Any] = _new(Process)
        self._init_process(proc, gen, name)
        return proc

    def _init_process(self, proc: Process[Any], gen: Any, name: str | None) -> None:
        if not (hasattr(gen, "send") and hasattr(gen, "throw")):
            raise ConfigError(f"a process needs a generator or coroutine, got {_describe(gen)}")
        if name is not None and not isinstance(name, str):
            raise ConfigError(f"spawn(name=...): expected a str, got {_describe(name)}")
        proc.sim = self
        proc._value = PENDING
        proc._ok = True
        proc._waiter = None
        proc._cbs = None
        proc._gen = gen
        self._npid += 1
        proc._owner = self._npid
        proc._data = None
        if self._keyed:
            parent = self.active_process
            if name is not None:
                ident = f"n:{name}"
            elif parent is not None:
                parent_info: _ProcessInfo = parent._data
                parent_info.nspawn += 1
                ident = f"{parent_info.ident}/{parent_info.nspawn}"
            elif self._origin is not None:
                # Spawned by the callbacks of an event (an on_message handler,
                # say): named after that event, which is a property of the
                # model, not of how it is partitioned.
                origin = self._origin
                origin[2] += 1
                ident = f"{origin[0]}/{origin[2]}"
            else:
                self._nroot += 1
                ident = f"r/{self._nroot}"
            proc._data = _ProcessInfo(name, ident)
        elif name is not None:
            proc._data = _ProcessInfo(name, "")
        proc._target = None
        if self._keyed:
            # A start is keyed by the process itself (its event #0), not by
            # whoever spawned it: the order of starts does not depend on the
            # order of spawn calls, which a partitioned run does not keep.
            heappush(self._heap, (self.now, (URGENT, proc._data.ident, 0), proc))
        else:
            self._urgentq.append(proc)  # it starts when popped (see _START)
        if self._tracer is not None:
            self._tracer.record(self.now, "spawn", proc.who, None)

    process = spawn  # SimPy's name

    def _wait_on(self, proc: Process[Any], nxt: object) -> Event[Any] | None:
        """Subscribe *proc* to *nxt*; return *nxt* if it is already processed (resume at once)."""
        try:
            cbs = nxt._cbs  # type: ignore[attr-defined]
            sim = nxt.sim  # type: ignore[attr-defined]
        except AttributeError:
            sim = cbs = None
        if sim is not self:
            # Throw the error into the process at its `yield`, so the traceback
            # points at the offending line; unhandled, it fails the process and
            # crashes run().
            if isinstance(nxt, Event):
                err: SimError = ForeignEvent(
                    f"process {proc.who!r} yielded {nxt!r}, which belongs to another Sim; "
                    "expected an event of the Sim running the process"
                )
            else:
                err = NotAnEvent(
                    f"process {proc.who!r} yielded {_describe(nxt)}; expected an event "
                    "(sim.delay(...), sim.event(), a request, a process, all_of/any_of, ...)"
                )
            bad: Event[Any] = _new(Event)
            bad.sim = self
            bad._ok = False
            bad._value = err
            bad._waiter = None
            bad._cbs = _DONE
            return bad
        event = cast("Event[Any]", nxt)
        if cbs is _DONE:
            return event
        if event._waiter is None and (cbs is None or type(cbs) is tuple):
            event._waiter = proc
        else:
            _subscribe(event, proc._on_event)
        proc._target = event
        return None

    # -- running --------------------------------------------------------------

    def peek(self) -> float:
        """The time of the next event, or ``inf`` if none is scheduled."""
        if self._keyed:
            return self._heap[0][0] if self._heap else float("inf")
        if self._urgentq or self._timedq or self._nowq:
            return self.now
        return self._times[0] if self._times else float("inf")

    def _enter(self) -> None:
        if self._running:
            if threading.get_ident() != self._owner_thread:
                raise ThreadOwnershipError(
                    "this Sim is being run by another thread; a Sim and everything attached "
                    "to it belong to one thread"
                )
            proc = self.active_process
            where = f" from process {proc.who!r}" if proc is not None else ""
            raise SimError(f"run()/step() called while the Sim is already running{where}")
        self._running = True
        self._owner_thread = threading.get_ident()

    def step(self) -> None:
        """Process the next event.

        Raises:
            EmptySchedule: no event is scheduled.
        """
        self._enter()
        try:
            if not self._step():
                raise EmptySchedule("step(): no events are scheduled")
        finally:
            self._running = False

    def _step(self) -> bool:
        """Process the next event; False if there is none.

        (Not EmptySchedule: a process may raise that itself, and its failure
        must crash run() like any other.)
        """
        if self._keyed:
            return self._run_keyed(once=True)
        while not (self._urgentq or self._timedq or self._nowq):
            if not self._advance():
                return False
        event = (self._urgentq or self._timedq or self._nowq).popleft()
        on_pop = self._on_pop
        if on_pop is not None and getattr(event, "_owner", None) is not _UNTIL:
            on_pop(self.now, None, event)
        if event._value is PENDING:  # a process waiting to start
            self._cur_key = None
            _resume(self, cast("Process[Any]", event), _START)
            return True
        waiter = event._waiter
        cbs = event._cbs
        event._cbs = _DONE
        self._dispatch(event, waiter, cbs)
        return True

    def _run_keyed(self, once: bool = False) -> bool:
        """Process the keyed schedule's events (only the next one with *once*).

        The keyed ordering's step and its run loop in one (a sharded model's
        message handlers run here: a call less per event is a tenth of their
        cost). False if there was no event.
        """
        heap = self._heap
        on_pop = self._on_pop
        while heap:
            self.now, key, event = heappop(heap)
            if on_pop is not None and getattr(event, "_owner", None) is not _UNTIL:
                on_pop(self.now, key, event)
            if event._value is PENDING:  # a process waiting to start
                self._cur_key = key  # its start key (URGENT, ident, 0)
                _resume(self, cast("Process[Any]", event), _START)
                if once:
                    return True
                continue
            waiter = event._waiter
            cbs = event._cbs
            event._cbs = _DONE
            self._cur_key = key
            # [identity, events scheduled, processes spawned] of the callbacks.
            self._origin = [f"e:{key[1]}@{key[2]}", 0, 0]
            self._dispatch(event, waiter, cbs)
            if once:
                return True
        return False

    def run(self, until: float | Event[Any] | None = None) -> Any:
        """Advance the simulation.

        Args:
            until: ``None`` runs until no events remain. A number runs until
                the clock reaches it (events at that time stay unprocessed,
                except urgent ones scheduled before ``run`` was called). An
                event runs until it has been processed.

        Returns:
            The value of *until* if it is an event, else ``None``.

        Raises:
            UntilInPast: *until* is a time not after ``now``.
            EmptySchedule: *until* is an event and no events remain to trigger it.
            ForeignEvent: *until* is an event of another Sim.
        """
        if isinstance(until, Event) and until.sim is self and until._cbs is _DONE:
            return until._value
        self._enter()
        stop_event: Event[Any] | None = None
        try:
            if until is not None:
                stop_event = self._until_event(until)
            if self._keyed:
                self._run_keyed()
            elif self._tracer is not None:
                while self._step():
                    pass
            else:
                self._run_fifo()
        except _StopRun:
            assert stop_event is not None  # noqa: S101
            if not stop_event._ok:
                # SimPy raises the until-event's own exception here.
                raise stop_event._value from None
            return stop_event._value
        finally:
            self._running = False
            self.active_process = None
        if stop_event is not None and isinstance(until, Event):
            raise EmptySchedule(
                f"run(until={until!r}): no events are left and the event was never triggered"
            )
        return None

    def _requeue_stopped(self, event: Event[Any], cbs: Any, callback: object) -> None:
        """SimPy's until-event hand-over: callbacks after the stop run on the next step.

        The event goes back to the head of the schedule (priority -1, before
        urgent events) with the callbacks that followed the stop, so ``peek()``
        after ``run(until=t)`` is ``t`` and the next ``step()`` finishes it.
        """
        if not event._ok:
            return  # SimPy raises the failure itself and drops the rest.
        callbacks = list(cbs)
        rest = callbacks[callbacks.index(callback) + 1:]
        event._cbs = rest or None
        if self._keyed:
            ident, n = self._origin_key()
            heappush(self._heap, (self.now, (-1, ident, n), event))
        else:
            self._urgentq.appendleft(event)  # priority -1: before everything now

    def _until_event(self, until: float | Event[Any]) -> Event[Any]:
        """The event that ends ``run(until=...)``, subscribed to stop the loop."""
        if isinstance(until, Event):
            if until.sim is not self:
                raise ForeignEvent(f"run(until=...): {until!r} belongs to another Sim")
            stop_event = until
        else:
            try:
                at = float(until)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"run(until=...): expected None, a number or an event, got {_describe(until)}"
                ) from None
            if not at > self.now:
                raise UntilInPast(
                    f"run(until={at!r}): must be greater than the current time {self.now!r}"
                )
            stop_event = _new(Event)
            stop_event.sim = self
            stop_event._value = None
            stop_event._ok = True
            stop_event._waiter = None
            stop_event._cbs = None
            stop_event._owner = _UNTIL
            self._at(at, stop_event, urgent=True)
        _subscribe(stop_event, _stop)
        return stop_event

    def _dispatch(self, event: Event[Any], waiter: Process[Any] | None, cbs: Any) -> None:
        """Process an event popped by a run loop: resume its waiter, run its callbacks.

        Crashes the run with a failure nobody handled. A stop of
        ``run(until=...)`` hands the callbacks after it to the next step. The
        callbacks' origin (keyed ordering) is cleared when they are done.
        """
        try:
            if waiter is not None:
                if type(cbs) is tuple:  # an owner's callbacks: they subscribed before the waiter
                    for callback in cbs:
                        callback(event)
                    cbs = None
                _resume(self, waiter, event)
            if cbs is not None:
                try:
                    for callback in cbs:
                        callback(event)
                except _StopRun:
                    self._requeue_stopped(event, cbs, callback)
                    raise
        finally:
            self._origin = None
        if event._ok is False:  # failed and nobody handled it
            raise _copy_exception(event._value)

    #: A failed event popped by the fifo loop (the compiled one calls it by this name):
    #: its stop hand-over does nothing (a failed until-event raises) and no origin is set.
    _process_failed = _dispatch

    def _run_fifo(self) -> None:
        """The run loop of the default ordering.

        This loop is what makes the kernel fast; read it top to bottom. It
        inlines the common case of ``_step`` + ``_resume``: the event
        succeeded, a process waits on it, and the event that process yields
        next is pending with no waiter yet. Every other case goes through
        ``_resume`` / ``_wait_on``, which the tests run on the same models.
        """
        urgentq = self._urgentq
        timedq = self._timedq
        nowq = self._nowq
        times = self._times
        buckets = self._buckets
        ubuckets = self._ubuckets
        pop_urgent = urgentq.popleft
        pop_timed = timedq.popleft
        pop_now = nowq.popleft
        append_now = nowq.append
        done = _DONE
        start = _START
        future = _FUTURE
        elide_refs = _ELIDE_REFS
        refcount = sys.getrefcount
        waiter: Process[Any] | None
        event: Event[Any]
        while True:
            if urgentq:
                event = pop_urgent()
                if event._value is PENDING:  # a process waiting to start
                    waiter = event  # type: ignore[assignment]  # (no cast(): a call per event)
                    event = start
                    cbs = None
                else:
                    waiter = event._waiter
                    cbs = event._cbs
                    event._cbs = done
            elif timedq:
                # Scheduled in advance for now: delays, and processes whose
                # delay was elided (still pending: they wait in its place).
                event = pop_timed()
                if event._value is PENDING:
                    waiter = event  # type: ignore[assignment]
                    event = start
                    cbs = None
                else:
                    waiter = event._waiter
                    cbs = event._cbs
                    event._cbs = done
            elif nowq:
                event = pop_now()
                waiter = event._waiter
                cbs = event._cbs
                event._cbs = done
            elif times:
                # Inlines Sim._advance; a time with one event and nothing urgent
                # (most times of a continuous model) is processed right here.
                when = heappop(times)
                self.now = when
                entry = buckets.pop(when)
                if type(entry) is _Bucket or (ubuckets and when in ubuckets):
                    if type(entry) is _Bucket:
                        timedq.extend(entry)
                    else:
                        timedq.append(entry)
                    urgent = ubuckets.pop(when, None)
                    if urgent:
                        urgentq.extend(urgent)
                    continue
                event = entry
                if event._value is PENDING:
                    waiter = event  # type: ignore[assignment]
                    event = start
                    cbs = None
                else:
                    waiter = event._waiter
                    cbs = event._cbs
                    event._cbs = done
            else:
                break
            if not event._ok:
                self._process_failed(event, waiter, cbs)
                continue
            if waiter is not None:
                # An owner's callbacks (a tuple): they subscribed before the waiter.
                if cbs is not None and type(cbs) is tuple:
                    for callback in cbs:
                        callback(event)
                    cbs = None
                self.active_process = waiter
                try:
                    nxt = waiter._gen.send(event._value)
                except StopIteration as stop:
                    # Inlines Process._finish (no tracer in this loop).
                    waiter._value = stop.value
                    waiter._target = None
                    append_now(waiter)
                except BaseException as exc:
                    tb = exc.__traceback__
                    exc.__traceback__ = tb.tb_next if tb is not None else None
                    waiter._finish(False, exc)
                else:
                    # The next event's callbacks if the fast paths may take it
                    # (no waiter yet, this Sim's), else `done` (the general path).
                    try:
                        cbs_next = nxt._cbs if nxt._waiter is None and nxt.sim is self else done
                    except AttributeError:  # not an event: _wait_on says so
                        cbs_next = done
                    if cbs_next is future and refcount(nxt) == elide_refs and nxt._value is None:
                        # A fresh delay nobody else holds: elide it. The process
                        # takes its place in the bucket and keeps the (shared)
                        # time in `_target` (see _ELIDE_REFS and _unelide).
                        when = nxt._data
                        try:
                            bucket = buckets[when]
                        except KeyError:  # its time has come: it is in timedq
                            bucket = None
                        if bucket is nxt:
                            buckets[when] = waiter
                            waiter._target = when
                        elif type(bucket) is _Bucket and bucket[-1] is nxt:
                            bucket[-1] = waiter
                            waiter._target = bucket.when
                        else:
                            nxt._waiter = waiter
                            waiter._target = nxt
                    elif cbs_next is None or type(cbs_next) is tuple:
                        nxt._waiter = waiter
                        waiter._target = nxt
                    else:
                        again = self._wait_on(waiter, nxt)
                        if again is not None:
                            _resume(self, waiter, again)
                self.active_process = None
            if cbs is not None:
                try:
                    for callback in cbs:
                        callback(event)
                except _StopRun:
                    self._requeue_stopped(event, cbs, callback)
                    raise

    # -- checks ---------------------------------------------------------------

    def _check_invariants(self) -> None:
        """Assert the kernel's invariants; tests call this after every test.

        Raises:
            KernelBug: an invariant does not hold.
        """
        heap = self._heap
        for index, (when, _, event) in enumerate(heap):
            if when < self.now:
                raise KernelBug(f"event {event!r} scheduled at {when} is in the past ({self.now})")
            if event._value is PENDING and not (type(event) is Process and event._target is None):
                raise KernelBug(f"pending event {event!r} is in the heap")
            if event._cbs is _DONE:
                raise KernelBug(f"processed event {event!r} is still in the heap")
            for child in (2 * index + 1, 2 * index + 2):
                if child < len(heap) and heap[child][:2] < heap[index][:2]:
                    raise KernelBug("the event heap is out of order")
        times = self._times
        for index in range(len(times)):
            if times[index] <= self.now:
                raise KernelBug(f"future time {times[index]} is not after now ({self.now})")
            for child in (2 * index + 1, 2 * index + 2):
                if child < len(times) and times[child] < times[index]:
                    raise KernelBug("the time heap is out of order")
        if set(times) != set(self._buckets) or len(times) != len(self._buckets):
            raise KernelBug("the time heap and the buckets disagree")
        if not set(self._ubuckets) <= set(self._buckets):
            raise KernelBug("an urgent bucket has no time in the heap")
        queued = [*self._urgentq, *self._timedq, *self._nowq]
        for bucket in self._buckets.values():
            queued.extend(_events_of(bucket))
        for bucket in self._ubuckets.values():
            queued.extend(bucket)
        for event in queued:
            if type(event) is Process and event.is_alive:
                target = event._target
                if target is None:
                    continue  # queued to start
                if not isinstance(target, Event):
                    continue  # waiting on an elided delay (checked below)
            if event._value is PENDING or event._cbs is _DONE:
                raise KernelBug(f"queued event {event!r} is pending or already processed")
        for when, bucket in self._buckets.items():
            for event in _events_of(bucket):
                # A live process in a bucket waits there on an elided delay.
                if type(event) is Process and event.is_alive and event._target != when:
                    raise KernelBug(
                        f"{event!r} waits in the bucket of {when}, its elided delay is "
                        f"for {event._target!r}"
                    )
        waiting = [e for e in queued if type(e) is Process and e.is_alive]
        if len(waiting) != len(set(map(id, waiting))):
            raise KernelBug("a process is queued twice")
        if self._running and self.active_process is not None:
            return
        if self.active_process is not None:
            raise KernelBug(f"active_process is {self.active_process!r} outside of a step")
