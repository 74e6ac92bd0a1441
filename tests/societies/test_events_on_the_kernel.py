"""The event engine on the kernel's queue: what the rebuild must keep the same in every mode.

The digests are pinned by tests/societies/test_events.py (every mode against the
sequential reference) and by the run directories of tests/societies/data/runs_v1
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
from simulacra.errors import ProviderError
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
    for setting in SETTINGS[1:]:
        assert _windows(seed, agents, setting, until) == reference, setting


class Overloaded(ProviderError):
    """A provider error that carries something no pickle takes (a callback)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.retry = lambda: None


class _Flaky:
    """The scripted model, failing every third call of an agent with :class:`Overloaded`."""

    def __init__(self) -> None:
        self.inner = ScriptedModel(seed=0)

    def complete(self, request: Any, *, site: Any = None) -> Any:
        if site is not None and site.n % 3 == 1:
            raise Overloaded(f"overloaded at {site}")
        return self.inner.complete(request, site=site)

    async def acomplete(self, request: Any, *, site: Any = None) -> Any:
        return self.complete(request, site=site)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sequential", "threads"])
def test_a_checkpoint_holding_a_failed_turn_resumes_to_the_uncut_run(
        tmp_path: Path, mode: str) -> None:
    """A failed turn still in the queue at a checkpoint is kept as its class name and
    message (what its event records), not as the exception object, which may not pickle."""
    from simulacra import RunStopped
    from simulacra.societies import RunControl, load_config, resume_society, run_society
    from simulacra.societies._checkpoint import read_checkpoint

    config = load_config(Path(__file__).resolve().parents[2] / "examples" / "social" /
                         "config.yaml",
                         ["sim.agents=8", "sim.steps=24", "sim.engine.step.built_in=async_event",
                          "sim.engine.step.options.window=0.1", f"sim.engine.mode={mode}",
                          "run.checkpoint_every=1", "run.max_failed_fraction=1.0"])
    uncut = run_society(config, out=tmp_path / "uncut", model=_Flaky())
    # The same run, stopped at a step's end with a checkpoint (as Ctrl-C stops it).
    control = RunControl()

    def stop_midway(report: Any) -> None:
        if report.step == 15:
            control.request_stop("a test")

    with pytest.raises(RunStopped):
        run_society(config, out=tmp_path / "cut", model=_Flaky(), control=control,
                    on_step=stop_midway)
    failed_in_queue = []
    for checkpoint in sorted((tmp_path / "cut" / "checkpoints").glob("*.ckpt")):
        state = read_checkpoint(checkpoint)
        engine = state["engine"].get("engine", {})
        failed_in_queue += [(checkpoint.name, e) for e in engine.get("queue", ())
                            if e[2] == 1 and not e[5][1][0]]
    assert failed_in_queue, "no checkpoint held a failed turn: make the windows shorter"
    name, entry = failed_in_queue[len(failed_in_queue) // 2]
    assert type(entry[5][1][1]).__name__ == "_Failure"
    step = int(name.split("-")[1].split(".")[0])
    resumed = resume_society(tmp_path / "cut", from_checkpoint=step, model=_Flaky())
    assert resumed.result.digest == uncut.result.digest
