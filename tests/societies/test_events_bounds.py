"""The early-start bounds' shortest paths (``_events._relax_vector``) against networkx.

Before a turn starts early, every agent's earliest possible resolution is
lowered along the ``World.affected_by`` edges: an agent that one it is
affected by may wake resolves no sooner than that one's bound plus the
reaction delay and ``min_duration`` (one *step* a hop). The numpy fixed point
the engine runs and the Dijkstra it ran before must both equal networkx's
multi-source Dijkstra on the same graph, with the engine's two rules: a
*pinned* agent (busy with a turn, into which a wake-up folds) is not lowered
but still reaches others, and a bound past the *horizon* is left as it was.
"""

from __future__ import annotations

import math

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra.societies._events import _inbound_matrix, _relax_heap, _relax_vector


@st.composite
def _bounds(draw: st.DrawFn) -> tuple[list[tuple[int, ...]], list[float], list[bool],
                                      float, float]:
    size = draw(st.integers(1, 14))
    affected = [tuple(sorted(draw(st.sets(st.integers(0, size - 1).filter(lambda i, j=j: i != j),
                                          max_size=min(5, size - 1)))))
                for j in range(size)]
    # Bounds on a coarse grid, so that ties between paths happen; some infinite.
    dist = draw(st.lists(st.one_of(st.just(math.inf), st.integers(0, 40).map(lambda t: t / 4)),
                         min_size=size, max_size=size))
    pinned = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    step = draw(st.sampled_from([0.25, 0.5, 0.6, 1.0]))
    horizon = draw(st.one_of(st.just(math.inf), st.integers(0, 50).map(lambda t: t / 4)))
    return affected, dist, pinned, step, horizon


def _networkx(affected: list[tuple[int, ...]], dist: list[float], pinned: list[bool],
              step: float, horizon: float) -> list[float]:
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(dist)))
    for j, sources in enumerate(affected):
        if not pinned[j]:
            graph.add_edges_from((i, j) for i in sources)
    nx.set_edge_attributes(graph, step, "weight")
    for i, t in enumerate(dist):
        if t < math.inf:
            graph.add_edge("source", i, weight=t)
    if "source" not in graph:
        return list(dist)
    lengths = nx.single_source_dijkstra_path_length(graph, "source")
    # Each hop adds *step*, so a path whose end is within the horizon stays within it.
    reached = {i: length for i, length in lengths.items() if length <= horizon}
    return [min(t, reached.get(i, math.inf)) for i, t in enumerate(dist)]


@settings(max_examples=300, deadline=None)
@given(_bounds())
def test_the_vector_and_the_heap_shortest_paths_equal_networkx(
        case: tuple[list[tuple[int, ...]], list[float], list[bool], float, float]) -> None:
    affected, dist, pinned, step, horizon = case
    expected = _networkx(affected, dist, pinned, step, horizon)
    affects: list[list[int]] = [[] for _ in dist]
    for j, sources in enumerate(affected):
        for i in sources:
            affects[i].append(j)
    assert _relax_heap(list(dist), pinned, affects, step, horizon) == expected
    inbound = _inbound_matrix(affected)
    if inbound is False:  # no agent is affected by any: nothing to lower
        assert not any(affected)
        return
    assert _relax_vector(list(dist), pinned, inbound, step, horizon) == expected


def test_an_agent_with_too_many_inbound_neighbours_falls_back_to_the_heap() -> None:
    affected = [tuple(i for i in range(70) if i != j) for j in range(70)]
    assert _inbound_matrix(affected) is False
    assert _inbound_matrix(affected, widest=69).shape == (70, 69)


def _by_definition(affected: list[tuple[int, ...]], dist: list[float], pinned: list[bool],
                   step: float, horizon: float, *, fold: list[float],
                   least: float) -> list[float]:
    """Bellman-Ford on the rule itself: a neighbour's wake-up before ``fold[j]`` folds into
    j's turn out, which then wakes j again at once: ``fold[j] + least``."""
    bound = list(dist)
    changed = True
    while changed:
        changed = False
        for j, sources in enumerate(affected):
            if pinned[j]:
                continue
            for i in sources:
                reach = fold[j] + least if bound[i] < fold[j] else bound[i] + step
                if reach <= horizon and reach < bound[j]:
                    bound[j] = reach
                    changed = True
    return bound


@settings(max_examples=300, deadline=None)
@given(_bounds(), st.data())
def test_a_wake_up_that_folds_into_a_turn_out_lowers_the_bound_to_that_turns_end(
        case: tuple[list[tuple[int, ...]], list[float], list[bool], float, float],
        data: st.DataObject) -> None:
    """An agent whose latest turn (out of order, in the forward world) resolves at
    ``fold[j]``: a neighbour that may resolve before then wakes it at once after it, so
    its next resolution may come ``least`` after ``fold[j]``, sooner than a hop."""
    affected, dist, pinned, step, horizon = case
    fold = data.draw(st.lists(st.one_of(st.just(-math.inf),
                                        st.integers(0, 40).map(lambda t: t / 4)),
                              min_size=len(dist), max_size=len(dist)))
    least = data.draw(st.sampled_from([0.0, 0.1, step / 2]))
    expected = _by_definition(affected, dist, pinned, step, horizon, fold=fold, least=least)
    affects: list[list[int]] = [[] for _ in dist]
    for j, sources in enumerate(affected):
        for i in sources:
            affects[i].append(j)
    assert _relax_heap(list(dist), pinned, affects, step, horizon, fold=fold,
                       least=least) == expected
    inbound = _inbound_matrix(affected)
    if inbound is not False:
        assert _relax_vector(list(dist), pinned, inbound, step, horizon, fold=fold,
                             least=least) == expected
