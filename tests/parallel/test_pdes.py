"""Partition invariance: a sharded run's merged trace equals the unpartitioned run's.

This is the same-seed-same-result test of ``ShardedSim`` against its sequential
reference, ``UnshardedSim`` (one keyed Sim). It runs three models (the grid
conveyor, the adversarial tie model, the zone-sharded robotaxi fleet) on 1, 2, 4
and 8 shards, inline, on threads and in worker processes, with at least two
lookaheads each, and with random partitions under Hypothesis. A control test
shows the property is not vacuous: giving messages the receiver's keys instead
of the sender's breaks it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulacra
from simulacra import (
    Entity,
    Event,
    ShardContext,
    ShardedSim,
    Sim,
    Trace,
    UnshardedSim,
    assert_equivalent,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:  # worker processes inherit sys.path and import the models
    sys.path.insert(0, str(EXAMPLES))

import pdes_models  # noqa: E402
from ride_hailing import sharded as fleet  # noqa: E402

pytestmark = [
    pytest.mark.determinism,
    # Hypothesis reports failures through libcst, whose import warns on this Python.
    pytest.mark.filterwarnings("ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"),
]

SHARDS = [1, 2, 4, 8]

GRID_SMALL = pdes_models.Grid(rows=4, cols=4, transfer=1.0, horizon=20.0)
GRID_WIDE = pdes_models.Grid(rows=4, cols=4, transfer=3.0, jitter=0.0, horizon=20.0)
TIES_1 = pdes_models.Ties(entities=8, lookahead=1, ticks=8)
TIES_3 = pdes_models.Ties(entities=8, lookahead=3, ticks=12, multiples=(1, 2), salt=1)
FLEET_1 = {"horizon": 60.0, "vehicles": 16, "zones": 8, "demand_rate": 2.0, "min_travel": 1.0}
FLEET_3 = {"horizon": 60.0, "vehicles": 16, "zones": 8, "demand_rate": 2.0, "min_travel": 3.0,
           "hop_time": 0.5}

#: (builder, config, until) of every model and lookahead under test.
MODELS: dict[str, tuple[Any, Any, float | None]] = {
    "grid-L1": (pdes_models.build_grid, GRID_SMALL, 30.0),
    "grid-L3": (pdes_models.build_grid, GRID_WIDE, 30.0),
    "ties-L1": (pdes_models.build_ties, TIES_1, None),
    "ties-L3": (pdes_models.build_ties, TIES_3, None),
    "fleet-L1": (fleet.build, FLEET_1, 70.0),
    "fleet-L3": (fleet.build, FLEET_3, 70.0),
}

_REFERENCES: dict[str, Trace] = {}


def reference(name: str, seed: int = 11) -> Trace:
    """The unpartitioned trace of a model (cached: every shard count compares against it)."""
    key = f"{name}/{seed}"
    if key not in _REFERENCES:
        builder, config, until = MODELS[name]
        ref = UnshardedSim(builder, seed=seed, config=config, trace=True)
        ref.run(until=until)
        _REFERENCES[key] = ref.trace()
    return _REFERENCES[key]


def sharded_trace(name: str, shards: int, mode: str, seed: int = 11, **options: Any) -> Trace:
    builder, config, until = MODELS[name]
    with ShardedSim(builder, shards=shards, mode=mode, seed=seed, config=config, trace=True,
                    **options) as sim:
        sim.run(until=until)
        return sim.trace()


# --------------------------------------------------------------------------- the property


@pytest.mark.parametrize("shards", SHARDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_inline_shards_equal_the_unpartitioned_trace(name: str, shards: int) -> None:
    assert_equivalent(reference(name), sharded_trace(name, shards, "inline"),
                      label_a="unpartitioned", label_b=f"{shards} shards")


@pytest.mark.parametrize("shards", [2, 8])
@pytest.mark.parametrize("name", ["grid-L1", "ties-L1", "fleet-L3"])
def test_thread_shards_equal_the_unpartitioned_trace(name: str, shards: int) -> None:
    assert_equivalent(reference(name), sharded_trace(name, shards, "threads"),
                      label_a="unpartitioned", label_b=f"{shards} thread shards")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_process_shards_equal_the_unpartitioned_trace(name: str) -> None:
    assert_equivalent(reference(name), sharded_trace(name, 2, "processes"),
                      label_a="unpartitioned", label_b="2 process shards")


@pytest.mark.slow
def test_four_process_shards_with_forkserver() -> None:
    assert_equivalent(reference("grid-L1"),
                      sharded_trace("grid-L1", 4, "processes", start_method="forkserver"))


def test_traces_are_not_trivial() -> None:
    """The references exercise what the property is about: messages, ties, many events."""
    for name in MODELS:
        trace = reference(name)
        kinds = {record[1] for record in trace}
        assert {"send", "recv", "resume"} <= kinds, name
        assert len(trace) > 400, name
    ties = reference("ties-L1")
    # Messages arrive at the very instants of local ticks (equal times everywhere).
    recv_times = {r[0] for r in ties if r[1] == "recv"}
    tick_times = {r[0] for r in ties if r[1] == "tick"}
    assert len(recv_times & tick_times) >= 5


def test_a_different_seed_gives_a_different_trace() -> None:
    assert reference("grid-L1", seed=11) != reference("grid-L1", seed=12)


@pytest.mark.parametrize("partition", ["blocks", "round_robin"])
def test_partition_strategies(partition: str) -> None:
    assert_equivalent(reference("fleet-L1"),
                      sharded_trace("fleet-L1", 3, "inline", partition=partition))


def test_results_of_shards_add_up_to_the_unpartitioned_results() -> None:
    builder, config, until = MODELS["fleet-L1"]
    ref = UnshardedSim(builder, seed=5, config=config)
    ref.run(until=until)
    expected = fleet.total_kpis(ref.call(fleet.zone_kpis))
    assert expected["served"] > 20
    for mode in ("inline", "processes"):
        with ShardedSim(builder, shards=2, mode=mode, seed=5, config=config) as sim:
            sim.run(until=until)
            parts = sim.call(fleet.zone_kpis)
        assert len(parts) == 2
        assert fleet.total_kpis(parts) == expected, mode


def test_run_in_pieces_equals_one_run() -> None:
    """run(until=a); run(until=b); run() continues exactly where it stopped."""
    builder, config, _ = MODELS["grid-L1"]
    ref = UnshardedSim(builder, seed=3, config=config, trace=True)
    ref.run(until=7.5)
    ref.run(until=19.0)
    ref.run()
    with ShardedSim(builder, shards=4, mode="inline", seed=3, config=config, trace=True) as sim:
        sim.run(until=7.5)
        assert sim.now == 7.5
        sim.run(until=19.0)
        assert sim.now == 19.0
        sim.run()
        assert sim.now == ref.now  # without until: the time of the last event, as Sim.run()
        assert_equivalent(ref.trace(), sim.trace())


def test_stats_count_rounds_and_messages() -> None:
    builder, config, until = MODELS["grid-L1"]
    with ShardedSim(builder, shards=4, mode="inline", seed=1, config=config) as sim:
        assert sim.stats.rounds == 0
        assert sim.lookahead == (1.0, 1.0, 1.0, 1.0)
        sim.run(until=until)
        stats = sim.stats
    assert stats.shards == 4
    assert stats.rounds >= 20  # horizon 30 in windows of at most ~1 (the lookahead)
    assert stats.rounds <= stats.windows <= 4 * stats.rounds
    assert stats.messages > 0
    with ShardedSim(builder, shards=1, mode="inline", seed=1, config=config) as single:
        single.run(until=until)
        assert single.stats.rounds == 1  # nothing crosses: one window
        assert single.lookahead == (float("inf"),)


# --------------------------------------------------------------------------- Hypothesis

_ties = st.builds(
    pdes_models.Ties,
    entities=st.integers(2, 9),
    lookahead=st.integers(1, 3),
    ticks=st.integers(2, 7),
    multiples=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
    passive_every=st.integers(0, 4),
    salt=st.integers(0, 5),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ties=_ties, shards=st.integers(1, 8), data=st.data(), seed=st.integers(0, 3))
def test_random_tie_models_and_partitions(ties: pdes_models.Ties, shards: int,
                                          data: st.DataObject, seed: int) -> None:
    owners = data.draw(st.lists(st.integers(0, shards - 1), min_size=ties.entities,
                                max_size=ties.entities), label="owners")
    partition = {f"node-{i}": owner for i, owner in enumerate(owners)}
    ref = UnshardedSim(pdes_models.build_ties, seed=seed, config=ties, trace=True)
    ref.run()
    with ShardedSim(pdes_models.build_ties, shards=shards, partition=partition, mode="inline",
                    seed=seed, config=ties, trace=True) as sim:
        sim.run()
        assert_equivalent(ref.trace(), sim.trace())
        assert sim.now == ref.now


_grids = st.builds(
    pdes_models.Grid,
    rows=st.integers(1, 4),
    cols=st.integers(2, 4),
    transfer=st.sampled_from([0.5, 1.0, 2.5]),
    jitter=st.sampled_from([0.0, 0.5]),
    service=st.sampled_from([0.2, 1.0]),
    hops=st.integers(1, 5),
    horizon=st.just(12.0),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grid=_grids, shards=st.integers(1, 8), data=st.data())
def test_random_grids_and_partitions(grid: pdes_models.Grid, shards: int,
                                     data: st.DataObject) -> None:
    cells = [f"cell-{r}-{c}" for r in range(grid.rows) for c in range(grid.cols)]
    owners = data.draw(st.lists(st.integers(0, shards - 1), min_size=len(cells),
                                max_size=len(cells)), label="owners")
    until = data.draw(st.sampled_from([None, 9.0, 15.0]), label="until")
    ref = UnshardedSim(pdes_models.build_grid, seed=2, config=grid, trace=True)
    ref.run(until=until)
    partition = dict(zip(cells, owners, strict=True))
    with ShardedSim(pdes_models.build_grid, shards=shards, partition=partition,
                    mode="inline", seed=2, config=grid, trace=True) as sim:
        sim.run(until=until)
        assert_equivalent(ref.trace(), sim.trace())


# --------------------------------------------------------------------------- the control


def test_receiver_side_keys_would_break_the_property(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the sender reserves the key: keyed by the receiver, messages tie differently.

    This replaces the shipped key by one the receiving shard makes when the
    message arrives; the adversarial model then diverges from its reference.
    So the equality above is a real property of the design, not of the model.
    """
    from simulacra.parallel._pdes_model import ShardRuntime

    original = ShardRuntime.deliver

    def receiver_keys(self: ShardRuntime, inbound: list[Any]) -> None:
        relabelled = [(m[0], m[1], self.sim._next_key(), *m[3:]) for m in inbound]
        original(self, relabelled)

    monkeypatch.setattr(ShardRuntime, "deliver", receiver_keys)
    assert sharded_trace("ties-L1", 1, "inline") == reference("ties-L1")  # nothing crosses
    with pytest.raises(simulacra.DeterminismError, match="not equivalent"):
        assert_equivalent(reference("ties-L1"), sharded_trace("ties-L1", 2, "inline"))


