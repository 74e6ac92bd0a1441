"""simulacra's kernel against SimPy 4.1.2, alternating in one process.

Every model is written twice, once against SimPy's API and once against
simulacra's, with the same ``random.Random(seed)`` draws in the same order. The
two libraries run alternately inside each round (the order flips every round)
and the ratio is taken inside the round, so that machine drift, which is large
on a shared machine, cancels out of the ratio. The table reports the median
over rounds of each rate and of the per-round ratios, with their min and max.

Benchmarks (``--only NAME``, repeatable):

* ``mmc``: M/M/3 queue, lambda 2.7, mu 1, 100 000 customers: customers/s. The
  mean wait must be identical (``==``) under both kernels; the script exits
  with status 1 if it is not.
* ``pingpong``: two processes passing an item back and forth through two
  Stores: round trips/s.
* ``processes``: 100 000 processes doing 10 timeouts each: timeouts/s.
* ``memory``: traced memory (``tracemalloc``) per idle process: 100 000
  processes spawned, run until all of them wait on a long delay, memory delta
  divided by the number of processes. Ratio = simulacra / SimPy (lower is better).
  Notes add the same with every process waiting for a different time (no
  shared time slot), and the share of the suspended generator itself.
* ``contention``: 1 000 processes sharing a Resource of capacity 10, 20
  request/hold/release cycles each: cycles/s.
* ``import``: ``import simulacra.core`` (which imports the ``simulacra``
  package) versus ``import simpy``, each in a fresh interpreter, minus a bare
  ``python -c pass``: milliseconds. Ratio = simulacra / SimPy.
* ``trace``: simulacra's M/M/3 with ``Sim(trace=True)`` versus ``trace=False``
  (SimPy is not involved): ratio = traced rate / untraced rate.

``--kernel python|compiled|both`` chooses simulacra's kernel (``SIMULACRA_KERNEL``,
see ``simulacra.core.KERNEL``); without it the process's own (``auto``) runs. With
``both``, each round runs once per kernel, each in its own subprocess with SimPy
beside it, and the table adds the compiled kernel's ratio to the Python one's.

Usage::

    python bench/kernel_vs_simpy.py                 # 5 rounds, full size
    python bench/kernel_vs_simpy.py --kernel both   # the two kernels side by side
    python bench/kernel_vs_simpy.py --quick         # sizes / 10, for a smoke test
    python bench/kernel_vs_simpy.py --only mmc --rounds 9 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))

import simpy  # noqa: E402

import simulacra  # noqa: E402
import simulacra.core  # noqa: E402
from simulacra import Resource, Sim, Store  # noqa: E402

SEED = 1
LAMBDA, MU, SERVERS = 2.7, 1.0, 3

# --------------------------------------------------------------------------- models: M/M/c


def mmc_simpy(customers: int, seed: int = SEED) -> tuple[float, float, int]:
    """SimPy M/M/c. Returns (seconds, mean wait, customers served)."""
    start = time.perf_counter()
    env = simpy.Environment()
    rng = random.Random(seed)
    tellers = simpy.Resource(env, capacity=SERVERS)
    waits: list[float] = []

    def customer(env: simpy.Environment) -> Generator[Any, Any, None]:
        arrived = env.now
        with tellers.request() as req:
            yield req
            waits.append(env.now - arrived)
            yield env.timeout(rng.expovariate(MU))

    def source(env: simpy.Environment) -> Generator[Any, Any, None]:
        for _ in range(customers):
            yield env.timeout(rng.expovariate(LAMBDA))
            env.process(customer(env))

    env.process(source(env))
    env.run()
    seconds = time.perf_counter() - start
    return seconds, math.fsum(waits) / len(waits), len(waits)


def mmc_simulacra(customers: int, seed: int = SEED, *,
                  trace: bool = False) -> tuple[float, float, int]:
    """simulacra M/M/c, draw for draw the same as :func:`mmc_simpy`."""
    start = time.perf_counter()
    sim = Sim(seed=0, trace=trace)
    rng = random.Random(seed)
    tellers = Resource(sim, capacity=SERVERS)
    waits: list[float] = []

    def customer(sim: Sim) -> Generator[Any, Any, None]:
        arrived = sim.now
        with tellers.request() as req:
            yield req
            waits.append(sim.now - arrived)
            yield sim.delay(rng.expovariate(MU))

    def source(sim: Sim) -> Generator[Any, Any, None]:
        for _ in range(customers):
            yield sim.delay(rng.expovariate(LAMBDA))
            sim.spawn(customer(sim))

    sim.spawn(source(sim))
    sim.run()
    seconds = time.perf_counter() - start
    return seconds, math.fsum(waits) / len(waits), len(waits)


# --------------------------------------------------------------------------- models: ping-pong


def pingpong_simpy(trips: int) -> tuple[float, int]:
    """SimPy: an item goes a -> pong -> b -> ping *trips* times. Returns (seconds, checksum)."""
    start = time.perf_counter()
    env = simpy.Environment()
    a, b = simpy.Store(env), simpy.Store(env)
    got: list[int] = []

    def ping(env: simpy.Environment) -> Generator[Any, Any, None]:
        for i in range(trips):
            yield a.put(i)
            item = yield b.get()
            got.append(item)

    def pong(env: simpy.Environment) -> Generator[Any, Any, None]:
        for _ in range(trips):
            item = yield a.get()
            yield b.put(item + 1)

    env.process(ping(env))
    env.process(pong(env))
    env.run()
    return time.perf_counter() - start, sum(got)


def pingpong_simulacra(trips: int) -> tuple[float, int]:
    """simulacra: the same ping-pong."""
    start = time.perf_counter()
    sim = Sim(seed=0)
    a: Store[int] = Store(sim)
    b: Store[int] = Store(sim)
    got: list[int] = []

    def ping(sim: Sim) -> Generator[Any, Any, None]:
        for i in range(trips):
            yield a.put(i)
            item = yield b.get()
            got.append(item)

    def pong(sim: Sim) -> Generator[Any, Any, None]:
        for _ in range(trips):
            item = yield a.get()
            yield b.put(item + 1)

    sim.spawn(ping(sim))
    sim.spawn(pong(sim))
    sim.run()
    return time.perf_counter() - start, sum(got)


# --------------------------------------------------------------------------- models: many processes

TIMEOUTS = 10


def processes_simpy(count: int, seed: int = SEED) -> tuple[float, float]:
    """SimPy: *count* processes doing TIMEOUTS random timeouts each. Returns (seconds, end)."""
    start = time.perf_counter()
    env = simpy.Environment()
    rng = random.Random(seed)

    def worker(env: simpy.Environment) -> Generator[Any, Any, None]:
        for _ in range(TIMEOUTS):
            yield env.timeout(rng.expovariate(1.0))

    for _ in range(count):
        env.process(worker(env))
    env.run()
    return time.perf_counter() - start, env.now


def processes_simulacra(count: int, seed: int = SEED) -> tuple[float, float]:
    """simulacra: the same processes."""
    start = time.perf_counter()
    sim = Sim(seed=0)
    rng = random.Random(seed)

    def worker(sim: Sim) -> Generator[Any, Any, None]:
        for _ in range(TIMEOUTS):
            yield sim.delay(rng.expovariate(1.0))

    for _ in range(count):
        sim.spawn(worker(sim))
    sim.run()
    return time.perf_counter() - start, sim.now


# --------------------------------------------------------------------------- models: idle memory

IDLE_DELAY = 1e9
#: How many idle processes have started (checked after the warm-up run).
_started = [0]


def _idle_simpy(env: simpy.Environment, delay: float) -> Generator[Any, Any, None]:
    _started[0] += 1
    yield env.timeout(delay)


def _idle_simulacra(sim: Sim, delay: float) -> Generator[Any, Any, None]:
    _started[0] += 1
    yield sim.delay(delay)


def _bare() -> Generator[None, None, None]:
    yield None


def memory_generator(count: int) -> float:
    """Traced bytes per started, suspended bare generator (the part common to both kernels)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        generators = [_bare() for _ in range(count)]
        for generator in generators:
            next(generator)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # Less the list's pointer to each generator.
    return (after - before) / count - 8


