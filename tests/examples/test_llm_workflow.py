"""The LLM agentic workflow example: KPIs, determinism, offload trace equality, no network.

The example is imported as the package ``llm_workflow`` with ``examples/`` on
``sys.path`` (kept there while this module runs): worker processes of a
processes pool then import ``llm_workflow.planner`` by name, as they must.
"""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import simulacra
from simulacra.cli import main
from simulacra.parallel import Offloader, use_pool

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EXAMPLE = EXAMPLES / "llm_workflow"
SRC = ROOT / "src"
SHORT = {"horizon": 400.0}


@pytest.fixture(scope="module")
def workflow() -> Iterator[ModuleType]:
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield importlib.import_module("llm_workflow.model")
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.fixture(scope="module")
def sweep_module(workflow: ModuleType) -> ModuleType:
    return importlib.import_module("llm_workflow.sweep")


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )


def _traced(workflow: ModuleType, backend: str, workers: int | None, seed: int = 3,
            **params: Any) -> tuple[simulacra.Trace, dict[str, Any]]:
    sim = simulacra.Sim(seed, trace=True)
    flow = workflow.build(sim, **params)
    with Offloader(backend, workers) as pool:
        use_pool(sim, pool)
        sim.run()
    sim._check_invariants()
    return simulacra.Trace.of(sim), flow.kpis()


# --------------------------------------------------------------------------- KPIs


def test_defaults_are_deterministic_and_complete(workflow: ModuleType) -> None:
    kpis = workflow.run()
    assert tuple(kpis) == workflow.KPIS
    assert workflow.run() == kpis
    assert workflow.run(seed=8) != kpis
    # The run drains: every task that arrived has finished.
    assert kpis["completed"] + kpis["failed"] == kpis["tasks"] > 0
    assert kpis["p95_latency"] >= kpis["mean_latency"] > 0
    assert 1.0 <= kpis["mean_batch_size"] <= workflow.Params().batch_size
    assert 0.0 < kpis["server_utilisation"] <= 1.0
    assert kpis["mean_queue_depth"] >= 0.0
    assert kpis["planner_calls"] > 0


def test_accounting_matches_the_tasks(workflow: ModuleType) -> None:
    sim = simulacra.Sim(5)
    flow = workflow.build(sim, tool_failure=0.3, max_retries=1, **SHORT)
    sim.run()
    kpis = flow.kpis()
    params = flow.params
    finished = [task for task in flow.tasks if task.outcome is not None]
    assert len(finished) == len(flow.tasks)
    assert kpis["failed"] == sum(task.outcome == "failed" for task in flow.tasks) > 0
    for task in flow.tasks:
        assert params.min_steps >= 1
        assert task.steps <= params.max_steps
        if task.outcome == "completed":
            assert task.steps >= params.min_steps
    tokens = sum(task.tokens for task in flow.tasks)
    calls = sum(task.tool_calls for task in flow.tasks)
    expected = (tokens * params.price_per_1k_tokens / 1000 + calls * params.tool_call_price)
    assert kpis["cost_per_task"] == pytest.approx(expected / len(flow.tasks))
    assert kpis["tool_failures"] >= kpis["failed"] * (params.max_retries + 1)


def test_batching_and_capacity_move_the_kpis(workflow: ModuleType) -> None:
    """The model has power: an overloaded single server with no batching queues up."""
    starved = workflow.run(servers=1, batch_size=1, concurrency=64, **SHORT)
    batched = workflow.run(servers=1, batch_size=8, concurrency=64, **SHORT)
    roomy = workflow.run(servers=4, batch_size=8, concurrency=64, **SHORT)
    assert starved["mean_batch_size"] == 1.0
    assert batched["mean_batch_size"] > 1.0
    assert starved["p95_latency"] > batched["p95_latency"] > roomy["p95_latency"]
    assert starved["mean_queue_depth"] > batched["mean_queue_depth"] > roomy["mean_queue_depth"]
    # Same tasks in every configuration (per-task streams): the same tokens.
    assert starved["tokens_per_task"] == batched["tokens_per_task"] == roomy["tokens_per_task"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("servers", 0),
        ("batch_size", 0),
        ("concurrency", 2.5),
        ("arrival_rate", 0.0),
        ("horizon", float("nan")),
        ("max_steps", 1),
        ("tool_failure", 1.0),
        ("tool_failure", -0.1),
        ("max_retries", -1),
        ("planner_work", 0),
        ("planner_delay", -1.0),
        ("prefill", float("inf")),
        ("token_sigma", True),
    ],
)
def test_bad_parameters_name_the_field(workflow: ModuleType, field: str, value: object) -> None:
    with pytest.raises(simulacra.ConfigError) as info:
        workflow.run(**{field: value})
    message = str(info.value)
    assert field in message
    assert repr(value) in message
    assert "must be" in message


def test_unknown_parameter_and_bad_backend(workflow: ModuleType) -> None:
    with pytest.raises(simulacra.ConfigError, match="'fleet_size'"):
        workflow.run(fleet_size=3)
    with pytest.raises(simulacra.ConfigError, match="backend"):
        workflow.run(backend="gpu", **SHORT)


# --------------------------------------------------------------------------- offload showcase


@pytest.mark.determinism
@pytest.mark.slow
def test_offloaded_planner_trace_equals_inline(workflow: ModuleType) -> None:
    """Strict offload: the trace is the inline trace on threads and processes, 1 and 2 workers."""
    params = {"horizon": 300.0, "planner_work": 3000, "concurrency": 8}
    reference, kpis = _traced(workflow, "inline", None, **params)
    assert len(reference.filter(kinds=["plan"])) == kpis["planner_calls"] > 10
    for backend, workers in (("threads", 2), ("processes", 1), ("processes", 2)):
        trace, other = _traced(workflow, backend, workers, **params)
        simulacra.assert_equivalent(reference, trace)
        assert trace.digest() == reference.digest()
        assert other == kpis
    # The comparison has power: the planner's choices are in the trace.
    assert _traced(workflow, "inline", None, **{**params, "planner_work": 1})[0].digest() \
        != reference.digest()


