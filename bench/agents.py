"""Agent backends: LocalBackend against a hand-written loop and Mesa 3; processes against local.

Two benchmarks, each alternating its contestants inside every round (the
order rotates every round) and taking the ratios inside the round, so that the
drift of a shared machine cancels out; the table gives the median ratio with
its min and max.

* ``messaging``: 100 000 agents on a seeded random graph; each step every
  agent sums the payloads in its inbox into its total and sends its total + 1
  to its 5 neighbours; 20 steps (10 million messages). Contestants: a
  ``Model`` on ``LocalBackend`` (``digests=False``: no per-step hashing) and a
  hand-written pure-Python loop doing the same work with agent objects and
  inbox lists. Both add the same floats in the same order, so their final
  totals must be identical (``==``); the script exits with status 1 if not.
  The ratio is framework time / loop time (the issue's target: <= 1.5).
  Third contestant: the same model written idiomatically in Mesa 3 (``mesa.Agent``
  subclasses, ``model.agents.do("step")`` then ``do("advance")`` to swap
  inbox lists; ``do`` keeps insertion order, so its totals are bit-identical
  too -- ``shuffle_do`` would reorder the additions). Ratio: Mesa time /
  framework time (target: > 1, i.e. the framework is faster). Skipped if Mesa
  is not installed; ``--mesa-agents`` runs it on a smaller population.
  Also reported, once, outside the rounds: where the framework's time goes
  (building agents, running actions, delivering, snapshot), the same run with
  the garbage collector left alone (``defer_gc=False``), and what per-step
  digests cost.
* ``compute``: 400 agents, each doing about 3 ms of pure-Python arithmetic per
  step and messaging 3 neighbours, 10 steps. Contestants: ``LocalBackend`` and
  ``ProcessPoolBackend(max_workers=2)`` (process start-up included). The
  per-step digests must be identical. The ratio is the speed-up (target >= 1.6).

Usage::

    python bench/agents.py                    # both benchmarks, 3 rounds
    python bench/agents.py --quick            # sizes / 10, a smoke test
    python bench/agents.py --only compute --rounds 5
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))

import simulacra  # noqa: E402
from simulacra import Agent, Context, LocalBackend, Model, Phase, ProcessPoolBackend  # noqa: E402

SEED = 1

# --------------------------------------------------------------------------- messaging


class Hop(Agent):
    """Sums its inbox into its total; sends total + 1 to each neighbour."""

    def __init__(self, id: int, *, neighbours: tuple[int, ...]) -> None:
        super().__init__(id)
        self.neighbours = neighbours
        self.total = 0.0

    def act(self, ctx: Context) -> None:
        self.total += sum(ctx.payloads())
        ctx.broadcast("v", self.total + 1.0, to=self.neighbours)


class HandAgent:
    """The hand-written loop's agent: the same state, no framework."""

    __slots__ = ("id", "neighbours", "total")

    def __init__(self, id: int, neighbours: tuple[int, ...]) -> None:
        self.id = id
        self.neighbours = neighbours
        self.total = 0.0


def graph(agents: int, degree: int, seed: int = SEED) -> list[tuple[int, ...]]:
    """Each agent's neighbours, drawn from a seeded stream."""
    rng = random.Random(seed)
    return [tuple(rng.randrange(agents) for _ in range(degree)) for _ in range(agents)]


def hand_loop(neighbours: list[tuple[int, ...]], steps: int) -> tuple[float, float]:
    """The same model as a plain loop: inbox lists, delivered at the end of each step."""
    start = time.perf_counter()
    agents = [HandAgent(i, nbrs) for i, nbrs in enumerate(neighbours)]
    inboxes: list[list[float]] = [[] for _ in agents]
    for _ in range(steps):
        outboxes: list[list[float]] = [[] for _ in agents]
        for agent in agents:
            agent.total += sum(inboxes[agent.id])
            value = agent.total + 1.0
            for neighbour in agent.neighbours:
                outboxes[neighbour].append(value)
        inboxes = outboxes
    checksum = sum(agent.total for agent in agents)
    return time.perf_counter() - start, checksum


def framework(neighbours: list[tuple[int, ...]], steps: int, **run: Any) -> tuple[float, float]:
    """The model on LocalBackend, from adding agents to reading the final totals."""
    start = time.perf_counter()
    model = Model(seed=SEED)
    for i, nbrs in enumerate(neighbours):
        model.add(Hop, i, neighbours=nbrs)
    result = model.run(Hop.act, steps=steps, **{"digests": False, **run})
    checksum = sum(state["total"] for _, state in result.agents.values())
    return time.perf_counter() - start, checksum


