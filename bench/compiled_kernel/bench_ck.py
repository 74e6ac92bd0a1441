"""The C prototype of the kernel's hot loop (``ck.c``) on the models of bench/kernel_vs_simpy.py.

Build it first, beside this file (a C compiler and the Python headers)::

    cd bench/compiled_kernel
    gcc -O2 -shared -fPIC $(python3-config --includes) ck.c \
        -o ck$(python3-config --extension-suffix)

then ``python bench/compiled_kernel/bench_ck.py mmc 100000`` (or ``processes 100000``,
``bare 100000``) prints the seconds and the result (M/M/3: the mean wait, which must be
SimPy's for the same draws). ``python bench/compiled_kernel/bench_ck.py compare 100000``
runs M/M/3 on SimPy, the pure-Python kernel and the prototype side by side, round after
round, and prints customers per second and the ratios (medians of 5 rounds). See
README.md for what the prototype leaves out.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for the peers' models

import ck  # type: ignore[import-not-found]  # built by hand, see above

LAMBDA, MU, SERVERS = 2.7, 1.0, 3


def mmc(customers: int, seed: int = 1) -> tuple[float, float]:
    """M/M/3 with *customers* customers: (seconds, mean wait)."""
    start = time.perf_counter()
    sim = ck.Sim()
    rng = random.Random(seed)
    tellers = ck.Resource(sim, SERVERS)
    waits: list[float] = []

    def customer(sim: Any) -> Generator[Any, Any, None]:
        arrived = sim.now
        with tellers.request() as req:
            yield req
            waits.append(sim.now - arrived)
            yield sim.delay(rng.expovariate(MU))

    def source(sim: Any) -> Generator[Any, Any, None]:
        for _ in range(customers):
            yield sim.delay(rng.expovariate(LAMBDA))
            sim.spawn(customer(sim))

    sim.spawn(source(sim))
    sim.run()
    return time.perf_counter() - start, math.fsum(waits) / len(waits)


def processes(count: int, seed: int = 1) -> tuple[float, float]:
    """*count* processes of 10 timeouts each: (seconds, final time)."""
    start = time.perf_counter()
    sim = ck.Sim()
    rng = random.Random(seed)

    def worker(sim: Any) -> Generator[Any, Any, None]:
        for _ in range(10):
            yield sim.delay(rng.expovariate(1.0))

    for _ in range(count):
        sim.spawn(worker(sim))
    sim.run()
    return time.perf_counter() - start, float(sim.now)


def bare(count: int, seed: int = 1) -> tuple[float, float]:
    """The bare C loop (heap pop, send, heap push) over generators that yield floats."""
    start = time.perf_counter()
    sim = ck.Sim()
    rng = random.Random(seed)

    def worker() -> Generator[float, Any, None]:
        for _ in range(10):
            yield rng.expovariate(1.0)

    sim.bare_run([worker() for _ in range(count)])
    return time.perf_counter() - start, float(sim.now)


def compare(customers: int, rounds: int = 5) -> None:
    """M/M/3 on SimPy, the pure kernel and the prototype, side by side, in each round."""
    import statistics

    from kernel_vs_simpy import mmc_simpy, mmc_simulacra

    rates: dict[str, list[float]] = {"SimPy": [], "pure": [], "ck": []}
    waits: set[float] = set()
    for _ in range(rounds):
        for name, run in (("SimPy", mmc_simpy), ("pure", mmc_simulacra), ("ck", mmc)):
            seconds, wait = run(customers)[:2]
            rates[name].append(customers / seconds)
            waits.add(wait)
    if len(waits) != 1:
        raise SystemExit(f"the three kernels disagree on the mean wait: {sorted(waits)}")
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"M/M/3, {customers} customers, mean wait {waits.pop()!r} on all three; "
          f"medians of {rounds} rounds")
    for name, rate in median.items():
        print(f"  {name:6} {rate:12,.0f} customers/s  {rate / median['SimPy']:5.2f}x SimPy  "
              f"{rate / median['pure']:5.2f}x pure")


if __name__ == "__main__":
    which, size = sys.argv[1], int(sys.argv[2])
    if which == "compare":
        compare(size)
    else:
        print(which, size, *{"mmc": mmc, "processes": processes, "bare": bare}[which](size))
