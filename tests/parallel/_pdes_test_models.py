"""Small sharded models for the PDES tests, importable by worker processes.

The test files put this directory on ``sys.path`` (pytest does, and spawned
workers inherit it), so ``ShardedSim(mode="processes")`` can import these
builders by name. Most are deliberately broken: each breaks one rule.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from typing import Any

from simulacra import Entity, Event, ShardContext, Sim


def _pinger(sim: Sim, me: Entity, peer: str, delay: float,
            rounds: int) -> Generator[Event[Any], Any, None]:
    for i in range(rounds):
        yield sim.delay(1.0)
        me.send(peer, (me.name, i), delay)


def _sink(sim: Sim, me: Entity) -> Generator[Event[Any], Any, None]:
    while True:
        payload = yield me.inbox.get()
        sim.record("got", me.name, payload)


def build_pair(ctx: ShardContext) -> None:
    """Two entities: 'a' sends to 'b' with delay config['delay'] on a channel of lookahead 2."""
    config = ctx.config or {}
    ctx.spawn_entity("a", _pinger, config.get("peer", "b"), config.get("delay", 2.0),
                     config.get("rounds", 3))
    ctx.spawn_entity("b", _sink)
    ctx.channel("a", "b", 2.0)


def build_unnamed(ctx: ShardContext) -> None:
    """Spawns an unnamed top-level process in build()."""
    build_pair(ctx)
    ctx.sim.spawn(_loose)


def build_named_direct(ctx: ShardContext) -> None:
    """Spawns a named top-level process with ctx.sim.spawn, not as an entity."""
    ctx.sim.spawn(_loose, name="loose")
    build_pair(ctx)


def build_host_event(ctx: ShardContext) -> None:
    """Schedules an event from build() (host code)."""
    build_pair(ctx)
    ctx.sim.delay(5.0)


def _loose(sim: Sim) -> Generator[Event[Any], Any, None]:
    yield sim.delay(1.0)


def build_nondeterministic(ctx: ShardContext) -> None:
    """Declares an extra entity on shard 1 only."""
    build_pair(ctx)
    if ctx.shard == 1:
        ctx.add_entity("extra")


def _crasher(sim: Sim, me: Entity, at: float) -> Generator[Event[Any], Any, None]:
    yield sim.delay(at)
    os._exit(3)


def _sleeper(sim: Sim, me: Entity, at: float) -> Generator[Event[Any], Any, None]:
    yield sim.delay(at)
    time.sleep(60)


def _raiser(sim: Sim, me: Entity, at: float) -> Generator[Event[Any], Any, None]:
    yield sim.delay(at)
    raise ZeroDivisionError(f"{me.name} divided by zero at {sim.now}")


_FAULTS = {"crash": _crasher, "hang": _sleeper, "raise": _raiser}


def build_faulty(ctx: ShardContext) -> None:
    """The pair, plus an entity 'z' (last, so on the last shard) that faults at time 3.5."""
    build_pair(ctx)
    ctx.spawn_entity("z", _FAULTS[ctx.config["fault"]], 3.5)


class _Opaque:
    """A payload that does not pickle."""

    def __reduce__(self) -> Any:
        raise TypeError("an _Opaque does not pickle")


def _opaque_sender(sim: Sim, me: Entity) -> Generator[Event[Any], Any, None]:
    yield sim.delay(1.0)
    me.send("b", _Opaque(), 2.0)


def opaque_result(state: Any) -> Any:
    """A function for ``ShardedSim.call`` whose result does not pickle."""
    return _Opaque()


def build_opaque(ctx: ShardContext) -> None:
    """'a' sends an unpicklable payload to 'b'."""
    ctx.spawn_entity("a", _opaque_sender)
    ctx.spawn_entity("b", _sink)
    ctx.channel("a", "b", 2.0)


def b_first(name: str) -> int:
    """A partition function: 'b' on shard 0, everything else on shard 1."""
    return 0 if name == "b" else 1


def shard_names(state: Any, ctx_names: list[str]) -> list[str]:
    """A call() function: echoes its argument."""
    return ctx_names


def _impostor(sim: Sim, me: Entity, other: Entity) -> Generator[Event[Any], Any, None]:
    yield sim.delay(1.0)
    other.send("a", "from a, claiming to be b", 2.0)


def build_impostor(ctx: ShardContext) -> None:
    """'a' sends with 'b''s handle."""
    b = ctx.spawn_entity("b", _sink)
    ctx.spawn_entity("a", _impostor, b)
    ctx.channel("b", "a", 2.0)


def build_send_in_build(ctx: ShardContext) -> None:
    """build() itself sends."""
    build_pair(ctx)
    ctx.entity("a").send("b", "too early", 2.0)


def _note(sim: Sim, label: str) -> Generator[Event[Any], Any, None]:
    yield sim.delay(0.5)
    sim.record("note", label, sim.now)


def _spawning_handler(me: Entity, payload: Any) -> None:
    me.sim.spawn(_note, me.name)  # unnamed, from a callback: named after the event


def build_handler_spawns(ctx: ShardContext) -> None:
    """Two passive entities whose on_message handlers spawn unnamed processes."""
    ctx.spawn_entity("a", _pinger, "b", 2.0, 3)
    ctx.spawn_entity("c", _pinger, "d", 2.0, 3)
    ctx.add_entity("b", on_message=_spawning_handler)
    ctx.add_entity("d", on_message=_spawning_handler)
    ctx.channel("a", "b", 2.0)
    ctx.channel("c", "d", 2.0)
