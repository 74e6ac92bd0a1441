"""Resources, containers and stores with SimPy 4's semantics.

Every request, release, put and get is a plain kernel :class:`Event` whose
``_owner`` is the resource (see ``simulacra.core``), so the kernel's run loop
sees one event type. The queue discipline is SimPy's, detail for detail,
because the order is observable:

* a new request is appended to the queue and then only the *head* of the
  queue is tried (it may be an older request, not the new one);
* ``release`` frees the slot at once, but the next request is granted when
  the release event is *processed*, one step later;
* a put is processed before the gets it unblocks are tried, and vice versa.

Statistics are kept as running sums (no per-event lists), so they cost a few
additions per grant and release.

Monitors (``monitor=True`` or ``monitor()``) cost nothing until they are
turned on: turning them on swaps the object's class for a recording subclass
(``_RecordingResource`` and the like, same slots) whose methods call the plain
ones and then record, so the plain classes carry no recording code at all.
"""

from __future__ import annotations

import bisect
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Any, Generic, NamedTuple, TypeGuard, TypeVar, cast, final

from simulacra.core import PENDING, Event, Process, Sim
from simulacra.core import accelerate as _accelerate
from simulacra.errors import CapacityExceeded, ConfigError, ForeignRequest

from ._monitors import ContainerMonitor, MonitorSet, ResourceMonitor, StoreMonitor, default_name

__all__ = [
    "Container",
    "ContainerStatistics",
    "FilterStore",
    "PreemptiveResource",
    "Preempted",
    "PriorityItem",
    "PriorityResource",
    "PriorityStore",
    "Resource",
    "ResourceStatistics",
    "Store",
    "StoreStatistics",
]

T = TypeVar("T")
# `object.__new__` bound once: `Event.__new__` is looked up on the type at every call.
_new = object.__new__
_INF = float("inf")


def _check_sim(sim: object, what: str) -> Sim:
    if not isinstance(sim, Sim):
        raise ConfigError(f"{what}(sim, ...): expected a Sim, got {type(sim).__name__}")
    return sim


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_capacity(capacity: object, what: str) -> float:
    if not _is_number(capacity) or not capacity > 0:
        raise ConfigError(f"{what}(capacity=...): expected a number > 0, got {capacity!r}")
    return capacity


def _monitor_name(monitor: object, what: str) -> str | None:
    """The monitor name that ``monitor=...`` asks for (None: the default), checked."""
    if monitor is True:
        return None
    if isinstance(monitor, str) and monitor:
        return monitor
    raise ConfigError(
        f"{what}(monitor=...): expected True, False or a name (a non-empty str), got {monitor!r}"
    )


def _monitor_group_name(owner: object, current: MonitorSet | None, name: object,
                        sim: Sim) -> str | None:
    """Check a ``monitor(name)`` call; the name for a new group, or None if one exists."""
    what = f"{type(owner).__name__}.monitor"
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"{what}(name=...): expected a non-empty str or None, got {name!r}")
    if current is not None:
        held = getattr(current, "name", None)
        if name is not None and name != held:
            raise ConfigError(
                f"{what}(name={name!r}): {owner!r} is monitored already, as {held!r}"
            )
        return None
    return name if name is not None else default_name(sim, type(owner).__name__.lower())


def _subscribe_owner(event: Event[Any], callback: Callable[[Event[Any]], None]) -> None:
    """Run *callback* when *event* is processed (an owner callback, or after the others)."""
    cbs = event._cbs
    if cbs is None:
        event._cbs = (callback,)
    elif type(cbs) is tuple:
        event._cbs = (*cbs, callback)
    else:
        cbs.append(callback)


#: Recording subclass of each class that was monitored: made once per class.
_RECORDING: dict[tuple[type, type], type] = {}


