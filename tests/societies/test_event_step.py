"""What ``ActionEvent.step`` and ``ActionEvent.turn`` hold on each engine (docs/social.md).

On the round engine ``step`` is the step (round) the event was resolved in, and ``turn``
is None. On the event-driven engine ``step`` is the window the event fell in,
``int(event.time // window)``, and ``turn`` the acting agent's own turn number.
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


def test_on_the_event_engine_step_is_the_window_and_turn_the_agents_own_turn() -> None:
    events: list[ActionEvent] = []
    # Agent 0 wakes every 0.25 time units, agent 1 every 2: in window [1, 2) agent 0
    # is on its 5th-8th turns while agent 1 has had one.
    engine = EventEngine(Tally(), [Echo(0, 0.25), Echo(1, 2.0)], mode="sequential",
                         window=1.0, on_event=events.append)
    engine.run(until=4.0)
    assert events
    # step: the window, as a round's step (a world that tallies by step counts windows)
    assert all(e.step == int(e.time // 1.0) for e in events)
    for agent, mine in _by_agent(events).items():
        # turn: the agent's own turn number, what its ActionSpec.step said
        assert [e.turn for e in mine] == list(range(len(mine))), agent
        assert all(e.turn == e.data["spec_step"] for e in mine)
    assert max(e.turn or 0 for e in events if e.agent == "0") > 4
    assert max(e.step for e in events) < 4


def test_a_world_that_tallies_by_step_counts_the_same_on_both_engines() -> None:
    """The first week's trap: a world grouping its events by step printed a meaningless
    tally under the event-driven engine (agent 0's 16th turn as 'step 15' of a 4-window run).
    """
    def tally(events: list[ActionEvent]) -> dict[int, int]:
        out: dict[int, int] = {}
        for event in events:
            out[event.step] = out.get(event.step, 0) + 1
        return out

    rounds: list[ActionEvent] = []
    RoundEngine(Tally(), [Echo(0, 1.0), Echo(1, 1.0)], mode="sequential",
                on_step=lambda report: rounds.extend(report.events)).run(4)
    windows: list[ActionEvent] = []
    EventEngine(Tally(), [Echo(0, 1.0), Echo(1, 1.0)], mode="sequential", window=1.0,
                on_event=windows.append).run(until=4.0)
    assert set(tally(rounds)) == set(range(4))
    assert set(tally(windows)) <= set(range(4))
    assert all(e.turn is None for e in rounds)


def test_an_event_round_trips_with_its_turn() -> None:
    event = ActionEvent(3, 1, 1.5, "a", "post", {"x": 1}, ("b",), 7)
    again = ActionEvent.from_json(event.to_json())
    assert again == event
    assert "turn" not in ActionEvent(3, 1, 1.5, "a", "post").to_json()  # round engine's lines


def test_runs_made_before_the_turn_field_stamp_their_events_as_they_did() -> None:
    """use_event_step("turn"): how a replay or resume of an older run directory goes."""
    events: list[ActionEvent] = []
    engine = EventEngine(Tally(), [Echo(0, 0.25), Echo(1, 2.0)], mode="sequential",
                         window=1.0, on_event=events.append)
    engine.use_event_step("turn")
    engine.run(until=4.0)
    for agent, mine in _by_agent(events).items():
        assert [e.step for e in mine] == list(range(len(mine))), agent
        assert all(e.turn is None for e in mine)


def test_the_field_says_what_it_holds_on_each_engine() -> None:
    doc = ActionEvent.__doc__ or ""
    assert "round engine" in doc
    assert "window" in doc
    assert "own turn number" in doc
    assert "own turn number" in (ActionSpec.__doc__ or "")
