"""The event engine on the kernel's queue: what the rebuild must keep the same in every mode.

The digests are pinned by tests/engines/test_events.py (every mode against the
sequential reference) and by the run directories of tests/social/data/runs_v1
(written before the rebuild). Here: the per-window telemetry that is a property of
the model, not of the wall clock, is the same in every mode too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulacra import SeedTree
from simulacra.llm import LatencyModel, ScriptedModel
from simulacra.societies import EventEngine

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "social"))
import model as social

LATENCY = LatencyModel(base=0.2, noise_sigma=0.3, min_duration=0.1)
SETTINGS = [("sequential", 1, True), ("sequential", 1, False), ("threads", 1, True),
            ("threads", 8, True), ("asyncio", 8, True), ("threads", 3, False)]


def _windows(seed: int, agents: int, setting: tuple[str, int, bool],
             until: float) -> list[tuple[Any, ...]]:
    mode, concurrency, lookahead = setting
    world, people = social.build(agents=agents, seed=SeedTree(seed), llm={})
    engine = EventEngine(world, people, model=ScriptedModel(seed=seed), latency=LATENCY,
                         seed=seed, mode=mode, lookahead=lookahead,
                         concurrency=concurrency, window=0.5)
    result = engine.run(until=until)
    return [(w.index, w.wakes, w.resolved, w.failed, w.events, w.queue_max, w.chain_max,
             round(w.latency_mean, 9)) for w in result.windows] + [(result.digest,)]


@pytest.mark.timeout(300)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), agents=st.integers(2, 25),
       until=st.sampled_from([1.0, 2.5, 4.0]))
def test_window_telemetry_is_the_same_in_every_mode(seed: int, agents: int,
                                                    until: float) -> None:
    reference = _windows(seed, agents, SETTINGS[0], until)
    assert len(reference) > 1
    for setting in SETTINGS[1:]:
        assert _windows(seed, agents, setting, until) == reference, setting
