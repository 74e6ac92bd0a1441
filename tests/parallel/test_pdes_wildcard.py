"""Wildcard channels (``ctx.channel("*", "*", lookahead)``): random destinations, one result.

PHOLD-like models (``_wildcard_models``): handlers forward each message to a
random entity, readers answer from their inbox with a patience, over channels
that mix named pairs with ``"*"`` at either end. Hypothesis draws the model, a
partition over 1 to 6 shards and a split of the run; the sharded run's trace,
clock and tie counts must equal one keyed Sim's after every segment. Then the
rule that picks a pair's channel, and the mistakes a builder can make.
"""

from __future__ import annotations

from typing import Any

import _wildcard_models as wild
import pytest
from _pdes_check import SETTINGS, run_both
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import (
    ConfigError,
    LookaheadViolation,
    PartitionError,
    ShardedSim,
    UnknownEntity,
    UnshardedSim,
)

NAMES = ("lp0", "lp1", "Kx", "m-2", "q", "r7", "s", "T")
LOOKAHEADS = st.sampled_from([0.25, 0.5, 1.0, 2.0])


@st.composite
def models(draw: st.DrawFn) -> wild.WildModel:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=8, unique=True))
    kinds = draw(st.lists(st.sampled_from(["hold", "hold", "inbox"]), min_size=len(names),
                          max_size=len(names)))
    ends = st.sampled_from([wild.ANY, wild.ANY, *names])
    channels: dict[tuple[str, str], float] = {(wild.ANY, wild.ANY): draw(LOOKAHEADS)}
    for _ in range(draw(st.integers(0, 5))):
        channels.setdefault((draw(ends), draw(ends)), draw(LOOKAHEADS))
    if draw(st.booleans()):  # sometimes no catch-all: some pairs have no channel
        del channels[(wild.ANY, wild.ANY)]
    return wild.WildModel(
        entities=tuple(zip(names, kinds, strict=True)),
        channels=tuple((a, b, la) for (a, b), la in channels.items()),
        population=draw(st.integers(1, 3)),
        remote=draw(st.sampled_from([0.1, 0.5, 1.0])),
        hops=draw(st.integers(1, 12)),
        small=draw(st.booleans()),
    )


@st.composite
def runs(draw: st.DrawFn) -> tuple[wild.WildModel, int, dict[str, int], list[float | None], int]:
    model = draw(models())
    shards = draw(st.integers(1, 6))
    owners = draw(st.lists(st.integers(0, shards - 1), min_size=len(model.entities),
                           max_size=len(model.entities)))
    partition = {name: owner for (name, _), owner in zip(model.entities, owners, strict=True)}
    cuts = sorted(draw(st.lists(st.sampled_from([0.5, 1.5, 3.0, 5.0]), max_size=2, unique=True)))
    last: float | None = draw(st.sampled_from([None, 20.0]))
    return model, shards, partition, [*cuts, last], draw(st.integers(0, 3))


def check_run(run: tuple[wild.WildModel, int, dict[str, int], list[float | None], int], *,
              mode: str) -> None:
    model, shards, partition, segments, seed = run
    ref = UnshardedSim(wild.build, seed=seed, config=model, trace=True)
    with ShardedSim("_wildcard_models:build", shards=shards, partition=partition, mode=mode,
                    seed=seed, config=model, trace=True) as sharded:
        run_both(ref, sharded, segments)
        merged: dict[str, float] = {}
        for part in sharded.call("_wildcard_models:last_hops"):
            assert not merged.keys() & part.keys()  # each entity's state is on one shard
            merged.update(part)
        assert merged == ref.call("_wildcard_models:last_hops")[0]


@settings(max_examples=120, **SETTINGS)
@given(run=runs())
def test_inline_shards_equal_one_sim(run: Any) -> None:
    check_run(run, mode="inline")


@settings(max_examples=30, **SETTINGS)
@given(run=runs())
def test_thread_shards_equal_one_sim(run: Any) -> None:
    check_run(run, mode="threads")


@settings(max_examples=4, **SETTINGS)
@given(run=runs())
def test_process_shards_equal_one_sim(run: Any) -> None:
    check_run(run, mode="processes")


def _pair_model(channels: tuple[tuple[str, str, float], ...]) -> wild.WildModel:
    return wild.WildModel(entities=(("a", "hold"), ("b", "hold"), ("c", "hold")),
                          channels=channels, population=1, remote=1.0, hops=30)


