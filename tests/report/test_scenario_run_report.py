"""A society run with a scenario in the report and the live view; the axes of a free run.

The run's Run panel (and the live view's header) name the scenario and its short
hash, the summary says how many of its changes were applied, and the pseudo-agents
of its events (``system``, ``scenario``, an agent's ``interview:NAME`` calls) are
shown as what they are, not as agents that took no turn. A run whose every cost is
0 gets no invented cost ticks; count axes have whole-number ticks; an empty sample
is "no samples"; a study of one intervention says "1 intervention".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import simulacra
from simulacra import report
from simulacra.report import _build, _charts, _data

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _live_helpers import CONFIG, simulacra_cli  # noqa: E402

SHOTS = Path("/tmp/report-shots2")  # noqa: S108  (where the brief looks for them)
SCENARIOS = CONFIG.parent / "scenarios" / "artifacts"
#: The shipped storm-alert artifact's hash prefix (its file name ends with it).
STORM_HASH = next(SCENARIOS.glob("storm-alert-*.json")).stem.rpartition("-")[2]


def _scenario_run(out: Path, name: str) -> Path:
    [artifact] = SCENARIOS.glob(f"{name}-*.json")
    done = simulacra_cli("run", str(CONFIG), "--scenario", str(artifact), "--out", str(out),
                         "--no-progress", "sim.agents=12", "sim.steps=5")
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def storm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The social example under storm-alert: a system post, then three interviews."""
    return _scenario_run(tmp_path_factory.mktemp("scenario-run") / "storm", "storm-alert")


