"""Behavioural tests of the kernel: Sim, Event, Process, conditions, interrupts, run/step.

Every expected value is derived in the test (or its docstring) from SimPy 4's
rules: events fire in ``(time, priority, scheduling order)``; process starts and
interrupts are urgent; a ``yield`` of a processed event resumes at once; a failed
event nobody handles crashes ``run()``. The SimPy differential suite
(``test_differential_simpy.py``) checks random models against SimPy itself; this
file pins the public API one behaviour at a time.
"""

from __future__ import annotations

import itertools
import math
import traceback
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulacra
from simulacra import (
    NORMAL,
    URGENT,
    ConditionValue,
    EmptySchedule,
    Event,
    EventNotReady,
    Interrupt,
    Process,
    ProcessGenerator,
    Sim,
)

# Hypothesis reports a failing example through libcst, whose import warns on this Python;
# with filterwarnings=error that would hide the real failure behind an INTERNALERROR.
pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

# --------------------------------------------------------------------------- Sim basics


def test_fresh_sim_state() -> None:
    sim = Sim(seed=42)
    assert sim.now == 0
    assert sim.active_process is None
    assert sim.peek() == math.inf
    assert sim.trace_records is None
    assert sim.tracer is None
    assert sim.run() is None
    assert sim.now == 0


def test_start_time_offsets_the_clock() -> None:
    sim = Sim(start=5.0)
    ev = sim.delay(2.5)
    assert sim.now == 5.0
    assert sim.peek() == 7.5
    sim.run()
    assert sim.now == 7.5
    assert ev.processed


def test_repr_of_sim_counts_pending_events() -> None:
    sim = Sim()
    sim.delay(1)
    sim.delay(0)
    text = repr(sim)
    assert "now=0" in text
    assert "pending=2" in text


def test_trace_true_records_in_memory() -> None:
    sim = Sim(seed=1, trace=True)

    def proc(sim: Sim) -> Any:
        yield sim.delay(2, value="v")
        sim.record("note", "model", {"k": 1})

    p = sim.spawn(proc, name="worker")
    sim.run()
    records = sim.trace_records
    assert records is not None
    kinds = [(t, kind, who) for t, kind, who, _ in records]
    assert (0, "spawn", "worker") in kinds
    assert (2, "resume", "worker") in kinds
    assert (2, "note", "model") in kinds
    assert (2, "exit", "worker") in kinds
    # Records come in time order.
    times = [t for t, *_ in records]
    assert times == sorted(times)
    assert not p.is_alive
    # The front-door Trace view sees the same records.
    assert len(simulacra.Trace.of(sim).records) == len(records)


def test_custom_tracer_receives_records() -> None:
    class Collect:
        def __init__(self) -> None:
            self.got: list[tuple[float, str, str, object]] = []

        def record(self, time: float, kind: str, who: str, payload: object) -> None:
            self.got.append((time, kind, who, payload))

    tracer = Collect()
    sim = Sim(trace=tracer)
    assert sim.tracer is tracer
    assert sim.trace_records is None  # the records went elsewhere

    def proc(sim: Sim) -> Any:
        yield sim.delay(1)

    sim.spawn(proc, name="p")
    sim.run()
    assert (0, "spawn", "p", None) in tracer.got
    assert any(kind == "exit" and who == "p" for _, kind, who, _ in tracer.got)


def test_record_is_a_noop_without_tracer(sim: Sim) -> None:
    sim.record("kind", "who", 1)  # must not raise
    assert sim.trace_records is None


def test_priority_constants() -> None:
    # Urgent events (process starts, interrupts) come before normal ones.
    assert URGENT < NORMAL


# --------------------------------------------------------------------------- spawn, identity


def test_active_process_inside_and_outside(sim: Sim) -> None:
    seen: list[Any] = []

    def proc(sim: Sim) -> Any:
        seen.append(sim.active_process)
        yield sim.delay(1)
        seen.append(sim.active_process)

    p = sim.spawn(proc)
    assert sim.active_process is None
    sim.run()
    assert seen == [p, p]
    assert sim.active_process is None


def test_active_process_is_none_in_callbacks(sim: Sim) -> None:
    seen: list[Any] = []
    ev = sim.delay(1)
    ev.callbacks.append(lambda e: seen.append(sim.active_process))
    sim.run()
    assert seen == [None]