def test_the_most_specific_channel_serves_a_pair() -> None:
    # A named pair with a lookahead below the catch-all's: its sends at 0.25
    # are legal only if (a, b) serves them, not ("*", "*") at 2.0.
    model = _pair_model((("*", "*", 2.0), ("a", "b", 0.25), ("b", "*", 0.5), ("*", "c", 1.0)))
    assert model.lookahead("a", "b") == 0.25
    assert model.lookahead("b", "c") == 0.5  # (b, "*") before ("*", c)
    assert model.lookahead("a", "c") == 1.0
    assert model.lookahead("c", "a") == 2.0
    ref = UnshardedSim(wild.build, seed=5, config=model, trace=True)
    ref.run(until=40)
    hops = [(who, data) for _, kind, who, data in ref.trace().records if kind == "hop"]
    assert {who for who, _ in hops} == {"a", "b", "c"}
    assert max(d[1] for _, d in hops) >= 5


def test_a_send_below_the_pairs_lookahead_is_refused() -> None:
    def build(ctx: Any) -> None:
        def go(sim: Any, me: Any) -> Any:
            yield sim.delay(1.0)
            me.send("b", "x", 0.5)  # ("a", "*") says 1.5

        ctx.spawn_entity("a", go)
        ctx.add_entity("b")
        ctx.channel("*", "*", 0.25)
        ctx.channel("a", "*", 1.5)

    sim = UnshardedSim(build, seed=0)
    with pytest.raises(LookaheadViolation, match=r"'a' -> 'b' with delay 0.5.*lookahead 1.5"):
        sim.run()


def test_a_pair_no_channel_serves_is_refused_naming_the_wildcard() -> None:
    def build(ctx: Any) -> None:
        def go(sim: Any, me: Any) -> Any:
            yield sim.delay(1.0)
            me.send("a", "x")

        ctx.spawn_entity("b", go)
        ctx.add_entity("a")
        ctx.channel("a", "*", 1.0)  # from a to anyone; nothing from b

    with pytest.raises(PartitionError, match=r"no such channel.*'\*' for any entity"):
        UnshardedSim(build, seed=0).run()


def test_a_wildcard_send_to_an_unknown_entity_is_refused() -> None:
    def build(ctx: Any) -> None:
        def go(sim: Any, me: Any) -> Any:
            yield sim.delay(1.0)
            me.send("nobody", "x")

        ctx.spawn_entity("a", go)
        ctx.channel("*", "*", 1.0)

    with pytest.raises(UnknownEntity, match="unknown entity 'nobody'"):
        UnshardedSim(build, seed=0).run()


def test_an_entity_named_star_is_refused() -> None:
    def build(ctx: Any) -> None:
        ctx.add_entity("*")

    with pytest.raises(ConfigError, match="means 'any entity'"):
        UnshardedSim(build, seed=0)


def test_a_wildcard_naming_an_unknown_entity_is_refused() -> None:
    def build(ctx: Any) -> None:
        ctx.add_entity("a")
        ctx.channel("*", "ghost", 1.0)

    with pytest.raises(UnknownEntity, match="ghost"):
        UnshardedSim(build, seed=0)


def test_the_lookahead_between_shards_comes_from_the_wildcard() -> None:
    model = _pair_model((("*", "*", 0.75), ("a", "a", 3.0)))
    with ShardedSim("_wildcard_models:build", shards=2, partition={"a": 0, "b": 1, "c": 1},
                    mode="inline", seed=1, config=model) as sharded:
        assert sharded.lookahead == (0.75, 0.75)
    alone = _pair_model((("a", "a", 3.0), ("b", "*", 0.5), ("c", "*", 0.5)))
    with ShardedSim("_wildcard_models:build", shards=2, partition={"a": 0, "b": 1, "c": 1},
                    mode="inline", seed=1, config=alone) as sharded:
        # Shard 0 holds only a, whose one channel goes to itself: nothing leaves it.
        assert sharded.lookahead == (float("inf"), 0.5)


def test_a_long_chain_of_handlers_keeps_its_keys_short() -> None:
    # Each message's key names the handler that sent it; were that named after the
    # message it handled, keys would grow by a key a hop (4.5 kB after 400 hops).
    model = wild.WildModel(entities=(("a", "hold"), ("b", "hold")),
                           channels=(("*", "*", 0.5),), population=1, remote=0.5, hops=10**6)
    ref = UnshardedSim(wild.build, seed=2, config=model)
    lengths = []
    for until in (50.0, 500.0, 2000.0):
        ref.run(until=until)
        lengths.append(max(len(key[1]) for _, key, _ in ref.sim._heap))
    assert lengths[-1] <= lengths[0] + 3, lengths  # the hop count's digits, no more
