"""Sharded societies: the same run on 1, 2, 4, 8... shard processes, with CPU-bound turns.

The workload is the social demo whose agents each think for ``--think-us``
microseconds of CPU per turn (``bench/_heavy_society.py``), answered by the
scripted model: the turns, not model calls, take the time, and shards split
the turns. Each row is a whole ``run_society`` (shard processes started,
world built in every shard, checkpoints off, no run directory), timed
against the same run in one process (``sim.engine.shards=1``), and every
row's digest must equal the one-process digest (the script exits 1 if not).

    python bench/society_shards.py [--agents 200] [--steps 10] [--think-us 1000]
                                   [--shards 1,2,4] [--rounds 3]

Rounds alternate the order of the rows; the table shows each row's median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import simulacra

HERE = Path(__file__).resolve().parent
CONFIG = HERE.parent / "examples" / "social" / "config.yaml"


def _run(args: argparse.Namespace, shards: int) -> tuple[float, str]:
    config = simulacra.load_config(CONFIG, [
        f"sim.world.factory={HERE / '_heavy_society.py'}:build",
        f"sim.world.think_us={args.think_us}", f"sim.agents={args.agents}",
        f"sim.steps={args.steps}", "sim.engine.mode=sequential",
        f"sim.engine.shards={shards}", "sim.engine.shard_mode=processes",
        "run.preflight=false"])
    start = time.perf_counter()
    run = simulacra.run_society(config)
    return time.perf_counter() - start, run.result.digest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--think-us", type=float, default=1000.0)
    parser.add_argument("--shards", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    counts = [int(n) for n in args.shards.split(",")]
    if counts[0] != 1:
        counts.insert(0, 1)
    times: dict[int, list[float]] = {n: [] for n in counts}
    digests: dict[int, set[str]] = {n: set() for n in counts}
    for index in range(args.rounds):
        for n in counts if index % 2 == 0 else counts[::-1]:
            wall, digest = _run(args, n)
            times[n].append(wall)
            digests[n].add(digest)
            print(f"round {index + 1}: {n:>2} shard(s) {wall:8.3f} s", flush=True)
    turns = args.agents * args.steps
    one = statistics.median(times[1])
    reference = digests[1]
    print(f"\n{args.agents} agents x {args.steps} steps, {args.think_us:g} us of CPU a turn, "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, medians of {args.rounds}")
    print(f"{'shards':>6} {'wall s':>9} {'us/turn':>9} {'speedup':>8}  digest")
    same = True
    for n in counts:
        wall = statistics.median(times[n])
        ok = digests[n] == reference and len(reference) == 1
        same = same and ok
        print(f"{n:>6} {wall:9.3f} {wall / turns * 1e6:9.1f} {one / wall:7.2f}x  "
              f"{'same' if ok else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
