"""Monitors of resources, containers and stores; Monitor, Tally, MonitorSet and the monitor file.

The oracles:

* SimPy 4.1.2, instrumented by hand: random models (``tests/core/_models.py``)
  run on SimPy in a ``step()`` loop that reads the state of every resource,
  container and store after every event; the series it gives (the state at
  the end of each instant) must equal what simulacra's monitors recorded, point
  for point, through ``run()`` and with monitoring turned on mid-run. An M/M/c
  queue with the same arrival and service draws is checked the same way.
* Brute force: Hypothesis-generated request/release scenarios, observed after
  every ``step()``, integrated interval by interval.
* Hand computation, in each scenario's docstring.
* Trace digests pinned before monitors existed: monitors off and on leave them
  unchanged.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import simulacra
from simulacra import (
    ConfigError,
    Container,
    ContainerMonitor,
    FilterStore,
    Interrupt,
    Monitor,
    MonitorSet,
    PreemptiveResource,
    PriorityItem,
    PriorityResource,
    PriorityStore,
    Resource,
    ResourceMonitor,
    Sim,
    Store,
    StoreMonitor,
    Tally,
    TraceError,
    monitors,
    read_monitors,
    write_monitors,
)
from simulacra._util import install_hint

CORE_TESTS = Path(__file__).resolve().parents[1] / "core"
if str(CORE_TESTS) not in sys.path:
    sys.path.insert(0, str(CORE_TESTS))

from _models import Ctx, Model, SimPyAdapter, SimulacraAdapter, models  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

COMMON: dict[str, Any] = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}

Series = tuple[list[float], list[float]]


def _series(monitor: Monitor) -> Series:
    return list(monitor.times), list(monitor.values)


class _Oracle:
    """Series built by brute force from observed states: the state at the end of each instant.

    It applies the same rules as a Monitor, but only to states read after whole
    events: a later state at the same time replaces the earlier one, and a
    state equal to the one before it at an earlier time is no change.
    """

    def __init__(self) -> None:
        self.series: dict[str, Series] = {}

    def observe(self, now: float, states: dict[str, float]) -> None:
        for name, value in states.items():
            times, values = self.series.setdefault(name, ([now], [value]))
            if times[-1] == now:
                if len(values) > 1 and values[-2] == value:
                    times.pop()
                    values.pop()
                else:
                    values[-1] = value
            elif values[-1] != value:
                times.append(now)
                values.append(value)


def _integral(series: Series, until: float) -> float:
    times, values = series
    edges = [*times[1:], until]
    return math.fsum(v * (b - a) for a, b, v in zip(times, edges, values, strict=True))


# --------------------------------------------------------------------------- Monitor


def test_monitor_records_a_step_function(sim: Sim) -> None:
    """Level 2 on [0, 1), 5 on [1, 4), 1 on [4, 10): integral 2 + 15 + 6 = 23, mean 2.3."""
    level = Monitor(sim, "level", value=2)

    def change(sim: Sim) -> Any:
        yield sim.delay(1)
        level.record(5)
        yield sim.delay(3)
        level.record(1)
        yield sim.delay(6)

    sim.spawn(change)
    sim.run()
    assert _series(level) == ([0, 1, 4], [2, 5, 1])
    assert level.integral() == 23
    assert level.time_weighted_mean() == 2.3
    assert level.time_weighted_mean(until=4) == 17 / 4
    assert level.time_weighted_mean(until=2.5) == (2 + 5 * 1.5) / 2.5
    assert level.max == 5
    assert level.min == 1
    assert level.value == 1
    assert level.start == 0
    assert len(level) == 3


def test_monitor_same_instant_last_value_wins(sim: Sim) -> None:
    """Three values at t=1: only the last holds (zero-width intervals add nothing).

    0 on [0, 1), 7 on [1, 3): mean 14/3. A value equal to the current one adds no
    point; a change undone within an instant leaves none either.
    """
    mon = Monitor(sim, "m")

    def change(sim: Sim) -> Any:
        mon.record(0)  # no change at all
        yield sim.delay(1)
        mon.record(4)
        mon.record(9)
        mon.record(7)
        yield sim.delay(1)
        mon.record(7)  # unchanged: no point
        mon.record(3)
        mon.record(7)  # undone at t=2: as if nothing happened
        yield sim.delay(1)

    sim.spawn(change)
    sim.run()
    assert _series(mon) == ([0, 1], [0, 7])
    assert mon.integral() == 14
    assert mon.time_weighted_mean() == 14 / 3
    assert mon.max == 7  # values replaced within an instant are not counted


def test_monitor_mean_over_no_time_is_the_value(sim: Sim) -> None:
    mon = Monitor(sim, "m", value=3)
    mon.record(4)
    assert mon.time_weighted_mean() == 4
    assert mon.integral() == 0


def test_monitor_until_must_lie_between_start_and_now(sim: Sim) -> None:
    sim.run(until=2)
    mon = Monitor(sim, "m")
    sim.run(until=5)
    with pytest.raises(ConfigError, match=r"until=\.\.\.\): expected a time from the start 2"):
        mon.time_weighted_mean(until=1)
    with pytest.raises(ConfigError, match="to now 5"):
        mon.time_weighted_mean(until=6)
    with pytest.raises(ConfigError, match="got 'x'"):
        mon.integral(until="x")  # type: ignore[arg-type]


def test_monitor_reset_starts_over_from_the_current_value(sim: Sim) -> None:
    """After a warm-up: 1 on [0, 5) forgotten; 1 on [5, 6), 3 on [6, 10): mean 13/5."""
    mon = Monitor(sim, "m")

    def change(sim: Sim) -> Any:
        mon.record(1)
        yield sim.delay(5)
        mon.reset()
        yield sim.delay(1)
        mon.record(3)
        yield sim.delay(4)

    sim.spawn(change)
    sim.run()
    assert _series(mon) == ([5, 6], [1, 3])
    assert mon.time_weighted_mean() == 13 / 5


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": ""}, r"Monitor\(name=\.\.\.\): expected a non-empty str, got ''"),
    ({"name": "m", "kind": "speed"}, r"Monitor\(kind=\.\.\.\): expected one of \('queue'"),
    ({"name": "m", "value": math.nan}, r"Monitor\(value=\.\.\.\): expected a finite number"),
    ({"name": "m", "value": True}, "got True"),
])
def test_monitor_rejects_bad_arguments(sim: Sim, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Monitor(sim, **kwargs)


def test_monitor_rejects_bad_values_and_sims(sim: Sim) -> None:
    mon = Monitor(sim, "m")
    with pytest.raises(ConfigError, match=r"Monitor 'm': record\(value\): expected a finite "
                                          r"number, got inf"):
        mon.record(math.inf)
    with pytest.raises(ConfigError, match=r"Monitor\(sim, \.\.\.\): expected a Sim, got str"):
        Monitor("sim", "m")  # type: ignore[arg-type]


def test_names_are_unique_per_sim(sim: Sim) -> None:
    Monitor(sim, "wait")
    with pytest.raises(ConfigError, match="monitor name 'wait' is taken"):
        Tally(sim, "wait")
    Tally(Sim(seed=1), "wait")  # another Sim, another namespace


def test_a_taken_resource_name_leaves_nothing_behind(sim: Sim) -> None:
    """The store's third series would clash: none of its series is made, and it stays plain."""
    Container(sim, monitor="pump")
    with pytest.raises(ConfigError, match=r"monitor name 'pump': its series pump.getters "
                                          r"would take the name of <Monitor 'pump.getters'"):
        Store(sim, monitor="pump")
    store: Store[int] = Store(sim)
    with pytest.raises(ConfigError, match=r"pump\.getters"):
        store.monitor("pump")
    assert type(store) is Store
    assert list(monitors(sim)) == ["pump.level", "pump.getters", "pump.putters"]
    assert store.monitor("tank").name == "tank"


