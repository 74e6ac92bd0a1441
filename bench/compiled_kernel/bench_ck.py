"""The C prototype of the kernel's hot loop (``ck.c``) on the models of bench/kernel_vs_simpy.py.

Build it first, beside this file (a C compiler and the Python headers)::

    cd bench/compiled_kernel
    gcc -O2 -shared -fPIC $(python3-config --includes) ck.c \
        -o ck$(python3-config --extension-suffix)

then ``python bench/compiled_kernel/bench_ck.py mmc 100000`` (or ``processes 100000``,
``bare 100000``) prints the seconds and the result (M/M/3: the mean wait, which must be
SimPy's for the same draws). See README.md for what the prototype leaves out.
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


if __name__ == "__main__":
    which, size = sys.argv[1], int(sys.argv[2])
    print(which, size, *{"mmc": mmc, "processes": processes, "bare": bare}[which](size))
