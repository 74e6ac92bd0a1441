"""The SIR example: the same epidemic on every backend, checked against independent oracles."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from simulacra import AsyncBackend, ProcessPoolBackend, SeedTree, ThreadPoolBackend

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
if str(EXAMPLES) not in sys.path:  # worker processes inherit sys.path: they import it too
    sys.path.insert(0, str(EXAMPLES))

from sir import model as sir  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _states(result: sir.RunResult) -> dict[int, tuple[str, int, int]]:
    return {i: (s["state"], s["infected_at"], s["recovered_at"])
            for i, (_, s) in result.agents.items()}


@pytest.mark.determinism
def test_the_epidemic_is_the_same_on_every_backend() -> None:
    params = {"people": 300, "degree": 5.0, "beta": 0.15, "gamma": 0.25, "steps": 25}
    reference = sir.run(11, **params)
    backends = [ThreadPoolBackend(3), ProcessPoolBackend(2), AsyncBackend(1), AsyncBackend(64)]
    try:
        for backend in backends:
            result = sir.run(11, backend=backend, **params)
            assert result.state_digests == reference.state_digests, backend
            assert result.message_digests == reference.message_digests, backend
            assert result.digest == reference.digest, backend
    finally:
        for backend in backends:
            backend.close()
    points = sir.curve(reference)
    assert points[0] == (295, 5, 0)
    assert points[-1][2] > 100  # an epidemic took off...
    assert all(sum(p) == 300 for p in points)  # ...and nobody was lost
    assert [p[0] for p in points] == sorted((p[0] for p in points), reverse=True)


def oracle(graph: nx.Graph, seed: int, sick: list[int], *, beta: float, gamma: float,
           steps: int) -> dict[int, tuple[str, int, int]]:
    """The same Reed-Frost dynamics, written directly on a networkx graph.

    It draws from the streams the model's agents use (the seed tree path
    ``agent/<id>/step/<t>/phase/1``), so it must agree exactly.
    """
    state = {v: ("I" if v in sick else "S") for v in graph}
    infected_at = {v: (0 if v in sick else -1) for v in graph}
    recovered_at = dict.fromkeys(graph, -1)
    root = SeedTree(seed)
    for t in range(steps):
        contacts = {v: sum(1 for u in graph.neighbors(v) if state[u] == "I") for v in graph}
        new = dict(state)
        for v in sorted(graph):
            stream = random.Random(root.child("agent", v, "step", t, "phase", 1).seed)
            if state[v] == "S" and contacts[v]:
                if stream.random() < 1 - (1 - beta) ** contacts[v]:
                    new[v], infected_at[v] = "I", t + 1
            elif state[v] == "I" and stream.random() < gamma:
                new[v], recovered_at[v] = "R", t + 1
        state = new
    return {v: (state[v], infected_at[v], recovered_at[v]) for v in graph}


@pytest.mark.parametrize(("seed", "p", "beta", "gamma"), [
    (0, 0.08, 0.2, 0.3), (1, 0.05, 0.5, 0.1), (2, 0.15, 0.05, 0.5)])
def test_the_model_agrees_with_a_networkx_oracle(seed: int, p: float, beta: float,
                                                 gamma: float) -> None:
    graph = nx.erdos_renyi_graph(80, p, seed=seed)
    neighbours = [sorted(graph.neighbors(v)) for v in range(80)]
    result = sir.run(seed, steps=20, neighbours=neighbours, beta=beta, gamma=gamma,
                     infected=3, backend=AsyncBackend(8))
    sick = sir.patients_zero(seed, 80, 3)

    assert _states(result) == oracle(graph, seed, sick, beta=beta, gamma=gamma, steps=20)


def test_with_certain_infection_and_no_recovery_it_is_breadth_first_search() -> None:
    """beta = 1, gamma = 0: a person falls ill exactly at their graph distance from the sick."""
    graph = nx.connected_watts_strogatz_graph(120, 4, 0.1, seed=5)
    neighbours = [sorted(graph.neighbors(v)) for v in range(120)]
    result = sir.run(5, steps=8, neighbours=neighbours, beta=1.0, gamma=0.0, infected=2)
    sick = sir.patients_zero(5, 120, 2)
    distance = nx.multi_source_dijkstra_path_length(graph, set(sick))

    for v, (state, infected_at, _) in _states(result).items():
        expected = distance[v] if distance[v] <= 8 else -1
        assert infected_at == expected, v
        assert state == ("I" if expected >= 0 else "S")


def test_the_script_runs_and_the_backend_does_not_change_the_numbers() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    outputs = []
    for backend in ("local", "async"):
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "sir"), "--people", "200", "--steps", "15",
             "--backend", backend], capture_output=True, text=True, timeout=60, check=False,
            env=env, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        outputs.append([line for line in done.stdout.splitlines()
                        if not line.startswith("(") and "backend" not in line])
    assert outputs[0] == outputs[1]
    assert any(line.startswith("final size") for line in outputs[0])