def test_spawn_function_with_args_and_kwargs(sim: Sim) -> None:
    got: list[Any] = []

    def proc(s: Sim, a: int, b: int, *, c: str) -> Any:
        got.append((s, a, b, c))
        yield s.delay(a + b)
        return c * 2

    p = sim.spawn(proc, 1, 2, c="x")
    assert sim.run(until=p) == "xx"
    assert got == [(sim, 1, 2, "x")]
    assert sim.now == 3


def test_spawn_generator_object(sim: Sim) -> None:
    def proc(s: Sim, d: float) -> Any:
        yield s.delay(d)
        return s.now

    p = sim.spawn(proc(sim, 4))
    assert isinstance(p, Process)
    assert isinstance(p, Event)
    sim.run()
    assert p.value == 4


def test_process_constructor_is_spawn(sim: Sim) -> None:
    def proc(s: Sim) -> Any:
        yield s.delay(1)
        return "done"

    p = Process(sim, proc(sim), name="direct")
    assert p.name == "direct"
    sim.run()
    assert p.value == "done"


def test_simpy_aliases(sim: Sim) -> None:
    def proc(s: Sim) -> Any:
        v = yield s.timeout(2, value="t")
        return v

    p = sim.process(proc)
    sim.run()
    assert p.value == "t"
    assert sim.now == 2


def test_name_pid_who_repr(sim: Sim) -> None:
    def alpha(s: Sim) -> Any:
        yield s.delay(1)

    def beta(s: Sim) -> Any:
        yield s.delay(2)

    p1 = sim.spawn(alpha)
    p2 = sim.spawn(beta, name="the-beta")
    p3 = sim.spawn(alpha(sim))
    assert [p1.pid, p2.pid, p3.pid] == [1, 2, 3]
    assert p1.name == "alpha"
    assert p1.who == "alpha#1"
    assert p2.name == "the-beta"
    assert p2.who == "the-beta"
    assert p3.who == "alpha#3"
    assert "alpha#1" in repr(p1)
    assert "alive" in repr(p1)
    sim.run()
    assert "finished" in repr(p1)
    assert "the-beta" in repr(p2)


def test_is_alive_and_target(sim: Sim) -> None:
    def proc(s: Sim) -> Any:
        yield s.delay(5)

    p = sim.spawn(proc)
    assert p.is_alive
    sim.step()  # the start: the process now waits on its delay
    target = p.target
    assert target is not None
    assert not target.processed
    sim.run()
    assert target.processed
    assert p.target is None
    assert not p.is_alive


# --------------------------------------------------------------------------- events


def test_delay_value_and_time(sim: Sim) -> None:
    out: list[Any] = []

    def proc(s: Sim) -> Any:
        v = yield s.delay(3, value="hello")
        out.append((s.now, v))
        v = yield s.delay(0)
        out.append((s.now, v))

    sim.spawn(proc)
    sim.run()
    assert out == [(3, "hello"), (3, None)]


def test_event_states_through_succeed(sim: Sim) -> None:
    ev = sim.event()
    assert not ev.triggered
    assert not ev.processed
    with pytest.raises(EventNotReady):
        _ = ev.value
    with pytest.raises(EventNotReady):
        _ = ev.ok
    assert "pending" in repr(ev)

    assert ev.succeed("v") is ev
    assert ev.triggered
    assert not ev.processed
    assert ev.ok
    assert ev.value == "v"
    assert "triggered" in repr(ev)

    sim.run()
    assert ev.processed
    assert ev.ok
    assert ev.value == "v"
    assert "processed" in repr(ev)
    assert ev.callbacks is None


def test_event_states_through_fail(sim: Sim) -> None:
    ev = sim.event()
    err = ValueError("boom")
    ev.fail(err)
    assert ev.triggered
    assert ev.ok is False
    assert ev.value is err
    assert not ev.defused
    ev.defused = True
    assert ev.defused
    sim.run()  # defused: no crash
    assert ev.processed


def test_defused_can_be_unset(sim: Sim) -> None:
    ev = sim.event()
    ev.fail(KeyError("k"))
    ev.defused = True
    ev.defused = False
    with pytest.raises(KeyError):
        sim.run()


