"""Pregel over numpy arrays: vertex programs as array functions over all active vertices.

The per-vertex path (:class:`~simulacra.backends.PregelBackend`) calls one
Python action per agent per superstep. This path keeps vertex state in numpy
arrays, the graph in CSR form (:class:`PregelGraph`), and calls the vertex
program once per superstep with a :class:`Superstep` view: the program reads
and writes the state arrays at ``ss.active``, sends messages as arrays, and
the messages of each topic are combined per recipient with ``np.bincount``
(sum) or ``np.minimum.at`` / ``np.maximum.at``.

The semantics are those of the per-vertex path, bit for bit where the
program does the same arithmetic:

* a superstep runs the program on the active vertices; a vertex that votes to
  halt is inactive until a message reaches it; the run ends before a
  superstep when every vertex has halted and no message is in flight, or at
  ``max_supersteps``;
* messages of one topic are combined per recipient by folding their values
  left in the order ``(sender, send order)`` -- for a vertex program that
  sends along out-edges, the CSR order, which is the order of
  :meth:`PregelGraph.adjacency` that per-vertex programs broadcast to;
* aggregator contributions are folded left in the order given (give them in
  vertex id order, one per vertex, to match the per-vertex path), and the
  result is ``ss.aggregated(name)`` in the next superstep, a Python scalar, or
  ``None`` when nobody contributed.

numpy is imported when this path is used, never when ``simulacra`` is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, final

from simulacra._util import install_hint
from simulacra.errors import AgentActionError, BackendUnavailable, ConfigError

from ._pregel import check_max_supersteps, check_reducers

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = ["VECTOR_SCHEME", "PregelGraph", "Superstep", "VectorizedResult", "run_vectorized"]

#: Header of a vectorised run's digest.
VECTOR_SCHEME: Final = "simulacra.engines.pregel-vector.v1"


def _require_numpy() -> None:
    try:
        import numpy  # noqa: F401, PLC0415  (an optional extra)
    except ImportError as exc:
        raise BackendUnavailable(
            "the vectorised Pregel path needs numpy, which is not installed: "
            f"{install_hint('numpy')}"
        ) from exc


def _int_array(value: object, field: str) -> NDArray[Any]:
    import numpy as np  # noqa: PLC0415

    array = np.asarray(value)
    if array.ndim != 1:
        raise ConfigError(f"{field} must be a 1-D array of vertex ids, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind not in "iu":
        raise ConfigError(f"{field} must hold integer vertex ids, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def _stable_order(keys: NDArray[Any], n: int) -> NDArray[Any]:
    """The permutation that sorts *keys* (ints in 0 .. n - 1) stably.

    numpy sorts 16-bit integers stably by radix, in linear time, where a
    stable sort of int64 is a merge sort: for up to 2**32 vertices, sort by
    the low 16 bits, then stably by the high 16 bits (an LSD radix sort).
    """
    import numpy as np  # noqa: PLC0415

    if n > 1 << 32:
        order: NDArray[Any] = np.argsort(keys, kind="stable")
        return order
    order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    if n > 1 << 16:
        high = (keys >> 16).astype(np.uint16)[order]
        order = order[np.argsort(high, kind="stable")]
    return order


def _readonly(array: NDArray[Any]) -> NDArray[Any]:
    array.flags.writeable = False
    return array


@final
class PregelGraph:
    """A directed graph on vertices ``0 .. num_vertices - 1``, in CSR form by source.

    Edges keep their given order within each source (the sort by source is
    stable); that order is the send order of :meth:`Superstep.send_along_edges`.
    Parallel edges and self-loops are kept as given.

    Args:
        sources: The source vertex of each edge (integers).
        targets: The target vertex of each edge, same length.
        num_vertices: How many vertices (an int >= 0); default: one more
            than the largest id in the edges, or 0.

    Raises:
        ConfigError: The arrays are not 1-D integer arrays of one length, an
            id is outside ``0 .. num_vertices - 1``, or *num_vertices* is bad.
        BackendUnavailable: numpy is not installed.
    """

    __slots__ = ("_n", "_offsets", "_out_degree", "_sources", "_targets")

    def __init__(self, sources: ArrayLike, targets: ArrayLike,
                 num_vertices: int | None = None) -> None:
        _require_numpy()
        import numpy as np  # noqa: PLC0415

        src = _int_array(sources, "sources")
        dst = _int_array(targets, "targets")
        if src.shape != dst.shape:
            raise ConfigError(
                f"sources and targets must have one length, got {src.size} and {dst.size}"
            )
        largest = int(max(src.max(), dst.max())) if src.size else -1
        smallest = int(min(src.min(), dst.min())) if src.size else 0
        given: object = num_vertices
        if given is None:
            n = largest + 1
        elif isinstance(given, bool) or not isinstance(given, int) or given < 0:
            raise ConfigError(
                f"num_vertices must be an int >= 0 or None, got {type(given).__name__} {given!r}"
            )
        else:
            n = given
        if smallest < 0 or largest >= n:
            bad = smallest if smallest < 0 else largest
            raise ConfigError(
                f"edge endpoint {bad} is not a vertex: ids must be in 0 .. {n - 1} "
                f"(num_vertices={n})"
            )
        if src.size and not bool(np.all(src[1:] >= src[:-1])):
            order = _stable_order(src, n)
            src, dst = src[order], dst[order]
        else:
            src, dst = src.copy(), dst.copy()
        degree = np.bincount(src, minlength=n).astype(np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(degree, out=offsets[1:])
        self._n = n
        self._sources = _readonly(src)
        self._targets = _readonly(dst)
        self._out_degree = _readonly(degree)
        self._offsets = _readonly(offsets)

    @property
    def num_vertices(self) -> int:
        """How many vertices."""
        return self._n

    @property
    def num_edges(self) -> int:
        """How many edges."""
        return int(self._sources.size)

    @property
    def sources(self) -> NDArray[Any]:
        """The source of each edge, in CSR order (non-decreasing); read-only."""
        return self._sources

    @property
    def targets(self) -> NDArray[Any]:
        """The target of each edge, in CSR order; read-only."""
        return self._targets

    @property
    def offsets(self) -> NDArray[Any]:
        """CSR offsets: vertex ``v``'s out-edges are ``offsets[v]:offsets[v + 1]``; read-only."""
        return self._offsets

    @property
    def out_degree(self) -> NDArray[Any]:
        """Each vertex's number of out-edges; read-only."""
        return self._out_degree

    def out_neighbors(self, vertex: int) -> NDArray[Any]:
        """The targets of *vertex*'s out-edges, in CSR order."""
        given: object = vertex
        if isinstance(given, bool) or not isinstance(given, int) or not 0 <= given < self._n:
            raise ConfigError(f"vertex must be an int in 0 .. {self._n - 1}, got {vertex!r}")
        return self._targets[self._offsets[vertex]:self._offsets[vertex + 1]]

    def adjacency(self) -> list[tuple[int, ...]]:
        """Every vertex's out-neighbours as a tuple of ints, in CSR order (for agents)."""
        targets = self._targets.tolist()
        offsets = self._offsets.tolist()
        return [tuple(targets[offsets[v]:offsets[v + 1]]) for v in range(self._n)]

    def reversed(self) -> PregelGraph:
        """The graph with every edge turned around."""
        return PregelGraph(self._targets, self._sources, self._n)

    def undirected(self) -> PregelGraph:
        """Every edge in both directions: a vertex's out-edges, then its in-edges."""
        import numpy as np  # noqa: PLC0415

        return PregelGraph(np.concatenate([self._sources, self._targets]),
                           np.concatenate([self._targets, self._sources]), self._n)

    def __repr__(self) -> str:
        return f"<PregelGraph: {self._n} vertices, {self.num_edges} edges>"


