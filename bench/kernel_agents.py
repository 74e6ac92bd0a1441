"""What an LLM call costs on the kernel's clock, against SimPy doing the same work with a timeout.

The model: N agents queue for a Resource of K servers; each, K times over,
asks a model (a constant reply: the model's own cost is not measured) and
then holds a server for a while. In simulacra each ask is
``yield ctx.complete(request)`` on an :class:`~simulacra.societies.LLMRuntime`
(sequential mode; threads mode too, to show what the harvest costs with an
instant model); the SimPy twin calls the same model in-line and yields
``env.timeout(latency)``, which is what a SimPy user writes. Both use the same
latency model. A third row runs the SimPy twin on a keyed simulacra Sim: the
kernel's own share, without the runtime. Printed: agent-steps (one ask + one service) per second, us
per agent-step, and the ratio to SimPy.

    python bench/kernel_agents.py [--agents 20000] [--asks 5] [--rounds 3] [--overlap]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import simpy

from simulacra import Resource, Sim
from simulacra.llm import Completion, CompletionRequest, LatencyModel
from simulacra.societies import LLMRuntime

_REPLY = Completion("ok", prompt_tokens=12, completion_tokens=3)
_REQUEST = CompletionRequest.chat("stay or leave?", max_tokens=8)


class _Instant:
    """A model that answers at once: the runtime's own cost is what is left."""

    def complete(self, request: CompletionRequest, *, site: Any = None) -> Completion:
        return _REPLY


def _ours(agents: int, asks: int, mode: str) -> float:
    sim = Sim(seed=1, ordering="keyed")
    desk = Resource(sim, capacity=8)
    latency = LatencyModel(min_duration=0.05)

    def agent(sim: Sim, ctx: Any) -> Any:
        for _ in range(asks):
            yield ctx.complete(_REQUEST)
            with desk.request() as req:
                yield req
                yield sim.delay(0.01)

    started = time.perf_counter()
    with LLMRuntime(sim, _Instant(), latency=latency, mode=mode, concurrency=8) as llm:
        for index in range(agents):
            llm.spawn(agent, agent=f"a{index}")
        sim.run()
    return time.perf_counter() - started


def _ours_timeouts(agents: int, asks: int) -> float:
    """The SimPy twin on a keyed Sim: what the kernel alone costs, without the runtime."""
    sim = Sim(seed=1, ordering="keyed")
    desk = Resource(sim, capacity=8)
    latency = LatencyModel(min_duration=0.05)
    model = _Instant()
    rng = random.Random(1)

    def agent(sim: Sim) -> Any:
        for _ in range(asks):
            reply = model.complete(_REQUEST)
            yield sim.delay(latency.duration(_REQUEST, reply, rng))
            with desk.request() as req:
                yield req
                yield sim.delay(0.01)

    started = time.perf_counter()
    for index in range(agents):
        sim.spawn(agent, name=f"a{index}")
    sim.run()
    return time.perf_counter() - started


def _simpy(agents: int, asks: int) -> float:
    env = simpy.Environment()
    desk = simpy.Resource(env, capacity=8)
    latency = LatencyModel(min_duration=0.05)
    model = _Instant()
    rng = random.Random(1)

    def agent(env: simpy.Environment) -> Any:
        for _ in range(asks):
            reply = model.complete(_REQUEST)
            yield env.timeout(latency.duration(_REQUEST, reply, rng))
            with desk.request() as req:
                yield req
                yield env.timeout(0.01)

    started = time.perf_counter()
    for _ in range(agents):
        env.process(agent(env))
    env.run()
    return time.perf_counter() - started


class _Slow:
    """A model whose every reply takes *delay* seconds of wall-clock time."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def complete(self, request: CompletionRequest, *, site: Any = None) -> Completion:
        time.sleep(self.delay)
        return _REPLY


def _overlap(agents: int, asks: int, delay: float, mode: str) -> tuple[float, str]:
    """Wall seconds and digest of *agents* x *asks* slow calls, all inside one lookahead."""
    from simulacra.trace import digest

    sim = Sim(seed=1, ordering="keyed", trace=True)

    def agent(sim: Sim, ctx: Any) -> Any:
        for _ in range(asks):
            yield ctx.complete(_REQUEST)

    started = time.perf_counter()
    with LLMRuntime(sim, _Slow(delay), latency=LatencyModel(min_duration=0.5), mode=mode,
                    concurrency=agents) as llm:
        for index in range(agents):
            llm.spawn(agent, agent=f"a{index}")
        sim.run()
    assert sim.trace_records is not None
    return time.perf_counter() - started, digest(sim.trace_records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20_000)
    parser.add_argument("--asks", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--overlap", action="store_true",
                        help="also: 64 agents x 3 calls of 100 ms, sequential against threads")
    args = parser.parse_args()
    if args.overlap:
        ideal = 3 * 0.1
        seq, seq_digest = _overlap(64, 3, 0.1, "sequential")
        thr, thr_digest = _overlap(64, 3, 0.1, "threads")
        print(f"overlap: 64 agents x 3 calls of 100 ms: sequential {seq:.2f} s, threads "
              f"(concurrency 64) {thr:.2f} s = {thr / ideal:.2f}x the ideal {ideal:.1f} s; "
              f"same trace: {seq_digest == thr_digest}")
    steps = args.agents * args.asks
    runs: dict[str, list[float]] = {"simulacra sequential": [], "simulacra threads": [],
                                    "keyed Sim (timeouts)": [], "SimPy (timeouts)": []}
    for _ in range(args.rounds):
        runs["simulacra sequential"].append(_ours(args.agents, args.asks, "sequential"))
        runs["simulacra threads"].append(_ours(args.agents, args.asks, "threads"))
        runs["keyed Sim (timeouts)"].append(_ours_timeouts(args.agents, args.asks))
        runs["SimPy (timeouts)"].append(_simpy(args.agents, args.asks))
    simpy_s = statistics.median(runs["SimPy (timeouts)"])
    print(f"{args.agents:,} agents x {args.asks} asks = {steps:,} agent-steps "
          f"(median of {args.rounds})")
    for name, times in runs.items():
        wall = statistics.median(times)
        print(f"  {name:<22} {wall:7.3f} s  {steps / wall:10,.0f} agent-steps/s  "
              f"{wall / steps * 1e6:6.2f} us each  {wall / simpy_s:5.2f}x SimPy's time")


if __name__ == "__main__":
    main()
