"""MCPBackend against real worker servers on 127.0.0.1: tokens, failures, settings.

Most tests share one module-wide set of two worker servers (connected to by
URL and token); the tests of killed workers start their own. The
same-seed-same-result checks for 1, 2 and 4 workers are in the conformance
suite (``tests/backends/_conf_mcp.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from simulacra import (
    AgentActionError,
    BackendError,
    ConfigError,
    Model,
    Phase,
    UnknownRecipient,
    WorkerLost,
    get_backend,
)
from simulacra.distributed import MCPBackend, MCPConfig, WorkerProcesses, spawn_workers

BACKEND_TESTS = Path(__file__).resolve().parents[1] / "backends"
if str(BACKEND_TESTS) not in sys.path:  # workers get this sys.path and import the models by name
    sys.path.insert(0, str(BACKEND_TESTS))

import _engine_models as models  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def workers() -> Iterator[WorkerProcesses]:
    with spawn_workers(2) as pool:
        yield pool


def _ring(backend: object, size: int = 8) -> Model:
    model = Model(seed=11, backend=backend)  # type: ignore[arg-type]
    model.add_many(models.Ring, range(size), size=size)
    return model


def test_spawned_workers_listen_on_loopback_only(workers: WorkerProcesses) -> None:
    assert len(workers.urls) == 2
    for url in workers.urls:
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/mcp")


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic abc", "bearer x"])
def test_a_request_without_the_right_token_gets_401(workers: WorkerProcesses,
                                                   header: str | None) -> None:
    """The SDK's bearer middleware answers before any MCP message is read."""
    headers = {"Accept": "application/json, text/event-stream"}
    if header is not None:
        headers["Authorization"] = header
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "intruder", "version": "0"}}}

    response = httpx.post(workers.urls[0], json=initialize, headers=headers)

    assert response.status_code == 401
    assert "invalid_token" in response.headers["www-authenticate"]


def test_the_right_token_is_let_in(workers: WorkerProcesses) -> None:
    """The control for the test above: the same request with the token is served."""
    headers = {"Accept": "application/json, text/event-stream",
               "Authorization": f"Bearer {workers.token}"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "engine", "version": "0"}}}

    response = httpx.post(workers.urls[0], json=initialize, headers=headers)

    assert response.status_code == 200
    assert response.json()["result"]["serverInfo"]["name"] == "simulacra-worker"


def test_a_wrong_token_is_refused_with_a_clear_error(workers: WorkerProcesses) -> None:
    backend = MCPBackend(workers.config(token="not-the-token"))  # noqa: S106

    with pytest.raises(BackendError) as info:
        _ring(backend).run(models.Ring.act, steps=1)

    message = str(info.value)
    assert workers.urls[0] in message
    assert "refused the bearer token (HTTP 401)" in message
    assert not isinstance(info.value, WorkerLost)


def test_the_token_comes_from_the_named_environment_variable(
        workers: WorkerProcesses, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _ring("local").run(models.Ring.act, steps=3)
    monkeypatch.setenv("MY_WORKER_TOKEN", workers.token)

    with MCPBackend({"urls": list(workers.urls), "token_env": "MY_WORKER_TOKEN"}) as backend:
        result = _ring(backend).run(models.Ring.act, steps=3)

    assert result.digest == reference.digest
    monkeypatch.delenv("MY_WORKER_TOKEN")
    with pytest.raises(ConfigError, match="set the environment variable MY_WORKER_TOKEN"):
        _ring(MCPBackend({"urls": list(workers.urls), "token_env": "MY_WORKER_TOKEN"})).run(
            models.Ring.act)


def test_settings_switch_a_model_to_mcp_workers(
        workers: WorkerProcesses, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIMULACRA_TEST_TOKEN", workers.token)
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"orchestration": {"mode": "mcp", "mcp_config": {
        "urls": list(workers.urls), "token_env": "SIMULACRA_TEST_TOKEN", "partition": "hash"}}}))
    reference = _ring(None).run(models.Ring.act, steps=4)

    model = Model(seed=11, settings=path)
    model.add_many(models.Ring, range(8), size=8)
    result = model.run(models.Ring.act, steps=4)

    assert result.backend == "mcp"
    assert result.digest == reference.digest


def test_an_agent_error_names_agent_phase_and_step(workers: WorkerProcesses) -> None:
    """Agents 6-9 fail at step 2, on both workers; the lowest id is reported, as locally."""
    with MCPBackend(workers.config()) as backend:
        model = Model(seed=0, backend=backend)
        model.add_many(models.Faulty, range(10), bad_id=6, bad_step=2)
        with pytest.raises(AgentActionError) as info:
            model.run(models.Faulty.act, steps=5)

    error = info.value
    assert (error.agent, error.phase, error.step) == (6, "Faulty.act", 2)
    assert isinstance(error.__cause__, ValueError)
    assert str(error.__cause__) == "agent 6 fails on purpose"
    assert error.remote_traceback is not None
    assert "_engine_models.py" in error.remote_traceback


def test_an_unknown_recipient_is_named(workers: WorkerProcesses) -> None:
    with MCPBackend(workers.config()) as backend:
        model = Model(seed=0, backend=backend)
        model.add_many(models.Misaddressed, range(6))
        with pytest.raises(UnknownRecipient) as info:
            model.run(models.Misaddressed.act, steps=3)

    assert (info.value.sender, info.value.recipient, info.value.step) == (4, 99, 1)


