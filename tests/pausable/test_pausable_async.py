"""Async agents on threads, and the primitives that make sharing between them safe."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from simulacra import (
    AgentLock,
    AgentStateError,
    AgentStatus,
    AgentTimeout,
    AsyncHost,
    Channel,
    ChannelClosed,
    ConfigError,
    InvalidDelay,
    PausableContext,
    PausableHost,
)
from simulacra.pausable import AsyncContext

pytestmark = pytest.mark.timeout(120)


class SiteModel:
    """A thread-safe fake model: the reply is a pure function of the request and site."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sites: list[tuple[str, int]] = []

    def complete(self, request: str, *, site: Any = None) -> str:
        with self._lock:
            self.sites.append((site.agent, site.n))
        return f"{request}@{site.agent}#{site.n}"


# -- start/resume return at once; join settles -----------------------------------------


def test_start_returns_at_once_and_the_agent_runs_concurrently() -> None:
    gate = threading.Event()
    entered = threading.Event()

    def waits_for_host(ctx: AsyncContext) -> str:
        entered.set()
        ctx.wait(gate)  # blocks this agent's thread, not the host
        return "through"

    with AsyncHost() as host:
        agent = host.spawn(waits_for_host, name="w")
        host.start(agent)  # returns although the agent cannot finish yet
        assert entered.wait(30)
        with pytest.raises(AgentTimeout, match="still WAITING"):
            host.join(agent, timeout=0.05)
        gate.set()
        assert host.join(agent) is AgentStatus.DONE
        assert agent.result == "through"


def test_pause_and_resume_hand_values_across_threads() -> None:
    def counter(ctx: AsyncContext) -> list[int]:
        return [ctx.pause(("want", i)) for i in range(5)]

    with AsyncHost() as host:
        agents = [host.spawn(counter, name=f"c{i}") for i in range(4)]
        for agent in agents:
            host.start(agent)
        for i in range(5):
            for k, agent in enumerate(agents):
                assert host.join(agent) is AgentStatus.PAUSED
                assert agent.pause_reason == ("want", i)
                host.resume(agent, i * 10 + k)  # returns at once
        assert host.join_all() == {f"c{k}": AgentStatus.DONE for k in range(4)}
        assert host.results() == {f"c{k}": [i * 10 + k for i in range(5)] for k in range(4)}


def test_an_error_is_raised_at_join_with_the_agent_named() -> None:
    def bad(ctx: AsyncContext) -> None:
        ctx.pause()
        raise ValueError("after resume")

    with AsyncHost() as host:
        agent = host.spawn(bad, name="bad")
        host.start(agent)
        host.join(agent)
        host.resume(agent)
        with pytest.raises(ValueError, match="after resume") as info:
            host.join(agent)
        assert info.value is agent.exception
        assert "in async agent 'bad'" in "".join(info.value.__notes__)
        assert agent.status is AgentStatus.FAILED


def test_close_raises_a_failure_nobody_joined_and_unwinds_blocked_agents() -> None:
    cleaned: list[str] = []

    def blocks(ctx: AsyncContext, how: str) -> None:
        try:
            if how == "pause":
                ctx.pause()
            elif how == "sleep":
                ctx.sleep(600)
            else:
                ctx.wait(threading.Event())
        finally:
            cleaned.append(how)

    def fails(ctx: AsyncContext) -> None:
        raise KeyError("unjoined")

    host = AsyncHost()
    agents = [host.spawn(blocks, how, name=how) for how in ("pause", "sleep", "wait")]
    for agent in agents:
        host.start(agent)
    failing = host.spawn(fails, name="fails")
    host.start(failing)
    never = host.spawn(blocks, "pause", name="never")
    for agent in agents:
        while agent.status is AgentStatus.RUNNING:  # let each reach its blocking call
            threading.Event().wait(0.001)
    with pytest.raises(KeyError, match="unjoined"):
        host.close()
    assert sorted(cleaned) == ["pause", "sleep", "wait"]
    assert [a.status for a in agents] == [AgentStatus.CLOSED] * 3
    assert never.status is AgentStatus.CLOSED
    host.close()  # the failure was reported once; closing again is quiet
    with pytest.raises(AgentStateError, match="closed"):
        host.spawn(fails)