@settings(max_examples=200, **COMMON)
@given(st.lists(st.tuples(st.sampled_from((0, 0, 0.5, 1, 2.25)),
                          st.sampled_from((0, 1, 2, 3, 0.5))), max_size=40),
       st.sampled_from((0, 0.25, 3)))
def test_monitor_mean_equals_the_brute_force_integral(changes: list[tuple[float, float]],
                                                      tail: float) -> None:
    """Random changes, many at the same instant: the running integral is the interval sum."""
    sim = Sim(seed=0)
    mon = Monitor(sim, "m")
    oracle = _Oracle()
    oracle.observe(0.0, {"m": 0.0})

    def change(sim: Sim) -> Any:
        for gap, value in changes:
            if gap:
                yield sim.delay(gap)
            mon.record(value)
            oracle.observe(sim.now, {"m": value})
        yield sim.delay(tail)

    sim.spawn(change)
    sim.run()
    assert _series(mon) == oracle.series["m"]
    assert mon.integral() == pytest.approx(_integral(oracle.series["m"], sim.now), rel=1e-12)
    if sim.now > 0:
        assert mon.time_weighted_mean() == pytest.approx(mon.integral() / sim.now, rel=1e-15)
        half = sim.now / 2
        times, values = oracle.series["m"]
        cut = [(t, v) for t, v in zip(times, values, strict=True) if t <= half]
        prefix = ([t for t, _ in cut], [v for _, v in cut])
        assert mon.integral(until=half) == pytest.approx(_integral(prefix, half), rel=1e-12)


# --------------------------------------------------------------------------- resources by hand


def _customer(sim: Sim, res: Resource, arrive: float, service: float) -> Any:
    yield sim.delay(arrive)
    with res.request() as req:
        yield req
        yield sim.delay(service)


def test_resource_three_customers_at_zero(sim: Sim) -> None:
    """Capacity 1; customers at 0, 0, 0 with service 1, 2, 3 (FIFO).

    Busy on [0, 6): utilisation 1 from 0, 0 from 6. Waiting: 2 on [0, 1), 1 on
    [1, 3), 0 from 3: mean over [0, 6] (2 + 2) / 6, as statistics() says.
    """
    res = Resource(sim, capacity=1, monitor="bank")
    for service in (1, 2, 3):
        sim.spawn(_customer, res, 0, service)
    sim.run()
    mon = res.monitor()
    assert isinstance(mon, ResourceMonitor)
    assert mon.name == "bank"
    assert _series(mon.utilisation) == ([0, 6], [1.0, 0.0])
    assert _series(mon.queue) == ([0, 1, 3], [2, 1, 0])
    assert mon.queue.time_weighted_mean() == 4 / 6
    assert mon.utilisation.time_weighted_mean() == 1.0
    stats = res.statistics()
    assert mon.queue.time_weighted_mean() == pytest.approx(stats.mean_queue_length)
    assert mon.utilisation.time_weighted_mean() == pytest.approx(stats.utilisation)
    assert list(mon) == ["bank.utilisation", "bank.queue"]
    assert mon.utilisation.kind == "utilisation"
    assert mon.queue.kind == "queue"


def test_resource_two_slots_with_reneging_and_explicit_release(sim: Sim) -> None:
    """Capacity 2. A holds [0, 4), B holds [1, 3) and releases explicitly, C waits at 2
    and reneges at 2.5, D arrives at 2.5 and waits until B's release at 3.

    Users: 1 on [0, 1), 2 on [1, 4) (D takes B's slot at 3), 1 on [4, 6) (D until 6).
    Queue: 1 on [2, 3) (C until 2.5, then D from 2.5), 0 from 3.
    """
    res = Resource(sim, capacity=2, monitor=True)

    def hold(sim: Sim, at: float, until: float) -> Any:
        yield sim.delay(at)
        req = res.request()
        yield req
        yield sim.delay(until - sim.now)
        yield res.release(req)

    def renege(sim: Sim) -> Any:
        yield sim.delay(2)
        req = res.request()
        yield req | sim.delay(0.5)
        res.release(req)  # still waiting: cancels

    sim.spawn(hold, 0, 4)
    sim.spawn(hold, 1, 3)
    sim.spawn(renege)
    sim.spawn(hold, 2.5, 6)
    sim.run()
    mon = res.monitor()
    assert mon.name == "resource-1"
    assert _series(mon.utilisation) == ([0, 1, 4, 6], [0.5, 1.0, 0.5, 0.0])
    assert _series(mon.queue) == ([0, 2, 3], [0, 1, 0])
    assert mon.utilisation.time_weighted_mean() == (0.5 + 3 + 1) / 6


