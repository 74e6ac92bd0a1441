"""PageRank as a Pregel vertex program, with networkx's exact definition.

``nx.pagerank(G, alpha, tol=tol)`` is the power iteration

    x_0 = 1/N
    x_{k+1}[v] = alpha * (sum over in-edges u->v of x_k[u] / outdeg(u)
                          + (sum of x_k over dangling vertices) / N) + (1 - alpha) / N

stopped at the first k with ``sum |x_{k+1} - x_k| < N * tol``, where dangling
vertices (no out-edges) spread their rank evenly over all vertices. As a
Pregel program, superstep 0 sends ``x_0[u] / outdeg(u)`` along every
out-edge (a ``"sum"`` combiner adds them per recipient) and dangling vertices
contribute their rank to the ``"dangling"`` aggregator; superstep k >= 1
computes x_k from the combined message and the aggregate, contributes
``|x_k - x_{k-1}|`` to the ``"err"`` aggregator and sends again. In the
superstep after the one whose error sum is below ``N * tol`` every vertex
votes to halt without updating, so the ranks are networkx's x_k, and the run
ends. Each expression is written in networkx's form (``x * (1 / deg)``,
``d * (1 / N)``) so that the rounding is the same too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulacra import (
    Agent,
    ConfigError,
    Context,
    Model,
    PregelGraph,
    PregelResult,
    Superstep,
    VectorizedResult,
    run_pregel,
    run_vectorized,
)

ALPHA = 0.85
TOL = 1.0e-6
MAX_ITER = 100
COMBINERS = {"rank": "sum"}
AGGREGATORS = {"dangling": "sum", "err": "sum"}


class PageRankVertex(Agent):
    """One vertex: its rank and its out-neighbours."""

    def __init__(self, id: int, *, out: tuple[int, ...], n: int, alpha: float = ALPHA,
                 tol: float = TOL) -> None:
        super().__init__(id)
        self.out = out
        self.n = n
        self.alpha = alpha
        self.tol = tol
        self.rank = 1.0 / n

    def compute(self, ctx: Context) -> None:
        if ctx.step > 0:
            err = ctx.aggregated("err")
            if err is not None and err < self.n * self.tol:
                ctx.vote_to_halt()  # converged in the last superstep: keep that rank
                return
            incoming = 0.0
            for share in ctx.payloads("rank"):  # one message: the combiner summed them
                incoming += share
            dangling = ctx.aggregated("dangling") or 0.0
            inv_n = 1.0 / self.n
            rank = self.alpha * (incoming + dangling * inv_n) + (1.0 - self.alpha) * inv_n
            ctx.aggregate("err", abs(rank - self.rank))
            self.rank = rank
        if self.out:
            ctx.broadcast("rank", self.rank * (1.0 / len(self.out)), to=self.out)
        else:
            ctx.aggregate("dangling", self.rank)


def _converged(result: PregelResult | VectorizedResult, max_iter: int) -> None:
    if not result.halted:
        raise ConfigError(f"PageRank did not converge within max_iter={max_iter} iterations")


def pagerank_per_vertex(graph: PregelGraph, *, alpha: float = ALPHA, tol: float = TOL,
                        max_iter: int = MAX_ITER, seed: int = 0) -> list[float]:
    """PageRank with one agent per vertex (``run_pregel``); ranks in vertex order."""
    n = graph.num_vertices
    model = Model(seed=seed)
    for vertex, out in enumerate(graph.adjacency()):
        model.add(PageRankVertex, vertex, out=out, n=n, alpha=alpha, tol=tol)
    result = run_pregel(model, PageRankVertex.compute, max_supersteps=max_iter + 2,
                        combiners=COMBINERS, aggregators=AGGREGATORS)
    _converged(result, max_iter)
    return [result.state(v)["rank"] for v in range(n)]


def pagerank_vectorized(graph: PregelGraph, *, alpha: float = ALPHA, tol: float = TOL,
                        max_iter: int = MAX_ITER) -> np.ndarray[Any, Any]:
    """PageRank over numpy arrays (``run_vectorized``); ranks in vertex order."""
    n = graph.num_vertices
    degree = graph.out_degree
    dangling_ids = np.flatnonzero(degree == 0)
    inv_degree = np.zeros(n)
    np.divide(1.0, degree, out=inv_degree, where=degree > 0)
    inv_n = 1.0 / n
    threshold = n * tol

    def compute(ss: Superstep) -> None:
        rank = ss.state["rank"]
        if ss.superstep > 0:
            err = ss.aggregated("err")
            if err is not None and err < threshold:
                ss.vote_to_halt()
                return
            dangling = ss.aggregated("dangling") or 0.0
            new = alpha * (ss.messages("rank") + dangling * inv_n) + (1.0 - alpha) * inv_n
            ss.aggregate("err", np.abs(new - rank))
            rank[:] = new  # every vertex is active until they all halt together
        ss.send_along_edges("rank", rank * inv_degree)
        ss.aggregate("dangling", rank[dangling_ids])

    result = run_vectorized(graph, compute, state={"rank": np.full(n, inv_n)},
                            max_supersteps=max_iter + 2, combiners=COMBINERS,
                            aggregators=AGGREGATORS)
    _converged(result, max_iter)
    return result.state["rank"]