def test_event_constructor(sim: Sim) -> None:
    ev = Event(sim)
    assert ev.sim is sim
    assert not ev.triggered
    ev.succeed(1)
    sim.run()
    assert ev.processed


def test_trigger_copies_outcome(sim: Sim) -> None:
    src_ok = sim.event()
    dst_ok = sim.event()
    src_ok.callbacks.append(dst_ok.trigger)  # usable as a callback
    src_ok.succeed(7)

    src_bad = sim.event()
    dst_bad = sim.event()
    err = RuntimeError("bad")
    src_bad.fail(err)
    src_bad.defused = True
    dst_bad.trigger(src_bad)
    dst_bad.defused = True

    assert not dst_ok.triggered
    sim.run()
    assert dst_ok.ok
    assert dst_ok.value == 7
    assert dst_bad.ok is False
    assert dst_bad.value is err


def test_callbacks_run_in_subscription_order_after_waiter(sim: Sim) -> None:
    log: list[str] = []
    ev = sim.event()

    def waiter(s: Sim) -> Any:
        yield ev
        log.append("waiter")

    sim.spawn(waiter)
    sim.run()  # the waiter is now subscribed
    ev.callbacks.append(lambda e: log.append("cb1"))
    ev.callbacks.append(lambda e: log.append(f"cb2:{e.value}"))
    ev.succeed("x")
    sim.run()
    assert log == ["waiter", "cb1", "cb2:x"]


def test_same_time_events_fire_in_scheduling_order(sim: Sim) -> None:
    log: list[int] = []
    for i, d in enumerate([2, 1, 2, 0, 1, 0]):
        sim.delay(d).callbacks.append(lambda e, i=i: log.append(i))
    sim.run()
    # Sort by (time, scheduling order): a stable sort on the delay.
    expected = [i for i, _ in sorted(enumerate([2, 1, 2, 0, 1, 0]), key=lambda p: p[1])]
    assert log == expected


def test_yield_processed_event_resumes_at_once(sim: Sim) -> None:
    def proc(s: Sim) -> Any:
        early = s.delay(1, "early")
        yield s.delay(3)
        assert early.processed
        v = yield early  # already processed: no time passes
        return (s.now, v)

    p = sim.spawn(proc)
    assert sim.run(until=p) == (3, "early")


# --------------------------------------------------------------------------- conditions


def test_all_of_waits_for_every_event(sim: Sim) -> None:
    a = sim.delay(1, "A")
    b = sim.delay(3, "B")

    def proc(s: Sim) -> Any:
        value = yield a & b
        return s.now, value

    p = sim.spawn(proc)
    now, value = sim.run(until=p)
    assert now == 3
    assert isinstance(value, ConditionValue)
    assert value == {a: "A", b: "B"}
    assert list(value) == [a, b]


def test_any_of_fires_on_first(sim: Sim) -> None:
    a = sim.delay(4, "A")
    b = sim.delay(2, "B")

    def proc(s: Sim) -> Any:
        value = yield a | b
        return s.now, value

    p = sim.spawn(proc)
    now, value = sim.run(until=p)
    assert now == 2
    assert b in value
    assert a not in value
    assert value[b] == "B"
    with pytest.raises(KeyError):
        _ = value[a]
    assert value.todict() == {b: "B"}


def test_all_of_any_of_with_lists(sim: Sim) -> None:
    evs = [sim.delay(d, d * 10) for d in (3, 1, 2)]
    both = sim.all_of(evs)
    first = sim.any_of(evs)
    sim.run(until=first)
    assert sim.now == 1
    assert first.value.todict() == {evs[1]: 10}
    sim.run(until=both)
    assert sim.now == 3
    # Events appear in the order they were given, not the order they fired.
    assert list(both.value.keys()) == evs
    assert list(both.value.values()) == [30, 10, 20]
    assert list(both.value.items()) == list(zip(evs, [30, 10, 20], strict=True))
    assert len(both.value) == 3


@pytest.mark.parametrize("combine", ["all_of", "any_of"])
def test_empty_condition_succeeds_immediately(sim: Sim, combine: str) -> None:
    def proc(s: Sim) -> Any:
        yield s.delay(2)
        value = yield getattr(s, combine)([])
        return s.now, value

    p = sim.spawn(proc)
    now, value = sim.run(until=p)
    assert now == 2
    assert value == {}
    assert len(value) == 0
    assert value == ConditionValue()