def test_preemptive_resource_series(sim: Sim) -> None:
    """Capacity 1: low (priority 1) from 0, preempted at 1 by high (priority 0) until 3.

    The slot is busy on [0, 3) without a gap; the low user leaves at the
    preemption and nobody waits (the queue never has a request at the end of an instant).
    """
    res = PreemptiveResource(sim, capacity=1, monitor="x")
    log: list[Any] = []

    def user(sim: Sim, at: float, priority: int, hold: float) -> Any:
        yield sim.delay(at)
        with res.request(priority=priority) as req:
            yield req
            try:
                yield sim.delay(hold)
            except Interrupt as intr:
                log.append((sim.now, intr.cause.usage_since))

    sim.spawn(user, 0, 1, 5)
    sim.spawn(user, 1, 0, 2)
    sim.run()
    assert log == [(1, 0)]
    mon = res.monitor()
    assert _series(mon.utilisation) == ([0, 3], [1.0, 0.0])
    assert _series(mon.queue) == ([0], [0])


def test_container_series(sim: Sim) -> None:
    """Capacity 10, init 5. At 1 a get of 8 waits; at 2 a put of 4 (level 9) lets it
    through (level 1); at 3 a put of 12 is refused (more than the capacity).

    Level: 5 on [0, 2), 1 from 2 (the put and the get it unblocked, one instant).
    Getters: 1 on [1, 2).
    """
    tank = Container(sim, capacity=10, init=5, monitor="tank")

    def getter(sim: Sim) -> Any:
        yield sim.delay(1)
        yield tank.get(8)

    def putter(sim: Sim) -> Any:
        yield sim.delay(2)
        yield tank.put(4)

    sim.spawn(getter)
    sim.spawn(putter)
    sim.run()
    mon = tank.monitor()
    assert isinstance(mon, ContainerMonitor)
    assert _series(mon.level) == ([0, 2], [5, 1])
    assert _series(mon.getters) == ([0, 1, 2], [0, 1, 0])
    assert _series(mon.putters) == ([0], [0])
    assert mon.level.kind == "level"
    assert mon.level.time_weighted_mean() == pytest.approx(tank.statistics().mean_level)


def test_store_series(sim: Sim) -> None:
    """Capacity 1. Puts at 0, 0 (the second waits), gets at 1 and 3 and 4 (the last waits).

    Items: 1 on [0, 3) (the get at 1 takes one, the waiting put refills it at
    once), 0 from 3. Putters: 1 on [0, 1). Getters: 1 from 4 (never served).
    """
    box: Store[int] = Store(sim, capacity=1, monitor="box")

    def put(sim: Sim) -> Any:
        yield box.put(1)

    def get(sim: Sim, at: float) -> Any:
        yield sim.delay(at)
        yield box.get()

    sim.spawn(put)
    sim.spawn(put)
    for at in (1, 3, 4):
        sim.spawn(get, at)
    sim.run()
    mon = box.monitor()
    assert isinstance(mon, StoreMonitor)
    assert _series(mon.items) == ([0, 3], [1, 0])
    assert _series(mon.putters) == ([0, 1], [1, 0])
    assert _series(mon.getters) == ([0, 4], [0, 1])
    assert mon.items.kind == "count"


def test_filter_and_priority_store_series(sim: Sim) -> None:
    """A FilterStore get for an even item waits from 0 until the put of 2 at 2.
    A PriorityStore of capacity 2 holds 2 items from 0, and a get at 1 takes the
    most urgent: 1 item from 1.
    """
    fbox: FilterStore[int] = FilterStore(sim, monitor=True)
    pbox: PriorityStore[PriorityItem] = PriorityStore(sim, capacity=2, monitor=True)
    got: list[Any] = []

    def even(sim: Sim) -> Any:
        got.append((yield fbox.get(lambda x: x % 2 == 0)))

    def feed(sim: Sim) -> Any:
        yield fbox.put(1)
        yield pbox.put(PriorityItem(2, "later"))
        yield pbox.put(PriorityItem(0, "first"))
        yield sim.delay(1)
        got.append((yield pbox.get()).item)
        yield sim.delay(1)
        yield fbox.put(2)

    sim.spawn(even)
    sim.spawn(feed)
    sim.run()
    assert got == ["first", 2]
    fmon = fbox.monitor()
    pmon = pbox.monitor()
    assert (fmon.name, pmon.name) == ("filterstore-1", "prioritystore-2")
    assert _series(fmon.getters) == ([0, 2], [1, 0])
    assert _series(fmon.items) == ([0], [1])  # 1 from 0; the 2 is taken as it arrives
    assert _series(pmon.items) == ([0, 1], [2, 1])


def test_monitoring_on_between_a_release_and_its_processing(sim: Sim) -> None:
    """Capacity 1: A holds from 0 and releases at 1 (explicitly), B waits from 0.

    A turns monitoring on right after release(), before the release event is
    processed (it grants B, still at 1). Recording starts at 1 with the slot free
    and B waiting; by the end of that instant B holds it, until 3.
    """
    res = Resource(sim, capacity=1)

    def a(sim: Sim) -> Any:
        req = res.request()
        yield req
        yield sim.delay(1)
        release = res.release(req)
        res.monitor("r")
        yield release

    sim.spawn(a)
    sim.spawn(_customer, res, 0, 2)
    sim.run()
    mon = res.monitor()
    assert _series(mon.utilisation) == ([1, 3], [1.0, 0.0])
    assert _series(mon.queue) == ([1], [0])


