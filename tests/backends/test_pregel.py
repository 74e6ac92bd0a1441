"""Pregel semantics: halting, reactivation, combiners, aggregators, limits, and bad input.

Both APIs -- agents on ``run_pregel`` / ``PregelBackend`` and arrays on
``run_vectorized`` -- run the same programs here and must agree exactly. The
conformance suite (``_conf_pregel.py``) checks that a model that never halts
gets the LocalBackend reference's digests on ``PregelBackend``.
"""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import (
    Agent,
    AgentActionError,
    ConfigError,
    Context,
    ContextClosed,
    LocalBackend,
    Model,
    Phase,
    PregelBackend,
    PregelGraph,
    Superstep,
    get_backend,
    load_settings,
    run_pregel,
    run_vectorized,
)
from simulacra.backends import REDUCERS

# --------------------------------------------------------------------------- models


class Relay(Agent):
    """Passes one token around a ring for *rounds* laps; halts after every superstep."""

    def __init__(self, id: int, *, size: int, rounds: int) -> None:
        super().__init__(id)
        self.size = size
        self.rounds = rounds
        self.runs: list[int] = []
        self.tokens = 0

    def act(self, ctx: Context) -> None:
        self.runs.append(ctx.step)
        if ctx.step == 0 and self.id == 0:
            ctx.send(1 % self.size, "token", 1)
        for hops in ctx.payloads("token"):
            self.tokens += 1
            if hops < self.rounds * self.size:
                ctx.send((self.id + 1) % self.size, "token", hops + 1)
        ctx.vote_to_halt()


def relay_vectorized(size: int, rounds: int) -> Any:
    def relay(ss: Superstep) -> None:
        ss.state["runs"][ss.active] += 1
        if ss.superstep == 0:
            ss.send("token", [0], [1 % size], [1])
        hops = ss.messages("token")
        got = np.flatnonzero(ss.received("token"))
        ss.state["tokens"][got] += 1
        forward = got[hops[got] < rounds * size]
        ss.send("token", forward, (forward + 1) % size, hops[forward] + 1)
        ss.vote_to_halt()

    ring = PregelGraph([], [], size)
    return run_vectorized(ring, relay, state={"runs": np.zeros(size, dtype=np.int64),
                                              "tokens": np.zeros(size, dtype=np.int64)},
                          combiners={"token": "sum"})


class Pulse(Agent):
    """A program with everything: sends along edges, sums, a max aggregator, halting rules."""

    def __init__(self, id: int, *, out: tuple[int, ...]) -> None:
        super().__init__(id)
        self.out = out
        self.value = 0
        self.runs = 0

    def act(self, ctx: Context) -> None:
        step = ctx.step
        self.runs += 1
        total = 0
        for payload in ctx.payloads("v"):
            total += payload
        self.value += total + (ctx.aggregated("mx") or 0)
        if (self.id + step) % 3 != 0 and self.out:
            ctx.broadcast("v", self.id + step, to=self.out)
        ctx.aggregate("mx", self.value % 7)
        if (self.id * 5 + step) % 4 != 1:
            ctx.vote_to_halt()


def pulse(ss: Superstep) -> None:
    active, step = ss.active, ss.superstep
    value, runs = ss.state["value"], ss.state["runs"]
    runs[active] += 1
    total = ss.messages("v").astype(np.int64)
    value[active] += total[active] + (ss.aggregated("mx") or 0)
    degree = ss.graph.out_degree
    senders = active[((active + step) % 3 != 0) & (degree[active] > 0)]
    ss.send_along_edges("v", np.arange(ss.num_vertices, dtype=np.int64) + step, where=senders)
    ss.aggregate("mx", value[active] % 7)
    ss.vote_to_halt(active[(active * 5 + step) % 4 != 1])


class Counter(Agent):
    """Never halts: counts its runs and the messages it got."""

    def __init__(self, id: int) -> None:
        super().__init__(id)
        self.ticks = 0
        self.heard = 0

    def tick(self, ctx: Context) -> None:
        self.ticks += 1
        self.heard += len(ctx.inbox())
        ctx.send(self.id, "self", self.ticks)


