"""The traps of a sharded model are refused on one Sim, with one line that says what to do.

Each of these used to pass unpartitioned (or inline, or on threads) and fail,
or silently diverge, only with processes or with some partitions. Now each
fails the same way in every mode, with an error from ``simulacra.errors``
naming the entity and the value, so that a model is debugged on one Sim.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import _pdes_trap_models as models
import pytest

import simulacra
from simulacra import ShardedSim, UnshardedSim
from simulacra.errors import ConfigError, PartitionError, PayloadNotData, ShardTypeError

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # worker processes import the models by name
    sys.path.insert(0, str(HERE))

ALL_MODES = ["unsharded", "inline", "threads", "processes"]


def run_model(mode: str, builder: Any, config: Any = None, *, until: float | None = 20.0,
              partition: Any = None, trace: bool = False) -> Any:
    """Build and run a model unpartitioned or on 2 shards; return its trace (or None)."""
    if mode == "unsharded":
        ref = UnshardedSim(builder, seed=3, config=config, trace=trace)
        ref.run(until=until)
        return ref.trace() if trace else None
    with ShardedSim(builder, shards=2, mode=mode, seed=3, config=config, partition=partition,
                    trace=trace) as sim:
        sim.run(until=until)
        return sim.trace() if trace else None


def one_line(error: BaseException, kind: type[BaseException], *parts: str) -> None:
    """*error* is a *kind* of simulacra's tree, one line, naming *parts*; it pickles."""
    assert isinstance(error, kind), repr(error)
    assert isinstance(error, simulacra.SimError)
    text = str(error)
    assert "\n" not in text, text
    for part in parts:
        assert part in text, (part, text)
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301  (errors travel between processes)
    assert type(copy) is type(error)


# ------------------------------------------------------------ 1. payloads are data, everywhere


@pytest.mark.parametrize("partition", [None, {"a": 0, "b": 0}])
@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_payload_that_does_not_pickle_is_refused_in_every_mode(
        mode: str, partition: Any) -> None:
    if mode == "unsharded" and partition is not None:
        pytest.skip("one Sim has no partition")
    with pytest.raises(PayloadNotData) as info:
        run_model(mode, models.build_payload, {"payload": "lambda"}, partition=partition)
    one_line(info.value, PartitionError, "'a'", "'b'", "function", "pickle")
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("mode", ["inline", "processes"])
def test_a_payload_of_plain_data_passes(mode: str) -> None:
    ref = run_model("unsharded", models.build_payload, trace=True)
    assert [r[1] for r in ref if r[1] in ("recv", "got")] == ["recv", "got"]
    simulacra.assert_equivalent(ref, run_model(mode, models.build_payload, trace=True))


# ------------------------------------------------------------ 2. no Sim-level streams in entities


@pytest.mark.parametrize("kind", ["rng", "small_rng"])
@pytest.mark.parametrize("how", ["call", "captured", "handler"])
@pytest.mark.parametrize("mode", ["unsharded", "inline", "threads"])
def test_a_draw_from_a_sim_stream_inside_an_entity_is_refused(mode: str, how: str,
                                                             kind: str) -> None:
    with pytest.raises(PartitionError) as info:
        run_model(mode, models.build_shared_rng, {"how": how, "kind": kind})
    one_line(info.value, PartitionError, f"entity.{kind}(", "entity 'b'" if how == "handler"
             else "entity '")


def test_a_draw_from_a_sim_stream_is_refused_with_processes() -> None:
    with pytest.raises(PartitionError) as info:
        run_model("processes", models.build_shared_rng, {"how": "call"})
    one_line(info.value, PartitionError, "entity.rng('arrivals')", "sim.rng('arrivals')")


@pytest.mark.parametrize("kind", ["rng", "small_rng"])
@pytest.mark.parametrize("mode", ["inline", "threads"])
def test_entity_streams_and_draws_in_build_give_the_unpartitioned_trace(mode: str,
                                                                      kind: str) -> None:
    config = {"how": "own", "kind": kind}
    ref = run_model("unsharded", models.build_shared_rng, config, trace=True)
    assert sum(1 for r in ref if r[1] == "draw") == 2
    for partition in ({"a": 0, "b": 0}, {"a": 0, "b": 1}, {"a": 1, "b": 0}):
        sharded = run_model(mode, models.build_shared_rng, config, partition=partition,
                            trace=True)
        simulacra.assert_equivalent(ref, sharded)


@pytest.mark.parametrize("kind", ["rng", "small_rng", "np_rng"])
@pytest.mark.parametrize("name", [5, None, "", b"x"])
def test_an_entity_stream_needs_a_name(kind: str, name: Any) -> None:
    def build(ctx: Any) -> None:
        def start(sim: Any, me: Any) -> Any:
            getattr(me, kind)(name)
            yield sim.delay(1.0)
        ctx.spawn_entity("a", start)

    with pytest.raises(simulacra.ConfigError, match=r"entity 'a': a stream name must be a "
                                                    r"non-empty str, got"):
        UnshardedSim(build, seed=1).run(until=2.0)