def test_monitoring_on_between_a_get_and_its_processing(sim: Sim) -> None:
    """A full Store of capacity 1; a put waits from 0 (with a patience: `put | delay`).

    At 1 a getter takes the item and turns monitoring on before its get is
    processed; processing it lets the waiting put in, still at 1. Recording starts
    at 1 with no item and one putter; by the end of that instant: one item, no putter.
    """
    box: Store[str] = Store(sim, capacity=1)

    def patient_put(sim: Sim) -> Any:
        yield box.put("first")
        yield box.put("second") | sim.delay(10)

    def getter(sim: Sim) -> Any:
        yield sim.delay(1)
        get = box.get()
        box.monitor("box")
        assert (yield get) == "first"

    sim.spawn(patient_put)
    sim.spawn(getter)
    sim.run()
    mon = box.monitor()
    assert box.items == ["second"]
    assert _series(mon.items) == ([1], [1])
    assert _series(mon.putters) == ([1], [0])


def test_cancelled_waits_are_recorded(sim: Sim) -> None:
    """A get that gives up after 1 (``with store.get() as get``) leaves the queue at 1;
    so does a container get; a request whose generator is closed at 2 leaves at 2."""
    box: Store[int] = Store(sim, monitor="box")
    tank = Container(sim, capacity=10, monitor="tank")
    res = Resource(sim, capacity=1, monitor="res")

    def impatient(sim: Sim, event: Any) -> Any:
        with event as get:
            yield get | sim.delay(1)

    def waiting() -> Any:
        with res.request() as req:
            yield req

    sim.spawn(impatient, box.get())
    sim.spawn(impatient, tank.get(5))
    sim.spawn(_customer, res, 0, 5)
    sim.run(until=1)
    queued = waiting()
    next(queued)  # asks at 1, outside any process; the slot is taken
    sim.run(until=2)
    queued.close()  # GeneratorExit: the request is cancelled
    sim.run()
    assert _series(box.monitor().getters) == ([0, 1], [1, 0])
    assert _series(tank.monitor().getters) == ([0, 1], [1, 0])
    assert _series(res.monitor().queue) == ([0, 1, 2], [0, 1, 0])


# --------------------------------------------------------------------------- the API


def test_monitor_returns_the_same_series_and_refuses_a_second_name(sim: Sim) -> None:
    res = Resource(sim, capacity=2)
    first = res.monitor("r")
    assert res.monitor() is first
    assert res.monitor("r") is first
    with pytest.raises(ConfigError, match=r"monitor\(name='s'\): .* is monitored already, as 'r'"):
        res.monitor("s")
    with pytest.raises(ConfigError, match=r"Resource.monitor\(name=\.\.\.\): expected a "
                                          r"non-empty str or None, got ''"):
        Resource(sim).monitor("")


@pytest.mark.parametrize("make", [
    lambda sim, m: Resource(sim, monitor=m),
    lambda sim, m: PriorityResource(sim, monitor=m),
    lambda sim, m: Container(sim, monitor=m),
    lambda sim, m: Store(sim, monitor=m),
    lambda sim, m: FilterStore(sim, monitor=m),
])
@pytest.mark.parametrize("bad", [None, 1, "", ["x"]])
def test_monitor_argument_is_checked(sim: Sim, make: Callable[[Sim, Any], Any],
                                     bad: object) -> None:
    with pytest.raises(ConfigError, match=r"\(monitor=\.\.\.\): expected True, False or a "
                                          r"name \(a non-empty str\), got"):
        make(sim, bad)


def test_unmonitored_objects_keep_their_plain_class(sim: Sim) -> None:
    """Off is free: no recording subclass, no per-operation check; on, the class is swapped."""
    objects = [Resource(sim), PriorityResource(sim), PreemptiveResource(sim), Container(sim),
               Store(sim), FilterStore(sim), PriorityStore(sim)]
    plain = [type(obj) for obj in objects]
    assert plain == [Resource, PriorityResource, PreemptiveResource, Container, Store,
                     FilterStore, PriorityStore]
    for obj, cls in zip(objects, plain, strict=True):
        obj.monitor()
        assert type(obj) is not cls
        assert isinstance(obj, cls)
        assert type(obj).__name__ == cls.__name__
        assert repr(obj).startswith(f"<{cls.__name__} ")
    assert len(monitors(sim).series) == 3 * 2 + 4 * 3


def test_a_subclass_keeps_its_overrides_when_monitored(sim: Sim) -> None:
    class Counting(Resource):
        __slots__ = ("asked",)

        def __init__(self, sim: Sim, capacity: int) -> None:
            self.asked = 0
            super().__init__(sim, capacity, monitor="counted")

        def request(self) -> Any:
            self.asked += 1
            return super().request()

    res = Counting(sim, 1)
    for service in (1, 1):
        sim.spawn(_customer, res, 0, service)
    sim.run()
    assert res.asked == 2
    assert isinstance(res, Counting)
    assert _series(res.monitor().queue) == ([0, 1], [1, 0])


def test_monitors_of_a_sim_are_collected_in_order(sim: Sim) -> None:
    res = Resource(sim, monitor="tellers")
    waits = Tally(sim, "wait")
    level = Monitor(sim, "stock", kind="level", value=4)
    store: Store[int] = Store(sim, monitor=True)
    found = monitors(sim)
    assert monitors(sim) is found
    assert list(found) == ["tellers.utilisation", "tellers.queue", "stock", "store-1.items",
                           "store-1.getters", "store-1.putters", "wait"]
    assert found["wait"] is waits
    assert found["stock"] is level
    assert found.series["tellers.queue"] is res.monitor().queue
    assert "store-1.items" in found
    assert store.monitor().items is found["store-1.items"]
    assert len(found) == 7
    with pytest.raises(KeyError, match="no monitor or tally named 'nope'"):
        found["nope"]


def test_reset_of_a_set_resets_everything(sim: Sim) -> None:
    res = Resource(sim, monitor="r")
    waits = Tally(sim, "w")

    def warmup(sim: Sim) -> Any:
        with res.request() as req:
            yield req
            waits.record(1.5)
            yield sim.delay(2)
        yield sim.delay(1)
        monitors(sim).reset()
        with res.request() as req:
            yield req
            waits.record(0.5)
            yield sim.delay(3)

    sim.spawn(warmup)
    sim.run()
    assert _series(res.monitor().utilisation) == ([3, 6], [1.0, 0.0])
    assert waits.samples == [0.5]


