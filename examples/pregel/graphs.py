"""Seeded random graphs as edge arrays: the same seed gives the same graph everywhere."""

from __future__ import annotations

from typing import Any

import numpy as np

from simulacra import ConfigError, PregelGraph, SeedTree


def random_edges(seed: int | str, vertices: int, edges: int, *,
                 self_loops: bool = False) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """*edges* distinct directed edges drawn uniformly, in draw order (not sorted).

    The generator is the numpy stream ``"graph"`` of ``SeedTree(seed)``.
    """
    if vertices < 1:
        raise ConfigError(f"random graph: vertices must be an int >= 1, got {vertices!r}")
    if edges < 0:
        raise ConfigError(f"random graph: edges must be an int >= 0, got {edges!r}")
    possible = vertices * vertices - (0 if self_loops else vertices)
    if edges > possible:
        raise ConfigError(f"{vertices} vertices have only {possible} possible edges, not {edges}")
    rng = SeedTree(seed).np_rng("graph")
    keys = np.zeros(0, dtype=np.int64)
    while True:
        draw = max(2 * (edges - keys.size), 64)
        src = rng.integers(0, vertices, size=draw, dtype=np.int64)
        dst = rng.integers(0, vertices, size=draw, dtype=np.int64)
        if not self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
        keys = np.concatenate([keys, src * vertices + dst])
        _, first = np.unique(keys, return_index=True)
        if first.size >= edges:
            keys = keys[np.sort(first)[:edges]]  # the first draw of each edge, in draw order
            return keys // vertices, keys % vertices
        keys = keys[np.sort(first)]


def random_graph(seed: int | str, vertices: int, edges: int, *,
                 self_loops: bool = False) -> PregelGraph:
    """A :class:`PregelGraph` of :func:`random_edges`."""
    src, dst = random_edges(seed, vertices, edges, self_loops=self_loops)
    return PregelGraph(src, dst, vertices)
