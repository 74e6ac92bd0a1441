"""Conservative PDES (``ShardedSim``) against the sequential run of the same model.

Every scenario runs the grid conveyor of ``examples/pdes_models.py`` twice per
round, alternately in this process (the order flips every round): once
unpartitioned in one keyed Sim (``UnshardedSim``, the sequential reference) and
once on 2 worker processes (``ShardedSim(mode="processes", shards=2)``, the rows
split in two blocks). The ratio sequential / sharded is taken inside each
round, so that drift of a shared machine cancels out, and the table reports the
median ratio with its min and max. Two ratios are reported:

* ``run``: ``sim.run(until=...)`` alone (the workers are started and built);
* ``total``: building the model plus the run, and for PDES also starting the
  worker processes and stopping them.

Each round also measures a *ceiling*: the same pure-Python CPU work
(:func:`pdes_models.burn`, about 0.5 s of it) in this process against split in
half over 2 worker processes of a ``ProcessPoolExecutor``. It is what 2
processes can gain on this machine at that moment: the machine is shared, and
when another tenant takes a core, the ceiling and the PDES ratios fall
together.

Both runs must give the same totals (items served, items out, the sum of
their checksums); the script exits with status 1 otherwise. For each scenario
``analyze()`` also predicts the speedup from a traced sequential run, with the
barrier cost it measures on this machine and the event cost of the untraced
sequential run, so prediction and measurement sit side by side.

Scenarios (``--only NAME``, repeatable):

* ``heavy``: CPU-heavy handlers (``work`` LCG steps, about a millisecond per
  service) and a lookahead (transfer time 5) large against the event spacing:
  hundreds of events per window and shard. Compute dominates: PDES should win.
* ``heavy-small-L``: the same handlers, lookahead 0.05: few events per window.
* ``cheap``: trivial handlers, lookahead 5: messages and barriers cost more
  than the work they let run in parallel.
* ``cheap-small-L``: trivial handlers, lookahead 0.05: the worst case.

Usage::

    python bench/pdes.py                    # 5 rounds
    python bench/pdes.py --quick            # shorter runs, 3 rounds: a smoke test
    python bench/pdes.py --only heavy --rounds 7 --json out.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "examples"))  # workers inherit sys.path and import the model

import pdes_models  # noqa: E402

import simulacra  # noqa: E402
from simulacra import ShardedSim, UnshardedSim, analyze  # noqa: E402
from simulacra.parallel import measure_barrier_cost  # noqa: E402

SHARDS = 2
SEED = 1


@dataclass(frozen=True)
class Scenario:
    name: str
    grid: pdes_models.Grid
    until: float
    what: str


BASE = pdes_models.Grid(rows=8, cols=8, service=0.4, interarrival=1.0, hops=6, jitter=0.5)

SCENARIOS = [
    Scenario("heavy", replace(BASE, transfer=5.0, work=12_000, horizon=50.0), 60.0,
             "CPU-heavy handlers, lookahead 5"),
    Scenario("heavy-small-L", replace(BASE, transfer=0.05, work=12_000, horizon=50.0), 60.0,
             "CPU-heavy handlers, lookahead 0.05"),
    Scenario("cheap", replace(BASE, transfer=5.0, work=0, horizon=400.0), 410.0,
             "trivial handlers, lookahead 5"),
    Scenario("cheap-small-L", replace(BASE, transfer=0.05, work=0, horizon=400.0), 410.0,
             "trivial handlers, lookahead 0.05"),
]


def partition(grid: pdes_models.Grid) -> dict[str, int]:
    """Rows in SHARDS contiguous blocks (the default "blocks" partition, spelled out)."""
    cells = [f"cell-{r}-{c}" for r in range(grid.rows) for c in range(grid.cols)]
    return {cell: i * SHARDS // len(cells) for i, cell in enumerate(cells)}


def sequential(scenario: Scenario) -> tuple[float, float, dict[str, Any]]:
    start = time.perf_counter()
    ref = UnshardedSim(pdes_models.build_grid, seed=SEED, config=scenario.grid)
    ran = time.perf_counter()
    ref.run(until=scenario.until)
    end = time.perf_counter()
    return end - ran, end - start, pdes_models.merge_totals(ref.call(pdes_models.grid_totals))


def sharded(scenario: Scenario, start_method: str) -> tuple[float, float, dict[str, Any], Any]:
    start = time.perf_counter()
    sim = ShardedSim(pdes_models.build_grid, shards=SHARDS, mode="processes", seed=SEED,
                     config=scenario.grid, partition=partition(scenario.grid),
                     start_method=start_method)
    try:
        ran = time.perf_counter()
        sim.run(until=scenario.until)
        end = time.perf_counter()
        totals = pdes_models.merge_totals(sim.call(pdes_models.grid_totals))
        stats = sim.stats
    finally:
        sim.close()
    return end - ran, time.perf_counter() - start, totals, stats


CEILING_WORK = 6_000_000


def ceiling(pool: concurrent.futures.ProcessPoolExecutor) -> float:
    """Inline time / pooled time of the same CPU work split over SHARDS processes."""
    start = time.perf_counter()
    pdes_models.burn(1, CEILING_WORK)
    inline = time.perf_counter() - start
    start = time.perf_counter()
    list(pool.map(pdes_models.burn, range(SHARDS), [CEILING_WORK // SHARDS] * SHARDS))
    return inline / (time.perf_counter() - start)


def prediction(scenario: Scenario, run_seconds: float,
               barrier: float) -> tuple[simulacra.SpeedupEstimate, int]:
    """analyze()'s predicted run ratio, and the kernel events of the run (its tie counts)."""
    ref = UnshardedSim(pdes_models.build_grid, seed=SEED, config=scenario.grid, trace=True)
    ref.run(until=scenario.until)
    trace = ref.trace()
    assert trace.ties is not None
    return analyze(trace, partition(scenario.grid), scenario.grid.transfer,
                   wall_time=run_seconds, barrier_cost=barrier), trace.ties.events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="shorter runs, 3 rounds")
    parser.add_argument("--only", action="append", choices=[s.name for s in SCENARIOS])
    parser.add_argument("--start-method", default="spawn", choices=["spawn", "forkserver"])
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick and args.rounds == 5 else args.rounds
    scenarios = [s for s in SCENARIOS if not args.only or s.name in args.only]
    if args.quick:
        scenarios = [replace(s, until=s.until / 4,
                             grid=replace(s.grid, horizon=s.grid.horizon / 4))
                     for s in scenarios]
    print(f"simulacra {simulacra.__version__}, CPython {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"PDES: {SHARDS} worker processes ({args.start_method}) vs one keyed Sim; "
          f"{rounds} rounds, alternating; load average {os.getloadavg()[0]:.1f} at start")
    barrier = measure_barrier_cost(SHARDS, start_method=args.start_method)
    print(f"measured barrier round trip ({SHARDS} workers): {barrier * 1e6:.0f} us")
    pool = concurrent.futures.ProcessPoolExecutor(
        SHARDS, mp_context=multiprocessing.get_context(args.start_method))
    list(pool.map(pdes_models.burn, range(SHARDS), [1000] * SHARDS))  # start the workers
    try:
        rows, failed = run_scenarios(scenarios, rounds, args.start_method, barrier, pool)
    finally:
        pool.shutdown()
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"barrier_s": barrier, "rows": rows}, indent=2))
    return 1 if failed else 0


