"""PHOLD: the PDES benchmark of ROSS, on one Sim and on shard processes.

PHOLD as ROSS defines it: ``lps`` logical processes, each starting with one
event. An event's handler schedules exactly one new event: to a random LP
(uniform over all of them, itself included) with probability ``remote``, else
to itself, at ``now + lookahead + Exp(mean - lookahead)``. Here each LP is an
entity with an ``on_message`` handler (no inbox process), its draws come from
its own stream, and a wildcard channel ``("*", "*", lookahead)`` lets any LP
send to any other. The stream is ``entity.small_rng`` (a ``SmallRandom``,
xoshiro256++, 32 bytes of state) unless ``--stream mt`` asks for
``entity.rng`` (a ``random.Random``, a Mersenne Twister of 2.5 kB): at 16,384
LPs a core, the Twisters are 40 MB and miss the cache on every event.

Three ways to run it, timed against each other in one round:

* **kernel**: the same handler loop on a plain ``Sim`` (fifo ordering, the
  compiled kernel when it is built: ``simulacra.core.KERNEL``), each LP's
  event a timeout with the handler as its callback. No entities, channels or
  keys: what the kernel itself costs per event, with one core's LPs
  (``--lps-per-core``), in a fresh interpreter each round (so that no other
  run's objects are left for the garbage collector to walk). Its draws are in
  another order, so its event count differs a little from the others'. It
  runs twice a round, alternately: with ``SmallRandom`` streams and with
  ``random.Random`` ones, so the two are compared at the same moment.
* **one Sim**: ``UnshardedSim``, the sharded model on one keyed Sim: the
  sequential reference of the sharded runs.
* **N shards**: ``ShardedSim(mode="processes")``, the LPs in blocks. Two
  times: the run alone (workers started and built), and the whole (start,
  build, run, stop). Events per second per core is the run's events over the
  run alone, over N.

Each sharded run must give what one Sim gives: for every LP, its number of
events and the sum of their times (exact floats: an LP's events run in the
same order on any partition); the script exits with status 1 otherwise. With
``--check-trace`` a short traced run of each scenario is also compared record
for record (``assert_equivalent``).

Scenarios: remote 0.1 and 1.0, lookahead 0.1 and 1.0 (``--remote``,
``--lookahead``), ``mean`` = lookahead + 1 unless ``--mean`` is given (ROSS's
default: the exponential's mean 1 past the lookahead). ``--lps-per-core``
(16,384 by default) times the largest shard count gives the LPs, the same
model for every column; ``--events`` sets the end time to about that many
events.

Usage::

    python bench/phold.py                          # 2 shards (this machine), 1 round
    python bench/phold.py --shards 2,4,8,16 --rounds 3
    python bench/phold.py --quick                  # 1,024 LPs, 50,000 events: a smoke test
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))

#: Workers import the model from this file, by path.
BUILD = f"{Path(__file__).resolve()}:build"
TALLY = f"{Path(__file__).resolve()}:tally"
SEED = 7


def build(ctx: Any) -> dict[int, list[float]]:
    """The PHOLD model: ``config`` = {lps, remote, lookahead, mean}."""
    config = ctx.config
    lps: int = config["lps"]
    remote: float = config["remote"]
    lookahead: float = config["lookahead"]
    rate = 1.0 / (config["mean"] - lookahead)
    names = [f"lp{i}" for i in range(lps)]
    small = config.get("stream", "small") == "small"
    #: Per LP of this shard: [events, sum of their times].
    state: dict[int, list[float]] = {}

    def handle(me: Any, payload: Any) -> None:
        mine = state[me.index]
        mine[0] += 1
        mine[1] += me.sim.now
        rng = me.small_rng("phold") if small else me.rng("phold")
        dst = names[rng.randrange(lps)] if rng.random() < remote else me.name
        me.send(dst, payload, lookahead + rng.expovariate(rate))

    def start(sim: Any, me: Any) -> Any:
        state[me.index] = [0, 0.0]
        rng = me.small_rng("phold") if small else me.rng("phold")
        me.send(me.name, None, lookahead + rng.expovariate(rate))
        return
        yield  # a generator: the entity's process

    for name in names:
        ctx.spawn_entity(name, start, on_message=handle)
    ctx.channel("*", "*", lookahead)
    return state


def tally(state: dict[int, list[float]]) -> dict[int, tuple[int, float]]:
    """Each LP's (events, sum of their times) on this shard."""
    return {lp: (int(count), total) for lp, (count, total) in state.items()}