def test_bad_use_of_async_agents() -> None:
    contexts: list[AsyncContext] = []

    def keeps(ctx: AsyncContext) -> None:
        contexts.append(ctx)
        ctx.pause()

    with AsyncHost() as host:
        agent = host.spawn(keeps, name="k")
        with pytest.raises(AgentStateError, match="never started"):
            host.join(agent)
        with pytest.raises(AgentStateError, match="is NEW, not PAUSED"):
            host.resume(agent)
        host.start(agent)
        with pytest.raises(AgentStateError, match="only a NEW agent"):
            host.start(agent)
        host.join(agent)
        with pytest.raises(AgentStateError, match="from inside agent 'k'"):
            contexts[0].pause()
        with pytest.raises(AgentStateError, match="from inside agent 'k'"):
            contexts[0].sleep(1)
        with pytest.raises(AgentStateError, match="from inside agent 'k'"):
            contexts[0].llm.complete("x")
        host.resume(agent)
        with pytest.raises(AgentStateError, match="not PAUSED"):
            host.resume(agent)  # resumed already; a second resume is an error, not lost
        assert host.join(agent) is AgentStatus.DONE
        with pytest.raises(ConfigError, match="already exists"):
            host.spawn(keeps, name="k")
        with pytest.raises(AgentStateError, match="another host"):
            AsyncHost().join(agent)
        sleepy = host.spawn(lambda ctx: ctx.sleep(-1), name="sleepy")
        host.start(sleepy)
        with pytest.raises(InvalidDelay, match="agent 'sleepy'"):
            host.join(sleepy)
        no_model = host.spawn(lambda ctx: ctx.llm.complete("x"), name="no-model")
        host.start(no_model)
        with pytest.raises(ConfigError, match=r"AsyncHost\(llm=...\)"):
            host.join(no_model)
        with pytest.raises(ConfigError, match="timeout"):
            host.join(agent, timeout=-1)


def test_async_llm_calls_overlap_and_keep_their_call_sites() -> None:
    model = SiteModel()

    def asks(ctx: AsyncContext, k: int) -> list[str]:
        return [ctx.llm.complete(f"q{i}") for i in range(k)]

    with AsyncHost(llm=model) as host:
        agents = [host.spawn(asks, 3, name=f"a{i}") for i in range(6)]
        for agent in agents:
            host.start(agent)
        host.join_all()
    assert host.results() == {f"a{i}": [f"q{n}@a{i}#{n}" for n in range(3)] for i in range(6)}
    assert sorted(model.sites) == sorted((f"a{i}", n) for i in range(6) for n in range(3))


# -- Channel ------------------------------------------------------------------------------


def test_channel_is_fifo_with_close_semantics() -> None:
    channel: Channel[int] = Channel(capacity=2)
    channel.send(1)
    channel.send(2)
    with pytest.raises(AgentTimeout, match="for room"):
        channel.send(3, timeout=0)
    assert len(channel) == 2
    assert channel.recv() == 1
    channel.send(3)
    channel.close()
    channel.close()  # idempotent
    with pytest.raises(ChannelClosed, match="closed"):
        channel.send(4)
    assert list(channel) == [2, 3]  # drained after close
    with pytest.raises(ChannelClosed, match="closed and empty"):
        channel.recv()
    assert (channel.sent, channel.received) == (3, 3)
    with pytest.raises(AgentTimeout, match="for an item"):
        Channel().recv(timeout=0.01)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="capacity"):
            Channel(capacity=bad)  # type: ignore[arg-type]


def test_close_wakes_blocked_receivers_and_senders() -> None:
    empty: Channel[int] = Channel()
    full: Channel[int] = Channel()
    full.send(0)
    outcomes: list[str] = []

    def recv() -> None:
        try:
            empty.recv()
        except ChannelClosed:
            outcomes.append("recv woke")

    def send() -> None:
        try:
            full.send(1)
        except ChannelClosed:
            outcomes.append("send woke")

    threads = [threading.Thread(target=recv), threading.Thread(target=send)]
    for thread in threads:
        thread.start()
    empty.close()
    full.close()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["recv woke", "send woke"]


