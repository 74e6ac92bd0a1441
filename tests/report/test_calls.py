"""``calls.jsonl``: one line per model call, with its latency and outcome, resume-aware.

A run's call log has a line for every model call (and every failed one, with
its error type); the event-driven engine's lines carry the simulated latency
the turn's resolution time is made of; a crashed run resumed from its
checkpoint appends the calls it really makes, never a call it serves from the
recordings (no call twice); the log changes no event and no digest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulacra.llm import RecordingStore

ROOT = Path(__file__).resolve().parents[2]
CRASHING = ROOT / "tests" / "societies" / "_crashing.py"


def _lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line)
            for line in (run / "action_events.jsonl").read_text().splitlines()]


def test_every_call_has_a_line_and_failed_calls_name_their_error(flaky_run: Path) -> None:
    calls = _lines(flaky_run)
    summary = json.loads((flaky_run / "summary.json").read_text())
    ok = [c for c in calls if c["ok"]]
    failed = [c for c in calls if not c["ok"]]
    assert len(ok) == summary["llm"]["calls"]
    assert failed
    assert {c["error"] for c in failed} == {"ProviderTimeout", "RateLimited"}
    assert all(c["message"] and c["prompt"].startswith("You are @") for c in failed)
    # Each failed call failed its turn, with the same error type.
    failed_turns = {(e["agent"], e["step"]): e["data"]["error"] for e in _events(flaky_run)
                    if e["kind"] == "turn_failed"}
    for call in failed:
        assert failed_turns[(call["agent"], call["turn"])] == call["error"]
    assert len({(c["agent"], c["n"]) for c in calls}) == len(calls)
    with RecordingStore(flaky_run / "llm_recordings.sqlite", readonly=True) as store:
        seen = store.request_messages(c["key"] for c in ok)
        assert set(seen) == {c["key"] for c in ok}
        first = ok[0]
        request = store.request(first["key"])
        assert request is not None
        assert seen[first["key"]] == tuple((m.role, m.content) for m in request.messages)
    # Round engine: the latency is the wall clock; the turn is the step.
    assert all(c["latency_s"] == c["wall_s"] >= 0 and c["turn"] == c["step"] == c["t"]
               for c in calls)
    assert sum(c["cost"] for c in ok) == pytest.approx(summary["llm"]["cost"], rel=1e-6)


def test_event_engine_lines_carry_the_simulated_latency(flaky_event_run: Path) -> None:
    calls = _lines(flaky_event_run)
    config = json.loads(json.dumps(__import__("yaml").safe_load(
        (flaky_event_run / "config.yaml").read_text())))
    minimum = config["sim"]["llm"]["latency"]["min_duration"]
    # An event of the event-driven engine names its turn in "turn" (its "step" is the window).
    resolved = {(e["agent"], e["turn"]): e["time"] for e in _events(flaky_event_run)}
    checked = 0
    for call in calls:
        assert call["step"] == int(call["t"] // 1.0)
        if not call["ok"]:
            assert call["latency_s"] is None
            continue
        assert call["latency_s"] > 0
        when = resolved.get((call["agent"], call["turn"]))
        if when is not None:  # one call per turn: it resolves its latency after it woke
            assert when == pytest.approx(call["t"] + max(minimum, call["latency_s"]))
            checked += 1
    assert checked > 10


def _simulacra(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "simulacra", *args], capture_output=True,
                          text=True, timeout=240, check=False, env=env)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_a_resumed_run_logs_no_call_twice(tmp_path: Path, engine: str) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(f"""
name: calls-{engine}
seed: 3
sim:
  steps: 6
  agents: 10
  world:
    factory: {CRASHING}:build
  engine:
    step:
      built_in: {engine}
    mode: threads
    concurrency: 4
run:
  checkpoint_every: 2
""", encoding="utf-8")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert _simulacra("run", str(config), "--out", str(whole), "--no-progress").returncode == 0
    crashed = _simulacra("run", str(config), "sim.world.crash_at=3", "--out", str(cut),
                         "--no-progress")
    assert crashed.returncode == 9, crashed.stderr
    before = _lines(cut)
    assert before
    assert {c["session"] for c in before} == {0}
    # A kill can cut the last line short: the resumed run starts on a line of its own.
    with (cut / "calls.jsonl").open("a") as file:
        file.write('{"agent": "cut-sh')
    (cut / "config.yaml").write_text(
        (cut / "config.yaml").read_text().replace("crash_at: 3", "crash_at: null"))
    resumed = _simulacra("run", "--resume", str(cut), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert (cut / "digest.txt").read_text() == (whole / "digest.txt").read_text()
    after = _lines(cut)
    assert after[:len(before)] == before
    assert {c["session"] for c in after[len(before):]} == {1}
    sites = [(c["agent"], c["n"]) for c in after]
    assert len(set(sites)) == len(sites)  # steps 2-3 came from the recordings: not again
    assert sorted(sites) == sorted((c["agent"], c["n"]) for c in _lines(whole))
