"""Knobs, interventions and scenario artifacts: schema, hash, virtual-time application."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import Resource, Sim, digest
from simulacra.errors import ScenarioError
from simulacra.scenarios import (
    Knob,
    KnobBoard,
    Knobs,
    Scenario,
    apply_scenario,
    canonical_json,
    load_scenario,
    load_scenarios,
)

KNOBS = Knobs(
    Knob("demand", "float", 1.0, low=0.0, high=10.0, doc="arrival-rate multiplier"),
    Knob("servers", "int", 2, low=1, high=8, unit="tellers"),
    Knob("open", "bool", True),
    Knob("policy", "str", "fifo", choices=("fifo", "lifo")),
)


def scenario(*interventions: dict[str, Any], name: str = "s") -> Scenario:
    return Scenario(name=name, interventions=list(interventions))


# -- declarations ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Knob("2x", "float", 1.0), "Knob name must be a Python identifier"),
        (lambda: Knob("x", "decimal", 1.0), "type must be one of float, int, bool, str"),
        (lambda: Knob("x", "int", 0, low=1), "knob 'x' default: knob 'x' must be >= 1, got 0"),
        (lambda: Knobs(Knob("x", "int", 1), Knob("x", "int", 2)), "knob 'x' is declared twice"),
    ],
)
def test_a_bad_declaration_says_what_is_wrong(make: Any, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        make()


# -- checking a scenario against the knobs ------------------------------------------


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"knob": "demnd", "at": 1, "value": 2.0},
         r"scenario 's', intervention 0: the model has no knob 'demnd' \(its knobs: demand, "
         r"servers, open, policy\); did you mean 'demand'\?"),
        ({"knob": "servers", "at": 1, "value": 2.5},
         r"intervention 0: knob 'servers' takes an int, got float 2.5"),
        ({"knob": "servers", "at": 1, "value": 9}, r"knob 'servers' must be <= 8, got 9"),
        ({"knob": "open", "at": 1, "value": 1}, r"knob 'open' takes true or false, got int 1"),
        ({"knob": "policy", "at": 1, "value": "random"},
         r"knob 'policy' must be one of 'fifo', 'lifo', got 'random'"),
        ({"knob": "open", "at": 1, "value": False, "ramp": 3.0},
         r"knob 'open' is a bool; only a number can ramp"),
        ({"knob": "demand", "at": 1, "value": 2.0, "ramp": 3.0, "duration": 2.0},
         r"give ramp or duration, not both"),
    ],
)
def test_each_bad_intervention_names_scenario_intervention_and_knob(
    item: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario(item).check(KNOBS)


def test_times_before_the_start_or_after_the_end_are_refused_before_the_run() -> None:
    sim = Sim(seed=1)
    sim.run(until=5.0)
    board = KnobBoard(KNOBS, sim)
    early = scenario({"knob": "demand", "at": 2.0, "value": 2.0})
    with pytest.raises(ScenarioError, match=r"at=2.0 is before the start of the run \(5.0\)"):
        apply_scenario(sim, board, early)
    late = scenario({"knob": "demand", "at": 50.0, "value": 2.0})
    with pytest.raises(ScenarioError, match=r"at=50.0 is after the end of the run \(20.0\)"):
        apply_scenario(sim, board, late, end=20.0)
    assert board.changes == []  # nothing was scheduled


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "Heat Wave", "interventions": [{"knob": "demand", "at": 1, "value": 2}]},
         "must be a slug"),
        ({"name": "x", "interventions": []}, "interventions is empty"),
        ({"name": "x", "interventions": [{"knob": "demand", "at": -1, "value": 2}]},
         r"interventions.0.at should be greater than or equal to 0"),
        ({"name": "x", "interventions": [{"knob": "demand", "at": 1, "value": [2]}]},
         r"interventions.0.value must be a bool, int, float or str \(got \[2\]\)"),
        ({"name": "x", "interventions": [{"knob": "demand", "at": 1, "value": 2}], "when": 3},
         "when is not a known setting"),
        ({"name": "x", "interventions": [{"knob": "demand", "at": "soon", "value": 2}]},
         r"interventions.0.at should be a valid number"),
    ],
)
def test_a_malformed_scenario_is_one_scenario_error(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_scenario(data)


# -- the artifact: canonical JSON and its hash ------------------------------------------

values = st.one_of(st.booleans(), st.integers(-10**6, 10**6),
                   st.floats(allow_nan=False, allow_infinity=False, width=64),
                   st.text(max_size=8))
interventions = st.fixed_dictionaries(
    {"knob": st.sampled_from(["demand", "servers", "open"]),
     "at": st.floats(0, 1e6, allow_nan=False),
     "value": values},
    optional={"duration": st.floats(0.001, 1e3), "note": st.text(max_size=20)},
)
scenarios = st.builds(
    lambda name, items, description: {"name": name, "interventions": items,
                                      "description": description},
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True),
    st.lists(interventions, min_size=1, max_size=5),
    st.text(max_size=30),
)


@settings(max_examples=150, deadline=None)
@given(scenarios, st.randoms(use_true_random=False))
def test_the_hash_depends_on_content_not_on_key_order_or_spelling(
    data: dict[str, Any], rng: Any
) -> None:
    shuffled = {k: data[k] for k in rng.sample(list(data), len(data))}
    shuffled["interventions"] = [
        {k: item[k] for k in rng.sample(list(item), len(item))} for item in data["interventions"]]
    a = load_scenario(data)
    b = load_scenario(shuffled)

    assert a.hash == b.hash
    assert a.artifact() == b.artifact()
    # Re-reading its own artifact gives it back byte for byte.
    again = load_scenario(json.loads(a.artifact()))
    assert again.artifact() == a.artifact()
    assert len(a.hash) == 64


def test_any_change_of_content_changes_the_hash() -> None:
    base = scenario({"knob": "demand", "at": 1.0, "value": 2.0})
    for change in ({"at": 1.5}, {"value": 2.5}, {"note": "why"}, {"duration": 3.0}):
        other = scenario({"knob": "demand", "at": 1.0, "value": 2.0, **change})
        assert other.hash != base.hash, change
    assert Scenario(name="s", description="x", interventions=base.interventions).hash != base.hash


def test_a_saved_artifact_loads_back_and_an_edited_one_is_refused(tmp_path: Path) -> None:
    s = scenario({"knob": "servers", "at": 10, "value": 1, "duration": 30}, name="teller-out")
    path = s.save(tmp_path)

    assert path.name == f"teller-out-{s.hash[:12]}.json"
    assert path.read_text(encoding="utf-8") == s.artifact()
    assert json.loads(path.read_text())["hash"] == s.hash
    assert load_scenario(path) == s
    assert not list(tmp_path.glob("*.partial"))

    edited = json.loads(path.read_text())
    edited["interventions"][0]["value"] = 2
    path.write_text(canonical_json(edited), encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"does not match its content .* the file was changed"):
        load_scenario(path)
    del edited["hash"]
    path.write_text(canonical_json(edited), encoding="utf-8")
    with pytest.raises(ScenarioError, match="the artifact has no 'hash' field"):
        load_scenario(path)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ScenarioError, match="not a JSON scenario artifact"):
        load_scenario(path)
    with pytest.raises(ScenarioError, match="cannot read the scenario"):
        load_scenario(tmp_path / "missing.json")


def test_a_directory_of_artifacts_loads_sorted_and_refuses_two_of_one_name(tmp_path: Path) -> None:
    b = scenario({"knob": "demand", "at": 1, "value": 2.0}, name="b")
    a = scenario({"knob": "demand", "at": 1, "value": 3.0}, name="a")
    b.save(tmp_path)
    a.save(tmp_path)

    assert [s.name for s in load_scenarios(tmp_path)] == ["a", "b"]
    scenario({"knob": "demand", "at": 2, "value": 3.0}, name="a").save(tmp_path)
    with pytest.raises(ScenarioError, match="two scenarios are called 'a'"):
        load_scenarios(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ScenarioError, match="holds no scenario artifact"):
        load_scenarios(tmp_path / "empty")
    with pytest.raises(ScenarioError, match="is not a directory"):
        load_scenarios(tmp_path / "nope")


# -- applying: virtual time, the trace ---------------------------------------------------


def run_with(s: Scenario | None, until: float = 100.0) -> tuple[KnobBoard, Sim]:
    sim = Sim(seed=3, trace=True)
    board = KnobBoard(KNOBS, sim)
    apply_scenario(sim, board, s, end=until)
    sim.run(until=until)
    return board, sim


def test_set_duration_and_ramp_change_the_knob_at_their_virtual_times() -> None:
    s = scenario(
        {"knob": "open", "at": 5, "value": False},
        {"knob": "servers", "at": 10, "value": 1, "duration": 20},
        {"knob": "demand", "at": 40, "value": 3.0, "ramp": 10, "ramp_steps": 4},
    )
    board, _ = run_with(s)

    changes = [(t, knob, old, new) for t, knob, old, new, _ in board.changes]
    assert changes == [
        (5.0, "open", True, False),
        (10.0, "servers", 2, 1),
        (30.0, "servers", 1, 2),
        (42.5, "demand", 1.0, 1.5),
        (45.0, "demand", 1.5, 2.0),
        (47.5, "demand", 2.0, 2.5),
        (50.0, "demand", 2.5, 3.0),
    ]
    assert board.values() == {"demand": 3.0, "servers": 2, "open": False, "policy": "fifo"}


def test_every_change_is_in_the_trace_and_the_baseline_records_nothing() -> None:
    s = scenario({"knob": "servers", "at": 10, "value": 1, "duration": 20}, name="outage")
    _, sim = run_with(s)
    _, baseline = run_with(None)

    records = [r for r in sim.trace_records if r[1] in ("scenario", "knob")]
    assert records[0] == (0.0, "scenario", "outage", {"hash": s.hash})
    assert [(r[0], r[2], r[3]["to"]) for r in records[1:]] == [(10.0, "servers", 1),
                                                              (30.0, "servers", 2)]
    assert not [r for r in baseline.trace_records if r[1] in ("scenario", "knob")]


def test_watchers_hear_each_change_with_the_old_and_new_value() -> None:
    sim = Sim(seed=1)
    board = KnobBoard(KNOBS, sim, values={"servers": 3})
    heard: list[tuple[float, Any, Any]] = []
    board.watch("servers", lambda old, new: heard.append((sim.now, old, new)))
    apply_scenario(sim, board, scenario({"knob": "servers", "at": 4, "value": 5, "duration": 2}))
    sim.run()

    assert heard == [(4.0, 3, 5), (6.0, 5, 3)]
    with pytest.raises(ScenarioError, match="the model has no knob 'tellers'"):
        board.watch("tellers", print)
    with pytest.raises(ScenarioError, match=r"start values: knob 'servers' must be <= 8"):
        KnobBoard(KNOBS, sim, values={"servers": 80})


def test_a_board_of_another_sim_is_refused() -> None:
    board = KnobBoard(KNOBS, Sim(seed=1))
    with pytest.raises(ScenarioError, match="the KnobBoard was made for another Sim"):
        apply_scenario(Sim(seed=1), board, scenario({"knob": "demand", "at": 1, "value": 2.0}))


# -- a model that reads and watches its knobs ----------------------------------------------


def bank(s: Scenario | None, customers: int = 400) -> tuple[list[float], str]:
    """A bank whose demand is a knob, read at each arrival."""
    sim = Sim(seed=11, trace=True)
    board = KnobBoard(KNOBS, sim)
    tellers = Resource(sim, capacity=board["servers"])
    waits: list[float] = []
    rng = sim.rng("bank")

    def customer(sim: Sim) -> Any:
        arrived = sim.now
        with tellers.request() as req:
            yield req
            waits.append(sim.now - arrived)
            yield sim.delay(rng.expovariate(1.0))

    def arrivals(sim: Sim) -> Any:
        for _ in range(customers):
            yield sim.delay(rng.expovariate(1.5 * float(board["demand"])))
            sim.spawn(customer)

    sim.spawn(arrivals, name="arrivals")
    apply_scenario(sim, board, s)
    sim.run()
    return waits, digest(sim)


def test_a_scenario_changes_the_model_and_replays_to_the_same_trace() -> None:
    surge = scenario({"knob": "demand", "at": 20, "value": 2.0, "duration": 60}, name="surge")
    base_waits, base_digest = bank(None)
    waits, run_digest = bank(surge)
    _, again = bank(surge)

    assert run_digest == again  # a pure function of seed, config and scenario
    assert run_digest != base_digest
    assert sum(waits) / len(waits) > sum(base_waits) / len(base_waits)


@pytest.mark.parametrize("ordering", ["fifo", "keyed"])
def test_changes_at_one_time_happen_in_intervention_order(ordering: str) -> None:
    items = [{"knob": "servers", "at": 5, "value": 1 + k % 8} for k in range(12)]
    sim = Sim(seed=1, ordering=ordering)
    board = KnobBoard(KNOBS, sim)
    apply_scenario(sim, board, scenario(*items))
    sim.run()

    assert [new for _, _, _, new, _ in board.changes] == [1 + k % 8 for k in range(12)]
    assert board["servers"] == 1 + 11 % 8
