"""``analyze()``: predicted speedup of sharding, from a sequential trace.

No timing assertions: event and barrier costs are passed in, so the
predictions are exact functions of the trace; only ``measure_barrier_cost`` is
measured, and the test checks that it is positive and cached.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import simulacra
from simulacra import ConfigError, PartitionError, Trace, UnshardedSim, analyze
from simulacra.parallel import measure_barrier_cost

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

import pdes_models  # noqa: E402

GRID = pdes_models.Grid(rows=8, cols=4, transfer=1.0, horizon=30.0)
CELLS = [f"cell-{r}-{c}" for r in range(GRID.rows) for c in range(GRID.cols)]


def blocks(shards: int) -> dict[str, int]:
    return {cell: i * shards // len(CELLS) for i, cell in enumerate(CELLS)}


@pytest.fixture(scope="module")
def trace() -> Trace:
    ref = UnshardedSim(pdes_models.build_grid, seed=4, config=GRID, trace=True)
    ref.run(until=40.0)
    return ref.trace()


def test_one_shard_predicts_no_speedup(trace: Trace) -> None:
    estimate = analyze(trace, blocks(1), 1.0, event_cost=1e-5, barrier_cost=1e-3)
    assert estimate.shards == 1
    assert estimate.rounds == 1
    assert estimate.critical_records == estimate.records == len(trace)
    assert estimate.speedup == pytest.approx(1.0 / (1.0 + 1e-3 / (len(trace) * 1e-5)))


def test_free_barriers_and_a_large_lookahead_approach_the_shard_count(trace: Trace) -> None:
    estimate = analyze(trace, blocks(2), 1000.0, event_cost=1e-5, barrier_cost=0.0)
    assert estimate.rounds == 1  # one window holds everything
    assert estimate.critical_records == max(estimate.per_shard)
    assert sum(estimate.per_shard) == estimate.records
    assert 1.6 < estimate.speedup <= 2.0
    assert estimate.efficiency == pytest.approx(estimate.speedup / 2)


def test_a_smaller_lookahead_means_more_rounds_and_less_speedup(trace: Trace) -> None:
    predictions = [analyze(trace, blocks(4), lookahead, event_cost=2e-6, barrier_cost=5e-5)
                   for lookahead in (0.05, 0.5, 1.0, 5.0)]
    rounds = [p.rounds for p in predictions]
    speedups = [p.speedup for p in predictions]
    assert rounds == sorted(rounds, reverse=True)
    assert speedups == sorted(speedups)
    assert speedups[0] < 1.0 < speedups[-1]  # tiny windows: barriers cost more than they buy
    assert predictions[-1].records_per_round > predictions[0].records_per_round


def test_expensive_barriers_predict_a_slowdown(trace: Trace) -> None:
    estimate = analyze(trace, blocks(2), 1.0, event_cost=1e-6, barrier_cost=1e-2)
    assert estimate.speedup < 1.0
    assert "predicted speedup" in str(estimate)


def test_wall_time_sets_the_event_cost(trace: Trace) -> None:
    estimate = analyze(trace, blocks(2), 1.0, wall_time=2.0, barrier_cost=0.0)
    assert estimate.event_cost == pytest.approx(2.0 / len(trace))
    assert estimate.sequential_seconds == pytest.approx(2.0)


def test_partition_as_a_function_and_per_shard_lookaheads(trace: Trace) -> None:
    by_row = analyze(trace, lambda cell: int(cell.split("-")[1]) // 4, [1.0, 1.0],
                     event_cost=1e-6, barrier_cost=0.0)
    assert by_row == analyze(trace, blocks(2), 1.0, event_cost=1e-6, barrier_cost=0.0)


def test_unknown_actors_and_bad_arguments(trace: Trace) -> None:
    with pytest.raises(PartitionError, match="no shard in the partition"):
        analyze(trace, {"cell-0-0": 0}, 1.0, event_cost=1e-6, barrier_cost=0.0)
    with pytest.raises(PartitionError, match="shards=2"):
        analyze(trace, blocks(4), 1.0, shards=2, event_cost=1e-6, barrier_cost=0.0)
    with pytest.raises(ConfigError, match="lookahead"):
        analyze(trace, blocks(2), 0.0, event_cost=1e-6, barrier_cost=0.0)
    with pytest.raises(ConfigError, match="3 lookaheads for 2 shards"):
        analyze(trace, blocks(2), [1.0, 1.0, 1.0], event_cost=1e-6, barrier_cost=0.0)
    with pytest.raises(ConfigError, match="barrier_cost"):
        analyze(trace, blocks(2), 1.0, event_cost=1e-6, barrier_cost=-1.0)


def test_actors_map_to_their_entities() -> None:
    from simulacra.parallel._pdes_model import entity_of

    assert entity_of("cell-3") == "cell-3"
    assert entity_of("cell-3/source") == "cell-3"
    assert entity_of("_echo#n:node-2/4") == "node-2"
    assert entity_of("child#e:n:node-2@5/1") == "node-2"


def test_the_barrier_cost_is_measured_once_and_cached(trace: Trace) -> None:
    first = measure_barrier_cost(2)
    assert 0 < first < 1.0
    assert measure_barrier_cost(2) == first
    estimate = analyze(trace, blocks(2), 1.0, event_cost=1e-6)  # measured barrier cost
    assert estimate.barrier_cost == first
    assert isinstance(estimate, simulacra.SpeedupEstimate)
