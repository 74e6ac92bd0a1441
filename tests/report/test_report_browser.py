"""The report in a real browser (headless Chromium under Playwright, from file://).

Every page loads without a console error and without a request to anything but
the file itself; every chart has drawn data; the log browser filters by agent,
kind, step and text and pages; an agent's page shows that agent's events; the
threads, the study and the monitor pages draw. A screenshot of each page is
saved under the test's tmp directory (``screenshots/``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simulacra import report

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for every page's screenshot (printed with -s)."""
    folder = tmp_path_factory.mktemp("screenshots")
    print(f"\nscreenshots of the report: {folder}")
    return folder


def settle(page: Any) -> None:
    """Wait for the report's page to settle (its own signal, never a fixed delay)."""
    page.wait_for_function("() => window.__reportSettled && window.__reportSettled()",
                           timeout=60_000)


class Loaded:
    """A report open in a page, with everything the page said and asked for."""

    def __init__(self, page: Any, errors: list[str], requests: list[str]) -> None:
        self.page, self.errors, self.requests = page, errors, requests

    def go(self, route: str) -> None:
        self.page.evaluate("route => { location.hash = route; }", route)
        settle(self.page)

    def shot(self, folder: Path, name: str) -> None:
        self.page.screenshot(path=str(folder / f"{name}.png"), full_page=True)

    def rows(self, where: str = "#page-log table.events tbody tr[data-row]") -> list[list[str]]:
        return [[cell.inner_text() for cell in row.query_selector_all("td")]
                for row in self.page.query_selector_all(where)]

    def check_clean(self) -> None:
        assert self.errors == []
        assert [r for r in self.requests if not r.startswith(("file:", "data:", "blob:"))] == []


@pytest.fixture
def open_report(browser: Any) -> Iterator[Any]:
    pages: list[Any] = []

    def load(path: Path) -> Loaded:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        pages.append(page)
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(f"{m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready]", timeout=60_000)
        return Loaded(page, errors, requests)

    yield load
    for page in pages:
        page.close()


def _charts_drawn(page: Any, scope: str) -> list[dict[str, Any]]:
    """Each chart div of *scope*: its id, its traces and how many points they hold."""
    result: list[dict[str, Any]] = page.evaluate(
        """scope => Array.from(document.querySelectorAll(scope + ' div.chart')).map(div => ({
            id: div.getAttribute('data-chart'),
            traces: (div.data || []).length,
            points: (div.data || []).reduce((n, t) => n + ((t.y || t.x || []).length), 0),
            svg: div.querySelectorAll('.main-svg').length}))""", scope)
    return result


def test_the_run_report_draws_every_chart_and_asks_for_nothing(
        open_report: Any, round_run: Path, screenshots: Path) -> None:
    loaded = open_report(report.build_report(round_run))

    charts = _charts_drawn(loaded.page, "#page-overview")
    assert [c["id"] for c in charts] == ["actions", "calls", "tokens", "cost", "failures",
                                         "latency_hist", "latency_pct", "latency", "probes"]
    assert all(c["traces"] and c["points"] and c["svg"] for c in charts), charts
    text = loaded.page.inner_text("#page-overview")
    assert "config sha256" in text
    assert "cost" in text
    assert "InvalidAction" in text  # the failed turns, with the first of each kind
    loaded.shot(screenshots, "run-overview")
    loaded.check_clean()


def test_the_event_engine_report_draws_queue_depth_and_calls_in_flight(
        open_report: Any, event_run: Path, screenshots: Path) -> None:
    loaded = open_report(report.build_report(event_run))

    charts = {c["id"]: c for c in _charts_drawn(loaded.page, "#page-overview")}
    assert charts["queue"]["traces"] == 3
    assert all(c["points"] for c in charts.values())
    assert "Per window of virtual time" in loaded.page.inner_text("#page-overview")
    loaded.shot(screenshots, "events-overview")
    loaded.check_clean()


