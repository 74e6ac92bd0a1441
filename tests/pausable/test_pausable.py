"""Pausable agents on greenlets: hand-off, errors at the call site, statuses, virtual time."""

from __future__ import annotations

import random
import threading
import traceback
from dataclasses import dataclass
from typing import Any

import pytest

from simulacra import (
    AgentStateError,
    AgentStatus,
    ConfigError,
    InvalidDelay,
    PausableAgent,
    PausableContext,
    PausableHost,
    Sim,
    ThreadOwnershipError,
    digest,
)

pytestmark = pytest.mark.timeout(120)


# -- a duck-typed model and latency model (simulacra.llm's interface) --------------


@dataclass(frozen=True)
class Request:
    prompt: str


@dataclass(frozen=True)
class Reply:
    text: str


class EchoModel:
    """Replies with the prompt and the call site; remembers the sites it saw."""

    def __init__(self) -> None:
        self.sites: list[tuple[str, int]] = []

    def complete(self, request: Request, *, site: Any = None) -> Reply:
        self.sites.append((site.agent, site.n))
        return Reply(f"{request.prompt}|{site.agent}#{site.n}")


class Latency:
    """base + noise: a seeded duration, never below min_duration."""

    min_duration = 0.5

    def duration(self, request: Request, completion: Reply, rng: random.Random) -> float:
        return self.min_duration + len(request.prompt) * 0.01 + rng.random()


class BadLatency:
    min_duration = 1.0

    def duration(self, request: Request, completion: Reply, rng: random.Random) -> float:
        return 0.25  # below its own minimum


# -- statuses and hand-off -----------------------------------------------------------


def test_status_transitions_through_every_blocking_call() -> None:
    seen: list[AgentStatus] = []
    host = PausableHost(seed=1, llm=EchoModel(), latency=Latency())
    signal = host.sim.event()

    def agent(ctx: PausableContext) -> str:
        seen.append(me.status)
        value = ctx.pause("ask")
        ctx.sleep(3.0)
        got = ctx.wait(signal)
        reply = ctx.llm.complete(Request("hi"))
        return f"{value}/{got}/{reply.text}"

    me = host.spawn(agent, name="a")
    assert me.status is AgentStatus.NEW
    assert host.start(me) is AgentStatus.PAUSED
    assert me.pause_reason == "ask"
    assert host.resume(me, "v") is AgentStatus.SLEEPING
    assert me.pause_reason is None
    host.run(until=1.0)
    assert me.status is AgentStatus.SLEEPING
    host.run()
    assert host.now == 3.0
    assert me.status is AgentStatus.WAITING
    signal.succeed("sig")
    host.run(until=signal)
    assert me.status is AgentStatus.CALLING
    host.run()
    assert me.status is AgentStatus.DONE
    assert me.result == "v/sig/hi|a#0"
    assert seen == [AgentStatus.RUNNING]
    assert host.now > 3.5  # at least min_duration of simulated latency
    assert me.finished.processed
    assert host.results() == {"a": "v/sig/hi|a#0"}
    assert AgentStatus.DONE.finished
    assert AgentStatus.PAUSED.blocked


def test_one_agent_runs_at_a_time_and_each_continues_exactly_where_it_stopped() -> None:
    host = PausableHost()
    log: list[str] = []

    def deep(ctx: PausableContext, depth: int, tag: str) -> int:
        # The pause happens several Python frames down, inside loops.
        if depth == 0:
            total = 0
            for i in range(3):
                log.append(f"{tag}:{i}")
                total += ctx.pause(i)
            return total
        return deep(ctx, depth - 1, tag) + depth

    a = host.spawn(deep, 4, "a", name="a")
    b = host.spawn(deep, 2, "b", name="b")
    host.start(a)
    host.start(b)
    for i in range(3):
        assert a.pause_reason == b.pause_reason == i
        host.resume(b, 100)
        host.resume(a, 10)
    assert (a.result, b.result) == (30 + 4 + 3 + 2 + 1, 300 + 2 + 1)
    assert log == ["a:0", "b:0", "b:1", "a:1", "b:2", "a:2"]


