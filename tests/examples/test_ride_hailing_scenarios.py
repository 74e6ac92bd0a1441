"""The ride-hailing example's knobs under scenarios: each knob does what its docs say."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from ride_hailing import model  # noqa: E402

from simulacra import Sim, digest  # noqa: E402
from simulacra.errors import ScenarioError  # noqa: E402
from simulacra.scenarios import Scenario  # noqa: E402


def scenario(name: str, *items: dict[str, Any]) -> Scenario:
    return Scenario(name=name, interventions=list(items))


def run(s: Scenario | None, **params: Any) -> tuple[model.Fleet, Sim]:
    sim = Sim(seed=7, trace=True)
    fleet = model.build(sim, scenario=s, **params)
    sim.run(until=fleet.params.horizon)
    return fleet, sim


def records(sim: Sim, kind: str) -> list[tuple[Any, ...]]:
    return [r for r in sim.trace_records if r[1] == kind]


@pytest.fixture(scope="module")
def baseline() -> tuple[model.Fleet, Sim]:
    return run(None)


def test_without_a_scenario_the_knobs_change_nothing(baseline: tuple[model.Fleet, Sim]) -> None:
    fleet, sim = baseline
    assert fleet.kpis() == model.run()
    assert not records(sim, "knob")
    assert not records(sim, "scenario")


def test_a_heat_wave_slows_every_charge_it_covers(baseline: tuple[model.Fleet, Sim]) -> None:
    heat = scenario("heat-wave", {"knob": "charge_rate", "at": 100, "value": 0.5,
                                  "duration": 300})
    fleet, sim = run(heat)
    base_fleet, _ = baseline

    assert fleet.kpis()["mean_charger_wait"] > base_fleet.kpis()["mean_charger_wait"]
    changes = [(r[0], r[3]["to"]) for r in records(sim, "knob")]
    assert changes == [(100.0, 0.5), (400.0, 1.0)]


def test_a_dual_station_outage_sends_nobody_to_a_down_station() -> None:
    outage = scenario("dual-outage",
                      {"knob": "station_0", "at": 150, "value": False, "duration": 200},
                      {"knob": "station_1", "at": 150, "value": False, "duration": 200})
    fleet, sim = run(outage)

    during = [r for r in records(sim, "charge") if 150 < r[0] < 350]
    assert during, "somebody charged during the outage"
    # A charge is recorded when the charger is granted; vehicles that chose a station
    # before it went down may still be queued there, so look at choices made during it.
    late = [r for r in during if r[0] > 150 + 60]
    assert {r[3]["station"] for r in late} == {2}
    assert fleet.kpis()["served"] > 0


def test_when_every_station_is_down_vehicles_wait_for_one() -> None:
    down = scenario("blackout", *({"knob": f"station_{k}", "at": 50, "value": False,
                                   "duration": 100} for k in range(3)))
    _, sim = run(down)

    assert not [r for r in records(sim, "charge") if 50 + 60 < r[0] < 150]
    assert [r for r in records(sim, "charge") if r[0] >= 150]


def test_a_demand_surge_brings_more_requests_and_a_fleet_cut_parks_vehicles(
    baseline: tuple[model.Fleet, Sim],
) -> None:
    base = baseline[0].kpis()
    surge, _ = run(scenario("surge", {"knob": "demand", "at": 100, "value": 2.0, "ramp": 50}))
    cut, sim = run(scenario("cut", {"knob": "fleet_size", "at": 100, "value": 10,
                                    "duration": 200}))

    assert surge.kpis()["requests"] > base["requests"] * 1.3
    parked = records(sim, "park")
    assert len(parked) == 30
    assert all(100 <= r[0] <= 300 for r in parked)
    assert len(records(sim, "unpark")) == len([r for r in parked if r[0] < 300])
    assert cut.kpis()["abandoned"] > base["abandoned"]
    assert cut.in_service == 40


def test_a_fleet_rise_adds_vehicles_and_a_patience_cut_abandons_more(
    baseline: tuple[model.Fleet, Sim],
) -> None:
    grown, _ = run(scenario("grow", {"knob": "fleet_size", "at": 10, "value": 60}),
                   vehicles=20)
    assert len(grown.vehicles) == 60
    assert grown.in_service == 60
    impatient, _ = run(scenario("impatient", {"knob": "patience", "at": 0, "value": 0.5}),
                       vehicles=20)
    patient, _ = run(None, vehicles=20)
    assert impatient.kpis()["abandoned"] > patient.kpis()["abandoned"]
    k = impatient.kpis()
    assert k["served"] + k["abandoned"] + k["open"] == k["requests"]


def test_the_same_scenario_gives_the_same_digest_and_a_bad_one_fails_before_the_run() -> None:
    heat = scenario("heat", {"knob": "charge_rate", "at": 100, "value": 0.5})
    _, a = run(heat)
    _, b = run(Scenario(**heat.content()))
    assert digest(a) == digest(b)
    with pytest.raises(ScenarioError, match=r"scenario 'typo', intervention 0: the model has "
                                            r"no knob 'station_7'"):
        model.run(scenario=scenario("typo", {"knob": "station_7", "at": 1, "value": False}))
    with pytest.raises(ScenarioError, match=r"at=900.0 is after the end of the run \(600.0\)"):
        model.run(scenario=scenario("late", {"knob": "demand", "at": 900, "value": 2.0}))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_worked_example_ranks_its_scenarios_by_their_effect(tmp_path: Path) -> None:
    import csv
    import subprocess

    pytest.importorskip("polars")
    script = ROOT / "examples" / "ride_hailing" / "scenarios" / "rank.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path), "--replications", "2"],
                          capture_output=True, text=True, timeout=280, check=False)

    assert done.returncode == 0, done.stderr
    with (tmp_path / "ranking.csv").open(encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    artifacts = sorted(p.name.rsplit("-", 1)[0] for p in
                       (ROOT / "examples" / "ride_hailing" / "scenarios" / "artifacts").glob(
                           "*.json"))
    assert sorted(r["scenario"] for r in rows) == artifacts
    effects = [float(r["abandonment_rate_difference"]) for r in rows]
    assert effects == sorted(effects, reverse=True)  # most harmful first
    assert all(r["scenario"] in done.stdout for r in rows)
    table = [line for line in done.stdout.splitlines() if not line.startswith("wrote ")]
    assert max(len(line) for line in table) <= 80
