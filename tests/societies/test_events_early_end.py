"""The event engine's windows after the run's last turn are not run: nothing could happen in them.

With ``max_turns``, every agent stops once it has used them up. When none can take another
turn and nothing is queued (no wake-up, no resolution, no scenario change), every window left
is empty: ``EventSteps`` reports it without running the engine (``done``). What a run writes
stays what it wrote when the engine ran every window: each window's report, its digest and
telemetry line, the events, the digest; ``steps`` is still ``sim.steps``. A scenario change
still to come keeps the engine running, and a resume from a checkpoint taken before or after
the end ends on the same digest.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import simulacra
from simulacra.cli import main
from simulacra.rng import as_seed_tree
from simulacra.scenarios import Scenario
from simulacra.societies import WindowReport, build_model, build_society
from simulacra.societies._events import EventSteps, _step_factory
from simulacra.societies._rounds import StepReport

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
#: Every agent has its two turns well before window 30 (the last by about t = 10).
EVENT = ("sim.engine.step.built_in=async_event", "sim.agents=6",
         "sim.engine.step.options.max_turns=2")
WINDOWS = 30


def _config(*more: str) -> simulacra.societies.RunConfig:
    return simulacra.load_config(CONFIG, [*EVENT, f"sim.steps={WINDOWS}", *more])


def _steps(config: simulacra.societies.RunConfig,
           reports: list[StepReport] | None = None) -> EventSteps:
    world, agents = build_society(config)
    return _step_factory(world, agents, model=build_model(config),
                         seed=as_seed_tree(config.seed).child("engine"), config=config,
                         on_step=None if reports is None else reports.append, on_turn=None)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("mode", ["sequential", "threads", "asyncio"])
def test_the_windows_after_the_last_turn_are_reported_without_running_the_engine(
        mode: str) -> None:
    config = _config(f"sim.engine.mode={mode}")
    width = 1.0
    # The reference: the engine run for every window, as EventSteps did before it stopped.
    reference = _steps(config).engine
    digests: list[str] = []
    windows: list[dict[str, Any]] = []
    for k in range(WINDOWS):
        last = reference.run(max_turns=2, until=(k + 1) * width)
        digests.append(last.events_digest)
        window = {w.index: w for w in last.windows}.get(k, WindowReport(k, k * width))
        windows.append(window.telemetry())
    # The first window from which every window is empty: nothing woke, resolved or waited.
    busy = [k for k, w in enumerate(windows)
            if w["wakes"] or w["resolved"] or w["events"] or w["queue_max"]]
    end = busy[-1] + 1
    assert 0 < end < WINDOWS - 5

    reports: list[StepReport] = []
    steps = _steps(config, reports)
    assert not steps.done  # not started: every agent's first wake-up is to come
    result = steps.run(WINDOWS)
    assert steps.done
    assert steps.windows_run == end  # the engine ran no window after the end
    assert result.steps == WINDOWS
    assert list(result.step_digests) == digests
    assert result.digest == last.digest
    assert [r.step for r in reports] == list(range(WINDOWS))
    assert [r.window for r in reports] == windows
    assert all(not r.events and r.participants == r.llm_calls == 0 for r in reports[end:])
    assert len(set(result.step_digests[end - 1:])) == 1
    # More windows: none is run, and nothing changes.
    more = steps.run(5)
    assert steps.windows_run == end
    assert more.steps == WINDOWS + 5
    assert more.digest == result.digest


def test_without_max_turns_it_is_never_done() -> None:
    steps = _steps(simulacra.load_config(CONFIG, [
        "sim.engine.step.built_in=async_event", "sim.agents=6", "sim.steps=10"]))
    steps.run(10)
    assert not steps.done
    assert steps.windows_run == 10


def test_a_run_that_ends_early_writes_what_it_wrote_and_its_events_are_a_shorter_runs(
        tmp_path: Path) -> None:
    long = simulacra.run_society(_config(), out=tmp_path / "long")
    assert long.run_dir is not None
    telemetry = _lines(long.run_dir / "telemetry.jsonl")
    assert [line["step"] for line in telemetry] == list(range(WINDOWS))  # every window
    summary = json.loads((long.run_dir / "summary.json").read_text())
    assert summary["steps"] == WINDOWS
    assert len(summary["step_digests"]) == WINDOWS
    busy = [line["step"] for line in telemetry
            if line["events"] or line["window"]["wakes"] or line["window"]["queue_max"]]
    end = busy[-1] + 1
    assert end < WINDOWS - 5
    assert all(line["digest"] == telemetry[end - 1]["digest"] for line in telemetry[end:])
    assert all(line["window"] == WindowReport(line["step"], float(line["step"])).telemetry()
               for line in telemetry[end:])

    # A run of just the windows that held anything: the same events, calls and digest.
    short = simulacra.run_society(
        simulacra.load_config(CONFIG, [*EVENT, f"sim.steps={end}"]), out=tmp_path / "short")
    assert short.run_dir is not None
    assert short.digest == long.digest
    assert short.result.step_digests == long.result.step_digests[:end]
    assert ((short.run_dir / "action_events.jsonl").read_bytes()
            == (long.run_dir / "action_events.jsonl").read_bytes())
    assert len(_lines(short.run_dir / "calls.jsonl")) == len(_lines(long.run_dir / "calls.jsonl"))
    assert short.llm["calls"] == long.llm["calls"] > 0


def test_a_scenario_change_still_to_come_keeps_it_running(tmp_path: Path) -> None:
    """A post long after every agent's last turn is an event of the run, at its time; the
    agents it mentions are woken, and wake no more (max_turns)."""
    late = Scenario(name="late", interventions=[
        {"knob": "post", "at": 24.5, "value": "Late news, @ada0 @ben1"}])
    run = simulacra.run_society(_config(), out=tmp_path / "late", scenario=late)
    plain = simulacra.run_society(_config(), out=tmp_path / "plain")
    assert run.run_dir is not None
    assert plain.run_dir is not None
    events = _lines(run.run_dir / "action_events.jsonl")
    assert [(e["time"], e["kind"]) for e in events if e["time"] >= 20] == [(24.5, "post")]
    assert events[:-1] == _lines(plain.run_dir / "action_events.jsonl")
    assert run.scenario["applied"] == 1
    assert run.digest != plain.digest
    telemetry = _lines(run.run_dir / "telemetry.jsonl")
    assert telemetry[24]["events"] == telemetry[24]["window"]["events"] == 1
    assert all(not line["events"] for line in telemetry[25:])


@pytest.mark.parametrize("checkpoint", [0, 5, 20])
def test_a_run_that_ends_early_resumes_to_its_digest(tmp_path: Path, checkpoint: int,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """From a checkpoint before any turn, one in the middle, and one after the end."""
    whole = simulacra.run_society(_config("run.checkpoint_every=5", "sim.engine.mode=asyncio"),
                                  out=tmp_path / "whole")
    assert whole.run_dir is not None
    telemetry = _lines(whole.run_dir / "telemetry.jsonl")
    end = 1 + max(line["step"] for line in telemetry
                  if line["events"] or line["window"]["queue_max"])
    assert 5 < end <= 20  # the checkpoints of 5 and 20 are before and after the end
    cut = tmp_path / "cut"
    shutil.copytree(whole.run_dir, cut)
    (cut / "digest.txt").unlink()  # as if it had stopped: resume it from the checkpoint
    assert main(["run", "--resume", str(cut), "--from-checkpoint", str(checkpoint),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert (cut / "digest.txt").read_text() == (whole.run_dir / "digest.txt").read_text()
    assert ((cut / "action_events.jsonl").read_bytes()
            == (whole.run_dir / "action_events.jsonl").read_bytes())
    resumed = _lines(cut / "telemetry.jsonl")
    assert [line["digest"] for line in resumed] == [line["digest"] for line in telemetry]
    assert [line["window"] for line in resumed] == [line["window"] for line in telemetry]
