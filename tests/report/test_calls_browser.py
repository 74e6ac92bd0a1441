"""The report of ``calls.jsonl`` in a real browser: latency, failed calls, what each agent saw.

A run in which some model calls failed (timeouts, HTTP 429) draws the latency
histogram and its percentiles per step with data; the overview lists the
failed calls by error type; an agent's page counts its failures by kind,
lists them among its calls (filterable), and shows every turn with what it
saw (its prompt) and what it did (its events). Both engines, no console
error, no request. Screenshots at 1280x800 and at 800 px wide go to
``/tmp/report-shots`` (and the test's tmp directory).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simulacra import report

pytestmark = pytest.mark.slow

SHOTS = Path("/tmp/report-shots")  # noqa: S108  (where the brief looks for them)


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    pages: list[Any] = []

    def load(path: Path, width: int = 1280, height: int = 800) -> tuple[Any, list[str]]:
        page = browser.new_page(viewport={"width": width, "height": height})
        pages.append(page)
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(f"{m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.on("request", lambda r: requests.append(r.url)
                if not r.url.startswith(("file:", "data:", "blob:")) else None)
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready]", timeout=60_000)
        errors_and_requests = errors
        page.set_default_timeout(20_000)
        page._simulacra_requests = requests  # checked at the end
        return page, errors_and_requests

    yield load
    for page in pages:
        page.close()


def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _chart(page: Any, chart: str) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate("""id => {
        const div = document.querySelector(`#page-overview div.chart[data-chart='${id}']`);
        if (!div) return null;
        return {drawn: div.getAttribute('data-drawn'), title: div.layout.title.text,
                traces: (div.data || []).map(t => ({name: t.name,
                  points: (t.y || []).filter(v => v !== null).length,
                  total: (t.y || []).reduce((a, v) => a + (v || 0), 0)}))}; }""", chart)
    return result


def _overlaps(page: Any, selector: str) -> list[str]:
    """Pairs of visible boxes under *selector* that overlap, and boxes wider than the page."""
    found: list[str] = page.evaluate("""sel => {
        const boxes = Array.from(document.querySelectorAll(sel)).filter(
            e => e.offsetParent !== null).map(e => [e, e.getBoundingClientRect()]);
        const out = [];
        const width = document.documentElement.clientWidth;
        for (const [e, r] of boxes) if (r.right > width + 1) out.push('wider: ' + e.className);
        for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
            const a = boxes[i][1], b = boxes[j][1];
            if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 &&
                b.top < a.bottom - 1) {
                out.push(boxes[i][0].className + ' / ' + boxes[j][0].className);
            }
        }
        return out; }""", selector)
    return found


@pytest.mark.parametrize("width", [1280, 800])
def test_the_latency_histogram_and_failed_calls_are_drawn(
        open_page: Any, flaky_run: Path, width: int) -> None:
    calls = [json.loads(line) for line in (flaky_run / "calls.jsonl").read_text().splitlines()]
    page, errors = open_page(report.build_report(flaky_run), width=width)

    histogram = _chart(page, "latency_hist")
    assert histogram["drawn"]
    assert "wall clock" in histogram["title"]
    [bars] = histogram["traces"]
    ok = sum(c["ok"] for c in calls)
    assert bars["total"] == ok  # every call that returned is in a bin (none past the last)
    percentiles = _chart(page, "latency_pct")
    by_name = {t["name"]: t for t in percentiles["traces"]}
    assert by_name["median"]["points"] == len({c["step"] for c in calls})
    assert by_name["failed calls"]["total"] == sum(not c["ok"] for c in calls)

    table = page.inner_text("#page-overview table.failed-calls")
    for error in ("ProviderTimeout", "RateLimited"):
        assert error in table
    assert _overlaps(page, "#page-overview .card, #page-overview div.chart") == []
    _shot(page, f"overview-calls-{width}")
    assert errors == []
    assert page._simulacra_requests == []


@pytest.mark.parametrize("width", [1280, 800])
def test_an_agent_page_shows_its_failures_and_what_it_saw(
        open_page: Any, flaky_run: Path, width: int) -> None:
    calls = [json.loads(line) for line in (flaky_run / "calls.jsonl").read_text().splitlines()]
    failed = [c for c in calls if not c["ok"]]
    agent = max(sorted({c["agent"] for c in failed}),
                key=lambda a: sum(c["agent"] == a for c in failed))
    mine = [c for c in calls if c["agent"] == agent]
    events = [e for e in report.load_society_run(flaky_run).events if e["agent"] == agent]
    page, errors = open_page(report.build_report(flaky_run), width=width)

    page.evaluate("location.hash = '#/agents?sort=failed'")
    page.wait_for_selector("#page-agents tbody tr")
    first = page.query_selector("#page-agents tbody tr td a").inner_text()
    assert first.lstrip("@") in {c["agent"] for c in failed}
    page.evaluate(f"location.hash = '#/agent/{agent}'")
    page.wait_for_selector("#page-agent table.turns tbody tr.turn")

    chips = [c.inner_text() for c in page.query_selector_all("#page-agent .agent-failures .chip")]
    kinds: dict[str, int] = {}
    for call in mine:
        if not call["ok"]:
            kinds[call["error"]] = kinds.get(call["error"], 0) + 1
    assert sorted(chips) == sorted(f"{k} \N{MULTIPLICATION SIGN} {n}" for k, n in kinds.items())

    turns = page.query_selector_all("#page-agent table.turns tbody tr.turn")
    assert len(turns) == len({c["turn"] for c in mine} | {e["step"] for e in events})
    for turn in turns:
        number = int(turn.get_attribute("data-turn"))
        saw = turn.query_selector("td.saw-cell").inner_text()
        did = turn.query_selector("td.did-cell").inner_text()
        assert f"You are @{agent}" in saw  # the observation, as its prompt put it
        made = [e for e in events if e["step"] == number]
        assert len(turn.query_selector_all("td.did-cell .did")) == len(made)
        call = next(c for c in mine if c["turn"] == number)
        if not call["ok"]:
            assert call["error"] in did
            assert "turn_failed" in did
    failed_turns = page.query_selector_all("#page-agent table.turns tr.turn.failed")
    assert len(failed_turns) == len({c["turn"] for c in mine if not c["ok"]})
    _shot(page, f"agent-turns-{width}")

    page.check("#page-agent .controls input[name=failed]")
    rows = page.query_selector_all("#page-agent .calls tbody tr.call")
    assert len(rows) == sum(not c["ok"] for c in mine)
    assert all("failed" in (r.get_attribute("class") or "") for r in rows)
    assert _overlaps(page, "#page-agent table.turns, #page-agent .calls table, "
                           "#page-agent .agent-failures") == []
    page.query_selector("#page-agent .calls").scroll_into_view_if_needed()
    _shot(page, f"agent-calls-{width}")
    assert errors == []
    assert page._simulacra_requests == []


def test_the_event_engine_histogram_is_of_simulated_latency(
        open_page: Any, flaky_event_run: Path) -> None:
    page, errors = open_page(report.build_report(flaky_event_run))
    histogram = _chart(page, "latency_hist")
    assert "simulated" in histogram["title"]
    assert histogram["traces"][0]["total"] > 0
    agent = page.evaluate("document.querySelector('#page-overview table.failed-calls a')"
                          ".textContent").lstrip("@")
    page.evaluate(f"location.hash = '#/agent/{agent}'")
    page.wait_for_selector("#page-agent table.turns tbody tr.turn")
    assert "t=" in page.inner_text("#page-agent table.turns tbody tr.turn td.num")
    _shot(page, "events-overview-calls")
    assert errors == []
