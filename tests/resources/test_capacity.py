"""A resource whose capacity changes during a run (``res.capacity = n``).

The rule: requests in service are kept (lowering never preempts), a rise
grants the waiting requests at once in their order, and later releases grant
them as slots free up under the new capacity. SimPy has no setter, so the
oracle is a plain-Python statement of the rule (``_capacity_model.oracle``);
random schedules of requests, releases, give-ups and capacity changes must
match it on the kernel this process has, and give identical logs, statistics
and trace digests under the pure and the compiled kernel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulacra import (
    ConfigError,
    Interrupt,
    PreemptiveResource,
    PriorityResource,
    Resource,
    Sim,
)

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # --import-mode=importlib
    sys.path.insert(0, str(HERE))

from _capacity_model import KINDS, Schedule, oracle, run  # noqa: E402

SRC = HERE.parents[1] / "src"
BUILT = importlib.util.find_spec("simulacra.core._ckernel") is not None

pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)


# --------------------------------------------------------------------------- by hand


def test_a_rise_grants_the_waiting_requests_at_once_in_their_order(sim: Sim) -> None:
    res = Resource(sim, capacity=1)
    reqs = [res.request() for _ in range(4)]
    assert [r.triggered for r in reqs] == [True, False, False, False]

    res.capacity = 3

    assert res.capacity == 3
    assert [r.triggered for r in reqs] == [True, True, True, False]
    assert res.users == reqs[:3]
    assert list(res.queue) == reqs[3:]


def test_a_cut_keeps_the_users_and_grants_nobody_until_below_it(sim: Sim) -> None:
    res = Resource(sim, capacity=3)
    held = [res.request() for _ in range(3)]
    waiting = res.request()
    res.capacity = 1
    assert res.users == held  # nobody is evicted
    res.release(held[0])
    sim.run()
    assert not waiting.triggered  # 2 users, 1 slot
    res.release(held[1])
    sim.run()
    assert not waiting.triggered  # 1 user, 1 slot
    res.release(held[2])
    sim.run()
    assert waiting.triggered
    assert res.users == [waiting]


def test_changes_in_a_process_take_effect_at_its_time() -> None:
    sim = Sim(seed=0)
    res = Resource(sim, capacity=1)
    granted: dict[str, float] = {}

    def user(sim: Sim, name: str, arrival: float, hold: float) -> Any:
        yield sim.delay(arrival)
        with res.request() as req:
            yield req
            granted[name] = sim.now
            yield sim.delay(hold)

    def manager(sim: Sim) -> Any:
        yield sim.delay(2.5)
        res.capacity = 2
        yield sim.delay(5.0)
        res.capacity = 1

    for name, arrival, hold in (("a", 0, 10), ("b", 0, 6), ("c", 3, 30), ("d", 8.75, 1),
                                ("e", 9, 1)):
        sim.spawn(user, name, arrival, hold)
    sim.spawn(manager)
    sim.run()
    # b waits from 0 and is granted by the rise at 2.5 (to 8.5); c waits from 3. The cut
    # to 1 at 7.5 keeps a and b; b's release at 8.5 leaves a alone in the one slot, so c
    # waits for a's release at 10 (to 40); d and e follow in their order.
    assert granted == {"a": 0.0, "b": 2.5, "c": 10.0, "d": 40.0, "e": 41.0}


@pytest.mark.parametrize("cls", [PriorityResource, PreemptiveResource])
def test_a_priority_resource_grants_by_priority_on_a_rise(sim: Sim, cls: type[Any]) -> None:
    res = cls(sim, capacity=1)
    first = res.request(priority=5, preempt=False)
    low = res.request(priority=9, preempt=False)
    high = res.request(priority=1, preempt=False)
    mid = res.request(priority=4, preempt=False)
    assert first.triggered

    res.capacity = 3

    assert res.users == [first, high, mid]
    assert res.queue == [low]


def test_a_cut_never_preempts_and_a_preempting_request_evicts_enough_or_none() -> None:
    sim = Sim(seed=0)
    res = PreemptiveResource(sim, capacity=3)
    log: list[tuple[float, str, str]] = []

    def user(sim: Sim, name: str, at: float, priority: int) -> Any:
        yield sim.delay(at)
        with res.request(priority=priority) as req:
            yield req
            log.append((sim.now, name, "granted"))
            try:
                yield sim.delay(100)
            except Interrupt as exc:
                log.append((sim.now, name, type(exc.cause).__name__.lower()))

    def cut(sim: Sim) -> Any:
        yield sim.delay(1)
        res.capacity = 1

    for name, at, priority in (("u1", 0, 5), ("u2", 0, 6), ("u3", 0, 7),
                               ("x", 2, 6), ("y", 3, 0)):
        sim.spawn(user, name, at, priority)
    sim.spawn(cut)
    sim.run(until=4)
    # At 1 the cut evicts nobody. At 2, x (priority 6) would need to evict 3 users
    # for a slot, and only u3 has a lower priority: x evicts none and waits. At 3, y
    # (priority 0) evicts all three users (u3 first: SimPy's victim, the largest key).
    assert log == [(0, "u1", "granted"), (0, "u2", "granted"), (0, "u3", "granted"),
                   (3, "u3", "preempted"), (3, "u2", "preempted"), (3, "u1", "preempted"),
                   (3, "y", "granted")]
    assert (res.count, len(res.queue)) == (1, 1)  # y holds the one slot; x still waits


@pytest.mark.parametrize("bad", [0, -1, 2.5, 3.0, True, False, "3", None])
@pytest.mark.parametrize("cls", [Resource, PriorityResource, PreemptiveResource])
def test_a_bad_capacity_is_refused_naming_the_field(sim: Sim, cls: type[Any],
                                                    bad: object) -> None:
    res = cls(sim, capacity=2)
    held = res.request()
    with pytest.raises(ConfigError) as info:
        res.capacity = bad
    assert str(info.value) == (
        f"{cls.__name__}.capacity = {bad!r}: expected an int >= 1 (the number of slots), "
        f"got {type(bad).__name__} {bad!r}")
    assert res.capacity == 2  # unchanged
    assert res.users == [held]


def test_statistics_weigh_utilisation_by_the_capacity_in_force() -> None:
    sim = Sim(seed=0)
    res = Resource(sim, capacity=2)

    def user(sim: Sim) -> Any:
        with res.request() as req:
            yield req
            yield sim.delay(10)

    def grow(sim: Sim) -> Any:
        yield sim.delay(4)
        res.capacity = 4

    sim.spawn(user)
    sim.spawn(grow)
    sim.run()
    stats = res.statistics()
    # One user for 10; slot-time 2 * 4 + 4 * 6 = 32.
    assert stats.capacity == 4
    assert stats.utilisation == 10 / 32


def test_a_monitored_resource_records_the_change(sim: Sim) -> None:
    res = Resource(sim, capacity=2, monitor="desk")
    res.request()
    res.request()
    res.request()
    sim.run(until=1)
    res.capacity = 4
    sim.run(until=2)
    res.capacity = 1
    util = res.monitor().utilisation
    queue = res.monitor().queue
    assert list(zip(util.times, util.values, strict=True)) == [(0.0, 1.0), (1.0, 0.75),
                                                                (2.0, 3.0)]
    assert list(zip(queue.times, queue.values, strict=True)) == [(0.0, 1), (1.0, 0)]


# --------------------------------------------------------------------------- random


def _schedules(kinds: tuple[str, ...] = tuple(KINDS)) -> st.SearchStrategy[Schedule]:
    customer = st.tuples(st.integers(0, 40), st.integers(1, 12), st.integers(0, 3),
                         st.one_of(st.none(), st.integers(0, 10)))
    change = st.tuples(st.integers(0, 60), st.integers(1, 5))
    return st.builds(
        Schedule,
        st.sampled_from(kinds),
        st.integers(1, 4),
        st.lists(customer, min_size=1, max_size=15).map(tuple),
        st.lists(change, max_size=10).map(tuple),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schedules())
def test_random_schedules_follow_the_rule(schedule: Schedule) -> None:
    """Grant and give-up times equal the oracle's, on this process's kernel."""
    got = run(schedule)
    assert got["outcome"] == oracle(schedule), got["log"]


def _run_both(batch: list[Schedule], tmp: Path) -> dict[str, Any]:
    src = tmp / "schedules.json"
    src.write_text(json.dumps([s.to_data() for s in batch]))
    outs = {}
    for kernel in ("python", "compiled"):
        out = tmp / f"out-{kernel}.json"
        env = {**os.environ, "SIMULACRA_KERNEL": kernel,
               "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, str(HERE / "_capacity_model.py"), str(src),
                               str(out)], capture_output=True, text=True, env=env,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        outs[kernel] = json.loads(out.read_text())
        assert outs[kernel]["kernel"] == kernel
    return outs


@pytest.mark.slow
def test_both_kernels_give_identical_traces(tmp_path: Path) -> None:
    """The same 200 random schedules under each kernel: logs, statistics, digests equal."""
    if not BUILT:
        why = "the compiled kernel is not built (python -m pip install -e .)"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {why}")
        pytest.skip(why)
    batch: list[Schedule] = []

    @settings(max_examples=200, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(_schedules())
    def collect(schedule: Schedule) -> None:
        batch.append(schedule)

    collect()
    assert len(batch) >= 100
    outs = _run_both(batch, tmp_path)
    pure, compiled = outs["python"]["runs"], outs["compiled"]["runs"]
    for schedule, want, got in zip(batch, pure, compiled, strict=True):
        assert got == want, schedule
        expected = oracle(schedule)
        assert {int(i): tuple(o) for i, o in want["outcome"]} == expected, schedule
    assert len({r["digest"] for r in pure}) > len(pure) // 2  # the schedules differ