def test_pause_value_defaults_to_none_and_results_are_in_spawn_order() -> None:
    host = PausableHost()
    agents = [host.spawn(lambda ctx: ctx.pause(), name=f"n{i}") for i in (3, 1, 2)]
    for agent in agents:
        host.start(agent)
    for agent in reversed(agents):
        host.resume(agent)
    assert list(host.results()) == ["n3", "n1", "n2"]
    assert host.results() == {"n3": None, "n1": None, "n2": None}
    assert host.agents == tuple(agents)
    assert host.agent("n1") is agents[1]


# -- errors at the call site -------------------------------------------------------


def _frames(exc: BaseException) -> list[str]:
    return [frame.name for frame in traceback.extract_tb(exc.__traceback__)]


def test_an_error_before_any_pause_is_raised_at_start() -> None:
    host = PausableHost()

    def crashes_early(ctx: PausableContext) -> None:
        raise KeyError("missing")

    agent = host.spawn(crashes_early, name="early")
    with pytest.raises(KeyError) as info:
        host.start(agent)
    assert agent.status is AgentStatus.FAILED
    assert info.value is agent.exception
    assert "crashes_early" in _frames(info.value)
    assert any("'early'" in note for note in info.value.__notes__)
    host.run()  # the failure was reported at start: it does not crash run() again
    with pytest.raises(AgentStateError, match="FAILED") as info2:
        _ = agent.result
    assert info2.value.__cause__ is agent.exception


def test_an_error_after_resume_is_raised_at_the_resume_site_with_the_agent_traceback() -> None:
    host = PausableHost()

    def helper(value: int) -> int:
        return 10 // value

    def divides(ctx: PausableContext) -> int:
        kept = "local state"
        value = ctx.pause("divisor?")
        assert kept == "local state"
        return helper(value)

    agent = host.spawn(divides, name="divider")
    host.start(agent)
    with pytest.raises(ZeroDivisionError) as info:
        host.resume(agent, 0)
    frames = _frames(info.value)
    # The host frame of the call site, then the agent's own frames down to the error.
    assert frames.index("test_an_error_after_resume_is_raised_at_the_resume_site_with_the_agent_"
                        "traceback") < frames.index("divides") < frames.index("helper")
    assert "in pausable agent 'divider'" in "".join(info.value.__notes__)
    assert agent.status is AgentStatus.FAILED
    assert agent.finished.triggered
    assert not agent.finished.ok


def test_an_error_while_the_kernel_drives_the_agent_is_raised_by_run() -> None:
    host = PausableHost()

    def late(ctx: PausableContext) -> None:
        ctx.sleep(5)
        raise RuntimeError("after sleeping")

    def steady(ctx: PausableContext) -> int:
        for _ in range(10):
            ctx.sleep(1)
        return 10

    bad = host.spawn(late, name="late")
    good = host.spawn(steady, name="steady")
    host.start(bad)
    host.start(good)
    with pytest.raises(RuntimeError, match="after sleeping") as info:
        host.run()
    assert info.value is bad.exception  # the agent's own exception, not a copy
    assert info.value.__context__ is None
    assert "late" in _frames(info.value)
    assert host.now == 5
    host.run()  # the rest of the Sim goes on
    assert good.result == 10
    assert host.now == 10


def test_a_process_waiting_on_finished_handles_the_failure() -> None:
    host = PausableHost()
    caught: list[BaseException] = []

    def late(ctx: PausableContext) -> None:
        ctx.sleep(1)
        raise ValueError("x")

    agent = host.spawn(late, name="late")

    def watcher(sim: Sim) -> Any:
        try:
            yield agent.finished
        except ValueError as exc:
            caught.append(exc)

    host.sim.spawn(watcher)
    host.start(agent)
    host.run()  # handled by the watcher, so run() does not raise
    assert len(caught) == 1
    assert caught[0].__cause__ is agent.exception


def test_a_failed_event_raises_inside_the_agent_which_can_handle_it() -> None:
    host = PausableHost()
    event = host.sim.event()

    def careful(ctx: PausableContext) -> str:
        try:
            ctx.wait(event)
        except OSError as exc:
            return f"handled {exc}"
        return "no"

    agent = host.spawn(careful)
    host.start(agent)
    event.fail(OSError("disk"))
    host.run()
    assert agent.result == "handled disk"