def test_the_tie_model_lands_messages_exactly_on_horizons(monkeypatch: pytest.MonkeyPatch) -> None:
    """The adversarial model attacks the window edges: many messages are due at the very
    horizon of the window that sent them, and tie there with the receiver's local events."""
    from simulacra.parallel._pdes_model import ShardRuntime

    original = ShardRuntime.window
    on_edge: list[float] = []

    def spy(self: ShardRuntime, horizon: float, inbound: list[Any],
            exact: bool = False) -> Any:
        out, peek, clock = original(self, horizon, inbound, exact)
        on_edge.extend(message[1] for message in out if message[1] == horizon)
        return out, peek, clock

    monkeypatch.setattr(ShardRuntime, "window", spy)
    assert_equivalent(reference("ties-L1"), sharded_trace("ties-L1", 4, "inline"))
    assert len(on_edge) >= 10


@pytest.mark.parametrize("mode", ["inline", "threads"])
@pytest.mark.parametrize("partition", [{"a": 0, "b": 1, "c": 0, "d": 0},
                                       {"a": 1, "b": 0, "c": 1, "d": 0}])
def test_unnamed_processes_spawned_by_message_handlers_are_partition_invariant(
        mode: str, partition: dict[str, int]) -> None:
    """An unnamed process spawned from an event callback (an on_message handler) is named
    after the event being processed, so its identity, and the trace, do not depend on
    which processes the shard also runs."""
    import _pdes_test_models as models

    ref = UnshardedSim(models.build_handler_spawns, seed=3, trace=True)
    ref.run()
    spawned = [r[2] for r in ref.trace() if r[1] == "spawn" and "#" in r[2]]
    assert len(spawned) == 6
    # Named after the handler's entity and the message, not a per-Sim counter r/<n>.
    from simulacra.parallel._pdes_model import entity_of

    assert all("/@" in who and "#r/" not in who for who in spawned), spawned
    assert {entity_of(who) for who in spawned} == {"b", "d"}
    with ShardedSim(models.build_handler_spawns, shards=2, mode=mode, trace=True, seed=3,
                    partition=partition) as sim:
        sim.run()
        assert_equivalent(ref.trace(), sim.trace())


