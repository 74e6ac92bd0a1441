"""The engines number events, not the world: a world whose ``apply()`` forgets
``super().apply(event)`` still writes events 0, 1, 2... and replays; a world that
numbers events itself, wrongly, is refused in one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import ConfigError
from simulacra.agents import ActionEvent, ActionSpec, AgentId, World
from simulacra.societies import EventEngine, RoundEngine

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)

FORGETFUL = '''
from typing import Any

from simulacra.agents import ActionSpec, World


class Forgetful(World):
    """Its apply() changes the state but never calls super().apply(event)."""

    def __init__(self, names):
        super().__init__()
        self.names = names
        self.total = 0

    def observation_for(self, agent_id, snapshot=None):
        return self.total

    def decide(self, agent_id, action, step, time):
        return [("add", {"amount": action}, ()), ("note", {"by": str(agent_id)}, ())]

    def apply(self, event):
        if event.kind == "add":
            self.total += event.data["amount"]


class Adder:
    def __init__(self, id):
        self.id = id
        self.seen = 0

    def observe(self, observation):
        self.seen = observation

    def act(self, spec: ActionSpec) -> Any:
        return (self.seen + spec.step) % 5

    def get_state(self):
        return {"seen": self.seen}

    def set_state(self, state):
        self.seen = state["seen"]


def build(*, agents, seed, llm):
    names = [f"a{i}" for i in range(agents)]
    return Forgetful(names), [Adder(name) for name in names]
'''


def _simulacra(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "simulacra", *args, "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=100, check=False)


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_a_world_that_skips_super_apply_still_numbers_its_events(tmp_path: Path,
                                                                 engine: str) -> None:
    (tmp_path / "forgetful.py").write_text(FORGETFUL, encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(f"""
name: forgetful
seed: 3
sim:
  steps: 4
  agents: 3
  world:
    factory: forgetful.py:build
  engine:
    step:
      built_in: {engine}
""", encoding="utf-8")
    run_dir = tmp_path / "run"
    done = _simulacra("run", str(config), "--out", str(run_dir))
    assert done.returncode == 0, done.stderr
    lines = (run_dir / "action_events.jsonl").read_text(encoding="utf-8").splitlines()
    indices = [json.loads(line)["i"] for line in lines]
    assert len(indices) >= 8
    assert indices == list(range(len(indices)))
    replay = _simulacra("replay", str(run_dir))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "digest matches" in replay.stdout


class Ledger(World):
    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
        return self.events

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        return [("add", {"amount": action}, ())]


class SelfNumbering(Ledger):
    """Overrides resolve() and numbers every event 0: the engine must refuse it."""

    def resolve(self, agent_id: AgentId, action: Any, *, step: int,
                time: float | None = None) -> list[ActionEvent]:
        event = ActionEvent(0, step, float(step) if time is None else time, str(agent_id),
                            "add", {"amount": action})
        self.apply(event)
        return [event]


class One:
    def __init__(self, id: int) -> None:
        self.id = id

    def observe(self, observation: Any) -> None:
        pass

    def act(self, spec: ActionSpec) -> Any:
        return 1

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: Any) -> None:
        pass


def test_the_round_engine_refuses_a_world_that_misnumbers() -> None:
    engine = RoundEngine(SelfNumbering(), [One(0), One(1)], mode="sequential")
    with pytest.raises(ConfigError, match=r"SelfNumbering numbered an event 0, expected 1: "
                                          r".*super\(\)\.apply"):
        engine.run(2)


def test_the_event_engine_refuses_a_world_that_misnumbers() -> None:
    engine = EventEngine(SelfNumbering(), [One(0), One(1)], mode="sequential")
    with pytest.raises(ConfigError, match=r"SelfNumbering numbered an event 0, expected 1"):
        engine.run(max_turns=3)


def test_replaying_a_log_numbers_the_world_whatever_its_apply_does() -> None:
    class Forgets(Ledger):
        def apply(self, event: ActionEvent) -> None:
            pass

    log = [ActionEvent(i, 0, 0.0, "a", "add", {"amount": 1}) for i in range(3)]
    world = Forgets()
    assert world.replay(log) == 3
    assert world.events == 3
    assert world.replay(log) == 0
