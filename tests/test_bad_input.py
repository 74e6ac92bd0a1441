"""Misuse gives a clear error from simulacra's exception tree.

For every case: the exception has the documented type (and builtin base),
is a ``simulacra.SimError``, its message names the process or field involved
and what was expected, and it survives ``pickle`` with the same type and text
(errors travel between worker processes).
"""

from __future__ import annotations

import asyncio
import math
import pickle
import threading
from pathlib import Path
from typing import Any

import pytest

import simulacra
from simulacra import (
    AlreadyTriggered,
    CapacityExceeded,
    ConfigError,
    Container,
    DeadProcess,
    EmptySchedule,
    EventNotReady,
    FilterStore,
    ForeignEvent,
    ForeignRequest,
    InvalidDelay,
    NotAnEvent,
    PreemptiveResource,
    PriorityResource,
    PriorityStore,
    Resource,
    SelfInterrupt,
    Sim,
    SimError,
    Store,
    ThreadOwnershipError,
    UntilInPast,
)

#: Generous upper bound for thread handshakes; only reached if something hangs.
HANDSHAKE_S = 30.0


def check_error(exc: BaseException, kind: type[BaseException], *fragments: str) -> None:
    """*exc* is a *kind*, a SimError, names every fragment, and pickles faithfully."""
    assert isinstance(exc, kind), f"{type(exc).__name__} is not a {kind.__name__}: {exc}"
    assert isinstance(exc, SimError)
    text = str(exc)
    assert text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    clone = pickle.loads(pickle.dumps(exc))  # noqa: S301  (our own bytes)
    assert type(clone) is type(exc)
    assert str(clone) == text


def run_process_and_catch(sim: Sim, body: Any, name: str) -> BaseException:
    """Run *body* as a process called *name*; return the exception it caught."""
    caught: list[BaseException] = []

    def proc(s: Sim) -> Any:
        try:
            yield from body(s)
        except SimError as exc:
            caught.append(exc)
        yield s.delay(1)  # the process goes on after handling the error

    p = sim.spawn(proc, name=name)
    sim.run()
    assert not p.is_alive
    assert p.ok
    assert len(caught) == 1, "the error was not raised inside the process"
    return caught[0]


# --------------------------------------------------------------------------- the tree


@pytest.mark.parametrize(
    ("kind", "bases"),
    [
        (simulacra.ScheduleError, (SimError,)),
        (EmptySchedule, (simulacra.ScheduleError,)),
        (InvalidDelay, (simulacra.ScheduleError, ValueError)),
        (UntilInPast, (simulacra.ScheduleError, ValueError)),
        (simulacra.EventError, (SimError,)),
        (AlreadyTriggered, (simulacra.EventError, RuntimeError)),
        (EventNotReady, (simulacra.EventError, AttributeError)),
        (NotAnEvent, (simulacra.EventError, TypeError)),
        (ForeignEvent, (simulacra.EventError, ValueError)),
        (simulacra.ProcessError, (SimError,)),
        (DeadProcess, (simulacra.ProcessError, RuntimeError)),
        (SelfInterrupt, (simulacra.ProcessError, RuntimeError)),
        (simulacra.ResourceError, (SimError,)),
        (CapacityExceeded, (simulacra.ResourceError, ValueError)),
        (ForeignRequest, (simulacra.ResourceError, ValueError)),
        (ConfigError, (SimError, ValueError)),
        (ThreadOwnershipError, (SimError, RuntimeError)),
        (simulacra.DeterminismError, (SimError,)),
        (simulacra.TraceError, (SimError, ValueError)),
        (simulacra.Interrupt, (SimError,)),
    ],
)
def test_exception_tree(kind: type[BaseException], bases: tuple[type, ...]) -> None:
    """The tree documented in ``simulacra.errors``; every error pickles with its message."""
    for base in bases:
        assert issubclass(kind, base)
    err = kind("some message")
    clone = pickle.loads(pickle.dumps(err))  # noqa: S301  (our own bytes)
    assert type(clone) is kind
    assert str(clone) == str(err)


def test_kernel_bug_is_outside_sim_error() -> None:
    assert not issubclass(simulacra.KernelBug, SimError)