def _identity(np: Any, reducer: str, dtype: Any) -> Any:
    """The value a combiner leaves where no message arrived."""
    if reducer == "sum":
        return dtype.type(0)
    if dtype.kind == "f":
        return np.inf if reducer == "min" else -np.inf
    if dtype.kind == "b":
        return reducer == "min"
    info = np.iinfo(dtype)
    return info.max if reducer == "min" else info.min


@final
class Superstep:
    """What the vertex program sees and does in one superstep (one call).

    Attributes:
        superstep: The superstep number, from 0.
        graph: The graph.
        state: The vertex state arrays, by name (write only at :attr:`active`).
        active: The ids of the active vertices, sorted (an int64 array).
        all_active: Whether every vertex is active (then ``active`` is ``arange(n)``).
    """

    __slots__ = ("_aggregators", "_combiners", "_contributions", "_inbox", "_np", "_outgoing",
                 "_previous", "_votes", "active", "active_mask", "all_active", "graph", "state",
                 "superstep")

    def __init__(self, np: Any, *, superstep: int, graph: PregelGraph,
                 state: dict[str, NDArray[Any]], active: NDArray[Any], active_mask: NDArray[Any],
                 all_active: bool, inbox: Mapping[str, tuple[NDArray[Any], NDArray[Any]]],
                 combiners: Mapping[str, str], aggregators: Mapping[str, str],
                 previous: Mapping[str, Any]) -> None:
        self._np = np
        self.superstep = superstep
        self.graph = graph
        self.state = state
        self.active = active
        self.active_mask = active_mask
        self.all_active = all_active
        self._inbox = inbox
        self._combiners = combiners
        self._aggregators = aggregators
        self._previous = previous
        self._outgoing: dict[str, list[tuple[NDArray[Any], NDArray[Any], NDArray[Any], bool]]] = {}
        self._contributions: dict[str, list[NDArray[Any]]] = {}
        self._votes: list[NDArray[Any]] = []

    @property
    def num_vertices(self) -> int:
        """How many vertices."""
        return self.graph.num_vertices

    def _topic(self, topic: object) -> str:
        if not isinstance(topic, str) or topic not in self._combiners:
            known = ", ".join(repr(t) for t in self._combiners) or "none"
            raise ConfigError(
                f"topic {topic!r} has no combiner (the vectorised path combines every topic; "
                f"declared: {known})"
            )
        return topic

    def messages(self, topic: str) -> NDArray[Any]:
        """The combined value of *topic* for every vertex, from the last superstep.

        Where no message arrived (see :meth:`received`) the value is the
        combiner's identity: 0 for sum, +inf (or the dtype's largest) for
        min, -inf (or the smallest) for max. Before the first message of the
        topic, all of them are 0.0 (float64).
        """
        topic = self._topic(topic)
        got = self._inbox.get(topic)
        if got is None:
            zeros: NDArray[Any] = self._np.zeros(self.graph.num_vertices)
            return zeros
        return got[0]

    def received(self, topic: str | None = None) -> NDArray[Any]:
        """A bool array: which vertices received a message (of *topic*) at the last boundary."""
        np = self._np
        mask: NDArray[Any] = np.zeros(self.graph.num_vertices, dtype=bool)
        if topic is None:
            for _, received in self._inbox.values():
                mask |= received
            return mask
        got = self._inbox.get(self._topic(topic))
        return mask if got is None else got[1]

    def _ids(self, which: ArrayLike, field: str) -> NDArray[Any]:
        np = self._np
        array = np.asarray(which)
        if array.dtype == bool:
            if array.shape != (self.graph.num_vertices,):
                raise ConfigError(
                    f"{field} as a bool mask must have shape ({self.graph.num_vertices},), "
                    f"got {array.shape}"
                )
            chosen: NDArray[Any] = np.flatnonzero(array)
            return chosen
        ids = _int_array(array, field)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.graph.num_vertices):
            raise ConfigError(f"{field} holds ids outside 0 .. {self.graph.num_vertices - 1}")
        return ids

    def _check_active(self, ids: NDArray[Any], field: str) -> None:
        if not self.all_active and ids.size and not bool(self.active_mask[ids].all()):
            bad = int(ids[~self.active_mask[ids]][0])
            raise ConfigError(f"{field}: vertex {bad} is not active in superstep {self.superstep}")

    def send(self, topic: str, sources: ArrayLike, targets: ArrayLike, values: ArrayLike) -> None:
        """Send one message per element: ``values[i]`` from ``sources[i]`` to ``targets[i]``.

        Messages are combined in the order (sender, send order), so the
        messages of one sender keep the order of the arrays.

        Raises:
            ConfigError: *topic* has no combiner, the arrays differ in
                length, an id is not a vertex, or a sender is not active.
        """
        np = self._np
        topic = self._topic(topic)
        src = self._ids(sources, "sources")
        dst = self._ids(targets, "targets")
        vals = np.asarray(values)
        if vals.ndim == 0:
            vals = np.full(src.shape, vals)
        if not src.shape == dst.shape == vals.shape:
            raise ConfigError(
                f"send({topic!r}): sources, targets and values must have one length, got "
                f"{src.size}, {dst.size} and {vals.size}"
            )
        self._check_active(src, "send(sources)")
        self._outgoing.setdefault(topic, []).append((src, dst, vals, False))

    def send_along_edges(self, topic: str, values: ArrayLike,
                         where: ArrayLike | None = None) -> None:
        """Send ``values[u]`` along every out-edge of each active vertex ``u`` (of *where*).

        Args:
            topic: The messages' topic (it must have a combiner).
            values: One value per vertex (length ``num_vertices``) or a scalar.
            where: Send only from these active vertices (ids or a bool mask);
                default: every active vertex.

        Raises:
            ConfigError: *topic* has no combiner, *values* has the wrong
                length, or *where* names a vertex that is not active.
        """
        np = self._np
        topic = self._topic(topic)
        graph = self.graph
        vals = np.asarray(values)
        if vals.ndim == 0:
            vals = np.full(graph.num_vertices, vals)
        if vals.shape != (graph.num_vertices,):
            raise ConfigError(
                f"send_along_edges({topic!r}): values must have shape ({graph.num_vertices},), "
                f"got {vals.shape}"
            )
        if where is None and self.all_active:
            src, dst = graph.sources, graph.targets
        else:
            if where is None:
                selected = self.active_mask
            else:
                ids = self._ids(where, "where")
                self._check_active(ids, "send_along_edges(where)")
                selected = np.zeros(graph.num_vertices, dtype=bool)
                selected[ids] = True
            keep = selected[graph.sources]
            src, dst = graph.sources[keep], graph.targets[keep]
        self._outgoing.setdefault(topic, []).append((src, dst, vals[src], True))

    def aggregate(self, name: str, values: ArrayLike) -> None:
        """Contribute *values* (a scalar, or an array folded left in its order) to *name*.

        Raises:
            ConfigError: No aggregator *name* was declared.
        """
        if name not in self._aggregators:
            raise _undeclared(name, self._aggregators)
        array = self._np.asarray(values)
        self._contributions.setdefault(name, []).append(array.reshape(-1))

    def aggregated(self, name: str) -> Any:
        """Aggregator *name* reduced over the previous superstep (``None``: no contribution).

        Raises:
            ConfigError: No aggregator *name* was declared.
        """
        if name not in self._aggregators:
            raise _undeclared(name, self._aggregators)
        return self._previous.get(name)

    def vote_to_halt(self, which: ArrayLike | None = None) -> None:
        """Halt these vertices (ids or a bool mask; default: every active vertex).

        Each stays inactive from the next superstep until a message reaches it.
        """
        self._votes.append(self.active if which is None else self._ids(which, "vote_to_halt"))

    def __repr__(self) -> str:
        return (f"<Superstep {self.superstep}: {self.active.size} of "
                f"{self.graph.num_vertices} vertices active>")