def test_throw_raises_inside_a_paused_agent() -> None:
    host = PausableHost()

    def guarded(ctx: PausableContext) -> str:
        try:
            ctx.pause("a")
        except TimeoutError:
            return "timed out"
        return "resumed"

    handled = host.spawn(guarded)
    host.start(handled)
    assert host.throw(handled, TimeoutError()) is AgentStatus.DONE
    assert handled.result == "timed out"
    unhandled = host.spawn(lambda ctx: ctx.pause())
    host.start(unhandled)
    with pytest.raises(LookupError):
        host.throw(unhandled, LookupError("no"))
    assert unhandled.status is AgentStatus.FAILED
    paused = host.spawn(lambda ctx: ctx.pause(), name="p")
    host.start(paused)
    with pytest.raises(ConfigError, match="exception instance"):
        host.throw(paused, "nope")  # type: ignore[arg-type]


# -- bad use gets clear errors ----------------------------------------------------


def test_bad_use_of_the_host_api() -> None:
    host = PausableHost()
    done = host.spawn(lambda ctx: 1, name="done")
    host.start(done)
    with pytest.raises(AgentStateError, match=r"agent 'done' is DONE, not PAUSED; it has finished"):
        host.resume(done)
    with pytest.raises(AgentStateError, match="only a NEW agent can be started"):
        host.start(done)
    new = host.spawn(lambda ctx: ctx.pause(), name="new")
    with pytest.raises(AgentStateError, match="is NEW, not PAUSED; start it first"):
        host.resume(new)
    sleeper = host.spawn(lambda ctx: ctx.sleep(5), name="sleeper")
    host.start(sleeper)
    with pytest.raises(AgentStateError, match="SLEEPING, not PAUSED; it wakes by itself"):
        host.resume(sleeper)
    with pytest.raises(ConfigError, match="already exists"):
        host.spawn(lambda ctx: None, name="new")
    with pytest.raises(ConfigError, match="non-empty str"):
        host.spawn(lambda ctx: None, name="")
    with pytest.raises(AgentStateError, match="belongs to another host"):
        PausableHost().resume(new)
    with pytest.raises(ConfigError, match="expected a PausableAgent"):
        host.start("new")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no agent named 'nobody'"):
        host.agent("nobody")
    with pytest.raises(ConfigError, match="expected a Sim"):
        PausableHost(sim="sim")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"llm=\.\.\."):
        PausableHost(llm=object())
    with pytest.raises(ConfigError, match=r"latency=\.\.\."):
        PausableHost(latency=object())


def test_generators_and_coroutines_are_refused_with_a_pointer_to_sim_spawn() -> None:
    def gen(ctx: PausableContext) -> Any:
        yield 1

    async def coro(ctx: PausableContext) -> None:
        pass

    host = PausableHost()
    for fn in (gen, coro, 42):
        with pytest.raises(ConfigError, match="plain function"):
            host.spawn(fn)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "delay", [-1, float("nan"), "2", None, True], ids=["negative", "nan", "str", "none", "bool"]
)
def test_a_bad_sleep_raises_inside_the_agent_and_surfaces_at_start(delay: object) -> None:
    host = PausableHost()
    agent = host.spawn(lambda ctx: ctx.sleep(delay), name="sleepy")
    with pytest.raises(InvalidDelay, match=r"ctx.sleep\(delay\): expected a number >= 0, got") as i:
        host.start(agent)
    assert "agent 'sleepy'" in str(i.value)
    assert agent.status is AgentStatus.FAILED


def test_blocking_calls_from_outside_the_agent_are_refused() -> None:
    host = PausableHost()
    contexts: dict[str, PausableContext] = {}

    def keeps_ctx(ctx: PausableContext) -> None:
        contexts[ctx.name] = ctx
        ctx.pause()

    a = host.spawn(keeps_ctx, name="a")
    host.start(a)
    ctx = contexts["a"]
    outside = r"ctx.pause\(\) must be called from inside agent 'a'"
    with pytest.raises(AgentStateError, match=outside):
        ctx.pause("from host")
    with pytest.raises(AgentStateError, match="from inside agent 'a'"):
        ctx.sleep(1)
    with pytest.raises(AgentStateError, match="from inside agent 'a'"):
        ctx.llm.complete(Request("x"))
    with pytest.raises(AgentStateError, match="from inside agent 'a'"):
        ctx.wait(host.sim.event())

    def uses_other(c: PausableContext) -> None:
        ctx.sleep(1)  # a's context, from inside b

    b = host.spawn(uses_other, name="b")
    with pytest.raises(AgentStateError, match="from inside agent 'a'"):
        host.start(b)
    # a is untouched and still resumable
    assert a.status is AgentStatus.PAUSED
    host.resume(a)
    assert a.status is AgentStatus.DONE


