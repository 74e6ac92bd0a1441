"""``statistics()`` of resources, containers and stores.

Each deterministic scenario is worked out by hand in its docstring; the M/M/1
test checks the long-run utilisation against queueing theory with a tolerance
derived from the estimator's variance.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from simulacra import (
    Container,
    ContainerStatistics,
    Interrupt,
    PreemptiveResource,
    PriorityResource,
    Resource,
    ResourceStatistics,
    Sim,
    Store,
    StoreStatistics,
)


def _customer(sim: Sim, res: Resource, arrive: float, service: float) -> Any:
    yield sim.delay(arrive)
    with res.request() as req:
        yield req
        yield sim.delay(service)


# --------------------------------------------------------------------------- Resource


def test_resource_three_customers_at_zero(sim: Sim) -> None:
    """Capacity 1; customers arrive at 0, 0, 0 with service 1, 2, 3 (FIFO).

    Service: A [0,1], B [1,3], C [3,6]. The server is never idle on [0,6], so
    utilisation = 6/6 = 1.0. Waiting: B and C on [0,1] (2 waiting), C on [1,3]
    (1 waiting), nobody on [3,6]: mean queue length = (2*1 + 1*2)/6 = 2/3, at
    most 2 at once. Waits: A 0, B 1, C 3: mean 4/3, max 3. Three requests,
    three grants.
    """
    res = Resource(sim, capacity=1)
    for service in (1, 2, 3):
        sim.spawn(_customer, res, 0, service)
    sim.run()
    stats = res.statistics()
    assert isinstance(stats, ResourceStatistics)
    assert stats.time == 6
    assert stats.capacity == 1
    assert stats.utilisation == pytest.approx(1.0)
    assert stats.mean_queue_length == pytest.approx((2 * 1 + 1 * 2) / 6)
    assert stats.max_queue_length == 2
    assert stats.requests == 3
    assert stats.grants == 3
    assert stats.mean_wait == pytest.approx((0 + 1 + 3) / 3)
    assert stats.max_wait == 3


def test_resource_statistics_mid_run(sim: Sim) -> None:
    """The same scenario, observed at t=2 (B in service, C waiting).

    Busy all of [0,2]: utilisation 1. Queue: 2 on [0,1], 1 on [1,2]: area 3,
    mean 3/2. Granted so far: A (wait 0) and B (wait 1): mean 1/2, max 1.
    C's wait is still open and not counted. Requests 3, grants 2.
    """
    res = Resource(sim, capacity=1)
    for service in (1, 2, 3):
        sim.spawn(_customer, res, 0, service)
    sim.run(until=2)
    stats = res.statistics()
    assert stats.time == 2
    assert stats.utilisation == pytest.approx(1.0)
    assert stats.mean_queue_length == pytest.approx(1.5)
    assert stats.requests == 3
    assert stats.grants == 2
    assert stats.mean_wait == pytest.approx(0.5)
    assert stats.max_wait == 1


def test_resource_two_slots_with_idle_time(sim: Sim) -> None:
    """Capacity 2: c1 at 0 (service 4), c2 and c3 at 1 (1 and 2), c4 at 6 (2).

    c1 [0,4]; c2 [1,2]; c3 waits [1,2] then [2,4]; c4 [6,8]. Slot-time busy:
    4 + 1 + 2 + 2 = 9 over 8 time units x 2 slots: utilisation 9/16. Queue:
    1 waiting on [1,2]: mean 1/8, max 1. Waits 0, 0, 1, 0: mean 1/4, max 1.
    """
    res = Resource(sim, capacity=2)
    for arrive, service in ((0, 4), (1, 1), (1, 2), (6, 2)):
        sim.spawn(_customer, res, arrive, service)
    sim.run()
    stats = res.statistics()
    assert stats.time == 8
    assert stats.capacity == 2
    assert stats.utilisation == pytest.approx(9 / 16)
    assert stats.mean_queue_length == pytest.approx(1 / 8)
    assert stats.max_queue_length == 1
    assert (stats.requests, stats.grants) == (4, 4)
    assert stats.mean_wait == pytest.approx(0.25)
    assert stats.max_wait == 1


def test_resource_statistics_with_reneging(sim: Sim) -> None:
    """Capacity 1: holder [0,5]; a reneger queues at 1, gives up at 3; patient queues at 2.

    patient is served [5,6]. Busy all of [0,6]: utilisation 1. Queue area:
    reneger [1,3] = 2, patient [2,5] = 3: mean 5/6; both waiting on [2,3]:
    max 2. Requests 3 (the cancelled one too), grants 2; waits of granted
    requests: 0 and 3: mean 1.5, max 3.
    """
    res = Resource(sim, capacity=1)

    def reneger(s: Sim) -> Any:
        yield s.delay(1)
        with res.request() as req:
            yield req | s.delay(2)
        assert not req.triggered

    sim.spawn(_customer, res, 0, 5)
    sim.spawn(reneger)
    sim.spawn(_customer, res, 2, 1)
    sim.run()
    stats = res.statistics()
    assert stats.time == 6
    assert stats.utilisation == pytest.approx(1.0)
    assert stats.mean_queue_length == pytest.approx(5 / 6)
    assert stats.max_queue_length == 2
    assert stats.requests == 3
    assert stats.grants == 2
    assert stats.mean_wait == pytest.approx(1.5)
    assert stats.max_wait == 3


def test_statistics_at_creation_time(sim: Sim) -> None:
    res = Resource(sim, capacity=3)
    stats = res.statistics()
    assert stats.time == 0
    assert stats.utilisation == 0
    assert stats.mean_queue_length == 0
    assert (stats.requests, stats.grants, stats.max_queue_length) == (0, 0, 0)
    assert stats.mean_wait == 0


def test_statistics_span_starts_at_creation(sim: Sim) -> None:
    """A resource made at t=4 and used [4,6], observed at 8: utilisation 2/4."""
    sim.run(until=4)
    res = Resource(sim, capacity=1)
    sim.spawn(_customer, res, 0, 2)
    sim.run(until=8)
    assert res.statistics().utilisation == pytest.approx(0.5)


def test_priority_resource_statistics_match_resource() -> None:
    """With one priority for everyone, a PriorityResource serves exactly like a Resource.

    So its statistics must be the same, including the queue statistics: a
    request granted at once never waited in the queue (the first customer here,
    and everyone in the second scenario).
    """
    scenarios = [
        [(0, 1), (0, 2), (0, 3)],
        [(0, 1), (2, 1), (4, 1)],  # nobody ever waits
    ]
    for scenario in scenarios:
        results = []
        for cls in (Resource, PriorityResource):
            sim = Sim()
            res = cls(sim, capacity=1)
            for arrive, service in scenario:
                sim.spawn(_customer, res, arrive, service)
            sim.run()
            results.append(res.statistics())
        assert results[1] == results[0], scenario


def test_preemptive_resource_statistics(sim: Sim) -> None:
    """Capacity 1: low holds from 0 and is evicted at 3 by high, which holds [3,5].

    A clock runs to 10. Busy: low [0,3] + high [3,5] = 5 of 10: utilisation 0.5
    (the eviction ends low's usage: leaving its ``with`` block afterwards must
    not count it twice). Neither waited: mean and max wait 0; nobody queued.
    """
    res = PreemptiveResource(sim, capacity=1)

    def low(s: Sim) -> Any:
        with res.request(priority=5) as req:
            yield req
            try:
                yield s.delay(10)
            except Interrupt:
                pass

    def high(s: Sim) -> Any:
        yield s.delay(3)
        with res.request(priority=1) as req:
            yield req
            yield s.delay(2)

    sim.spawn(low)
    sim.spawn(high)
    sim.delay(10)
    sim.run()
    stats = res.statistics()
    assert stats.time == 10
    assert stats.utilisation == pytest.approx(0.5)
    assert (stats.requests, stats.grants) == (2, 2)
    assert stats.mean_wait == 0
    assert stats.max_wait == 0
    assert stats.mean_queue_length == 0
    assert stats.max_queue_length == 0


# --------------------------------------------------------------------------- Container / Store


def test_container_statistics(sim: Sim) -> None:
    """Container(capacity=10, init=0), observed at 6.

    t=0: a consumer asks for 3 (waits). t=2: put 6 -> level 6 at once (the
    producer sees it right after ``put()``); when that put is processed the
    waiting get is tried first (the container's callback comes before the
    producer's) and takes 3 -> level 3. t=4: put 1 -> level 4. Level over time: 0 on [0,2], 3 on
    [2,4], 4 on [4,6]: mean (0 + 6 + 8)/6 = 14/6; highest level 6. Two puts
    (no wait), one get (waited 2).
    """
    tank = Container(sim, capacity=10, init=0)
    seen: list[float] = []

    def consumer(s: Sim) -> Any:
        yield tank.get(3)

    def producer(s: Sim) -> Any:
        yield s.delay(2)
        put = tank.put(6)
        seen.append(tank.level)
        yield put
        seen.append(tank.level)
        yield s.delay(2)
        yield tank.put(1)
        yield s.delay(2)

    sim.spawn(consumer)
    sim.spawn(producer)
    sim.run()
    assert seen == [6, 3]
    stats = tank.statistics()
    assert isinstance(stats, ContainerStatistics)
    assert stats.time == 6
    assert stats.mean_level == pytest.approx(14 / 6)
    assert stats.max_level == 6
    assert (stats.puts, stats.gets) == (2, 1)
    assert stats.mean_put_wait == 0
    assert stats.mean_get_wait == pytest.approx(2)
    assert (stats.put_queue_length, stats.get_queue_length) == (0, 0)


def test_container_statistics_at_creation(sim: Sim) -> None:
    """No time has passed: the mean level is the current level."""
    tank = Container(sim, capacity=10, init=4)
    stats = tank.statistics()
    assert stats.mean_level == 4
    assert stats.max_level == 4
    assert (stats.puts, stats.gets) == (0, 0)


def test_store_statistics(sim: Sim) -> None:
    """Store(capacity=1): a producer puts 0, 1, 2 back to back; a consumer takes one every 2.

    put 0 at 0 (no wait); put 1 asked at 0, done at 2 when 0 is taken; put 2
    asked at 2, done at 4. The consumer's gets at 2, 4, 6 find an item at once.
    The store holds exactly one item all along [0,6]: mean level 1, max 1.
    Put waits 0, 2, 2: mean 4/3. Observed at 1: one put waiting.
    """
    store: Store[int] = Store(sim, capacity=1)

    def producer(s: Sim) -> Any:
        for i in range(3):
            yield store.put(i)

    def consumer(s: Sim) -> Any:
        for _ in range(3):
            yield s.delay(2)
            yield store.get()

    sim.spawn(producer)
    sim.spawn(consumer)
    sim.run(until=1)
    mid = store.statistics()
    assert (mid.put_queue_length, mid.get_queue_length) == (1, 0)
    assert mid.puts == 1
    sim.run()
    stats = store.statistics()
    assert isinstance(stats, StoreStatistics)
    assert stats.time == 6
    assert stats.mean_level == pytest.approx(1.0)
    assert stats.max_level == 1
    assert (stats.puts, stats.gets) == (3, 3)
    assert stats.mean_put_wait == pytest.approx(4 / 3)
    assert stats.mean_get_wait == 0


def test_store_get_wait_statistics(sim: Sim) -> None:
    """Gets at 0 and 1 on an empty store; items put at 3 and 5: get waits 3 and 4, mean 3.5.

    Level: 0 throughout except zero-length instants (each item is taken when its
    put is processed), so the mean level is 0 while the highest level is 1.
    """
    store: Store[str] = Store(sim)

    def consumer(s: Sim, arrive: float) -> Any:
        yield s.delay(arrive)
        yield store.get()

    def producer(s: Sim) -> Any:
        for t in (3, 5):
            yield s.delay(t - s.now)
            yield store.put("x")

    sim.spawn(consumer, 0)
    sim.spawn(consumer, 1)
    sim.spawn(producer)
    sim.run(until=2)
    assert store.statistics().get_queue_length == 2
    sim.run()
    stats = store.statistics()
    assert stats.mean_get_wait == pytest.approx(3.5)
    assert stats.mean_level == 0
    assert stats.max_level == 1
    assert stats.get_queue_length == 0


def test_statistics_are_frozen_dataclasses(sim: Sim) -> None:
    assert StoreStatistics is ContainerStatistics
    stats = Resource(sim).statistics()
    assert dataclasses.is_dataclass(stats)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.utilisation = 0.5  # type: ignore[misc]
    cstats = Container(sim).statistics()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cstats.mean_level = 1.0  # type: ignore[misc]


# --------------------------------------------------------------------------- M/M/1


def test_mm1_utilisation_and_littles_law() -> None:
    """M/M/1 with lambda = 0.5, mu = 1 (rho = 0.5), 10 000 customers, seed fixed.

    Exact, sample-path identities (the system drains before the end):

    * utilisation x elapsed time = total service time drawn;
    * queue-length area = sum of waits (Little's law with no boundary terms),
      i.e. mean_queue_length x elapsed = mean_wait x grants.

    Statistical: utilisation ~= rho. The busy/idle process is alternating
    renewal with idle ~ Exp(lambda) and busy periods of mean 1/(mu - lambda)
    and variance (1 + rho)/(mu^2 (1 - rho)^3). By the renewal-reward delta
    method Var(U_hat) ~= Var(B - rho C) / (m^2 n), with cycles C = B + I of mean
    m = 1/(mu - lambda) + 1/lambda = 4 and n = T/m cycles. Here
    Var(B - rho C) = (1 - rho)^2 Var B + rho^2 Var I = 3 + 1 = 4, so
    Var(U_hat) ~= 1/T and the standard error at T ~= 20 000 is ~= 0.007.
    The tolerance 0.035 is five standard errors: a wrong utilisation formula
    (e.g. one that forgets the capacity or the span) is off by far more.
    """
    lam, mu, n = 0.5, 1.0, 10_000
    sim = Sim(seed=20240601)
    res = Resource(sim, capacity=1)
    arrivals = sim.rng("arrivals")
    services = sim.rng("services")
    total_service = 0.0

    def customer(s: Sim, service: float) -> Any:
        with res.request() as req:
            yield req
            yield s.delay(service)

    def source(s: Sim) -> Any:
        nonlocal total_service
        for _ in range(n):
            yield s.delay(arrivals.expovariate(lam))
            service = services.expovariate(mu)
            total_service += service
            s.spawn(customer, service)

    sim.spawn(source)
    sim.run()
    stats = res.statistics()
    assert stats.grants == stats.requests == n
    assert stats.utilisation * stats.time == pytest.approx(total_service, rel=1e-9)
    assert stats.mean_queue_length * stats.time == pytest.approx(
        stats.mean_wait * stats.grants, rel=1e-9
    )
    rho = lam / mu
    assert math.isclose(stats.utilisation, rho, abs_tol=0.035), stats
    # Sanity of the time scale: n arrivals at rate lambda take about n / lambda.
    assert stats.time == pytest.approx(n / lam, rel=0.05)
