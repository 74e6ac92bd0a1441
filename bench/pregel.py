"""PageRank: the vectorised Pregel path next to networkx and a plain scipy power iteration.

One seeded random directed graph (default 100 000 vertices, 1 000 000
distinct edges, drawn by ``examples/pregel/graphs.py``), the same PageRank
definition everywhere (networkx's: alpha 0.85, tol 1e-6 on the L1 change
scaled by N, dangling rank spread uniformly). Contestants, all timed in each
round, in an order that rotates every round; the table gives medians, and
the ratios are taken inside each round (so that the drift of a shared machine
cancels) and given as median [min-max] over the rounds:

* ``networkx``: ``nx.pagerank(G)`` on a prebuilt ``nx.DiGraph`` (most of its
  time goes into ``to_scipy_sparse_array``); building the DiGraph from the
  edge arrays is reported on its own line;
* ``scipy``: a hand-written power iteration -- ``csr_array`` from the edge
  arrays, row-normalised, then networkx's loop -- timed from the edge arrays;
* ``pregel (vectorised)``: ``PregelGraph`` from the edge arrays plus
  ``run_vectorized`` with the example's vertex program, timed from the edge
  arrays (the graph build is also shown alone);
* ``pregel (per vertex)``: one agent per vertex on ``run_pregel``, on a
  smaller graph (default 10 000 vertices, 100 000 edges, one round), next to
  the vectorised path and networkx on that same graph.

Every result is checked: the L1 difference to networkx must be <= 1e-8 and
the two Pregel APIs must agree bit for bit; the script exits with status 1
if not. Ratios: networkx / pregel (the target: > 1, faster than networkx) and
pregel / scipy (the target: <= 4).

Usage::

    python bench/pregel.py                   # 3 rounds on the full graph
    python bench/pregel.py --quick           # sizes / 10, a smoke test
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "examples"))

import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from pregel.graphs import random_edges  # noqa: E402
from pregel.pagerank import pagerank_per_vertex, pagerank_vectorized  # noqa: E402

from simulacra import PregelGraph  # noqa: E402

ALPHA, TOL, MAX_ITER = 0.85, 1.0e-6, 100


def scipy_pagerank(src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any], n: int) -> Any:
    """networkx's power iteration, written directly on a scipy CSR matrix."""
    a = sp.csr_array((np.ones(src.size), (src, dst)), shape=(n, n))
    s = np.asarray(a.sum(axis=1)).ravel()
    nonzero = s != 0
    s[nonzero] = 1.0 / s[nonzero]
    a = sp.dia_array((s, 0), shape=(n, n)).tocsr() @ a
    at = a.T.tocsr()  # x @ A as A.T @ x: a CSR product by rows
    x = np.full(n, 1.0 / n)
    p = np.full(n, 1.0 / n)
    dangling = np.flatnonzero(~nonzero)
    for _ in range(MAX_ITER):
        last = x
        x = ALPHA * (at @ x + x[dangling].sum() * p) + (1 - ALPHA) * p
        if np.abs(x - last).sum() < n * TOL:
            return x
    raise RuntimeError("scipy power iteration did not converge")