def test_wait_needs_an_event_of_the_same_sim() -> None:
    host = PausableHost()
    other = Sim()
    agent = host.spawn(lambda ctx: ctx.wait(other.event()), name="w")
    with pytest.raises(ConfigError, match="expected an event of this agent's Sim"):
        host.start(agent)
    agent2 = host.spawn(lambda ctx: ctx.wait("soon"), name="w2")
    with pytest.raises(ConfigError, match="'soon'"):
        host.start(agent2)


def test_a_host_belongs_to_its_thread() -> None:
    host = PausableHost()
    agent = host.spawn(lambda ctx: ctx.pause(), name="a")
    host.start(agent)
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            host.resume(agent)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert isinstance(errors[0], ThreadOwnershipError)
    assert agent.status is AgentStatus.PAUSED


def test_llm_without_model_or_with_a_bad_latency_is_a_config_error() -> None:
    host = PausableHost()
    agent = host.spawn(lambda ctx: ctx.llm.complete(Request("x")), name="a")
    with pytest.raises(ConfigError, match=r"PausableHost\(llm=...\)"):
        host.start(agent)
    host2 = PausableHost(llm=EchoModel(), latency=BadLatency())
    agent2 = host2.spawn(lambda ctx: ctx.llm.complete(Request("x")), name="b")
    with pytest.raises(ConfigError, match=r"min_duration \(1.0\), got 0.25.*BadLatency"):
        host2.start(agent2)


# -- kernel interplay, supervisors, close --------------------------------------------


def test_agents_and_kernel_processes_wait_for_each_other() -> None:
    host = PausableHost()
    sim = host.sim
    log: list[tuple[float, str]] = []

    def clerk(s: Sim) -> Any:
        yield s.delay(4)
        log.append((s.now, "clerk done"))
        return "receipt"

    proc = sim.spawn(clerk)

    def customer(ctx: PausableContext) -> str:
        receipt = ctx.wait(proc)
        log.append((ctx.now, f"customer got {receipt}"))
        ctx.sleep(1)
        return "bye"

    agent = host.spawn(customer, name="customer")

    def manager(s: Sim) -> Any:
        value = yield agent.finished
        log.append((s.now, f"manager saw {value}"))

    sim.spawn(manager)
    host.start(agent)
    host.run()
    assert log == [(4, "clerk done"), (4, "customer got receipt"), (5, "manager saw bye")]
    # An already processed event returns at once, as in a process.
    late = host.spawn(lambda ctx: ctx.wait(proc), name="late")
    assert host.start(late) is AgentStatus.DONE
    assert late.result == "receipt"


def test_an_agent_can_drive_another_agent() -> None:
    host = PausableHost()

    def worker(ctx: PausableContext) -> int:
        total = 0
        while (item := ctx.pause("next")) is not None:
            total += item
        return total

    w = host.spawn(worker, name="worker")

    def supervisor(ctx: PausableContext) -> int:
        host.start(w)
        for item in (1, 2, 3):
            host.resume(w, item)
            ctx.sleep(1)
        with pytest.raises(AgentStateError, match="RUNNING"):
            host.resume(s)  # itself: it is running
        host.resume(w, None)
        return w.result  # type: ignore[no-any-return]

    s = host.spawn(supervisor, name="supervisor")
    host.start(s)
    host.run()
    assert s.result == 6
    assert host.now == 3


def test_close_unwinds_blocked_agents_and_runs_their_finally_blocks() -> None:
    cleaned: list[str] = []

    def tidy(ctx: PausableContext, how: str) -> None:
        try:
            if how == "pause":
                ctx.pause()
            else:
                ctx.sleep(10)
        finally:
            cleaned.append(ctx.name)

    with PausableHost() as host:
        paused = host.spawn(tidy, "pause", name="paused")
        sleeping = host.spawn(tidy, "sleep", name="sleeping")
        never = host.spawn(tidy, "pause", name="never")
        host.start(paused)
        host.start(sleeping)
    assert cleaned == ["paused", "sleeping"]
    assert [a.status for a in (paused, sleeping, never)] == [AgentStatus.CLOSED] * 3
    host.run()  # the sleeper's timer fires into a closed agent: nothing happens
    assert sleeping.status is AgentStatus.CLOSED