# --------------------------------------------------------------------------- no network


class NetworkAttempt(AssertionError):
    pass


def _no_network(*args: object, **kwargs: object) -> None:
    raise NetworkAttempt(f"a network call was attempted: {args!r}")


def test_a_run_makes_no_network_call(workflow: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                     sweep_module: ModuleType) -> None:
    for name in ("connect", "connect_ex", "sendto"):
        monkeypatch.setattr(socket.socket, name, _no_network)
    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.setattr(socket, "getaddrinfo", _no_network)
    # The guard works: this is what any HTTP client would run into.
    with pytest.raises(NetworkAttempt), socket.socket() as sock:
        sock.connect(("127.0.0.1", 9))
    with pytest.raises(NetworkAttempt):
        socket.create_connection(("example.com", 80))
    kpis = workflow.run(seed=11)
    assert kpis["completed"] > 0
    assert workflow.run(seed=11, backend="threads", workers=2, **SHORT)["completed"] > 0
    assert len(sweep_module.sweep(servers=(1,), batch_sizes=(4,), concurrency=(8,),
                                  **SHORT)) == 1


# --------------------------------------------------------------------------- sweep and scripts


def test_sweep_rows_and_plot(sweep_module: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = sweep_module.sweep(servers=(1, 2), batch_sizes=(1, 8), concurrency=(4, 16), **SHORT)
    assert [(r["servers"], r["batch_size"], r["concurrency"]) for r in rows] == [
        (1, 1, 4), (1, 1, 16), (1, 8, 4), (1, 8, 16),
        (2, 1, 4), (2, 1, 16), (2, 8, 4), (2, 8, 16),
    ]
    png = sweep_module.plot(rows, tmp_path / "out")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = sweep_module.write_csv(rows, tmp_path / "sweep.csv")
    lines = table.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + len(rows)
    assert lines[0].startswith("servers,batch_size,concurrency,replications,tasks,")


@pytest.mark.parametrize(("options", "field"), [
    ({"replications": 0}, "replications"),
    ({"experiment_backend": "nope"}, "backend"),
    ({"experiment_workers": 0}, "workers"),
    ({"horizon": -1.0}, "horizon"),
    ({"servers": (1, 0)}, "servers"),
    ({"workers": 0, "backend": "threads"}, "max_workers"),
])
def test_sweep_check_refuses_before_any_run(sweep_module: ModuleType, options: dict[str, Any],
                                            field: str) -> None:
    """What the sweep would refuse mid-way is refused at once, before any progress bar."""
    with pytest.raises(simulacra.ConfigError, match=field):
        sweep_module.check(**options)
    sweep_module.check(replications=2, experiment_backend="processes", horizon=60.0)


@pytest.mark.determinism
@pytest.mark.slow
def test_sweep_is_the_same_on_processes(sweep_module: ModuleType) -> None:
    """The sweep's Experiment gives the same rows sequentially and on 2 worker processes."""
    grid = {"servers": (1, 2), "batch_sizes": (4,), "concurrency": (8,), "replications": 2,
            **SHORT}
    sequential = sweep_module.sweep(**grid)
    pooled = sweep_module.sweep(experiment_backend="processes", experiment_workers=2, **grid)
    assert pooled == sequential
    assert all(row["replications"] == 2 for row in sequential)
    assert all(row["p95_latency_halfwidth"] > 0 for row in sequential)
    # Common random numbers: both configurations saw the same tasks.
    assert sequential[0]["tokens_per_task"] == sequential[1]["tokens_per_task"]
    assert sequential[0]["p95_latency"] > sequential[1]["p95_latency"]


def test_script_prints_the_kpis() -> None:
    result = _script(str(EXAMPLE), "--plain", "--horizon", "300")
    assert result.returncode == 0, result.stderr
    for name in ("tasks", "mean_latency", "p95_latency", "mean_queue_depth", "cost_per_task"):
        assert name in result.stdout
    bad = _script(str(EXAMPLE), "--servers", "0")
    assert bad.returncode == 2
    assert "servers" in bad.stderr


@pytest.mark.slow
def test_script_on_processes_and_sweep(tmp_path: Path) -> None:
    """`python examples/llm_workflow` runs the planner on processes (workers import it by name)."""
    pytest.importorskip("matplotlib")
    inline = _script(str(EXAMPLE), "--plain", "--horizon", "200")
    pooled = _script(str(EXAMPLE), "--plain", "--horizon", "200", "--backend", "processes",
                     "--workers", "2")
    assert pooled.returncode == 0, pooled.stderr

    def table(out: str) -> list[str]:
        return [line for line in out.splitlines() if "wall time" not in line
                and "planner" not in line]

    assert table(pooled.stdout) == table(inline.stdout)
    swept = _script(str(EXAMPLE), "--sweep", str(tmp_path), "--horizon", "100")
    assert swept.returncode == 0, swept.stderr
    assert (tmp_path / "capacity_sweep.png").is_file()
    assert (tmp_path / "capacity_sweep.csv").is_file()


def test_cli_runs_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLE), "--seed", "3", "--set", "horizon=200"]) == 0
    out = capsys.readouterr().out
    for name in ("p95_latency", "mean_queue_depth", "cost_per_task"):
        assert name in out
