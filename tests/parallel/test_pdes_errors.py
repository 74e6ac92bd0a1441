"""Bad input to the PDES tier fails loudly, with errors from ``simulacra.errors``.

Model errors (a send below the lookahead, to an unknown entity, an unnamed
top-level process) fail the same way unpartitioned and sharded, so a model is
debugged on one Sim. A worker that dies or hangs surfaces as ``ShardCrashed``
within seconds, never as a hang.
"""

from __future__ import annotations

import math
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import _pdes_test_models as models
import pytest

import simulacra
from simulacra import (
    ConfigError,
    LookaheadViolation,
    PartitionError,
    ShardCrashed,
    ShardedSim,
    ShardError,
    UnknownEntity,
    UnshardedSim,
    UntilInPast,
)

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # worker processes import the models by name
    sys.path.insert(0, str(HERE))

MODES = ["unsharded", "inline", "processes"]


def run_model(mode: str, builder: Any, config: Any = None, until: float | None = 20.0,
              **options: Any) -> None:
    """Build and run a model unpartitioned or on 2 shards."""
    if mode == "unsharded":
        UnshardedSim(builder, seed=0, config=config, **options).run(until=until)
        return
    with ShardedSim(builder, shards=2, mode=mode, seed=0, config=config, **options) as sim:
        sim.run(until=until)


def check(error: BaseException, kind: type[BaseException], *parts: str) -> None:
    assert isinstance(error, kind), repr(error)
    assert isinstance(error, simulacra.SimError)
    for part in parts:
        assert part in str(error), (part, str(error))
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301  (errors travel between processes)
    assert type(copy) is type(error)
    assert str(copy) == str(error)


# --------------------------------------------------------------------------- model errors


@pytest.mark.parametrize("mode", MODES)
def test_send_below_the_lookahead(mode: str) -> None:
    with pytest.raises(LookaheadViolation) as info:
        run_model(mode, models.build_pair, {"delay": 1.5})
    check(info.value, PartitionError, "'a' -> 'b'", "1.5", "lookahead 2.0")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("mode", MODES)
def test_send_to_an_unknown_entity(mode: str) -> None:
    with pytest.raises(UnknownEntity) as info:
        run_model(mode, models.build_pair, {"peer": "nobody"})
    check(info.value, PartitionError, "'a'", "unknown entity 'nobody'")


def test_send_without_a_channel() -> None:
    with pytest.raises(PartitionError, match=r"no such channel.*ctx\.channel\('a', 'a'"):
        run_model("unsharded", models.build_pair, {"peer": "a"})