def test_an_agent_that_blocks_while_being_closed_fails_clearly() -> None:
    host = PausableHost()

    def stubborn(ctx: PausableContext) -> None:
        try:
            ctx.pause()
        finally:
            ctx.sleep(1)

    agent = host.spawn(stubborn, name="stubborn")
    host.start(agent)
    with pytest.raises(AgentStateError, match="being closed"):
        host.close()
    assert agent.status is AgentStatus.FAILED


# -- 10 000 paused agents ------------------------------------------------------------


@pytest.mark.slow
def test_ten_thousand_paused_agents_resumed_in_seeded_order_continue_where_they_stopped() -> None:
    n_agents, rounds = 10_000, 4
    host = PausableHost(seed=7)
    order_log: list[tuple[int, int]] = []

    def expected_value(index: int, rnd: int) -> int:
        return index * 31 + rnd * 7

    def agent(ctx: PausableContext, index: int) -> tuple[int, list[int], int]:
        seen: list[int] = []  # locals survive every pause
        checksum = index
        for rnd in range(rounds):
            value = ctx.pause(("round", rnd))
            order_log.append((rnd, index))
            if value != expected_value(index, rnd):
                raise AssertionError(f"agent {index} round {rnd}: got {value}")
            seen.append(value)
            checksum = checksum * 3 + value
        return index, seen, checksum

    agents = [host.spawn(agent, i, name=f"a{i}") for i in range(n_agents)]
    for a in agents:
        assert host.start(a) is AgentStatus.PAUSED
    rng = random.Random(20240607)
    expected_order: list[tuple[int, int]] = []
    for rnd in range(rounds):
        order = list(range(n_agents))
        rng.shuffle(order)
        for index in order:
            a = agents[index]
            assert a.pause_reason == ("round", rnd)
            host.resume(a, expected_value(index, rnd))
            expected_order.append((rnd, index))
    assert order_log == expected_order  # each resume ran exactly that agent, once
    for index, a in enumerate(agents):
        checksum = index
        for rnd in range(rounds):
            checksum = checksum * 3 + expected_value(index, rnd)
        assert a.result == (index, [expected_value(index, r) for r in range(rounds)], checksum)
    assert all(a.status is AgentStatus.DONE for a in agents)


# -- LLM calls: call sites and simulated latency ------------------------------------------


def test_llm_calls_carry_call_sites_and_take_simulated_time() -> None:
    model = EchoModel()
    host = PausableHost(seed=3, llm=model, latency=Latency(), trace=True)

    def talker(ctx: PausableContext) -> list[str]:
        return [ctx.llm.complete(Request(f"q{i}")).text for i in range(3)]

    a = host.spawn(talker, name="a")
    b = host.spawn(talker, name="b")
    host.start(a)
    host.start(b)
    assert a.status is AgentStatus.CALLING
    host.run()
    assert a.result == ["q0|a#0", "q1|a#1", "q2|a#2"]
    assert a.llm_calls == 3
    assert sorted(model.sites) == [(n, i) for n in ("a", "b") for i in range(3)]
    durations = [r[3][1] for r in host.sim.trace_records or () if r[1] == "agent.llm"]
    assert len(durations) == 6
    assert all(d >= Latency.min_duration for d in durations)


# -- determinism: same seed, same trace; equal to the kernel-process reference ------------


Op = tuple[str, Any]


def _run_greenlets(scripts: list[list[Op]], seed: int) -> tuple[list[Any], str]:
    model = EchoModel()
    host = PausableHost(seed=seed, llm=model, latency=Latency(), trace=True)
    signals = [host.sim.event() for _ in range(3)]
    log: list[Any] = []

    def scripted(ctx: PausableContext, ops: list[Op]) -> None:
        for i, (op, arg) in enumerate(ops):
            log.append((ctx.now, ctx.name, i))
            if op == "sleep":
                ctx.sleep(arg)
            elif op == "wait":
                ctx.wait(signals[arg])
            elif op == "fire":
                if not signals[arg].triggered:
                    signals[arg].succeed(ctx.name)
            elif op == "llm":
                log.append(ctx.llm.complete(Request(arg)).text)
            elif op == "draw":
                log.append(ctx.rng("x").random())
        log.append((ctx.now, ctx.name, "end"))

    for index, ops in enumerate(scripts):
        host.start(host.spawn(scripted, ops, name=f"g{index}"))
    host.run()
    return log, digest(host.sim)