def test_nested_conditions_flatten_values(sim: Sim) -> None:
    a = sim.delay(1, "a")
    b = sim.delay(2, "b")
    c = sim.delay(5, "c")
    cond = (a & b) | c
    assert sim.run(until=cond) == {a: "a", b: "b"}
    assert sim.now == 2
    assert c not in cond.value
    cond2 = (a | c) & b
    # Both sub-conditions are already satisfied: processed at the current time.
    value = sim.run(until=cond2)
    assert sim.now == 2
    assert value == {a: "a", b: "b"}


def test_condition_value_equality(sim: Sim) -> None:
    a = sim.delay(1, 1)
    b = sim.delay(1, 2)
    c1 = a & b
    c2 = sim.all_of([a, b])
    sim.run()
    assert c1.value == c2.value  # ConditionValue == ConditionValue
    assert c1.value != {a: 1}
    assert c1.value == {b: 2, a: 1}  # dict equality ignores order
    assert "ConditionValue" in repr(c1.value)
    with pytest.raises(TypeError):
        hash(c1.value)


def test_condition_fails_when_a_sub_event_fails(sim: Sim) -> None:
    ok = sim.delay(5, "fine")
    bad = sim.event()
    err = ValueError("sub failed")
    caught: list[Any] = []

    def failer(s: Sim) -> Any:
        yield s.delay(1)
        bad.fail(err)

    def waiter(s: Sim) -> Any:
        try:
            yield ok & bad
        except ValueError as exc:
            caught.append((s.now, exc.args, exc.__cause__ is err))

    sim.spawn(failer)
    sim.spawn(waiter)
    sim.run()
    assert caught == [(1, ("sub failed",), True)]
    assert bad.defused  # the condition handled it: run() did not crash


def test_any_of_also_fails_on_sub_failure(sim: Sim) -> None:
    slow = sim.delay(10)
    bad = sim.event()
    cond = slow | bad
    bad.fail(KeyError("k"))
    with pytest.raises(KeyError):
        sim.run(until=cond)
    assert sim.now == 0


# --------------------------------------------------------------------------- run / step / peek


def test_run_until_number_stops_before_events_at_that_time(sim: Sim) -> None:
    log: list[float] = []

    def ticker(s: Sim) -> Any:
        for _ in range(4):
            yield s.delay(5)
            log.append(s.now)

    sim.spawn(ticker)
    assert sim.run(until=10) is None
    assert sim.now == 10
    assert log == [5]  # the tick at exactly 10 has not happened
    assert sim.peek() == 10
    sim.run(until=15.5)
    assert log == [5, 10, 15]
    sim.run()
    assert log == [5, 10, 15, 20]


def test_run_until_event_returns_its_value(sim: Sim) -> None:
    ev = sim.event()

    def setter(s: Sim) -> Any:
        yield s.delay(3)
        ev.succeed({"answer": 42})
        yield s.delay(10)

    sim.spawn(setter)
    assert sim.run(until=ev) == {"answer": 42}
    assert sim.now == 3
    # Already processed: returned again without running.
    assert sim.run(until=ev) == {"answer": 42}
    assert sim.now == 3


def test_run_until_failed_event_raises_its_exception(sim: Sim) -> None:
    ev = sim.event()
    err = LookupError("until failed")

    def failer(s: Sim) -> Any:
        yield s.delay(2)
        ev.fail(err)

    sim.spawn(failer)
    with pytest.raises(LookupError) as info:
        sim.run(until=ev)
    assert info.value is err
    assert sim.now == 2


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"trace": True}, {"ordering": "keyed"}],
    ids=["fifo", "fifo-traced", "keyed"],
)
def test_run_until_event_resumes_its_waiters_later(kwargs: dict[str, Any]) -> None:
    """SimPy's hand-over: processes waiting on the until-event resume on the next run().

    ``run(until=ev)`` stops inside ``ev``'s callbacks; the callbacks after the
    stop (here: two waiting processes, subscribed after ``run`` subscribed its
    stop) stay with the event, which goes back to the head of the schedule, so
    ``peek()`` is still 1 and the next ``run()`` resumes both waiters at 1.
    With fifo ordering and no tracer this is the fast loop; a tracer or keyed
    ordering takes the general step path, which must behave the same.
    """
    sim = Sim(**kwargs)
    ev = sim.event()
    log: list[Any] = []

    def waiter(s: Sim, tag: str) -> Any:
        v = yield ev
        log.append((s.now, tag, v))

    def trigger(s: Sim) -> Any:
        yield s.delay(1)
        ev.succeed("x")
        yield s.delay(5)

    sim.spawn(waiter, "w1", name="w1")
    sim.spawn(waiter, "w2", name="w2")
    sim.spawn(trigger, name="t")
    assert sim.run(until=ev) == "x"
    assert log == []
    assert sim.peek() == 1  # the until-event is back at the head of the schedule
    sim.run()
    assert log == [(1, "w1", "x"), (1, "w2", "x")]
    assert sim.now == 6