def mesa_run(neighbours: list[tuple[int, ...]], steps: int) -> tuple[float, float]:
    """The same model in Mesa 3, from building the agents to reading the final totals."""
    import mesa

    class MesaHop(mesa.Agent):  # type: ignore[misc]
        def __init__(self, model: Any, neighbours: tuple[int, ...]) -> None:
            super().__init__(model)
            self.neighbours = neighbours
            self.total = 0.0
            self.inbox: list[float] = []
            self.outbox: list[float] = []

        def step(self) -> None:
            self.total += sum(self.inbox)
            value = self.total + 1.0
            people = self.model.people
            for neighbour in self.neighbours:
                people[neighbour].outbox.append(value)

        def advance(self) -> None:
            self.inbox, self.outbox = self.outbox, []

    class MesaModel(mesa.Model):  # type: ignore[misc]
        def __init__(self, neighbours: list[tuple[int, ...]]) -> None:
            super().__init__(seed=SEED)
            self.people = [MesaHop(self, nbrs) for nbrs in neighbours]

        def step(self) -> None:
            self.agents.do("step")
            self.agents.do("advance")

    start = time.perf_counter()
    model = MesaModel(neighbours)
    for _ in range(steps):
        model.step()
    checksum = sum(agent.total for agent in model.people)
    return time.perf_counter() - start, checksum


def breakdown(neighbours: list[tuple[int, ...]], steps: int) -> dict[str, float]:
    """Seconds in each part of a framework run (driving the backend by hand, as Model does)."""
    times: dict[str, float] = {}
    start = time.perf_counter()
    model = Model(seed=SEED)
    for i, nbrs in enumerate(neighbours):
        model.add(Hop, i, neighbours=nbrs)
    times["add agents"] = time.perf_counter() - start
    backend = LocalBackend()
    start = time.perf_counter()
    backend.start(model.specs, model.seed, None)
    times["build agents"] = time.perf_counter() - start
    phase = Phase(Hop.act)
    times["run actions + deliver"] = 0.0
    old = gc.get_threshold()
    gc.set_threshold(old[0], old[1], max(old[2], 1000))  # as Model.run does
    try:
        for step in range(steps):
            t0 = time.perf_counter()
            backend.execute_and_deliver(phase, step, 0, False)  # Model.run's fast path
            times["run actions + deliver"] += time.perf_counter() - t0
        start = time.perf_counter()
        backend.snapshot()
        times["snapshot"] = time.perf_counter() - start
    finally:
        gc.set_threshold(*old)
    return times


# --------------------------------------------------------------------------- compute-heavy


class Cruncher(Agent):
    """About *work* iterations of integer arithmetic per step, seeded by its inbox."""

    def __init__(self, id: int, *, neighbours: tuple[int, ...], work: int) -> None:
        super().__init__(id)
        self.neighbours = neighbours
        self.work = work
        self.value = id

    def act(self, ctx: Context) -> None:
        x = (self.value + sum(ctx.payloads()) + ctx.rng.randrange(1000)) % 2_147_483_647
        for _ in range(self.work):
            x = (x * 48_271 + 11) % 2_147_483_647
        self.value = x
        ctx.broadcast("x", x % 1000, to=self.neighbours)


def compute_run(backend: Any, agents: int, steps: int, work: int) -> tuple[float, tuple[str, ...]]:
    start = time.perf_counter()
    model = Model(seed=SEED, backend=backend)
    for i, nbrs in enumerate(graph(agents, 3, seed=SEED + 1)):
        model.add(Cruncher, i, neighbours=nbrs, work=work)
    result = model.run(Cruncher.act, steps=steps)
    return time.perf_counter() - start, result.state_digests + result.message_digests


# --------------------------------------------------------------------------- driver


def alternate(rounds: int, first: Callable[[], tuple[float, Any]],
              second: Callable[[], tuple[float, Any]], label: str) -> tuple[list[float], bool]:
    """Run both contestants *rounds* times, flipping the order; ratios second/first time."""
    ratios: list[float] = []
    same = True
    for n in range(rounds):
        runs: dict[int, tuple[float, Any]] = {}
        for which in ((0, 1) if n % 2 == 0 else (1, 0)):
            gc.collect()
            runs[which] = (first, second)[which]()
        (t_first, out_first), (t_second, out_second) = runs[0], runs[1]
        same = same and out_first == out_second
        ratios.append(t_second / t_first)
        print(f"  round {n + 1}: {label}: {t_first:.2f} s vs {t_second:.2f} s "
              f"(ratio {ratios[-1]:.2f}); results identical: {out_first == out_second}",
              file=sys.stderr, flush=True)
    return ratios, same


def compete(rounds: int, contestants: dict[str, Callable[[], tuple[float, Any]]],
            ) -> tuple[dict[str, list[float]], bool]:
    """Run every contestant once per round, rotating the order; times by name, and
    whether all outputs were identical in every round."""
    names = list(contestants)
    times: dict[str, list[float]] = {name: [] for name in names}
    same = True
    for n in range(rounds):
        outputs = {}
        order = names[n % len(names):] + names[:n % len(names)]
        for name in order:
            gc.collect()
            seconds, outputs[name] = contestants[name]()
            times[name].append(seconds)
        identical = len({repr(out) for out in outputs.values()}) == 1
        same = same and identical
        print(f"  round {n + 1}: " + ", ".join(f"{name} {times[name][-1]:.2f} s"
                                              for name in names)
              + f"; results identical: {identical}", file=sys.stderr, flush=True)
    return times, same


