"""Pausable agents: greenlet hand-off against thread-per-agent hand-off, side by side.

Three measurements, each contestant run in the same process and round (the
order flips every round, the table gives the median with min and max):

* ``switch``: N paused agents, each ``while True: value = pause()``; the host
  resumes them round-robin R times. One resume is a full round trip (host ->
  agent -> host). Contestants:

  - ``greenlet host``: :class:`simulacra.PausableHost` (``start``/``resume``,
    status checks, no trace);
  - ``raw greenlet``: two bare ``greenlet.switch`` calls, the floor;
  - ``thread/agent``: the seed's design, one daemon thread per agent and a
    ``threading.Event`` pair (settled / resume) per agent;
  - ``AsyncHost``: our async agents (threads), ``resume`` + ``join``.

  Ratios are thread time / greenlet time (higher = greenlets faster).
* ``memory``: the resident memory (RSS, from ``/proc/self/statm``) and the
  Python heap (``tracemalloc``) added by N paused agents, each in a fresh
  subprocess so baselines are clean; threads also reserve virtual memory for
  their stacks, shown as ``VSZ``. Each agent is paused two frames deep with a
  few locals.
* ``virtual``: the cost of one ``ctx.sleep(d)`` on virtual time against one
  ``yield sim.delay(d)`` in a kernel generator process (same Sim, same
  events): what running blocking-style code on a greenlet costs.

Usage::

    python bench/pausable.py                 # everything
    python bench/pausable.py --quick         # small sizes, a smoke test
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))

import greenlet  # noqa: E402

from simulacra import AsyncHost, PausableHost, Sim  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


# -- contestants: N paused agents, resumed round-robin ---------------------------------


def body(pause: Callable[[Any], Any]) -> None:
    """The agent: pauses two frames down, with a few locals, forever."""
    total, seen = 0, []

    def inner() -> Any:
        return pause("tick")

    while True:
        value = inner()
        total += 1
        if len(seen) < 4:
            seen.append(value)


def greenlet_host(n: int) -> tuple[Callable[[], None], Callable[[], None]]:
    host = PausableHost()
    agents = [host.spawn(lambda ctx: body(ctx.pause), name=f"a{i}") for i in range(n)]
    for agent in agents:
        host.start(agent)
    resume = host.resume

    def one_round() -> None:
        for agent in agents:
            resume(agent, 1)

    return one_round, host.close


def raw_greenlets(n: int) -> tuple[Callable[[], None], Callable[[], None]]:
    main = greenlet.getcurrent()
    glets = [greenlet.greenlet(lambda: body(main.switch)) for _ in range(n)]
    for g in glets:
        g.switch()

    def one_round() -> None:
        for g in glets:
            g.switch(1)

    def close() -> None:
        for g in glets:
            g.throw(greenlet.GreenletExit)

    return one_round, close


class ThreadAgent:
    """The seed's sync agent: a daemon thread and a settled/resume Event pair."""

    def __init__(self) -> None:
        self.settled = threading.Event()
        self.resume_event = threading.Event()
        self.value: Any = None
        self.stop = False
        self.status = "new"

    def start(self) -> None:
        threading.Thread(target=self.run, daemon=True).start()
        self.settled.wait()

    def run(self) -> None:
        try:
            body(self.pause)
        except SystemExit:
            self.status = "closed"
        finally:
            self.settled.set()

    def pause(self, reason: Any) -> Any:
        self.status = "paused"
        self.settled.set()
        self.resume_event.wait()
        self.resume_event.clear()
        if self.stop:
            raise SystemExit
        self.status = "running"
        return self.value

    def resume(self, value: Any) -> None:
        self.settled.clear()
        self.value = value
        self.resume_event.set()
        self.settled.wait()


def thread_agents(n: int) -> tuple[Callable[[], None], Callable[[], None]]:
    agents = [ThreadAgent() for _ in range(n)]
    for agent in agents:
        agent.start()

    def one_round() -> None:
        for agent in agents:
            agent.resume(1)

    def close() -> None:
        for agent in agents:
            agent.stop = True
            agent.resume(None)

    return one_round, close


def async_host(n: int) -> tuple[Callable[[], None], Callable[[], None]]:
    host = AsyncHost()
    agents = [host.spawn(lambda ctx: body(ctx.pause), name=f"a{i}") for i in range(n)]
    for agent in agents:
        host.start(agent)
    for agent in agents:
        host.join(agent)
    resume, join = host.resume, host.join

    def one_round() -> None:
        for agent in agents:
            resume(agent, 1)
            join(agent)

    return one_round, host.close


CONTESTANTS: dict[str, Callable[[int], tuple[Callable[[], None], Callable[[], None]]]] = {
    "greenlet host": greenlet_host,
    "raw greenlet": raw_greenlets,
    "thread/agent": thread_agents,
    "AsyncHost": async_host,
}