def test_run_until_event_never_triggered_raises_empty_schedule(sim: Sim) -> None:
    ev = sim.event()
    sim.delay(1)
    with pytest.raises(EmptySchedule):
        sim.run(until=ev)
    assert sim.now == 1


def test_step_and_peek(sim: Sim) -> None:
    assert sim.peek() == math.inf
    with pytest.raises(EmptySchedule):
        sim.step()
    a = sim.delay(3)
    b = sim.delay(1)
    assert sim.peek() == 1
    sim.step()
    assert sim.now == 1
    assert b.processed
    assert not a.processed
    assert sim.peek() == 3
    sim.step()
    assert sim.now == 3
    assert a.processed
    assert sim.peek() == math.inf
    with pytest.raises(EmptySchedule):
        sim.step()


def test_peek_sees_current_time_events(sim: Sim) -> None:
    sim.delay(5)
    sim.event().succeed()
    assert sim.peek() == 0


# --------------------------------------------------------------------------- processes as events


def test_yield_process_gets_return_value(sim: Sim) -> None:
    def child(s: Sim, x: int) -> Any:
        yield s.delay(x)
        return x * 100

    def parent(s: Sim) -> Any:
        c1 = s.spawn(child, 2)
        c2 = s.spawn(child, 1)
        v1 = yield c1
        t1 = s.now
        v2 = yield c2  # finished at 1, processed: resumes at once
        return (t1, v1, s.now, v2)

    p = sim.spawn(parent)
    assert sim.run(until=p) == (2, 200, 2, 100)


def test_failed_process_reraises_in_waiter(sim: Sim) -> None:
    originals: list[BaseException] = []

    def child(s: Sim) -> Any:
        yield s.delay(1)
        err = ValueError("child broke")
        originals.append(err)
        raise err

    def parent(s: Sim) -> Any:
        c = s.spawn(child)
        try:
            yield c
        except ValueError as exc:
            return (s.now, str(exc), exc.__cause__ is originals[0], c.ok)
        return None

    p = sim.spawn(parent)
    assert sim.run(until=p) == (1, "child broke", True, False)


def _explode_here(message: str) -> None:
    raise ZeroDivisionError(message)


def test_unhandled_failure_crashes_run_with_cause_and_traceback(sim: Sim) -> None:
    def doomed(s: Sim) -> Any:
        yield s.delay(2)
        _explode_here("kaboom")

    sim.spawn(doomed)
    with pytest.raises(ZeroDivisionError) as info:
        sim.run()
    assert sim.now == 2
    cause = info.value.__cause__
    assert isinstance(cause, ZeroDivisionError)
    assert cause.args == ("kaboom",)
    names = [frame.name for frame in traceback.extract_tb(cause.__traceback__)]
    assert "doomed" in names
    assert "_explode_here" in names
    assert names[-1] == "_explode_here"


def test_unhandled_failed_plain_event_crashes_run(sim: Sim) -> None:
    sim.event().fail(KeyError("nobody"))
    with pytest.raises(KeyError) as info:
        sim.run()
    assert info.value.args == ("nobody",)


def test_unhandled_failure_crashes_step(sim: Sim) -> None:
    def doomed(s: Sim) -> Any:
        raise RuntimeError("at start")
        yield  # pragma: no cover

    sim.spawn(doomed)
    sim.step()  # the start: the process fails, its event is scheduled
    with pytest.raises(RuntimeError, match="at start"):
        sim.step()