def kernel_phold(config: dict[str, Any], until: float) -> tuple[float, int]:
    """The handler loop on a plain fifo Sim: (seconds, events)."""
    import random

    from simulacra import Sim

    lps: int = config["lps"]
    remote: float = config["remote"]
    lookahead: float = config["lookahead"]
    rate = 1.0 / (config["mean"] - lookahead)
    sim = Sim(seed=SEED)
    rngs: list[Any]
    if config.get("stream", "small") == "small":
        rngs = [sim.small_rng(f"lp{i}") for i in range(lps)]
    else:
        rngs = [random.Random(f"{SEED}/{i}") for i in range(lps)]
    count = [0]

    def handler(lp: int) -> Any:
        def on_event(_: Any) -> None:
            count[0] += 1
            rng = rngs[lp]
            dst = rng.randrange(lps) if rng.random() < remote else lp
            event = sim.timeout(lookahead + rng.expovariate(rate))
            event.callbacks.append(handlers[dst])  # type: ignore[union-attr]
        return on_event

    handlers = [handler(lp) for lp in range(lps)]
    for lp in range(lps):
        event = sim.timeout(lookahead + rngs[lp].expovariate(rate))
        event.callbacks.append(handlers[lp])  # type: ignore[union-attr]
    began = time.perf_counter()
    sim.run(until=until)
    return time.perf_counter() - began, count[0]