class Talker(Agent):
    """Sends to agent 0 under three topics; agent 0 records what arrives."""

    def __init__(self, id: int) -> None:
        super().__init__(id)
        self.got: list[Any] = []

    def talk(self, ctx: Context) -> None:
        self.got.extend((m.phase, m.sender, m.seq, m.topic, m.payload) for m in ctx.inbox())
        if ctx.step == 0:
            ctx.send(0, "sum", float(self.id) + 0.5)
            ctx.send(0, "min", 10 - self.id)
            ctx.send(0, "max", 10 - self.id)
            ctx.send(0, "joined", f"<{self.id}>")
            ctx.send(0, "plain", self.id)
            ctx.send(0, "joined", f"[{self.id}]")
            ctx.broadcast("echo", self.id, to=(0, 0) if self.id == 3 else ())
            ctx.broadcast("max", 20 + self.id, to=(0, 0) if self.id == 2 else ())
        ctx.vote_to_halt()


class Aggregating(Agent):
    """Contributes to aggregators and records what it reads back."""

    def __init__(self, id: int) -> None:
        super().__init__(id)
        self.seen: list[Any] = []

    def act(self, ctx: Context) -> None:
        self.seen.append((ctx.aggregated("total"), ctx.aggregated("order")))
        ctx.aggregate("total", self.id + ctx.step)
        ctx.aggregate("order", f"{self.id}.a")
        ctx.aggregate("order", f"{self.id}.b")
        if ctx.step == 2:
            ctx.vote_to_halt()


class Misuser(Agent):
    """Misuses the Pregel calls in the way its *mode* says."""

    kept: Any = None

    def __init__(self, id: int, *, mode: str) -> None:
        super().__init__(id)
        self.mode = mode

    def act(self, ctx: Context) -> None:
        if self.mode == "halt":
            ctx.vote_to_halt()
        elif self.mode == "undeclared":
            ctx.aggregate("nope", 1)
        elif self.mode == "read-undeclared":
            ctx.aggregated("nope")
        elif self.mode == "keep":
            Misuser.kept = ctx
        elif self.mode == "fail" and ctx.step == 2 and self.id == 1:
            raise ValueError("vertex 1 fails on purpose")


def _relay_model(size: int, rounds: int, backend: Any = None) -> Model:
    model = Model(seed=5, backend=backend)
    model.add_many(Relay, range(size), size=size, rounds=rounds)
    return model


# --------------------------------------------------------------------------- halting


def test_halted_agents_sleep_until_a_message_wakes_them() -> None:
    size, rounds = 4, 2
    result = run_pregel(_relay_model(size, rounds), Relay.act, combiners={"token": "sum"})

    last = rounds * size  # the last hop arrives in this superstep; the next finds nobody
    assert result.halted
    assert result.supersteps == last + 1
    for vertex in range(size):
        woken = [s for s in range(1, last + 1) if s % size == vertex]
        assert result.state(vertex)["runs"] == [0, *woken]
        assert result.state(vertex)["tokens"] == len(woken)
    assert result.message_counts == (1,) * last + (0,)


def test_the_vectorised_path_halts_and_wakes_the_same_way() -> None:
    size, rounds = 5, 3
    per_vertex = run_pregel(_relay_model(size, rounds), Relay.act, combiners={"token": "sum"})
    arrays = relay_vectorized(size, rounds)

    assert arrays.halted
    assert per_vertex.halted
    assert arrays.supersteps == per_vertex.supersteps
    assert arrays.message_counts == per_vertex.message_counts
    assert arrays.state["runs"].tolist() == [len(per_vertex.state(v)["runs"]) for v in range(size)]
    assert arrays.state["tokens"].tolist() == [per_vertex.state(v)["tokens"] for v in range(size)]
    assert arrays.halted_vertices.all()


def test_model_run_on_the_backend_matches_run_pregel() -> None:
    """Under Model.run each phase run is a superstep; once all halted, steps change nothing."""
    size, rounds = 3, 2
    pregel = run_pregel(_relay_model(size, rounds), Relay.act)
    backend = PregelBackend()
    result = _relay_model(size, rounds, backend).run(Relay.act, steps=pregel.supersteps + 4)

    assert dict(result.agents) == dict(pregel.agents)
    assert result.state_digests[-1] == result.state_digests[pregel.supersteps - 1]
    assert result.message_counts[pregel.supersteps - 1:] == (0,) * 5