def bench_switch(n: int, resumes: int, rounds: int) -> dict[str, list[float]]:
    """Microseconds per resume round trip, per contestant, per round."""
    per_round = max(1, resumes // n)
    out: dict[str, list[float]] = {name: [] for name in CONTESTANTS}
    names = list(CONTESTANTS)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            one_round, close = CONTESTANTS[name](n)
            one_round()  # warm up
            gc.collect()
            gc.disable()
            t0 = time.perf_counter()
            for _ in range(per_round):
                one_round()
            elapsed = time.perf_counter() - t0
            gc.enable()
            close()
            out[name].append(elapsed / (per_round * n) * 1e6)
    return out


# -- memory: one fresh subprocess per (kind, n) -----------------------------------------


def _statm() -> tuple[int, int]:
    with open("/proc/self/statm") as f:
        size, resident = f.read().split()[:2]
    return int(size) * PAGE, int(resident) * PAGE


def memory_child(kind: str, n: int) -> dict[str, float]:
    """Runs in a subprocess: the memory N paused agents of *kind* add."""
    gc.collect()
    tracemalloc.start()
    vsz0, rss0 = _statm()
    heap0 = tracemalloc.get_traced_memory()[0]
    keep: Any
    if kind == "greenlet":
        host = PausableHost()
        for i in range(n):
            host.start(host.spawn(lambda ctx: body(ctx.pause), name=f"a{i}"))
        keep = host
    else:
        agents = [ThreadAgent() for _ in range(n)]
        for agent in agents:
            agent.start()
        keep = agents
    gc.collect()
    vsz1, rss1 = _statm()
    heap1 = tracemalloc.get_traced_memory()[0]
    del keep
    return {"rss": (rss1 - rss0) / n, "heap": (heap1 - heap0) / n, "vsz": (vsz1 - vsz0) / n}


def bench_memory(kind: str, n: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", kind, str(n)],
        capture_output=True, text=True, check=True, env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# -- virtual time: ctx.sleep against yield sim.delay -------------------------------------


def bench_virtual(n: int, steps: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ctx.sleep (greenlet)": [], "yield sim.delay (kernel)": []}

    def agent(ctx: Any) -> None:
        for _ in range(steps):
            ctx.sleep(1.0)

    def proc(sim: Sim) -> Any:
        for _ in range(steps):
            yield sim.delay(1.0)

    def run_greenlets() -> float:
        host = PausableHost()
        t0 = time.perf_counter()
        for i in range(n):
            host.start(host.spawn(agent, name=f"a{i}"))
        host.run()
        return time.perf_counter() - t0

    def run_kernel() -> float:
        sim = Sim()
        t0 = time.perf_counter()
        for _ in range(n):
            sim.spawn(proc)
        sim.run()
        return time.perf_counter() - t0

    runs = {"ctx.sleep (greenlet)": run_greenlets, "yield sim.delay (kernel)": run_kernel}
    names = list(runs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            gc.collect()
            out[name].append(runs[name]() / (n * steps) * 1e6)
    return out


def _med(values: list[float]) -> str:
    return f"{statistics.median(values):9.2f}  ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory-child", nargs=2, metavar=("KIND", "N"))
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child[0], int(args.memory_child[1]))))
        return 0
    q = 10 if args.quick else 1
    n_switch, resumes = 1000 // q, 200_000 // q
    print(f"# bench/pausable.py  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC  "
          f"Python {platform.python_version()}  greenlet {greenlet.__version__}  "
          f"{os.cpu_count()} CPUs  load {os.getloadavg()[0]:.1f}")

    print(f"\n## switch: {n_switch} paused agents, {resumes} resumes, {args.rounds} rounds")
    print("us per resume round trip (host -> agent -> host): median (min-max)")
    switch = bench_switch(n_switch, resumes, args.rounds)
    for name, values in switch.items():
        print(f"  {name:16} {_med(values)}")
    base = statistics.median(switch["greenlet host"])
    for name in ("thread/agent", "AsyncHost", "raw greenlet"):
        ratios = [t / g for t, g in zip(switch[name], switch["greenlet host"], strict=True)]
        print(f"  ratio {name} / greenlet host: {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f})")
    del base

    n_green, n_thread = 100_000 // q, 2000 // q
    print(f"\n## memory per paused agent ({n_green} greenlet agents, {n_thread} threads; "
          "fresh subprocess each)")
    green = bench_memory("greenlet", n_green)
    thread = bench_memory("thread", n_thread)
    print(f"  {'':16} {'RSS':>10} {'Python heap':>12} {'VSZ':>12}")
    for name, m in (("greenlet host", green), ("thread/agent", thread)):
        print(f"  {name:16} {m['rss'] / 1024:8.2f} KiB {m['heap'] / 1024:9.2f} KiB "
              f"{m['vsz'] / 1024:9.1f} KiB")
    print(f"  ratio thread/agent / greenlet host: RSS {thread['rss'] / green['rss']:.2f}, "
          f"VSZ {thread['vsz'] / max(green['vsz'], 1):.1f}")

    n_virtual, steps = 2000 // q, 50
    print(f"\n## virtual time: {n_virtual} agents x {steps} sleeps, {args.rounds} rounds")
    print("us per sleep: median (min-max)")
    virtual = bench_virtual(n_virtual, steps, args.rounds)
    for name, values in virtual.items():
        print(f"  {name:26} {_med(values)}")
    ratios = [g / k for g, k in zip(virtual["ctx.sleep (greenlet)"],
                                    virtual["yield sim.delay (kernel)"], strict=True)]
    print(f"  ratio greenlet / kernel process: {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f})")
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