def _run_processes(scripts: list[list[Op]], seed: int) -> list[Any]:
    """The same scripts as kernel generator processes: the reference semantics."""
    model = EchoModel()
    latency = Latency()
    sim = Sim(seed)
    signals = [sim.event() for _ in range(3)]
    log: list[Any] = []

    def scripted(s: Sim, name: str, ops: list[Op]) -> Any:
        calls = 0
        for i, (op, arg) in enumerate(ops):
            log.append((s.now, name, i))
            if op == "sleep":
                yield s.delay(arg)
            elif op == "wait":
                yield signals[arg]
            elif op == "fire":
                if not signals[arg].triggered:
                    signals[arg].succeed(name)
            elif op == "llm":
                site = type("Site", (), {"agent": name, "n": calls})()
                calls += 1
                reply = model.complete(Request(arg), site=site)
                yield s.delay(latency.duration(Request(arg), reply, s.rng(f"llm-latency/{name}")))
                log.append(reply.text)
            elif op == "draw":
                log.append(s.rng(f"agent/{name}/x").random())
        log.append((s.now, name, "end"))

    for index, ops in enumerate(scripts):
        sim.spawn(scripted, f"g{index}", ops)
    sim.run()
    return log


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

_op = st.one_of(
    st.tuples(st.just("sleep"), st.sampled_from([0, 0.5, 1, 2.5])),
    st.tuples(st.just("wait"), st.integers(0, 2)),
    st.tuples(st.just("fire"), st.integers(0, 2)),
    st.tuples(st.just("llm"), st.sampled_from(["a", "bb", "ccc"])),
    st.tuples(st.just("draw"), st.none()),
)
_scripts = st.lists(st.lists(_op, max_size=8), min_size=1, max_size=6)


@pytest.mark.determinism
@hypothesis.settings(max_examples=250, deadline=None)
@hypothesis.given(scripts=_scripts, seed=st.integers(0, 3))
@hypothesis.example(  # waiting on an already processed event continues without a hand-off
    scripts=[[("fire", 0), ("sleep", 1), ("wait", 0), ("draw", None)], [("sleep", 1)]], seed=0
)
def test_greenlet_agents_equal_kernel_processes_and_repeat_exactly(
        scripts: list[list[Op]], seed: int) -> None:
    log, trace_digest = _run_greenlets(scripts, seed)
    assert log == _run_processes(scripts, seed)
    assert _run_greenlets(scripts, seed) == (log, trace_digest)


@pytest.mark.determinism
def test_the_seed_reaches_the_latency_draws() -> None:
    scripts: list[list[Op]] = [[("llm", "a"), ("llm", "b")], [("sleep", 1), ("llm", "a")]]
    _, d0 = _run_greenlets(scripts, 0)
    _, d1 = _run_greenlets(scripts, 1)
    assert d0 != d1
    assert _run_greenlets(scripts, 0)[1] == d0


def test_public_types_are_exported() -> None:
    assert PausableAgent.__module__ == "simulacra"
    assert repr(AgentStatus.PAUSED) == "AgentStatus.PAUSED"


# -- with the real LLM layer ------------------------------------------------------------


@pytest.mark.determinism
def test_scripted_model_and_latency_model_drive_virtual_time() -> None:
    llm = pytest.importorskip("simulacra.llm")
    if not hasattr(llm, "ScriptedModel"):  # pragma: no cover - the LLM layer is incomplete
        pytest.skip("simulacra.llm has no ScriptedModel yet")

    def run(seed: int) -> tuple[dict[str, Any], float, str]:
        latency = llm.LatencyModel()
        host = PausableHost(seed=seed, trace=True, llm=llm.ScriptedModel(seed), latency=latency)

        def asker(ctx: PausableContext) -> list[str]:
            out = []
            for i in range(3):
                before = ctx.now
                reply = ctx.llm.complete(llm.CompletionRequest.chat(f"{ctx.name} question {i}"))
                assert ctx.now - before >= latency.min_duration
                out.append(reply.text)
            return out

        for i in range(4):
            host.start(host.spawn(asker, name=f"asker-{i}"))
        host.run()
        return host.results(), host.now, digest(host.sim)

    first = run(5)
    assert first == run(5)
    assert run(6)[2] != first[2]
    assert all(len(texts) == 3 for texts in first[0].values())