def digraph(src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any], n: int) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    return g


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def l1(expected: dict[int, float], got: Any) -> float:
    return float(np.abs(np.array([expected[v] for v in range(len(expected))]) - got).sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vertices", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--small-vertices", type=int, default=10_000)
    parser.add_argument("--small-edges", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="sizes / 10, one round")
    args = parser.parse_args()
    if args.quick:
        args.vertices //= 10
        args.edges //= 10
        args.small_vertices //= 10
        args.small_edges //= 10
        args.rounds = 1
    ok = True
    print(f"# bench/pregel.py  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC  python "
          f"{platform.python_version()}  numpy {np.__version__}  scipy {scipy.__version__}  "
          f"networkx {nx.__version__}  cpus {os.cpu_count()}  "
          f"load {os.getloadavg()[0]:.2f}")

    n = args.vertices
    src, dst = random_edges(args.seed, n, args.edges)
    print(f"graph: {n} vertices, {src.size} edges (seed {args.seed}); {args.rounds} rounds")
    build_nx, g = timed(lambda: digraph(src, dst, n))
    expected: dict[int, float] = nx.pagerank(g)

    contestants: dict[str, Callable[[], Any]] = {
        "networkx": lambda: nx.pagerank(g),
        "scipy": lambda: scipy_pagerank(src, dst, n),
        "pregel (vectorised)": lambda: pagerank_vectorized(PregelGraph(src, dst, n)),
    }
    times: dict[str, list[float]] = {name: [] for name in contestants}
    graph_builds: list[float] = []
    names = list(contestants)
    for round_ in range(args.rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            seconds, value = timed(contestants[name])
            times[name].append(seconds)
            x = value if name != "networkx" else np.array([value[v] for v in range(n)])
            error = l1(expected, x)
            if error > 1e-8:
                print(f"!! {name}: L1 difference to networkx {error:.3e} > 1e-8")
                ok = False
        seconds, _ = timed(lambda: PregelGraph(src, dst, n))
        graph_builds.append(seconds)
    median = {name: statistics.median(values) for name, values in times.items()}
    pregel = median["pregel (vectorised)"]
    print(f"\n{'contestant':<34} {'median s':>9}  {'min s':>7}  {'max s':>7}")
    print(f"{'nx.DiGraph build (not in networkx)':<34} {build_nx:>9.3f}")
    for name in names:
        print(f"{name:<34} {median[name]:>9.3f}  {min(times[name]):>7.3f}  "
              f"{max(times[name]):>7.3f}")
    print(f"{'  of which PregelGraph build':<34} {statistics.median(graph_builds):>9.3f}")
    vec_times = times["pregel (vectorised)"]

    def ratios(top: list[float], bottom: list[float]) -> str:
        each = [a / b for a, b in zip(top, bottom, strict=True)]
        return f"{statistics.median(each):.2f}x [{min(each):.2f}-{max(each):.2f}]"

    print(f"\nnetworkx / pregel (vectorised): {ratios(times['networkx'], vec_times)} "
          f"(target > 1: faster than networkx)")
    print(f"pregel (vectorised) / scipy:    {ratios(vec_times, times['scipy'])} (target <= 4)")
    print(f"(ratio of the medians: {median['networkx'] / pregel:.2f}x and "
          f"{pregel / median['scipy']:.2f}x)")
    vec = pagerank_vectorized(PregelGraph(src, dst, n))
    print(f"L1 difference to networkx: pregel {l1(expected, vec):.2e}, scipy "
          f"{l1(expected, scipy_pagerank(src, dst, n)):.2e}")

    m = args.small_vertices
    small_src, small_dst = random_edges(args.seed, m, args.small_edges)
    small = PregelGraph(small_src, small_dst, m)
    small_g = digraph(small_src, small_dst, m)
    t_nx, small_expected = timed(lambda: nx.pagerank(small_g))
    t_vec, small_vec = timed(lambda: pagerank_vectorized(small))
    t_agents, small_agents = timed(lambda: pagerank_per_vertex(small))
    identical = small_vec.tolist() == small_agents
    ok = ok and identical and l1(small_expected, np.array(small_agents)) <= 1e-8
    print(f"\nper-vertex API, graph of {m} vertices and {small_src.size} edges (one round):")
    print(f"{'networkx':<34} {t_nx:>9.3f}")
    print(f"{'pregel (vectorised)':<34} {t_vec:>9.3f}")
    print(f"{'pregel (per vertex, run_pregel)':<34} {t_agents:>9.3f}")
    print(f"per vertex / vectorised: {t_agents / t_vec:.0f}x; per vertex / networkx: "
          f"{t_agents / t_nx:.1f}x; both APIs bit-identical: {identical}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
