"""What ``ActionEvent.step`` holds on each engine (docs/social.md, "What `step` means").

On the round engine it is the step (round) the event was resolved in. On the
event-driven engine it is the acting agent's own turn number, counted per agent,
not the window: the window of an event is ``int(event.time // window)``.
"""

from __future__ import annotations

from typing import Any

from simulacra.agents import ActionEvent, ActionSpec, AgentId, World
from simulacra.societies import EventEngine, RoundEngine


class Tally(World):
    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
        return None

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        return [("act", {"spec_step": action}, ())]


class Echo:
    """Acts with the step its ActionSpec carried, so the test sees both."""

    def __init__(self, id: int, pace: float) -> None:
        self.id = id
        self.pace = pace

    def observe(self, observation: Any) -> None:
        pass

    def act(self, spec: ActionSpec) -> Any:
        return spec.step

    def next_wake(self, now: float, rng: Any) -> float:
        return now + self.pace

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: Any) -> None:
        pass


def _by_agent(events: list[ActionEvent]) -> dict[str, list[ActionEvent]]:
    out: dict[str, list[ActionEvent]] = {}
    for event in events:
        out.setdefault(event.agent, []).append(event)
    return out


def test_on_the_round_engine_step_is_the_round() -> None:
    events: list[ActionEvent] = []
    engine = RoundEngine(Tally(), [Echo(0, 1.0), Echo(1, 1.0)], mode="sequential",
                         on_step=lambda report: events.extend(report.events))
    engine.run(3)
    assert [e.step for e in events] == [0, 0, 1, 1, 2, 2]
    assert all(e.step == int(e.time) == e.data["spec_step"] for e in events)


def test_on_the_event_engine_step_is_the_agents_own_turn_number() -> None:
    events: list[ActionEvent] = []
    # Agent 0 wakes every 0.25 time units, agent 1 every 2: in window [1, 2) agent 0
    # is on its 5th-8th turns while agent 1 has had one.
    engine = EventEngine(Tally(), [Echo(0, 0.25), Echo(1, 2.0)], mode="sequential",
                         window=1.0, on_event=events.append)
    engine.run(until=4.0)
    for agent, mine in _by_agent(events).items():
        assert [e.step for e in mine] == list(range(len(mine))), agent
        assert all(e.step == e.data["spec_step"] for e in mine)
    # Not the window: the same window holds events of different steps, and one agent's
    # step runs past the number of windows.
    assert any(e.step != int(e.time // 1.0) for e in events)
    assert max(e.step for e in events if e.agent == "0") > 4


def test_the_field_says_what_it_holds_on_each_engine() -> None:
    doc = ActionEvent.__doc__ or ""
    assert "round engine" in doc
    assert "own turn number" in doc
    assert "own turn number" in (ActionSpec.__doc__ or "")