def test_the_log_browser_filters_by_agent_kind_step_and_text(
        open_report: Any, round_run: Path, screenshots: Path) -> None:
    run = report.load_society_run(round_run)
    events = run.events
    loaded = open_report(report.build_report(round_run))
    page = loaded.page
    agent = max(sorted({e["agent"] for e in events}),
                key=lambda a: sum(e["agent"] == a for e in events))

    loaded.go("#/log")
    assert page.inner_text("#page-log p.note") == f"{len(events)} of {len(events)} events match"
    assert len(loaded.rows()) == min(100, len(events))

    page.fill("#page-log input[name=agent]", agent)
    settle(page)
    own = [e for e in events if e["agent"] == agent]
    rows = loaded.rows()
    assert len(rows) == len(own)
    assert {r[3] for r in rows} == {f"@{agent}"}
    assert [int(r[0]) for r in rows] == [e["i"] for e in own]
    assert f"agent={agent}" in page.evaluate("location.hash")
    loaded.shot(screenshots, "log-agent")

    page.check("#page-log input[name=inv]")
    settle(page)
    involving = report.event_page(events, agent=agent, concerning=True, limit=10**6).total
    assert page.inner_text("#page-log p.note").startswith(f"{involving} of")

    page.click("#page-log button[type=reset]")
    settle(page)
    page.select_option("#page-log select[name=kind]", "reply")
    page.fill("#page-log input[name=s0]", "1")
    page.fill("#page-log input[name=s1]", "2")
    settle(page)
    replies = [e for e in events if e["kind"] == "reply" and 1 <= e["step"] <= 2]
    assert page.inner_text("#page-log p.note").startswith(f"{len(replies)} of")
    assert {r[4] for r in loaded.rows()} == {"reply"}
    assert {int(r[1]) for r in loaded.rows()} <= {1, 2}

    page.click("#page-log button[type=reset]")
    word = "patience"
    page.fill("#page-log input[name=q]", word.upper())
    settle(page)
    found = report.event_page(events, text=word, limit=10**6)
    rows = loaded.rows()
    assert found.total > 0
    assert page.inner_text("#page-log p.note").startswith(f"{found.total} of")
    assert all(word in r[5].lower() for r in rows)
    loaded.shot(screenshots, "log-search")

    page.click("#page-log button[type=reset]")
    settle(page)
    page.fill("#page-log input[name=agent]", "nobody-of-that-name")
    settle(page)
    assert page.inner_text("#page-log p.note") == "no agent @nobody-of-that-name"
    loaded.check_clean()


def test_the_log_browser_pages(open_report: Any, tmp_path_factory: pytest.TempPathFactory,
                               society_run_maker: Any) -> None:
    big = society_run_maker(tmp_path_factory.mktemp("report") / "paged", agents=40, steps=4,
                           failures=False)
    events = report.load_society_run(big).events
    loaded = open_report(report.build_report(big))
    loaded.go("#/log")
    page = loaded.page

    assert len(events) > 100
    assert page.is_disabled("#page-log .pager button.prev")
    page.click("#page-log .pager button.next")
    assert [int(r[0]) for r in loaded.rows()] == [e["i"] for e in events[100:200]]
    assert "p=1" in page.evaluate("location.hash")
    assert page.inner_text("#page-log .pager .info").startswith(
        f"101\u2013{min(200, len(events))} of {len(events)} events")
    page.click("#page-log .pager button.prev")
    assert int(loaded.rows()[0][0]) == events[0]["i"]
    loaded.go("#/log?p=1")
    loaded.go("#/threads")
    loaded.page.go_back()
    settle(loaded.page)
    assert int(loaded.rows()[0][0]) == events[100]["i"]  # the link kept the page
    loaded.check_clean()


def test_a_link_to_the_log_opens_it_filtered(open_report: Any, round_run: Path) -> None:
    loaded = open_report(report.build_report(round_run))
    loaded.go("#/log?kind=like")

    assert loaded.page.input_value("#page-log select[name=kind]") == "like"
    assert {r[4] for r in loaded.rows()} == {"like"}
    loaded.check_clean()


def test_an_agent_page_shows_what_it_did_saw_and_asked(
        open_report: Any, round_run: Path, screenshots: Path) -> None:
    run = report.load_society_run(round_run)
    row = max(report.agent_rows(run), key=lambda r: (r.concerning, r.agent))
    loaded = open_report(report.build_report(round_run))
    page = loaded.page

    loaded.go("#/agents")
    page.fill("#page-agents input[name=q]", row.agent)
    settle(page)
    page.click(f"#page-agents a[href='#/agent/{row.agent}']")
    settle(page)
    assert page.evaluate("location.hash") == f"#/agent/{row.agent}"
    assert page.inner_text("#page-agent h2") == f"@{row.agent}"

    tables = page.query_selector_all("#page-agent table.events")
    own = [[c.inner_text() for c in tr.query_selector_all("td")]
           for tr in tables[0].query_selector_all("tbody tr[data-row]")]
    assert [int(r[0]) for r in own] == [e["i"] for e in run.events
                                        if e["agent"] == row.agent][:100]
    assert {r[3] for r in own} == {f"@{row.agent}"}
    concerning = tables[1].query_selector_all("tbody tr[data-row]")
    assert len(concerning) == min(100, row.concerning)
    [chart] = _charts_drawn(page, "#page-agent")
    assert chart["points"]
    turns = page.query_selector_all("#page-agent table.turns tbody tr.turn")
    assert len(turns) == min(10, len({e["step"] for e in run.events if e["agent"] == row.agent}))
    saw = page.query_selector_all("#page-agent table.turns pre.saw")
    assert len(saw) == min(10, row.calls)
    assert f"You are @{row.agent}" in saw[0].inner_text()
    assert "FEED:" in saw[-1].inner_text()
    calls = page.query_selector_all("#page-agent .calls tbody tr.call")
    assert len(calls) == min(20, row.calls)
    loaded.shot(screenshots, "agent")
    loaded.go("#/agents")
    loaded.shot(screenshots, "agents")
    loaded.go("#/agent/nobody")
    assert page.inner_text("#page-agent h2") == "No agent @nobody"
    loaded.check_clean()


