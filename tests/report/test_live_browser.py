"""The live view in a real browser (headless Chromium under Playwright).

The page of ``simulacra run --view`` loads without a console error, draws every chart
with data, and its buttons do what they say: after pause the step counter stops where the
run waits; step advances it by exactly one; play goes on; stop ends the run resumable
(exit 130, and ``simulacra run --resume`` finishes it with the uninterrupted digest). The
page of ``simulacra view RUN_DIR`` replays a finished run: its slider moves through the
events. Screenshots of both pages are written under pytest's tmp dir.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import simulacra

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _live_helpers import ViewedRun, run_args, simulacra_cli  # noqa: E402

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

PRICES = ("sim.llm.pricing.prompt_per_mtok=3", "sim.llm.pricing.completion_per_mtok=15")


def _page(browser: Any, errors: list[str]) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: None if _closed_stream(r) else errors.append(
        f"request failed: {r.url} ({r.failure})"))
    return page


def _closed_stream(request: Any) -> bool:
    """The page closes its event stream itself when the run has ended (the request aborts)."""
    return "/stream?" in request.url and "ERR_ABORTED" in str(request.failure)


def _state(page: Any) -> str:
    return str(page.eval_on_selector("#state", "e => e.dataset.state"))


def _counter(page: Any) -> int:
    return int(page.inner_text("#step"))


def _wait_paused_at(page: Any, step: int) -> None:
    page.wait_for_function(
        "s => document.getElementById('state').textContent === 'paused at step ' + s", arg=step,
        timeout=60_000)
    assert _counter(page) == step


def _charts_with_data(page: Any) -> dict[str, int]:
    """Each chart's id and how many points its traces hold (as Plotly drew them)."""
    return dict(page.evaluate("""() => Object.fromEntries(
        [...document.querySelectorAll('.chart')].map(div => [div.dataset.chart,
            (div.data || []).reduce((n, t) => n + ((t.y || t.x || []).length), 0)]))"""))


def _latency_drawn(page: Any) -> dict[str, Any]:
    """The model calls the latency histogram counts, and the points of the percentiles chart."""
    return dict(page.evaluate("""() => {
        const hist = document.getElementById('chart-latency_hist');
        const pct = document.getElementById('chart-latency_pct');
        const sum = (t) => (t.y || []).reduce((n, v) => n + (v || 0), 0);
        return {calls: hist && hist.data ? sum(hist.data[0]) : 0,
                title: hist && hist.layout ? hist.layout.title.text : '',
                bars: hist ? hist.querySelectorAll('.trace.bars .point').length : 0,
                median: pct && pct.data ? pct.data[0].y.filter(v => v !== null).length : 0};
    }"""))


def _assert_every_chart_drawn(page: Any, calls: int | None = None) -> None:
    """Every chart of the report drawn with data; the latency histogram counts *calls*."""
    charts = _charts_with_data(page)
    assert set(charts) >= {"actions", "calls", "tokens", "cost", "failures", "latency",
                           "latency_hist", "latency_pct"}
    # In the report's order: the latency distribution and its percentiles before the rest.
    order = list(charts)
    assert order.index("failures") < order.index("latency_hist") < order.index("latency_pct") \
        < order.index("latency"), order
    drawn = _latency_drawn(page)
    assert drawn["bars"] > 0, drawn
    assert drawn["median"] > 0, drawn
    if calls is not None:  # the title counts them all; the bars leave out a long tail's 0.5%
        assert f"{calls:,} calls" in drawn["title"], drawn
        assert calls * 0.99 <= drawn["calls"] <= calls, drawn
    assert all(points > 0 for points in charts.values()), charts
    # Drawn, not only given: each has plotly's SVG with its traces.
    drawn = page.evaluate("""() => [...document.querySelectorAll('.chart')].every(
        div => div.querySelector('.main-svg') && div.querySelectorAll('.trace').length > 0)""")
    assert drawn


