"""The "By endpoint" table in a real browser (headless Chromium under Playwright).

The report of a run whose ``calls.jsonl`` names endpoints shows on its
overview one row per endpoint with the numbers its lines add up to; the live
view of the same run directory shows the table too, and its replay slider
moves it (no call yet: no table). A run without endpoints shows no table in
either. No console error, no request. Screenshots go to ``/tmp/report-shots``.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

import simulacra
from simulacra import report

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

SHOTS = Path("/tmp/report-shots")  # noqa: S108  (where the other browser tests put theirs)
NUMBERS = ("calls", "failed", "fallback in", "fallback out", "prompt tokens",
           "completion tokens")
UNITS = {"s": 1.0, "ms": 1e-3, "\N{MICRO SIGN}s": 1e-6}


def _lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]


def _expected(lines: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name in sorted({c["endpoint"] for c in lines}):
        mine = [c for c in lines if c["endpoint"] == name]
        latency = [c["latency_s"] for c in mine if c["ok"]]
        out[name] = {"calls": len(mine), "failed": sum(not c["ok"] for c in mine),
                     "fallback in": sum("fallback_from" in c for c in mine),
                     "fallback out": sum(c.get("fallback_from") == name for c in lines),
                     "prompt tokens": sum(c["prompt_tokens"] for c in mine),
                     "completion tokens": sum(c["completion_tokens"] for c in mine),
                     "cost": math.fsum(c["cost"] for c in mine),
                     "latency mean": sum(latency) / len(latency)}
    return out


def _table(page: Any, selector: str) -> dict[str, dict[str, str]]:
    """The table's rows as shown: endpoint -> column -> cell text."""
    found: dict[str, dict[str, str]] = page.evaluate("""sel => {
        const table = document.querySelector(sel);
        if (!table) return null;
        const cols = [...table.querySelectorAll('thead th')].map(th => th.textContent);
        return Object.fromEntries([...table.querySelectorAll('tbody tr')].map(tr => [
            tr.dataset.endpoint, Object.fromEntries([...tr.children].map(
                (td, i) => [cols[i], td.textContent]))])); }""", selector)
    return found


def _check(shown: dict[str, dict[str, str]], lines: list[dict[str, Any]]) -> None:
    expected = _expected(lines)
    assert list(shown) == list(expected)
    for name, numbers in expected.items():
        for column in NUMBERS:
            assert int(shown[name][column].replace(",", "")) == numbers[column], (name, column)
        assert float(shown[name]["cost"]) == pytest.approx(numbers["cost"], rel=1e-3)
        value, unit = shown[name]["latency mean"].split()  # to 3 significant digits
        assert float(value) * UNITS[unit] == pytest.approx(numbers["latency mean"], rel=1e-2)


def _page(browser: Any, errors: list[str], width: int = 1280) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.on("console", lambda m: errors.append(f"{m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    return page


@pytest.mark.parametrize("width", [1280, 800])
def test_the_report_shows_the_calls_by_endpoint(browser: Any, endpoint_run: Path,
                                                tmp_path: Path, width: int) -> None:
    errors: list[str] = []
    requests: list[str] = []
    page = _page(browser, errors, width)
    page.on("request", lambda r: requests.append(r.url)
            if not r.url.startswith(("file:", "data:", "blob:")) else None)
    page.goto(report.build_report(endpoint_run, tmp_path / "report.html").as_uri())
    page.wait_for_selector("body[data-ready]", timeout=60_000)
    card = page.query_selector("#page-overview .card.endpoints")
    assert card is not None
    assert card.query_selector("h3").inner_text() == "By endpoint"
    shown = _table(page, "#page-overview table.endpoints")
    _check(shown, _lines(endpoint_run))
    assert shown["local"]["provider / model"] == "openai / llama-3.1-8b"
    assert "wall clock" in card.inner_text()
    # The table fits its card (it scrolls inside it on a narrow page, never past the page).
    assert page.evaluate("""() => {
        const card = document.querySelector('#page-overview .card.endpoints');
        return card.getBoundingClientRect().right <= document.documentElement.clientWidth + 1;
    }""")
    SHOTS.mkdir(parents=True, exist_ok=True)
    card.screenshot(path=str(SHOTS / f"endpoints-{width}.png"))
    page.screenshot(path=str(SHOTS / f"endpoints-overview-{width}.png"))
    page.close()
    assert errors == []
    assert requests == []


def test_a_report_without_endpoints_has_no_table(browser: Any, flaky_run: Path,
                                                 tmp_path: Path) -> None:
    errors: list[str] = []
    page = _page(browser, errors)
    page.goto(report.build_report(flaky_run, tmp_path / "report.html").as_uri())
    page.wait_for_selector("body[data-ready]", timeout=60_000)
    page.wait_for_selector("#page-overview table.failed-calls")
    assert page.query_selector("#page-overview .card.endpoints") is None
    page.close()
    assert errors == []


def test_the_live_view_shows_the_calls_by_endpoint_and_its_slider_moves_them(
        browser: Any, endpoint_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(endpoint_run, run)
    lines = _lines(run)
    events = [json.loads(line) for line in (run / "action_events.jsonl").read_text().splitlines()]
    errors: list[str] = []
    with simulacra.LiveView(run, process=False) as view:
        page = _page(browser, errors, 1400)
        page.goto(view.url)
        page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=60_000)
        page.wait_for_selector("#endpoints-card table.endpoints tbody tr", timeout=30_000)
        assert page.inner_text("#endpoints-card h2") == "By endpoint"
        _check(_table(page, "#endpoints-card table.endpoints"), lines)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "endpoints-live.png"), full_page=True)

        page.locator("#slider").fill("0")  # no call yet: no table
        page.wait_for_function("() => !document.getElementById('endpoints-card')",
                               timeout=30_000)
        first_step = sum(1 for e in events if e["step"] == events[0]["step"])
        page.locator("#slider").fill(str(first_step))  # the calls of the first step
        page.wait_for_function(
            "p => document.getElementById('position').textContent.startsWith(p + ' /') && "
            "!!document.getElementById('endpoints-card')", arg=first_step, timeout=30_000)
        _check(_table(page, "#endpoints-card table.endpoints"),
               [c for c in lines if c["step"] == events[0]["step"]])
        page.close()
    assert errors == []


def test_the_live_view_of_a_run_without_endpoints_has_no_table(browser: Any,
                                                                flaky_run: Path) -> None:
    errors: list[str] = []
    with simulacra.LiveView(flaky_run, process=False) as view:
        page = _page(browser, errors, 1400)
        page.goto(view.url)
        page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=60_000)
        page.wait_for_selector("#chart-latency_hist .main-svg", timeout=30_000)
        assert page.query_selector("#endpoints-card") is None
        page.close()
    assert errors == []