def test_monitor_set_refuses_other_things_and_duplicates(sim: Sim) -> None:
    with pytest.raises(ConfigError, match="expected a Monitor, Tally or MonitorSet, got int"):
        MonitorSet(3)  # type: ignore[arg-type]
    a = Monitor(sim, "a")
    other = Monitor(Sim(seed=0), "a")
    collected = MonitorSet(a, a)
    assert len(collected) == 1
    with pytest.raises(ConfigError, match="monitor name 'a' is taken"):
        collected.add(other)


# --------------------------------------------------------------------------- Tally


def test_tally_statistics_match_the_statistics_module(sim: Sim) -> None:
    data = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    waits = Tally(sim, "wait")
    for x in data:
        waits.record(x)
    assert waits.count == len(waits) == 8
    assert waits.mean() == statistics.fmean(data)
    assert waits.std() == pytest.approx(statistics.stdev(data))
    assert (waits.min, waits.max) == (1.0, 9.0)
    quartiles = statistics.quantiles(data, n=4, method="inclusive")
    assert [waits.quantile(q) for q in (0.25, 0.5, 0.75)] == pytest.approx(quartiles)
    assert (waits.quantile(0), waits.quantile(1)) == (1.0, 9.0)
    with pytest.raises(ConfigError, match=r"quantile\(q\): expected a number from 0 to 1"):
        waits.quantile(1.5)
    with pytest.raises(ConfigError, match=r"record\(value\): expected a finite number"):
        waits.record(math.nan)


def test_empty_tally_statistics_are_nan(sim: Sim) -> None:
    waits = Tally(sim, "w")
    assert all(math.isnan(x) for x in (waits.mean(), waits.std(), waits.quantile(0.5),
                                       waits.min, waits.max))
    assert waits.histogram(bins=2) == ([0.0, 0.5, 1.0], [0, 0])


@settings(max_examples=150, **COMMON)
@given(st.lists(st.sampled_from((0.0, 0.1, 0.2, 0.3, 1.0, 2.5, 7.0, 7.0)), max_size=30),
       st.integers(1, 9),
       st.sampled_from((None, (0.0, 1.0), (0.1, 7.0), (-1.0, 10.0))))
def test_tally_histogram_matches_numpy(data: list[float], bins: int,
                                       span: tuple[float, float] | None) -> None:
    np = pytest.importorskip("numpy")
    tally = Tally(Sim(seed=0), "x")
    for x in data:
        tally.record(x)
    edges, counts = tally.histogram(bins, range=span)
    if data or span is not None:
        if span is None and data and min(data) == max(data):
            span = (data[0] - 0.5, data[0] + 0.5)
        theirs, their_edges = np.histogram(data, bins=bins, range=span)
        assert counts == theirs.tolist()
        assert edges == pytest.approx(their_edges.tolist())
    if data:
        assert tally.quantile(0.3) == pytest.approx(float(np.quantile(data, 0.3)))


def test_tally_histogram_refuses_bad_bins_and_ranges(sim: Sim) -> None:
    tally = Tally(sim, "x")
    with pytest.raises(ConfigError, match=r"histogram\(bins=\.\.\.\): expected an int >= 1"):
        tally.histogram(0)
    with pytest.raises(ConfigError, match=r"histogram\(range=\.\.\.\): expected \(low, high\)"):
        tally.histogram(3, range=(2.0, 1.0))


# --------------------------------------------------------------------------- polars


def test_to_polars(sim: Sim) -> None:
    pl = pytest.importorskip("polars")
    mon = Monitor(sim, "m", value=1)
    tally = Tally(sim, "t")
    tally.record(2)
    frame = mon.to_polars()
    assert frame.columns == ["time", "value"]
    assert frame.schema == {"time": pl.Float64, "value": pl.Float64}
    assert frame.rows() == [(0.0, 1.0)]
    assert tally.to_polars().rows() == [(2.0,)]