# --------------------------------------------------------------------------- idle shards


def _ticker(sim: Sim, me: Entity) -> Generator[Event[Any], Any, None]:
    for _ in range(12):
        yield sim.delay(1.0)
        sim.record("tick", me.name, sim.now)


def _late_sender(sim: Sim, me: Entity) -> Generator[Event[Any], Any, None]:
    yield sim.delay(7.0)
    me.send("late", "wake up", 2.0)


def build_idle(ctx: ShardContext) -> None:
    """'a' ticks; 'b' is never messaged; 'late' gets its only message at t=9."""
    ctx.spawn_entity("a", _ticker)
    ctx.add_entity("b")
    ctx.spawn_entity("s", _late_sender)
    ctx.add_entity("late")
    ctx.channel("s", "late", 2.0)


IDLE_PARTITIONS = {
    "idle-b": {"a": 0, "b": 1, "s": 0, "late": 0},
    "empty-shard": {"a": 0, "b": 0, "s": 0, "late": 0},
    "late-alone": {"a": 0, "b": 0, "s": 0, "late": 2},
    "all-apart": {"a": 0, "b": 1, "s": 2, "late": 3},
}


@pytest.mark.parametrize("mode", ["inline", "threads", "processes"])
@pytest.mark.parametrize("name", sorted(IDLE_PARTITIONS))
def test_idle_empty_and_late_shards_across_many_runs(name: str, mode: str) -> None:
    """The issue's crash: a shard without work across two run(until=...) calls."""
    partition = IDLE_PARTITIONS[name]
    ref = UnshardedSim(build_idle, seed=5, trace=True)
    with ShardedSim(f"{__name__}:build_idle", shards=4, partition=partition, mode=mode, seed=5,
                    trace=True) as sim:
        for until in (5.0, 10.0, 10.5, 11.0, 30.0, None):
            ref.run(until=until)
            sim.run(until=until)
            assert sim.now == ref.now, until
            assert sim.peek() == ref.peek(), until
            assert_equivalent(ref.trace(), sim.trace())
        assert any(r[1] == "recv" and r[2] == "late" for r in sim.trace())
        assert sim.peek() == math.inf


