"""Ctrl-C, SIGTERM and budgets: a society run stops at a safe point with a checkpoint, says how
to continue, and the resumed run ends exactly where an uninterrupted run ends -- having asked
the server for no completed call twice. The model is the project's real HTTP server on
127.0.0.1, with a latency, so that a signal lands in the middle of a run."""

from __future__ import annotations

import json
import os
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


def _command(base_url: str, out: Path, engine: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "simulacra", "run", str(CONFIG), "--out", str(out),
            "--no-progress", "sim.agents=8", "sim.steps=12", "sim.engine.concurrency=2",
            "sim.llm.provider=openai_compatible", f"sim.llm.base_url={base_url}",
            "sim.llm.model=scripted", f"sim.engine.step.built_in={engine}", *extra]


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


def _completed_sites(server: ScriptedServer) -> list[tuple[object, ...]]:
    return [(r.get("site"), r.get("body", {}).get("messages") and
             json.dumps(r["body"]["messages"], sort_keys=True))
            for r in server.requests if r.get("status") == 200]


@pytest.mark.parametrize(("engine", "signum"), [("round", signal.SIGINT),
                                                 ("async_event", signal.SIGTERM)])
def test_a_signal_stops_the_run_with_a_checkpoint_and_resume_finishes_it(
        tmp_path: Path, engine: str, signum: int) -> None:
    with ScriptedServer(latency=0.02) as server:
        whole = subprocess.run(_command(server.base_url, tmp_path / "whole", engine),
                               capture_output=True, text=True, env=_env(), timeout=240,
                               check=False)
        assert whole.returncode == 0, whole.stderr
        server.reset()

        cut = tmp_path / "cut"
        process = subprocess.Popen(_command(server.base_url, cut, engine), text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        _wait_for_steps(cut, 2, process)
        process.send_signal(signum)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 130, err
        assert "Traceback" not in err
        assert f"simulacra run --resume {cut}" in err
        assert not (cut / "digest.txt").exists()
        assert list((cut / "checkpoints").glob("*.ckpt"))

        resumed = subprocess.run([sys.executable, "-m", "simulacra", "run", "--resume", str(cut),
                                  "--no-progress"], capture_output=True, text=True, env=_env(),
                                 timeout=240, check=False)
        assert resumed.returncode == 0, resumed.stderr
        sites = _completed_sites(server)
    assert (cut / "digest.txt").read_text() == (tmp_path / "whole" / "digest.txt").read_text()
    assert (cut / "action_events.jsonl").read_bytes() == \
        (tmp_path / "whole" / "action_events.jsonl").read_bytes()
    # No completed call was asked for twice: the resume served them from the recordings.
    assert len(sites) == len(set(sites))
    summary = json.loads((cut / "summary.json").read_text())
    uncut = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert summary["llm"]["calls"] == uncut["llm"]["calls"]


def test_a_second_ctrl_c_stops_at_once_and_the_run_still_resumes(tmp_path: Path) -> None:
    with ScriptedServer(latency=0.05) as server:
        cut = tmp_path / "cut"
        process = subprocess.Popen(_command(server.base_url, cut, "round",
                                            "run.checkpoint_every=1"), text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        _wait_for_steps(cut, 2, process)
        process.send_signal(signal.SIGINT)
        time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 130, err
        assert "Traceback" not in err
        assert "--resume" in err
        resumed = subprocess.run([sys.executable, "-m", "simulacra", "run", "--resume", str(cut),
                                  "--no-progress"], capture_output=True, text=True, env=_env(),
                                 timeout=240, check=False)
        assert resumed.returncode == 0, resumed.stderr


@pytest.mark.parametrize("engine", ["round", "async_event"])
def test_a_budget_stops_the_run_and_a_raised_budget_finishes_it(
        tmp_path: Path, engine: str) -> None:
    prices = ["sim.llm.pricing.prompt_per_mtok=3", "sim.llm.pricing.completion_per_mtok=15"]
    with ScriptedServer() as server:
        whole = subprocess.run(_command(server.base_url, tmp_path / "whole", engine, *prices),
                               capture_output=True, text=True, env=_env(), timeout=240,
                               check=False)
        assert whole.returncode == 0, whole.stderr
        cost = json.loads((tmp_path / "whole" / "summary.json").read_text())["llm"]["cost"]
        assert cost > 0
        server.reset()
        cut = tmp_path / "cut"
        stopped = subprocess.run(_command(server.base_url, cut, engine, *prices,
                                          f"run.budget.cost={cost / 3:.9f}"),
                                 capture_output=True, text=True, env=_env(), timeout=240,
                                 check=False)
        assert stopped.returncode == 3, stopped.stderr
        assert "run.budget.cost" in stopped.stderr
        assert f"simulacra run --resume {cut} run.budget.cost=" in stopped.stderr
        telemetry = [json.loads(line) for line in
                     (cut / "telemetry.jsonl").read_text().splitlines()]
        assert sum(line["cost"] for line in telemetry) <= cost / 3 + 1e-9  # never exceeded
        resumed = subprocess.run([sys.executable, "-m", "simulacra", "run", "--resume", str(cut),
                                  f"run.budget.cost={cost * 2}", "--no-progress", "--json"],
                                 capture_output=True, text=True, env=_env(), timeout=240,
                                 check=False)
        assert resumed.returncode == 0, resumed.stderr
        sites = _completed_sites(server)
    assert len(sites) == len(set(sites))
    report = json.loads(resumed.stdout)
    assert report["digest"] == (tmp_path / "whole" / "digest.txt").read_text().strip()
    assert abs(report["llm"]["cost"] - cost) < 1e-9
    assert len(report["llm"]["per_agent"]) == 8
    assert abs(sum(a["cost"] for a in report["llm"]["per_agent"].values()) - cost) < 1e-6


def test_a_signal_after_the_stop_is_ignored_not_fatal() -> None:
    # Two presses a few milliseconds apart can straddle the end of a step: the first
    # stops the run there, the second comes once it has stopped. It must neither raise
    # in the middle of the exit message nor (at interpreter exit, where Python gives any
    # handler but SIG_IGN back to SIG_DFL) kill the process with the run's word unsaid.
    import simulacra
    from simulacra.cli._society import _stoppable

    before = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    control = simulacra.RunControl()
    try:
        with _stoppable(control):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs at the next bytecode; this leaves room
        assert control.reason == "SIGINT"
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # raises KeyboardInterrupt under the old handler
        time.sleep(0.05)

        # A run that no signal stopped gives the handlers back as they were.
        for number, old in before.items():
            signal.signal(number, old)
        with _stoppable(simulacra.RunControl()):
            pass
        assert {n: signal.getsignal(n) for n in before} == before
    finally:
        for number, old in before.items():
            signal.signal(number, old)
