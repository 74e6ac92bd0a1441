"""Predict what sharding would buy, from a sequential trace: ``analyze()``.

It replays the YAWNS window protocol of :class:`~simulacra.ShardedSim` on the
record times of a sequential run, split by the partition: each round's horizon
is ``min over shards (next record time + lookahead)``, each shard does the work
of its records before the horizon, and the round costs the *largest* shard's
work plus one barrier. The sum over rounds, against the sequential cost of all
records, is the predicted speedup. The barrier cost is measured on this machine
(rounds of one-tick windows on worker processes started exactly as a
ShardedSim starts them), once per process, unless given.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulacra.core import Sim
from simulacra.errors import ConfigError, PartitionError
from simulacra.executors import START_METHODS
from simulacra.trace import Trace, TraceLike

from ._pdes_model import entity_of
from ._pdes_workers import measure_round_trip

__all__ = ["SpeedupEstimate", "analyze", "measure_barrier_cost"]

_CACHE: dict[tuple[Any, ...], float] = {}
_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class SpeedupEstimate:
    """What :func:`analyze` predicts for one partition and lookahead."""

    #: The number of shards.
    shards: int
    #: Barrier rounds the window protocol would take.
    rounds: int
    #: Records (events) in the trace.
    records: int
    #: Records per shard: the load balance of the partition.
    per_shard: tuple[int, ...]
    #: Sum over rounds of the busiest shard's records: the critical path.
    critical_records: int
    #: Seconds per record used for the prediction.
    event_cost: float
    #: Seconds per barrier round used for the prediction.
    barrier_cost: float
    #: Predicted seconds of the sequential run: records x event_cost.
    sequential_seconds: float
    #: Predicted seconds of the sharded run: critical path x event_cost + rounds x barrier.
    parallel_seconds: float

    @property
    def speedup(self) -> float:
        """Predicted sequential / sharded time (below 1: sharding slows it down)."""
        return self.sequential_seconds / self.parallel_seconds if self.parallel_seconds else 1.0

    @property
    def records_per_round(self) -> float:
        """Mean records per round: work that one barrier buys."""
        return self.records / self.rounds if self.rounds else 0.0

    @property
    def efficiency(self) -> float:
        """Speedup per shard (1.0 is perfect)."""
        return self.speedup / self.shards

    def __str__(self) -> str:
        return (
            f"{self.shards} shards: predicted speedup {self.speedup:.2f}x "
            f"({self.rounds} rounds, {self.records_per_round:.1f} records/round, critical path "
            f"{self.critical_records} of {self.records} records, barrier "
            f"{self.barrier_cost * 1e6:.0f} us, event {self.event_cost * 1e6:.1f} us)"
        )


def measure_barrier_cost(shards: int = 2, *, start_method: str = "spawn",
                         rounds: int = 200, refresh: bool = False) -> float:
    """Seconds per barrier round with *shards* worker processes on this machine.

    Starts worker processes exactly as ``ShardedSim(mode="processes")`` does,
    builds a model of one ticking entity per shard, and times rounds of
    windows one tick wide: a command to every worker, ``run(until=...)`` over
    one trivial event, every reply back (median of *rounds*). The result is
    cached per ``(shards, start_method)`` for the life of this process.

    Args:
        shards: Worker processes (>= 1).
        start_method: ``"spawn"`` or ``"forkserver"``.
        rounds: Round trips to time.
        refresh: Measure again even if cached.

    Raises:
        ConfigError: a bad argument.
    """
    workers: object = shards
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"shards must be an int >= 1, got {shards!r}")
    if start_method not in START_METHODS:
        raise ConfigError(
            f"start_method must be one of {', '.join(map(repr, START_METHODS))}, "
            f"got {start_method!r}"
        )
    key = ("barrier", shards, start_method)
    with _CACHE_LOCK:
        if not refresh and key in _CACHE:
            return _CACHE[key]
    value = measure_round_trip(shards, start_method, max(1, rounds))
    with _CACHE_LOCK:
        _CACHE[key] = value
    return value


def _kernel_event_cost() -> float:
    """Seconds per event of a keyed Sim running trivial processes (measured once)."""
    key = ("event",)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]

    def ticker(sim: Sim, period: float) -> Any:
        while True:
            yield sim.delay(period)

    best = math.inf
    for _ in range(3):
        sim = Sim(seed=0, ordering="keyed")
        for i in range(50):
            sim.spawn(ticker, 1.0 + i / 50, name=f"t{i}")
        start = time.perf_counter()
        sim.run(until=400.0)
        best = min(best, (time.perf_counter() - start) / (50 * 400))
    with _CACHE_LOCK:
        _CACHE[key] = best
    return best


def _shard_of(partition: Mapping[str, int] | Callable[[str], int], entity: str,
              who: str) -> int:
    if isinstance(partition, Mapping):
        try:
            return partition[entity]
        except KeyError:
            raise PartitionError(
                f"analyze: record of {who!r} (entity {entity!r}) has no shard in the partition"
            ) from None
    return partition(entity)


def analyze(trace: TraceLike, partition: Mapping[str, int] | Callable[[str], int],
            lookahead: float | Sequence[float], *, shards: int | None = None,
            event_cost: float | None = None, wall_time: float | None = None,
            barrier_cost: float | None = None, start_method: str = "spawn") -> SpeedupEstimate:
    """Predict the speedup of sharding a model, from the trace of its sequential run.

    Each record counts as one unit of work, done by the shard that owns the
    record's entity (``cell-3``, ``cell-3/source`` and ``item#n:cell-3/2`` all
    belong to ``cell-3``). The YAWNS rounds are replayed on the record times:
    per round, the horizon is ``min over shards (next time + lookahead)``, and
    the round costs the busiest shard's work plus a barrier.

    Args:
        trace: The trace of a sequential run, e.g. ``UnshardedSim(..., trace=True).trace()``.
        partition: Entity name -> shard index (a mapping or a function).
        lookahead: The smallest lookahead of the channels leaving each shard:
            one number for all shards, or one per shard.
        shards: The number of shards; by default the largest index used + 1.
        event_cost: Seconds of work per record. By default ``wall_time / records``
            if *wall_time* is given, else the measured cost of a trivial keyed
            event on this machine (a lower bound: real handlers cost more).
        wall_time: Seconds the sequential run took (sets *event_cost*).
        barrier_cost: Seconds per barrier round; by default measured once on
            this machine with *shards* worker processes (see
            :func:`measure_barrier_cost`).
        start_method: Start method of the measured workers.

    Returns:
        The prediction; ``str()`` of it reads as a sentence.

    Raises:
        PartitionError: a record's entity has no shard, or a shard index is out of range.
        ConfigError: a bad argument.
    """
    records = Trace.of(trace).records
    owners: list[int] = []
    for record in records:
        who = record[2]
        shard: object = _shard_of(partition, entity_of(who), who)
        if isinstance(shard, bool) or not isinstance(shard, int) or shard < 0:
            raise PartitionError(f"analyze: the partition maps {who!r} to {shard!r}")
        owners.append(shard)
    given: object = shards
    if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given < 1):
        raise ConfigError(f"analyze: shards must be an int >= 1, got {shards!r}")
    count = max(owners, default=-1) + 1 if shards is None else shards
    count = max(count, 1)
    if owners and max(owners) >= count:
        raise PartitionError(
            f"analyze: the partition uses shard {max(owners)}, but shards={count}"
        )
    if isinstance(lookahead, int | float):
        looks = [float(lookahead)] * count
    else:
        looks = [float(x) for x in lookahead]
        if len(looks) != count:
            raise ConfigError(f"analyze: {len(looks)} lookaheads for {count} shards")
    if not all(x > 0 for x in looks):
        raise ConfigError(f"analyze: every lookahead must be > 0, got {lookahead!r}")
    if count == 1:
        looks = [math.inf]  # nothing leaves the only shard
    times: list[list[float]] = [[] for _ in range(count)]
    for record, shard in zip(records, owners, strict=True):
        times[shard].append(float(record[0]))
    total = len(records)
    if event_cost is None:
        event_cost = wall_time / total if wall_time is not None and total else _kernel_event_cost()
    if not (event_cost >= 0 and math.isfinite(event_cost)):
        raise ConfigError(f"analyze: event_cost must be a finite number >= 0, got {event_cost!r}")
    if barrier_cost is None:
        barrier_cost = measure_barrier_cost(count, start_method=start_method) if count > 1 else 0.0
    if not (barrier_cost >= 0 and math.isfinite(barrier_cost)):
        raise ConfigError(
            f"analyze: barrier_cost must be a finite number >= 0, got {barrier_cost!r}"
        )
    position = [0] * count
    rounds = 0
    critical = 0
    while True:
        nexts = [times[s][position[s]] if position[s] < len(times[s]) else math.inf
                 for s in range(count)]
        if min(nexts) == math.inf:
            break
        horizon = min(nexts[s] + looks[s] for s in range(count))
        busiest = 0
        for s in range(count):
            if nexts[s] < horizon:
                end = bisect.bisect_left(times[s], horizon, lo=position[s])
                busiest = max(busiest, end - position[s])
                position[s] = end
        critical += busiest
        rounds += 1
    return SpeedupEstimate(
        shards=count,
        rounds=rounds,
        records=total,
        per_shard=tuple(len(t) for t in times),
        critical_records=critical,
        event_cost=float(event_cost),
        barrier_cost=float(barrier_cost),
        sequential_seconds=total * event_cost,
        parallel_seconds=critical * event_cost + rounds * barrier_cost,
    )