# --------------------------------------------------------------------------- ties


def test_the_fleet_reneges_and_ties_across_shards() -> None:
    """The fleet's patience reneging (req | sim.delay(patience)) is exercised, and its
    sharded runs tie across shards: the test models attack what the merge must get right."""
    ref = reference("fleet-L1")
    kinds = {r[1] for r in ref}
    assert "abandon" in kinds, sorted(kinds)
    ties = sharded_trace("fleet-L1", 4, "inline").ties
    assert ties is not None
    assert ties.across_shards > 0
    assert ties.ties >= ties.across_shards


def test_tie_counts_of_one_sim_fifo_and_keyed() -> None:
    """A traced Sim counts its events and the ties among them, in both orderings."""
    for ordering in ("fifo", "keyed"):
        sim = Sim(seed=1, trace=True, ordering=ordering)

        def clock(sim: Sim, period: float) -> Generator[Event[Any], Any, None]:
            for _ in range(6):
                yield sim.delay(period)

        for period in (1.0, 2.0, 3.0):
            sim.spawn(clock, period)
        sim.run(until=100)
        # 3 starts at 0 (2 ties), timeouts at 1..6, 2..12 and 3..18: 18 of them, at
        # the distinct instants 1-6, 8, 9, 10, 12, 15, 18 (12 instants).
        ties = sim.ties
        assert ties is not None, ordering
        assert ties.events == 3 + 18 + 3, ordering  # starts, timeouts, exits
        expected = 2 + (18 - 12) + 3  # a process's exit ties with its last timeout
        assert ties.ties == expected, (ordering, ties)
        assert ties.across_shards == 0
        summary = simulacra.Trace.of(sim).summary()
        assert summary["ties"] == expected
        assert summary["events"] == ties.events
    assert Sim(seed=1).ties is None