def kernel_in_subprocess(config: dict[str, Any], until: float) -> float:
    """:func:`kernel_phold` in a fresh interpreter: its events per second."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import phold; "
            f"took, n = phold.kernel_phold({config!r}, {until!r}); print(n / took)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.split()[-1])


def one_sim(config: dict[str, Any], until: float) -> tuple[float, dict[int, tuple[int, float]]]:
    from simulacra import UnshardedSim

    ref = UnshardedSim(build, seed=SEED, config=config)
    began = time.perf_counter()
    ref.run(until=until)
    took = time.perf_counter() - began
    return took, ref.call(tally)[0]


def sharded(config: dict[str, Any], until: float, shards: int
            ) -> tuple[float, float, dict[int, tuple[int, float]]]:
    """(run alone, whole with the workers' start and stop, each LP's tally)."""
    from simulacra import ShardedSim

    began = time.perf_counter()
    with ShardedSim(BUILD, shards=shards, mode="processes", seed=SEED, config=config) as sim:
        ran = time.perf_counter()
        sim.run(until=until)
        run = time.perf_counter() - ran
        merged: dict[int, tuple[int, float]] = {}
        for part in sim.call(TALLY):
            merged.update(part)
    return run, time.perf_counter() - began, merged


def check_trace(config: dict[str, Any], shards: int) -> None:
    from simulacra import ShardedSim, UnshardedSim, assert_equivalent

    small = dict(config, lps=min(config["lps"], 256))
    until = 20.0 * small["mean"]
    ref = UnshardedSim(build, seed=SEED, config=small, trace=True)
    ref.run(until=until)
    with ShardedSim(BUILD, shards=shards, mode="processes", seed=SEED, config=small,
                    trace=True) as sim:
        sim.run(until=until)
        assert_equivalent(ref.trace(), sim.trace())


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,  # noqa: S607
                              text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default=None,
                        help="comma-separated shard counts (default: 2 up to the CPU count)")
    parser.add_argument("--remote", default="0.1,1.0")
    parser.add_argument("--lookahead", default="0.1,1.0")
    parser.add_argument("--mean", type=float, default=None,
                        help="mean delay of an event (default: lookahead + 1)")
    parser.add_argument("--lps-per-core", type=int, default=16_384)
    parser.add_argument("--events", type=float, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--check-trace", action="store_true",
                        help="also compare a short traced run record for record")
    parser.add_argument("--quick", action="store_true", help="1,024 LPs, 50,000 events")
    parser.add_argument("--stream", choices=("small", "mt"), default="small",
                        help="each LP's stream: SmallRandom (small) or random.Random (mt)")
    args = parser.parse_args()

    from simulacra import core

    cpus = os.cpu_count() or 1
    if args.shards:
        counts = [int(n) for n in args.shards.split(",")]
    else:
        counts = sorted({n for n in (2, 4, 8, 16, cpus) if 2 <= n <= cpus} or {2})
    lps = 1024 if args.quick else args.lps_per_core * max(counts)
    kernel_lps = 1024 if args.quick else args.lps_per_core
    events = 50_000 if args.quick else args.events
    print(f"PHOLD: {lps:,} LPs, about {events:,.0f} events a run, shards {counts}, "
          f"{args.rounds} round(s); kernel {core.KERNEL}; Python {platform.python_version()} "
          f"on {platform.machine()}, {cpus} CPUs; load {os.getloadavg()[0]:.2f}; "
          f"commit {git_commit()}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    failed = False
    for remote in (float(x) for x in args.remote.split(",")):
        for lookahead in (float(x) for x in args.lookahead.split(",")):
            mean = args.mean if args.mean is not None else lookahead + 1.0
            config = {"lps": lps, "remote": remote, "lookahead": lookahead, "mean": mean,
                      "stream": args.stream}
            until = events * mean / lps
            kernel_rates, kernel_mt_rates, one_rates = [], [], []
            shard_rates: dict[int, list[tuple[float, float, float]]] = {n: [] for n in counts}
            for _ in range(args.rounds):
                kernel_until = events * mean / kernel_lps
                kernel_rates.append(kernel_in_subprocess(
                    dict(config, lps=kernel_lps, stream="small"), kernel_until))
                kernel_mt_rates.append(kernel_in_subprocess(
                    dict(config, lps=kernel_lps, stream="mt"), kernel_until))
                took, reference = one_sim(config, until)
                total = sum(count for count, _ in reference.values())
                one_rates.append(total / took)
                for shards in counts:
                    run, whole, merged = sharded(config, until, shards)
                    if merged != reference:
                        wrong = sorted(lp for lp in reference if merged.get(lp) != reference[lp])
                        print(f"  MISMATCH at {shards} shards: {len(wrong)} LPs differ "
                              f"from one Sim (first: lp{wrong[0] if wrong else '?'})")
                        failed = True
                    shard_rates[shards].append((total / run, took / run, took / whole))
            if args.check_trace:
                for shards in counts:
                    check_trace(config, shards)
            med = statistics.median
            print(f"\nremote {remote}, lookahead {lookahead}, mean {mean}: {total:,} events "
                  f"(until {until:.2f})")
            print(f"  kernel (fifo Sim, callbacks, {kernel_lps:,} LPs): "
                  f"{med(kernel_rates):>12,.0f} events/s with SmallRandom streams, "
                  f"{med(kernel_mt_rates):,.0f} with random.Random "
                  f"({med(a / b for a, b in zip(kernel_rates, kernel_mt_rates, strict=True)):.2f}x;"
                  f" rounds: {', '.join(f'{r:,.0f}' for r in kernel_rates)})")
            print(f"  one Sim (UnshardedSim, keyed, {args.stream} streams): "
                  f"{med(one_rates):>11,.0f} events/s")
            for shards in counts:
                rates = shard_rates[shards]
                rate = med(r[0] for r in rates)
                print(f"  {shards:>2} shards: {rate:>12,.0f} events/s, {rate / shards:>9,.0f} "
                      f"per core; over one Sim {med(r[1] for r in rates):.2f}x run, "
                      f"{med(r[2] for r in rates):.2f}x with worker start")
            if args.check_trace:
                print("  traced runs (256 LPs): merged trace equals one Sim's at every count")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