def test_get_agents_for_skips_halted_agents_and_wakes_recipients() -> None:
    model = _relay_model(3, 1)
    backend = PregelBackend()
    backend.start(model.specs, model.seed, None)
    wrapped = Phase(Relay.act)
    assert backend.get_agents_for(wrapped) == [0, 1, 2]
    messages = backend.execute_action(wrapped, 0, 0)
    assert backend.halted == (0, 1, 2)
    assert backend.get_agents_for(wrapped) == []  # the token is not delivered yet
    backend.deliver_messages(sorted(messages))
    assert backend.halted == (0, 2)
    assert backend.get_agents_for(wrapped) == [1]
    assert not backend.quiescent
    backend.close()


def test_max_supersteps_ends_a_run_that_never_halts() -> None:
    model = Model(seed=0)
    model.add_many(Counter, range(3))
    result = run_pregel(model, Counter.tick, max_supersteps=4)

    assert not result.halted
    assert result.supersteps == 4
    assert [result.state(v)["ticks"] for v in range(3)] == [4, 4, 4]
    assert "at the superstep limit" in repr(result)


def test_max_supersteps_under_model_run_stops_running_agents() -> None:
    model = Model(seed=0, backend=PregelBackend(max_supersteps=3))
    model.add_many(Counter, range(2))
    result = model.run(Counter.tick, steps=5)

    assert result.state(0)["ticks"] == 3
    assert result.message_counts == (2, 2, 2, 0, 0)


def test_a_model_that_never_halts_matches_the_local_backend() -> None:
    model_local = Model(seed=3)
    model_local.add_many(Counter, range(4))
    expected = model_local.run(Counter.tick, steps=6)
    model_pregel = Model(seed=3, backend=PregelBackend())
    model_pregel.add_many(Counter, range(4))

    assert model_pregel.run(Counter.tick, steps=6).digest == expected.digest


def test_an_empty_model_is_halted_at_once() -> None:
    result = run_pregel(Model(seed=0), Counter.tick)
    arrays = run_vectorized(PregelGraph([], [], 0), pulse, state={})

    assert (result.halted, result.supersteps) == (True, 0)
    assert (arrays.halted, arrays.supersteps) == (True, 0)


# --------------------------------------------------------------------------- combiners


def test_combiners_fold_per_recipient_and_topic_in_total_order() -> None:
    model = Model(seed=0)
    model.add_many(Talker, range(4))
    result = run_pregel(model, Talker.talk, combiners={
        "sum": "sum", "min": "min", "max": "max", "joined": operator.add,
    })

    got = result.state(0)["got"]
    # One message per combined topic, at the place (phase, sender, seq) of its first part.
    assert got == [
        (0, 0, 0, "sum", 0.5 + 1.5 + 2.5 + 3.5),
        (0, 0, 1, "min", 7),
        (0, 0, 2, "max", 22),
        (0, 0, 3, "joined", "<0>[0]<1>[1]<2>[2]<3>[3]"),
        (0, 0, 4, "plain", 0),
        (0, 1, 4, "plain", 1),
        (0, 2, 4, "plain", 2),
        (0, 3, 4, "plain", 3),
        (0, 3, 6, "echo", 3),  # a broadcast of an uncombined topic, to 0 twice
        (0, 3, 7, "echo", 3),
    ]
    assert result.message_counts == (10, 0)


def test_the_vectorised_combiners_match() -> None:
    def talk(ss: Superstep) -> None:
        if ss.superstep == 0:
            senders = np.arange(4)
            ss.send("sum", senders, np.zeros(4, dtype=np.int64), senders + 0.5)
            ss.send("min", senders, np.zeros(4, dtype=np.int64), 10 - senders)
            ss.send("max", senders, np.zeros(4, dtype=np.int64), 10 - senders)
        else:
            ss.state["got"][0] = [ss.messages(t)[0] for t in ("sum", "min", "max")]
        ss.vote_to_halt()

    result = run_vectorized(PregelGraph([], [], 4), talk, state={"got": np.zeros((4, 3))},
                            combiners={"sum": "sum", "min": "min", "max": "max"})

    assert result.state["got"][0].tolist() == [8.0, 7.0, 10.0]
    assert result.message_counts == (3, 0)


