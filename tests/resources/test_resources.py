"""Resources, containers and stores: SimPy 4 semantics plus simulacra's deliberate changes.

Expected values are derived by hand from SimPy's rules (stated next to each
test) or computed by SimPy itself where the rule is an implementation detail
(the heap order of equal-priority items in a PriorityStore).
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulacra
from simulacra import (
    Container,
    FilterStore,
    ForeignRequest,
    Interrupt,
    Preempted,
    PreemptiveResource,
    PriorityItem,
    PriorityResource,
    PriorityStore,
    Process,
    Resource,
    Sim,
    Store,
)

# Hypothesis reports a failing example through libcst, whose import warns on this Python;
# with filterwarnings=error that would hide the real failure behind an INTERNALERROR.
pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

# --------------------------------------------------------------------------- Resource


def test_resource_count_capacity_queue_users(sim: Sim) -> None:
    res = Resource(sim, capacity=2)
    assert res.capacity == 2
    assert res.count == 0
    r1 = res.request()
    r2 = res.request()
    r3 = res.request()
    # Two slots: the first two are granted at once (triggered), the third waits.
    assert r1.triggered
    assert r2.triggered
    assert not r3.triggered
    assert res.count == 2
    assert list(res.users) == [r1, r2]
    assert list(res.queue) == [r3]
    assert "capacity=2" in repr(res)
    res.release(r1)
    # The slot is free at once, but the next request is granted when the
    # release event is processed.
    assert res.count == 1
    assert not r3.triggered
    sim.run()
    assert r3.triggered
    assert list(res.users) == [r2, r3]
    assert list(res.queue) == []


def test_with_statement_releases(sim: Sim) -> None:
    res = Resource(sim, capacity=1)
    log: list[Any] = []

    def user(s: Sim, name: str, hold: float) -> Any:
        with res.request() as req:
            yield req
            log.append((s.now, name, res.count))
            yield s.delay(hold)
        log.append((s.now, name, "out", res.count))

    for name, hold in (("a", 2), ("b", 1), ("c", 3)):
        sim.spawn(user, name, hold)
    sim.run()
    # FIFO: a [0,2], b [2,3], c [3,6]; count drops to 0 on leaving the block.
    assert log == [
        (0, "a", 1),
        (2, "a", "out", 0),
        (2, "b", 1),
        (3, "b", "out", 0),
        (3, "c", 1),
        (6, "c", "out", 0),
    ]


def test_explicit_release_returns_event(sim: Sim) -> None:
    res = Resource(sim, capacity=1)
    log: list[Any] = []

    def user(s: Sim) -> Any:
        req = res.request()
        yield req
        yield s.delay(2)
        rel = res.release(req)
        assert res.count == 0
        v = yield rel
        log.append((s.now, v, rel.processed))

    sim.spawn(user)
    sim.run()
    assert log == [(2, None, True)]


def test_releasing_queued_request_cancels_it(sim: Sim) -> None:
    res = Resource(sim, capacity=1)
    holder = res.request()
    waiting = res.request()
    behind = res.request()
    assert list(res.queue) == [waiting, behind]
    res.release(waiting)  # still queued: cancelled, not granted
    assert list(res.queue) == [behind]
    assert res.count == 1
    sim.run()
    assert not waiting.triggered
    res.release(holder)
    sim.run()
    assert list(res.users) == [behind]
    assert res.count == 1
    assert not waiting.triggered  # never granted, even after the slot freed


def test_with_block_left_while_queued_cancels(sim: Sim) -> None:
    res = Resource(sim, capacity=1)
    log: list[Any] = []

    def holder(s: Sim) -> Any:
        with res.request() as req:
            yield req
            yield s.delay(10)

    def impatient(s: Sim) -> Any:
        with res.request() as req:
            got = yield req | s.delay(3)
            log.append((s.now, req in got, len(res.queue)))
        log.append((s.now, len(res.queue), res.count))

    sim.spawn(holder)
    sim.spawn(impatient)
    sim.run()
    assert log == [(3, False, 1), (3, 0, 1)]
    assert res.count == 0


def test_interrupted_waiter_cancels_request(sim: Sim) -> None:
    res = Resource(sim, capacity=1)
    log: list[Any] = []

    def holder(s: Sim) -> Any:
        with res.request() as req:
            yield req
            yield s.delay(10)

    def waiter(s: Sim) -> Any:
        try:
            with res.request() as req:
                yield req
                log.append("granted?!")
        except Interrupt:
            log.append((s.now, len(res.queue)))

    def late(s: Sim) -> Any:
        yield s.delay(5)
        with res.request() as req:
            yield req
            log.append(("late", s.now))

    def attacker(s: Sim, v: Process[Any]) -> Any:
        yield s.delay(2)
        v.interrupt()

    sim.spawn(holder)
    v = sim.spawn(waiter)
    sim.spawn(late)
    sim.spawn(attacker, v)
    sim.run()
    assert log == [(2, 0), ("late", 10)]


def test_release_foreign_request(sim: Sim) -> None:
    a = Resource(sim, capacity=1)
    b = Resource(sim, capacity=1)
    req = a.request()
    with pytest.raises(ForeignRequest):
        b.release(req)
    with pytest.raises(ForeignRequest):
        b.release(sim.event())
    assert a.count == 1  # untouched


# --------------------------------------------------------------------------- PriorityResource


def test_priority_resource_order_with_ties(sim: Sim) -> None:
    res = PriorityResource(sim, capacity=1)
    order: list[str] = []

    def user(s: Sim, name: str, prio: int, arrive: float) -> Any:
        yield s.delay(arrive)
        with res.request(priority=prio) as req:
            yield req
            order.append(name)
            yield s.delay(10)

    # "first" holds the slot; everyone else queues at t=1 or t=2.
    sim.spawn(user, "first", 5, 0)
    for name, prio, arrive in [
        ("p2-early", 2, 1),
        ("p1-a", 1, 1),
        ("p2-late", 2, 2),
        ("p1-b", 1, 1),
        ("p0", 0, 2),
    ]:
        sim.spawn(user, name, prio, arrive)
    sim.run()
    # Lower priority first; equal priority by request time, then request order.
    assert order == ["first", "p0", "p1-a", "p1-b", "p2-early", "p2-late"]


def test_priority_resource_queue_is_sorted(sim: Sim) -> None:
    res = PriorityResource(sim, capacity=1)
    res.request(priority=0)
    low = res.request(priority=3)
    high = res.request(priority=-1)
    mid = res.request(priority=3)
    assert list(res.queue) == [high, low, mid]


# --------------------------------------------------------------------------- PreemptiveResource


def test_preemption_interrupts_victim_with_preempted_cause(sim: Sim) -> None:
    res = PreemptiveResource(sim, capacity=1)
    log: list[Any] = []
    procs: dict[str, Process[Any]] = {}

    def low(s: Sim) -> Any:
        yield s.delay(1)
        with res.request(priority=5) as req:
            yield req
            try:
                yield s.delay(10)
                log.append("low finished")
            except Interrupt as intr:
                cause = intr.cause
                assert isinstance(cause, Preempted)
                log.append(
                    (
                        s.now,
                        "preempted",
                        cause.by is procs["high"],
                        cause.usage_since,
                        cause.resource is res,
                        req in res.users,
                    )
                )

    def high(s: Sim) -> Any:
        yield s.delay(4)
        with res.request(priority=1) as req:
            yield req
            log.append((s.now, "high got it"))
            yield s.delay(2)

    procs["low"] = sim.spawn(low)
    procs["high"] = sim.spawn(high)
    sim.run()
    # low is granted at 1 (usage_since=1) and evicted at 4, when high gets the slot.
    assert log == [(4, "preempted", True, 1, True, False), (4, "high got it")]
    assert res.count == 0


def test_preempt_false_waits(sim: Sim) -> None:
    res = PreemptiveResource(sim, capacity=1)
    log: list[Any] = []

    def low(s: Sim) -> Any:
        with res.request(priority=5) as req:
            yield req
            try:
                yield s.delay(3)
                log.append((s.now, "low done"))
            except Interrupt:
                log.append("low preempted?!")

    def polite(s: Sim) -> Any:
        yield s.delay(1)
        with res.request(priority=0, preempt=False) as req:
            yield req
            log.append((s.now, "polite got it"))

    sim.spawn(low)
    sim.spawn(polite)
    sim.run()
    assert log == [(3, "low done"), (3, "polite got it")]


def test_equal_priority_does_not_preempt(sim: Sim) -> None:
    res = PreemptiveResource(sim, capacity=1)
    log: list[Any] = []

    def user(s: Sim, name: str, arrive: float) -> Any:
        yield s.delay(arrive)
        with res.request(priority=1) as req:
            yield req
            try:
                yield s.delay(3)
                log.append((s.now, name))
            except Interrupt:
                log.append((s.now, name, "preempted"))

    sim.spawn(user, "first", 0)
    sim.spawn(user, "second", 1)
    sim.run()
    # Same priority: the later request has the larger key and waits.
    assert log == [(3, "first"), (6, "second")]


def test_preemption_by_host_code_has_no_by(sim: Sim) -> None:
    res = PreemptiveResource(sim, capacity=1)
    causes: list[Any] = []

    def user(s: Sim) -> Any:
        with res.request(priority=3) as req:
            yield req
            try:
                yield s.delay(10)
            except Interrupt as intr:
                causes.append(intr.cause)

    sim.spawn(user)
    sim.run(until=2)
    vip = res.request(priority=0)  # made outside any process
    sim.run()
    assert len(causes) == 1
    assert causes[0].by is None
    assert causes[0].usage_since == 0
    assert list(res.users) == [vip]


def test_preempted_is_a_frozen_dataclass(sim: Sim) -> None:
    res = PreemptiveResource(sim, capacity=1)
    p = Preempted(by=None, usage_since=2.0, resource=res)
    assert p == Preempted(by=None, usage_since=2.0, resource=res)
    with pytest.raises(AttributeError):
        p.usage_since = 3.0  # type: ignore[misc]


# --------------------------------------------------------------------------- Container


def test_container_level_and_blocking_both_ways(sim: Sim) -> None:
    tank = Container(sim, capacity=10, init=4)
    assert tank.level == 4
    assert tank.capacity == 10
    log: list[Any] = []

    def consumer(s: Sim) -> Any:
        yield tank.get(6)  # only 4 there: waits for the producer
        log.append((s.now, "got 6", tank.level))

    def producer(s: Sim) -> Any:
        yield s.delay(2)
        yield tank.put(5)  # 4 + 5 = 9 fits
        log.append((s.now, "put 5", tank.level))
        yield s.delay(1)
        yield tank.put(10)  # level 3 after the get: 13 > 10, waits for room
        log.append((s.now, "put 10", tank.level))

    def drainer(s: Sim) -> Any:
        yield s.delay(5)
        yield tank.get(3)
        log.append((s.now, "got 3", tank.level))

    sim.spawn(consumer)
    sim.spawn(producer)
    sim.spawn(drainer)
    sim.run()
    # t=2: put 5 -> 9; the get of 6 is tried when the put is processed -> 3.
    # t=3: put 10 waits (3 + 10 > 10). t=5: get 3 -> 0, then put 10 -> 10.
    assert log == [
        (2, "put 5", 3),
        (2, "got 6", 3),
        (5, "got 3", 10),
        (5, "put 10", 10),
    ]
    assert "level=10" in repr(tank)


def test_container_float_amounts(sim: Sim) -> None:
    tank = Container(sim, init=1.5)  # capacity defaults to infinity
    assert tank.capacity == float("inf")
    tank.put(0.25)
    assert tank.level == 1.75
    g = tank.get(1.75)
    sim.run()
    assert g.processed
    assert tank.level == 0


def test_container_with_get_cancels_pending(sim: Sim) -> None:
    tank = Container(sim, capacity=5)

    def impatient(s: Sim) -> Any:
        with tank.get(2) as g:
            yield g | s.delay(1)
        return len(tank.get_queue)

    p = sim.spawn(impatient)
    sim.run()
    assert p.value == 0
    tank.put(3)
    sim.run()
    assert tank.level == 3  # the cancelled get did not take anything


# --------------------------------------------------------------------------- Store


def test_store_fifo_and_capacity_blocking(sim: Sim) -> None:
    store: Store[str] = Store(sim, capacity=2)
    assert store.capacity == 2
    log: list[Any] = []

    def producer(s: Sim) -> Any:
        for item in "abcd":
            yield store.put(item)
            log.append((s.now, "put", item, list(store.items)))

    def consumer(s: Sim) -> Any:
        yield s.delay(5)
        for _ in range(4):
            item = yield store.get()
            log.append((s.now, "get", item))
            yield s.delay(1)

    sim.spawn(producer)
    sim.spawn(consumer)
    sim.run()
    # a, b fit at 0; c waits for room (the get of a at 5), d for the get of b at 6.
    assert log == [
        (0, "put", "a", ["a"]),
        (0, "put", "b", ["a", "b"]),
        (5, "get", "a"),
        (5, "put", "c", ["b", "c"]),
        (6, "get", "b"),
        (6, "put", "d", ["c", "d"]),
        (7, "get", "c"),
        (8, "get", "d"),
    ]
    assert store.items == []
    assert "items=0" in repr(store)


def test_store_get_waits_for_item(sim: Sim) -> None:
    store: Store[int] = Store(sim)

    def consumer(s: Sim) -> Any:
        item = yield store.get()
        return s.now, item

    c = sim.spawn(consumer)
    sim.run(until=3)
    assert len(store.get_queue) == 1
    store.put(42)
    assert sim.run(until=c) == (3, 42)
    assert store.get_queue == []


def test_store_with_get_cancels_pending(sim: Sim) -> None:
    store: Store[int] = Store(sim)

    def impatient(s: Sim) -> Any:
        with store.get() as g:
            yield g | s.delay(2)
        return g.triggered

    p = sim.spawn(impatient)
    sim.run()
    assert p.value is False
    assert store.get_queue == []
    store.put(1)
    sim.run()
    assert store.items == [1]  # nobody took it


def test_filter_store(sim: Sim) -> None:
    store: FilterStore[int] = FilterStore(sim)
    log: list[Any] = []

    def getter(s: Sim, name: str, accept: Any) -> Any:
        item = yield store.get(accept)
        log.append((s.now, name, item))

    sim.spawn(getter, "even", lambda x: x % 2 == 0)
    sim.spawn(getter, "big", lambda x: x > 10)
    sim.spawn(getter, "any", None)

    def producer(s: Sim) -> Any:
        for t, item in ((1, 3), (2, 11), (3, 4)):
            yield s.delay(t - s.now)
            yield store.put(item)

    sim.spawn(producer)
    sim.run()
    # 3 at t=1: only "any" accepts it. 11 at t=2: "big" (the waiting "even" is
    # skipped, every waiting get is tried). 4 at t=3: "even".
    assert log == [(1, "any", 3), (2, "big", 11), (3, "even", 4)]
    assert store.items == []


def test_filter_store_takes_oldest_accepted(sim: Sim) -> None:
    store: FilterStore[int] = FilterStore(sim)
    for item in (1, 8, 5, 6):
        store.put(item)
    g = store.get(lambda x: x > 4)
    sim.run()
    assert g.value == 8
    assert store.items == [1, 5, 6]


def test_priority_store_orders_items(sim: Sim) -> None:
    store: PriorityStore[int] = PriorityStore(sim)
    for item in (5, 1, 4, 2, 3):
        store.put(item)
    gets = [store.get() for _ in range(5)]
    sim.run()
    assert [g.value for g in gets] == [1, 2, 3, 4, 5]


def test_priority_item_compares_priority_only() -> None:
    a = PriorityItem(1, {"unorderable": 1})
    b = PriorityItem(2, {"unorderable": 2})
    assert a < b
    assert not b < a
    assert not PriorityItem(1, object()) < PriorityItem(1, object())
    assert a.priority == 1
    assert a.item == {"unorderable": 1}


def test_priority_store_with_unorderable_items(sim: Sim) -> None:
    store: PriorityStore[PriorityItem] = PriorityStore(sim)
    for prio, payload in ((3, {"c": 3}), (1, {"a": 1}), (2, {"b": 2})):
        store.put(PriorityItem(prio, payload))
    gets = [store.get() for _ in range(3)]
    sim.run()
    assert [g.value.item for g in gets] == [{"a": 1}, {"b": 2}, {"c": 3}]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_priority_store_ties_match_simpy(priorities: list[int]) -> None:
    """Equal priorities come out in SimPy's order: heap order, not insertion order.

    PriorityItem compares priorities only, so ties are left to ``heapq``; the
    order is SimPy's exactly when the same heap operations are done.
    """
    simpy = pytest.importorskip("simpy")
    from simpy.resources.store import PriorityItem as SimPyPriorityItem

    env = simpy.Environment()
    ref_store = simpy.PriorityStore(env)
    for i, prio in enumerate(priorities):
        ref_store.put(SimPyPriorityItem(prio, i))
    ref_gets = [ref_store.get() for _ in priorities]
    env.run()
    expected = [g.value.item for g in ref_gets]

    sim = Sim()
    store: PriorityStore[PriorityItem] = PriorityStore(sim)
    for i, prio in enumerate(priorities):
        store.put(PriorityItem(prio, i))
    gets = [store.get() for _ in priorities]
    sim.run()
    got = [g.value.item for g in gets]
    assert got == expected
    # And whatever the tie order, priorities never decrease.
    assert [priorities[i] for i in got] == sorted(priorities)


# --------------------------------------------------------------------------- Hypothesis: stores

_producer = st.lists(st.integers(0, 3), min_size=1, max_size=6)  # delay before each put
_consumer = st.lists(
    st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 2))),  # (delay, patience)
    min_size=1,
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(_producer, min_size=1, max_size=3),
    st.lists(_consumer, min_size=1, max_size=3),
    st.one_of(st.just(float("inf")), st.integers(1, 3)),
)
def test_store_conserves_items_and_keeps_fifo(
    producers: list[list[int]], consumers: list[list[tuple[int, int | None]]], capacity: float
) -> None:
    sim = Sim(seed=0)
    store: Store[tuple[int, int]] = Store(sim, capacity=capacity)
    entered: list[Any] = []  # the order items entered the store
    left: list[Any] = []  # the order items left it
    consumed: list[Any] = []  # what consumers received
    made: dict[Any, Any] = {}  # item -> its put event

    def producer(s: Sim, p: int, delays: list[int]) -> Any:
        for k, d in enumerate(delays):
            yield s.delay(d)
            item = (p, k)
            put = store.put(item)
            made[item] = put
            put.callbacks.append(lambda e, item=item: entered.append(item))
            yield put

    def consumer(s: Sim, plan: list[tuple[int, int | None]]) -> Any:
        for d, patience in plan:
            yield s.delay(d)
            with store.get() as get:
                get.callbacks.append(lambda e: left.append(e.value))
                if patience is None:
                    yield get | s.delay(20)  # bounded, so the run always ends
                else:
                    yield get | s.delay(patience)
                if get.triggered:  # taken from the store: it is ours even if not yet processed
                    consumed.append(get.value)

    for p, delays in enumerate(producers):
        sim.spawn(producer, p, delays)
    for plan in consumers:
        sim.spawn(consumer, plan)
    sim.run()
    sim._check_invariants()

    pending_puts = [item for item, put in made.items() if not put.triggered]  # in order made
    # The puts still waiting are exactly the store's put queue, in request order.
    assert [id(put) for put in store.put_queue] == [id(made[item]) for item in pending_puts]
    # Conservation: every item made is consumed, still stored or still waiting to
    # be put, exactly once.
    assert Counter(consumed) + Counter(store.items) + Counter(pending_puts) == Counter(list(made))
    assert len(set(consumed)) == len(consumed)
    # FIFO: items leave in the order they entered.
    assert left == entered[: len(left)]
    assert store.items == entered[len(left) :]
    # Each producer's items arrive in the order it made them.
    for p in range(len(producers)):
        mine = [k for (q, k) in consumed if q == p]
        assert mine == sorted(mine)
    assert len(store.items) <= capacity


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "get"]), st.integers(0, 2)), max_size=25))
def test_container_level_stays_in_bounds(ops: list[tuple[str, int]]) -> None:
    sim = Sim(seed=0)
    tank = Container(sim, capacity=5, init=2)
    levels: list[float] = []
    done = {"put": 0, "get": 0}
    asked = {"put": 0, "get": 0}
    amount_of: dict[Any, int] = {}  # event -> amount

    def proc(s: Sim, kind: str, amount: int, delay: int) -> Any:
        yield s.delay(delay)
        ev = tank.put(amount) if kind == "put" else tank.get(amount)
        amount_of[ev] = amount
        yield ev
        done[kind] += amount
        levels.append(tank.level)

    for i, (kind, d) in enumerate(ops):
        amount = 1 + (i % 3)
        asked[kind] += amount
        sim.spawn(proc, kind, amount, d)
    sim.run()
    assert all(0 <= level <= 5 for level in levels)
    assert tank.level == 2 + done["put"] - done["get"]
    # Whatever is still waiting could not have been served.
    waiting_puts = sum(amount_of[e] for e in tank.put_queue)
    waiting_gets = sum(amount_of[e] for e in tank.get_queue)
    assert waiting_puts == asked["put"] - done["put"]
    assert waiting_gets == asked["get"] - done["get"]
    assert all(not e.triggered for e in [*tank.put_queue, *tank.get_queue])
    if tank.put_queue:
        assert tank.level + amount_of[tank.put_queue[0]] > 5
    if tank.get_queue:
        assert tank.level < amount_of[tank.get_queue[0]]


# --------------------------------------------------------------------------- misc


@pytest.mark.parametrize(
    "cls",
    [Resource, PriorityResource, PreemptiveResource, Container, Store, FilterStore, PriorityStore],
)
def test_every_resource_checks_its_sim(cls: type) -> None:
    with pytest.raises(simulacra.ConfigError, match="Sim"):
        cls("not a sim")


def test_many_users_capacity(sim: Sim) -> None:
    res = Resource(sim, capacity=3)
    in_use: list[int] = []

    def user(s: Sim, k: int) -> Any:
        yield s.delay(k % 2)
        with res.request() as req:
            yield req
            in_use.append(res.count)
            yield s.delay(1)

    for k in range(10):
        sim.spawn(user, k)
    sim.run()
    assert len(in_use) == 10
    assert max(in_use) == 3
    # 10 units of work on 3 slots, with someone always waiting until the last
    # round: busy rounds [0,1], [1,2], [2,3] serve 3 each and [3,4] the last one.
    assert sim.now == 4
    assert list(itertools.chain(res.users, res.queue)) == []


@pytest.mark.parametrize("kind", ["resource", "priority", "store", "container"])
def test_cancel_withdraws_a_waiting_request_as_simpy_does(kind: str) -> None:
    # SimPy's reneging idiom: `if req not in (yield req | timeout): req.cancel()`.
    simpy = pytest.importorskip("simpy")
    makers: dict[str, tuple[Any, Any, Any]] = {
        "resource": (lambda lib, env: lib.Resource(env, 1), lambda t, i: t.request(),
                     lambda t, r: t.release(r)),
        "priority": (lambda lib, env: lib.PriorityResource(env, 1),
                     lambda t, i: t.request(priority=-i), lambda t, r: t.release(r)),
        "store": (lambda lib, env: lib.Store(env), lambda t, i: t.get(), None),
        "container": (lambda lib, env: lib.Container(env, 10, init=0), lambda t, i: t.get(1),
                      None),
    }
    make, request, give_back = makers[kind]

    def run(lib: Any) -> list[tuple[str, int, float]]:
        env = simpy.Environment() if lib is simpy else Sim()
        delay = env.timeout if lib is simpy else env.delay
        start = env.process if lib is simpy else env.spawn
        thing = make(lib, env)
        log: list[tuple[str, int, float]] = []

        def customer(i: int, patience: float) -> Any:
            req = request(thing, i)
            got = yield req | delay(patience)
            if req in got:
                log.append(("served", i, env.now))
                yield delay(3)
                if give_back is not None:
                    give_back(thing, req)
            else:
                req.cancel()
                if lib is simulacra:
                    req.cancel()  # a second time does nothing (SimPy's raises ValueError)
                log.append(("reneged", i, env.now))

        def supplier() -> Any:  # the store and the container get one item every 2.5
            while True:
                yield delay(2.5)
                yield thing.put(1)

        for i, patience in enumerate((5, 1, 2, 8, 0.5, 4, 9, 3)):
            start(customer(i, patience))
        if give_back is None:
            start(supplier())
        env.run(until=60)
        return log

    reference, ours = run(simpy), run(simulacra)
    assert ours == reference
    assert {entry[0] for entry in ours} == {"served", "reneged"}


def test_cancel_of_a_granted_request_keeps_the_slot_and_of_an_event_is_refused() -> None:
    sim = Sim()
    desk = Resource(sim, 1)
    req = desk.request()
    sim.run()
    req.cancel()  # granted: like SimPy, cancel leaves it (release gives the slot back)
    assert desk.count == 1
    desk.release(req)
    sim.run()
    assert desk.count == 0
    with pytest.raises(simulacra.ConfigError,
                       match=r"cancel\(\): .* is not a resource, container or store request"):
        sim.event().cancel()