def test_a_process_raising_empty_schedule_still_crashes_run(sim: Sim) -> None:
    """An EmptySchedule escaping a *process* is a failure like any other.

    ``run()`` uses EmptySchedule internally to mean "no events left"; an
    exception of that type raised by model code (here: stepping another,
    empty Sim) must not be mistaken for it and silently swallowed.
    """

    def stepper(s: Sim) -> Any:
        yield s.delay(1)
        Sim().step()  # raises EmptySchedule inside the process

    sim.spawn(stepper)
    sim.delay(5)
    with pytest.raises(EmptySchedule):
        sim.run()
    assert sim.now == 1


# --------------------------------------------------------------------------- interrupts


def test_interrupt_delivers_cause(sim: Sim) -> None:
    got: list[Any] = []

    def victim(s: Sim) -> Any:
        try:
            yield s.delay(10)
        except Interrupt as intr:
            got.append((s.now, intr.cause, type(intr.cause).__name__))

    def attacker(s: Sim, v: Process[Any]) -> Any:
        yield s.delay(3)
        v.interrupt({"why": "test"})

    v = sim.spawn(victim)
    sim.spawn(attacker, v)
    sim.run()
    assert got == [(3, {"why": "test"}, "dict")]


def test_interrupted_delay_fires_later_without_resuming(sim: Sim) -> None:
    log: list[Any] = []
    holder: list[Event[Any]] = []

    def victim(s: Sim) -> Any:
        d = s.delay(10, "late")
        holder.append(d)
        try:
            yield d
            log.append(("resumed by delay", s.now))
        except Interrupt:
            log.append(("interrupted", s.now))
        yield s.delay(20)
        log.append(("done", s.now))

    def attacker(s: Sim, v: Process[Any]) -> Any:
        yield s.delay(4)
        v.interrupt()

    v = sim.spawn(victim)
    sim.spawn(attacker, v)
    sim.run(until=9)
    assert not holder[0].processed
    sim.run(until=11)
    assert holder[0].processed  # the delay was not cancelled
    sim.run()
    assert log == [("interrupted", 4), ("done", 24)]


def test_interrupt_is_urgent(sim: Sim) -> None:
    """The interrupt is delivered before normal events already scheduled at that time."""
    log: list[str] = []

    def victim(s: Sim) -> Any:
        try:
            yield s.event()
        except Interrupt:
            log.append("victim")

    def attacker(s: Sim, v: Process[Any]) -> Any:
        yield s.delay(5)
        log.append("attacker")
        v.interrupt()

    def bystander(s: Sim) -> Any:
        yield s.delay(5)  # scheduled after the attacker's delay: fires after it
        log.append("bystander")

    v = sim.spawn(victim)
    sim.spawn(attacker, v)
    sim.spawn(bystander)
    sim.run()
    assert log == ["attacker", "victim", "bystander"]


def test_multiple_interrupts_in_one_instant(sim: Sim) -> None:
    causes: list[Any] = []

    def victim(s: Sim) -> Any:
        while len(causes) < 3:
            try:
                yield s.delay(100)
            except Interrupt as intr:
                causes.append((s.now, intr.cause))
        return "survived"

    def attacker(s: Sim, v: Process[Any]) -> Any:
        yield s.delay(1)
        v.interrupt("first")
        v.interrupt("second")
        yield s.delay(1)
        v.interrupt("third")

    v = sim.spawn(victim)
    sim.spawn(attacker, v)
    sim.run()
    assert causes == [(1, "first"), (1, "second"), (2, "third")]
    assert v.value == "survived"
    # The abandoned delays (due 0+100, 1+100 and 1+100) still fire and resume nobody.
    assert sim.now == 101


def test_second_interrupt_after_victim_finished_in_same_instant_is_dropped(sim: Sim) -> None:
    def victim(s: Sim) -> Any:
        try:
            yield s.delay(100)
        except Interrupt as intr:
            return f"stopped by {intr.cause}"
        return "not interrupted"

    def attacker(s: Sim, v: Process[Any]) -> Any:
        yield s.delay(1)
        v.interrupt("a")
        v.interrupt("b")  # still alive now: accepted; delivered after it finished

    v = sim.spawn(victim)
    sim.spawn(attacker, v)
    sim.run()
    assert v.value == "stopped by a"