# --------------------------------------------------------------------------- aggregators


def test_aggregators_fold_in_id_order_and_show_next_superstep() -> None:
    model = Model(seed=0)
    model.add_many(Aggregating, range(3))
    result = run_pregel(model, Aggregating.act,
                        aggregators={"total": "sum", "order": lambda a, b: f"{a},{b}"})

    order = "0.a,0.b,1.a,1.b,2.a,2.b"
    assert result.state(1)["seen"] == [(None, None), (3, order), (6, order)]
    assert result.aggregates == (
        {"total": 3, "order": order}, {"total": 6, "order": order},
        {"total": 9, "order": order},
    )
    assert result.halted
    assert result.supersteps == 3


def test_aggregate_and_vote_to_halt_need_a_pregel_backend() -> None:
    model = Model(seed=0, backend=LocalBackend())
    model.add(Misuser, 0, mode="halt")
    with pytest.raises(AgentActionError, match="agent 0") as info:
        model.run(Misuser.act)
    assert isinstance(info.value.__cause__, ConfigError)
    assert "vote_to_halt() needs a backend with supersteps" in str(info.value.__cause__)


@pytest.mark.parametrize("mode", ["undeclared", "read-undeclared"])
def test_an_undeclared_aggregator_is_refused_with_its_name(mode: str) -> None:
    model = Model(seed=0)
    model.add(Misuser, 0, mode=mode)
    with pytest.raises(AgentActionError) as info:
        run_pregel(model, Misuser.act, aggregators={"total": "sum"})
    assert str(info.value.__cause__) == "aggregator 'nope' was not declared (declared: 'total')"


def test_a_stored_context_cannot_vote_after_its_action() -> None:
    model = Model(seed=0)
    model.add(Misuser, 0, mode="keep")
    run_pregel(model, Misuser.act, max_supersteps=1)
    with pytest.raises(ContextClosed, match="vote_to_halt"):
        Misuser.kept.vote_to_halt()


def test_an_action_error_names_the_agent_phase_and_step() -> None:
    model = Model(seed=0)
    model.add_many(Misuser, range(3), mode="fail")
    with pytest.raises(AgentActionError, match=r"agent 1 .* at step 2") as info:
        run_pregel(model, Misuser.act, max_supersteps=5)
    assert (info.value.agent, info.value.step) == (1, 2)
    assert isinstance(info.value.__cause__, ValueError)


def test_a_vertex_program_error_names_the_superstep() -> None:
    def broken(ss: Superstep) -> None:
        if ss.superstep == 1:
            raise ZeroDivisionError("boom")

    with pytest.raises(AgentActionError, match="at superstep 1: boom") as info:
        run_vectorized(PregelGraph([0], [1]), broken, state={})
    assert info.value.step == 1


# --------------------------------------------------------------------------- both APIs agree

edges_strategy = st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30)))


@settings(max_examples=60, deadline=None)
@given(edges_strategy, st.integers(1, 14))
def test_both_apis_agree_on_a_program_with_every_feature(
        graph: tuple[int, list[tuple[int, int]]], limit: int) -> None:
    n, edges = graph
    g = PregelGraph([u for u, _ in edges], [v for _, v in edges], n)
    model = Model(seed=1)
    for vertex, out in enumerate(g.adjacency()):
        model.add(Pulse, vertex, out=out)
    per_vertex = run_pregel(model, Pulse.act, max_supersteps=limit, combiners={"v": "sum"},
                            aggregators={"mx": "max"})
    arrays = run_vectorized(g, pulse, state={"value": np.zeros(n, dtype=np.int64),
                                             "runs": np.zeros(n, dtype=np.int64)},
                            max_supersteps=limit, combiners={"v": "sum"},
                            aggregators={"mx": "max"})

    assert arrays.supersteps == per_vertex.supersteps
    assert arrays.halted == per_vertex.halted
    assert arrays.message_counts == per_vertex.message_counts
    assert arrays.aggregates == per_vertex.aggregates
    assert arrays.state["value"].tolist() == [per_vertex.state(v)["value"] for v in range(n)]
    assert arrays.state["runs"].tolist() == [per_vertex.state(v)["runs"] for v in range(n)]