@pytest.mark.parametrize("trace", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_unnamed_top_level_process(mode: str, trace: bool) -> None:
    with pytest.raises(PartitionError) as info:
        run_model(mode, models.build_unnamed, trace=trace)
    check(info.value, PartitionError, "without a name" if not trace else "_loose",
          "ctx.spawn_entity")


@pytest.mark.parametrize("trace", [False, True])
def test_named_process_spawned_directly_in_build(trace: bool) -> None:
    with pytest.raises(PartitionError) as info:
        run_model("inline", models.build_named_direct, trace=trace)
    check(info.value, PartitionError, "ctx.sim.spawn", "ctx.spawn_entity")


def test_event_scheduled_from_build() -> None:
    with pytest.raises(PartitionError, match="scheduled an event from host code"):
        run_model("unsharded", models.build_host_event)


def test_record_from_build() -> None:
    def build(ctx: simulacra.ShardContext) -> None:
        models.build_pair(ctx)
        ctx.sim.record("hello", "host")

    with pytest.raises(PartitionError, match="recorded"):
        UnshardedSim(build, trace=True)


@pytest.mark.parametrize("mode", ["inline", "processes"])
def test_model_exceptions_come_back_as_themselves(mode: str) -> None:
    with pytest.raises(ZeroDivisionError, match=r"z divided by zero at 3\.5") as info:
        run_model(mode, models.build_faulty, {"fault": "raise"})
    assert any("shard 1" in note for note in getattr(info.value, "__notes__", []))
    with pytest.raises(ZeroDivisionError, match=r"z divided by zero at 3\.5"):
        run_model("unsharded", models.build_faulty, {"fault": "raise"})


def test_a_failed_sharded_sim_refuses_to_continue() -> None:
    sim = ShardedSim(models.build_faulty, shards=2, mode="inline", config={"fault": "raise"})
    with pytest.raises(ZeroDivisionError):
        sim.run(until=10.0)
    with pytest.raises(ShardError, match="failed earlier"):
        sim.run(until=20.0)
    sim.close()


# --------------------------------------------------------------------------- partitions


@pytest.mark.parametrize("partition", [{"a": 0, "b": 2}, {"a": 0, "b": -1}, {"a": 0, "b": True},
                                       {"a": 0, "b": "1"}])
def test_partition_to_a_nonexistent_shard(partition: dict[str, Any]) -> None:
    with pytest.raises(PartitionError) as info:
        ShardedSim(models.build_pair, shards=2, mode="inline", partition=partition)
    check(info.value, PartitionError, "entity 'b'", f"shard {partition['b']!r}", "2 shards")


def test_partition_without_an_entity() -> None:
    with pytest.raises(PartitionError, match="no shard for entity 'b'"):
        ShardedSim(models.build_pair, shards=2, mode="inline", partition={"a": 0})


@pytest.mark.parametrize("mode", ["inline", "processes"])
def test_partition_naming_an_entity_that_does_not_exist(mode: str) -> None:
    with pytest.raises(PartitionError) as info:
        ShardedSim(models.build_pair, shards=2, mode=mode,
                   partition={"a": 0, "b": 1, "bb": 1})
    check(info.value, PartitionError, "'bb'", "does not declare", "'a', 'b'")


@pytest.mark.parametrize("lookahead", [0, 0.0, -1.0, float("nan"), float("inf")])
def test_a_channel_without_a_positive_lookahead_names_the_channel(lookahead: float) -> None:
    def build(ctx: simulacra.ShardContext) -> None:
        ctx.add_entity("north")
        ctx.add_entity("south")
        ctx.channel("north", "south", lookahead)

    with pytest.raises(ConfigError) as info:
        ShardedSim(build, shards=2, mode="inline")
    check(info.value, ConfigError, "channel('north', 'south')", repr(lookahead), "> 0")


@pytest.mark.parametrize("mode", ["inline", "threads"])
def test_until_in_the_past_leaves_the_sharded_run_usable(mode: str) -> None:
    ref = simulacra.UnshardedSim(models.build_pair, seed=1, trace=True)
    ref.run(until=4.0)
    ref.run(until=9.0)
    with ShardedSim(models.build_pair, shards=2, mode=mode, seed=1, trace=True) as sim:
        sim.run(until=4.0)
        for bad in (4.0, 2.0):
            with pytest.raises(simulacra.UntilInPast, match=f"until={bad!r}"):
                sim.run(until=bad)
        sim.run(until=9.0)
        assert sim.trace() == ref.trace()
        assert sim.now == ref.now == 9.0


def test_partition_function_and_bad_partition_values() -> None:
    with ShardedSim(models.build_pair, shards=2, mode="processes",
                    partition=models.b_first) as sim:
        sim.run(until=5.0)
    with pytest.raises(ConfigError, match="partition"):
        ShardedSim(models.build_pair, shards=2, mode="inline", partition="by-magic")
    with pytest.raises(PartitionError, match="must pickle"):
        ShardedSim(models.build_pair, shards=2, mode="processes",
                   partition=lambda name: 0)


def test_nondeterministic_builder() -> None:
    with pytest.raises(PartitionError, match="different entities"):
        ShardedSim(models.build_nondeterministic, shards=2, mode="inline")


# --------------------------------------------------------------------------- builders


def _local_builder(ctx: simulacra.ShardContext) -> None:
    models.build_pair(ctx)


def test_builder_that_is_not_importable_for_processes() -> None:
    def nested(ctx: simulacra.ShardContext) -> None:
        models.build_pair(ctx)

    for builder, why in [(nested, "inside another function"), (lambda ctx: None, "lambda")]:
        with pytest.raises(ConfigError) as info:
            ShardedSim(builder, shards=2, mode="processes")
        check(info.value, ConfigError, "builder", why)
    with pytest.raises(ConfigError, match="no module named 'no_such_module'"):
        ShardedSim("no_such_module:build", shards=2, mode="processes")
    with pytest.raises(ConfigError, match="has no attribute 'nope'"):
        ShardedSim("_pdes_test_models:nope", shards=2, mode="processes")
    # Threads and inline take any callable.
    with ShardedSim(_local_builder, shards=2, mode="threads") as sim:
        sim.run(until=5.0)


def test_builder_by_name() -> None:
    with ShardedSim("_pdes_test_models:build_pair", shards=2, mode="processes",
                    trace=True) as sim:
        sim.run(until=10.0)
        sharded = sim.trace()
    ref = UnshardedSim("_pdes_test_models:build_pair", trace=True)
    ref.run(until=10.0)
    simulacra.assert_equivalent(ref.trace(), sharded)


@pytest.mark.parametrize("mode", MODES)
def test_unpicklable_payload_between_processes(mode: str) -> None:
    # Refused at send in every mode (it used to pass unless it crossed processes).
    with pytest.raises(simulacra.errors.PayloadNotData) as info:
        run_model(mode, models.build_opaque)
    check(info.value, PartitionError, "'a' to 'b'", "_Opaque", "does not pickle")


def test_a_call_result_that_does_not_pickle_names_the_shard() -> None:
    with ShardedSim(models.build_pair, shards=2, mode="processes") as sim, \
            pytest.raises(ShardError) as info:
        sim.call(models.opaque_result)
    check(info.value, ShardError, "could not be sent", "pickle")


def test_call_and_trace_errors() -> None:
    with ShardedSim(models.build_pair, shards=2, mode="processes") as sim:
        with pytest.raises(ConfigError, match="fn must be"):
            sim.call(lambda state: state)
        assert sim.call(models.shard_names, ["x"]) == [["x"], ["x"]]
        with pytest.raises(ConfigError, match="tracing is off"):
            sim.trace()
        sim.run(until=4.0)
        with pytest.raises(UntilInPast):
            sim.run(until=4.0)
    with pytest.raises(ConfigError, match="tracing is off"):
        UnshardedSim(models.build_pair).trace()


# --------------------------------------------------------------------------- crashes


def test_a_crashed_worker_surfaces_quickly() -> None:
    start = time.monotonic()
    sim = ShardedSim(models.build_faulty, shards=2, mode="processes", config={"fault": "crash"})
    with pytest.raises(ShardCrashed) as info:
        sim.run(until=20.0)
    check(info.value, ShardError, "shard 1", "exited with code 3", "'window'")
    assert time.monotonic() - start < 30  # seconds at worst, never a hang
    with pytest.raises(ShardError):
        sim.run(until=30.0)
    sim.close()


def test_a_hung_worker_times_out() -> None:
    # The timeout covers every command, the workers' start ('build') too: 5 s leaves
    # room for a spawn on a loaded machine (1 s did not), and the hang is 60 s.
    sim = ShardedSim(models.build_faulty, shards=2, mode="processes", config={"fault": "hang"},
                     timeout=5.0)
    with pytest.raises(ShardCrashed) as info:
        sim.run(until=20.0)
    check(info.value, ShardError, "[1]", "timeout of 5.0 s")
    sim.close()


def test_a_hung_thread_shard_times_out() -> None:
    sim = ShardedSim(models.build_faulty, shards=2, mode="threads", config={"fault": "hang"},
                     timeout=0.5)
    with pytest.raises(ShardCrashed, match=r"timeout of 0\.5 s"):
        sim.run(until=20.0)


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(("options", "parts"), [
    ({"shards": 0}, ("shards", "0")),
    ({"shards": 2, "mode": "gpu"}, ("mode", "'gpu'", "'processes'")),
    ({"shards": 2, "start_method": "fork"}, ("start_method", "'fork'", "'spawn'")),
    ({"shards": 2, "timeout": 0}, ("timeout",)),
])
def test_bad_sharded_sim_arguments(options: dict[str, Any], parts: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as info:
        ShardedSim(models.build_pair, **options)
    check(info.value, ConfigError, *parts)


@pytest.mark.parametrize(("declare", "parts"), [
    (lambda ctx: ctx.channel("a", "b", 0), ("lookahead", "> 0", "0")),
    (lambda ctx: ctx.channel("a", "b", float("inf")), ("lookahead", "inf")),
    (lambda ctx: ctx.channel("a", "b", 2.0), ("declared twice",)),
    (lambda ctx: ctx.add_entity("a"), ("'a'", "declared twice")),
    (lambda ctx: ctx.add_entity("x/y"), ("'x/y'", "'/'", "reserved")),
    (lambda ctx: ctx.add_entity(""), ("entity name",)),
    (lambda ctx: ctx.channel("a", "ghost", 2.0), ("unknown entity 'ghost'",)),
    (lambda ctx: ctx.spawn_entity("c", 42), ("callable",)),
])
def test_bad_declarations(declare: Any, parts: tuple[str, ...]) -> None:
    def build(ctx: simulacra.ShardContext) -> None:
        models.build_pair(ctx)
        declare(ctx)

    with pytest.raises(simulacra.SimError) as info:
        UnshardedSim(build)
    for part in parts:
        assert part in str(info.value), (part, str(info.value))


def test_declaring_after_build_is_refused() -> None:
    def build(ctx: simulacra.ShardContext) -> simulacra.ShardContext:
        models.build_pair(ctx)
        return ctx

    ref = UnshardedSim(build)
    with pytest.raises(ConfigError, match="in build"):
        ref.state.add_entity("late")
    with pytest.raises(UnknownEntity, match="no entity 'ghost'"):
        ref.state.entity("ghost")


@pytest.mark.parametrize("mode", ["unsharded", "inline"])
def test_send_from_another_entitys_handle(mode: str) -> None:
    with pytest.raises(PartitionError) as info:
        run_model(mode, models.build_impostor)
    check(info.value, PartitionError, "process 'a'", "on behalf of entity 'b'")


def test_send_during_build_and_a_non_numeric_delay() -> None:
    with pytest.raises(PartitionError, match="during build"):
        run_model("unsharded", models.build_send_in_build)
    with pytest.raises(simulacra.InvalidDelay, match="delay must be a number, got '3'"):
        run_model("unsharded", models.build_pair, {"delay": "3"})


# --------------------------------------------------------------------------- found by a stranger


def _sends_far(sim: simulacra.Sim, me: simulacra.Entity) -> Any:
    yield sim.delay(1)
    me.send("b", "far", math.inf)


def _same_names(sim: simulacra.Sim, me: simulacra.Entity) -> Any:
    def worker(sim: simulacra.Sim, me: simulacra.Entity) -> Any:
        yield sim.delay(1)

    me.spawn(worker, name="worker")
    yield sim.delay(0)
    me.spawn(worker, name="worker")


def _digit_name(sim: simulacra.Sim, me: simulacra.Entity) -> Any:
    def worker(sim: simulacra.Sim, me: simulacra.Entity) -> Any:
        yield sim.delay(1)

    me.spawn(worker, name="1")
    yield sim.delay(0)


@pytest.mark.parametrize("mode", ["unsharded", "inline"])
def test_an_infinite_send_delay_is_refused(mode: str) -> None:
    def build(ctx: simulacra.ShardContext) -> None:
        ctx.spawn_entity("a", _sends_far)
        ctx.add_entity("b")
        ctx.channel("a", "b", 1.0)

    with pytest.raises(simulacra.InvalidDelay) as info:
        run_model(mode, build, until=None)
    check(info.value, simulacra.InvalidDelay, "'a' -> 'b'", "inf", "finite")


@pytest.mark.parametrize("spawner", [_same_names, _digit_name])
@pytest.mark.parametrize("mode", ["unsharded", "inline"])
def test_an_entitys_process_names_are_unique_and_not_numbers(mode: str, spawner: Any) -> None:
    def build(ctx: simulacra.ShardContext) -> None:
        ctx.spawn_entity("a", spawner)

    with pytest.raises(ConfigError) as info:
        run_model(mode, build, until=None)
    assert "entity 'a'" in str(info.value)


def test_a_closed_sharded_sim_and_a_bad_until_say_so() -> None:
    sim = ShardedSim(models.build_pair, shards=2, mode="inline")
    with pytest.raises(ConfigError, match="expected None or a number, got 'x'"):
        sim.run(until="x")  # type: ignore[arg-type]
    sim.close()
    with pytest.raises(simulacra.ShardError, match="closed"):
        sim.run(until=5.0)


def _replier(entity: simulacra.Entity, payload: Any) -> None:
    def job(sim: simulacra.Sim) -> Any:
        yield sim.delay(1)
        entity.send("c", payload)

    entity.sim.spawn(job)  # unnamed, from the handler: it is b's, so it may send from b


def _hello(sim: simulacra.Sim, me: simulacra.Entity) -> Any:
    for k in range(3):
        yield sim.delay(1)
        me.send("b", ("hello", k))


def build_handler_sends(ctx: simulacra.ShardContext) -> None:
    ctx.spawn_entity("a", _hello)
    ctx.add_entity("b", on_message=_replier)
    ctx.add_entity("c")
    ctx.channel("a", "b", 1.0)
    ctx.channel("b", "c", 1.0)


@pytest.mark.parametrize("partition", [{"a": 0, "b": 0, "c": 0}, {"a": 0, "b": 1, "c": 2},
                                       {"a": 2, "b": 1, "c": 0}])
def test_a_process_a_handler_spawns_may_send_for_its_entity(partition: dict[str, int]) -> None:
    ref = simulacra.UnshardedSim(build_handler_sends, seed=1, trace=True)
    ref.run()
    assert sum(1 for r in ref.trace() if r[1] == "recv" and r[2] == "c") == 3
    with ShardedSim(build_handler_sends, shards=3, partition=partition, mode="inline", seed=1,
                    trace=True) as sim:
        sim.run()
        simulacra.assert_equivalent(ref.trace(), sim.trace())