@pytest.fixture(scope="module")
def outage_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The social example under feed-cache-outage: two knob events by ``scenario``."""
    return _scenario_run(tmp_path_factory.mktemp("scenario-run") / "outage", "feed-cache-outage")


def test_the_report_names_the_scenario_and_its_changes(storm_run: Path) -> None:
    run = _data.load_society_run(storm_run)
    data = _build.society_data(run)
    identity = dict(data["identity"])
    sha = run.manifest["scenario"]["sha256"]
    assert identity["scenario"] == f"storm-alert ({sha[:12]})"
    assert dict(data["totals"])["scenario"] == "2 of 2 changes applied"
    assert data["pseudo"]["system"] == ["scenario", "storm-alert"]
    assert data["pseudo"]["interview:ada00"] == ["interview", "storm-alert"]
    assert "ada00" not in data["pseudo"]  # an interviewed agent is an agent
    texts = [_data.event_text(e) for e in run.events if e["kind"] == "interview"]
    assert texts[0].startswith("asked 'Did you see the storm warning")


def test_a_run_without_a_scenario_says_none(round_run: Path) -> None:
    data = _build.society_data(_data.load_society_run(round_run))
    assert "scenario" not in dict(data["identity"])
    assert "scenario" not in dict(data["totals"])
    assert data["pseudo"] == {}


def _open(browser: Any, url: str, width: int, errors: list[str]) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    return page


@pytest.mark.parametrize("width", [1280, 800])
def test_the_pseudo_agents_pages_say_what_they_are(browser: Any, storm_run: Path,
                                                    outage_run: Path, width: int) -> None:
    SHOTS.mkdir(exist_ok=True)
    errors: list[str] = []
    storm = report.build_report(storm_run)
    outage = report.build_report(outage_run)
    page = _open(browser, storm.as_uri(), width, errors)
    page.wait_for_selector(".card")
    run_panel = page.inner_text(".cards .card:first-child")
    assert f"storm-alert ({STORM_HASH})" in run_panel
    assert "2 of 2 changes applied" in page.inner_text(".cards")
    page.screenshot(path=str(SHOTS / f"scenario-overview-{width}.png"), full_page=True)

    page.goto(storm.as_uri() + "#/agent/system")
    page.wait_for_selector(".pseudo-note")
    text = page.inner_text("main")
    assert "Not an agent" in text
    assert "storm-alert" in text
    assert "Its turns" not in text  # no "no model call this turn", no "None of its 0 calls"
    assert "model calls failed" not in text
    page.screenshot(path=str(SHOTS / f"scenario-agent-system-{width}.png"), full_page=True)

    page.goto(storm.as_uri() + "#/agent/interview:ada00")
    page.wait_for_selector(".pseudo-note")
    assert "the interviews of" in page.inner_text(".pseudo-note")
    page.goto(storm.as_uri() + "#/agents")
    page.wait_for_selector("span.pseudo")
    tags = page.eval_on_selector_all("span.pseudo", "els => els.map(e => e.textContent)")
    assert sorted(set(tags)) == ["interview", "scenario"]
    page.screenshot(path=str(SHOTS / f"scenario-agents-{width}.png"), full_page=True)

    page.goto(outage.as_uri() + "#/agent/scenario")
    page.wait_for_selector(".pseudo-note")
    assert "feed-cache-outage" in page.inner_text(".pseudo-note")
    assert "feed_size: 8 -> 3" in page.inner_text("main")
    ticks = page.eval_on_selector_all("#agent-chart .ytick text",
                                      "els => els.map(e => e.textContent)")
    assert ticks == ["0", "1"], ticks  # whole numbers: no 0.5
    page.screenshot(path=str(SHOTS / f"scenario-agent-scenario-{width}.png"), full_page=True)
    page.close()
    assert errors == []


def test_the_live_view_header_names_the_scenario(browser: Any, storm_run: Path) -> None:
    errors: list[str] = []
    with simulacra.LiveView(storm_run, process=False) as view:
        for width in (1280, 800):
            page = _open(browser, view.url, width, errors)
            page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=60_000)
            page.wait_for_selector("#chart-latency_hist .main-svg")
            assert page.inner_text("#scenario").startswith(f"scenario storm-alert ({STORM_HASH})")
            page.wait_for_timeout(500)
            page.screenshot(path=str(SHOTS / f"live-scenario-{width}.png"), full_page=True)
            page.close()
    assert errors == []


# -- axes -------------------------------------------------------------------------------


def _free_series(steps: int = 40) -> _data.StepSeries:
    lines = [{"step": s, "events": 200, "participants": 200, "llm_calls": 200,
              "prompt_tokens": 40_000, "completion_tokens": 5_000, "cost": 0.0,
              "failed": 0, "wall_s": 0.1} for s in range(steps)]
    return _data.step_series(lines)


def test_a_run_that_cost_nothing_has_no_invented_cost_ticks() -> None:
    series = _free_series()
    tokens = _charts.figure_spec(_charts.tokens_chart(series))["layout"]["yaxis2"]
    assert tokens["tickvals"] == [0]
    assert tokens["range"] == [0, 1]
    assert "not priced" in tokens["title"]["text"]
    cost = _charts.figure_spec(_charts.cost_chart(series))["layout"]
    assert cost["yaxis"]["tickvals"] == [0]
    assert any("not priced" in a["text"] for a in cost["annotations"])
    priced = _data.step_series([{"step": 0, "cost": 0.25}, {"step": 1, "cost": 0.5}])
    assert "tickvals" not in _charts.figure_spec(_charts.tokens_chart(priced))["layout"]["yaxis2"]


def test_count_axes_have_whole_number_ticks() -> None:
    lines = [{"step": s, "events": s % 2, "llm_calls": 1, "participants": 1, "failed": s % 2}
             for s in range(6)]
    series = _data.step_series(lines)
    for chart in (_charts.actions_chart, _charts.calls_chart, _charts.failures_chart):
        axis = _charts.figure_spec(chart(series))["layout"]["yaxis"]
        assert axis["dtick"] == 1, chart
        assert "tickformat" not in axis  # ",d" on 0.2 steps: "0 0 0 1 1"
    calls = [{"step": s, "ok": s != 2, "latency_s": 0.01 * (s + 1), "error": "Timeout"}
             for s in range(6)]
    run = _data.RunData(Path("."), {}, {}, {}, lines, [], calls)
    pct = _charts.figure_spec(_charts.latency_percentiles_chart(_data.call_stats(run), series))
    assert pct["layout"]["yaxis2"]["dtick"] == 1
    assert "tickformat" not in pct["layout"]["yaxis2"]
    many = _data.step_series([{"step": 0, "events": 500}])
    assert "dtick" not in _charts.figure_spec(_charts.actions_chart(many))["layout"]["yaxis"]


@pytest.mark.parametrize("width", [1280, 800])
def test_the_axes_of_a_free_scenario_run_in_the_browser(browser: Any, tmp_path: Path,
                                                         width: int) -> None:
    [artifact] = SCENARIOS.glob("feed-cache-outage-*.json")  # (storm-alert names ada00)
    out = tmp_path / "big"
    done = simulacra_cli("run", str(CONFIG), "--scenario", str(artifact), "--out", str(out),
                         "--no-progress", "sim.agents=200", "sim.steps=40")
    assert done.returncode == 0, done.stderr
    errors: list[str] = []
    page = _open(browser, report.build_report(out).as_uri(), width, errors)
    page.wait_for_selector("[data-chart='tokens'] .main-svg")

    def ticks(chart: str, axis: str) -> list[str]:
        return list(page.eval_on_selector_all(f"[data-chart='{chart}'] .{axis}tick text",
                                              "els => els.map(e => e.textContent)"))

    assert ticks("tokens", "y2") == ["0"]  # not 0.218, 0.436...
    assert ticks("cost", "y") == ["0"]
    for chart, axis in (("latency_pct", "y2"), ("failures", "y"), ("actions", "y"),
                        ("calls", "y"), ("latency_hist", "y")):
        labels = ticks(chart, axis)
        assert labels, (chart, axis)
        assert len(labels) == len(set(labels)), (chart, labels)  # no "0 0 0 1 1"
        assert all("." not in label for label in labels), (chart, labels)
    page.screenshot(path=str(SHOTS / f"free-run-{width}.png"), full_page=True)
    page.close()
    assert errors == []


# -- monitors and studies -------------------------------------------------------------


def test_an_empty_sample_is_no_samples(tmp_path: Path) -> None:
    target = tmp_path / "monitors.json"
    target.write_text(json.dumps({"format": "simulacra.monitors.v1", "series": {},
                                  "samples": {"wait": [], "service": [1.0, 2.0, 2.5]}}))
    charts = _charts.monitor_charts(_data.load_monitors(target))
    empty = _charts.figure_spec(charts["samples:wait"])["layout"]
    assert empty["title"]["text"] == "wait: histogram (no samples)"
    assert "mean 0" not in empty["title"]["text"]
    full = _charts.figure_spec(charts["samples:service"])["layout"]
    assert full["title"]["text"] == "service: histogram of 3 samples (mean 1.833)"
    assert full["yaxis"]["dtick"] == 1


@pytest.mark.parametrize("width", [1280, 800])
def test_the_empty_sample_and_a_single_intervention_in_the_browser(
        browser: Any, tmp_path: Path, scenario_study: Path, width: int) -> None:
    SHOTS.mkdir(exist_ok=True)
    target = tmp_path / "monitors.json"
    target.write_text(json.dumps({"format": "simulacra.monitors.v1", "series": {},
                                  "samples": {"wait": [], "service": [1.0, 2.0, 2.5]}}))
    errors: list[str] = []
    page = _open(browser, report.build_report(target).as_uri(), width, errors)
    page.wait_for_selector("[data-chart='samples:wait'] .main-svg")
    assert "no samples" in page.text_content("[data-chart='samples:wait'] .gtitle")
    page.screenshot(path=str(SHOTS / f"monitors-empty-{width}.png"), full_page=True)
    page.goto(report.build_report(scenario_study, tmp_path / "study.html").as_uri())
    page.wait_for_selector(".scenario-ids")
    text = page.inner_text(".scenario-ids")
    assert "1 intervention on demand" in text
    assert "1 interventions" not in text
    page.screenshot(path=str(SHOTS / f"study-scenarios-{width}.png"), full_page=True)
    page.close()
    assert errors == []
