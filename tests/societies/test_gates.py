"""Where the event engine's calls wait for a slot: the lowest priority (earliest turn) first.

The pool and the gate are tested on their own (the order slots are handed out,
errors, cancellation, shutdown), then inside the engine over real HTTP: with
fewer slots than agents, the server never sees more than ``concurrency`` calls
at once, the kernel keeps up to twice that many turns in flight (it waited at
the cap itself before), and the run is the one-call-at-a-time run.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import SeedTree
from simulacra.llm import LatencyModel, OpenAICompatible, ScriptedModel, ScriptedServer
from simulacra.societies import EventEngine
from simulacra.societies._gates import PriorityGate, PriorityPool

SOCIAL = Path(__file__).resolve().parents[2] / "examples" / "social"
if str(SOCIAL) not in sys.path:
    sys.path.insert(0, str(SOCIAL))

import model as social  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _held(pool: PriorityPool) -> threading.Event:
    """Occupy the pool's one worker until the returned event is set."""
    release, busy = threading.Event(), threading.Event()

    def hold() -> None:
        busy.set()
        release.wait(30)

    pool.submit_at(-1.0, hold)
    assert busy.wait(30)
    return release


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=30))
def test_the_pool_runs_waiting_work_lowest_priority_first_then_in_order_of_submission(
        priorities: list[float]) -> None:
    pool = PriorityPool(1, "test-gates")
    try:
        ran: list[int] = []
        release = _held(pool)
        futures = [pool.submit_at(p, ran.append, i) for i, p in enumerate(priorities)]
        release.set()
        for future in futures:
            future.result(30)
        assert ran == sorted(range(len(priorities)), key=lambda i: (priorities[i], i))
    finally:
        pool.shutdown()


def test_work_without_a_priority_goes_ahead_of_every_turn() -> None:
    pool = PriorityPool(1, "test-gates")
    try:
        ran: list[str] = []
        release = _held(pool)
        turn = pool.submit_at(0.0, ran.append, "turn")
        interview = pool.submit(ran.append, "interview")  # Executor.submit: a scenario's
        release.set()
        turn.result(30), interview.result(30)
        assert ran == ["interview", "turn"]
    finally:
        pool.shutdown()


def test_the_pool_runs_at_most_its_workers_at_once_and_keeps_errors() -> None:
    pool = PriorityPool(3, "test-gates")
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}
    gate = threading.Barrier(3, timeout=30)

    def work(i: int) -> int:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        if i < 3:
            gate.wait()  # the first three run together, or this times out
        with lock:
            state["now"] -= 1
        if i == 7:
            raise KeyError(i)
        return i

    try:
        futures = [pool.submit_at(float(i), work, i) for i in range(9)]
        assert [f.exception(30) is None and f.result() for f in futures if f is not futures[7]] \
            == [0, 1, 2, 3, 4, 5, 6, 8]
        assert isinstance(futures[7].exception(), KeyError)
        assert state["peak"] == 3
    finally:
        pool.shutdown()


def test_shutdown_cancels_waiting_work_and_refuses_more() -> None:
    pool = PriorityPool(1, "test-gates")
    release = _held(pool)
    waiting = pool.submit_at(1.0, print, "never")
    release.set()
    pool.shutdown(cancel_futures=True)
    assert waiting.cancelled() or waiting.done()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit_at(0.0, print)


def test_the_gate_hands_a_freed_slot_to_the_lowest_priority_and_skips_the_cancelled() -> None:
    async def main() -> list[str]:
        gate = PriorityGate(1)
        order: list[str] = []
        await gate.acquire(0.0)  # the slot is held

        async def turn(name: str, priority: float) -> None:
            await gate.acquire(priority)
            order.append(name)
            await asyncio.sleep(0)
            gate.release()

        tasks = {name: asyncio.create_task(turn(name, p))
                 for name, p in [("late", 9.0), ("early", 1.0), ("middle", 5.0),
                                 ("gone", 0.5)]}
        await asyncio.sleep(0.01)  # all four wait
        tasks["gone"].cancel()
        gate.release()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        # The slot is free again: one acquire goes through at once.
        await asyncio.wait_for(gate.acquire(0.0), 5)
        return order

    assert asyncio.run(main()) == ["early", "middle", "late"]


