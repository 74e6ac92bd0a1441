"""Connected components by min-label propagation, as a Pregel vertex program.

Every vertex starts with its own id as label and tells its neighbours; a
vertex that hears a smaller label takes it and tells its neighbours; every
vertex votes to halt after each superstep, and a message wakes it. A
``"min"`` combiner keeps one message per recipient. The run ends when no
label changes: each vertex then holds the smallest id of its component. For a
directed graph the edges are used both ways, which gives the weakly connected
components.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulacra import Agent, Context, Model, PregelGraph, Superstep, run_pregel, run_vectorized

COMBINERS = {"label": "min"}


class LabelVertex(Agent):
    """One vertex: its label and its neighbours (both directions)."""

    def __init__(self, id: int, *, neighbors: tuple[int, ...]) -> None:
        super().__init__(id)
        self.neighbors = neighbors
        self.label = id

    def propagate(self, ctx: Context) -> None:
        changed = ctx.step == 0
        if not changed:
            smallest = min(ctx.payloads("label"))  # a halted vertex runs only with mail
            if smallest < self.label:
                self.label = smallest
                changed = True
        if changed and self.neighbors:
            ctx.broadcast("label", self.label, to=self.neighbors)
        ctx.vote_to_halt()


def labels_per_vertex(graph: PregelGraph, *, seed: int = 0,
                      max_supersteps: int = 10_000) -> list[int]:
    """Component labels with one agent per vertex (``run_pregel``), in vertex order."""
    both_ways = graph.undirected()
    model = Model(seed=seed)
    for vertex, neighbors in enumerate(both_ways.adjacency()):
        model.add(LabelVertex, vertex, neighbors=neighbors)
    result = run_pregel(model, LabelVertex.propagate, max_supersteps=max_supersteps,
                        combiners=COMBINERS)
    assert result.halted
    return [result.state(v)["label"] for v in range(graph.num_vertices)]


def propagate(ss: Superstep) -> None:
    """The vectorised vertex program: take smaller labels, pass them on, halt."""
    label = ss.state["label"]
    if ss.superstep == 0:
        changed = ss.active
    else:
        incoming = ss.messages("label")
        active = ss.active
        changed = active[incoming[active] < label[active]]
        label[changed] = incoming[changed]
    ss.send_along_edges("label", label, where=changed)
    ss.vote_to_halt()


def labels_vectorized(graph: PregelGraph, *,
                      max_supersteps: int = 10_000) -> np.ndarray[Any, Any]:
    """Component labels over numpy arrays (``run_vectorized``), in vertex order."""
    n = graph.num_vertices
    result = run_vectorized(graph.undirected(), propagate,
                            state={"label": np.arange(n, dtype=np.int64)},
                            max_supersteps=max_supersteps, combiners=COMBINERS)
    assert result.halted
    return result.state["label"]


def components(labels: Any) -> set[frozenset[int]]:
    """The components as a set of vertex sets, from labels in vertex order."""
    groups: dict[int, set[int]] = {}
    for vertex, label in enumerate(labels):
        groups.setdefault(int(label), set()).add(vertex)
    return {frozenset(group) for group in groups.values()}
