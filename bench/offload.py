"""In-run offload: a pooled run against the inline run of the same model, in one process.

The model: ``agents`` processes each submit ``rounds`` scoring payloads with
``offload(sim, fat_score, ..., delay=1.0)``, staggered so that about ``agents``
payloads are in flight at any time, and the simulation reaches each slot with
the other payloads already submitted. The payload is pure-Python CPU work
(:func:`fat_score`); its size is set in milliseconds of inline running time,
calibrated at start-up on this machine.

Regimes (each is one row; ``--only NAME`` repeatable):

* ``fat``: ~30 ms payloads (the case offload is for). Target: pooled on 2
  workers at least 1.8x the inline run.
* ``medium``: ~2 ms payloads: where the pool starts to pay.
* ``cheap``: ~0.02 ms payloads: pickling, IPC and waking the simulation at each
  slot dominate; offload *slows the run down*. Reported on purpose.

Each round runs inline and pooled alternately (the order flips every round),
and the ratio ``inline time / pooled time`` is taken inside the round, so that
drift of a shared machine cancels out of it. The table reports the median and
the range of the per-round ratios. Each round also measures the *ceiling*:
the same payloads, without a simulation, mapped over a plain
``ProcessPoolExecutor`` of the same size (an embarrassingly parallel
baseline), against the same payloads run in a loop. On a machine whose cores
are partly taken by other work the ceiling falls below the worker count, and
``efficiency = speed-up / ceiling`` is the figure that says how much of the
parallelism actually available offload turned into speed. The pools are started before timing
(``Offloader.start()``); their start-up is reported separately. Every pooled
run must give the inline run's trace digest (``Sim(trace=True)`` on a smaller
copy of the model) and the same result checksum; the script exits with status
1 if not.

Usage::

    python bench/offload.py                       # 3 rounds, 2 workers, every regime
    python bench/offload.py --quick               # fewer payloads: a smoke test
    python bench/offload.py --workers 4 --backend threads --only fat --json out.json
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))

import simulacra  # noqa: E402
from simulacra import Offloader, offload, use_pool  # noqa: E402


def fat_score(seed: int, work: int) -> int:
    """Pure-Python scoring: *work* steps of an integer LCG mixed into a checksum."""
    x = seed & 0xFFFFFFFF
    acc = 0
    for _ in range(work):
        x = (1103515245 * x + 12345) & 0x7FFFFFFF
        acc ^= (x >> 7) * 2654435761 & 0xFFFFFFFF
    return acc


def agent(sim: simulacra.Sim, index: int, rounds: int, work: int,
          out: list[int]) -> Generator[simulacra.Event[Any], Any, None]:
    rng = sim.rng(f"agent/{index}")
    yield sim.delay(rng.random())  # stagger the agents over the first slot
    for step in range(rounds):
        result = yield offload(sim, fat_score, index * 1_000_003 + step, work, delay=1.0)
        out.append(result)
        yield sim.delay(rng.random() * 0.01)


def model(pool: Offloader | None, *, agents: int, rounds: int, work: int,
          trace: bool = False) -> tuple[int, str | None]:
    """Run the model; return a checksum of every result (in order) and the trace digest."""
    sim = simulacra.Sim(1, trace=trace)
    if pool is not None:
        use_pool(sim, pool)
    out: list[int] = []
    for index in range(agents):
        sim.spawn(agent, index, rounds, work, out)
    sim.run()
    if pool is not None:
        use_pool(sim, None)
    checksum = 0
    for value in out:
        checksum = (checksum * 1_000_003 + value) % (1 << 61)
    return checksum, simulacra.Trace.of(sim).digest() if trace else None


@dataclass
class Regime:
    name: str
    payload_ms: float  #: target inline time of one payload
    payloads: int  #: payloads per run (agents * rounds)


REGIMES = {
    "fat": Regime("fat", 30.0, 192),
    "medium": Regime("medium", 2.0, 1600),
    "cheap": Regime("cheap", 0.02, 8000),
}
AGENTS = 16


def calibrate(target_ms: float) -> tuple[int, float]:
    """The work giving *target_ms* per payload on a free core, and the ms measured at it.

    Uses the fastest of several timings: on a shared machine the median
    measures the other tenants, the minimum measures the core.
    """
    work = 2_000
    while True:
        elapsed = min(_time_payload(work) for _ in range(3))
        if elapsed > 0.02:
            break
        work *= 2
    work = max(1, round(target_ms / 1000 / (elapsed / work)))
    return work, min(_time_payload(work) for _ in range(5)) * 1000


def _time_payload(work: int) -> float:
    start = time.perf_counter()
    fat_score(1, work)
    return time.perf_counter() - start


def timed(fn: Callable[[], tuple[int, str | None]]) -> tuple[float, int]:
    start = time.perf_counter()
    checksum, _ = fn()
    return time.perf_counter() - start, checksum


def ceiling(executor: ProcessPoolExecutor, *, agents: int, rounds: int, work: int) -> float:
    """Loop time / pool time of the model's payloads without a simulation."""
    seeds = [index * 1_000_003 + step for index in range(agents) for step in range(rounds)]
    start = time.perf_counter()
    for seed in seeds:
        fat_score(seed, work)
    loop = time.perf_counter() - start
    start = time.perf_counter()
    list(executor.map(fat_score, seeds, [work] * len(seeds)))
    return loop / (time.perf_counter() - start)


