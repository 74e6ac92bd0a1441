"""Studies with a scenarios axis: each config runs as its baseline and under each scenario."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("polars")

from simulacra import ConfigError, Experiment, ScenarioError, SpoolError
from simulacra.scenarios import Scenario

ROOT = Path(__file__).resolve().parents[2]
BANK = f"{ROOT / 'examples' / 'bank.py'}:run"
CONFIGS = [{"customers": 300, "warmup": 0.0}, {"customers": 300, "warmup": 0.0, "servers": 4}]
RUSH = Scenario(name="rush", interventions=[{"knob": "demand", "at": 20, "value": 1.3,
                                             "duration": 100}])
SLOW = Scenario(name="slow-tellers", interventions=[{"knob": "service_speed", "at": 0,
                                                     "value": 0.9, "ramp": 30}])
#: Sets a knob to the value it already has: the model runs as its baseline.
NOOP = Scenario(name="no-op", interventions=[{"knob": "demand", "at": 10, "value": 1.0}])


def study(tmp_path: Path | None = None, scenarios: object = (RUSH, SLOW, NOOP)) -> Experiment:
    return Experiment.from_run(BANK, CONFIGS, master_seed=9, scenarios=list(scenarios),
                               spool_dir=tmp_path)


def test_each_config_runs_as_its_baseline_then_under_each_scenario_in_name_order() -> None:
    s = study()
    names = [None if c["scenario"] is None else c["scenario"]["name"] for c in s.configs]

    assert names == [None, "no-op", "rush", "slow-tellers"] * 2
    assert [c.get("servers") for c in s.configs] == [None] * 4 + [4] * 4
    # Every scenario of a config draws the seeds of its baseline: the differences are paired.
    assert s.stream(1, 3).seed == s.stream(0, 3).seed
    assert s.stream(5, 0).seed == s.stream(4, 0).seed != s.stream(0, 0).seed
    assert s.identity["scenarios"] == {"no-op": NOOP.hash, "rush": RUSH.hash,
                                       "slow-tellers": SLOW.hash}


@pytest.mark.determinism
@pytest.mark.slow
def test_a_study_with_scenarios_is_the_same_on_every_backend() -> None:
    s = study()
    reference = s.run(3, "sequential")
    for backend in ("threads", "processes"):
        results = s.run(3, backend, 2)
        assert [r.kpis for r in results] == [r.kpis for r in reference]
    assert reference.table()["scenario"].to_list()[:12] == (
        [None] * 3 + ["no-op"] * 3 + ["rush"] * 3 + ["slow-tellers"] * 3)


def test_effects_are_paired_differences_from_the_baseline() -> None:
    results = study().run(4, "sequential")
    effects = results.scenario_effects()
    wait = {(row["servers"], row["scenario"]): row
            for row in effects.filter(effects["kpi"] == "mean_wait").iter_rows(named=True)}

    for servers in (None, 4):
        base, noop = wait[servers, "baseline"], wait[servers, "no-op"]
        assert base["difference"] == 0.0
        # The no-op scenario runs exactly as the baseline: every difference is 0.
        assert noop["mean"] == base["mean"]
        assert noop["difference"] == 0.0
        assert noop["diff_halfwidth"] == 0.0
        # More customers, or slower tellers, make every replication wait longer.
        for name in ("rush", "slow-tellers"):
            row = wait[servers, name]
            assert row["difference"] > 0
            if servers is None:  # load 0.9: the effect is far outside the noise
                assert row["diff_low"] > 0, name
            assert math.isclose(row["difference"], row["mean"] - base["mean"], rel_tol=1e-9,
                                abs_tol=1e-12)
            # Pairing: the difference is known better than the two means side by side.
            assert row["diff_halfwidth"] < row["halfwidth"] + base["halfwidth"]


def test_a_model_that_takes_no_scenario_is_refused_before_anything_runs(tmp_path: Path) -> None:
    s = Experiment.from_run(f"{ROOT / 'tests' / 'parallel' / '_experiment_models.py'}:needs_rate",
                            [{"servers": 1, "rate": 1.0}], master_seed=1, scenarios=[RUSH],
                            spool_dir=tmp_path / "study")
    with pytest.raises(ConfigError, match=r"config 0 sets 'scenario', which model .* does not "
                                          "take"):
        s.run(1, "sequential")
    assert not (tmp_path / "study" / "results.jsonl").exists()


def test_bad_scenarios_are_refused_when_the_study_is_built(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="two are called 'rush'"):
        study(scenarios=[RUSH, Scenario(name="rush", interventions=RUSH.interventions[:1] * 2)])
    with pytest.raises(ConfigError, match="a non-empty list of scenarios"):
        study(scenarios=[])
    with pytest.raises(ConfigError, match="holds no scenario artifact"):
        Experiment.from_run(
            BANK, CONFIGS, master_seed=1, scenarios=str(tmp_path))
    with pytest.raises(ConfigError, match="sets 'scenario', which a study with scenarios sets"):
        Experiment.from_run(BANK, [{"scenario": None}], master_seed=1, scenarios=[RUSH])
    # A knob the model's KNOBS lacks is refused before any replication runs.
    typo = Scenario(name="typo", interventions=[{"knob": "demnd", "at": 1, "value": 2.0}])
    spool = tmp_path / "typo-study"
    with pytest.raises(ScenarioError, match=r"scenario 'typo', intervention 0: the model has "
                                            r"no knob 'demnd' .*did you mean 'demand'\?"):
        Experiment.from_run(BANK, CONFIGS[:1], master_seed=1, scenarios=[typo],
                            spool_dir=spool).run(1, "sequential")
    assert not (spool / "results.jsonl").exists()


def test_a_directory_of_artifacts_is_a_scenarios_axis_and_resume_checks_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "scenarios"
    RUSH.save(folder)
    SLOW.save(folder)
    spool = tmp_path / "study"
    first = Experiment.from_run(BANK, CONFIGS[:1], master_seed=2, scenarios=folder,
                                spool_dir=spool).run(2, "sequential")
    assert [s.name for s in Experiment.from_run(BANK, CONFIGS[:1], master_seed=2,
                                                scenarios=folder).scenarios] == ["rush",
                                                                                 "slow-tellers"]
    assert json.loads((spool / "study.json").read_text())["scenarios"]["rush"] == RUSH.hash

    NOOP.save(folder)  # the axis changed: the spooled study is another study now
    with pytest.raises(SpoolError):
        Experiment.from_run(BANK, CONFIGS[:1], master_seed=2, scenarios=folder,
                            spool_dir=spool).run(2, "sequential", resume=True)
    assert len(first) == 6


def test_a_scenario_file_written_by_hand_joins_the_axis_by_the_hash_of_its_content(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "by-hand"
    folder.mkdir()
    written = {"format": "simulacra.scenario.v1", "name": "rush",
               "interventions": [{"knob": "demand", "at": 20, "value": 1.3, "duration": 100}]}
    (folder / "rush.json").write_text(json.dumps(written), encoding="utf-8")
    spool = tmp_path / "study"
    results = Experiment.from_run(BANK, CONFIGS[:1], master_seed=2, scenarios=folder,
                                  spool_dir=spool).run(2, "sequential")
    assert len(results) == 4
    recorded = json.loads((spool / "study.json").read_text())["scenarios"]["rush"]
    assert recorded == Scenario(**written).hash
    # Edited afterwards: another scenario, so the spooled study is another study.
    written["interventions"][0]["value"] = 1.5
    (folder / "rush.json").write_text(json.dumps(written), encoding="utf-8")
    with pytest.raises(SpoolError):
        Experiment.from_run(BANK, CONFIGS[:1], master_seed=2, scenarios=folder,
                            spool_dir=spool).run(2, "sequential", resume=True)
    # A hash that is there must still match the content.
    (folder / "rush.json").write_text(json.dumps({**written, "hash": recorded}),
                                      encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"rush\.json: its hash .* does not match"):
        Experiment.from_run(BANK, CONFIGS[:1], master_seed=2, scenarios=folder)
