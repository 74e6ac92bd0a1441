"""DaskBackend against LocalBackend and ProcessPoolBackend, side by side in one run.

The two models of ``bench/agents.py`` (imported from it):

* ``compute``: 400 ``Cruncher`` agents, about 3 ms of pure-Python arithmetic
  each per step, 3 neighbours, 10 steps.
* ``messaging``: ``Hop`` agents on a seeded random graph (5 neighbours), each
  summing its inbox and sending its total + 1; 20 000 agents, 10 steps
  (1 million messages).

Contestants: ``LocalBackend``, ``ProcessPoolBackend(2)`` and
``DaskBackend(n_workers=2)`` (its own ``LocalCluster``). Pools and the
cluster are started once, before the rounds, and reused (a backend instance
keeps its workers across runs): the rounds time runs, not start-ups, which
are reported once. Every round runs the three contestants in a rotated
order; the table gives each one's median time and its median ratio to
local. Results must equal local's (compute: every per-step digest;
messaging, run with ``digests=False`` as in ``bench/agents.py``: the final
agent states); the script exits with status 1 if not.

Usage::

    python bench/dask_agents.py             # 3 rounds
    python bench/dask_agents.py --quick     # sizes / 10
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))
if str(HERE) not in sys.path:  # the workers import the models from bench/agents.py
    sys.path.insert(0, str(HERE))

from agents import SEED, Cruncher, Hop, graph  # noqa: E402
from simulacra import DaskBackend, LocalBackend, Model, ProcessPoolBackend  # noqa: E402


def run_compute(backend: Any, agents: int, steps: int, work: int) -> tuple[float, Any]:
    model = Model(seed=SEED, backend=backend)
    for i, nbrs in enumerate(graph(agents, 3, seed=SEED + 1)):
        model.add(Cruncher, i, neighbours=nbrs, work=work)
    start = time.perf_counter()
    result = model.run(Cruncher.act, steps=steps)
    return time.perf_counter() - start, result.state_digests + result.message_digests


def run_messaging(backend: Any, agents: int, steps: int) -> tuple[float, Any]:
    model = Model(seed=SEED, backend=backend)
    for i, nbrs in enumerate(graph(agents, 5)):
        model.add(Hop, i, neighbours=nbrs)
    start = time.perf_counter()
    result = model.run(Hop.act, steps=steps, digests=False)  # as in bench/agents.py
    return time.perf_counter() - start, dict(result.agents)


def rounds(label: str, contestants: dict[str, Any], run: Callable[[Any], tuple[float, Any]],
           count: int) -> bool:
    names = list(contestants)
    times: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    same = True
    for n in range(count):
        order = names[n % len(names):] + names[:n % len(names)]
        outs: dict[str, Any] = {}
        for name in order:
            gc.collect()
            seconds, outs[name] = run(contestants[name])
            times[name].append(seconds)
        for name in names:
            ratios[name].append(times[name][-1] / times["local"][-1])
            same = same and outs[name] == outs["local"]
        print(f"  round {n + 1}: " + ", ".join(f"{name} {times[name][-1]:.2f} s" for name in names),
              flush=True)
    print(f"\n{label}")
    print("| backend | median time (s) | time / local: median (min-max) |")
    print("|---|---|---|")
    for name in names:
        r = ratios[name]
        print(f"| {name} | {statistics.median(times[name]):.2f} | "
              f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f}) |")
    print(f"digests identical to local: {same}\n")
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="sizes / 10")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, pid {os.getpid()}")
    start = time.perf_counter()
    dask = DaskBackend(n_workers=2)
    dask.client  # noqa: B018  (starts the LocalCluster)
    print(f"LocalCluster(2 workers) start-up: {time.perf_counter() - start:.2f} s")
    processes = ProcessPoolBackend(2)
    contestants = {"local": LocalBackend(), "processes-2": processes, "dask-2": dask}
    ok = True
    try:
        for name in ("processes-2", "dask-2"):  # first runs start pools and import the models
            run_compute(contestants[name], 4, 1, 1)
        ok &= rounds(f"compute: {400 // scale} agents x ~3 ms, 10 steps", contestants,
                     lambda b: run_compute(b, 400 // scale, 10, 6000), args.rounds)
        ok &= rounds(f"messaging: {20_000 // scale} agents x 5 neighbours, 10 steps",
                     contestants, lambda b: run_messaging(b, 20_000 // scale, 10), args.rounds)
    finally:
        processes.close()
        dask.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