def test_interrupt_cause_survives_pickle() -> None:
    intr = simulacra.Interrupt({"reason": "x"})
    clone = pickle.loads(pickle.dumps(intr))  # noqa: S301  (our own bytes)
    assert clone.cause == {"reason": "x"}
    assert "reason" in str(clone)
    assert simulacra.Interrupt().cause is None


# --------------------------------------------------------------------------- delays


@pytest.mark.parametrize(
    ("bad", "shown"),
    [(-1, "-1"), (-0.5, "-0.5"), (math.nan, "nan"), ("soon", "soon"), (None, "None"), ([1], "[1]")],
)
def test_bad_delay_in_process(sim: Sim, bad: Any, shown: str) -> None:
    def body(s: Sim) -> Any:
        yield s.delay(bad)

    exc = run_process_and_catch(sim, body, "sleeper")
    check_error(exc, InvalidDelay, "delay", shown, ">= 0", "sleeper")
    assert isinstance(exc, ValueError)


def test_bad_delay_in_host_code(sim: Sim) -> None:
    with pytest.raises(InvalidDelay) as info:
        sim.delay(-3)
    check_error(info.value, InvalidDelay, "delay", "-3", "host code")
    assert sim.peek() == math.inf  # nothing was scheduled


def test_uncaught_invalid_delay_crashes_run(sim: Sim) -> None:
    def proc(s: Sim) -> Any:
        yield s.delay(-1)

    sim.spawn(proc, name="negative")
    with pytest.raises(InvalidDelay) as info:
        sim.run()
    check_error(info.value, InvalidDelay, "negative")


# --------------------------------------------------------------------------- yields


def test_yield_non_event_is_raised_at_the_yield(sim: Sim) -> None:
    def body(s: Sim) -> Any:
        yield 42

    exc = run_process_and_catch(sim, body, "confused")
    check_error(exc, NotAnEvent, "confused", "42", "expected an event")
    assert isinstance(exc, TypeError)


def test_yield_object_with_sim_attribute_is_not_an_event(sim: Sim) -> None:
    res = Resource(sim)

    def body(s: Sim) -> Any:
        yield res  # forgot .request()

    exc = run_process_and_catch(sim, body, "forgetful")
    check_error(exc, NotAnEvent, "forgetful", "Resource")


def test_uncaught_non_event_crashes_run(sim: Sim) -> None:
    def proc(s: Sim) -> Any:
        yield s.delay(1)
        yield "not an event"

    sim.spawn(proc, name="stringy")
    with pytest.raises(NotAnEvent) as info:
        sim.run()
    check_error(info.value, NotAnEvent, "stringy", "not an event")
    assert sim.now == 1


def test_async_process_awaiting_foreign_awaitable(sim: Sim) -> None:
    async def proc(s: Sim) -> str:
        try:
            await asyncio.sleep(0)  # an asyncio awaitable, not a simulacra event
        except NotAnEvent as exc:
            return str(exc)
        return "no error"

    p = sim.spawn(proc, name="asyncio-user")
    sim.run()
    assert "asyncio-user" in p.value
    assert "expected an event" in p.value


def test_yield_event_of_another_sim(sim: Sim) -> None:
    other = Sim()

    def body(s: Sim) -> Any:
        yield other.delay(1)

    exc = run_process_and_catch(sim, body, "traveller")
    check_error(exc, ForeignEvent, "traveller", "another Sim")
    assert isinstance(exc, ValueError)


@pytest.mark.parametrize("combine", ["all_of", "any_of"])
def test_condition_of_non_event(sim: Sim, combine: str) -> None:
    with pytest.raises(NotAnEvent) as info:
        getattr(sim, combine)([sim.event(), 5])
    check_error(info.value, NotAnEvent, combine, "5", "expected events")


@pytest.mark.parametrize("combine", ["all_of", "any_of"])
def test_condition_of_object_with_sim_attribute(sim: Sim, combine: str) -> None:
    """A resource or store has a ``.sim`` but is not an event (forgot ``.request()``)."""
    for thing in (Resource(sim), Store(sim)):
        with pytest.raises(NotAnEvent) as info:
            getattr(sim, combine)([sim.event(), thing])
        check_error(info.value, NotAnEvent, combine, type(thing).__name__)
    with pytest.raises(NotAnEvent):
        _ = sim.event() & Resource(sim)


def test_operator_condition_of_non_event(sim: Sim) -> None:
    with pytest.raises(NotAnEvent):
        _ = sim.event() & 5
    with pytest.raises(NotAnEvent):
        _ = sim.event() | "x"