def test_to_polars_without_polars_names_the_extra(sim: Sim,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(ConfigError, match=r"Monitor.to_polars\(\) needs polars, which is not "
                                          r"installed: " + re.escape(install_hint("parallel"))):
        Monitor(sim, "m").to_polars()
    with pytest.raises(ConfigError, match=re.escape(install_hint("parallel"))):
        Tally(sim, "t").to_polars()


# --------------------------------------------------------------------------- the monitor file


def test_monitor_file_format(sim: Sim, tmp_path: Path) -> None:
    """The format the report reads, exactly; the last point is the state when written."""
    res = Resource(sim, capacity=1, monitor="bank")
    waits = Tally(sim, "wait")
    for service in (1, 2, 3):
        sim.spawn(_customer, res, 0, service)
    sim.run(until=5)
    waits.record(1)
    waits.record(3)
    path = write_monitors(tmp_path / "monitors.json", sim)
    data = json.loads(path.read_text())
    assert data == {
        "format": "simulacra.monitors.v1",
        "series": {
            "bank.utilisation": {"kind": "utilisation", "t": [0.0, 5.0], "v": [1.0, 1.0],
                                 "time_weighted_mean": 1.0},
            "bank.queue": {"kind": "queue", "t": [0.0, 1.0, 3.0, 5.0], "v": [2.0, 1.0, 0.0, 0.0],
                           "time_weighted_mean": 0.8},
        },
        "samples": {"wait": [1.0, 3.0]},
    }
    assert all(type(x) is float for s in data["series"].values() for x in s["t"] + s["v"])
    assert read_monitors(path) == data
    assert not list(tmp_path.glob(".*partial"))


def test_write_monitors_takes_sets_monitors_and_tallies(tmp_path: Path) -> None:
    """Monitors of two Sims in one file (names must differ); a resource's own set alone."""
    first, second = Sim(seed=0), Sim(seed=1)
    a = Resource(first, monitor="a")
    b = Monitor(second, "b")
    tally = Tally(second, "t")
    data = json.loads(write_monitors(tmp_path / "m.json", a.monitor(), b, tally).read_text())
    assert list(data["series"]) == ["a.utilisation", "a.queue", "b"]
    assert list(data["samples"]) == ["t"]
    a.monitor().save(tmp_path / "a.json")
    assert list(read_monitors(tmp_path / "a.json")["series"]) == ["a.utilisation", "a.queue"]
    with pytest.raises(ConfigError, match="give at least one"):
        write_monitors(tmp_path / "none.json")


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "not a monitor file \\(not JSON"),
    ("[]", "not a monitor file \\(no 'format' field\\)"),
    ('{"format": "simulacra.monitors.v9"}', "format 'simulacra.monitors.v9' is not one this "
                                             "version reads \\('simulacra.monitors.v1'\\)"),
    ('{"format": "simulacra.monitors.v1", "series": {}}', "field 'samples' is missing"),
    ('{"format": "simulacra.monitors.v1", "samples": {}, "series": {"q": {"kind": "x"}}}',
     "series\\['q'\\]: kind must be one of"),
    ('{"format": "simulacra.monitors.v1", "samples": {}, "series": {"q": {"kind": "queue", '
     '"t": [0, 1], "v": [0], "time_weighted_mean": 0}}}', "'t' has 2 points but 'v' has 1"),
    ('{"format": "simulacra.monitors.v1", "samples": {}, "series": {"q": {"kind": "queue", '
     '"t": [1, 0], "v": [0, 1], "time_weighted_mean": 0}}}', "'t' must not decrease"),
    ('{"format": "simulacra.monitors.v1", "samples": {"w": [1, "x"]}, "series": {}}',
     "samples\\['w'\\] must be a list of numbers"),
])
def test_read_monitors_names_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        read_monitors(path)


# --------------------------------------------------------------------------- traces


def _scenario(sim: Sim, log: list[Any], monitor: bool) -> None:
    """Every resource kind: renege, explicit release, preemption, containers, stores."""
    kw: dict[str, Any] = {"monitor": True} if monitor else {}
    res = Resource(sim, capacity=2, **kw)
    pres = PriorityResource(sim, capacity=1, **kw)
    xres = PreemptiveResource(sim, capacity=1, **kw)
    tank = Container(sim, capacity=10, init=3, **kw)
    box: Store[int] = Store(sim, capacity=2, **kw)
    fbox: FilterStore[int] = FilterStore(sim, **kw)
    pbox: PriorityStore[Any] = PriorityStore(sim, capacity=3, **kw)
    rng = sim.rng("scenario")

    def customer(sim: Sim, i: int) -> Any:
        yield sim.delay(rng.expovariate(2.0))
        arrived = sim.now
        if i % 3 == 0:
            req = res.request()
            got = yield req | sim.delay(0.4)
            if req in got:
                log.append(("served", i, sim.now - arrived))
                yield sim.delay(rng.expovariate(1.0))
                yield res.release(req)
            else:
                res.release(req)
                log.append(("reneged", i, sim.now))
        else:
            with res.request() as req:
                yield req
                log.append(("served", i, sim.now - arrived))
                yield sim.delay(rng.expovariate(1.0))
        with pres.request(priority=i % 4) as preq:
            yield preq
            yield sim.delay(0.25)
        try:
            with xres.request(priority=-(i % 5)) as xreq:
                yield xreq
                yield sim.delay(rng.uniform(0.1, 1.0))
        except Interrupt as intr:
            log.append(("preempted", i, sim.now, intr.cause.usage_since))
        yield tank.get(1 + i % 3)
        yield sim.delay(0.1)
        yield tank.put(1 + i % 2)
        yield box.put(i)
        yield fbox.put(i)
        yield pbox.put(PriorityItem(i % 3, i))

    def consumer(sim: Sim) -> Any:
        while True:
            item = yield box.get()
            even = yield fbox.get(lambda x: x % 2 == 0) | sim.delay(2.0)
            pitem = yield pbox.get()
            log.append(("consumed", sim.now, item, len(even), pitem.item))
            yield sim.delay(0.3)

    def refill(sim: Sim) -> Any:
        while True:
            yield sim.delay(1.7)
            yield tank.put(2)

    for i in range(40):
        sim.spawn(customer, i, name=f"customer-{i}")
    sim.spawn(consumer, name="consumer")
    sim.spawn(refill, name="refill")


#: Measured with the commit before monitors existed (ee83f42): the outcome log's
#: SHA-256 untraced, and the trace digests in fifo and keyed ordering.
BEFORE_MONITORS = {
    "plain": ("6cb5155196bfd8c816fd648b6c59030d7b9e4ced0ec4634287ba92f8e87c444a", None),
    "fifo": ("6cb5155196bfd8c816fd648b6c59030d7b9e4ced0ec4634287ba92f8e87c444a",
             "da6f736f9ee4fd8d41d6f2585b234c22dc23b1ee6691818e11d8e5249a03d318"),
    "keyed": ("b32afa2d7e033d9ff3d160287edfa33ea3ee067b50fcf8f3628c670b2e9fcb6b",
              "1af290c107322aebceb82a3cfa135cb948d46fbb45320ff7f0744b6c7f24c071"),
}
SIM_OPTIONS: dict[str, dict[str, Any]] = {
    "plain": {}, "fifo": {"trace": True}, "keyed": {"trace": True, "ordering": "keyed"},
}


@pytest.mark.parametrize("monitor", [False, True], ids=["monitors-off", "monitors-on"])
@pytest.mark.parametrize("mode", sorted(BEFORE_MONITORS))
def test_trace_digests_are_those_from_before_monitors(mode: str, monitor: bool) -> None:
    log: list[Any] = []
    sim = Sim(seed=3, **SIM_OPTIONS[mode])
    _scenario(sim, log, monitor)
    sim.run(until=60)
    assert {kind for kind, *_ in log} == {"served", "reneged", "preempted", "consumed"}
    outcome = hashlib.sha256(repr(log).encode()).hexdigest()
    trace = simulacra.digest(sim) if sim.trace_records is not None else None
    assert (outcome, trace) == BEFORE_MONITORS[mode]
    if monitor:
        assert len(monitors(sim).series) == 3 * 2 + 4 * 3
        changed = [name for name, m in monitors(sim).series.items() if len(m) > 1]
        assert len(changed) == 14  # the rest never change (an unbounded store has no putters)