@pytest.mark.slow
def test_channel_under_contention_loses_and_duplicates_nothing() -> None:
    producers, consumers, items = 8, 4, 1500
    channel: Channel[tuple[int, int]] = Channel(capacity=4)
    received: dict[str, list[tuple[int, int]]] = {}

    def produce(ctx: AsyncContext, pid: int) -> int:
        for seq in range(items):
            channel.send((pid, seq))
        return items

    def consume(ctx: AsyncContext) -> int:
        got = received.setdefault(ctx.name, [])
        for item in channel:
            got.append(item)
        return len(got)

    with AsyncHost() as host:
        prods = [host.spawn(produce, p, name=f"p{p}") for p in range(producers)]
        cons = [host.spawn(consume, name=f"c{c}") for c in range(consumers)]
        for agent in cons + prods:
            host.start(agent)
        host_got = [channel.recv() for _ in range(200)]  # the host competes too
        for agent in prods:
            host.join(agent)
        channel.close()
        for agent in cons:
            host.join(agent)
    everything = host_got + [item for got in received.values() for item in got]
    expected = [(p, s) for p in range(producers) for s in range(items)]
    assert Counter(everything) == Counter(expected)  # nothing lost, nothing twice
    assert channel.sent == channel.received == producers * items
    for got in [host_got, *received.values()]:  # FIFO: each producer's items in order
        for p in range(producers):
            seqs = [s for q, s in got if q == p]
            assert seqs == sorted(seqs)


# -- AgentLock -----------------------------------------------------------------------------


@pytest.mark.slow
def test_lock_under_contention_keeps_a_check_then_write_atomic() -> None:
    agents_n, rounds = 8, 400
    lock = AgentLock()
    state = {"count": 0, "inside": 0, "max_inside": 0}

    def critical() -> None:
        state["inside"] += 1
        state["max_inside"] = max(state["max_inside"], state["inside"])
        value = state["count"]  # read...
        time.sleep(0)  # ...let another thread run...
        state["count"] = value + 1  # ...write: lost updates without the lock
        state["inside"] -= 1

    def worker(ctx: AsyncContext) -> None:
        for _ in range(rounds):
            with lock:
                critical()

    with AsyncHost() as host:
        agents = [host.spawn(worker, name=f"w{i}") for i in range(agents_n)]
        for agent in agents:
            host.start(agent)
        for _ in range(rounds):  # the host takes the same lock
            with lock:
                critical()
        host.join_all()
    assert state["count"] == (agents_n + 1) * rounds
    assert state["max_inside"] == 1
    assert lock.acquisitions == (agents_n + 1) * rounds
    assert not lock.locked()


def test_lock_misuse_is_an_error_not_a_deadlock() -> None:
    lock = AgentLock()
    with pytest.raises(AgentStateError, match="does not hold"):
        lock.release()
    with lock:
        with pytest.raises(AgentStateError, match="held by the caller"):
            lock.acquire()
        errors: list[BaseException] = []

        def other() -> None:
            try:
                lock.acquire(timeout=0.01)
            except AgentTimeout as exc:
                errors.append(exc)
            try:
                lock.release()
            except AgentStateError as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(30)
        assert [type(e) for e in errors] == [AgentTimeout, AgentStateError]
    assert repr(lock) == "<AgentLock unlocked>"


def test_pausable_greenlet_agents_cannot_block_their_host_thread() -> None:
    lock = AgentLock()
    channel: Channel[int] = Channel()
    host = PausableHost()

    def holds(ctx: PausableContext) -> None:
        with lock:
            ctx.pause()

    def wants(ctx: PausableContext) -> None:
        lock.acquire()

    def receives(ctx: PausableContext) -> int:
        return channel.recv()

    holder = host.spawn(holds, name="holder")
    host.start(holder)
    with pytest.raises(AgentStateError, match="another greenlet of this thread"):
        host.start(host.spawn(wants, name="wants"))
    with pytest.raises(AgentStateError, match="inside a pausable"):
        host.start(host.spawn(receives, name="receives"))
    channel.send(5)
    late = host.spawn(receives, name="late")
    host.start(late)
    assert late.result == 5  # no wait needed: fine
    host.resume(holder)
    assert not lock.locked()