def run_scenarios(
    scenarios: list[Scenario], rounds: int, start_method: str, barrier: float,
    pool: concurrent.futures.ProcessPoolExecutor,
) -> tuple[list[dict[str, Any]], bool]:
    rows: list[dict[str, Any]] = []
    failed = False
    for scenario in scenarios:
        seq_run: list[float] = []
        seq_total: list[float] = []
        par_run: list[float] = []
        par_total: list[float] = []
        ceilings: list[float] = []
        stats = None
        for index in range(rounds):
            ceilings.append(ceiling(pool))
            order = ["seq", "par"] if index % 2 == 0 else ["par", "seq"]
            for which in order:
                if which == "seq":
                    run_s, total_s, seq_totals = sequential(scenario)
                    seq_run.append(run_s)
                    seq_total.append(total_s)
                else:
                    run_s, total_s, par_totals, stats = sharded(scenario, start_method)
                    par_run.append(run_s)
                    par_total.append(total_s)
            if seq_totals != par_totals:
                print(f"MISMATCH in {scenario.name}: sequential {seq_totals} != "
                      f"sharded {par_totals}", file=sys.stderr)
                failed = True
            print(f"  {scenario.name} round {index + 1}: seq {seq_run[-1]:.3f} s, "
                  f"pdes {par_run[-1]:.3f} s, ratio {seq_run[-1] / par_run[-1]:.2f}, "
                  f"ceiling {ceilings[-1]:.2f}, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
        run_ratios = [s / p for s, p in zip(seq_run, par_run, strict=True)]
        total_ratios = [s / p for s, p in zip(seq_total, par_total, strict=True)]
        estimate, kernel_events = prediction(scenario, statistics.median(seq_run), barrier)
        rows.append({
            "scenario": scenario.name,
            "what": scenario.what,
            "events": seq_totals["served"],
            "kernel_events": kernel_events,
            # Events per second per core: the sequential run uses one core, the
            # sharded run SHARDS (mature PDES engines plateau near 250k/s per core).
            "seq_events_per_s": kernel_events / statistics.median(seq_run),
            "pdes_events_per_s_per_core": kernel_events / statistics.median(par_run) / SHARDS,
            "sequential_run_s": statistics.median(seq_run),
            "pdes_run_s": statistics.median(par_run),
            "run_ratio": statistics.median(run_ratios),
            "run_ratio_min": min(run_ratios),
            "run_ratio_max": max(run_ratios),
            "total_ratio": statistics.median(total_ratios),
            "total_ratio_min": min(total_ratios),
            "total_ratio_max": max(total_ratios),
            "ceiling": statistics.median(ceilings),
            "ceilings": ceilings,
            "run_ratios": run_ratios,
            "rounds": stats.rounds if stats else 0,
            "messages": stats.messages if stats else 0,
            "predicted": estimate.speedup,
            "prediction": str(estimate),
        })
    return rows, failed


def print_table(rows: list[dict[str, Any]]) -> None:
    print()
    header = (f"{'scenario':<14} {'services':>8} {'seq run':>8} {'pdes run':>8} "
              f"{'run ratio [min-max]':>20} {'total ratio [min-max]':>22} {'ceiling':>7} "
              f"{'barriers':>8} {'messages':>8} {'analyze()':>9}")
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row['scenario']:<14} {row['events']:>8,} {row['sequential_run_s']:>7.2f}s "
              f"{row['pdes_run_s']:>7.2f}s "
              f"{row['run_ratio']:>7.2f} [{row['run_ratio_min']:.2f}-{row['run_ratio_max']:.2f}]"
              f" {row['total_ratio']:>9.2f} [{row['total_ratio_min']:.2f}-"
              f"{row['total_ratio_max']:.2f}] {row['ceiling']:>7.2f} "
              f"{row['rounds']:>8,} {row['messages']:>8,} "
              f"{row['predicted']:>8.2f}x")
    print()
    header = (f"{'scenario':<14} {'kernel events':>13} {'seq ev/s':>10} "
              f"{'pdes ev/s/core':>14}")
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row['scenario']:<14} {row['kernel_events']:>13,} "
              f"{row['seq_events_per_s']:>10,.0f} {row['pdes_events_per_s_per_core']:>14,.0f}")
    print("\nratio = sequential time / PDES time (above 1: PDES is faster); ceiling = the same "
          "ratio for\nembarrassingly parallel CPU work on 2 processes, per round (medians); "
          "analyze() = predicted run ratio;\nev/s = kernel events (from the traced run's tie "
          f"counts) per second of the run; per core: divided by {SHARDS} shards")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(main())