def test_same_seed_same_result() -> None:
    g = PregelGraph([0, 1, 2, 3, 1], [1, 2, 0, 0, 3], 5)

    def once() -> tuple[str, str]:
        model = Model(seed=11)
        for vertex, out in enumerate(g.adjacency()):
            model.add(Pulse, vertex, out=out)
        result = run_pregel(model, Pulse.act, max_supersteps=9, combiners={"v": "sum"},
                            aggregators={"mx": "max"}, digests=True)
        arrays = run_vectorized(g, pulse, state={"value": np.zeros(5, dtype=np.int64),
                                                 "runs": np.zeros(5, dtype=np.int64)},
                                max_supersteps=9, combiners={"v": "sum"},
                                aggregators={"mx": "max"})
        assert len(result.state_digests) == result.supersteps
        return result.digest, arrays.digest

    assert once() == once()


# --------------------------------------------------------------------------- the graph


def test_the_graph_is_csr_by_source_keeping_edge_order() -> None:
    g = PregelGraph([2, 0, 2, 1, 0], [0, 1, 1, 2, 2], num_vertices=4)

    assert g.sources.tolist() == [0, 0, 1, 2, 2]
    assert g.targets.tolist() == [1, 2, 2, 0, 1]
    assert g.offsets.tolist() == [0, 2, 3, 5, 5]
    assert g.out_degree.tolist() == [2, 1, 2, 0]
    assert g.adjacency() == [(1, 2), (2,), (0, 1), ()]
    assert g.out_neighbors(2).tolist() == [0, 1]
    assert g.reversed().adjacency() == [(2,), (0, 2), (0, 1), ()]
    assert g.undirected().adjacency() == [(1, 2, 2), (2, 0, 2), (0, 1, 0, 1), ()]
    assert (g.num_vertices, g.num_edges) == (4, 5)
    with pytest.raises(ValueError, match="read-only"):
        g.targets[0] = 3


# --------------------------------------------------------------------------- settings


def test_settings_choose_the_pregel_backend(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"orchestration": {"mode": "pregel", "max_supersteps": 2}}))
    settings_ = load_settings(path)
    backend = settings_.backend()

    assert isinstance(backend, PregelBackend)
    assert backend.max_supersteps == 2
    model = Model(seed=0, settings=path)
    model.add_many(Counter, range(2))
    assert model.run(Counter.tick, steps=3).state(1)["ticks"] == 2


def test_get_backend_builds_pregel() -> None:
    backend = get_backend("pregel", max_supersteps=7)
    assert repr(backend) == "PregelBackend(max_supersteps=7)"
    with pytest.raises(ConfigError, match="backend 'pregel' has no option 'combiners'"):
        get_backend("pregel", combiners={"x": "sum"})


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "10", None])
def test_max_supersteps_must_be_a_positive_int(value: Any) -> None:
    expected = f"max_supersteps must be an int >= 1, got {type(value).__name__} {value!r}"
    with pytest.raises(ConfigError) as info:
        PregelBackend(value)
    assert str(info.value) == expected
    with pytest.raises(ConfigError, match="max_supersteps must be an int >= 1"):
        run_pregel(Model(seed=0), Counter.tick, max_supersteps=value)
    with pytest.raises(ConfigError, match="max_supersteps must be an int >= 1"):
        run_vectorized(PregelGraph([], [], 1), pulse, state={}, max_supersteps=value)


def test_settings_refuse_a_bad_max_supersteps(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"orchestration": {"mode": "pregel", "max_supersteps": 0}}))
    with pytest.raises(ConfigError, match=r"orchestration\.max_supersteps"):
        load_settings(path)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"combiners": {"rank": "avg"}},
     "combiners['rank'] must be one of 'sum', 'min', 'max' or a function (acc, value) -> acc, "
     "got 'avg'"),
    ({"aggregators": {"err": 3}},
     "aggregators['err'] must be one of 'sum', 'min', 'max' or a function (acc, value) -> acc, "
     "got int 3"),
    ({"combiners": ["sum"]}, "combiners must be a mapping of names to reducers, got list ['sum']"),
    ({"aggregators": {"": "sum"}}, "aggregators keys must be non-empty str, got ''"),
    ({"combiners": {1: "sum"}}, "combiners keys must be non-empty str, got 1"),
])
def test_unknown_combiners_and_aggregators_are_refused(kwargs: dict[str, Any],
                                                       message: str) -> None:
    with pytest.raises(ConfigError) as info:
        PregelBackend(**kwargs)
    assert str(info.value) == message