def test_an_agent_whose_replies_are_not_embedded_still_shows_what_it_saw(
        open_report: Any, round_run: Path, tmp_path: Path) -> None:
    loaded = open_report(report.build_report(round_run, tmp_path / "r.html", llm_calls=0))
    agent = report.agent_rows(report.load_society_run(round_run))[0].agent
    loaded.go(f"#/agent/{agent}")

    text = loaded.page.inner_text("#page-agent")
    assert "simulacra report --llm-calls N embeds more" in text
    assert loaded.page.query_selector_all("#page-agent table.turns pre.saw")
    loaded.check_clean()


def test_a_run_without_a_call_log_shows_the_embedded_prompts(
        open_report: Any, round_run: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(round_run, old)
    (old / "calls.jsonl").unlink()  # a run directory of a simulacra before calls.jsonl
    row = max(report.agent_rows(report.load_society_run(old)), key=lambda r: (r.calls, r.agent))
    loaded = open_report(report.build_report(old))
    charts = [c["id"] for c in _charts_drawn(loaded.page, "#page-overview")]
    assert "latency_hist" not in charts
    assert "latency" in charts
    assert "no calls.jsonl" in loaded.page.inner_text("#page-overview")
    loaded.go(f"#/agent/{row.agent}")
    saw = loaded.page.query_selector_all("#page-agent details.saw")
    assert len(saw) == row.calls
    assert "FEED:" in loaded.page.inner_text("#page-agent details.saw[open] pre")
    loaded.check_clean()


def test_the_threads_page_draws_the_longest_chain_first(
        open_report: Any, round_run: Path, screenshots: Path) -> None:
    run = report.load_society_run(round_run)
    threads = report.conversation_threads(run.events)
    loaded = open_report(report.build_report(round_run))
    loaded.go("#/threads")

    shown = loaded.page.query_selector_all("#page-threads .thread")
    assert len(shown) == min(25, len(threads))
    head = shown[0].query_selector(".head").inner_text()
    assert f"{len(threads[0].events)} messages, longest chain {threads[0].longest}" in head
    assert len(shown[0].query_selector_all(".msg")) == len(threads[0].events)
    loaded.shot(screenshots, "threads")
    loaded.check_clean()


def test_the_study_report_draws_every_kpi_against_every_parameter(
        open_report: Any, study_dir: Path, screenshots: Path) -> None:
    loaded = open_report(report.build_report(study_dir))

    charts = _charts_drawn(loaded.page, "#page-overview")
    assert len(charts) == 6
    assert all(c["traces"] == 2 and c["points"] == 4 for c in charts), charts
    loaded.shot(screenshots, "study")
    loaded.go("#/summary")
    assert len(loaded.page.query_selector_all("#page-summary tbody tr")) == 12
    loaded.shot(screenshots, "study-summary")
    loaded.go("#/replications")
    assert len(loaded.page.query_selector_all("#page-replications tbody tr")) == 16
    loaded.page.fill("#page-replications input[name=q]", "true")
    settle(loaded.page)
    crowded = [[c.inner_text() for c in tr.query_selector_all("td")] for tr in
               loaded.page.query_selector_all("#page-replications tbody tr")]
    expected = sum(r["kpis"]["crowded"] for r in report.load_study(study_dir).results)
    assert 0 < expected < 16
    assert len(crowded) == expected
    assert all(row[-1] == "true" for row in crowded)
    loaded.shot(screenshots, "study-replications")
    loaded.check_clean()


def test_the_monitor_report_draws_the_series_and_the_histogram(
        open_report: Any, monitors_file: Path, screenshots: Path) -> None:
    loaded = open_report(report.build_report(monitors_file))

    charts = _charts_drawn(loaded.page, "#page-overview")
    assert [c["id"] for c in charts] == ["series:desk queue", "series:desk utilisation",
                                         "samples:waiting time"]
    assert all(c["points"] for c in charts)
    assert "time-weighted mean" in loaded.page.inner_text("#page-overview")
    loaded.shot(screenshots, "monitors")
    loaded.check_clean()