def ratios_of(times: dict[str, list[float]], numerator: str, denominator: str) -> list[float]:
    """Per-round ratios numerator time / denominator time."""
    return [a / b for a, b in zip(times[numerator], times[denominator], strict=True)]


def summary(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"


def describe_machine() -> str:
    commit = "?"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,  # noqa: S607
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"simulacra {simulacra.__version__} ({commit} + working tree), "
            f"{platform.python_implementation()} {platform.python_version()}, "
            f"{os.cpu_count()} CPUs, load {load:.1f}, "
            f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="sizes / 10")
    parser.add_argument("--only", action="append", choices=["messaging", "compute"])
    parser.add_argument("--mesa-agents", type=int, default=None,
                        help="agents of the Mesa comparison (default: the same 100 000)")
    args = parser.parse_args(argv)
    only = set(args.only or ["messaging", "compute"])
    scale = 10 if args.quick else 1
    print(describe_machine())
    ok = True

    if "messaging" in only:
        agents, steps = 100_000 // scale, 20
        neighbours = graph(agents, 5)
        print(f"\nmessaging: {agents:,} agents x 5 messages x {steps} steps "
              f"= {agents * 5 * steps:,} messages")
        contestants: dict[str, Callable[[], tuple[float, Any]]] = {
            "loop": lambda: hand_loop(neighbours, steps),
            "LocalBackend": lambda: framework(neighbours, steps),
        }
        has_mesa = importlib.util.find_spec("mesa") is not None
        same_size = args.mesa_agents is None or args.mesa_agents // scale == agents
        if has_mesa and same_size:
            contestants["Mesa"] = lambda: mesa_run(neighbours, steps)
        times, same = compete(args.rounds, contestants)
        ok = ok and same
        print(f"  LocalBackend / hand-written loop: "
              f"{summary(ratios_of(times, 'LocalBackend', 'loop'))} (target <= 1.5); "
              f"final totals identical (==): {'ok' if same else 'FAILED'}")
        if "Mesa" in times:
            import mesa

            print(f"  Mesa {mesa.__version__} / LocalBackend: "
                  f"{summary(ratios_of(times, 'Mesa', 'LocalBackend'))} (target > 1); "
                  f"Mesa / loop: {summary(ratios_of(times, 'Mesa', 'loop'))}")
        elif has_mesa:
            small = args.mesa_agents // scale
            few = graph(small, 5)
            print(f"  Mesa comparison on {small:,} agents:")
            times, same = compete(args.rounds, {
                "LocalBackend": lambda: framework(few, steps),
                "Mesa": lambda: mesa_run(few, steps)})
            ok = ok and same
            print(f"  Mesa / LocalBackend ({small:,} agents): "
                  f"{summary(ratios_of(times, 'Mesa', 'LocalBackend'))} (target > 1)")
        else:
            print("  Mesa is not installed: no Mesa comparison")
        loop_s, _ = hand_loop(neighbours, steps)
        plain_s, _ = framework(neighbours, steps, defer_gc=False)
        print(f"  once, for scale: loop {loop_s:.2f} s; LocalBackend with defer_gc=False "
              f"{plain_s:.2f} s ({plain_s / loop_s:.2f}x the loop)")
        bare_s, _ = framework(neighbours, 2)
        digest_s, _ = framework(neighbours, 2, digests=True)
        print(f"  per-step digests (state of {agents:,} agents + {agents * 5:,} messages, "
              f"canonical JSON + SHA-256) add {(digest_s - bare_s) / 2:.2f} s per step")
        parts = breakdown(neighbours, steps)
        total = sum(parts.values())
        print("  where LocalBackend's time goes (one run): " + ", ".join(
            f"{name} {seconds:.2f} s ({seconds / total:.0%})" for name, seconds in parts.items()))

    if "compute" in only:
        agents, steps, work = 400 // scale, 10, 30_000
        print(f"\ncompute: {agents} agents x ~{work:,} iterations x {steps} steps; "
              "ProcessPoolBackend(max_workers=2) vs LocalBackend")
        ratios, same = alternate(
            args.rounds,
            lambda: compute_run(ProcessPoolBackend(max_workers=2), agents, steps, work),
            lambda: compute_run("local", agents, steps, work),
            "processes(2) vs local")
        ok = ok and same
        print(f"  speed-up of 2 worker processes, cold (each run starts its workers): "
              f"{summary(ratios)} (target >= 1.6); per-step digests identical: "
              f"{'ok' if same else 'FAILED'}")
        # Persistent workers are the point of the backend: a study reuses one
        # backend for many runs, and only the first pays for starting workers.
        warm = ProcessPoolBackend(max_workers=2)
        try:
            compute_run(warm, agents, 1, 10)  # start the workers once
            ratios, same = alternate(
                args.rounds,
                lambda: compute_run(warm, agents, steps, work),
                lambda: compute_run("local", agents, steps, work),
                "processes(2, warm) vs local")
        finally:
            warm.close()
        ok = ok and same
        print(f"  speed-up of 2 worker processes, warm (workers started once, reused): "
              f"{summary(ratios)} (target >= 1.6); per-step digests identical: "
              f"{'ok' if same else 'FAILED'}")

    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
