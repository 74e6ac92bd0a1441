"""RunControl: play, pause, step and stop a society run from another thread, at its safe points.

A run paused and stepped through, one step (window) at a time, writes the digest and the
``action_events.jsonl`` of the same run played straight, on the round engine (every mode)
and on the event-driven engine; a stop writes a checkpoint and the resumed run ends with the
uninterrupted run's digest. The pause is no run time: it enters no step's ``wall_s``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from simulacra import RunControl, RunStopped, load_config, resume_society, run_society

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

pytestmark = pytest.mark.timeout(240)

ENGINES = [("round", "threads"), ("round", "asyncio"), ("round", "sequential"),
           ("async_event", "threads")]


def _config(engine: str, mode: str, *extra: str) -> Any:
    return load_config(str(CONFIG), ["sim.agents=10", "sim.steps=6", "sim.engine.concurrency=4",
                                     f"sim.engine.step.built_in={engine}",
                                     f"sim.engine.mode={mode}", *extra])


class _Driven:
    """run_society on a thread of its own, with a control; what it returned or raised."""

    def __init__(self, config: Any, out: Path, control: RunControl) -> None:
        self.control = control
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._go, args=(config, out), daemon=True)
        self.thread.start()

    def _go(self, config: Any, out: Path) -> None:
        try:
            self.result = run_society(config, out=out, control=self.control)
        except BaseException as exc:
            self.error = exc

    def paused_at(self) -> int | None:
        assert self.control.wait_paused(timeout=60), "the run did not get to a safe point"
        return self.control.step

    def join(self) -> None:
        self.thread.join(timeout=120)
        assert not self.thread.is_alive()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.determinism
@pytest.mark.parametrize(("engine", "mode"), ENGINES)
def test_a_run_paused_and_stepped_through_is_the_run_played_straight(
        tmp_path: Path, engine: str, mode: str) -> None:
    config = _config(engine, mode)
    straight = run_society(config, out=tmp_path / "straight")

    control = RunControl(paused=True)
    driven = _Driven(config, tmp_path / "stepped", control)
    telemetry = tmp_path / "stepped" / "telemetry.jsonl"
    assert driven.paused_at() == 0
    assert control.state == "paused"
    assert _lines(telemetry) == []  # started paused: not one step has run
    for expected in range(1, 4):
        control.step_once()
        assert driven.paused_at() == expected  # exactly one step, then waiting again
        assert len(_lines(telemetry)) == expected
    control.step_once()
    control.step_once()  # two owed steps run two steps
    assert driven.paused_at() == 5
    control.play()
    driven.join()
    assert driven.error is None, driven.error
    assert control.state == "ended"
    assert control.step == 6
    assert control.paused_s > 0

    assert driven.result.digest == straight.digest
    assert (tmp_path / "stepped" / "action_events.jsonl").read_bytes() == \
        (tmp_path / "straight" / "action_events.jsonl").read_bytes()
    assert (tmp_path / "stepped" / "digest.txt").read_text() == \
        (tmp_path / "straight" / "digest.txt").read_text()
    # The wall clock spent paused is in no step: each step's wall_s is its own work.
    walls = [json.loads(line)["wall_s"] for line in _lines(telemetry)]
    summary = json.loads((tmp_path / "stepped" / "summary.json").read_text())
    assert summary["wall_s"] == pytest.approx(sum(walls), abs=0.01)


@pytest.mark.parametrize(("engine", "mode"), [("round", "threads"), ("async_event", "threads")])
def test_pause_while_playing_waits_at_the_next_safe_point(
        tmp_path: Path, engine: str, mode: str) -> None:
    config = _config(engine, mode)
    straight = run_society(config, out=tmp_path / "straight")
    control = RunControl()
    control.pause()  # asked before the run starts: it waits before step 0
    driven = _Driven(config, tmp_path / "paused", control)
    assert driven.paused_at() == 0
    control.play()
    control.pause()
    at = driven.paused_at()
    assert at is not None
    assert len(_lines(tmp_path / "paused" / "telemetry.jsonl")) == at
    control.step_once()
    assert driven.paused_at() == at + 1 or control.state == "ended"
    control.play()
    driven.join()
    assert driven.error is None
    assert driven.result.digest == straight.digest


@pytest.mark.determinism
@pytest.mark.parametrize(("engine", "mode"), [("round", "threads"), ("async_event", "threads")])
def test_stop_writes_a_checkpoint_and_the_resumed_run_is_the_whole_run(
        tmp_path: Path, engine: str, mode: str) -> None:
    config = _config(engine, mode)
    straight = run_society(config, out=tmp_path / "straight")
    control = RunControl(paused=True)
    cut = tmp_path / "cut"
    driven = _Driven(config, cut, control)
    driven.paused_at()
    control.step_once()
    control.step_once()
    assert driven.paused_at() == 2
    control.request_stop("stop from the test")
    driven.join()
    assert isinstance(driven.error, RunStopped)
    assert driven.error.step == 2
    assert f"simulacra run --resume {cut}" in str(driven.error)
    assert (cut / "checkpoints" / "checkpoint-000002.ckpt").is_file()
    assert not (cut / "digest.txt").exists()
    assert control.state == "ended"

    resumed = resume_society(cut)
    assert resumed.digest == straight.digest
    assert (cut / "action_events.jsonl").read_bytes() == \
        (tmp_path / "straight" / "action_events.jsonl").read_bytes()


def test_a_stop_while_playing_ends_at_the_next_safe_point(tmp_path: Path) -> None:
    control = RunControl()
    control.request_stop("before it starts")
    with pytest.raises(RunStopped) as stopped:
        run_society(_config("round", "threads"), out=tmp_path / "r", control=control)
    assert stopped.value.step == 0
    assert (tmp_path / "r" / "checkpoints" / "checkpoint-000000.ckpt").is_file()


def test_the_states_and_wait_paused_without_a_run() -> None:
    control = RunControl()
    assert control.state == "playing"
    assert not control.paused
    assert not control.waiting
    control.step_once()  # playing: the same as pause
    assert control.state == "paused"
    assert control.wait_paused(timeout=0.01) is False  # no run ever gets there
    control.play()
    control.request_stop()
    assert control.state == "stopping"
