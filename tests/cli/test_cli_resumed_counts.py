"""The summary table of a resumed run says which figures are the whole run's, and they add up.

A run stopped by Ctrl-C and resumed printed "model calls" for the whole run and, under
it, "made / from recordings" for the resumed session only: 36, then 18 / 0, which read
as a breakdown that does not add up. The table now marks the whole run's figures and
breaks its calls down by session; this session's row says what it made and what it
served from the recordings, which is what the server answered and calls.jsonl logged.
Real subprocesses, a real HTTP model server, a real SIGINT.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulacra.llm import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"

pytestmark = pytest.mark.timeout(300)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def _wait_for_steps(run_dir: Path, steps: int, process: subprocess.Popen[str]) -> None:
    telemetry = run_dir / "telemetry.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if telemetry.is_file() and len(telemetry.read_text().splitlines()) >= steps:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    raise AssertionError("the run made no progress")


def _rows(table: str) -> dict[str, str]:
    """The rows of the summary table (a row folded onto a second line is joined)."""
    rows: dict[str, str] = {}
    last = ""
    for line in table.splitlines():
        found = re.match(r"^ (\S.*?|  \S.*?)\s{2,}(\S.*?)\s*$", line)
        if found is not None:
            last = found.group(1)
            rows[last] = found.group(2)
        elif line.startswith(" " * 10) and last:
            rows[last] += " " + line.strip()
    return rows


def _answered(server: ScriptedServer) -> int:
    return sum(1 for r in server.requests if r.get("status") == 200)


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_a_resumed_run_counts_the_whole_run_and_this_session_apart(
        tmp_path: Path, engine: str) -> None:
    run = tmp_path / "run"
    with ScriptedServer(latency=0.02) as server:
        process = subprocess.Popen(
            [sys.executable, "-m", "simulacra", "run", str(CONFIG), "--out", str(run),
             "--no-progress", "sim.agents=8", "sim.steps=12", "sim.engine.concurrency=2",
             "sim.llm.provider=openai_compatible", f"sim.llm.base_url={server.base_url}",
             "sim.llm.model=scripted", f"sim.engine.step.built_in={engine}"],
            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        _wait_for_steps(run, 2, process)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 130, err
        server.reset()
        resumed = subprocess.run([sys.executable, "-m", "simulacra", "run", "--resume",
                                  str(run), "--no-progress"], capture_output=True, text=True,
                                 env=_env(), timeout=240, check=False)
        assert resumed.returncode == 0, resumed.stderr
        answered = _answered(server)  # the calls this session made

    llm = json.loads((run / "summary.json").read_text(encoding="utf-8"))["llm"]
    sessions = llm["sessions"]
    assert len(sessions) == 2
    rows = _rows(resumed.stdout)

    # The whole run's figures say so, and are summary.json's.
    calls = llm["calls"]
    assert rows["model calls"] == f"{calls}, whole run (openai_compatible, scripted)"
    assert rows["tokens"] == (f"{llm['prompt_tokens']} prompt, {llm['completion_tokens']} "
                              "completion, whole run")
    assert rows["agent-steps"].startswith(f"{llm['throughput']['agent_steps']}, whole run (")
    assert ", whole run (" in rows["wall clock"]
    assert "sessions" not in rows  # replaced by the rows under "model calls"

    # The rows under "model calls" are its sessions, and add up to it.
    first, this = sessions
    stopped_at = this["from_step"]
    assert first["from_step"] == 0
    assert first["steps"] == stopped_at
    earlier = rows[f"  session 1, steps 0-{stopped_at - 1}"]
    current = rows[f"  this session, steps {stopped_at}-{stopped_at + this['steps'] - 1}"]
    assert int(earlier) == first["calls"]
    found = re.fullmatch(r"(\d+): (\d+) made, (\d+) from recordings", current)
    assert found is not None, current
    session_calls, made, served = map(int, found.groups())
    assert session_calls == this["calls"]
    assert int(earlier) + session_calls == calls
    assert made + served == session_calls

    # This session's own figures: what the server answered and calls.jsonl logged.
    assert made == answered == llm["throughput"]["calls_made"]
    assert served == llm["throughput"]["served_from_recordings"]
    logged = [json.loads(line) for line in
              (run / "calls.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sum(1 for call in logged if call["session"] == 1) == made
    assert "made / from recordings" not in resumed.stdout  # that row is a lone session's
