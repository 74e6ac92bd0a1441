"""The generative differential test of PDES: random models, partitions and run splits.

Hypothesis draws a sharded model (``_pdes_generated.ModelSpec``: entities that
delay, wait on ``any_of`` / ``all_of`` with timeouts, renege from a Resource
queue, use stores with impatient getters, interrupt their own processes, send
messages at or above the lookahead, and passive entities whose handlers spawn
unnamed processes), a random partition over 1 to 8 shards (empty shards
allowed), and a split of the run into 1 to 3 ``run(until=...)`` segments.
After every segment the sharded run's ``now``, ``peek()``, trace and tie counts
must equal those of the unpartitioned keyed Sim.
"""

from __future__ import annotations

from typing import Any

import _pdes_generated as gen
import pytest
from _pdes_check import SETTINGS, run_both
from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra import ShardedSim, UnshardedSim

NAMES = ("a", "b", "Z", "Y", "m1", "n", "Q", "cell-2", "x", "k")
DELAYS = st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.0, 3.0])
LOOKAHEADS = st.sampled_from([0.5, 1.0, 2.0])


@st.composite
def models(draw: st.DrawFn) -> gen.ModelSpec:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=7, unique=True))
    kinds = draw(st.lists(st.sampled_from(["active", "active", "active", "inbox", "handler"]),
                          min_size=len(names), max_size=len(names)))
    lookahead = draw(LOOKAHEADS)  # the model's lookahead; some channels get more
    channels: dict[tuple[str, str], float] = {}
    entities: list[gen.EntitySpec] = []
    receivers = [n for n, k in zip(names, kinds, strict=True)]
    for name, kind in zip(names, kinds, strict=True):
        if kind != "active":
            entities.append(gen.EntitySpec(name, kind, spawns=draw(st.booleans())))
            continue
        program: list[gen.Op] = []
        for _ in range(draw(st.integers(1, 5))):
            op = draw(st.sampled_from(
                ["delay", "timeout", "any", "all", "renege", "store", "interrupt", "send"]))
            if op == "delay":
                program.append(("delay", draw(DELAYS)))
            elif op == "timeout":
                program.append(("timeout", draw(DELAYS)))
            elif op in ("any", "all"):
                program.append((op, draw(DELAYS), draw(DELAYS)))
            elif op == "renege":
                program.append(("renege", draw(st.integers(1, 3)), draw(DELAYS), draw(DELAYS)))
            elif op == "store":
                program.append(("store", draw(st.integers(1, 3)), draw(DELAYS), draw(DELAYS)))
            elif op == "interrupt":
                program.append(("interrupt", draw(DELAYS)))
            else:
                dst = draw(st.sampled_from(receivers))
                if dst == name:
                    continue
                la = channels.setdefault(
                    (name, dst), draw(st.sampled_from([lookahead, lookahead, lookahead * 2])))
                program.append(("send", dst, draw(st.sampled_from([0.0, 0.0, 0.5, la]))))
        reader = draw(st.none() | st.sampled_from([0.5, 1.0, 4.0]))
        entities.append(gen.EntitySpec(name, "active", tuple(program),
                                       repeat=draw(st.integers(1, 3)), reader=reader))
    return gen.ModelSpec(tuple(entities),
                         tuple((src, dst, la) for (src, dst), la in channels.items()))


@st.composite
def runs(draw: st.DrawFn) -> tuple[gen.ModelSpec, int, dict[str, int], list[float | None], int]:
    model = draw(models())
    shards = draw(st.integers(1, 8))
    owners = draw(st.lists(st.integers(0, shards - 1), min_size=len(model.entities),
                           max_size=len(model.entities)))
    partition = {spec.name: owner for spec, owner in zip(model.entities, owners, strict=True)}
    cuts = sorted(draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0, 4.5, 6.0, 9.0]),
                                min_size=0, max_size=2, unique=True)))
    last: float | None = draw(st.sampled_from([None, 12.0, 50.0]))
    segments: list[float | None] = [*cuts, last]
    return model, shards, partition, segments, draw(st.integers(0, 3))


def check_run(run: tuple[gen.ModelSpec, int, dict[str, int], list[float | None], int], *,
              mode: str) -> None:
    model, shards, partition, segments, seed = run
    ref = UnshardedSim(gen.build, seed=seed, config=model, trace=True)
    with ShardedSim("_pdes_generated:build", shards=shards, partition=partition, mode=mode,
                    seed=seed, config=model, trace=True) as sharded:
        run_both(ref, sharded, segments)


@settings(max_examples=150, **SETTINGS)
@given(run=runs())
def test_inline_shards_equal_one_sim(run: Any) -> None:
    check_run(run, mode="inline")


@settings(max_examples=40, **SETTINGS)
@given(run=runs())
def test_thread_shards_equal_one_sim(run: Any) -> None:
    check_run(run, mode="threads")


@pytest.mark.slow
@settings(max_examples=5, **SETTINGS)
@given(run=runs())
def test_process_shards_equal_one_sim(run: Any) -> None:
    check_run(run, mode="processes")