def _recording_class(cls: type, mixin: type) -> type:
    """*cls* with *mixin*'s recording methods in front: the class a monitored object takes.

    The subclass adds no slots, so an object can change to it in place
    (``obj.__class__ = ...``), and it keeps *cls*'s name, so reprs and messages
    do not change. A subclass of the user's own (a Resource subclass) keeps
    its overrides: the mixin only calls ``super()`` and records.
    """
    if issubclass(cls, mixin):
        return cls
    made = _RECORDING.get((cls, mixin))
    if made is None:
        made = _RECORDING[cls, mixin] = type(cls.__name__, (mixin, cls), {
            "__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        })
    return made


@dataclass(frozen=True, slots=True)
class ResourceStatistics:
    """What a resource has seen so far, from its creation to ``time``.

    Attributes:
        time: When the statistics were taken (``sim.now``).
        capacity: The number of slots (now: it may have changed during the run).
        utilisation: Time-averaged fraction of slots in use: the busy slot-time
            over the slot-time the capacity gave, as it changed. Above 1 while
            more requests hold a slot than a lowered capacity allows.
        mean_queue_length: Time-averaged number of requests waiting.
        max_queue_length: The most requests ever waiting at once.
        requests: Requests made.
        grants: Requests granted.
        mean_wait: Mean time from request to grant, over granted requests.
        max_wait: The longest such wait.
    """

    time: float
    capacity: float
    utilisation: float
    mean_queue_length: float
    max_queue_length: int
    requests: int
    grants: int
    mean_wait: float
    max_wait: float


@dataclass(frozen=True, slots=True)
class Preempted:
    """The cause of the :class:`~simulacra.Interrupt` a preempted process receives.

    Attributes:
        by: The process whose request preempted this one (None if made outside a process).
        usage_since: When the preempted request was granted.
        resource: The resource it was using.
    """

    by: Process[Any] | None
    usage_since: float
    resource: PreemptiveResource

    def __trace__(self) -> object:
        return {"by": None if self.by is None else self.by.who, "usage_since": self.usage_since}


class Resource:
    """A resource with *capacity* slots that processes request, hold and release.

    Use it as ``with res.request() as req: yield req`` (or ``async with``);
    leaving the block releases the slot, or cancels the request if it was
    still waiting.

    Attributes:
        users: The granted requests, in grant order.
        queue: The waiting requests, in the order they will be granted.
    """

    __slots__ = (
        "_busy",
        "_cancels",
        "_capacity",
        "_carea",
        "_grants",
        "_marker",
        "_monitor",
        "_qarea",
        "_qmax",
        "_release_cbs",
        "_since",
        "_wmax",
        "_wsum",
        "queue",
        "sim",
        "users",
    )

    queue: Any
    _monitor: ResourceMonitor | None

    def __init__(self, sim: Sim, capacity: int = 1, *, monitor: bool | str = False) -> None:
        self.sim = _check_sim(sim, type(self).__name__)
        self._capacity = _check_capacity(capacity, type(self).__name__)
        self.users: list[Event[Any]] = []
        self.queue = deque()
        # Shared by every release event: its one callback, bound once.
        self._release_cbs: tuple[Callable[[Event[Any]], None]] = (self._grant_next,)
        #: The release event of every `with` block: processed, it re-arms itself.
        self._marker: Event[None] = sim.event()
        self._marker._value = None
        self._marker._cbs = self._release_cbs
        self._since = sim.now
        self._busy = 0.0  # sum of release times minus sum of grant times
        self._qarea = 0.0  # sum of dequeue times minus sum of enqueue times
        self._qmax = 0
        self._cancels = 0
        self._grants = 0
        self._wsum = 0.0
        self._wmax = 0.0
        #: Slot-time since creation, minus ``capacity * now``, once the capacity has
        #: changed; None while it never has (statistics then use ``span * capacity``).
        self._carea: float | None = None
        self._monitor = None
        if monitor is not False:
            self.monitor(_monitor_name(monitor, type(self).__name__))

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} capacity={self._capacity} users={len(self.users)} "
            f"queued={len(self.queue)}>"
        )

    @property
    def capacity(self) -> float:
        """The number of slots; assign an int >= 1 to change it during a run.

        ``res.capacity = n`` takes effect at once, at ``sim.now``, and waits
        for nothing:

        * requests in service are kept: lowering the capacity never preempts
          (not even on a :class:`PreemptiveResource`); while more requests hold
          a slot than there are slots, a release grants nobody;
        * raising it grants the waiting requests at once, in the order they
          would have been granted (first come, or by priority), as many as
          there are new free slots; their events succeed at ``sim.now``;
        * later, waiting requests are granted in their order as releases
          free slots under the new capacity.

        It is an assignment rather than a method because it is the same
        state the getter reads, and it completes where it is made: there is
        no event to wait for (the granted requests' own events say when their
        processes resume). SimPy has no setter; every other rule is SimPy's.

        Raises:
            ConfigError: The new capacity is not an int (a bool is not) or is < 1.
        """
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        self._set_capacity(value)

    def _set_capacity(self, value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(
                f"{type(self).__name__}.capacity = {value!r}: expected an int >= 1 "
                f"(the number of slots), got {type(value).__name__} {value!r}"
            )
        now = self.sim.now
        old = self._capacity
        carea = -old * self._since if self._carea is None else self._carea
        self._carea = carea + (old - value) * now
        self._capacity = value
        queue = self.queue
        while queue and len(self.users) < value:
            self._grant_head(now)

    @property
    def count(self) -> int:
        """The number of slots in use."""
        return len(self.users)

    def request(self) -> Event[None]:
        """Ask for a slot: an event that succeeds when the slot is granted."""
        sim = self.sim
        now = sim.now
        # Inlines Sim.event(): one request per customer in queueing models.
        req: Event[None] = _new(Event)
        req.sim = sim
        req._ok = True
        req._waiter = None
        req._cbs = None
        req._owner = self
        req._data = now  # request time; the grant time once granted
        queue = self.queue
        users = self.users
        if not queue and len(users) < self._capacity:
            # Inlines _grant for an immediate grant (no wait): the common case.
            req._value = None
            users.append(req)
            self._grants += 1
            self._busy -= now
            sim._now_append(req)
        else:
            req._value = PENDING
            queue.append(req)
            self._qarea -= now
            if len(queue) > self._qmax:  # noqa: PLR1730 - cheaper than a max() call
                self._qmax = len(queue)
            if len(users) < self._capacity:
                # SimPy tries the head of the queue, which may be older than *req*.
                self._grant_head(now)
        return req

    def _grant(self, req: Event[Any], now: float) -> None:
        self.users.append(req)
        wait = now - req._data
        if wait > 0.0:
            self._wsum += wait
            self._wmax = max(self._wmax, wait)
        req._data = now
        self._grants += 1
        self._busy -= now
        req.succeed()

    def _grant_head(self, now: float) -> None:
        req = self.queue.popleft()
        self._qarea += now
        self._grant(req, now)

    def _grant_next(self, release: Event[Any]) -> None:
        # The callback of a processed release event: try the head of the queue.
        if release is self._marker:
            release._cbs = self._release_cbs  # re-arm the shared marker
        queue = self.queue
        if queue and len(self.users) < self._capacity:
            # Inlines _grant_head and _grant: one per customer that waited.
            req = queue.popleft()
            sim = self.sim
            now = sim.now
            self._qarea += now
            self.users.append(req)
            wait = now - req._data
            if wait > 0.0:
                self._wsum += wait
                if wait > self._wmax:  # noqa: PLR1730 - cheaper than a max() call
                    self._wmax = wait
            req._data = now
            self._grants += 1
            self._busy -= now
            if req._value is not PENDING:
                req.succeed()  # raises AlreadyTriggered, as SimPy does
            req._ok = True  # Inlines req.succeed()
            req._value = None
            sim._now_append(req)

    def release(self, request: Event[Any]) -> Event[None]:
        """Give back the slot of *request*; an event that succeeds at once.

        Releasing a request that is still waiting in the queue cancels it.

        Raises:
            ForeignRequest: *request* was made on another resource.
        """
        if getattr(request, "_owner", None) is not self:
            raise ForeignRequest(
                f"release(request): {request!r} was not made on {self!r}; release a request "
                "on the resource that granted it"
            )
        release: Event[None] = _new(Event)
        release.sim = self.sim
        release._value = None
        release._ok = True
        release._waiter = None
        release._cbs = self._release_cbs
        release._data = request
        release = self._exit_request(request, None, release)
        return release

    def _cancel(self, request: Event[Any], now: float) -> None:
        try:
            self.queue.remove(request)
        except ValueError:
            return
        self._cancels += 1
        self._qarea += now

    def _exit_request(self, request: Event[Any], exc_type: object,
                      release: Event[None] | None = None) -> Event[None]:
        # `with res.request() as req:` leaves the block (release is None), or
        # release() was called with its own fresh event. As in SimPy, a
        # generator being closed only cancels.
        sim = self.sim
        now = sim.now
        if exc_type is GeneratorExit:
            if request._value is PENDING:
                self._cancel(request, now)
            return request
        try:
            self.users.remove(request)
        except ValueError:
            if request._value is PENDING:
                self._cancel(request, now)
        else:
            self._busy += now
        # Like SimPy's Release event: it succeeds at once and grants the next
        # request when it is processed. Nobody can see the release event of a
        # `with` block, so that one is the resource's reusable marker.
        if release is None:
            release = self._marker
        sim._now_append(release)
        return release

    def monitor(self, name: str | None = None) -> ResourceMonitor:
        """Record utilisation and queue length over time, from now on; return the series.

        ``Resource(sim, capacity, monitor=True)`` does the same at creation.
        Asked again, it returns the same series. The series start at
        ``sim.now`` with the current state and get a point at every instant at
        which the number of users or of waiting requests changes (the state at
        the end of that instant). Recording costs a few list appends per
        request and release; an unmonitored resource pays nothing.

        Args:
            name: The series are named ``NAME.utilisation`` and ``NAME.queue``.
                Default: ``resource-N`` (the class name, lower case; N counts
                the resources of this Sim named by default).

        Raises:
            ConfigError: *name* is taken on this Sim, or the resource is
                monitored already under another name.
        """
        sim = self.sim
        group_name = _monitor_group_name(self, self._monitor, name, sim)
        if group_name is None:
            assert self._monitor is not None  # noqa: S101
            return self._monitor
        group = ResourceMonitor(sim, group_name, utilisation=len(self.users) / self._capacity,
                                queue=len(self.queue))
        self._monitor = group
        mixin = (_RecordingPriorityResource if isinstance(self, PriorityResource)
                 else _RecordingResource)
        self.__class__ = _recording_class(type(self), mixin)
        old = self._release_cbs
        self._release_cbs = (self._grant_next,)  # now the recording one
        if self._marker._cbs is old:
            self._marker._cbs = self._release_cbs
        # An explicit release scheduled before now holds the old callbacks, and
        # grants the head of the queue without recording: the requests waiting
        # now record when they are processed (at the instant of their grant).
        record = cast("_RecordingResource", self)._record_event
        for request in self.queue:
            _subscribe_owner(request, record)
        return group

    def statistics(self) -> ResourceStatistics:
        """Utilisation, queue length over time and waits, from creation until now."""
        now = self.sim.now
        span = now - self._since
        busy = self._busy + len(self.users) * now
        qarea = self._qarea + len(self.queue) * now
        slot_time = (span * self._capacity if self._carea is None
                     else self._carea + self._capacity * now)
        return ResourceStatistics(
            time=now,
            capacity=self._capacity,
            utilisation=busy / slot_time if span > 0 and slot_time > 0 else 0.0,
            mean_queue_length=qarea / span if span > 0 else 0.0,
            max_queue_length=self._qmax,
            requests=self._grants + self._cancels + len(self.queue),
            grants=self._grants,
            mean_wait=self._wsum / self._grants if self._grants else 0.0,
            max_wait=self._wmax,
        )


@final
class _PriorityData:
    """What a priority request carries: SimPy's sort key and who asked."""

    __slots__ = ("key", "preempt", "proc", "time")

    def __init__(self, time: float, key: tuple[float, float, bool], preempt: bool,
                 proc: Process[Any] | None) -> None:
        self.time = time  # request time, then grant time (usage_since)
        self.key = key
        self.preempt = preempt
        self.proc = proc


def _priority_key(request: Event[Any]) -> tuple[float, float, bool]:
    data: _PriorityData = request._data
    return data.key


class PriorityResource(Resource):
    """A resource whose queue is ordered by priority (lower first), then request time.

    Ties keep request order.
    """

    __slots__ = ()

    def __init__(self, sim: Sim, capacity: int = 1, *, monitor: bool | str = False) -> None:
        super().__init__(sim, capacity)
        self.queue = []
        if monitor is not False:
            self.monitor(_monitor_name(monitor, type(self).__name__))

    def request(self, priority: float = 0, preempt: bool = True) -> Event[None]:
        """Ask for a slot with *priority* (lower is served first)."""
        if not _is_number(priority):
            raise ConfigError(f"request(priority=...): expected a number, got {priority!r}")
        sim = self.sim
        now = sim.now
        req: Event[None] = sim.event()
        req._owner = self
        req._data = _PriorityData(now, (priority, now, not preempt), bool(preempt),
                                  sim.active_process)
        queue: list[Event[Any]] = self.queue
        bisect.insort_right(queue, req, key=_priority_key)
        self._qarea -= now
        self._try_head(now)
        # Counted after the grant, so that only requests that wait count.
        self._qmax = max(self._qmax, len(queue))
        return req

    def _try_head(self, now: float) -> None:
        if len(self.users) < self._capacity:
            self._grant_head(now)

    def _grant(self, req: Event[Any], now: float) -> None:
        data: _PriorityData = req._data
        self.users.append(req)
        wait = now - data.time
        if wait > 0.0:
            self._wsum += wait
            self._wmax = max(self._wmax, wait)
        data.time = now
        self._grants += 1
        self._busy -= now
        req.succeed()

    def _grant_head(self, now: float) -> None:
        req = self.queue.pop(0)
        self._qarea += now
        self._grant(req, now)

    def _grant_next(self, release: Event[Any]) -> None:
        if release is self._marker:
            release._cbs = self._release_cbs  # re-arm the shared marker
        if self.queue:
            self._try_head(self.sim.now)


class PreemptiveResource(PriorityResource):
    """A priority resource where a more important request can evict a user.

    The evicted process receives ``Interrupt(cause=Preempted(by, usage_since, resource))``.
    A request made with ``preempt=False`` waits instead of evicting.
    """

    __slots__ = ()

    def _try_head(self, now: float) -> None:
        users = self.users
        head = self.queue[0]
        data: _PriorityData = head._data
        # Users to evict for the head to get a slot: 1 when the resource is full, as in
        # SimPy; more only after the capacity was lowered below the users in service.
        excess = (int(len(users) - self._capacity) + 1 if len(users) >= self._capacity
                  else 0)
        if excess > 0 and data.preempt and (
                excess == 1 or sum(_priority_key(u) > data.key for u in users) >= excess):
            # SimPy's choice of victim: the first user with the largest key (again, while
            # more are needed). Evicting fewer than `excess` would give the head no slot,
            # so after a lowered capacity the head evicts enough lower-priority users, or none.
            for _ in range(excess):
                victim = max(users, key=_priority_key)
                vdata: _PriorityData = victim._data
                if not vdata.key > data.key:
                    break
                users.remove(victim)
                self._busy += now
                proc = vdata.proc
                if proc is not None and proc.is_alive and proc is not self.sim.active_process:
                    proc.interrupt(Preempted(by=data.proc, usage_since=vdata.time, resource=self))
        if len(users) < self._capacity:
            self._grant_head(now)


# ---------------------------------------------------------------------------
# Containers and stores: SimPy's generic put/get queues.


@dataclass(frozen=True, slots=True)
class ContainerStatistics:
    """What a container or store has seen, from creation to ``time``.

    Attributes:
        time: When the statistics were taken.
        mean_level: Time-averaged level (for stores: number of items).
        max_level: The highest level reached.
        puts: Puts completed.
        gets: Gets completed.
        mean_put_wait: Mean time a completed put waited.
        mean_get_wait: Mean time a completed get waited.
        put_queue_length: Puts waiting now.
        get_queue_length: Gets waiting now.
    """

    time: float
    mean_level: float
    max_level: float
    puts: int
    gets: int
    mean_put_wait: float
    mean_get_wait: float
    put_queue_length: int
    get_queue_length: int


StoreStatistics = ContainerStatistics


class _PutGetResource:
    """SimPy's BaseResource: put and get queues tried in turn.

    A put is tried when it is made and whenever a get is processed, and vice
    versa. ``_do_put``/``_do_get`` return True to go on with the next waiting
    event, or False to stop at this one (SimPy's ``proceed``). A put made while
    no put waits is tried directly, which is what SimPy's trigger loop does in
    that case. Each put/get event shares its owner's callback tuple, so the
    process that yields it still takes the kernel's single-waiter fast path.
    """

    __slots__ = (
        "_capacity",
        "_get_cbs",
        "_gets",
        "_gwait",
        "_larea",
        "_last",
        "_lmax",
        "_monitor",
        "_put_cbs",
        "_puts",
        "_pwait",
        "_since",
        "_waiting",
        "get_queue",
        "put_queue",
        "sim",
    )

    _monitor: MonitorSet | None

    def __init__(self, sim: Sim, capacity: float) -> None:
        self.sim = _check_sim(sim, type(self).__name__)
        self._capacity = _check_capacity(capacity, type(self).__name__)
        self._monitor = None
        self.put_queue: list[Event[Any]] = []
        self.get_queue: list[Event[Any]] = []
        # Shared by every put (get) event: processed, it tries the waiting gets (puts).
        self._put_cbs: tuple[Callable[[Event[Any]], None]] = (self._trigger_get,)
        self._get_cbs: tuple[Callable[[Event[Any]], None]] = (self._trigger_put,)
        #: When each waiting put or get was queued, for the wait statistics.
        self._waiting: dict[Event[Any], float] = {}
        self._since = self._last = sim.now
        self._larea = 0.0
        self._lmax = 0.0
        self._puts = self._gets = 0
        self._pwait = self._gwait = 0.0

    @property
    def capacity(self) -> float:
        """The most this can hold."""
        return self._capacity

    def _level(self) -> float:
        raise NotImplementedError

    def _start_recording(self, group: MonitorSet, mixin: type) -> None:
        """Turn monitoring on: the recording class, and callbacks that reach it."""
        self._monitor = group
        self.__class__ = _recording_class(type(self), mixin)
        old = {id(self._put_cbs[0]): self._trigger_get, id(self._get_cbs[0]): self._trigger_put}
        old_put, old_get = self._put_cbs, self._get_cbs
        self._put_cbs = (self._trigger_get,)  # now the recording ones
        self._get_cbs = (self._trigger_put,)
        # Waiting puts and gets hold the old callbacks; point them at the new
        # ones. (A completed one that is still to be processed runs the old
        # trigger, which completes waiting events only: those record.)
        for queue in (self.put_queue, self.get_queue):
            for event in queue:
                cbs = event._cbs
                if cbs is old_put:
                    event._cbs = self._put_cbs
                elif cbs is old_get:
                    event._cbs = self._get_cbs
                elif type(cbs) is list:
                    cbs[:] = [old.get(id(cb), cb) for cb in cbs]

    def _event(self, data: Any, cbs: tuple[Callable[[Event[Any]], None]]) -> Event[Any]:
        event: Event[Any] = _new(Event)
        event.sim = self.sim
        event._value = PENDING
        event._ok = True
        event._waiter = None
        event._cbs = cbs
        event._owner = self
        event._data = data
        return event

    def _submit(self, event: Event[Any], queue: list[Event[Any]], put: bool) -> Event[Any]:
        if not queue:
            # SimPy appends and tries the head, which is this event.
            if put:
                self._do_put(event)
            else:
                self._do_get(event)
            if event._value is not PENDING:
                return event
            queue.append(event)
            self._waiting[event] = self.sim.now
            return event
        queue.append(event)
        self._waiting[event] = self.sim.now
        if put:
            self._trigger_put(None)
        else:
            self._trigger_get(None)
        return event

    def _level_changing(self) -> None:
        # Time-weighted level: called just before the level changes.
        now = self.sim.now
        self._larea += self._level() * (now - self._last)
        self._last = now

    def _done(self, event: Event[Any], value: Any, put: bool) -> None:
        """Count a completed put or get, and schedule it (inlines ``succeed``)."""
        sim = self.sim
        if put:
            self._puts += 1
            level = self._level()
            self._lmax = max(self._lmax, level)
        else:
            self._gets += 1
        if self._waiting:
            queued = self._waiting.pop(event, None)
            if queued is not None:
                if put:
                    self._pwait += sim.now - queued
                else:
                    self._gwait += sim.now - queued
        event._value = value
        sim._now_append(event)

    def _do_put(self, event: Event[Any]) -> bool:
        raise NotImplementedError

    def _do_get(self, event: Event[Any]) -> bool:
        raise NotImplementedError

    def _trigger_put(self, _event: Event[Any] | None) -> None:
        queue = self.put_queue
        if not queue:
            return
        index = 0
        while index < len(queue):
            put = queue[index]
            proceed = self._do_put(put)
            if put._value is PENDING:
                index += 1
            else:
                del queue[index]
            if not proceed:
                break

    def _trigger_get(self, _event: Event[Any] | None) -> None:
        queue = self.get_queue
        if not queue:
            return
        index = 0
        while index < len(queue):
            get = queue[index]
            proceed = self._do_get(get)
            if get._value is PENDING:
                index += 1
            else:
                del queue[index]
            if not proceed:
                break

    def _exit_request(self, event: Event[Any], exc_type: object) -> None:
        # `with store.get() as get:` cancels the get if it is still waiting.
        if event._value is PENDING:
            for queue in (self.put_queue, self.get_queue):
                if event in queue:
                    queue.remove(event)
                    self._waiting.pop(event, None)

    def statistics(self) -> ContainerStatistics:
        """Level over time, completed puts and gets, and their waits."""
        now = self.sim.now
        span = now - self._since
        area = self._larea + self._level() * (now - self._last)
        return ContainerStatistics(
            time=now,
            mean_level=area / span if span > 0 else float(self._level()),
            max_level=max(self._lmax, self._level()),
            puts=self._puts,
            gets=self._gets,
            mean_put_wait=self._pwait / self._puts if self._puts else 0.0,
            mean_get_wait=self._gwait / self._gets if self._gets else 0.0,
            put_queue_length=len(self.put_queue),
            get_queue_length=len(self.get_queue),
        )


class Container(_PutGetResource):
    """A continuous or discrete amount (fuel, money, parts) between 0 and *capacity*.

    ``put(amount)`` waits until there is room; ``get(amount)`` waits until
    there is enough.
    """

    __slots__ = ("_amount",)

    def __init__(self, sim: Sim, capacity: float = _INF, init: float = 0, *,
                 monitor: bool | str = False) -> None:
        super().__init__(sim, capacity)
        if not _is_number(init) or not init >= 0:
            raise ConfigError(f"Container(init=...): expected a number >= 0, got {init!r}")
        if init > capacity:
            raise ConfigError(
                f"Container(init=...): init {init!r} is more than the capacity {capacity!r}"
            )
        self._amount = init
        self._lmax = init
        if monitor is not False:
            self.monitor(_monitor_name(monitor, type(self).__name__))

    def __repr__(self) -> str:
        return f"<Container level={self._amount} capacity={self._capacity}>"

    @property
    def level(self) -> float:
        """The amount held now."""
        return self._amount

    def _level(self) -> float:
        return self._amount

    def monitor(self, name: str | None = None) -> ContainerMonitor:
        """Record the level and the waiting gets and puts over time, from now on.

        ``Container(sim, ..., monitor=True)`` does the same at creation. Asked
        again, it returns the same series. They start at ``sim.now`` and get
        a point at every instant at which the level or a queue changes.

        Args:
            name: The series are ``NAME.level``, ``NAME.getters`` and
                ``NAME.putters``. Default: ``container-N``.

        Raises:
            ConfigError: *name* is taken on this Sim, or the container is
                monitored already under another name.
        """
        group_name = _monitor_group_name(self, self._monitor, name, self.sim)
        if group_name is None:
            return cast("ContainerMonitor", self._monitor)
        group = ContainerMonitor(self.sim, group_name, level=self._amount,
                                 getters=len(self.get_queue), putters=len(self.put_queue))
        self._start_recording(group, _RecordingPutGet)
        return group

    def _check_amount(self, amount: object, what: str) -> float:
        if not _is_number(amount) or not amount > 0:
            raise ConfigError(
                f"Container.{what}(amount=...): expected a number > 0, got {amount!r}"
            )
        if amount > self._capacity:
            raise CapacityExceeded(
                f"Container.{what}(amount={amount!r}): more than the capacity "
                f"{self._capacity!r}, so it could never complete"
            )
        return amount

    def put(self, amount: float) -> Event[None]:
        """Add *amount*; an event that succeeds once it fits.

        Raises:
            CapacityExceeded: *amount* is more than the capacity.
        """
        event = self._event(self._check_amount(amount, "put"), self._put_cbs)
        return self._submit(event, self.put_queue, True)

    def get(self, amount: float) -> Event[None]:
        """Take *amount*; an event that succeeds once enough is there.

        Raises:
            CapacityExceeded: *amount* is more than the capacity.
        """
        event = self._event(self._check_amount(amount, "get"), self._get_cbs)
        return self._submit(event, self.get_queue, False)

    def _do_put(self, event: Event[Any]) -> bool:
        amount = event._data
        if self._capacity - self._amount >= amount:
            self._level_changing()
            self._amount += amount
            self._done(event, None, True)
            return True
        return False

    def _do_get(self, event: Event[Any]) -> bool:
        amount = event._data
        if self._amount >= amount:
            self._level_changing()
            self._amount -= amount
            self._done(event, None, False)
            return True
        return False


class Store(_PutGetResource, Generic[T]):
    """A FIFO buffer of Python objects with an optional *capacity*.

    ``put(item)`` waits while the store is full; ``get()`` waits while it is
    empty and succeeds with the oldest item.
    """

    __slots__ = ("items",)

    def __init__(self, sim: Sim, capacity: float = _INF, *, monitor: bool | str = False) -> None:
        super().__init__(sim, capacity)
        self.items: list[T] = []
        if monitor is not False:
            self.monitor(_monitor_name(monitor, type(self).__name__))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} items={len(self.items)} capacity={self._capacity}>"

    def _level(self) -> float:
        return len(self.items)

    def monitor(self, name: str | None = None) -> StoreMonitor:
        """Record the number of items and of waiting gets and puts over time, from now on.

        ``Store(sim, ..., monitor=True)`` does the same at creation (and so for
        FilterStore and PriorityStore). Asked again, it returns the same
        series. They start at ``sim.now`` and get a point at every instant at
        which the number of items or a queue changes.

        Args:
            name: The series are ``NAME.items``, ``NAME.getters`` and
                ``NAME.putters``. Default: ``store-N`` (the class name, lower case).

        Raises:
            ConfigError: *name* is taken on this Sim, or the store is
                monitored already under another name.
        """
        group_name = _monitor_group_name(self, self._monitor, name, self.sim)
        if group_name is None:
            return cast("StoreMonitor", self._monitor)
        group = StoreMonitor(self.sim, group_name, items=len(self.items),
                             getters=len(self.get_queue), putters=len(self.put_queue))
        self._start_recording(group, _RecordingPutGet)
        return group

    def put(self, item: T) -> Event[None]:
        """Add *item*; an event that succeeds once there is room."""
        # Inlines _event and _submit: one put per message in store models.
        event: Event[None] = _new(Event)
        event.sim = self.sim
        event._value = PENDING
        event._ok = True
        event._waiter = None
        event._cbs = self._put_cbs
        event._owner = self
        event._data = item
        if self.put_queue:
            return self._submit(event, self.put_queue, True)
        # SimPy appends, then tries the head: this put. Inlines _do_put (a
        # new event has no queueing time to count).
        items = self.items
        level = len(items)
        sim = self.sim
        if level < self._capacity:
            now = sim.now
            self._larea += level * (now - self._last)
            self._last = now
            items.append(item)
            if level >= self._lmax:
                self._lmax = level + 1
            self._puts += 1
            event._value = None
            sim._now_append(event)
        else:
            self.put_queue.append(event)
            self._waiting[event] = sim.now
        return event

    def get(self) -> Event[T]:
        """An event that succeeds with the next item once there is one."""
        event: Event[T] = _new(Event)
        event.sim = self.sim
        event._value = PENDING
        event._ok = True
        event._waiter = None
        event._cbs = self._get_cbs
        event._owner = self
        event._data = None
        if self.get_queue:
            return self._submit(event, self.get_queue, False)
        # SimPy appends, then tries the head: this get. Inlines _do_get.
        items = self.items
        sim = self.sim
        if items:
            now = sim.now
            self._larea += len(items) * (now - self._last)
            self._last = now
            self._gets += 1
            event._value = items.pop(0)
            sim._now_append(event)
        else:
            self.get_queue.append(event)
            self._waiting[event] = sim.now
        return event

    def _do_put(self, event: Event[Any]) -> bool:
        items = self.items
        level = len(items)
        if level < self._capacity:
            # Inlines _level_changing and _done (puts and level statistics).
            sim = self.sim
            now = sim.now
            self._larea += level * (now - self._last)
            self._last = now
            items.append(event._data)
            if level >= self._lmax:
                self._lmax = level + 1
            self._puts += 1
            if self._waiting:
                queued = self._waiting.pop(event, None)
                if queued is not None:
                    self._pwait += now - queued
            event._value = None
            sim._now_append(event)
        return False

    def _do_get(self, event: Event[Any]) -> bool:
        items = self.items
        if items:
            # Inlines _level_changing and _done (gets and level statistics).
            sim = self.sim
            now = sim.now
            self._larea += len(items) * (now - self._last)
            self._last = now
            self._gets += 1
            if self._waiting:
                queued = self._waiting.pop(event, None)
                if queued is not None:
                    self._gwait += now - queued
            event._value = items.pop(0)
            sim._now_append(event)
        return False