def test_the_backend_works_again_after_an_agent_error(workers: WorkerProcesses) -> None:
    reference = _ring("local").run(models.Ring.act, steps=3)
    with MCPBackend(workers.config()) as backend:
        model = Model(seed=0, backend=backend)
        model.add_many(models.Faulty, range(10), bad_id=6, bad_step=0)
        with pytest.raises(AgentActionError):
            model.run(models.Faulty.act, steps=1)

        assert _ring(backend).run(models.Ring.act, steps=3).digest == reference.digest


@pytest.mark.timeout(60)
def test_a_killed_spawned_worker_surfaces_as_worker_lost_and_the_backend_recovers() -> None:
    backend = MCPBackend({"workers": 2})
    model = _ring(backend, size=6)
    try:
        reference = model.run(models.Ring.act, steps=3)
        backend.start(model.specs, model.seed, None)
        victim = backend.worker_pids[1]
        os.kill(victim, signal.SIGKILL)

        with pytest.raises(WorkerLost) as info:
            backend.execute_action(Phase(models.Ring.act), 0, 0)

        message = str(info.value)
        assert f"pid {victim}" in message
        assert "was killed by SIGKILL" in message
        assert "running phase 'Ring.act' at step 0" in message
        assert info.value.unit == 1
        # The next run starts fresh workers and gives the reference result again.
        assert model.run(models.Ring.act, steps=3).digest == reference.digest
        assert victim not in backend.worker_pids
    finally:
        backend.close()


@pytest.mark.timeout(60)
def test_a_worker_killed_by_its_agent_surfaces_as_worker_lost() -> None:
    backend = MCPBackend({"workers": 1})
    model = Model(seed=0, backend=backend)
    model.add_many(models.SelfKilling, range(4), parent_pid=os.getpid())
    try:
        with pytest.raises(WorkerLost, match=r"was killed by SIGKILL while running phase "
                                             r"'SelfKilling\.act' at step 1"):
            model.run(models.SelfKilling.act, steps=3)
    finally:
        backend.close()


@pytest.mark.timeout(60)
def test_a_killed_worker_reached_by_url_surfaces_as_worker_lost() -> None:
    """No process handle here: the broken connection is what tells."""
    with spawn_workers(1) as pool, MCPBackend(pool.config()) as backend:
        model = _ring(backend, size=4)
        backend.start(model.specs, model.seed, None)
        os.kill(pool.pids[0], signal.SIGKILL)
        pool.processes[0].wait()

        with pytest.raises(WorkerLost) as info:
            backend.execute_action(Phase(models.Ring.act), 0, 0)

    assert pool.urls[0] in str(info.value)
    assert "the 4 agents it held are lost" in str(info.value)


def test_an_unreachable_url_is_a_clear_error() -> None:
    with pytest.raises(BackendError, match=r"cannot reach MCP worker at http://127\.0\.0\.1:9/mcp"):
        _ring(MCPBackend({"urls": ["http://127.0.0.1:9/mcp"], "token": "x"})).run(models.Ring.act)


@pytest.mark.parametrize(("config", "expected"), [
    ({"workers": 0}, "mcp_config.workers must be an int >= 1, got int 0"),
    ({"workers": "2"}, "mcp_config.workers must be an int >= 1, got str '2'"),
    ({"host": "0.0.0.0"}, "mcp_config.host '0.0.0.0' is not a loopback address"),  # noqa: S104
    ({"urls": ["http://10.1.2.3:80/mcp"]}, r"mcp_config.urls\[0\] .* is not on this machine"),
    ({"urls": "http://127.0.0.1:1/mcp"}, "mcp_config.urls must be a list"),
    ({"urls": ["ftp://127.0.0.1/x"]}, r"mcp_config.urls\[0\] must be an http\(s\) URL"),
    ({"partition": "random"}, "mcp_config.partition must be one of"),
    ({"call_timeout": -1}, "mcp_config.call_timeout must be a number > 0"),
    ({"spawn": 2}, "mcp_config.spawn is not a known setting"),
])
def test_bad_configuration_is_named(config: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        get_backend("mcp", mcp_config=config)


def test_remote_hosts_need_an_explicit_opt_in() -> None:
    config = MCPConfig(urls=("http://10.1.2.3:8000/mcp",), allow_remote=True, token="t")  # noqa: S106

    assert config.urls == ("http://10.1.2.3:8000/mcp",)
    assert "t" not in repr(config).replace("token_env", "").split("urls")[0]  # token not shown


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["--host", "0.0.0.0"], {"SIMULACRA_MCP_TOKEN": "t"}, "needs --allow-remote"),  # noqa: S104
    ([], {"SIMULACRA_MCP_TOKEN": ""}, "the bearer token is missing"),
])
def test_the_worker_command_refuses_unsafe_starts(args: list[str], env: dict[str, str],
                                                  expected: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "simulacra.distributed.worker", *args],
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        capture_output=True, text=True, timeout=60, check=False)

    assert completed.returncode == 2
    assert expected in completed.stderr
