"""An observation that is a live view of the world's state is refused, in every mode.

An agent on a worker thread reads its observation while the engine resolves
later turns; a view (``dict.items()``, a mapping proxy, a generator) or a
list the world keeps would show it those later changes, and a threaded run
would end on another digest than the sequential one, with no error. The event
engine refuses the common forms at the turn's start, in every mode (so a
sequential run says so before a threaded one differs).
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, NamedTuple

import pytest

from simulacra import ConfigError, EventEngine, LatencyModel, World
from simulacra.agents import ActionSpec, AgentId

LATENCY = LatencyModel(base=0.5, min_duration=0.5)


class Seen(NamedTuple):
    count: int
    who: Any


@dataclass
class View:
    count: int
    lines: Any


class Plain:
    def __init__(self, lines: Any) -> None:
        self.lines = lines


class Ledger(World):
    """Each agent adds a line; what it sees is chosen by *shape* (the ways to get it wrong)."""

    PLAIN_STATE = True

    def __init__(self, shape: str) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.scores: dict[str, int] = {}
        self._shape = shape

    _NOT_STATE = World._NOT_STATE | {"_shape"}

    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> Any:
        shape = self._shape
        if shape == "copy":
            return {"lines": list(self.lines[-3:]), "scores": dict(self.scores)}
        if shape == "own list":
            return self.lines
        if shape == "items":
            return self.scores.items()
        if shape == "proxy field":
            return {"scores": types.MappingProxyType(self.scores)}
        if shape == "generator":
            return (line for line in self.lines)
        if shape == "own dict field":
            return ("ledger", self.scores)
        if shape == "named tuple":
            return Seen(len(self.lines), self.scores.keys())
        if shape == "dataclass":
            return View(len(self.lines), self.lines)
        if shape == "plain object":
            return Plain(map(str.upper, self.lines))
        if shape == "dataclass of copies":
            return View(len(self.lines), tuple(self.lines))
        raise AssertionError(shape)

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        return [("line", {"text": action}, ())]

    def apply(self, event: Any) -> None:
        super().apply(event)
        if event.kind != "line":
            return
        self.lines.append(event.data["text"])
        self.scores[event.agent] = self.scores.get(event.agent, 0) + 1


class Clerk:
    def __init__(self, name: str) -> None:
        self.id = name
        self.seen: Any = None

    def observe(self, observation: Any) -> None:
        self.seen = observation

    def act(self, spec: ActionSpec) -> Any:
        return f"{self.id}:{spec.step}:{self.seen!r}"

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: Any) -> None:
        pass


def run(shape: str, mode: str) -> str:
    engine = EventEngine(Ledger(shape), [Clerk(f"c{i}") for i in range(4)], latency=LATENCY,
                         mode=mode, concurrency=4, seed=3)
    return engine.run(max_turns=3).digest


@pytest.mark.parametrize("mode", ["sequential", "threads", "asyncio"])
@pytest.mark.parametrize(("shape", "words"), [
    ("own list", "the observation is the world's own 'lines' (list), not a copy"),
    ("items", "the observation is a dict_items"),
    ("proxy field", "the observation['scores'] is a mappingproxy"),
    ("generator", "the observation is a generator"),
    ("own dict field", "the observation[1] is the world's own 'scores' (dict), not a copy"),
    ("named tuple", "the observation.who is a dict_keys"),
    ("dataclass", "the observation.lines is the world's own 'lines' (list), not a copy"),
    ("plain object", "the observation.lines is a map"),
])
def test_a_live_view_is_refused(shape: str, words: str, mode: str) -> None:
    with pytest.raises(ConfigError) as caught:
        run(shape, mode)
    message = str(caught.value)
    assert message.startswith("Ledger.observation_for('c"), message
    assert words in message, message
    assert "return a copy" in message
    assert "\n" not in message


@pytest.mark.parametrize("shape", ["copy", "dataclass of copies"])
def test_copies_run_and_agree_across_modes(shape: str) -> None:
    digests = {mode: run(shape, mode) for mode in ("sequential", "threads", "asyncio")}
    assert len(set(digests.values())) == 1, digests