# --------------------------------------------------------------------------- brute force


@st.composite
def _usages(draw: Any) -> tuple[int, list[tuple[float, float, str, float]]]:
    """A capacity and customers: (arrival gap, hold, how they ask, patience)."""
    capacity = draw(st.integers(1, 3))
    times = st.sampled_from((0, 0, 0.5, 1, 1.5, 3))
    mode = st.sampled_from(("with", "with", "explicit", "renege", "interrupted"))
    customers = draw(st.lists(st.tuples(times, times, mode, times), min_size=1, max_size=14))
    return capacity, customers


def _state(res: Resource) -> dict[str, float]:
    return {"utilisation": len(res.users) / res.capacity, "queue": len(res.queue)}


@settings(max_examples=200, **COMMON)
@given(_usages(), st.sampled_from((None, 0, 0.5, 1, 2.5, 4)),
       st.sampled_from(("plain", "priority")))
def test_resource_means_equal_the_brute_force_integral(
        usage: tuple[int, list[tuple[float, float, str, float]]], enable_at: float | None,
        kind: str) -> None:
    """Random request/release/cancel/interrupt sequences, monitoring on from creation or
    from a random time: every series equals the state read after every event, and the
    time-weighted means equal the interval-by-interval integral of those states."""
    capacity, customers = usage
    sim = Sim(seed=0)
    cls = Resource if kind == "plain" else PriorityResource
    res = cls(sim, capacity=capacity, monitor=enable_at is None)

    def customer(sim: Sim, gap: float, hold: float, mode: str, patience: float) -> Any:
        if mode == "renege":
            yield sim.delay(gap)
            req = res.request()
            got = yield req | sim.delay(patience)
            if req in got:
                yield sim.delay(hold)
            yield res.release(req)
            return
        try:
            yield sim.delay(gap)
            with res.request() as req:
                yield req
                yield sim.delay(hold)
                if mode == "explicit":
                    yield res.release(req)
        except Interrupt:
            pass

    procs = []
    for i, (_, hold, mode, patience) in enumerate(customers):
        procs.append(sim.spawn(customer, sum(c[0] for c in customers[:i + 1]), hold, mode,
                               patience))

    def interrupter(sim: Sim) -> Any:
        for (gap, _, mode, patience), proc in zip(customers, procs, strict=True):
            if mode == "interrupted":
                yield sim.delay(gap + patience)
                if proc.is_alive:
                    proc.interrupt("go")

    sim.spawn(interrupter)
    oracle = _Oracle()
    if enable_at is None:
        oracle.observe(sim.now, _state(res))
    else:
        if enable_at > 0:
            sim.run(until=enable_at)
        res.monitor()
        oracle.observe(sim.now, _state(res))
    start = sim.now
    while sim.peek() < math.inf:
        sim.step()
        oracle.observe(sim.now, _state(res))
    mon = res.monitor()
    assert _series(mon.utilisation) == oracle.series["utilisation"]
    assert _series(mon.queue) == oracle.series["queue"]
    end = sim.now
    for name in ("utilisation", "queue"):
        monitor = getattr(mon, name)
        brute = _integral(oracle.series[name], end)
        assert monitor.integral() == pytest.approx(brute, rel=1e-12, abs=1e-12)
        if end > start:
            assert monitor.time_weighted_mean() == pytest.approx(brute / (end - start),
                                                                  rel=1e-12, abs=1e-12)
    if enable_at is None and end > 0:
        stats = res.statistics()
        assert mon.utilisation.time_weighted_mean() == pytest.approx(stats.utilisation, abs=1e-12)
        assert mon.queue.time_weighted_mean() == pytest.approx(stats.mean_queue_length, abs=1e-12)


# --------------------------------------------------------------------------- SimPy as the oracle

SIMPY = SimPyAdapter()
SIMULACRA = SimulacraAdapter()


def _states(ctx: Ctx) -> dict[str, float]:
    """Every shared object's monitored quantities, as the monitors name them."""
    out: dict[str, float] = {}
    for i, r in enumerate(ctx.resources):
        out[f"R{i}.utilisation"] = len(r.users) / r.capacity
        out[f"R{i}.queue"] = len(r.queue)
    for i, c in enumerate(ctx.containers):
        out[f"C{i}.level"] = c.level
        out[f"C{i}.getters"] = len(c.get_queue)
        out[f"C{i}.putters"] = len(c.put_queue)
    for i, s in enumerate(ctx.stores):
        out[f"S{i}.items"] = len(s.items)
        out[f"S{i}.getters"] = len(s.get_queue)
        out[f"S{i}.putters"] = len(s.put_queue)
    return out


def _shared(ctx: Ctx) -> Iterator[tuple[str, Any]]:
    yield from ((f"R{i}", r) for i, r in enumerate(ctx.resources))
    yield from ((f"C{i}", c) for i, c in enumerate(ctx.containers))
    yield from ((f"S{i}", s) for i, s in enumerate(ctx.stores))


def _pause(ctx: Ctx, model: Model) -> bool:
    """``run(until=...)`` as the model says; False if its until-event never came."""
    until: Any = model.until
    if until == "P0":
        until = ctx.procs[0]
    elif until == "E0":
        until = ctx.events[0]
    try:
        ctx.a.run(ctx.env, until)
    except Exception as exc:
        if ctx.a.until_not_triggered(exc):
            return False
        raise
    return True


