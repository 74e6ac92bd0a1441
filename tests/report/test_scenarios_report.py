"""A study with a scenarios axis in the report: each KPI's effect, with its CI, per scenario.

The effects the report computes from the study directory are the ones
``Experiment.scenario_effects`` gives (and ``effects.csv`` holds); the page
draws one chart per KPI with a point and an interval per scenario, tables
them, and names each scenario with its hash and the passages it cites.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from simulacra import report
from simulacra.report import _data
from simulacra.scenarios import load_scenario

SHOTS = Path("/tmp/report-shots")  # noqa: S108  (where the brief looks for them)


def test_the_effects_are_those_of_the_experiment(scenario_study: Path) -> None:
    import simulacra

    study = _data.load_study(scenario_study)
    assert [c["scenario"] for c in study.configs] == ["baseline", "rush", "slow-tellers"] * 2
    effects = {(e.config.get("servers"), e.scenario, e.kpi): e
               for e in _data.scenario_effects(study)}
    artifacts = {s["name"]: s for s in study.scenarios if s is not None}
    again = simulacra.Experiment.from_run(
        study.study["model"], [{"customers": 200, "warmup": 0.0},
                               {"customers": 200, "warmup": 0.0, "servers": 4}],
        master_seed=9, scenarios=[load_scenario(a) for a in artifacts.values()])
    frame = again.run(4, "sequential").scenario_effects()
    for row in frame.iter_rows(named=True):
        mine = effects[(row["servers"], row["scenario"], row["kpi"])]
        for ours, theirs in ((mine.mean, row["mean"]), (mine.difference, row["difference"]),
                             (mine.diff_low, row["diff_low"]), (mine.diff_high, row["diff_high"])):
            assert (math.isnan(ours) and math.isnan(theirs)) or ours == pytest.approx(theirs)
    [rush] = [s for s in _data.study_scenarios(study) if s["name"] == "rush"]
    assert rush["citations"] == [("branch-report.md#0-120:abcdef012345",
                                  "queues doubled at lunch time")]
    assert rush["hash"] == study.study["scenarios"]["rush"]


@pytest.mark.slow
@pytest.mark.parametrize("width", [1280, 800])
def test_the_study_report_draws_each_scenarios_effect(
        browser: Any, scenario_study: Path, width: int) -> None:
    study = _data.load_study(scenario_study)
    effects = [e for e in _data.scenario_effects(study) if e.scenario != "baseline"]
    kpis = sorted({e.kpi for e in effects})
    page = browser.new_page(viewport={"width": width, "height": 800})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(report.build_report(scenario_study).as_uri())
        page.wait_for_selector("body[data-ready]")
        drawn = page.evaluate("""() => Array.from(document.querySelectorAll(
            '#page-overview .charts.effects div.chart')).map(d => ({
            id: d.getAttribute('data-chart'), drawn: d.getAttribute('data-drawn'),
            traces: d.data.map(t => ({
              x: t.x, y: t.y, err: t.error_y.array}))}))""")
        assert sorted(c["id"] for c in drawn) == [f"effect: {k}" for k in kpis]
        for chart in drawn:
            kpi = chart["id"].removeprefix("effect: ")
            assert chart["drawn"]
            assert len(chart["traces"]) == 2  # one per servers value
            points = [(x, y, err) for t in chart["traces"]
                      for x, y, err in zip(t["x"], t["y"], t["err"], strict=True)]
            expected = sorted((e.scenario, e.difference) for e in effects if e.kpi == kpi)
            got = sorted((x, y) for x, y, _ in points)
            assert [x for x, _ in got] == [x for x, _ in expected]
            assert [y for _, y in got] == pytest.approx([y for _, y in expected])
            assert all(err > 0 for x, y, err in points if y)
        ids = page.inner_text("#page-overview table.scenario-ids")
        assert "queues doubled at lunch time" in ids
        assert study.study["scenarios"]["rush"][:12] in ids
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"study-scenarios-{width}.png"), full_page=True)
        page.evaluate("location.hash = '#/scenarios'")
        page.wait_for_selector("#page-scenarios tbody tr")
        rows = page.query_selector_all("#page-scenarios table:not(.scenario-ids) tbody tr")
        assert len(rows) == len(_data.scenario_effects(study))
        page.screenshot(path=str(SHOTS / f"study-scenarios-table-{width}.png"), full_page=True)
        assert errors == []
    finally:
        page.close()
