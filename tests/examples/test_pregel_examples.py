"""The Pregel examples against networkx: PageRank and (weakly) connected components.

Both APIs (agents on ``run_pregel``, arrays on ``run_vectorized``) must give
bit-identical results, PageRank within 1e-8 (L1) of ``nx.pagerank``, and
exactly networkx's components -- on Hypothesis graphs and on seeded larger ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import ConfigError, PregelGraph

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from pregel import components as cc  # noqa: E402
from pregel import graphs  # noqa: E402
from pregel import pagerank as pr  # noqa: E402


def _digraph(graph: PregelGraph) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(graph.num_vertices))
    g.add_edges_from(zip(graph.sources.tolist(), graph.targets.tolist(), strict=True))
    return g


def _check_pagerank(graph: PregelGraph, **options: float) -> None:
    g = _digraph(graph)
    try:
        expected = nx.pagerank(g, **options)
    except nx.PowerIterationFailedConvergence:
        with pytest.raises(ConfigError, match="did not converge"):
            pr.pagerank_vectorized(graph, **options)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="did not converge"):
            pr.pagerank_per_vertex(graph, **options)  # type: ignore[arg-type]
        return
    vectorized = pr.pagerank_vectorized(graph, **options)  # type: ignore[arg-type]
    per_vertex = pr.pagerank_per_vertex(graph, **options)  # type: ignore[arg-type]

    assert vectorized.tolist() == per_vertex  # bit for bit
    l1 = sum(abs(expected[v] - per_vertex[v]) for v in range(graph.num_vertices))
    assert l1 <= 1e-8


def _check_components(graph: PregelGraph) -> None:
    per_vertex = cc.labels_per_vertex(graph)
    vectorized = cc.labels_vectorized(graph)

    assert vectorized.tolist() == per_vertex
    found = cc.components(per_vertex)
    g = _digraph(graph)
    assert found == {frozenset(c) for c in nx.weakly_connected_components(g)}
    undirected = nx.Graph(g)
    assert found == {frozenset(c) for c in nx.connected_components(undirected)}
    # Each label is the smallest vertex of its component.
    assert all(per_vertex[v] == min(c) for c in found for v in c)


small_graphs = st.integers(1, 25).flatmap(lambda n: st.builds(
    lambda pairs: PregelGraph([u for u, _ in pairs], [v for _, v in pairs], n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60,
             unique=True)))


@settings(max_examples=60, deadline=None)
@given(small_graphs, st.sampled_from([0.85, 0.5, 0.99]))
def test_pagerank_matches_networkx_on_generated_graphs(graph: PregelGraph, alpha: float) -> None:
    _check_pagerank(graph, alpha=alpha)


@settings(max_examples=60, deadline=None)
@given(small_graphs)
def test_components_match_networkx_on_generated_graphs(graph: PregelGraph) -> None:
    _check_components(graph)


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "vertices", "edges"), [
    (0, 2000, 8000),   # dense enough for one giant component
    (1, 3000, 2500),   # sparse: many dangling vertices and small components
    (2, 500, 5000),
])
def test_seeded_larger_graphs(seed: int, vertices: int, edges: int) -> None:
    graph = graphs.random_graph(seed, vertices, edges)
    _check_pagerank(graph)
    _check_pagerank(graph, alpha=0.9, tol=1e-9)
    _check_components(graph)


def test_a_graph_with_self_loops() -> None:
    graph = graphs.random_graph(4, 300, 900, self_loops=True)
    assert bool(np.any(graph.sources == graph.targets))
    _check_pagerank(graph)
    _check_components(graph)


def test_pagerank_that_does_not_converge_says_so() -> None:
    graph = graphs.random_graph(5, 50, 120)
    _check_pagerank(graph, tol=1e-30, max_iter=5)  # networkx raises: so do both APIs


def test_random_graphs_are_seeded() -> None:
    a = graphs.random_edges(7, 100, 300)
    b = graphs.random_edges(7, 100, 300)
    c = graphs.random_edges(8, 100, 300)

    assert a[0].tolist() == b[0].tolist()
    assert a[1].tolist() == b[1].tolist()
    assert a[0].tolist() != c[0].tolist()
    assert len(set(zip(a[0].tolist(), a[1].tolist(), strict=True))) == 300


@pytest.mark.timeout(120)
def test_the_example_script_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "pregel"), "--vertices", "300", "--edges", "900"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=110, check=False)

    assert result.returncode == 0, result.stderr
    assert "identical: True" in result.stdout
    assert "both APIs identical: True" in result.stdout
    assert "components equal: True" in result.stdout
