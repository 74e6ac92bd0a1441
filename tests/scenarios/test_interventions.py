"""What what-if users ask for: capacity knobs, stochastic interventions, triggers.

Each runs a small queueing model on the real kernel (a Resource whose capacity a
knob drives, customers drawn from named streams) under a real Scenario.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulacra import PriorityResource, Resource, Sim, Store
from simulacra.errors import ScenarioError
from simulacra.scenarios import Knob, KnobBoard, Knobs, Scenario, apply_scenario

KNOBS = Knobs(
    Knob("servers", "int", 1, low=1, high=10, unit="servers", doc="servers at work"),
    Knob("demand", "float", 1.0, low=0.1, high=10.0, doc="multiplier on the arrival rate"),
)


# --------------------------------------------------------------------------- capacity knobs


def _fixed_queue(scenario: Scenario | None) -> tuple[dict[str, float], list[Any], Sim]:
    """Six customers at 0, 1, ..., 5, each served for 10, by `servers` (a knob) servers."""
    sim = Sim(seed=0, trace=True)
    board = KnobBoard(KNOBS, sim)
    res = Resource(sim, capacity=5)  # the knob overrides it: 1 from the start
    board.bind_capacity("servers", res)
    apply_scenario(sim, board, scenario, end=200)
    granted: dict[str, float] = {}

    def customer(sim: Sim, name: str, arrival: float) -> Any:
        yield sim.delay(arrival)
        with res.request() as req:
            yield req
            granted[name] = sim.now
            yield sim.delay(10)

    for i in range(6):
        sim.spawn(customer, f"c{i}", float(i))
    sim.run()
    return granted, board.changes, sim


def test_a_capacity_knob_opens_slots_for_a_window() -> None:
    window = Scenario(name="extra-servers", interventions=[
        {"knob": "servers", "at": 2.5, "value": 3, "duration": 8},
    ])

    base, _, _ = _fixed_queue(None)
    granted, changes, _ = _fixed_queue(window)

    # One server: every customer waits for the one before.
    assert base == {"c0": 0, "c1": 10, "c2": 20, "c3": 30, "c4": 40, "c5": 50}
    # Three from 2.5 to 10.5: c1 and c2 (waiting) at once, c3 at 10 (c0 leaves); at 10.5
    # back to one: c1, c2, c3 keep their slots and finish (12.5, 12.5, 20) before c4.
    assert granted == {"c0": 0, "c1": 2.5, "c2": 2.5, "c3": 10, "c4": 20, "c5": 30}
    assert [(t, k, old, new) for t, k, old, new, _ in changes] == [
        (2.5, "servers", 1, 3), (10.5, "servers", 3, 1)]


def test_a_capacity_knob_checks_what_it_binds() -> None:
    sim = Sim(seed=0)
    board = KnobBoard(KNOBS, sim)
    with pytest.raises(ScenarioError, match=r"knob 'demand' must be an int knob with low >= 1 "
                                            r"to be a capacity, got type 'float'"):
        board.bind_capacity("demand", Resource(sim))
    with pytest.raises(ScenarioError, match=r"expected a Resource .*got Store"):
        board.bind_capacity("servers", Store(sim))
    with pytest.raises(ScenarioError, match="belongs to another Sim"):
        board.bind_capacity("servers", PriorityResource(Sim(seed=0)))
    with pytest.raises(ScenarioError, match="the model has no knob 'serverz'"):
        board.bind_capacity("serverz", Resource(sim))
    zero = Knobs(Knob("n", "int", 1, low=0))
    with pytest.raises(ScenarioError, match="with low 0"):
        KnobBoard(zero, sim).bind_capacity("n", Resource(sim))
