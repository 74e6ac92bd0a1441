"""What monitors cost: M/M/3 with monitors off (before they existed and now) and on, vs SimPy.

The model is ``bench/kernel_vs_simpy.py``'s M/M/3 (c = 3, lambda = 2.7, mu = 1,
100 000 customers, the same ``random.Random(seed)`` draws for both kernels). Each
measurement runs in a fresh interpreter that warms both up (a tenth of the
customers) and then times simulacra and SimPy side by side (the order
alternates), so each gives a same-run ratio to SimPy, which is what stays
stable on a shared machine. The variants:

* ``before``: simulacra as of ``--baseline`` (a commit before monitors), with
  ``git archive`` of its ``src/`` on ``PYTHONPATH``;
* ``off``: this tree (or ``--after COMMIT``), ``Resource(sim, 3)``: monitors
  off, the default;
* ``on``: the same, ``Resource(sim, 3, monitor=True)``: utilisation and queue
  length recorded at every change;
* ``on+tally``: as ``on``, and every wait also recorded in a ``Tally``.

Rounds run the variants in a rotating order. The table gives medians over rounds
of customers/s and of the ratio to SimPy, and "vs before", the median over rounds
of the per-round ratio of each variant's time to ``before``'s. Every variant must
give the same mean wait (``==``); the script exits with status 1 if one does not.

Wall-clock figures on a loaded 2-core machine move by tens of per cent from run
to run. ``--instructions`` counts executed instructions instead (valgrind
callgrind, as ``bench/instructions.py`` does; 5 000 customers by default), which
do not depend on the load: per variant, the count of a run of the model minus
that of an interpreter that imports the same modules and builds nothing.

Usage::

    python bench/monitors.py --baseline ee83f42 --rounds 7
    python bench/monitors.py --baseline ee83f42 --after d559c6f --rounds 7
    python bench/monitors.py --baseline ee83f42 --quick      # 10 000 customers, 3 rounds
    python bench/monitors.py --baseline ee83f42 --after d559c6f --instructions
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEED = 1
LAMBDA, MU, SERVERS = 2.7, 1.0, 3
VARIANTS = ("before", "off", "on", "on+tally")


# --------------------------------------------------------------------------- child: one measurement


def _mmc_simpy(customers: int) -> tuple[float, float]:
    import simpy

    start = time.perf_counter()
    env = simpy.Environment()
    rng = random.Random(SEED)
    tellers = simpy.Resource(env, capacity=SERVERS)
    waits: list[float] = []

    def customer(env: Any) -> Generator[Any, Any, None]:
        arrived = env.now
        with tellers.request() as req:
            yield req
            waits.append(env.now - arrived)
            yield env.timeout(rng.expovariate(MU))

    def source(env: Any) -> Generator[Any, Any, None]:
        for _ in range(customers):
            yield env.timeout(rng.expovariate(LAMBDA))
            env.process(customer(env))

    env.process(source(env))
    env.run()
    return time.perf_counter() - start, math.fsum(waits) / len(waits)


def _mmc_simulacra(customers: int, variant: str) -> tuple[float, float, int]:
    from simulacra import Resource, Sim  # the front door loads resources lazily: not timed

    start = time.perf_counter()
    sim = Sim(seed=0)
    rng = random.Random(SEED)
    if variant in ("before", "off"):
        tellers = Resource(sim, capacity=SERVERS)
    else:
        tellers = Resource(sim, capacity=SERVERS, monitor="tellers")
    waits: list[float] = []
    tally = _tally(sim) if variant == "on+tally" else None
    record = tally.record if tally is not None else None

    def customer(sim: Any) -> Generator[Any, Any, None]:
        arrived = sim.now
        with tellers.request() as req:
            yield req
            waits.append(sim.now - arrived)
            if record is not None:
                record(sim.now - arrived)
            yield sim.delay(rng.expovariate(MU))

    def source(sim: Any) -> Generator[Any, Any, None]:
        for _ in range(customers):
            yield sim.delay(rng.expovariate(LAMBDA))
            sim.spawn(customer(sim))

    sim.spawn(source(sim))
    sim.run()
    seconds = time.perf_counter() - start
    points = 0 if variant in ("before", "off") else len(tellers.monitor().queue)
    return seconds, math.fsum(waits) / len(waits), points


def _tally(sim: Any) -> Any:
    from simulacra import Tally

    return Tally(sim, "wait")


def count_child(customers: int, variant: str) -> None:
    """Run the model once (or nothing, for ``none``), for callgrind to count."""
    import simpy  # noqa: F401  (every count, the baseline too, imports the same modules)

    import simulacra

    simulacra.Sim, simulacra.Resource  # noqa: B018  (the front door loads them lazily)
    if hasattr(simulacra, "Tally"):
        simulacra.Tally  # noqa: B018
    if variant == "simpy":
        _mmc_simpy(customers)
    elif variant != "none":
        _mmc_simulacra(customers, variant)


def _instructions(src: Path, variant: str, customers: int, workdir: Path) -> int:
    out = workdir / f"cg.{variant}.{src.parent.name}"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(PYTHONPATH=str(src), PYTHONHASHSEED="0",
               PYTHONPYCACHEPREFIX=str(workdir / "pycache"))
    command = [sys.executable, __file__, "--count", variant, "--customers", str(customers)]
    subprocess.run(command, env=env, check=True, timeout=600)  # fills the bytecode cache
    done = subprocess.run(["valgrind", "--tool=callgrind",  # noqa: S607
                           f"--callgrind-out-file={out}", *command],
                          env=env, capture_output=True, text=True, check=True, timeout=3600)
    match = re.search(r"Collected : (\d+)", done.stderr)
    if match is None:
        raise RuntimeError(f"no callgrind total for {variant}:\n{done.stderr[-2000:]}")
    return int(match.group(1))


def instructions(before_src: Path, after_src: Path, customers: int, workdir: Path) -> int:
    """Print instructions per customer of every variant, and their ratios."""
    none = {src: _instructions(src, "none", customers, workdir) for src in (before_src,
                                                                          after_src)}
    counts = {"simpy": _instructions(after_src, "simpy", customers, workdir) - none[after_src]}
    for variant in VARIANTS:
        src = before_src if variant == "before" else after_src
        counts[variant] = _instructions(src, variant, customers, workdir) - none[src]
    print(f"\ninstructions (valgrind callgrind), M/M/3, {customers:,} customers, "
          f"net of an interpreter that imports the same modules:")
    print(f"  {'variant':9s} {'per customer':>13s} {'vs before':>10s} {'SimPy / ours':>13s}")
    for variant in ("simpy", *VARIANTS):
        n = counts[variant]
        print(f"  {variant:9s} {n / customers:13,.0f} {n / counts['before']:10.4f} "
              f"{counts['simpy'] / n:13.3f}")
    return 0


def child(customers: int, variant: str, simpy_first: bool) -> dict[str, Any]:
    """Time simulacra (*variant*) and SimPy once each, in this interpreter, after a warm-up."""
    import simulacra

    out: dict[str, Any] = {"simulacra_file": simulacra.__file__}
    _mmc_simpy(customers // 10)
    _mmc_simulacra(customers // 10, variant)
    for who in ("simpy", "ours") if simpy_first else ("ours", "simpy"):
        gc.collect()
        if who == "simpy":
            out["simpy_s"], out["simpy_wait"] = _mmc_simpy(customers)
        else:
            out["ours_s"], out["ours_wait"], out["points"] = _mmc_simulacra(customers, variant)
    return out


# --------------------------------------------------------------------------- parent


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,  # noqa: S607
                            check=True, timeout=60)
    return result.stdout.strip()


def _extract(commit: str, into: Path) -> Path:
    """``git archive COMMIT src`` unpacked into *into*; returns its ``src``."""
    into.mkdir()
    archive = into / "src.tar"
    with archive.open("wb") as file:
        subprocess.run(["git", "archive", "--format=tar", commit, "src"], cwd=ROOT,  # noqa: S607
                       stdout=file, check=True, timeout=120)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def _measure(src: Path, customers: int, variant: str, simpy_first: bool,
             pycache: str) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = str(src)
    env["PYTHONPYCACHEPREFIX"] = pycache
    result = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--customers", str(customers),
         *(["--simpy-first"] if simpy_first else [])],
        env=env, capture_output=True, text=True, check=True, timeout=600)
    out: dict[str, Any] = json.loads(result.stdout)
    where = Path(out["simulacra_file"]).resolve()
    if not where.is_relative_to(src.resolve()):
        raise RuntimeError(f"{variant}: imported simulacra from {where}, not from {src}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rounds and print the table; 1 if the variants' mean waits differ."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", help="the commit before monitors (for 'before')")
    parser.add_argument("--after", help="the commit to measure (default: this tree's src/)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--customers", type=int, default=None,
                        help="default 100 000 (5 000 with --instructions)")
    parser.add_argument("--quick", action="store_true", help="10 000 customers, 3 rounds")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions under valgrind instead of timing "
                             "(default 5 000 customers)")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--count", choices=(*VARIANTS, "simpy", "none"), help=argparse.SUPPRESS)
    parser.add_argument("--simpy-first", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.customers, args.child, args.simpy_first)))
        return 0
    if args.count:
        count_child(args.customers, args.count)
        return 0
    if not args.baseline:
        parser.error("--baseline COMMIT is required (a commit before monitors, e.g. ee83f42)")
    if args.quick:
        args.customers, args.rounds = 10_000, 3
    if args.customers is None:
        args.customers = 5_000 if args.instructions else 100_000
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (apt-get install valgrind)")
    baseline = _git("rev-parse", "--short", args.baseline)
    if args.after:
        head, dirty = _git("rev-parse", "--short", args.after), ""
    else:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = " + uncommitted changes in src/" if _git("status", "--porcelain", "--",
                                                         "src") else ""
    print(f"M/M/3, {args.customers:,} customers; before = {baseline}, after = {head}{dirty}; "
          f"{args.rounds} rounds; {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    results: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="simulacra-bench-monitors-") as tmp:
        before_src = _extract(args.baseline, Path(tmp) / "before")
        after_src = _extract(args.after, Path(tmp) / "after") if args.after else ROOT / "src"
        if args.instructions:
            return instructions(before_src, after_src, args.customers, Path(tmp))
        pycache = str(Path(tmp) / "pycache")
        start = time.perf_counter()
        for index in range(args.rounds):
            order = VARIANTS[index % len(VARIANTS):] + VARIANTS[:index % len(VARIANTS)]
            for variant in order:
                src = before_src if variant == "before" else after_src
                results[variant].append(
                    _measure(src, args.customers, variant, index % 2 == 1, pycache))
            print(f"  round {index + 1}/{args.rounds} done ({time.perf_counter() - start:.0f} s, "
                  f"load {os.getloadavg()[0]:.1f})", file=sys.stderr)

    rows = [["variant", "customers/s", "SimPy customers/s", "SimPy / ours [min-max]",
             "time vs before [min-max]", "points"]]
    for variant in VARIANTS:
        runs = results[variant]
        ratio = [r["simpy_s"] / r["ours_s"] for r in runs]
        versus = [r["ours_s"] / b["ours_s"] for r, b in zip(runs, results["before"], strict=True)]
        rows.append([
            variant,
            f"{statistics.median(args.customers / r['ours_s'] for r in runs):,.0f}",
            f"{statistics.median(args.customers / r['simpy_s'] for r in runs):,.0f}",
            f"{statistics.median(ratio):.2f} [{min(ratio):.2f}-{max(ratio):.2f}]",
            f"{statistics.median(versus):.3f} [{min(versus):.3f}-{max(versus):.3f}]",
            f"{runs[0]['points']:,}",
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print()
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    waits = {r["ours_wait"] for runs in results.values() for r in runs}
    waits |= {r["simpy_wait"] for runs in results.values() for r in runs}
    same = len(waits) == 1
    print(f"\ncheck: mean wait identical (==) in every variant and in SimPy: "
          f"{'ok' if same else 'FAILED ' + repr(sorted(waits))}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"baseline": baseline, "head": head + dirty, "customers": args.customers,
             "rounds": args.rounds, "results": results}, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