class FilterStore(Store[T]):
    """A store whose ``get(filter)`` takes the oldest item the filter accepts.

    Every waiting get is tried when an item arrives, in order.
    """

    __slots__ = ()

    def get(self, filter: Callable[[T], bool] | None = None) -> Event[T]:
        """An event that succeeds with the oldest item for which *filter* is true."""
        if filter is not None and not callable(filter):
            raise ConfigError(f"FilterStore.get(filter=...): expected a callable, got {filter!r}")
        return self._submit(self._event(filter, self._get_cbs), self.get_queue, False)

    def _do_get(self, event: Event[Any]) -> bool:
        accept = event._data
        items = self.items
        for index, item in enumerate(items):
            if accept is None or accept(item):
                self._level_changing()
                del items[index]
                self._done(event, item, False)
                break
        return True


class PriorityItem(NamedTuple):
    """An item of a :class:`PriorityStore`: compared by *priority* only (lower first)."""

    priority: Any
    item: Any

    def __lt__(self, other: tuple[Any, ...]) -> bool:
        return bool(self.priority < other[0])


class PriorityStore(Store[T]):
    """A store whose ``get()`` returns the item with the lowest priority first.

    Items must be orderable; wrap them as :class:`PriorityItem` to order by a
    separate priority.
    """

    __slots__ = ()

    # Store's put and get inline Store's _do_put and _do_get: take the generic path.
    def put(self, item: T) -> Event[None]:
        """Add *item*; an event that succeeds once there is room."""
        return self._submit(self._event(item, self._put_cbs), self.put_queue, True)

    def get(self) -> Event[T]:
        """An event that succeeds with the item of the lowest priority once there is one."""
        return self._submit(self._event(None, self._get_cbs), self.get_queue, False)

    def _do_put(self, event: Event[Any]) -> bool:
        if len(self.items) < self._capacity:
            self._level_changing()
            heappush(cast("list[Any]", self.items), event._data)
            self._done(event, None, True)
        return False

    def _do_get(self, event: Event[Any]) -> bool:
        if self.items:
            self._level_changing()
            self._done(event, heappop(cast("list[Any]", self.items)), False)
        return False


