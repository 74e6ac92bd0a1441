"""Replications on processes and threads against the sequential reference, in one invocation.

The study is ``examples/bank.py``'s M/M/3 bank (``run(seed=..., **params)``
through ``Experiment.from_run``), one config, 8 replications. Before timing,
``customers`` is calibrated so that one replication takes about ``--target``
seconds (1 s by default) on this machine.

Each round runs the study on every backend in turn (the order rotates every
round, so drift of a shared machine does not favour one backend) and takes the
speed-up ``sequential time / backend time`` inside the round. The median over
rounds is reported with its min and max. Every backend's results table must
equal the sequential one (``DataFrame.equals``), else the script exits with
status 1.

On a shared machine another program can take the second core for a whole
run, which halves what two workers can do. So each run also records the
*foreign load*: the CPUs that other processes kept busy while it ran (busy
time in ``/proc/stat`` minus this process's and its children's CPU time,
divided by the wall time; Linux only). A round is *quiet* when every run in it
saw a foreign load below 0.25 CPU, and the speed-up over quiet rounds is
reported beside the one over all rounds.

Times are wall-clock for ``Experiment.run`` end to end: creating the pool
(spawning the worker interpreters, which import simulacra and the model),
pickling units and results, and shutting the pool down are all included.

The environment is left as it is: where ``PYTHONDONTWRITEBYTECODE`` is set (as
on the reference machine), every spawned worker compiles simulacra's sources
when it starts. (Pointing ``PYTHONPYCACHEPREFIX`` at a warm cache was tried and
made worker start-up slower, since the standard library's own ``__pycache__``
is then ignored.)

A second part, ``--tiny``, shows where this tier costs more than it saves:
many replications of about a millisecond each.

Usage::

    python bench/replications.py                      # 3 rounds, 8 x ~1 s, 2 workers
    python bench/replications.py --rounds 5 --json out.json
    python bench/replications.py --quick              # 8 x ~0.1 s, 1 round: a smoke test
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))

from simulacra import Experiment  # noqa: E402

BANK = f"{ROOT / 'examples' / 'bank.py'}:run"
SEED = 20251129


def study(customers: int) -> Experiment:
    return Experiment.from_run(BANK, [{"customers": customers}], master_seed=SEED)


def one_replication(customers: int) -> float:
    start = time.perf_counter()
    study(customers).run_one(0, 0)
    return time.perf_counter() - start


def calibrate(target: float) -> int:
    """Return a customer count for which one replication takes about *target* seconds."""
    customers = 2000
    while (elapsed := one_replication(customers)) < 0.2 * target:
        customers *= 4
    # Refine at the estimate, with the median of three to damp a busy machine.
    estimate = max(1, round(customers * target / elapsed))
    elapsed = statistics.median(one_replication(estimate) for _ in range(3))
    return max(1, round(estimate * target / elapsed))


QUIET = 0.25  # foreign CPUs below which a run counts as undisturbed


def _busy_seconds() -> float | None:
    """CPU seconds all processes have used since boot (None off Linux)."""
    try:
        fields = Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed(
    experiment: Experiment, replications: int, backend: str, workers: int
) -> tuple[float, float, Any]:
    """Return (wall seconds, foreign load in CPUs, results table) of one run."""
    busy, own = _busy_seconds(), _own_seconds()
    start = time.perf_counter()
    results = experiment.run(replications, backend, None if backend == "sequential" else workers,
                             progress=False)
    elapsed = time.perf_counter() - start
    busy_after = _busy_seconds()
    foreign = math.nan
    if busy is not None and busy_after is not None:
        foreign = max(0.0, (busy_after - busy - (_own_seconds() - own)) / elapsed)
    return elapsed, foreign, results.table()


def measure(customers: int, replications: int, workers: int, rounds: int,
            backends: list[str]) -> dict[str, Any]:
    experiment = study(customers)
    times: dict[str, list[float]] = {b: [] for b in ["sequential", *backends]}
    speedups: dict[str, list[float]] = {b: [] for b in backends}
    quiet: dict[str, list[float]] = {b: [] for b in backends}
    reference = None
    order = ["sequential", *backends]  # round 1 runs sequential first: the reference
    for round_index in range(rounds):
        shift = round_index % len(order)
        this_round: dict[str, float] = {}
        loads: list[float] = []
        for backend in order[shift:] + order[:shift]:
            elapsed, foreign, table = timed(experiment, replications, backend, workers)
            loads.append(foreign)
            if reference is None and backend == "sequential":
                reference = table
            if reference is not None and not table.equals(reference):
                print(f"FAIL: {backend} gave a different results table", file=sys.stderr)
                sys.exit(1)
            this_round[backend] = elapsed
            times[backend].append(elapsed)
            print(f"  round {round_index + 1}: {backend:<10} {elapsed:7.3f} s, foreign load "
                  f"{foreign:.2f} CPU", file=sys.stderr)
        for backend in backends:
            speedups[backend].append(this_round["sequential"] / this_round[backend])
            if all(load < QUIET for load in loads):
                quiet[backend].append(speedups[backend][-1])
    return {
        "customers": customers, "replications": replications, "workers": workers,
        "rounds": rounds,
        "seconds": {b: statistics.median(v) for b, v in times.items()},
        "seconds_per_replication_sequential": statistics.median(times["sequential"])
        / replications,
        "speedup": {
            b: {"median": statistics.median(v), "min": min(v), "max": max(v)}
            for b, v in speedups.items()
        },
        "quiet_rounds": len(next(iter(quiet.values()), [])),
        "quiet_speedup": {
            b: {"median": statistics.median(v), "min": min(v), "max": max(v)} if v else None
            for b, v in quiet.items()
        },
    }


def report(title: str, result: dict[str, Any]) -> None:
    print(f"{title}: {result['replications']} replications x {result['customers']} customers "
          f"({result['seconds_per_replication_sequential']:.3f} s each, sequential), "
          f"{result['workers']} workers, {result['rounds']} rounds")
    print(f"  {'backend':<12}{'median s':>10}{'speed-up':>10}{'min':>8}{'max':>8}"
          f"   quiet rounds ({result['quiet_rounds']}): median [min, max]")
    print(f"  {'sequential':<12}{result['seconds']['sequential']:>10.3f}{1.0:>10.2f}")
    for backend, s in result["speedup"].items():
        q = result["quiet_speedup"][backend]
        quiet = f"{q['median']:.2f} [{q['min']:.2f}, {q['max']:.2f}]" if q else "-"
        print(f"  {backend:<12}{result['seconds'][backend]:>10.3f}{s['median']:>10.2f}"
              f"{s['min']:>8.2f}{s['max']:>8.2f}   {quiet}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--replications", type=int, default=8)
    parser.add_argument("--target", type=float, default=1.0,
                        help="seconds per replication to calibrate for")
    parser.add_argument("--customers", type=int, help="skip calibration: customers per replication")
    parser.add_argument("--tiny", action=argparse.BooleanOptionalAction, default=True,
                        help="also measure 64 replications of ~1 ms (the overhead case)")
    parser.add_argument("--quick", action="store_true", help="~0.1 s replications, 1 round")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.target = 1, 0.1

    print(f"simulacra replications benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"CPython {platform.python_version()} on {platform.platform()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    print(f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}")
    customers = args.customers or calibrate(args.target)
    main_result = measure(customers, args.replications, args.workers, args.rounds,
                          ["processes", "threads"])
    report("main", main_result)
    output: dict[str, Any] = {"main": main_result}
    if args.tiny:
        tiny = measure(20, 64, args.workers, args.rounds, ["processes", "threads"])
        report("tiny", tiny)
        output["tiny"] = tiny
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps(output, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