def memory_simpy(count: int, *, spread: bool = False) -> float:
    """Traced bytes per idle SimPy process (all started, all waiting on a timeout).

    All wait for the same time, or with *spread* each for a different time.
    """
    gc.collect()
    tracemalloc.start()
    try:
        env = simpy.Environment()
        env.run(until=0.5)  # warm up whatever run() allocates once
        _started[0] = 0
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            env.process(_idle_simpy(env, IDLE_DELAY + i if spread else IDLE_DELAY))
        env.run(until=1.0)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        assert _started[0] == count  # every process has started and waits on its timeout
    finally:
        tracemalloc.stop()
    return (after - before) / count


def memory_simulacra(count: int, *, spread: bool = False) -> float:
    """Traced bytes per idle simulacra process, measured as for SimPy."""
    gc.collect()
    tracemalloc.start()
    try:
        sim = Sim(seed=0)
        sim.run(until=0.5)
        _started[0] = 0
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            sim.spawn(_idle_simulacra(sim, IDLE_DELAY + i if spread else IDLE_DELAY))
        sim.run(until=1.0)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        assert _started[0] == count  # every process has started and waits on its delay
    finally:
        tracemalloc.stop()
    return (after - before) / count


# --------------------------------------------------------------------------- models: contention

CAPACITY, CYCLES = 10, 20