def test_a_sim_stream_in_host_code_after_build_is_refused_too() -> None:
    ref = UnshardedSim(models.build_payload, seed=1)
    with pytest.raises(PartitionError, match=r"entity\.rng"):
        ref.sim.rng("late").random()


# ------------------------------------------------------------ 3. Entity.spawn without a name


@pytest.mark.parametrize("partition", [{"a": 0, "b": 0, "c": 0}, {"a": 0, "b": 1, "c": 2},
                                       {"a": 2, "b": 1, "c": 0}])
@pytest.mark.parametrize("mode", ["inline", "threads"])
def test_entity_spawn_without_a_name_from_a_handler_or_a_process(
        mode: str, partition: dict[str, int]) -> None:
    ref = UnshardedSim(models.build_unnamed_spawns, seed=1, trace=True)
    ref.run()
    got = [r[3] for r in ref.trace() if r[1] == "got"]
    assert len(got) == 6, got  # 3 from a's own children, 3 from the handler's
    with ShardedSim(models.build_unnamed_spawns, shards=3, partition=partition, mode=mode,
                    seed=1, trace=True) as sim:
        sim.run()
        simulacra.assert_equivalent(ref.trace(), sim.trace())


def _spawn_for_another(sim: simulacra.Sim, me: simulacra.Entity) -> Any:
    yield sim.delay(1.0)
    me._ctx.entity("b").spawn(models._job, "x")  # a's process, b's handle


def test_an_unnamed_spawn_for_another_entity_is_refused() -> None:
    def build(ctx: simulacra.ShardContext) -> None:
        ctx.spawn_entity("a", _spawn_for_another)
        ctx.add_entity("b")

    with pytest.raises(PartitionError) as info:
        run_model("unsharded", build)
    one_line(info.value, PartitionError, "'b'", "'a'", "name=")


# ------------------------------------------------------------ 4. call by name, unsharded too


def test_unsharded_call_takes_a_function_by_name() -> None:
    ref = UnshardedSim(models.build_counter, seed=1)
    ref.run()
    assert ref.call("_pdes_trap_models:state_total", 10) == [16]
    assert ref.call(models.state_total) == [6]
    assert ref.call(f"{HERE / '_pdes_trap_models.py'}:state_total", 1) == [7]  # a file's path
    with ShardedSim(models.build_counter, shards=2, mode="inline", seed=1) as sim:
        sim.run()
        assert sim.call("_pdes_trap_models:state_total", 10) == [10, 16]
    for sim_ in (ref, ShardedSim(models.build_counter, shards=2, mode="inline")):
        with pytest.raises(ConfigError) as info:
            sim_.call(42)  # type: ignore[arg-type]
        one_line(info.value, ConfigError, "fn must be a function", "int 42")
        with pytest.raises(ConfigError, match="no module named 'no_such_module'"):
            sim_.call("no_such_module:f")


# ------------------------------------------------------------ 6. a shard index that is not an int


@pytest.mark.parametrize("partition", [{"a": "1", "b": 0}, "fn"])
def test_a_shard_that_is_not_an_int_is_a_type_error(partition: Any) -> None:
    if partition == "fn":
        partition = str  # a function that returns the entity's name
    with pytest.raises(ShardTypeError) as info:
        ShardedSim(models.build_string_shard, shards=2, mode="inline", partition=partition)
    one_line(info.value, PartitionError, "entity 'a'", "'", "str", "int")
    assert isinstance(info.value, TypeError)


def test_a_shard_that_is_an_integer_of_another_type_is_taken() -> None:
    class Index:
        def __init__(self, value: int) -> None:
            self.value = value

        def __index__(self) -> int:
            return self.value

    with ShardedSim(models.build_string_shard, shards=2, mode="inline",
                    partition={"a": Index(1), "b": Index(0)}) as sim:
        assert sim.call(lambda state: state) == [None, None]
    with pytest.raises(PartitionError, match="shard 2, but there are 2 shards"):
        ShardedSim(models.build_string_shard, shards=2, mode="inline",
                   partition={"a": 2, "b": 0})


@pytest.mark.parametrize("mode", ["unsharded", "inline"])
def test_a_numpy_stream_of_the_sim_fetched_in_build_is_refused_at_the_draw(mode: str) -> None:
    pytest.importorskip("numpy")

    def draw(sim: Any, me: Any, normal: Any) -> Any:
        yield sim.delay(1.0)
        sim.record("draw", me.name, float(normal()))

    def build(ctx: Any) -> None:
        shared = ctx.sim.np_rng("shared")
        shared.normal()  # in build(): every shard draws alike, allowed
        for name in ("a", "b"):
            ctx.spawn_entity(name, draw, shared.normal)  # a method fetched now, called later

    with pytest.raises(PartitionError, match=r"sim\.np_rng\('shared'\) drawn by entity"):
        run_model(mode, build, {})
