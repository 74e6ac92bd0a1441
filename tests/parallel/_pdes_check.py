"""The generative PDES tests' check: a sharded run equals one keyed Sim, segment by segment."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck

from simulacra import ShardedSim, UnshardedSim, first_divergence

#: Hypothesis settings of the generative PDES tests (their runs start workers).
SETTINGS: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def run_both(ref: UnshardedSim, sharded: ShardedSim, segments: list[float | None]) -> None:
    """Run both through *segments*; after each, trace, clock, next event and ties agree."""
    for index, until in enumerate(segments):
        ref.run(until=until)
        sharded.run(until=until)
        where = f"after segment {index} (run(until={until!r}))"
        expected, got = ref.trace(), sharded.trace()
        divergence = first_divergence(expected, got)
        assert divergence is None, f"{where}: the merged trace differs: {divergence}"
        assert sharded.now == ref.now, where
        assert sharded.peek() == ref.peek(), where
        assert got.ties is not None
        assert expected.ties is not None
        assert (got.ties.events, got.ties.ties) == (expected.ties.events,
                                                    expected.ties.ties), where
        assert expected.ties.across_shards == 0
        assert got.ties.across_shards <= got.ties.ties