def contention_simpy(count: int, seed: int = SEED) -> tuple[float, float, float]:
    """SimPy: *count* processes, CYCLES request/hold/release each. Returns (s, end, total wait)."""
    start = time.perf_counter()
    env = simpy.Environment()
    rng = random.Random(seed)
    shared = simpy.Resource(env, capacity=CAPACITY)
    waited: list[float] = []

    def user(env: simpy.Environment) -> Generator[Any, Any, None]:
        for _ in range(CYCLES):
            asked = env.now
            with shared.request() as req:
                yield req
                waited.append(env.now - asked)
                yield env.timeout(rng.expovariate(1.0))
            yield env.timeout(rng.expovariate(0.01))

    for _ in range(count):
        env.process(user(env))
    env.run()
    return time.perf_counter() - start, env.now, math.fsum(waited)


def contention_simulacra(count: int, seed: int = SEED) -> tuple[float, float, float]:
    """simulacra: the same contention model."""
    start = time.perf_counter()
    sim = Sim(seed=0)
    rng = random.Random(seed)
    shared = Resource(sim, capacity=CAPACITY)
    waited: list[float] = []

    def user(sim: Sim) -> Generator[Any, Any, None]:
        for _ in range(CYCLES):
            asked = sim.now
            with shared.request() as req:
                yield req
                waited.append(sim.now - asked)
                yield sim.delay(rng.expovariate(1.0))
            yield sim.delay(rng.expovariate(0.01))

    for _ in range(count):
        sim.spawn(user(sim))
    sim.run()
    return time.perf_counter() - start, sim.now, math.fsum(waited)


# --------------------------------------------------------------------------- import time


