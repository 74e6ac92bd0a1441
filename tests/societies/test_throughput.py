"""summary.json ``llm.throughput``: agent-steps, their speed, calls made or served, and the
share of agent-steps that asked the model nothing, checked against calls.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulacra.cli import main
from simulacra.societies import replay_run, run_society

LEDGER = '''
from simulacra.agents import LLMAgent, World
from simulacra.llm import CompletionRequest


class Ledger(World):
    PLAIN_STATE = True

    def __init__(self, names):
        super().__init__()
        self.notes = {name: [] for name in names}

    def observation_for(self, agent_id, snapshot=None):
        return len(self.notes[str(agent_id)])

    def decide(self, agent_id, action, step, time):
        return [("note", {"text": action}, ())]

    def apply(self, event):
        super().apply(event)
        self.notes[event.agent].append(event.data["text"][:12])


class Clerk(LLMAgent):
    def __init__(self, i):
        super().__init__(f"clerk{i:02d}")
        self.i = i

    def prompt(self, spec):
        if (spec.step + self.i) % 3 == 0:
            return None  # a turn that needs no model: a rule decides
        return CompletionRequest.chat(f"{self.id} has {self.observation} notes; write one")

    def parse(self, completion, spec):
        return "by rule" if completion is None else completion.text


def build(*, agents, seed, llm):
    clerks = [Clerk(i) for i in range(agents)]
    return Ledger([c.id for c in clerks]), clerks
'''


def _config(tmp_path: Path) -> dict[str, object]:
    (tmp_path / "ledger.py").write_text(LEDGER, encoding="utf-8")
    return {"name": "ledger", "seed": 3,
            "sim": {"agents": 12, "steps": 6, "world": {"factory": f"{tmp_path}/ledger.py:build"},
                    "engine": {"participation": 0.5, "mode": "threads", "concurrency": 4}}}


@pytest.mark.timeout(120)
def test_throughput_counts_agent_steps_calls_and_turns_that_needed_none(tmp_path: Path) -> None:
    run = run_society(_config(tmp_path), out=tmp_path / "run")
    speed = run.llm["throughput"]
    telemetry = [json.loads(line) for line in
                 (tmp_path / "run" / "telemetry.jsonl").read_text().splitlines()]
    turns = sum(t["participants"] for t in telemetry)
    assert 0 < turns < 12 * 6  # participation 0.5: some agents sat steps out
    calls = [json.loads(line) for line in
             (tmp_path / "run" / "calls.jsonl").read_text().splitlines()]
    called = {(c["agent"], c["step"]) for c in calls}
    assert speed["agent_steps"] == turns
    assert speed["calls_made"] == len(calls) == run.llm["calls"]
    assert speed["served_from_recordings"] == 0
    assert speed["no_call_agent_steps"] == turns - len(called) > 0
    assert speed["no_call_share"] == pytest.approx((turns - len(called)) / turns, abs=1e-6)
    assert speed["per_s"] > 0
    assert speed["us_per_agent_step"] > 0
    stored = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert stored["llm"]["throughput"] == speed

    replay = replay_run(tmp_path / "run")
    assert replay.matches
    again = replay.run.llm["throughput"]
    assert again["calls_made"] == 0
    assert again["served_from_recordings"] == len(calls)
    assert again["no_call_agent_steps"] == speed["no_call_agent_steps"]


def test_the_summary_table_shows_the_throughput(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    path = tmp_path / "ledger.yaml"
    import yaml

    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "agent-steps" in out
    assert "needing no call" in out
    assert "made / from recordings" in out


SHY_FACTORY = '''
import sys
sys.path.insert(0, {social!r})
from agents import SocialAgent
from model import build as social_build


class Shy(SocialAgent):
    """Asks the model on even turns only; an odd turn idles without a call."""

    def prompt(self, spec):
        if spec.step % 2 == 1:
            return None
        return super().prompt(spec)


def build(agents, seed, llm, feed_size=8, follows=5):
    world, people = social_build(agents=agents, seed=seed, llm=llm, feed_size=feed_size,
                                 follows=follows)
    for person in people:
        person.__class__ = Shy
    return world, people
'''


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_turns_needing_no_call_are_counted_per_turn_on_both_engines(
        tmp_path: Path, engine: str) -> None:
    """Found by a stranger: on the event engine an agent takes several turns a window, and
    'needing no call' was its turns less the distinct agents that called (overstated)."""
    from simulacra.societies import load_config

    root = Path(__file__).resolve().parents[2]
    factory = tmp_path / "shy.py"
    factory.write_text(SHY_FACTORY.format(social=str(root / "examples" / "social")))
    config = load_config(root / "examples" / "social" / "config.yaml", [
        f"sim.world.factory={factory}:build", "sim.agents=10", "sim.steps=6",
        f"sim.engine.step.built_in={engine}", "sim.engine.mode=threads"])
    run_society(config, out=tmp_path / "run")
    events = [json.loads(line) for line in
              (tmp_path / "run" / "action_events.jsonl").read_text().splitlines()]
    turns = {(e["agent"], e.get("turn", e["step"])) for e in events}
    # Round engine: "step" is the round, and every agent takes one turn a round; event
    # engine: "turn" is the agent's turn number. Either way odd numbers asked nothing.
    expected = sum(1 for _, turn in turns if turn % 2 == 1)
    found = json.loads((tmp_path / "run" / "summary.json").read_text())["llm"]["throughput"]
    assert found["agent_steps"] == len(turns)
    assert found["no_call_agent_steps"] == expected, found