def test_the_vectorised_path_takes_reducer_names_only() -> None:
    with pytest.raises(ConfigError, match=r"combiners\['rank'\] must be one of 'sum', 'min', "
                                          r"'max', got builtin_function_or_method"):
        run_vectorized(PregelGraph([], [], 1), pulse, state={}, combiners={"rank": max})
    assert REDUCERS == ("sum", "min", "max")


@pytest.mark.parametrize(("args", "message"), [
    (([[0, 1]], [[1, 0]]), "sources must be a 1-D array of vertex ids, got shape (1, 2)"),
    (([0.0], [1.0]), "sources must hold integer vertex ids, got dtype float64"),
    (([0, 1], [1]), "sources and targets must have one length, got 2 and 1"),
    (([0, 5], [1, 2], 3), "edge endpoint 5 is not a vertex: ids must be in 0 .. 2"),
    (([-1], [0]), "edge endpoint -1 is not a vertex"),
    (([0], [0], -2), "num_vertices must be an int >= 0 or None, got int -2"),
])
def test_bad_graphs_are_refused(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")):
        PregelGraph(*args)


def test_bad_state_and_programs_are_refused() -> None:
    g = PregelGraph([0, 1], [1, 2])
    with pytest.raises(ConfigError, match=r"state\['x'\] must be an array with first dimension "
                                          r"num_vertices=3, got shape \(2,\)"):
        run_vectorized(g, pulse, state={"x": [1, 2]})
    with pytest.raises(ConfigError, match="graph must be a PregelGraph, got list"):
        run_vectorized([0, 1], pulse, state={})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="compute must be a callable"):
        run_vectorized(g, "pulse", state={})  # type: ignore[arg-type]


@pytest.mark.parametrize(("misuse", "message"), [
    (lambda ss: ss.send("nope", [0], [1], [1.0]),
     "topic 'nope' has no combiner (the vectorised path combines every topic; declared: 'v')"),
    (lambda ss: ss.send("v", [0, 1], [1], [1.0]),
     "send('v'): sources, targets and values must have one length, got 2, 1 and 1"),
    (lambda ss: ss.send("v", [0], [9], [1.0]), "targets holds ids outside 0 .. 2"),
    (lambda ss: ss.send_along_edges("v", [1.0]),
     r"send_along_edges('v'): values must have shape (3,), got (1,)"),
    (lambda ss: ss.aggregate("nope", 1), "aggregator 'nope' was not declared (declared: 'mx')"),
    (lambda ss: ss.aggregated("nope"), "aggregator 'nope' was not declared (declared: 'mx')"),
    (lambda ss: ss.vote_to_halt(np.ones(2, dtype=bool)),
     "vote_to_halt as a bool mask must have shape (3,), got (2,)"),
])
def test_bad_sends_and_contributions_are_refused(misuse: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        run_vectorized(PregelGraph([0, 1], [1, 2]), misuse, state={}, combiners={"v": "sum"},
                       aggregators={"mx": "max"})
    assert str(info.value) == message


def test_only_active_vertices_may_send() -> None:
    def program(ss: Superstep) -> None:
        if ss.superstep == 0:
            ss.send("v", [0], [1], [1.0])
            ss.vote_to_halt()
        else:
            ss.send("v", [2], [0], [1.0])  # vertex 2 is halted and got nothing

    with pytest.raises(ConfigError, match=r"send\(sources\): vertex 2 is not active in "
                                          r"superstep 1"):
        run_vectorized(PregelGraph([0, 1], [1, 2]), program, state={}, combiners={"v": "sum"})


def test_the_backends_import_without_numpy() -> None:
    """numpy is an optional extra: only the vectorised path imports it."""
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    code = ("import sys, simulacra.backends as e; e.PregelBackend(); e.run_pregel; "
            "print(sorted(m for m in sys.modules if m.startswith('numpy')))")
    result = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": src},
                            capture_output=True, text=True, check=False, timeout=60)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
