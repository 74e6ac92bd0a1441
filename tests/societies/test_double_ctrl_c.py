"""A double Ctrl-C keeps the checkpoint of the last finished step.

The first SIGINT stops the run at the end of the step in progress; the second
arrives while that stop writes its checkpoint (the world makes the write slow and
says when it has begun). The checkpoint must land: a real process, real signals.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]

SLOW_CHECKPOINT = '''
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from simulacra.agents import World

HERE = Path(__file__).resolve().parent


class Slow(World):
    """Its state is slow to take inside a checkpoint once the test arms it."""

    def __init__(self):
        super().__init__()
        self.total = 0

    def observation_for(self, agent_id, snapshot=None):
        return self.total

    def decide(self, agent_id, action, step, time):
        return [("add", {"amount": action}, ())]

    def apply(self, event):
        super().apply(event)
        self.total += event.data["amount"]

    def get_state(self):
        writing = any(f.name == "checkpoint" for f in traceback.extract_stack())
        if writing and (HERE / "armed").exists() and not (HERE / "writing").exists():
            (HERE / "writing").write_text("")
            time.sleep(2.0)
        return super().get_state()


class Adder:
    def __init__(self, id):
        self.id = id
        self.seen = 0

    def observe(self, observation):
        self.seen = observation

    def act(self, spec):
        time.sleep(0.002)
        return (self.seen + spec.step) % 5

    def get_state(self):
        return {"seen": self.seen}

    def set_state(self, state):
        self.seen = state["seen"]


def build(*, agents, seed, llm):
    return Slow(), [Adder(f"a{i}") for i in range(agents)]
'''


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_second_sigint_during_the_stop_keeps_the_last_steps_checkpoint(
        tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SLOW_CHECKPOINT, encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text("""
name: slow
sim:
  steps: 100000
  agents: 4
  world:
    factory: slow.py:build
  engine:
    mode: sequential
run:
  checkpoint_every: 100000
""", encoding="utf-8")
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, "-m", "simulacra", "run", str(config), "--out", str(run_dir),
         "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env)
    try:
        telemetry = run_dir / "telemetry.jsonl"
        _wait_for(lambda: telemetry.is_file() and len(telemetry.read_bytes().splitlines()) >= 3,
                  "three steps")
        (tmp_path / "armed").write_text("")
        process.send_signal(signal.SIGINT)
        _wait_for((tmp_path / "writing").exists, "the stop's checkpoint")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    found = re.search(r"stopped after (\d+) of 100000 steps", err)
    assert found is not None, err
    steps = int(found.group(1))
    assert steps >= 3
    assert len(telemetry.read_bytes().splitlines()) == steps
    kept = sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*.ckpt"))
    assert kept == ["checkpoint-000000.ckpt", f"checkpoint-{steps:06d}.ckpt"], (kept, err)
    assert f"simulacra run --resume {run_dir}" in err


def test_a_second_sigint_in_the_middle_of_a_step_keeps_the_last_finished_steps_checkpoint(
        tmp_path: Path) -> None:
    """Stopped at once mid-step: the checkpoint of the last finished step is written from
    the recordings (no call made), and the resume goes on from it to the run's digest."""
    config = ROOT / "examples" / "social" / "config.yaml"
    settings = ["sim.agents=1500", "sim.steps=8", "sim.engine.mode=sequential",
                "run.checkpoint_every=100000"]
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "simulacra", "run", str(config), *settings,
               "--out", str(run_dir), "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env)
    try:
        telemetry = run_dir / "telemetry.jsonl"
        _wait_for(lambda: telemetry.is_file() and len(telemetry.read_bytes().splitlines()) >= 2,
                  "two steps")
        process.send_signal(signal.SIGINT)
        time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    finished = len(telemetry.read_bytes().splitlines())
    kept = sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*.ckpt"))
    # The last finished step's checkpoint is kept: when the second signal cut a step short
    # (the usual case), it is written from the recordings before the process exits.
    assert kept[-1] == f"checkpoint-{finished:06d}.ckpt", (kept, finished, err)
    if "stopped at once" in err:
        assert f"writing the checkpoint of step {finished} from the recordings" in err, err
        assert f"continues from its checkpoint of step {finished}" in err, err
    resumed = subprocess.run([sys.executable, "-m", "simulacra", "run", "--resume",
                              str(run_dir), "--no-progress"], capture_output=True, text=True,
                             env=env, timeout=120, check=False)
    assert resumed.returncode == 0, resumed.stderr
    whole = subprocess.run([*command[:-3], "--out", str(tmp_path / "whole"), "--no-progress"],
                           capture_output=True, text=True, env=env, timeout=120, check=False)
    assert whole.returncode == 0, whole.stderr
    cut = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    uncut = json.loads((tmp_path / "whole" / "summary.json").read_text(encoding="utf-8"))
    assert cut["digest"] == uncut["digest"]
    per_step = uncut["llm"]["calls"] // 8  # participation 1: every agent asks once a step
    # None of the finished steps' calls reached the model again.
    assert cut["llm"]["recorded_this_session"] <= uncut["llm"]["calls"] - finished * per_step
