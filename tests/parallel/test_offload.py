"""In-run offload: results apply at deterministic slots, the same on every pool.

The payload functions live at module level here: workers import this module
by name (pytest puts its directory on ``sys.path``, and spawned workers get
the parent's ``sys.path``).
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import simulacra
from simulacra import ConfigError, Interrupt, InvalidDelay, Sim, Trace
from simulacra.errors import OffloadError, OffloadTimeout, ThreadOwnershipError
from simulacra.parallel import Offloader, offload, use_pool

# --------------------------------------------------------------------------- payloads


def score(items: tuple[int, ...], rounds: int) -> tuple[int, float]:
    """A small pure-Python scoring function: deterministic, a little CPU."""
    acc = 0
    weight = 0.0
    for r in range(rounds):
        for item in items:
            acc = (acc * 31 + item * (r + 1)) % 1_000_003
            weight += (item % 7) / (r + 1)
    return acc, weight


def boom(x: int) -> None:
    raise ValueError(f"bad input {x}")


def echo(value: Any) -> Any:
    return value


class Unsendable(Exception):
    """An exception that does not survive pickling.

    It holds a lock, so no reducer can pickle it: a two-argument ``__init__``
    alone is not enough once ``distributed`` has installed tblib's exception
    pickling (a copyreg reducer that rebuilds exceptions from their state).
    """

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}/{b}")
        self.lock = threading.Lock()


def raise_unsendable() -> None:
    raise Unsendable(1, 2)


def return_lock() -> Any:
    return threading.Lock()


# --------------------------------------------------------------------------- the model


OffloadLike = Callable[..., simulacra.Event[Any]]


def reference(sim: Sim, fn: Callable[..., Any], *args: Any, delay: float) -> simulacra.Event[Any]:
    """The sequential reference of a strict offload: a delay whose value is fn(*args)."""
    return sim.delay(delay, fn(*args))


def pooled(sim: Sim, fn: Callable[..., Any], *args: Any, delay: float) -> simulacra.Event[Any]:
    return offload(sim, fn, *args, delay=delay)


def agent(sim: Sim, index: int, desk: simulacra.Resource, log: list[Any],
          call: OffloadLike) -> Iterator[simulacra.Event[Any]]:
    rng = sim.rng(f"agent-{index}")
    for step in range(4):
        items = tuple(rng.randrange(1000) for _ in range(5))
        # Delays on a grid of 0.25: several slots fall on the same instant.
        delay = rng.choice((0.0, 0.25, 0.5, 0.5, 1.0))
        result = yield call(sim, score, items, 30, delay=delay)
        log.append((sim.now, index, step, result))
        sim.record("scored", f"agent-{index}", result)
        with desk.request() as req:
            yield req
            ev = call(sim, echo, (index, step), delay=0.25)
            # The slot raced against a timeout at the same instant: the order shows.
            fired = yield ev | sim.delay(0.25)
            log.append((sim.now, index, ev in fired, ev.value))
        yield sim.delay(rng.expovariate(2.0))


def run_model(call: OffloadLike, *, pool: Offloader | None = None, ordering: str = "fifo",
              trace: bool = True, seed: int = 7) -> tuple[str | None, list[Any]]:
    sim = Sim(seed, trace=trace, ordering=ordering)
    if pool is not None:
        use_pool(sim, pool)
    desk = simulacra.Resource(sim, capacity=2)
    log: list[Any] = []
    for index in range(6):
        sim.spawn(agent, index, desk, log, call)
    # An offload from host code, before the run.
    host = call(sim, score, (1, 2, 3), 5, delay=0.5)
    sim.run()
    log.append(("host", host.value))
    sim._check_invariants()
    return (Trace.of(sim).digest() if trace else None), log


POOLS = [("inline", None), ("threads", 1), ("threads", 2), ("processes", 1), ("processes", 2)]


@pytest.fixture(scope="module")
def pools() -> Iterator[dict[tuple[str, int | None], Offloader]]:
    """One pool of each kind for the module: workers start once."""
    made = {key: Offloader(key[0], key[1], timeout=120.0) for key in POOLS}
    yield made
    for pool in made.values():
        pool.close()


# --------------------------------------------------------------------------- determinism


@pytest.mark.determinism
@pytest.mark.parametrize("ordering", ["fifo", "keyed"])
def test_trace_equals_sequential_reference_on_every_pool(
        pools: dict[tuple[str, int | None], Offloader], ordering: str) -> None:
    """Same seed, same trace: the plain-delay reference, inline, threads and processes x 1, 2."""
    expected_digest, expected_log = run_model(reference, ordering=ordering)
    reference_trace = None
    for key in POOLS:
        sim_digest, log = run_model(pooled, pool=pools[key], ordering=ordering)
        if sim_digest != expected_digest:  # name the first record that differs
            reference_trace = reference_trace or _trace_of(reference, ordering)
            simulacra.assert_equivalent(reference_trace, _trace_of(pooled, ordering, pools[key]))
        assert sim_digest == expected_digest, key
        assert log == expected_log, key


def _trace_of(call: OffloadLike, ordering: str, pool: Offloader | None = None) -> Trace:
    sim = Sim(7, trace=True, ordering=ordering)
    if pool is not None:
        use_pool(sim, pool)
    desk = simulacra.Resource(sim, capacity=2)
    for index in range(6):
        sim.spawn(agent, index, desk, [], call)
    call(sim, score, (1, 2, 3), 5, delay=0.5)
    sim.run()
    return Trace.of(sim)


@pytest.mark.determinism
def test_untraced_fast_loop_gives_the_same_results(
        pools: dict[tuple[str, int | None], Offloader]) -> None:
    """The untraced fifo run loop (a different code path) applies results identically."""
    _, expected = run_model(reference, trace=False)
    for key in (("inline", None), ("threads", 2), ("processes", 2)):
        _, log = run_model(pooled, pool=pools[key], trace=False)
        assert log == expected, key
    _, traced = run_model(pooled, pool=pools[("processes", 2)], trace=True)
    assert traced == expected


def test_the_model_has_power(pools: dict[tuple[str, int | None], Offloader]) -> None:
    """The determinism check can fail: another seed, or a slot off by a hair, changes the trace."""
    digest, _ = run_model(reference)
    assert run_model(reference, seed=8)[0] != digest

    def late(sim: Sim, fn: Callable[..., Any], *args: Any, delay: float) -> simulacra.Event[Any]:
        return offload(sim, fn, *args, delay=delay + 1e-9)

    assert run_model(late, pool=pools[("inline", None)])[0] != digest


def test_result_applies_exactly_at_the_slot_in_scheduling_order(sim: Sim) -> None:
    order: list[tuple[float, str]] = []

    def first(sim: Sim) -> Iterator[simulacra.Event[Any]]:
        yield sim.delay(2.0)
        order.append((sim.now, "delay scheduled before"))

    def offloader(sim: Sim) -> Iterator[simulacra.Event[Any]]:
        value = yield offload(sim, echo, "payload", delay=2.0)
        order.append((sim.now, value))

    def last(sim: Sim) -> Iterator[simulacra.Event[Any]]:
        yield sim.delay(2.0)
        order.append((sim.now, "delay scheduled after"))

    for fn in (first, offloader, last):
        sim.spawn(fn)
    sim.run()
    assert order == [(2.0, "delay scheduled before"), (2.0, "payload"),
                     (2.0, "delay scheduled after")]


def test_event_before_its_slot(sim: Sim) -> None:
    event = offload(sim, echo, 5, delay=1.0)
    assert event.triggered
    assert not event.processed
    assert "not ready" in repr(event.value)
    sim.run()
    assert event.processed
    assert event.value == 5


def test_arguments_are_a_snapshot_on_every_backend(
        pools: dict[tuple[str, int | None], Offloader]) -> None:
    for key in (("inline", None), ("threads", 1), ("processes", 1)):
        sim = Sim(0)
        items = [1, 2, 3]
        event = offload(sim, echo, items, delay=1.0, pool=pools[key])
        items.append(4)  # after submission: not seen by the payload
        sim.run()
        assert event.value == [1, 2, 3], key
        assert event.value is not items


def test_offload_from_a_keyed_sim_orders_like_a_delay() -> None:
    def model(call: OffloadLike) -> list[Any]:
        sim = Sim(3, ordering="keyed", trace=True)
        seen: list[Any] = []

        def proc(sim: Sim, name: str) -> Iterator[simulacra.Event[Any]]:
            value = yield call(sim, echo, name, delay=1.0)
            seen.append((sim.now, name, value))

        for name in ("a", "b", "c"):
            sim.spawn(proc, name)
        sim.run()
        return [*seen, Trace.of(sim).digest()]

    assert model(pooled) == model(reference)


def test_async_process_awaits_an_offload(sim: Sim) -> None:
    seen: list[Any] = []

    async def proc(sim: Sim) -> None:
        value = await offload(sim, echo, "awaited", delay=2.0)
        seen.append((sim.now, value))

    sim.spawn(proc)
    sim.run()
    assert seen == [(2.0, "awaited")]


@pytest.mark.slow
def test_forkserver_pool_gives_the_same_results_and_leaves_the_global_method() -> None:
    before = multiprocessing.get_start_method()

    def results(pool: Offloader | None) -> list[Any]:
        sim = Sim(0, trace=True)
        events = [offload(sim, math.factorial, n, delay=float(n % 3), pool=pool)
                  for n in range(20, 40)]
        sim.run()
        return [event.value for event in events] + [Trace.of(sim).digest()]

    with Offloader("processes", 2, start_method="forkserver") as pool:
        assert pool.start_method == "forkserver"
        assert results(pool) == results(None)
    assert multiprocessing.get_start_method() == before


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("key", [("inline", None), ("threads", 2), ("processes", 2)])
def test_payload_exception_fails_the_event_with_remote_traceback(
        pools: dict[tuple[str, int | None], Offloader], key: tuple[str, int | None]) -> None:
    sim = Sim(0)
    use_pool(sim, pools[key])
    caught: list[BaseException] = []

    def proc(sim: Sim) -> Iterator[simulacra.Event[Any]]:
        try:
            yield offload(sim, boom, 42, delay=1.0)
        except ValueError as exc:
            caught.append(exc)
            assert sim.now == 1.0

    sim.spawn(proc)
    sim.run()
    (exc,) = caught
    assert str(exc) == "bad input 42"
    chain = []
    cause: BaseException | None = exc
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__
    remote = chain[-1]
    assert "Traceback" in str(remote)
    assert "in boom" in str(remote)
    assert 'raise ValueError(f"bad input {x}")' in str(remote)


@pytest.mark.parametrize("traced", [False, True])
def test_unhandled_payload_exception_crashes_run(traced: bool) -> None:
    """As any failed event nobody waits on: in the fast loop and the traced loop alike."""
    sim = Sim(0, trace=traced)
    offload(sim, boom, 1, delay=1.0)
    with pytest.raises(ValueError, match="bad input 1"):
        sim.run()
    assert sim.now == 1.0


@pytest.mark.parametrize("traced", [False, True])
def test_failure_handled_by_a_condition_does_not_crash(traced: bool) -> None:
    sim = Sim(0, trace=traced)
    outcome: list[str] = []

    def proc(sim: Sim) -> Iterator[simulacra.Event[Any]]:
        try:
            yield offload(sim, boom, 1, delay=1.0) & sim.delay(5.0)
        except ValueError:
            outcome.append(f"failed at {sim.now}")

    sim.spawn(proc)
    sim.run()
    assert outcome == ["failed at 1.0"]


def test_exception_that_cannot_travel_back_becomes_offload_error(
        pools: dict[tuple[str, int | None], Offloader]) -> None:
    for key in (("inline", None), ("processes", 1)):
        sim = Sim(0)
        offload(sim, raise_unsendable, delay=1.0, pool=pools[key])
        with pytest.raises(OffloadError, match=r"raise_unsendable raised Unsendable: 1/2") as info:
            sim.run()
        # run() raises a copy of the event's exception, caused by it (as for any failed event).
        original = info.value.__cause__
        assert isinstance(original, OffloadError)
        assert "in raise_unsendable" in str(original.__cause__)


def test_unpicklable_result_is_an_offload_error(
        pools: dict[tuple[str, int | None], Offloader]) -> None:
    for key in (("inline", None), ("processes", 1)):
        sim = Sim(0)
        offload(sim, return_lock, delay=1.0, pool=pools[key])
        with pytest.raises(OffloadError, match="return_lock returned a lock, which cannot be"):
            sim.run()


def test_interrupted_waiter_leaves_the_slot_harmless(sim: Sim) -> None:
    log: list[Any] = []

    def waiter(sim: Sim) -> Iterator[simulacra.Event[Any]]:
        try:
            yield offload(sim, echo, 1, delay=5.0)
        except Interrupt as interrupt:
            log.append((sim.now, interrupt.cause))

    def interrupter(sim: Sim, proc: simulacra.Process[Any]) -> Iterator[simulacra.Event[Any]]:
        yield sim.delay(1.0)
        proc.interrupt("stop")

    proc = sim.spawn(waiter)
    sim.spawn(interrupter, proc)
    sim.run()
    assert log == [(1.0, "stop")]
    assert sim.now == 5.0  # the slot was still processed, and nobody resumed


@pytest.mark.slow
def test_hung_payload_times_out_and_only_it_is_blamed() -> None:
    """One worker: a payload queued behind a hung one still gets its result.

    The hung payload sleeps 60 s: had the timeout not fired, it would have
    returned None and no timeout would be logged. The timeout is generous
    (5 s) because starting a worker process on a loaded 2-core machine can
    take well over a second, and the innocent payload must not be blamed.
    """
    with Offloader("processes", 1, timeout=5.0) as pool:
        sim = Sim(0)
        use_pool(sim, pool)
        log: list[Any] = []

        def hung(sim: Sim) -> Iterator[simulacra.Event[Any]]:
            try:
                yield offload(sim, time.sleep, 60, delay=10.0)
            except OffloadTimeout as exc:
                log.append((sim.now, "timeout", str(exc)))

        def fine(sim: Sim) -> Iterator[simulacra.Event[Any]]:
            value = yield offload(sim, echo, "ok", delay=1.0)
            log.append((sim.now, "fine", value))
            value = yield offload(sim, echo, "again", delay=20.0)
            log.append((sim.now, "after", value))

        sim.spawn(hung)
        sim.spawn(fine)
        sim.run()
    assert log[0] == (1.0, "fine", "ok")
    assert log[1][:2] == (10.0, "timeout")
    assert "sleep" in log[1][2]
    assert "timeout=5.0" in log[1][2]
    assert log[2] == (21.0, "after", "again")
    assert isinstance(OffloadTimeout("x"), TimeoutError)


@pytest.mark.slow
def test_hung_payload_on_threads_times_out() -> None:
    with Offloader("threads", 2, timeout=3.0) as pool:
        sim = Sim(0)
        event = offload(sim, time.sleep, 10, delay=1.0, pool=pool)
        follow = offload(sim, echo, "next", delay=2.0, pool=pool)
        event.callbacks.append(lambda ev: setattr(ev, "defused", True))  # type: ignore[union-attr]
        sim.run()
        assert isinstance(event.value, OffloadTimeout)
        assert "runs on as a daemon" in str(event.value)
        assert follow.value == "next"


@pytest.mark.slow
def test_dead_worker_fails_its_event_and_the_pool_recovers() -> None:
    with Offloader("processes", 2, timeout=30.0) as pool:
        sim = Sim(0)
        use_pool(sim, pool)
        crash = offload(sim, functools.partial(os._exit, 3), delay=1.0)
        crash.callbacks.append(lambda ev: setattr(ev, "defused", True))  # type: ignore[union-attr]
        other = offload(sim, score, (1, 2), 10, delay=1.0)
        later = offload(sim, echo, "later", delay=3.0)
        sim.run()
        assert isinstance(crash.value, OffloadError)
        assert "died, even when it ran alone" in str(crash.value)
        assert other.value == score((1, 2), 10)
        assert later.value == "later"


def test_slot_after_close_fails_with_offload_error() -> None:
    for backend in ("inline", "threads"):
        sim = Sim(0)
        with Offloader(backend, 1) as pool:
            event = offload(sim, echo, 1, delay=1.0, pool=pool)
        event.callbacks.append(lambda ev: setattr(ev, "defused", True))  # type: ignore[union-attr]
        sim.run()
        assert isinstance(event.value, OffloadError)
        assert "closed before the result of echo" in str(event.value)


# --------------------------------------------------------------------------- bad input


def test_lambda_is_rejected_on_every_backend(
        pools: dict[tuple[str, int | None], Offloader]) -> None:
    """The same model must run on processes, so inline and threads reject it too."""
    for key in POOLS:
        with pytest.raises(ConfigError, match=r"expected a module-level function.*lambda"):
            offload(Sim(0), lambda x: x, 1, delay=1.0, pool=pools[key])


def test_unsendable_work_gives_clear_errors(sim: Sim) -> None:
    def local(x: int) -> int:
        return x

    with pytest.raises(ConfigError, match="local"):
        offload(sim, local, 1, delay=1.0)
    with pytest.raises(ConfigError, match=r"bound method 'Offloader\.start'"):
        offload(sim, Offloader("inline").start, delay=1.0)
    with pytest.raises(ConfigError, match=r"cannot be pickled.*no Sim"):
        offload(sim, echo, sim, delay=1.0)
    with pytest.raises(ConfigError, match="cannot be pickled"):
        offload(sim, echo, threading.Lock(), delay=1.0)
    with pytest.raises(ConfigError, match="expected a callable"):
        offload(sim, 42, delay=1.0)
    with pytest.raises(ConfigError, match="expected a Sim"):
        offload("sim", echo, 1, delay=1.0)  # type: ignore[arg-type]
    # Nothing was scheduled by the rejected calls.
    assert sim.peek() == float("inf")


@pytest.mark.parametrize("delay", [-1.0, float("nan"), float("inf"), "1", True])
def test_bad_delay(sim: Sim, delay: Any) -> None:
    with pytest.raises(InvalidDelay, match=r"offload\(delay=...\): expected a finite number"):
        offload(sim, echo, 1, delay=delay)


def test_strict_offload_needs_a_delay(sim: Sim) -> None:
    with pytest.raises(ConfigError, match="strict mode needs the simulated duration"):
        offload(sim, echo, 1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"backend": "gpu"}, "backend"),
        ({"backend": "threads", "max_workers": 0}, "max_workers"),
        ({"backend": "threads", "max_workers": 1.5}, "max_workers"),
        ({"backend": "inline", "max_workers": 2}, "max_workers"),
        ({"backend": "threads", "timeout": 0}, "timeout"),
        ({"backend": "processes", "start_method": "fork"}, "start_method"),
        ({"backend": "threads", "poll_interval": -1}, "poll_interval"),
    ],
)
def test_bad_pool_arguments(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"Offloader\({field}=...\)"):
        Offloader(**kwargs)


def test_closed_pool_and_bindings() -> None:
    sim = Sim(0)
    pool = Offloader("threads", 1)
    use_pool(sim, pool)
    pool.close()
    pool.close()  # idempotent
    assert pool.closed
    with pytest.raises(OffloadError, match="closed"):
        offload(sim, echo, 1, delay=1.0, pool=pool)
    with pytest.raises(OffloadError, match="closed"):
        use_pool(sim, pool)
    # Closing unbound it: the Sim is back on the inline default.
    event = offload(sim, echo, 2, delay=1.0)
    sim.run()
    assert event.value == 2
    with pytest.raises(ConfigError, match="expected an Offloader"):
        use_pool(sim, "threads")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="expected an Offloader"):
        offload(sim, echo, 1, delay=1.0, pool="threads")  # type: ignore[arg-type]


def test_pool_belongs_to_one_thread() -> None:
    with Offloader("threads", 1) as pool:
        offload(Sim(0), echo, 1, delay=1.0, pool=pool)
        errors: list[BaseException] = []

        def other() -> None:
            try:
                offload(Sim(0), echo, 1, delay=1.0, pool=pool)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert len(errors) == 1
        assert isinstance(errors[0], ThreadOwnershipError)


def test_default_inline_pool_serves_every_thread() -> None:
    results: list[Any] = []

    def run_one(seed: int) -> None:
        sim = Sim(seed)
        event = offload(sim, echo, seed, delay=1.0)
        sim.run()
        results.append(event.value)

    threads = [threading.Thread(target=run_one, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [0, 1, 2, 3]


def test_repr_and_properties() -> None:
    with Offloader("threads", 3, timeout=5.0, poll_interval=0.5) as pool:
        assert pool.backend == "threads"
        assert pool.max_workers == 3
        assert pool.timeout == 5.0
        assert pool.poll_interval == 0.5
        assert pool.start_method == "spawn"
        assert repr(pool) == "<Offloader threads x3 0 in flight>"
        assert pool.start() is pool
    assert repr(pool) == "<Offloader threads x3 closed>"


# --------------------------------------------------------------------------- non-strict


@pytest.mark.parametrize("backend", ["inline", "threads"])
def test_non_strict_results_arrive_no_earlier_than_delay(backend: str) -> None:
    with Offloader(backend, None if backend == "inline" else 2, poll_interval=0.5) as pool:
        sim = Sim(0)
        use_pool(sim, pool)
        got: list[tuple[float, Any]] = []

        def proc(sim: Sim, value: int) -> Iterator[simulacra.Event[Any]]:
            result = yield offload(sim, echo, value, delay=1.0, strict=False)
            got.append((sim.now, result))

        def busy(sim: Sim) -> Iterator[simulacra.Event[Any]]:
            for _ in range(20):
                yield sim.delay(0.25)

        for value in range(3):
            sim.spawn(proc, value)
        sim.spawn(busy)
        sim.run()
    assert sorted(value for _, value in got) == [0, 1, 2]
    assert all(when >= 1.0 for when, _ in got)
    if backend == "inline":  # done at submission: applied at the first tick from t=1
        assert {when for when, _ in got} == {1.0}


def test_non_strict_failure_and_idle_wait() -> None:
    """With nothing else scheduled the poller waits in wall-clock time, not in empty ticks."""
    with Offloader("threads", 1, poll_interval=1.0) as pool:
        sim = Sim(0)
        slow = offload(sim, time.sleep, 0.2, pool=pool, strict=False)
        failed = offload(sim, boom, 3, pool=pool, strict=False)
        failed.callbacks.append(lambda ev: setattr(ev, "defused", True))  # type: ignore[union-attr]
        sim.run()
        assert slow.ok
        assert slow.value is None
        assert isinstance(failed.value, ValueError)
        assert sim.now < 2.0  # not a run of empty ticks while the thread slept


@pytest.mark.slow
def test_payload_whose_module_a_worker_cannot_import(
        pools: dict[tuple[str, int | None], Offloader], monkeypatch: pytest.MonkeyPatch) -> None:
    """A function pickled by a name that exists only in this process fails with a clear error."""
    import types

    module = types.ModuleType("offload_only_here")
    exec("def twice(x):\n    return 2 * x\n", module.__dict__)  # noqa: S102
    monkeypatch.setitem(sys.modules, "offload_only_here", module)
    sim = Sim(0)
    offload(sim, module.twice, 2, delay=1.0, pool=pools[("processes", 1)])
    with pytest.raises(OffloadError, match="must be importable by name") as info:
        sim.run()
    assert "No module named 'offload_only_here'" in str(info.value)
    # Inline, the same payload runs: it is only the worker that cannot import it.
    inline = Sim(0)
    event = offload(inline, module.twice, 2, delay=1.0)
    inline.run()
    assert event.value == 4