# ---------------------------------------------------------------------------
# Recording subclasses: what a monitored object's class becomes (see monitor()).
#
# Every change of state is made inside a call they wrap (request, release,
# put, get, cancel), or completes an event of the resource (a grant, a put, a
# get), or is the end of a `with res.request()` block, which the kernel inlines
# and which schedules the release marker. Completed events and the marker are
# processed at the same instant and run a wrapped callback. Recording after
# each of those gives the state at the end of every instant at which it
# changed, whatever the order inside the instant.


class _RecordingResource(Resource):
    """A Resource (or subclass) that records utilisation and queue length."""

    __slots__ = ()
    _monitor: ResourceMonitor

    def _record(self) -> None:
        # A series never holds the same value twice in a row, so an unchanged
        # value is no change whatever the time: skip the call (most records).
        monitor = self._monitor
        series = monitor.utilisation
        value: float = len(self.users) / self._capacity
        if value != series.values[-1]:
            series._set(self.sim.now, value)
        series = monitor.queue
        value = len(self.queue)
        if value != series.values[-1]:
            series._set(self.sim.now, value)

    def _record_event(self, _event: Event[Any]) -> None:
        self._record()

    def request(self) -> Event[None]:
        request = super().request()
        self._record()
        return request

    def _grant_next(self, release: Event[Any]) -> None:
        super()._grant_next(release)
        self._record()

    def _set_capacity(self, value: object) -> None:
        super()._set_capacity(value)
        self._record()

    def _exit_request(self, request: Event[Any], exc_type: object,
                      release: Event[None] | None = None) -> Event[None]:
        release = super()._exit_request(request, exc_type, release)
        self._record()
        return release