def test_a_waiter_cancelled_once_granted_passes_the_slot_on() -> None:
    async def main() -> bool:
        gate = PriorityGate(1)
        await gate.acquire(0.0)
        first = asyncio.create_task(gate.acquire(1.0))
        second = asyncio.create_task(gate.acquire(2.0))
        await asyncio.sleep(0.01)
        gate.release()  # granted to *first* ...
        first.cancel()  # ... which is cancelled before it runs
        await asyncio.gather(first, return_exceptions=True)
        await asyncio.wait_for(second, 5)  # the slot went on to *second*
        return first.cancelled()

    assert asyncio.run(main())


# -- in the engine -------------------------------------------------------------------------


def _engine(mode: str, model: Any, concurrency: int) -> EventEngine:
    world, people = social.build(agents=24, seed=SeedTree(5), llm={})
    return EventEngine(world, people, model=model,
                       latency=LatencyModel(base=0.3, noise_sigma=0.4, min_duration=0.2),
                       seed=5, mode=mode, lookahead=True, concurrency=concurrency)


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_the_engine_opens_at_most_concurrency_calls_and_gives_the_sequential_run(
        mode: str) -> None:
    reference = _engine("sequential", ScriptedModel(seed=2), 1).run(max_turns=3)
    with ScriptedServer(ScriptedModel(seed=2), latency=(0.0, 0.03), latency_seed=4) as server:
        client = OpenAICompatible(server.base_url, model="scripted", concurrency=64,
                                  api_key_env=None)
        try:
            result = _engine(mode, client, 3).run(max_turns=3)
        finally:
            client.close()
        peak = server.peak_in_flight
    assert result.digest == reference.digest
    assert result.events_digest == reference.events_digest
    # The limit is the engine's (the client would allow 64): reached, never passed.
    assert peak == 3
    # The kernel went on past it (turns waited for a slot), up to twice the limit.
    assert 3 < result.peak_in_flight <= 6


def test_a_burst_after_a_quiet_spell_runs_on_as_many_threads_as_it_may() -> None:
    """One idle thread must not stand for all: a burst of 6 runs 6 at once (a rendezvous)."""
    pool = PriorityPool(6, "test-gates")
    try:
        pool.submit_at(0.0, int).result(30)  # one thread now exists, and goes idle
        together = threading.Barrier(6, timeout=30)
        futures = [pool.submit_at(float(i), together.wait) for i in range(6)]
        for future in futures:
            future.result(30)  # a BrokenBarrierError here: fewer than 6 ran at once
    finally:
        pool.shutdown()


def test_a_submit_never_waits_for_the_workers() -> None:
    """The kernel submits while a worker holds the pool's lock (moving work into its heap):
    the submit returns at once, and the work runs once the lock is let go."""
    pool = PriorityPool(3, "test-gates")
    try:
        pool.submit_at(0.0, int).result(30)  # a worker exists
        futures: list[Any] = []
        with pool._lock:  # as a worker taking work holds it
            kernel = threading.Thread(
                target=lambda: futures.extend(pool.submit_at(float(i), abs, -i) for i in range(5)))
            kernel.start()
            kernel.join(30)
            assert not kernel.is_alive(), "submit_at waited for the workers' lock"
            assert len(futures) == 5
        assert [f.result(30) for f in futures] == [0, 1, 2, 3, 4]
    finally:
        pool.shutdown()


def test_a_run_of_many_windows_keeps_no_returned_call() -> None:
    """Calls that returned are queued for the early starts' looks only: without them (this
    world names no neighbours) nothing takes them off, so nothing may be queued; and what
    the looks read is held no longer than the calls' futures."""
    engine = _engine("threads", ScriptedModel(seed=2), 4)
    for window in range(1, 7):
        engine.run(max_turns=4, until=float(window), drain=False)
        runner = engine._runner
        assert runner is not None
        assert runner.graph is None
        assert not runner.returned_calls
        assert len(runner.landed) == 0
    engine.drain()
    assert engine._turns > 24  # the windows ran turns, many of them carried over