@pytest.mark.parametrize("ordering", ["fifo", "keyed"])
def test_interrupt_before_the_process_started(ordering: str) -> None:
    """Start and interrupt are both urgent, the start scheduled first (SimPy's order).

    So the process runs up to its first ``yield`` and the interrupt is thrown in
    there, still at t=0.
    """
    sim = Sim(ordering=ordering)
    log: list[Any] = []

    def victim(s: Sim) -> ProcessGenerator[str]:
        log.append(("started", s.now))
        try:
            yield s.delay(5)
        except Interrupt as intr:
            log.append(("interrupted", s.now, intr.cause))
            return "stopped"
        return "ran"

    v = sim.spawn(victim, name="victim")
    v.interrupt("early")
    sim.run()
    assert log == [("started", 0), ("interrupted", 0, "early")]
    assert v.value == "stopped"
    assert sim.now == 5  # the abandoned delay still fires


def test_interrupting_finished_process_raises_dead_process(sim: Sim) -> None:
    def quick(s: Sim) -> Any:
        yield s.delay(1)

    q = sim.spawn(quick, name="quick")
    sim.run()
    assert not q.is_alive
    with pytest.raises(simulacra.DeadProcess, match="quick"):
        q.interrupt("late")


def test_self_interrupt_raises_in_the_process(sim: Sim) -> None:
    def selfish(s: Sim) -> Any:
        yield s.delay(1)
        me = s.active_process
        assert me is not None
        try:
            me.interrupt()
        except simulacra.SelfInterrupt as exc:
            return str(exc)
        return None

    p = sim.spawn(selfish, name="selfish")
    result = sim.run(until=p)
    assert "selfish" in result


def test_interrupt_process_waiting_on_condition(sim: Sim) -> None:
    log: list[Any] = []
    a = sim.delay(5, "a")
    b = sim.delay(6, "b")

    def victim(s: Sim) -> Any:
        try:
            yield a & b
            log.append("condition")
        except Interrupt:
            log.append(("interrupted", s.now))
        v = yield s.delay(10, "after")
        log.append((v, s.now))

    def attacker(s: Sim, v: Process[Any]) -> Any:
        yield s.delay(2)
        v.interrupt()

    v = sim.spawn(victim)
    sim.spawn(attacker, v)
    sim.run()
    assert log == [("interrupted", 2), ("after", 12)]


def test_unhandled_interrupt_fails_the_process(sim: Sim) -> None:
    def victim(s: Sim) -> Any:
        yield s.delay(10)

    def attacker(s: Sim, v: Process[Any]) -> Any:
        yield s.delay(1)
        v.interrupt("stop")
        try:
            yield v
        except Interrupt as intr:
            return intr.cause
        return None

    v = sim.spawn(victim)
    a = sim.spawn(attacker, v)
    sim.run()
    assert a.value == "stop"
    assert v.ok is False
    assert isinstance(v.value, Interrupt)


# --------------------------------------------------------------------------- random streams


def test_rng_reproducible_and_independent_of_creation_order() -> None:
    s1 = Sim(seed=2024)
    s2 = Sim(seed=2024)
    a1 = s1.rng("arrivals")
    b1 = s1.rng("service")
    b2 = s2.rng("service")  # created in the other order
    a2 = s2.rng("arrivals")
    draws_a1 = [a1.random() for _ in range(5)]
    draws_b1 = [b1.random() for _ in range(5)]
    draws_b2 = [b2.random() for _ in range(5)]
    draws_a2 = [a2.random() for _ in range(5)]
    assert draws_a1 == draws_a2
    assert draws_b1 == draws_b2
    assert draws_a1 != draws_b1  # different names, different streams
    assert s1.rng("arrivals") is a1  # made once, then reused


def test_rng_depends_on_seed() -> None:
    x = [Sim(seed=1).rng("s").random() for _ in range(2)]
    y = Sim(seed=2).rng("s").random()
    assert x[0] == x[1]
    assert x[0] != y


def test_np_rng_reproducible() -> None:
    np = pytest.importorskip("numpy")
    g1 = Sim(seed="abc").np_rng("noise")
    g2 = Sim(seed="abc").np_rng("noise")
    assert isinstance(g1, np.random.Generator)
    assert g1.random(4).tolist() == g2.random(4).tolist()
    g3 = Sim(seed="abd").np_rng("noise")
    assert g3.random() != Sim(seed="abc").np_rng("noise").random()