@pytest.mark.parametrize("combine", ["all_of", "any_of"])
def test_condition_of_foreign_event(sim: Sim, combine: str) -> None:
    other = Sim()
    with pytest.raises(ForeignEvent) as info:
        getattr(sim, combine)([sim.event(), other.event()])
    check_error(info.value, ForeignEvent, combine, "another Sim")


# --------------------------------------------------------------------------- resources


@pytest.mark.parametrize("op", ["put", "get"])
def test_container_amount_over_capacity(sim: Sim, op: str) -> None:
    tank = Container(sim, capacity=10, init=5)
    with pytest.raises(CapacityExceeded) as info:
        getattr(tank, op)(11)
    check_error(info.value, CapacityExceeded, op, "11", "capacity", "10")
    assert isinstance(info.value, ValueError)
    assert tank.level == 5
    assert tank.put_queue == []
    assert tank.get_queue == []


@pytest.mark.parametrize("amount", [0, -2, "3", None])
@pytest.mark.parametrize("op", ["put", "get"])
def test_container_bad_amount(sim: Sim, op: str, amount: Any) -> None:
    tank = Container(sim, capacity=10)
    with pytest.raises(ConfigError) as info:
        getattr(tank, op)(amount)
    check_error(info.value, ConfigError, op, "amount", repr(amount))