def test_the_live_page_controls_the_run(browser: Any, tmp_path: Path) -> None:
    # Steps enough that the run cannot finish before the page's pause lands (a step of
    # ten scripted agents takes about a millisecond now).
    agents, steps = 10, 2000
    straight = tmp_path / "straight"
    done = simulacra_cli(*run_args(straight, "round", agents, steps, *PRICES))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "viewed"
    run = ViewedRun(run_args(out, "round", agents, steps, *PRICES, "--view", "--paused"))
    errors: list[str] = []
    try:
        page = _page(browser, errors)
        page.goto(run.url)
        _wait_paused_at(page, 0)
        assert page.inner_text("#steps-total") == f" / {steps}"

        page.click("#step-once")
        _wait_paused_at(page, 1)
        page.click("#step-once")
        _wait_paused_at(page, 2)  # one step each, exactly
        assert len((out / "telemetry.jsonl").read_text().splitlines()) == 2

        page.click("#play")
        page.wait_for_function("() => Number(document.getElementById('step').textContent) >= 5",
                               timeout=60_000)
        page.click("#pause")
        page.wait_for_function(
            "() => document.getElementById('state').textContent.startsWith('paused at step')",
            timeout=60_000)
        at = _counter(page)
        assert 5 <= at < steps
        assert page.text_content("#state") == f"paused at step {at}"
        # Paused: the counter stays where the run waits, whatever the page is sent.
        page.wait_for_timeout(1500)
        assert _counter(page) == at
        assert len((out / "telemetry.jsonl").read_text().splitlines()) == at
        page.click("#step-once")
        _wait_paused_at(page, at + 1)

        _assert_every_chart_drawn(page, calls=agents * (at + 1))
        assert float(page.inner_text("#calls")) == agents * (at + 1)
        telemetry = [json.loads(line) for line in
                     (out / "telemetry.jsonl").read_text().splitlines()]
        assert float(page.inner_text("#cost")) == pytest.approx(
            sum(t["cost"] for t in telemetry), rel=1e-3)
        assert float(page.inner_text("#cost")) > 0
        rows = page.locator("#events tr").count()
        assert rows > 0
        page.screenshot(path=str(tmp_path / "live.png"), full_page=True)

        page.click("#stop")
        page.wait_for_function("() => document.getElementById('state').dataset.state === 'ended'",
                               timeout=60_000)
        assert "--resume" in page.inner_text("#message")
        code, _, err = run.finish()
        page.close()
    finally:
        run.kill()
    assert code == 130, err
    assert errors == []
    assert f"simulacra run --resume {out}" in err
    resumed = simulacra_cli("run", "--resume", str(out), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "digest.txt").read_text() == (straight / "digest.txt").read_text()
    assert (out / "action_events.jsonl").read_bytes() == \
        (straight / "action_events.jsonl").read_bytes()


def test_the_live_page_of_the_event_driven_engine_draws_its_queue(browser: Any,
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "events"
    run = ViewedRun(run_args(out, "async_event", 10, 6, "--view", "--paused"))
    errors: list[str] = []
    try:
        page = _page(browser, errors)
        page.goto(run.url)
        _wait_paused_at(page, 0)
        for step in (1, 2, 3):
            page.click("#step-once")
            _wait_paused_at(page, step)
        charts = _charts_with_data(page)
        assert "queue" in charts
        _assert_every_chart_drawn(page)
        page.click("#play")
        page.wait_for_function("() => document.getElementById('state').dataset.state === 'ended'",
                               timeout=60_000)
        assert page.inner_text("#message").startswith("finished: digest ")
        assert _counter(page) == 6
        code, _, err = run.finish()
        page.close()
    finally:
        run.kill()
    assert code == 0, err
    assert errors == []


def test_the_view_of_a_finished_run_replays_it_with_a_slider(browser: Any, round_run: Path,
                                                              tmp_path: Path) -> None:
    events = [json.loads(line) for line in
              (round_run / "action_events.jsonl").read_text().splitlines()]
    errors: list[str] = []
    with simulacra.LiveView(round_run, process=False) as view:
        page = _page(browser, errors)
        page.goto(view.url)
        page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=60_000)
        assert page.is_visible("#slider")
        assert not page.is_visible("#stop")
        assert page.text_content("#state") == "finished"
        assert page.inner_text("#position") == f"{len(events)} / {len(events)}"
        calls = [json.loads(line) for line in
                 (round_run / "calls.jsonl").read_text().splitlines()]
        returned = [c for c in calls if c["ok"]]
        _assert_every_chart_drawn(page, calls=len(returned))

        for position in (0, 7, len(events) // 2, len(events)):
            page.locator("#slider").fill(str(position))
            page.wait_for_function(
                "p => document.getElementById('position').textContent.startsWith(p + ' /')",
                arg=position, timeout=30_000)
            assert page.inner_text("#events-count") == str(position)
            # The latency histogram of the calls up to the slider's step.
            upto = events[position - 1]["step"] if position else -1
            # (none before the first step: the chart is not there, as in a report without calls)
            page.wait_for_function(
                "n => { const d = document.getElementById('chart-latency_hist'); "
                "if (n === 0) return !d; "
                "return !!d && !!d.data && d.data[0].y.reduce((a, v) => a + v, 0) === n; }",
                arg=sum(1 for c in returned if c["step"] <= upto), timeout=30_000)
            shown = page.locator("#events tr").count()
            assert shown == min(position, 50)
            if position:
                newest = page.inner_text("#events tr:first-child td:first-child")
                assert int(newest) == events[position - 1]["i"]
                assert _counter(page) == events[position - 1]["step"] + 1
            else:
                assert _counter(page) == 0
        page.locator("#slider").fill("0")
        page.wait_for_function(
            "() => document.getElementById('position').textContent.startsWith('0 /')")
        page.click("#step-once")  # to the end of the first step
        first_step = sum(1 for e in events if e["step"] == events[0]["step"])
        page.wait_for_function(
            "p => document.getElementById('position').textContent.startsWith(p + ' /')",
            arg=first_step, timeout=30_000)
        assert _counter(page) == 1
        page.click("#play")
        page.wait_for_function(
            "n => document.getElementById('position').textContent.startsWith(n + ' /')",
            arg=len(events), timeout=60_000)
        page.screenshot(path=str(tmp_path / "view.png"), full_page=True)
        page.close()
    assert errors == []