class _RecordingPriorityResource(_RecordingResource, PriorityResource):
    """A PriorityResource or PreemptiveResource that records (their request takes a priority)."""

    __slots__ = ()

    def request(self, priority: float = 0, preempt: bool = True) -> Event[None]:
        request = super(_RecordingResource, self).request(priority, preempt)
        self._record()
        return request


class _RecordingPutGet(_PutGetResource):
    """A Container, Store, FilterStore or PriorityStore that records its level and queues.

    The level is the container's amount or the store's number of items (a
    ``level`` or an ``items`` series); put and get are the class's own, whose
    signatures differ (an amount, an item, a filter), so they pass on what
    they are given.
    """

    __slots__ = ()
    _monitor: ContainerMonitor | StoreMonitor

    def _record(self) -> None:
        # Unchanged values skip the call, as for a resource above.
        monitor, now = self._monitor, self.sim.now
        series = monitor.level if isinstance(monitor, ContainerMonitor) else monitor.items
        value = self._level()
        if value != series.values[-1]:
            series._set(now, value)
        series = monitor.getters
        value = len(self.get_queue)
        if value != series.values[-1]:
            series._set(now, value)
        series = monitor.putters
        value = len(self.put_queue)
        if value != series.values[-1]:
            series._set(now, value)

    def put(self, *args: Any, **kwargs: Any) -> Event[Any]:
        # Container.put or Store.put (the base class declares neither).
        event: Event[Any] = cast("Any", super()).put(*args, **kwargs)
        self._record()
        return event

    def get(self, *args: Any, **kwargs: Any) -> Event[Any]:
        event: Event[Any] = cast("Any", super()).get(*args, **kwargs)
        self._record()
        return event

    def _trigger_put(self, event: Event[Any] | None) -> None:
        super()._trigger_put(event)
        self._record()

    def _trigger_get(self, event: Event[Any] | None) -> None:
        super()._trigger_get(event)
        self._record()

    def _exit_request(self, event: Event[Any], exc_type: object) -> None:
        super()._exit_request(event, exc_type)
        self._record()


# With the compiled kernel, its fast paths for Resource (request, _grant_next) and Store
# (put, get, _trigger_get, _trigger_put); a no-op otherwise (see simulacra.core).
_accelerate(sys.modules[__name__])