def _undeclared(name: object, declared: Mapping[str, Any]) -> ConfigError:
    known = ", ".join(repr(n) for n in declared) or "none"
    return ConfigError(f"aggregator {name!r} was not declared (declared: {known})")


def _combine(np: Any, reducer: str, n: int,
             parts: list[tuple[NDArray[Any], NDArray[Any], NDArray[Any], bool]]
             ) -> tuple[NDArray[Any], NDArray[Any], int]:
    """Fold one topic's messages per recipient, in (sender, send order) order."""
    if len(parts) == 1:
        src, dst, vals, ordered = parts[0]
    else:
        src = np.concatenate([p[0] for p in parts])
        dst = np.concatenate([p[1] for p in parts])
        vals = np.concatenate([p[2] for p in parts])
        ordered = False
    if not ordered and src.size and not bool(np.all(src[1:] >= src[:-1])):
        order = _stable_order(src, n)
        dst, vals = dst[order], vals[order]
    counts = np.bincount(dst, minlength=n)
    received = counts > 0
    if reducer == "sum" and vals.dtype == np.float64:
        combined = np.bincount(dst, weights=vals, minlength=n)  # sequential, in input order
    else:
        combined = np.full(n, _identity(np, reducer, vals.dtype), dtype=vals.dtype)
        ufunc = {"sum": np.add, "min": np.minimum, "max": np.maximum}[reducer]
        ufunc.at(combined, dst, vals)
    return combined, received, int(np.count_nonzero(received))