def spread(row: dict[str, Any]) -> str:
    return f"{row['ratio_median']:>5.2f} [{row['ratio_min']:.2f}-{row['ratio_max']:.2f}]"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="pool workers (default 2)")
    parser.add_argument("--backend", default="processes", choices=("processes", "threads"))
    parser.add_argument("--quick", action="store_true", help="payload counts divided by 4")
    parser.add_argument("--only", action="append", choices=sorted(REGIMES), metavar="NAME")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    names = args.only or list(REGIMES)
    print(f"simulacra {simulacra.__version__}, CPython {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
          f"pool: {args.backend} x {args.workers}; rounds: {args.rounds}", flush=True)
    started = time.perf_counter()
    pool = Offloader(args.backend, args.workers, timeout=600.0).start()
    print(f"pool start-up ({args.backend} x {args.workers}, spawn): "
          f"{time.perf_counter() - started:.2f} s (not in the timings below)", flush=True)
    baseline = ProcessPoolExecutor(args.workers,
                                   mp_context=multiprocessing.get_context("spawn"))
    list(baseline.map(fat_score, range(args.workers), [1] * args.workers))  # start it
    results: list[dict[str, Any]] = []
    failed = False
    try:
        for name in names:
            regime = REGIMES[name]
            payloads = regime.payloads // (4 if args.quick else 1)
            rounds_per_agent = max(1, payloads // AGENTS)
            work, measured_ms = calibrate(regime.payload_ms)
            size = {"agents": AGENTS, "rounds": rounds_per_agent, "work": work}
            # Same-run checks, on a small traced copy: pooled == inline, trace and results.
            small = {**size, "rounds": min(3, rounds_per_agent)}
            reference = model(None, trace=True, **small)
            if model(pool, trace=True, **small) != reference:
                print(f"check {name}: trace digest and results identical: FAILED")
                failed = True
            else:
                print(f"check {name}: trace digest and results identical: ok", flush=True)
            inline_s: list[float] = []
            pooled_s: list[float] = []
            ratios: list[float] = []
            ceilings: list[float] = []
            for round_index in range(args.rounds):
                runs: dict[str, tuple[float, int]] = {}
                order = ("inline", "pooled") if round_index % 2 == 0 else ("pooled", "inline")
                for which in order:
                    chosen = None if which == "inline" else pool
                    runs[which] = timed(functools.partial(model, chosen, **size))
                if runs["inline"][1] != runs["pooled"][1]:
                    print(f"check {name}: result checksum identical: FAILED")
                    failed = True
                ceilings.append(ceiling(baseline, **size))
                inline_s.append(runs["inline"][0])
                pooled_s.append(runs["pooled"][0])
                ratios.append(runs["inline"][0] / runs["pooled"][0])
                print(f"  {name} round {round_index + 1}: inline {runs['inline'][0]:.2f} s, "
                      f"pooled {runs['pooled'][0]:.2f} s, ratio {ratios[-1]:.2f}, "
                      f"ceiling {ceilings[-1]:.2f}",
                      file=sys.stderr, flush=True)
            results.append({
                "regime": name, "payload_ms": measured_ms, "work": work,
                "payloads": AGENTS * rounds_per_agent,
                "inline_s": statistics.median(inline_s), "pooled_s": statistics.median(pooled_s),
                "inline_ms_per_payload": 1000 * min(inline_s) / (AGENTS * rounds_per_agent),
                "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                "ratio_max": max(ratios), "ratios": ratios, "ceilings": ceilings,
                "ceiling_median": statistics.median(ceilings),
                "efficiency_median": statistics.median(
                    r / c for r, c in zip(ratios, ceilings, strict=True)),
                "regime_spec": asdict(regime),
            })
    finally:
        pool.close()
        baseline.shutdown()
    print()
    header = (f"{'regime':<7} {'payload':>9} {'payloads':>8} {'inline':>8} {'pooled':>8}  "
              f"{'speed-up median [min-max]':<26} {'ceiling':>7} {'efficiency':>10}")
    print(header)
    print("-" * len(header))
    for row in results:
        print(f"{row['regime']:<7} {row['payload_ms']:>6.2f} ms {row['payloads']:>8} "
              f"{row['inline_s']:>6.2f} s {row['pooled_s']:>6.2f} s  "
              f"{spread(row):<26} {row['ceiling_median']:>7.2f} {row['efficiency_median']:>10.0%}")
    if args.json:
        Path(args.json).write_text(json.dumps({"backend": args.backend, "workers": args.workers,
                                               "rounds": args.rounds, "results": results},
                                              indent=2), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