def test_seed_property_and_streams() -> None:
    sim = Sim(seed=simulacra.SeedTree(5))
    assert isinstance(sim.seed, simulacra.SeedTree)
    assert isinstance(sim.streams, simulacra.Streams)


# --------------------------------------------------------------------------- Hypothesis: order

_programs = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3),  # start delay of the process
        st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=5),
    ),
    min_size=1,
    max_size=6,
)


def _run_schedule(programs: list[tuple[int, list[int]]], mode: str, **kw: Any) -> list[Any]:
    """Processes that yield delays; log (fire time, sequence number, due time) on resume.

    Each delay gets a global sequence number when it is *created*, i.e. in
    scheduling order. Every delay has exactly one waiter, so the order of
    resumes is the order the delays were processed.
    """
    sim = Sim(seed=0, **kw)
    seq = itertools.count()
    log: list[Any] = []

    def proc(s: Sim, start: int, delays: list[int]) -> Any:
        yield s.delay(start)
        for d in delays:
            n = next(seq)
            due = s.now + d
            yield s.delay(d)
            log.append((s.now, n, due))

    for start, delays in programs:
        sim.spawn(proc, start, delays)
    if mode == "run":
        sim.run()
    else:
        while sim.peek() != math.inf:
            sim.step()
    sim._check_invariants()
    return log


@settings(max_examples=60, deadline=None)
@given(_programs)
def test_delays_fire_in_time_then_scheduling_order(programs: list[tuple[int, list[int]]]) -> None:
    log = _run_schedule(programs, "run")
    assert len(log) == sum(len(d) for _, d in programs)
    for fired, _, due in log:
        assert fired == due
    keys = [(fired, n) for fired, n, _ in log]
    assert keys == sorted(keys)


@settings(max_examples=40, deadline=None)
@given(_programs)
def test_step_loop_equals_run(programs: list[tuple[int, list[int]]]) -> None:
    by_run = _run_schedule(programs, "run")
    assert _run_schedule(programs, "step") == by_run
    assert _run_schedule(programs, "run", trace=True) == by_run


# --------------------------------------------------------------------------- Hypothesis: invariants

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("delay"), st.integers(0, 3)),
        st.tuples(st.just("use"), st.integers(0, 3)),
        st.tuples(st.just("put"), st.integers(0, 9)),
        st.tuples(st.just("get"), st.integers(0, 2)),
        st.tuples(st.just("interrupt"), st.integers(0, 5)),
        st.tuples(st.just("any"), st.integers(1, 3)),
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_ops, min_size=1, max_size=5),
    st.sampled_from(["fifo", "keyed"]),
    st.integers(1, 8),
)
def test_kernel_invariants_hold_after_random_models(
    programs: list[list[tuple[str, int]]], ordering: str, split: int
) -> None:
    sim = Sim(seed=0, ordering=ordering)
    res = simulacra.Resource(sim, capacity=1)
    store: simulacra.Store[int] = simulacra.Store(sim, capacity=2)
    procs: list[Process[Any]] = []

    def proc(s: Sim, ops: list[tuple[str, int]]) -> Any:
        for kind, arg in ops:
            try:
                if kind == "delay":
                    yield s.delay(arg)
                elif kind == "use":
                    with res.request() as req:
                        yield req
                        yield s.delay(arg)
                elif kind == "put":
                    yield store.put(arg)
                elif kind == "get":
                    yield store.get() | s.delay(arg)
                elif kind == "interrupt":
                    yield s.delay(0)  # every process has started (starts are urgent)
                    target = procs[arg % len(procs)]
                    if target.is_alive and target is not s.active_process:
                        target.interrupt(arg)
                    yield s.delay(0)
                else:
                    yield s.any_of([s.delay(arg), s.delay(arg + 1)])
            except Interrupt:
                pass

    procs.extend(sim.spawn(proc, ops) for ops in programs)
    sim.run(until=split)
    sim._check_invariants()
    sim.run()
    sim._check_invariants()
    assert sim.peek() == math.inf
    assert res.count == 0  # every `with` block released or cancelled its request
    assert not res.queue