@pytest.mark.parametrize(("init", "shown"), [(11, "11"), (-1, "-1"), ("5", "'5'")])
def test_container_bad_init(sim: Sim, init: Any, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        Container(sim, capacity=10, init=init)
    check_error(info.value, ConfigError, "init", shown)


@pytest.mark.parametrize(
    "cls",
    [Resource, PriorityResource, PreemptiveResource, Store, FilterStore, PriorityStore, Container],
)
@pytest.mark.parametrize("capacity", [0, -1, math.nan, "2", True])
def test_bad_capacity(sim: Sim, cls: type, capacity: Any) -> None:
    with pytest.raises(ConfigError) as info:
        cls(sim, capacity=capacity)
    check_error(info.value, ConfigError, cls.__name__, "capacity", repr(capacity), "> 0")


@pytest.mark.parametrize("cls", [Resource, PriorityResource, PreemptiveResource])
@pytest.mark.parametrize("capacity", [0, -1, 1.0, math.inf, math.nan, "2", True, None])
def test_bad_capacity_set_mid_run(sim: Sim, cls: type, capacity: Any) -> None:
    res = cls(sim, capacity=2)
    with pytest.raises(ConfigError) as info:
        res.capacity = capacity
    check_error(info.value, ConfigError, f"{cls.__name__}.capacity = {capacity!r}",
                "expected an int >= 1")
    assert res.capacity == 2


def test_release_foreign_request(sim: Sim) -> None:
    mine = Resource(sim)
    theirs = Resource(sim)
    req = theirs.request()
    with pytest.raises(ForeignRequest) as info:
        mine.release(req)
    check_error(info.value, ForeignRequest, "release")
    assert isinstance(info.value, ValueError)
    assert theirs.count == 1


def test_bad_priority(sim: Sim) -> None:
    res = PriorityResource(sim)
    with pytest.raises(ConfigError) as info:
        res.request(priority="high")  # type: ignore[arg-type]
    check_error(info.value, ConfigError, "priority", "high")
    assert res.queue == []
    assert res.users == []


def test_bad_filter(sim: Sim) -> None:
    store: FilterStore[int] = FilterStore(sim)
    with pytest.raises(ConfigError) as info:
        store.get(filter=5)  # type: ignore[arg-type]
    check_error(info.value, ConfigError, "filter", "callable")


def test_with_on_plain_event(sim: Sim) -> None:
    with pytest.raises(ConfigError) as info, sim.event():
        pass
    check_error(info.value, ConfigError, "request")


# --------------------------------------------------------------------------- run


def test_until_in_the_past_or_now(sim: Sim) -> None:
    with pytest.raises(UntilInPast) as info:
        sim.run(until=0)
    check_error(info.value, UntilInPast, "until", "0")
    assert isinstance(info.value, ValueError)
    sim.delay(10)
    sim.run(until=5)
    for bad in (5, 4.999, -1):
        with pytest.raises(UntilInPast) as info:
            sim.run(until=bad)
        check_error(info.value, UntilInPast, "until", str(float(bad)), "5.0")
    assert sim.now == 5
    sim.run()  # still usable
    assert sim.now == 10


@pytest.mark.parametrize("until", ["abc", [1], object()])
def test_until_not_a_time(sim: Sim, until: Any) -> None:
    with pytest.raises(ConfigError) as info:
        sim.run(until=until)
    check_error(info.value, ConfigError, "until", "number")
    sim.delay(1)
    sim.run()  # the failed call left the Sim usable
    assert sim.now == 1


def test_until_event_of_another_sim(sim: Sim) -> None:
    with pytest.raises(ForeignEvent) as info:
        sim.run(until=Sim().event())
    check_error(info.value, ForeignEvent, "until", "another Sim")


def test_until_event_never_triggered(sim: Sim) -> None:
    with pytest.raises(EmptySchedule) as info:
        sim.run(until=sim.event())
    check_error(info.value, EmptySchedule, "until", "never triggered")


def test_step_on_empty_schedule(sim: Sim) -> None:
    with pytest.raises(EmptySchedule) as info:
        sim.step()
    check_error(info.value, EmptySchedule, "no events")


@pytest.mark.parametrize("call", ["run", "step", "run_until"])
def test_reentrant_run_from_a_process(sim: Sim, call: str) -> None:
    def body(s: Sim) -> Any:
        yield s.delay(1)
        if call == "run":
            s.run()
        elif call == "step":
            s.step()
        else:
            s.run(until=10)

    exc = run_process_and_catch(sim, body, "recursive")
    check_error(exc, SimError, "already running", "recursive")
    assert not isinstance(exc, ThreadOwnershipError)
    assert sim.now == 2  # the outer run went on


def test_second_thread_cannot_drive_a_running_sim() -> None:
    """Thread 1 runs the Sim; its process blocks until thread 2 (the test) has tried.

    Deterministic handshake: the process sets ``inside`` and waits for
    ``tried``; the test thread waits for ``inside``, makes its attempts, then
    sets ``tried``. Timeouts only guard against a hang.
    """
    sim = Sim()
    inside = threading.Event()
    tried = threading.Event()
    outcome: dict[str, Any] = {}

    def blocker(s: Sim) -> Any:
        yield s.delay(1)
        inside.set()
        if not tried.wait(HANDSHAKE_S):
            raise RuntimeError("the test thread never finished its attempts")
        yield s.delay(1)
        return "done"

    proc = sim.spawn(blocker, name="blocker")

    def thread_one() -> None:
        try:
            outcome["result"] = sim.run()
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    worker = threading.Thread(target=thread_one, name="sim-owner")
    worker.start()
    errors: list[BaseException] = []
    try:
        assert inside.wait(HANDSHAKE_S), "thread 1 never reached the process"
        for attempt in (sim.run, sim.step, lambda: sim.run(until=100)):
            with pytest.raises(ThreadOwnershipError) as info:
                attempt()
            errors.append(info.value)
    finally:
        tried.set()
        worker.join(HANDSHAKE_S)
    assert not worker.is_alive()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"] is None
    assert proc.value == "done"
    assert sim.now == 2  # the intruding calls changed nothing
    for exc in errors:
        check_error(exc, ThreadOwnershipError, "thread")
        assert isinstance(exc, RuntimeError)


# --------------------------------------------------------------------------- events


def test_succeed_twice(sim: Sim) -> None:
    ev = sim.event()
    ev.succeed(1)
    for again in (
        lambda: ev.succeed(2),
        lambda: ev.fail(ValueError()),
        lambda: ev.trigger(sim.event().succeed()),
    ):
        with pytest.raises(AlreadyTriggered) as info:
            again()
        check_error(info.value, AlreadyTriggered, "already been triggered")
        assert isinstance(info.value, RuntimeError)
    assert ev.value == 1


def test_delay_is_already_triggered(sim: Sim) -> None:
    with pytest.raises(AlreadyTriggered):
        sim.delay(1).succeed()


@pytest.mark.parametrize("bad", ["oops", 42, ValueError])
def test_fail_with_non_exception(sim: Sim, bad: Any) -> None:
    ev = sim.event()
    with pytest.raises(ConfigError) as info:
        ev.fail(bad)
    check_error(info.value, ConfigError, "fail", "exception", repr(bad)[:20])
    assert not ev.triggered


def test_value_of_pending_event(sim: Sim) -> None:
    ev = sim.event()
    with pytest.raises(EventNotReady) as info:
        _ = ev.value
    check_error(info.value, EventNotReady, "not yet available")
    assert isinstance(info.value, AttributeError)
    with pytest.raises(EventNotReady) as info:
        _ = ev.ok
    check_error(info.value, EventNotReady, "not been triggered")


def test_event_needs_a_sim() -> None:
    with pytest.raises(ConfigError) as info:
        simulacra.Event("sim")  # type: ignore[arg-type]
    check_error(info.value, ConfigError, "Sim", "'sim'")


# --------------------------------------------------------------------------- spawn / Sim()


@pytest.mark.parametrize(("fn", "shown"), [(42, "42"), ("gen", "'gen'"), (None, "None")])
def test_spawn_non_generator(sim: Sim, fn: Any, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        sim.spawn(fn)
    check_error(info.value, ConfigError, "spawn", shown, "generator")


def test_spawn_function_returning_non_generator(sim: Sim) -> None:
    def plain(s: Sim) -> int:
        return 5

    with pytest.raises(ConfigError) as info:
        sim.spawn(plain)
    check_error(info.value, ConfigError, "plain", "5", "generator")


def test_spawn_generator_object_with_arguments(sim: Sim) -> None:
    def gen(s: Sim) -> Any:
        yield s.delay(1)

    g = gen(sim)
    with pytest.raises(ConfigError) as info:
        sim.spawn(g, 1)
    check_error(info.value, ConfigError, "spawn", "generator function")
    g.close()


def test_spawn_bad_name(sim: Sim) -> None:
    def gen(s: Sim) -> Any:
        yield s.delay(1)

    with pytest.raises(ConfigError) as info:
        sim.spawn(gen, name=7)  # type: ignore[arg-type]
    check_error(info.value, ConfigError, "name", "7")


def test_process_needs_a_sim() -> None:
    def gen() -> Any:
        yield None

    with pytest.raises(ConfigError) as info:
        simulacra.Process("sim", gen())  # type: ignore[arg-type]
    check_error(info.value, ConfigError, "Sim")


@pytest.mark.parametrize("trace", [123, "yes", object()])
def test_bad_trace(trace: Any) -> None:
    with pytest.raises(ConfigError) as info:
        Sim(trace=trace)
    check_error(info.value, ConfigError, "trace", "record()")


def test_bad_ordering() -> None:
    with pytest.raises(ConfigError) as info:
        Sim(ordering="x")
    check_error(info.value, ConfigError, "ordering", "'x'", "fifo", "keyed")


def test_bad_seed() -> None:
    with pytest.raises(ConfigError) as info:
        Sim(seed=1.5)  # type: ignore[arg-type]
    check_error(info.value, ConfigError, "seed", "1.5")


# --------------------------------------------------------------------------- interrupts


def test_interrupt_dead_process(sim: Sim) -> None:
    def short(s: Sim) -> Any:
        yield s.delay(1)

    p = sim.spawn(short, name="short-lived")
    sim.run()
    with pytest.raises(DeadProcess) as info:
        p.interrupt("too late")
    check_error(info.value, DeadProcess, "short-lived", "finished", "too late")
    assert isinstance(info.value, RuntimeError)


def test_self_interrupt(sim: Sim) -> None:
    def body(s: Sim) -> Any:
        yield s.delay(1)
        me = s.active_process
        assert me is not None
        me.interrupt()

    exc = run_process_and_catch(sim, body, "narcissus")
    check_error(exc, SelfInterrupt, "narcissus", "itself")
    assert isinstance(exc, RuntimeError)


def test_a_token_budget_typo_shows_its_value_and_a_credential_never_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    from simulacra.cli import main as cli

    config = str(Path(__file__).resolve().parents[1] / "examples" / "social" / "config.yaml")
    assert cli(["run", config, "--no-progress", "sim.agents_memory.max_token=300"]) == 2
    err = capsys.readouterr().err
    assert "(got 300)" in err
    assert "did you mean sim.agents_memory.max_tokens" in err
    assert cli(["run", config, "--no-progress", "sim.llm.api_key=sk-secret-123"]) == 2
    err = capsys.readouterr().err
    assert "sk-secret-123" not in err
    assert "its value is not shown" in err
