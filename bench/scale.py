"""Speed-up against workers: replications and sharded runs, worker start-up included.

For each worker count (``--workers 1,2,4,8,16``; by default 1, 2, 4, ... up
to the CPU count, and the CPU count), this script times, against the
sequential reference in the same round:

* **Experiment**: 32 replications of 0.2 s of CPU each (a busy loop on
  ``time.process_time``), on ``backend="processes"`` with that many workers.
  Wall time of ``Experiment.run`` end to end: starting the workers (a fresh
  pool each time), pickling, and stopping them are all in it.
* **ShardedSim**: the grid conveyor of ``examples/pdes_models.py`` with 16
  cells (4 x 4), CPU-heavy handlers (LCG steps calibrated to about 1 ms per
  service on this machine) and a lookahead of 5, on that many shards in
  worker processes. Two ratios: the run alone (``sim.run``, workers started
  and built), and the whole (starting the workers, building, running,
  stopping).

Each ratio is sequential time / parallel time. Results must equal the
sequential ones (the replications' KPIs; the grid's served, left and
checksum totals); the script exits with status 1 otherwise.

The machine may be shared: the load average at the start is printed, and a
ratio cannot exceed the CPUs free while it runs.

Usage::

    python bench/scale.py                       # 1..CPU count, 1 round
    python bench/scale.py --workers 1,2,4,8,16 --rounds 3
    python bench/scale.py --quick               # 8 replications, a short grid: a smoke test
    python bench/scale.py --workers 2 --replications 8 --no-grid --rounds 5   # 8 x 0.2 s
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "examples"))  # workers inherit sys.path and import the model

if TYPE_CHECKING:
    import pdes_models

    import simulacra
    from simulacra import Experiment

#: Workers import the replication's model from this file, by path: so this
#: module imports nothing but the standard library when it is loaded (every
#: worker loads it twice: as the main module, and as the model's file).
MODEL = f"{Path(__file__).resolve()}:spin"
SEED = 1


def spin(stream: simulacra.SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """A replication: ``config["cpu"]`` seconds of CPU, then one draw from its stream."""
    end = time.process_time() + config["cpu"]
    x = 0
    while time.process_time() < end:
        for i in range(2000):
            x ^= i
    return {"x": stream.stream("x").random()}


def calibrate_work(target: float = 1e-3) -> int:
    """LCG steps of ``pdes_models.burn`` that take about *target* seconds here."""
    import pdes_models

    work = 10_000
    while True:
        start = time.perf_counter()
        pdes_models.burn(1, work)
        took = time.perf_counter() - start
        if took > 0.02:
            return max(1, round(work * target / took))
        work *= 2


def experiment_times(study: Experiment, replications: int, workers: int) -> tuple[float, Any]:
    from simulacra.errors import OversubscribedWarning

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)  # more workers than CPUs: asked
        results = study.run(replications, backend="processes", max_workers=workers,
                            progress=False)
    return time.perf_counter() - start, [r.kpis for r in results]


def sequential_grid(grid: pdes_models.Grid, until: float) -> tuple[float, dict[str, Any]]:
    import pdes_models

    from simulacra import UnshardedSim

    ref = UnshardedSim(pdes_models.build_grid, seed=SEED, config=grid)
    start = time.perf_counter()
    ref.run(until=until)
    took = time.perf_counter() - start
    return took, pdes_models.merge_totals(ref.call(pdes_models.grid_totals))


def sharded_grid(grid: pdes_models.Grid, until: float,
                 shards: int) -> tuple[float, float, dict[str, Any]]:
    """(run alone, whole with the workers' start and stop, totals)."""
    import pdes_models

    from simulacra import ShardedSim

    start = time.perf_counter()
    sim = ShardedSim(pdes_models.build_grid, shards=shards, seed=SEED, config=grid)
    try:
        ran = time.perf_counter()
        sim.run(until=until)
        run = time.perf_counter() - ran
        totals = pdes_models.merge_totals(sim.call(pdes_models.grid_totals))
    finally:
        sim.close()
    return run, time.perf_counter() - start, totals


def default_workers() -> list[int]:
    from simulacra.executors import available_cpus

    cpus = available_cpus()
    counts = [1]
    while counts[-1] * 2 <= cpus:
        counts.append(counts[-1] * 2)
    return sorted({*counts, cpus})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", help="comma-separated worker counts (default 1..CPUs)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a smoke test: small runs")
    parser.add_argument("--replications", type=int, help="of the Experiment (default 32)")
    parser.add_argument("--cpu", type=float, help="CPU seconds per replication (default 0.2)")
    parser.add_argument("--no-grid", action="store_true", help="the Experiment only")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    import pdes_models

    import simulacra
    from simulacra import Experiment
    from simulacra.executors import available_cpus

    counts = ([int(w) for w in args.workers.split(",")] if args.workers
              else default_workers())
    replications = args.replications or (8 if args.quick else 32)
    cpu = args.cpu or (0.05 if args.quick else 0.2)
    work = calibrate_work()
    grid = pdes_models.Grid(rows=4, cols=4, service=0.4, interarrival=1.0, hops=6, jitter=0.5,
                            transfer=5.0, work=work, horizon=25.0 if args.quick else 60.0)
    until = grid.horizon + 10.0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,  # noqa: S607
                            capture_output=True, text=True, check=False).stdout.strip()
    print(f"simulacra {simulacra.__version__} at {commit or '?'}, CPython "
          f"{platform.python_version()}, {available_cpus()} CPUs, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()[0]:.1f}")
    print(f"Experiment: {replications} replications x {cpu} s CPU on processes; "
          f"ShardedSim: 16 cells, {work:,} LCG steps per service (~1 ms), lookahead 5; "
          f"workers {counts}; {args.rounds} round(s)")

    study = Experiment(MODEL, [{"cpu": cpu}], master_seed=SEED)
    ratios: dict[int, dict[str, list[float]]] = {
        w: {"experiment": [], "pdes_run": [], "pdes_whole": []} for w in counts}
    seq: dict[str, list[float]] = {"experiment": [], "pdes": []}
    failed = False
    for index in range(args.rounds):
        start = time.perf_counter()
        reference = [r.kpis for r in study.run(replications, backend="sequential")]
        seq_experiment = time.perf_counter() - start
        seq_run, seq_totals = (math.nan, {}) if args.no_grid else sequential_grid(grid, until)
        seq["experiment"].append(seq_experiment)
        seq["pdes"].append(seq_run)
        for workers in counts:
            took, kpis = experiment_times(study, replications, workers)
            run, whole, totals = ((math.nan, math.nan, {}) if args.no_grid
                                  else sharded_grid(grid, until, workers))
            if kpis != reference or totals != seq_totals:
                print(f"MISMATCH with {workers} workers: replications equal "
                      f"{kpis == reference}, grid totals {totals} vs {seq_totals}",
                      file=sys.stderr)
                failed = True
            ratios[workers]["experiment"].append(seq_experiment / took)
            ratios[workers]["pdes_run"].append(seq_run / run)
            ratios[workers]["pdes_whole"].append(seq_run / whole)
            grid_line = ("" if args.no_grid else f", grid run {run:.2f} s, whole {whole:.2f} s "
                         f"(sequential {seq_run:.2f})")
            print(f"  round {index + 1}, {workers} workers: experiment {took:.2f} s "
                  f"(sequential {seq_experiment:.2f}){grid_line}, "
                  f"load {os.getloadavg()[0]:.1f}", file=sys.stderr)

    print()
    line = f"sequential: experiment {statistics.median(seq['experiment']):.2f} s"
    if not args.no_grid:
        line += (f", grid run {statistics.median(seq['pdes']):.2f} s "
                 f"({seq_totals['served']:,} services)")
    print(line)
    header = (f"{'workers':>7} | {'Experiment (incl. start)':>24} | "
              f"{'ShardedSim run':>18} | {'ShardedSim incl. start':>22}")
    print(header)
    print("-" * len(header))

    def cell(values: list[float], width: int) -> str:
        if any(math.isnan(v) for v in values):
            return f"{'-':>{width}}"
        text = f"{statistics.median(values):.2f}x"
        if len(values) > 1:
            text += f" [{min(values):.2f}-{max(values):.2f}]"
        return f"{text:>{width}}"

    for workers in counts:
        row = ratios[workers]
        print(f"{workers:>7} | {cell(row['experiment'], 24)} | {cell(row['pdes_run'], 18)} | "
              f"{cell(row['pdes_whole'], 22)}")
    if len(ratios[counts[0]]["experiment"]) > 1:
        print("(median of the rounds [min-max])")
    if args.json:
        args.json.write_text(json.dumps({"commit": commit, "workers": counts,
                                         "sequential": seq, "ratios": ratios}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