def _fold(np: Any, reducer: str, arrays: list[NDArray[Any]]) -> Any:
    values = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    if values.size == 0:
        return None
    if reducer == "sum":
        # A left fold, like the per-vertex path: add.accumulate is sequential,
        # where values.sum() would add pairwise and round differently.
        return np.add.accumulate(values)[-1].item()
    if reducer == "min":
        return values.min().item()
    return values.max().item()


@final
class VectorizedResult:
    """What a vectorised Pregel run gives.

    Attributes:
        state: The final vertex state arrays, by name.
        supersteps: How many supersteps ran.
        halted: ``True`` if every vertex had halted with no message in flight;
            ``False`` if the run stopped at ``max_supersteps``.
        aggregates: Per superstep, every aggregator's value reduced over it.
        message_counts: Per superstep, the messages after combining (one per
            recipient and topic).
        halted_vertices: The final halted flags (a bool array).
    """

    __slots__ = ("aggregates", "halted", "halted_vertices", "message_counts", "state",
                 "supersteps")

    def __init__(self, *, state: dict[str, NDArray[Any]], supersteps: int, halted: bool,
                 aggregates: tuple[Mapping[str, Any], ...], message_counts: tuple[int, ...],
                 halted_vertices: NDArray[Any]) -> None:
        self.state = state
        self.supersteps = supersteps
        self.halted = halted
        self.aggregates = aggregates
        self.message_counts = message_counts
        self.halted_vertices = halted_vertices

    @property
    def digest(self) -> str:
        """SHA-256 over supersteps, halting, counts, aggregates and the exact state bytes."""
        h = hashlib.sha256((VECTOR_SCHEME + "\n").encode("ascii"))
        h.update(repr((self.supersteps, self.halted, self.message_counts,
                       [sorted(a.items()) for a in self.aggregates])).encode("utf-8"))
        for name in sorted(self.state):
            array = self.state[name]
            h.update(f"\n{name} {array.dtype.str} {array.shape}\n".encode())
            h.update(array.tobytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        how = "all halted" if self.halted else "at the superstep limit"
        return f"<VectorizedResult: {self.supersteps} supersteps ({how})>"


def run_vectorized(graph: PregelGraph, compute: Callable[[Superstep], object], *,
                   state: Mapping[str, ArrayLike], max_supersteps: int = 100,
                   combiners: Mapping[str, str] | None = None,
                   aggregators: Mapping[str, str] | None = None) -> VectorizedResult:
    """Run the array vertex program *compute* on *graph* until all halt, or *max_supersteps*.

    ::

        def compute(ss: Superstep) -> None:
            label = ss.state["label"]
            if ss.superstep > 0:
                incoming = ss.messages("label")
                changed = ss.active[incoming[ss.active] < label[ss.active]]
                label[changed] = incoming[changed]
            else:
                changed = ss.active
            ss.send_along_edges("label", label, where=changed)
            ss.vote_to_halt()

        run_vectorized(graph.undirected(), compute, state={"label": np.arange(n)},
                       combiners={"label": "min"})

    Args:
        graph: The graph.
        compute: Called once per superstep with a :class:`Superstep`.
        state: Initial vertex state arrays (copied), each of first dimension
            ``graph.num_vertices``.
        max_supersteps: The superstep limit, an int >= 1.
        combiners: ``{topic: "sum" | "min" | "max"}``: every topic sent needs one.
        aggregators: ``{name: "sum" | "min" | "max"}``.

    Raises:
        ConfigError: A bad limit, combiner, aggregator or state array; or a
            bad send, vote or contribution by the program.
        AgentActionError: *compute* raised; ``step`` is the superstep.
        BackendUnavailable: numpy is not installed.
    """
    _require_numpy()
    import numpy as np  # noqa: PLC0415

    if not isinstance(graph, PregelGraph):
        raise ConfigError(f"graph must be a PregelGraph, got {type(graph).__name__} {graph!r}")
    if not callable(compute):
        raise ConfigError(f"compute must be a callable f(ss), got {type(compute).__name__}")
    limit = check_max_supersteps(max_supersteps)
    combine_by = {t: str(r) for t, r in
                  check_reducers(combiners, "combiners", allow_callables=False).items()}
    aggregate_by = {a: str(r) for a, r in
                    check_reducers(aggregators, "aggregators", allow_callables=False).items()}
    if not isinstance(state, Mapping):
        raise ConfigError(f"state must be a mapping of names to arrays, got {type(state).__name__}")
    n = graph.num_vertices
    arrays: dict[str, NDArray[Any]] = {}
    for key, value in state.items():
        array = np.array(value, copy=True)
        label: object = key
        if not isinstance(label, str) or array.ndim == 0 or array.shape[0] != n:
            raise ConfigError(
                f"state[{key!r}] must be an array with first dimension num_vertices={n}, "
                f"got shape {array.shape}"
            )
        arrays[key] = array
    halted = np.zeros(n, dtype=bool)
    everyone = np.arange(n, dtype=np.int64)
    everyone.flags.writeable = False
    all_mask = np.ones(n, dtype=bool)
    all_mask.flags.writeable = False
    inbox: dict[str, tuple[NDArray[Any], NDArray[Any]]] = {}
    previous: dict[str, Any] = {}
    counts: list[int] = []
    history: list[Mapping[str, Any]] = []
    superstep = 0
    name = getattr(compute, "__qualname__", repr(compute))
    while True:
        anything = bool(inbox)
        if halted.all() and not anything:
            break  # quiescent: every vertex halted, nothing in flight
        if superstep >= limit:
            break
        if halted.any():
            active_mask = ~halted
            ss = Superstep(np, superstep=superstep, graph=graph, state=arrays,
                           active=np.flatnonzero(active_mask), active_mask=active_mask,
                           all_active=False, inbox=inbox, combiners=combine_by,
                           aggregators=aggregate_by, previous=previous)
        else:
            ss = Superstep(np, superstep=superstep, graph=graph, state=arrays, active=everyone,
                           active_mask=all_mask, all_active=True, inbox=inbox,
                           combiners=combine_by, aggregators=aggregate_by, previous=previous)
        try:
            compute(ss)
        except ConfigError:
            raise
        except Exception as exc:
            error = AgentActionError(
                f"vertex program {name} raised {type(exc).__name__} at superstep "
                f"{superstep}: {exc}"
            )
            error.phase, error.step = name, superstep
            raise error from exc
        for ids in ss._votes:
            halted[ids] = True
        inbox = {}
        count = 0
        for topic, reducer in combine_by.items():  # declaration order: deterministic
            parts = ss._outgoing.get(topic)
            if parts:
                combined, received, sent = _combine(np, reducer, n, parts)
                if sent:
                    inbox[topic] = (combined, received)
                    count += sent
                    halted &= ~received  # a message reactivates its recipient
        previous = {}
        for aggregator, contributions in ss._contributions.items():
            value = _fold(np, aggregate_by[aggregator], contributions)
            if value is not None:
                previous[aggregator] = value
        counts.append(count)
        history.append(MappingProxyType({a: previous.get(a) for a in aggregate_by}))
        superstep += 1
    quiescent = bool(halted.all()) and not inbox
    return VectorizedResult(state=arrays, supersteps=superstep, halted=quiescent,
                            aggregates=tuple(history), message_counts=tuple(counts),
                            halted_vertices=halted)
