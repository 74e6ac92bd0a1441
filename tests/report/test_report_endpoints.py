"""Model calls by endpoint (issue 28): the report's and the live view's "By endpoint" table.

A run with ``sim.llm.endpoints`` names in each line of ``calls.jsonl`` the
endpoint that served (or failed) the call, and ``fallback_from`` for a call
its endpoint's fallback took over. The report and the live view split the
calls, failed calls, fallbacks, tokens, cost and latency by endpoint, from
those lines alone; a run whose lines name no endpoint gets no table, and its
report embeds what it did before. (The run directory is a scripted run whose
``calls.jsonl`` ``add_endpoints`` of conftest.py rewrites.)
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra import report
from simulacra.report import _build, _data

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from test_build import parse  # noqa: E402


def _lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    at = (len(ordered) - 1) * q
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _expected(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each endpoint's numbers, counted straight from the lines."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({c["endpoint"] for c in lines} | {c["fallback_from"] for c in lines
                                                          if "fallback_from" in c}):
        mine = [c for c in lines if c["endpoint"] == name]
        latency = [c["latency_s"] for c in mine if c["ok"]]
        out[name] = {
            "calls": len(mine), "failed": sum(not c["ok"] for c in mine),
            "fallback in": sum("fallback_from" in c for c in mine),
            "fallback out": sum(c.get("fallback_from") == name for c in lines),
            "prompt tokens": sum(c["prompt_tokens"] for c in mine),
            "completion tokens": sum(c["completion_tokens"] for c in mine),
            "cost": math.fsum(c["cost"] for c in mine),
            "latency mean": statistics.fmean(latency) if latency else None,
            "p50": _quantile(latency, 0.5) if latency else None,
            "p90": _quantile(latency, 0.9) if latency else None,
            "p99": _quantile(latency, 0.99) if latency else None,
        }
    return out


def _check_table(table: dict[str, Any], lines: list[dict[str, Any]]) -> None:
    """*table* (``{"cols", "rows"}``) has the numbers the lines add up to, one row each."""
    expected = _expected(lines)
    rows = {row[0]: dict(zip(table["cols"], row, strict=True)) for row in table["rows"]}
    assert list(rows) == sorted(expected)
    for name, numbers in expected.items():
        for column, value in numbers.items():
            assert rows[name][column] == (None if value is None else pytest.approx(value)), (
                name, column)
    assert sum(r["calls"] for r in rows.values()) == len(lines)
    assert sum(r["fallback in"] for r in rows.values()) == \
        sum(r["fallback out"] for r in rows.values())


def test_the_endpoint_run_has_what_the_table_splits(endpoint_run: Path) -> None:
    lines = _lines(endpoint_run)
    assert {c["endpoint"] for c in lines} == {"local", "hosted"}
    moved = [c for c in lines if "fallback_from" in c]
    assert [(c["endpoint"], c["fallback_from"], c["ok"]) for c in moved] == [
        ("hosted", "local", True), ("hosted", "local", False)]
    assert any(not c["ok"] and c["endpoint"] == "local" for c in lines)


def test_endpoint_rows_add_up_the_lines_of_each_endpoint(endpoint_run: Path) -> None:
    run = report.load_society_run(endpoint_run)
    lines = _lines(endpoint_run)
    rows = _data.endpoint_rows(run)
    assert [r.endpoint for r in rows] == ["hosted", "local"]
    _check_table(_data.endpoint_table(rows), lines)
    by_name = {r.endpoint: r for r in rows}
    assert by_name["local"].fallback_out == 2
    assert by_name["hosted"].fallback_in == 2
    # The provider and model come from summary.json's llm.endpoints.
    declared = run.summary["llm"]["endpoints"]
    for name, row in by_name.items():
        assert (row.provider, row.model) == (declared[name]["provider"],
                                             declared[name]["model"])
    # The lines alone (a run still going: no summary) give the same numbers, no provider.
    alone = _data.endpoint_rows(lines)
    assert [(r.endpoint, r.calls, r.failed, r.cost, r.latency) for r in alone] == \
        [(r.endpoint, r.calls, r.failed, r.cost, r.latency) for r in rows]
    assert all(r.provider is None and r.model is None for r in alone)
    assert "provider / model" not in _data.endpoint_table(alone)["cols"]
    # And the rows add up to what call_stats says of the run.
    stats = _data.call_stats(run)
    assert sum(r.failed for r in rows) == stats.failed
    assert sorted(v for r in rows for v in r.latency) == stats.latency


def test_a_run_without_endpoints_has_no_rows(flaky_run: Path) -> None:
    run = report.load_society_run(flaky_run)
    assert run.calls
    assert _data.endpoint_rows(run) == []
    assert "endpoints" not in _build.society_data(run, llm_calls=0)


def test_declared_endpoints_without_calls_and_lines_without_an_endpoint_get_rows() -> None:
    lines = [
        {"agent": "a0", "step": 0, "latency_s": 0.5, "prompt_tokens": 10,
         "completion_tokens": 2, "cost": 0.25, "ok": True, "endpoint": "local"},
        {"agent": "a1", "step": 0, "latency_s": 1.5, "prompt_tokens": 20,
         "completion_tokens": 4, "cost": 0.5, "ok": True, "endpoint": "local"},
        {"agent": "a2", "step": 1, "latency_s": None, "prompt_tokens": 0,
         "completion_tokens": 0, "cost": 0.0, "ok": False, "error": "ProviderTimeout",
         "endpoint": "hosted", "fallback_from": "local"},
        {"agent": "a3", "step": 1, "latency_s": 2.0, "prompt_tokens": 1,
         "completion_tokens": 1, "cost": 0.125, "ok": True},  # a line naming none
    ]
    tally = _data.EndpointTally()
    for line in lines:
        tally.add(line)
    rows = tally.rows({"local": {"provider": "openai", "model": "m"},
                       "spare": {"provider": "openai", "model": "s"}})
    table = _data.endpoint_table(rows)
    assert table["cols"][:2] == ["endpoint", "provider / model"]
    assert [r[:9] for r in table["rows"]] == [
        ["hosted", "", 1, 1, 1, 0, 0, 0, 0.0],
        ["local", "openai / m", 2, 0, 0, 1, 30, 6, 0.75],
        ["spare", "openai / s", 0, 0, 0, 0, 0, 0, 0.0],
        [_data.NO_ENDPOINT, "", 1, 0, 0, 0, 1, 1, 0.125],
    ]
    assert table["rows"][0][9:] == [None] * 4  # no call returned: no latency
    assert table["rows"][1][9:] == [1.0, 1.0, 1.4, 1.49]
    assert _data.EndpointTally().rows({"local": {}}) == []  # no line: no table
    without = _data.EndpointTally()
    without.add(lines[-1])
    assert not without
    assert without.rows() == []


def test_the_report_embeds_the_table_of_the_lines(endpoint_run: Path, tmp_path: Path) -> None:
    _, data = parse(report.build_report(endpoint_run, tmp_path / "report.html"))
    table = data["endpoints"]
    assert table["cols"] == list(_data.ENDPOINT_COLUMNS)
    _check_table(table, _lines(endpoint_run))
    assert [row[1] for row in table["rows"]] == ["openai / gpt-4o-mini", "openai / llama-3.1-8b"]


def test_a_report_without_endpoints_embeds_what_it_did_before(flaky_run: Path,
                                                              tmp_path: Path) -> None:
    _, data = parse(report.build_report(flaky_run, tmp_path / "report.html"))
    assert "endpoints" not in data
    assert set(data) == {
        "kind", "title", "identity", "totals", "world", "failures", "notes", "windowed",
        "steps", "template", "charts", "colors", "log", "threads", "agents", "call_failures",
        "pseudo", "call_log", "simulated", "llm", "agent_chunks"}


def test_the_event_engine_splits_the_simulated_latency(flaky_event_run: Path, tmp_path: Path,
                                                       endpoint_maker: Any) -> None:
    run = tmp_path / "events"
    shutil.copytree(flaky_event_run, run)
    endpoint_maker(run)
    lines = _lines(run)
    table = _data.endpoint_table(_data.endpoint_rows(report.load_society_run(run)))
    _check_table(table, lines)


# -- the live view -----------------------------------------------------------------------


def test_the_live_view_follows_the_calls_by_endpoint(endpoint_run: Path,
                                                     tmp_path: Path) -> None:
    from simulacra.report._live import _Hub, _NoLink

    run = tmp_path / "run"
    shutil.copytree(endpoint_run, run)
    raw = (endpoint_run / "calls.jsonl").read_bytes().splitlines(keepends=True)
    lines = [json.loads(line) for line in raw]
    half = len(raw) // 2
    (run / "calls.jsonl").write_bytes(b"".join(raw[:half]) + raw[half][:20])  # a line cut
    hub = _Hub(run, _NoLink(run), name="run", steps=None, replay=True)
    hub.refresh(force=True)
    _check_table(hub.snapshot(charts=False)["endpoints"], lines[:half])
    with (run / "calls.jsonl").open("ab") as stream:  # the rest, read from where it stopped
        stream.write(raw[half][20:] + b"".join(raw[half + 1:]))
    hub.refresh(force=True)
    whole = hub.snapshot(charts=False)["endpoints"]
    _check_table(whole, lines)
    assert whole["cols"] == [c for c in _data.ENDPOINT_COLUMNS if c != "provider / model"]
    # The slider: the calls of the steps up to its position's.
    events = [json.loads(line) for line in (run / "action_events.jsonl").read_text().splitlines()]
    first_step = sum(1 for e in events if e["step"] == 0)
    _check_table(hub.at(first_step)["endpoints"], [c for c in lines if c["step"] == 0])
    _check_table(hub.at(len(events))["endpoints"], lines)
    assert "endpoints" not in hub.at(0)  # no call yet: no table


def test_the_live_view_of_a_run_without_endpoints_has_no_table(flaky_run: Path) -> None:
    from simulacra.report._live import _Hub, _NoLink

    hub = _Hub(flaky_run, _NoLink(flaky_run), name="run", steps=None, replay=True)
    hub.refresh(force=True)
    assert hub.files.calls.lines > 0
    assert "endpoints" not in hub.snapshot(charts=True)
    assert "endpoints" not in hub.at(10**9)


def test_a_real_run_over_endpoints_with_a_fallback_gives_its_table(tmp_path: Path) -> None:
    """Not a rewritten file: a society run over two loopback servers and a dead endpoint
    whose calls its fallback takes, priced per endpoint; the table adds up its lines, and
    the report embeds it."""
    import socket

    import simulacra
    from simulacra.llm import ScriptedServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    config = Path(__file__).resolve().parents[2] / "examples" / "social" / "config.yaml"
    with ScriptedServer(seed=0) as left, ScriptedServer(seed=0) as right:
        def server(name: str, url: str, *extra: str) -> list[str]:
            return [f"sim.llm.endpoints.{name}.provider=openai_compatible",
                    f"sim.llm.endpoints.{name}.base_url={url}",
                    f"sim.llm.endpoints.{name}.model=scripted",
                    f"sim.llm.endpoints.{name}.max_retries=0", *extra]

        simulacra.run_society(simulacra.load_config(config, [
            "sim.agents=8", "sim.steps=3",
            *server("left", left.base_url,
                    "sim.llm.endpoints.left.pricing={prompt_per_mtok: 5, completion_per_mtok: 9}"),
            *server("right", right.base_url), *server("gone", dead,
                                                      "sim.llm.endpoints.gone.fallback=left"),
            "sim.llm.routing.default=right",
            "sim.llm.routing.rules=[{agents: '[a-c]*', endpoint: gone}]"]), out=tmp_path / "run")
    lines = _lines(tmp_path / "run")
    assert {c["endpoint"] for c in lines} == {"left", "right"}
    assert any(c.get("fallback_from") == "gone" for c in lines)
    run = report.load_society_run(tmp_path / "run")
    rows = _data.endpoint_rows(run)
    _check_table(_data.endpoint_table(rows), lines)
    by_name = {r.endpoint: r for r in rows}
    assert by_name["gone"].calls == 0
    assert by_name["gone"].fallback_out == by_name["left"].fallback_in > 0
    assert by_name["left"].cost > 0
    assert by_name["right"].cost == 0
    out = report.build_report(tmp_path / "run", tmp_path / "report.html")
    assert "By endpoint" in Path(out).read_text(encoding="utf-8")
