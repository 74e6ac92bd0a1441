"""Counts against the server's own count of requests, telemetry of the event engine, and no
leaked connection on the asyncio path -- with the real HTTP test server, on both engines."""

from __future__ import annotations

import gc
import json
import sqlite3
import warnings
from pathlib import Path

import pytest

from simulacra.cli import main
from simulacra.llm import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("error::ResourceWarning")]

WINDOW_FIELDS = {"wakes", "resolved", "failed", "events", "latency_mean", "latency_max",
                 "queue_max", "chain_max", "in_flight_max"}


@pytest.mark.parametrize("engine", ["round", "async_event"])
@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_calls_equal_the_recordings_and_the_servers_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str, mode: str) -> None:
    run_dir = tmp_path / "run"
    with ScriptedServer() as server:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            code = main(["run", str(CONFIG), "--out", str(run_dir), "--no-progress",
                         "sim.agents=8", "sim.steps=4", f"sim.engine.mode={mode}",
                         "sim.llm.provider=openai_compatible",
                         f"sim.llm.base_url={server.base_url}", "sim.llm.model=scripted",
                         f"sim.engine.step.built_in={engine}"])
            gc.collect()  # an unclosed client's transports warn when collected
        served = server.served
    assert code == 0, capsys.readouterr().err
    summary = json.loads((run_dir / "summary.json").read_text())
    with sqlite3.connect(run_dir / "llm_recordings.sqlite") as db:
        recorded = db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]
    telemetry = [json.loads(line) for line in
                 (run_dir / "telemetry.jsonl").read_text().splitlines()]
    assert summary["llm"]["calls"] == recorded == served == sum(t["llm_calls"]
                                                                 for t in telemetry)
    assert summary["llm"]["prompt_tokens"] == sum(t["prompt_tokens"] for t in telemetry) > 0
    assert summary["llm"]["completion_tokens"] == sum(t["completion_tokens"]
                                                      for t in telemetry) > 0
    assert sum(a["calls"] for a in summary["llm"]["per_agent"].values()) == served
    if engine == "async_event":
        for line in telemetry:
            assert set(line["window"]) >= WINDOW_FIELDS, line
        assert sum(t["window"]["wakes"] for t in telemetry) > 0
        assert max(t["window"]["chain_max"] for t in telemetry) >= 1
        assert max(t["window"]["queue_max"] for t in telemetry) >= 1
