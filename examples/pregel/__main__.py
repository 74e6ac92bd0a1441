"""``python examples/pregel``: PageRank and components on a seeded random graph, both APIs.

Prints the top PageRank vertices, the number of weakly connected
components, and -- when networkx is installed -- the L1 difference to
``nx.pagerank`` and whether the components equal networkx's. Options:
``--vertices N``, ``--edges M``, ``--seed S``. It needs numpy (the graphs are
arrays): ``python -m pip install '.[numpy]'``; without it, it says so in one
line and exits with status 2 before doing anything.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if importlib.util.find_spec("simulacra") is None:  # a source checkout without `pip install`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

try:
    import numpy as np
except ImportError:  # checked before anything runs: every module of this example needs it
    print("examples/pregel needs numpy: python -m pip install '.[numpy]' in a clone of simulacra",
          file=sys.stderr)
    sys.exit(2)

from simulacra import SimError

if __package__:
    from .components import components, labels_per_vertex, labels_vectorized
    from .graphs import random_graph
    from .pagerank import pagerank_per_vertex, pagerank_vectorized
else:  # `python examples/pregel`: this directory is on sys.path, not its parent
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from pregel.components import (  # type: ignore[import-not-found,no-redef,unused-ignore]
        components,
        labels_per_vertex,
        labels_vectorized,
    )
    from pregel.graphs import random_graph  # type: ignore[import-not-found,no-redef,unused-ignore]
    from pregel.pagerank import (  # type: ignore[import-not-found,no-redef,unused-ignore]
        pagerank_per_vertex,
        pagerank_vectorized,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python examples/pregel",
                                     description="Pregel PageRank and components")
    parser.add_argument("--vertices", type=int, default=2000)
    parser.add_argument("--edges", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        graph = random_graph(args.seed, args.vertices, args.edges)
    except SimError as exc:  # the graph checks --vertices and --edges
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"random directed graph: {graph.num_vertices} vertices, {graph.num_edges} edges, "
          f"seed {args.seed}")

    start = time.perf_counter()
    per_vertex = np.array(pagerank_per_vertex(graph))
    middle = time.perf_counter()
    vectorized = pagerank_vectorized(graph)
    end = time.perf_counter()
    print(f"PageRank: per-vertex {middle - start:.3f} s, vectorised {end - middle:.3f} s, "
          f"identical: {bool(np.array_equal(per_vertex, vectorized))}")
    top = np.argsort(-vectorized, kind="stable")[:5]
    print("  top 5: " + ", ".join(f"{v}: {vectorized[v]:.6f}" for v in top))

    labels = labels_per_vertex(graph)
    same = labels == labels_vectorized(graph).tolist()
    found = components(labels)
    print(f"components: {len(found)} (largest {max(len(c) for c in found)}), "
          f"both APIs identical: {same}")

    if importlib.util.find_spec("networkx") is not None:
        import networkx as nx  # noqa: PLC0415  (optional: the oracle)

        g = nx.DiGraph()
        g.add_nodes_from(range(graph.num_vertices))
        g.add_edges_from(zip(graph.sources.tolist(), graph.targets.tolist(), strict=True))
        expected = nx.pagerank(g)
        l1 = sum(abs(expected[v] - vectorized[v]) for v in range(graph.num_vertices))
        oracle = {frozenset(c) for c in nx.weakly_connected_components(g)}
        print(f"networkx: PageRank L1 difference {l1:.3e}, components equal: {found == oracle}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's exit status, no traceback
        print("interrupted", file=sys.stderr)
        sys.exit(130)
