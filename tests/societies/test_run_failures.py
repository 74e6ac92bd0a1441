"""Failures that surface: a preflight before step 0, a run that stops when its provider is
unusable, and a run with too many failed turns that exits 1 -- against the project's real
OpenAI-compatible HTTP server on 127.0.0.1 (``ScriptedServer``), on both engines."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import simulacra
from simulacra._util import install_hint
from simulacra.cli import main
from simulacra.llm import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "social" / "config.yaml"
ENGINES = ["round", "async_event"]

pytestmark = pytest.mark.timeout(120)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _args(base_url: str, out: Path, engine: str, *extra: str) -> list[str]:
    return ["run", str(CONFIG), "--out", str(out), "--no-progress", "sim.agents=6",
            "sim.steps=4", "sim.llm.provider=openai_compatible", f"sim.llm.base_url={base_url}",
            "sim.llm.model=scripted", "sim.llm.max_retries=0", "sim.llm.timeout=5",
            f"sim.engine.step.built_in={engine}", *extra]


def test_without_httpx_the_preflight_names_the_extra(tmp_path: Path) -> None:
    """The plain install has no httpx: exit 2 before any run directory is made."""
    code = ("import sys; sys.modules['httpx'] = None\n"
            "from simulacra.cli import main\n"
            f"sys.exit(main({_args('http://127.0.0.1:9/v1', tmp_path / 'run', 'round')!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 2, done.stderr
    assert install_hint("llm") in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_closed_port_fails_the_preflight_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    port = _closed_port()
    start = time.perf_counter()
    assert main(_args(f"http://127.0.0.1:{port}/v1", tmp_path / "run", engine)) == 2
    assert time.perf_counter() - start < 5  # no retries, no turns
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}/v1/models" in err
    assert "is the server running" in err
    assert not (tmp_path / "run").exists()


def test_a_model_the_server_does_not_serve_fails_the_preflight(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer() as server:
        args = [*_args(server.base_url, tmp_path / "run", "round"), "sim.llm.model=gpt-9"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "does not serve sim.llm.model='gpt-9'" in err
        assert "'scripted'" in err
        with pytest.raises(simulacra.ProviderUnavailable, match="gpt-9"):
            simulacra.run_society(simulacra.load_config(CONFIG, args[5:]))
        assert server.calls == 0  # nothing was spent


@pytest.mark.parametrize("engine", ENGINES)
def test_a_provider_that_keeps_failing_stops_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """Every call fails with HTTP 500 after step 1: three in a row stop the run (exit 1,
    one line, how to resume), instead of failing every remaining turn."""
    with ScriptedServer() as server:
        first = _args(server.base_url, tmp_path / "ok", engine, "sim.steps=1")
        assert main(first) == 0
        per_step = server.calls
        assert per_step > 0
        capsys.readouterr()
        server.reset()
        server.fail_next(10_000, 500)
        args = _args(server.base_url, tmp_path / "run", engine, "run.checkpoint_every=1",
                     "run.max_consecutive_provider_failures=3")
        assert main(args) == 1
        calls = server.calls
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "failed 3 calls in a row" in err
    assert "run.max_consecutive_provider_failures=3" in err
    assert calls < 3 + 64  # stopped: not every turn of every step was tried
    assert not (tmp_path / "run" / "digest.txt").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_server_that_goes_away_stops_the_run_with_a_checkpoint_to_resume(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    server = ScriptedServer()
    with server:
        base = server.base_url
        # Preflight and step 0 against the server, then it goes away.
        stopper = {"steps": 0}

        def stop_after_two(report: simulacra.StepReport) -> None:
            stopper["steps"] += 1
            if stopper["steps"] == 2:
                server.close()

        config = simulacra.load_config(CONFIG, _args(base, tmp_path / "x", engine,
                                                     "run.checkpoint_every=1")[5:])
        with pytest.raises(simulacra.ProviderUnavailable) as info:
            simulacra.run_society(config, out=tmp_path / "run", on_step=stop_after_two)
    message = str(info.value)
    # Kept-alive connections are dropped first, then new ones are refused.
    assert "cannot be reached" in message or "calls in a row" in message, message
    assert "the run stopped after 2 of " in message
    assert f"simulacra run --resume {tmp_path / 'run'}" in message
    assert "checkpoint of step 2" in message


@pytest.mark.parametrize("engine", ENGINES)
def test_isolated_failures_fail_their_turns_and_are_summarised(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    with ScriptedServer() as server:
        server.fail_next(2, 503)  # two failures, then a success: no streak of 3
        assert main(_args(server.base_url, tmp_path / "run", engine)) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    failures = summary["failures"]
    assert failures["failed"] == 2
    assert failures["by_kind"] == {"ProviderError": 2}
    assert "HTTP 503" in failures["first"]["ProviderError"]["message"]
    assert "ProviderError" in out
    assert "first: @" in out
    # The failed calls were recorded with their error: the replay (no server now) fails
    # them again at the same call sites, and matches the run event for event.
    assert main(["replay", str(tmp_path / "run"), "--no-progress"]) == 0
    assert "all " in capsys.readouterr().out


@pytest.mark.parametrize("engine", ENGINES)
def test_too_many_failed_turns_exit_1_after_the_files_are_complete(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    with ScriptedServer() as server:
        server.fail_next(10_000, 500)
        args = _args(server.base_url, tmp_path / "run", engine,
                     "run.max_consecutive_provider_failures=100000")
        assert main(args) == 1
    err = capsys.readouterr().err
    assert "more than run.max_failed_fraction=0.5" in err
    assert (tmp_path / "run" / "digest.txt").is_file()  # the files are complete
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failures"]["fraction"] == 1.0


def test_a_refused_connection_makes_the_provider_unavailable_at_the_first_call() -> None:
    from simulacra.llm import CompletionRequest, OpenAICompatible
    from simulacra.societies import ProviderGuard

    port = _closed_port()
    model = OpenAICompatible(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0)
    guard = ProviderGuard(model, limit=100)
    try:
        with pytest.raises(simulacra.ProviderUnavailable, match="cannot be reached"):
            guard.complete(CompletionRequest.chat("hi"))
        # Once unusable, later calls fail at once, without a request.
        with pytest.raises(simulacra.ProviderUnavailable):
            guard.complete(CompletionRequest.chat("hi"))
    finally:
        guard.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_factory_that_refuses_its_config_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """The world is built before the run directory is made: the corrected command then runs."""
    out = tmp_path / "run"
    base = ["run", str(CONFIG), "--out", str(out), "--no-progress", "sim.steps=1",
            f"sim.engine.step.built_in={engine}"]
    assert main([*base, "sim.agents=1"]) == 2
    err = capsys.readouterr().err
    assert "sim.agents must be >= 2" in err
    assert err.strip().count("\n") == 0, err
    assert not out.exists()
    assert main([*base, "sim.agents=3"]) == 0
    assert (out / "digest.txt").exists()
    # A second run into the same directory is refused before its world is built.
    assert main([*base, "sim.agents=3"]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_a_society_too_big_for_its_memory_limit_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The preflight builds a 2,000-agent sample, scales it, and refuses in one line."""
    out = tmp_path / "big"
    code = main(["run", str(CONFIG), "--out", str(out), "--no-progress", "sim.steps=1",
                 "sim.agents=1000000", "run.memory_limit_gb=0.05"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert "sim.agents=1000000 needs about" in err
    assert "run.memory_limit_gb=0.05" in err
    assert not out.exists()


def test_the_memory_estimate_grows_with_the_society() -> None:
    from simulacra.societies import load_config
    from simulacra.societies._run import memory_preflight

    small = load_config(CONFIG, ["sim.agents=100000", "run.memory_limit_gb=1000"])
    big = load_config(CONFIG, ["sim.agents=400000", "run.memory_limit_gb=1000"])
    assert memory_preflight(load_config(CONFIG, ["sim.agents=50"])) is None
    need_small, need_big = memory_preflight(small), memory_preflight(big)
    assert need_small is not None
    assert need_big is not None
    assert 3.5 < need_big / need_small < 4.5


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_after_the_provider_trips_no_checkpoint_is_written_and_the_named_one_resumes(
        tmp_path: Path, mode: str) -> None:
    """Found by a stranger: a checkpoint written after the guard tripped held calls it
    refused, which no recording served, so the checkpoint the stop named could not resume."""
    # Windows much shorter than a call: the turn whose call trips the guard resolves
    # (and stops the run) some steps after the step in which it was made.
    extra = ("run.checkpoint_every=1", "sim.agents=12", "sim.steps=40",
             "sim.engine.step.options.window=0.1", "sim.engine.concurrency=8",
             f"sim.engine.mode={mode}")

    def config(base: str, name: str) -> simulacra.RunConfig:
        return simulacra.load_config(CONFIG, _args(base, tmp_path / name, "async_event",
                                                   *extra)[5:])

    with ScriptedServer(latency=(0.0, 0.01)) as server:
        reference = simulacra.run_society(config(server.base_url, "ref"),
                                          out=tmp_path / "ref").result.digest

    port = _closed_port()  # free now: the broken server and the mended one both take it
    with ScriptedServer(latency=(0.0, 0.01), port=port) as server:
        steps = {"done": 0}

        def break_after_three(report: simulacra.StepReport) -> None:
            steps["done"] += 1
            if steps["done"] == 10:
                server.fail_next(10_000, 500)

        with pytest.raises(simulacra.ProviderUnavailable) as info:
            simulacra.run_society(config(server.base_url, "x"), out=tmp_path / "run",
                                  on_step=break_after_three)
    named = re.search(r"checkpoint of step (\d+)", str(info.value))
    assert named is not None, str(info.value)
    assert int(named.group(1)) >= 10  # the steps before the server broke are kept
    # The named checkpoint resumes (the calls that failed before the stop are part of the
    # run, recorded as failures: the resumed run is not the healthy one, but it replays).
    with ScriptedServer(latency=(0.0, 0.01), port=port):
        resumed = simulacra.resume_society(tmp_path / "run")
    assert resumed.result.digest != reference
    replayed = simulacra.replay_run(tmp_path / "run")
    assert replayed.digest == resumed.result.digest


def test_a_web_server_that_is_no_api_fails_the_preflight(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m http.server` answers /v1/models with a 404 page: no OpenAI-compatible API
    answers like that, so the preflight stops (exit 2, nothing written) instead of the run
    retrying chat calls against it and exiting 1 with its HTML in the message."""
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # its request log would go to the stderr the test reads

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        assert main(_args(base_url, tmp_path / "run", "round")) == 2
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "answered HTTP 404 without an OpenAI-style model list" in err
    assert "<html" not in err.lower()
    assert not (tmp_path / "run").exists()