def _child_env(pycache: str) -> dict[str, str]:
    """The environment of an import-time launch: bytecode cached outside the tree.

    Python may have been told not to write bytecode (PYTHONDONTWRITEBYTECODE),
    while an installed SimPy comes with its .pyc files: comparing a compile
    with a cache hit would be unfair. Both are compiled once into *pycache*
    (PYTHONPYCACHEPREFIX, so nothing is written next to the sources) and every
    timed launch reads the cache, as an installed package would.
    """
    env = {key: value for key, value in os.environ.items()
           if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *sys.path[1:]])
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def _launch(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - start


def import_times(launches: int) -> tuple[float, float, float, float]:
    """Milliseconds to import simulacra.core and simpy, over a bare interpreter start.

    Each launch triple (bare, simulacra, simpy) runs back to back; the medians
    of the differences are returned, then the ``-X importtime`` cumulative
    times of each package (one launch each).
    """
    with tempfile.TemporaryDirectory(prefix="simulacra-bench-pycache-") as pycache:
        env = _child_env(pycache)
        for code in ("pass", "import simulacra.core", "import simpy"):  # fill the cache
            _launch(code, env)
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(launches):
            bare = _launch("pass", env)
            ours.append(_launch("import simulacra.core", env) - bare)
            theirs.append(_launch("import simpy", env) - bare)
        return (statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3,
                _importtime_ms("simulacra.core", env), _importtime_ms("simpy", env))


def _importtime_ms(module: str, env: dict[str, str]) -> float:
    """``python -X importtime``: cumulative import time of *module*'s top-level package."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                            env=env, check=True, capture_output=True, text=True)
    top = module.split(".", maxsplit=1)[0]
    for line in result.stderr.splitlines():
        parts = [part.strip() for part in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == top:
            return int(parts[1]) / 1e3
    raise RuntimeError(f"no -X importtime line for {top!r}")


# --------------------------------------------------------------------------- harness


@dataclass
class Result:
    """What one benchmark measured, round by round."""

    name: str
    title: str
    unit: str
    #: What the ratio is, for the table.
    ratio_means: str
    ours: list[float] = field(default_factory=list)
    simpy: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)
    #: Same-run equality checks: description -> every round matched.
    checks: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def check(self, what: str, ok: bool) -> None:
        self.checks[what] = self.checks.get(what, True) and ok


@dataclass(frozen=True)
class Sizes:
    """Problem sizes; --quick divides them by ten."""

    customers: int = 100_000
    trips: int = 100_000
    processes: int = 100_000
    idle: int = 100_000
    users: int = 1_000
    launches: int = 5


def _pair(first_ours: bool, ours: Callable[[], Any], theirs: Callable[[], Any]) -> tuple[Any, Any]:
    """Run both, in the given order, each after a full collection."""
    results: dict[str, Any] = {}
    for who in (("ours", "theirs") if first_ours else ("theirs", "ours")):
        gc.collect()
        results[who] = ours() if who == "ours" else theirs()
    return results["ours"], results["theirs"]


def bench_mmc(res: Result, sizes: Sizes, first_ours: bool) -> None:
    n = sizes.customers
    (t_ours, w_ours, s_ours), (t_simpy, w_simpy, s_simpy) = _pair(
        first_ours, lambda: mmc_simulacra(n), lambda: mmc_simpy(n))
    res.ours.append(n / t_ours)
    res.simpy.append(n / t_simpy)
    res.ratio.append(t_simpy / t_ours)
    res.check("mean wait identical (==)", w_ours == w_simpy and s_ours == s_simpy == n)
    res.notes.append(f"mean wait: simulacra {w_ours!r}, SimPy {w_simpy!r}")


def bench_pingpong(res: Result, sizes: Sizes, first_ours: bool) -> None:
    n = sizes.trips
    (t_ours, c_ours), (t_simpy, c_simpy) = _pair(
        first_ours, lambda: pingpong_simulacra(n), lambda: pingpong_simpy(n))
    res.ours.append(n / t_ours)
    res.simpy.append(n / t_simpy)
    res.ratio.append(t_simpy / t_ours)
    res.check("items identical", c_ours == c_simpy)


def bench_processes(res: Result, sizes: Sizes, first_ours: bool) -> None:
    n = sizes.processes
    (t_ours, end_ours), (t_simpy, end_simpy) = _pair(
        first_ours, lambda: processes_simulacra(n), lambda: processes_simpy(n))
    res.ours.append(n * TIMEOUTS / t_ours)
    res.simpy.append(n * TIMEOUTS / t_simpy)
    res.ratio.append(t_simpy / t_ours)
    res.check("end time identical", end_ours == end_simpy)
    res.notes.append(f"wall time: simulacra {t_ours:.2f} s, SimPy {t_simpy:.2f} s")


def bench_memory(res: Result, sizes: Sizes, first_ours: bool) -> None:
    n = sizes.idle
    ours, theirs = _pair(first_ours, lambda: memory_simulacra(n), lambda: memory_simpy(n))
    res.ours.append(ours)
    res.simpy.append(theirs)
    res.ratio.append(ours / theirs)
    spread_ours, spread_theirs = _pair(first_ours, lambda: memory_simulacra(n, spread=True),
                                       lambda: memory_simpy(n, spread=True))
    res.notes.append(
        f"each waiting for a different time: simulacra {spread_ours:.0f}, SimPy "
        f"{spread_theirs:.0f} bytes/process (ratio {spread_ours / spread_theirs:.2f})"
    )
    generator = memory_generator(n)
    res.notes.append(
        f"of which the suspended generator itself: {generator:.0f} bytes; without it, "
        f"simulacra {ours - generator:.0f}, SimPy {theirs - generator:.0f} bytes/process "
        f"(ratio {(ours - generator) / (theirs - generator):.2f})"
    )


def bench_contention(res: Result, sizes: Sizes, first_ours: bool) -> None:
    n = sizes.users
    (t_ours, end_ours, w_ours), (t_simpy, end_simpy, w_simpy) = _pair(
        first_ours, lambda: contention_simulacra(n), lambda: contention_simpy(n))
    res.ours.append(n * CYCLES / t_ours)
    res.simpy.append(n * CYCLES / t_simpy)
    res.ratio.append(t_simpy / t_ours)
    res.check("end time and total wait identical", end_ours == end_simpy and w_ours == w_simpy)


def bench_import(res: Result, sizes: Sizes, first_ours: bool) -> None:
    ours, theirs, ours_x, theirs_x = import_times(sizes.launches)
    res.ours.append(ours)
    res.simpy.append(theirs)
    res.ratio.append(ours / theirs)
    res.notes.append(f"-X importtime cumulative: simulacra {ours_x:.1f} ms, "
                     f"simpy {theirs_x:.1f} ms")


def bench_trace(res: Result, sizes: Sizes, first_ours: bool) -> None:
    n = sizes.customers
    (t_on, w_on, _), (t_off, w_off, _) = _pair(
        first_ours, lambda: mmc_simulacra(n, trace=True), lambda: mmc_simulacra(n))
    res.ours.append(n / t_on)
    res.simpy.append(n / t_off)  # the "SimPy" column holds simulacra untraced here
    res.ratio.append(t_off / t_on)
    res.check("tracing does not change the mean wait", w_on == w_off)


@dataclass(frozen=True)
class Bench:
    """One benchmark: how to run a round, and how to show it."""

    #: Formatted with the Sizes fields (``{customers}`` and so on).
    title: str
    unit: str
    ratio_means: str
    run: Callable[[Result, Sizes, bool], None]
    #: How many decimals to show the values with.
    digits: int = 0


BENCHES: dict[str, Bench] = {
    "mmc": Bench("M/M/3, {customers:,} customers", "customers/s", "speed-up", bench_mmc),
    "pingpong": Bench("Store ping-pong, {trips:,} trips", "round trips/s", "speed-up",
                      bench_pingpong),
    "processes": Bench("{processes:,} processes x 10 timeouts", "timeouts/s", "speed-up",
                       bench_processes),
    "memory": Bench("idle process memory ({idle:,})", "bytes/process",
                    "ours/SimPy (lower better)", bench_memory),
    "contention": Bench("Resource(10), {users:,} users x 20", "cycles/s", "speed-up",
                        bench_contention),
    "import": Bench("import time (fresh process)", "ms", "ours/SimPy (lower better)",
                    bench_import, digits=1),
    "trace": Bench("M/M/3 traced, {customers:,} (info)", "customers/s", "traced/untraced",
                   bench_trace),
}


def _fmt(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def _table(results: list[Result]) -> str:
    header = ["benchmark", "unit", "simulacra", "SimPy", "ratio median [min-max]", "ratio is"]
    rows = [header]
    for res in results:
        bench = BENCHES[res.name]
        simpy_label = "(untraced) " if res.name == "trace" else ""
        rows.append([
            res.title,
            bench.unit,
            _fmt(statistics.median(res.ours), bench.digits),
            simpy_label + _fmt(statistics.median(res.simpy), bench.digits),
            f"{statistics.median(res.ratio):.2f} [{min(res.ratio):.2f}-{max(res.ratio):.2f}]",
            bench.ratio_means,
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(w) if i in (0, 1, 5) else cell.rjust(w)
                 for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _git(*args: str) -> str:
    try:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,  # noqa: S607
                                check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return result.stdout.strip()


def _machine() -> dict[str, str]:
    dirty = _git("status", "--porcelain", "--", "src")
    return {
        "kernel": simulacra.core.KERNEL,
        "commit": _git("rev-parse", "--short", "HEAD")
        + (" + uncommitted changes in src/" if dirty and dirty != "unknown" else ""),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
        "simpy": simpy.__version__,
        "simulacra": simulacra.__version__,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks and print the table; 1 if a same-run equality check failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--quick", action="store_true", help="sizes divided by 10")
    parser.add_argument("--only", action="append", choices=sorted(BENCHES), metavar="NAME",
                        help=f"run only this benchmark (repeatable): {', '.join(BENCHES)}")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--kernel", choices=("python", "compiled", "both"),
                        help="simulacra's kernel (default: this process's, SIMULACRA_KERNEL)")
    parser.add_argument("--round-offset", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.kernel == "both":
        return _both_kernels(args)
    if args.kernel is not None and args.kernel != simulacra.core.KERNEL:
        # The kernel is chosen at import: run again with the variable set.
        env = {**os.environ, "SIMULACRA_KERNEL": args.kernel}
        child_args = list(argv if argv is not None else sys.argv[1:])
        return subprocess.run([sys.executable, __file__, *child_args], env=env,
                              check=False).returncode
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    sizes = Sizes()
    if args.quick:
        sizes = Sizes(customers=10_000, trips=10_000, processes=10_000, idle=10_000,
                      users=100, launches=3)
    names = args.only or list(BENCHES)
    results = {name: Result(name, BENCHES[name].title.format(**vars(sizes)), BENCHES[name].unit,
                            BENCHES[name].ratio_means) for name in names}

    machine = _machine()
    print(f"simulacra {machine['simulacra']} ({machine['commit']}, {machine['kernel']} kernel) "
          f"vs SimPy {machine['simpy']}, "
          f"{machine['python']}, {machine['cpus']} CPUs, {machine['date']}")
    print(f"rounds: {args.rounds}{' (quick sizes)' if args.quick else ''}; "
          f"sizes: {sizes}")
    start = time.perf_counter()
    for round_index in range(args.rounds):
        first_ours = (round_index + args.round_offset) % 2 == 0
        for name in names:
            BENCHES[name].run(results[name], sizes, first_ours)
        print(f"  round {round_index + 1}/{args.rounds} done "
              f"({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    print()
    print(_table(list(results.values())))
    print()
    failed = False
    for res in results.values():
        for what, ok in res.checks.items():
            print(f"check {res.name}: {what}: {'ok' if ok else 'FAILED'}")
            failed = failed or not ok
        for note in dict.fromkeys(res.notes):  # unique, in order
            print(f"note {res.name}: {note}")

    if args.json:
        payload = {
            "machine": machine,
            "rounds": args.rounds,
            "quick": args.quick,
            "sizes": vars(sizes),
            "results": {
                res.name: {
                    "title": res.title, "unit": res.unit, "ratio_means": res.ratio_means,
                    "simulacra": res.ours, "simpy": res.simpy, "ratio": res.ratio,
                    "ratio_median": statistics.median(res.ratio),
                    "checks": res.checks, "notes": list(dict.fromkeys(res.notes)),
                }
                for res in results.values()
            },
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return 1 if failed else 0


def _both_kernels(args: argparse.Namespace) -> int:
    """Each round once per kernel, each in a subprocess (SimPy beside it); one table."""
    kernels = ("python", "compiled")
    per_kernel: dict[str, dict[str, Result]] = {k: {} for k in kernels}
    machines: dict[str, dict[str, str]] = {}
    failed = False
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="simulacra-bench-") as tmp:
        for round_index in range(args.rounds):
            order = kernels if round_index % 2 == 0 else kernels[::-1]
            for kernel in order:
                out = Path(tmp) / f"{kernel}-{round_index}.json"
                cmd = [sys.executable, __file__, "--rounds", "1", "--kernel", kernel,
                       "--round-offset", str(round_index), "--json", str(out)]
                cmd += ["--quick"] if args.quick else []
                for name in args.only or []:
                    cmd += ["--only", name]
                done = subprocess.run(cmd, env={**os.environ, "SIMULACRA_KERNEL": kernel},
                                      capture_output=True, text=True, check=False)
                if not out.exists():
                    print(done.stdout + done.stderr, file=sys.stderr)
                    return 2
                failed = failed or done.returncode != 0
                payload = json.loads(out.read_text())
                machines[kernel] = payload["machine"]
                for name, got in payload["results"].items():
                    res = per_kernel[kernel].setdefault(
                        name, Result(name, got["title"], got["unit"], got["ratio_means"]))
                    res.ours += got["simulacra"]
                    res.simpy += got["simpy"]
                    res.ratio += got["ratio"]
                    for what, ok in got["checks"].items():
                        res.check(what, ok)
                    res.notes += got["notes"]
            print(f"  round {round_index + 1}/{args.rounds} done "
                  f"({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    machine = machines["compiled"]
    if {m["kernel"] for m in machines.values()} != set(kernels):
        print(f"a kernel did not run as asked: {machines}", file=sys.stderr)
        return 2
    print(f"simulacra {machine['simulacra']} ({machine['commit']}), python and compiled "
          f"kernels, vs SimPy {machine['simpy']}, {machine['python']}, {machine['cpus']} CPUs, "
          f"{machine['date']}")
    print(f"rounds: {args.rounds}{' (quick sizes)' if args.quick else ''}, each kernel in its "
          "own subprocess with SimPy beside it")
    print()
    rows: list[Result] = []
    for name in per_kernel["python"]:
        for kernel in kernels:
            res = per_kernel[kernel][name]
            res.title = f"{res.title} [{kernel}]"
            rows.append(res)
    print(_table(rows))
    print()
    for name in per_kernel["python"]:
        pure, fast = per_kernel["python"][name], per_kernel["compiled"][name]
        lower = BENCHES[name].ratio_means.startswith("ours/")
        vs = [f / p for f, p in zip(fast.ours, pure.ours, strict=True)]
        print(f"compiled/python {name}: {statistics.median(vs):.2f} [{min(vs):.2f}-{max(vs):.2f}]"
              f" ({'lower' if lower else 'higher'} is better; same round, per round)")
    print()
    for kernel in kernels:
        for res in per_kernel[kernel].values():
            for what, ok in res.checks.items():
                print(f"check {res.name} [{kernel}]: {what}: {'ok' if ok else 'FAILED'}")
                failed = failed or not ok
            for note in dict.fromkeys(res.notes):
                print(f"note {res.name} [{kernel}]: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machines": machines, "rounds": args.rounds, "quick": args.quick,
            "results": {kernel: {name: {"simulacra": r.ours, "simpy": r.simpy, "ratio": r.ratio,
                                        "checks": r.checks}
                                 for name, r in per_kernel[kernel].items()}
                        for kernel in kernels},
        }, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
