"""The report's data layer: reading run directories, studies and monitor files, and the
per-step aggregates, log pages, threads and agent rows the report and the live view share."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

import simulacra
from simulacra import report


def test_a_round_run_is_read_with_its_identity_and_totals(round_run: Path) -> None:
    run = report.load_society_run(round_run)
    summary = json.loads((round_run / "summary.json").read_text())

    assert report.source_kind(round_run) == "society"
    assert run.engine == "round"
    assert not run.windowed
    assert run.finished
    identity = report.run_identity(run)
    assert identity["engine"] == "round"
    assert identity["seed"] == 3
    assert identity["model"] == "scripted"
    assert identity["simulacra"] == simulacra.__version__
    assert identity["config sha256"] == run.manifest["config_sha256"]
    totals = report.run_totals(run)
    assert totals["model calls"] == summary["llm"]["calls"] > 0
    assert totals["cost"] == summary["llm"]["cost"] > 0
    assert totals["failed turns"] == summary["failures"]["failed"] > 0
    assert totals["world"]["posts"] == summary["summary"]["posts"]


def test_step_series_agree_with_the_telemetry_and_the_events(round_run: Path) -> None:
    run = report.load_society_run(round_run)
    series = report.step_series(run)
    lines = run.telemetry

    assert series.x == [0.0, 1.0, 2.0, 3.0]
    assert series.x_title == "step"
    assert series.llm_calls == [line["llm_calls"] for line in lines]
    assert sum(series.kinds["post"]) == sum(e["kind"] == "post" for e in run.events)
    assert sum(sum(c) for c in series.kinds.values()) == len(run.events)
    assert math.isclose(series.cost_cumulative[-1], run.summary["llm"]["cost"])
    assert series.failed_kinds == {"InvalidAction": series.failed}
    assert series.latency_mean == []
    assert series.queue_max == []
    assert set(series.probes) == {"likes", "mentions", "posts"}
    assert json.loads(json.dumps(series.to_json()))["kinds"] == series.kinds


def test_the_event_engine_is_charted_per_window_of_virtual_time(event_run: Path) -> None:
    run = report.load_society_run(event_run)
    series = report.step_series(run.telemetry, run.events)

    assert run.engine == "async_event"
    assert run.windowed
    assert series.windowed
    assert series.x_title.startswith("virtual time")
    assert series.x == [line["window"]["start"] for line in run.telemetry]
    assert series.queue_max == [line["window"]["queue_max"] for line in run.telemetry]
    assert max(series.in_flight_max) >= 1
    assert all(m >= 0 for m in series.latency_mean)
    assert max(series.latency_max) > 0


def test_a_stopped_run_is_read_from_its_telemetry(round_run: Path, tmp_path: Path) -> None:
    stopped = tmp_path / "stopped"
    shutil.copytree(round_run, stopped)
    (stopped / "summary.json").unlink()
    with (stopped / "action_events.jsonl").open("a") as file:
        file.write('{"agent": "cut-sho')  # the line a kill cut short

    run = report.load_society_run(stopped)
    totals = report.run_totals(run)

    assert not run.finished
    assert totals["status"].startswith("unfinished")
    assert totals["model calls"] == sum(line["llm_calls"] for line in run.telemetry)
    assert totals["events"] == len(run.events) == len(
        report.load_society_run(round_run).events)
    assert totals["failed by kind"]["InvalidAction"] == totals["failed turns"]


@pytest.mark.parametrize(("damage", "message"), [
    ("manifest.json", "not a run directory of simulacra run: no manifest.json"),
    ("telemetry.jsonl", "no telemetry.jsonl"),
    ("scheme", "unknown format version 'simulacra.manifest.v9'"),
    ("middle", "action_events.jsonl: line 2 is not JSON"),
])
def test_a_damaged_run_directory_is_one_clear_error(round_run: Path, tmp_path: Path,
                                                    damage: str, message: str) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(round_run, broken)
    if damage == "scheme":
        manifest = json.loads((broken / "manifest.json").read_text())
        manifest["scheme"] = "simulacra.manifest.v9"
        (broken / "manifest.json").write_text(json.dumps(manifest))
    elif damage == "middle":
        lines = (broken / "action_events.jsonl").read_text().splitlines()
        lines[1] = lines[1][:10]
        (broken / "action_events.jsonl").write_text("\n".join(lines) + "\n")
    else:
        (broken / damage).unlink()

    with pytest.raises(simulacra.ConfigError, match=message.replace("(", r"\(")):
        report.load_society_run(broken)


def test_a_path_that_is_nothing_the_report_reads_says_so(tmp_path: Path) -> None:
    with pytest.raises(simulacra.ConfigError, match=r"is not a run directory \(no manifest.json"):
        report.source_kind(tmp_path)
    with pytest.raises(simulacra.ConfigError, match="does not exist"):
        report.source_kind(tmp_path / "nope")


def test_event_text_says_what_each_kind_did() -> None:
    assert report.event_text({"kind": "post", "data": {"text": "hi @ada"}}) == "hi @ada"
    assert report.event_text({"kind": "like", "data": {"post": 3, "author": "bo"}}) == \
        "likes #3 by @bo"
    assert report.event_text({"kind": "follow", "data": {"whom": "bo"}}) == "follows @bo"
    assert report.event_text({"kind": "turn_failed",
                              "data": {"error": "InvalidAction", "message": "not JSON"}}) == \
        "InvalidAction: not JSON"
    assert report.event_text({"kind": "idle", "data": {}}) == ""
    assert report.event_text({"kind": "trade", "data": {"price": 3, "good": "fig"}}) == \
        '{"good":"fig","price":3}'


def test_the_event_table_is_compact_and_complete(round_run: Path) -> None:
    run = report.load_society_run(round_run)
    table = report.event_table(run.events)

    assert len(table.rows) == len(run.events)
    for row, event in zip(table.rows, run.events, strict=True):
        assert row[0] == event["i"]
        assert table.agents[row[3]] == event["agent"]
        assert table.kinds[row[4]] == event["kind"]
        concerned = {table.agents[k] for k in row[6]} if row[6] else set()
        assert set(event.get("triggers", ())) - {event["agent"]} <= concerned


def test_event_page_filters_and_pages_like_the_log_browser(round_run: Path) -> None:
    events = report.load_society_run(round_run).events
    # The agent others mention most (sorted first: a set's order is salted per process,
    # so max over a set would pick among ties differently from run to run).
    agent = max(sorted({e["agent"] for e in events}),
                key=lambda a: sum(a in e.get("triggers", ()) and e["agent"] != a
                                  for e in events))
    own = [e for e in events if e["agent"] == agent]

    page = report.event_page(events, agent=agent, limit=2)
    assert page.total == len(own)
    assert page.events == own[:2]
    assert report.event_page(events, agent=agent, offset=2, limit=100).events == own[2:]
    involving = report.event_page(events, agent=agent, concerning=True, limit=10**6)
    assert involving.total > len(own)
    posts = report.event_page(events, kind="post", steps=(1, 2), limit=10**6)
    assert posts.events
    assert all(e["kind"] == "post" and 1 <= e["step"] <= 2
                                for e in posts.events)
    word = next(e["data"]["text"].split()[0] for e in events if e["kind"] == "post")
    found = report.event_page(events, text=word.upper(), limit=10**6)
    assert found.total >= 1
    assert all(word.casefold() in report.event_text(e).casefold() or
               word.casefold() in e["agent"] for e in found.events)
    with pytest.raises(simulacra.ConfigError, match="offset and limit"):
        report.event_page(events, offset=-1)


def test_threads_follow_the_reply_chains_longest_first(round_run: Path) -> None:
    events = report.load_society_run(round_run).events
    threads = report.conversation_threads(events)

    assert threads
    assert [t.longest for t in threads] == sorted((t.longest for t in threads), reverse=True)
    by_post = {e["data"]["post"]: n for n, e in enumerate(events) if "post" in e["data"]
               and "text" in e["data"]}
    for thread in threads:
        assert thread.depth[0] == 0
        assert len(thread.events) >= 2
        assert "reply_to" not in events[thread.events[0]]["data"] or \
            events[thread.events[0]]["data"]["reply_to"] is None
        for n, depth in zip(thread.events[1:], thread.depth[1:], strict=True):
            parent = by_post[events[n]["data"]["reply_to"]]
            assert parent in thread.events
            assert depth >= 1
        assert thread.longest == max(thread.depth) + 1


def test_threads_of_a_world_without_reply_ids_follow_mentions() -> None:
    events = [
        {"agent": "a", "kind": "say", "data": {"text": "hello @b"}, "triggers": ["b"]},
        {"agent": "c", "kind": "say", "data": {"text": "unrelated"}},
        {"agent": "b", "kind": "say", "data": {"text": "hi @a, ask @c"},
         "triggers": ["a", "c"]},
        {"agent": "c", "kind": "say", "data": {"text": "yes @b"}, "triggers": ["b"]},
    ]
    threads = report.conversation_threads(events)

    assert len(threads) == 1
    assert threads[0].events == [0, 2, 3]
    assert threads[0].longest == 3
    assert threads[0].agents == ["a", "b", "c"]


def test_agent_rows_add_up_to_the_run(round_run: Path) -> None:
    run = report.load_society_run(round_run)
    rows = report.agent_rows(run)

    assert [r.agent for r in rows] == sorted(r.agent for r in rows)
    assert sum(r.events for r in rows) == len(run.events)
    assert sum(r.calls for r in rows) == run.summary["llm"]["calls"]
    assert math.isclose(sum(r.cost for r in rows), run.summary["llm"]["cost"])


def test_llm_calls_are_read_through_the_recording_store(round_run: Path) -> None:
    run = report.load_society_run(round_run)
    calls = list(report.llm_calls(run.recordings))
    some = sorted({c.agent for c in calls})[1:3]

    assert len(calls) == run.summary["llm"]["calls"]
    assert all(c.messages and c.messages[-1][0] == "user" for c in calls)
    picked = list(report.llm_calls(run.recordings, agents=some, limit=3, prompts=False))
    assert len(picked) == 3
    assert picked[0].agent == some[0]
    assert picked[0].messages is None
    assert [c.n for c in picked if c.agent == some[0]] == sorted(
        c.n for c in picked if c.agent == some[0])
    assert list(report.llm_calls(run.path / "missing.sqlite")) == []


def test_a_study_gives_intervals_per_config_and_kpi(study_dir: Path) -> None:
    study = report.load_study(study_dir)
    intervals = report.study_intervals(study)

    assert report.source_kind(study_dir) == "study"
    assert report.study_parameters(study) == (["clerks", "rate"], [])
    assert len(study.results) == 16
    assert {i.kpi for i in intervals} == {"mean_wait", "busy", "served"}  # not the bool
    first = next(i for i in intervals if i.config_index == 0 and i.kpi == "mean_wait")
    values = [r["kpis"]["mean_wait"] for r in study.results if r["config_index"] == 0]
    expected = simulacra.parallel.mean_interval(values, 0.95)
    assert (first.n, first.mean, first.halfwidth) == (4, expected.mean, expected.halfwidth)
    assert first.low < first.mean < first.high


def test_a_damaged_study_is_one_clear_error(study_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "study"
    shutil.copytree(study_dir, broken)
    study = json.loads((broken / "study.json").read_text())
    study["format"] = "simulacra.study.v0"
    (broken / "study.json").write_text(json.dumps(study))

    with pytest.raises(simulacra.ConfigError, match="unknown format version"):
        report.load_study(broken)
    (broken / "study.json").unlink()
    with pytest.raises(simulacra.ConfigError, match=r"no study\.json"):
        report.load_study(broken)


def test_a_monitor_file_is_read_and_checked(monitors_file: Path, tmp_path: Path) -> None:
    data = report.load_monitors(monitors_file.parent)

    assert report.source_kind(monitors_file) == "monitors"
    assert report.source_kind(monitors_file.parent) == "monitors"
    assert set(data.series) == {"desk queue", "desk utilisation"}
    queue = data.series["desk queue"]
    assert queue.kind == "queue"
    assert len(queue.t) == len(queue.v) > 10
    assert queue.time_weighted_mean is not None
    assert queue.time_weighted_mean > 0
    assert len(data.samples["waiting time"]) == 200

    bad = tmp_path / "monitors.json"
    raw = json.loads(monitors_file.read_text())
    raw["series"]["desk queue"]["kind"] = "speed"
    bad.write_text(json.dumps(raw))
    with pytest.raises(simulacra.ConfigError, match=r"series.desk queue.kind: expected one of"):
        report.load_monitors(bad)
    raw["format"] = "simulacra.monitors.v2"
    bad.write_text(json.dumps(raw))
    with pytest.raises(simulacra.ConfigError, match="unknown format version"):
        report.load_monitors(bad)