def _simpy_series(model: Model, split: bool) -> dict[str, Series] | None:
    """The SimPy run, observed after every event (from the pause, with *split*)."""
    ctx = Ctx(SIMPY, model)
    for ops in model.programs:
        ctx.spawn(ops)
    oracle = _Oracle()
    try:
        if split and not _pause(ctx, model):
            return None
        oracle.observe(ctx.env.now, _states(ctx))
        while True:
            try:
                ctx.env.step()
            except SIMPY.EmptySchedule:
                break
            oracle.observe(ctx.env.now, _states(ctx))
    except Exception:  # the model crashed: SimPy stops with it, so must simulacra
        return oracle.series | {"crashed": ([ctx.env.now], [1.0])}
    return oracle.series


def _simulacra_series(model: Model, split: bool) -> dict[str, Series] | None:
    ctx = Ctx(SIMULACRA, model)
    for ops in model.programs:
        ctx.spawn(ops)
    if not split:
        for name, obj in _shared(ctx):
            obj.monitor(name)
    crashed: dict[str, Series] = {}
    try:
        if split:
            if not _pause(ctx, model):
                return None
            for name, obj in _shared(ctx):
                obj.monitor(name)
        ctx.env.run()
    except Exception:
        crashed = {"crashed": ([ctx.env.now], [1.0])}
    return {name: _series(mon) for name, mon in monitors(ctx.env).series.items()} | crashed


def _has_shared(model: Model) -> bool:
    return bool(model.resources or model.containers or model.stores)


@settings(max_examples=250, **COMMON)
@given(models(max_programs=6, max_ops=8))
def test_series_match_simpy_observed_after_every_event(model: Model) -> None:
    assume(_has_shared(model))
    assert _simulacra_series(model, split=False) == _simpy_series(model, split=False)


@settings(max_examples=150, **COMMON)
@given(models(max_programs=6, max_ops=8))
def test_series_match_simpy_when_monitoring_starts_mid_run(model: Model) -> None:
    """Monitoring turned on at a ``run(until=...)`` pause, events of that instant pending."""
    assume(_has_shared(model) and model.until is not None)
    ours = _simulacra_series(model, split=True)
    assume(ours is not None)
    assert ours == _simpy_series(model, split=True)


def _mmc_draws(customers: int, seed: int) -> list[tuple[float, float]]:
    """Inter-arrival and service times of an M/M/3 queue at load 0.9."""
    rng = Sim(seed=seed).rng("mmc")
    return [(rng.expovariate(2.7), rng.expovariate(1.0)) for _ in range(customers)]


def _mmc_simpy(draws: list[tuple[float, float]]) -> tuple[Series, Series, float]:
    """SimPy M/M/3, instrumented by hand: the queue and utilisation after every event."""
    import simpy

    env = simpy.Environment()
    tellers = simpy.Resource(env, capacity=3)

    def customer(env: simpy.Environment, service: float) -> Any:
        with tellers.request() as req:
            yield req
            yield env.timeout(service)

    def source(env: simpy.Environment) -> Any:
        for gap, service in draws:
            yield env.timeout(gap)
            env.process(customer(env, service))

    env.process(source(env))
    oracle = _Oracle()

    def observe() -> None:
        oracle.observe(env.now, {"u": len(tellers.users) / 3, "q": len(tellers.queue)})

    observe()
    while env.peek() < math.inf:
        env.step()
        observe()
    return oracle.series["q"], oracle.series["u"], env.now


def test_mmc_queue_and_utilisation_match_simpy() -> None:
    """M/M/3 with the same draws: the same series, hence the same time-weighted means."""
    pytest.importorskip("simpy")
    draws = _mmc_draws(3000, seed=11)
    queue, busy, end = _mmc_simpy(draws)
    sim = Sim(seed=0)
    tellers = Resource(sim, capacity=3, monitor="tellers")

    def customer(sim: Sim, service: float) -> Any:
        with tellers.request() as req:
            yield req
            yield sim.delay(service)

    def source(sim: Sim) -> Any:
        for gap, service in draws:
            yield sim.delay(gap)
            sim.spawn(customer, service)

    sim.spawn(source)
    sim.run()
    mon = tellers.monitor()
    assert sim.now == end
    assert max(queue[1]) >= 5  # the queue did build up
    assert _series(mon.queue) == queue
    assert _series(mon.utilisation) == busy
    assert mon.queue.time_weighted_mean() == pytest.approx(_integral(queue, end) / end)
    assert mon.utilisation.time_weighted_mean() == pytest.approx(_integral(busy, end) / end)
    assert mon.utilisation.time_weighted_mean() == pytest.approx(
        tellers.statistics().utilisation)


def test_the_example_of_docs_monitors_runs_as_written(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "monitors.md").read_text()
    start = text.index("```python\n") + len("```python\n")
    monkeypatch.chdir(tmp_path)
    exec(compile(text[start:text.index("```", start)], "docs/monitors.md", "exec"), {})  # noqa: S102
    data = read_monitors(tmp_path / "monitors.json")
    assert list(data["series"]) == ["tellers.utilisation", "tellers.queue"]
    assert len(data["samples"]["wait"]) == 1000
    assert 0.8 < data["series"]["tellers.utilisation"]["time_weighted_mean"] < 1.0


def test_a_monitored_sim_goes_when_its_model_is_done() -> None:
    # The registry of monitors was a module-level WeakKeyDictionary keyed by the Sim,
    # whose values (the monitors) refer to the Sim: no monitored Sim was ever freed.
    import gc
    import weakref

    def model(monitor: bool) -> weakref.ref[Sim]:
        sim = Sim(seed=1)
        counter = Resource(sim, 1, monitor=monitor)
        waits = Tally(sim, "waits")

        def customer(sim: Sim) -> Iterator[Any]:
            arrived = sim.now
            with counter.request() as req:
                yield req
                waits.record(sim.now - arrived)
                yield sim.delay(1)

        for _ in range(5):
            sim.spawn(customer)
        sim.run()
        assert len(monitors(sim)) == (3 if monitor else 1)  # utilisation, queue, waits
        return weakref.ref(sim)

    gone = [model(monitor) for monitor in (True, False) * 25]
    gc.collect()
    assert [ref() for ref in gone] == [None] * 50
