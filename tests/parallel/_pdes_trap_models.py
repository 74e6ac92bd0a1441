"""Sharded models that fall into the traps of a sharded model, importable by worker processes.

Each breaks one rule that used to pass on one Sim (or inline, or on threads)
and fail, or silently diverge, only with some partitions or with processes.
The test file puts this directory on ``sys.path`` so that workers can import
these builders by name.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from typing import Any

from simulacra import Entity, Event, ShardContext, Sim


def _send(sim: Sim, me: Entity, payload: Any) -> Generator[Event[Any], Any, None]:
    yield sim.delay(1.0)
    me.send("b", payload)


def _sink(sim: Sim, me: Entity) -> Generator[Event[Any], Any, None]:
    while True:
        payload = yield me.inbox.get()
        sim.record("got", me.name, payload)


def build_payload(ctx: ShardContext) -> None:
    """'a' sends config['payload'] (by name: 'lambda', 'data') to 'b'."""
    kind = (ctx.config or {}).get("payload", "data")
    payload: Any = (lambda: 1) if kind == "lambda" else ("hello", 1, 2.5, [None], {"k": b"v"})
    ctx.spawn_entity("a", _send, payload)
    ctx.spawn_entity("b", _sink)
    ctx.channel("a", "b", 1.0)


def _draw_shared(sim: Sim, me: Entity, kind: str) -> Generator[Event[Any], Any, None]:
    yield sim.delay(1.0)
    sim.record("draw", me.name, getattr(sim, kind)("arrivals").random())


def _draw_captured(sim: Sim, me: Entity, rng: random.Random) -> Generator[Event[Any], Any, None]:
    yield sim.delay(1.0)
    sim.record("draw", me.name, rng.randrange(100))


def _draw_own(sim: Sim, me: Entity, kind: str) -> Generator[Event[Any], Any, None]:
    yield sim.delay(1.0)
    sim.record("draw", me.name, getattr(me, kind)("arrivals").random())


def _handler_draws(kind: str) -> Any:
    def draw(entity: Entity, payload: Any) -> None:
        getattr(entity.sim, kind)("noise").random()
    return draw


def build_shared_rng(ctx: ShardContext) -> None:
    """Two entities draw from a stream of the Sim (config['how']: 'call', 'captured', 'handler').

    ``'own'`` draws from each entity's stream instead, which is right; every
    variant also draws from a Sim stream in build() itself, which is right too
    (every shard runs build() and makes the same draws). config['kind'] is the
    kind of stream: ``'rng'`` (random.Random, the default) or ``'small_rng'``.
    """
    how = (ctx.config or {}).get("how", "call")
    kind = (ctx.config or {}).get("kind", "rng")
    topology = getattr(ctx.sim, kind)("topology")
    order = sorted(["a", "b"], key=lambda _: topology.random())
    if how == "handler":
        ctx.spawn_entity("a", _send, "ping")
        ctx.add_entity("b", on_message=_handler_draws(kind))
        ctx.channel("a", "b", 1.0)
        return
    for name in order:
        if how == "captured":
            ctx.spawn_entity(name, _draw_captured, getattr(ctx.sim, kind)("shared"))
        else:
            ctx.spawn_entity(name, _draw_own if how == "own" else _draw_shared, kind)


def _job(sim: Sim, me: Entity, payload: Any) -> Generator[Event[Any], Any, None]:
    yield sim.delay(0.5)
    me.send("c", ("job", payload))


def _spawn_unnamed(entity: Entity, payload: Any) -> None:
    entity.spawn(_job, payload)  # unnamed, from the handler: named after the message


def _hello(sim: Sim, me: Entity) -> Generator[Event[Any], Any, None]:
    for k in range(3):
        yield sim.delay(1.0)
        me.send("b", ("hello", k))
        me.spawn(_job, ("own", k))  # unnamed, from the entity's own process


def build_unnamed_spawns(ctx: ShardContext) -> None:
    """Unnamed ``entity.spawn(fn)`` from an entity's process and from a handler; both send."""
    ctx.spawn_entity("a", _hello)
    ctx.add_entity("b", on_message=_spawn_unnamed)
    ctx.spawn_entity("c", _sink)
    ctx.channel("a", "b", 1.0)
    ctx.channel("a", "c", 1.0)
    ctx.channel("b", "c", 1.0)


def build_string_shard(ctx: ShardContext) -> None:
    """Two passive entities (the partition under test maps them)."""
    ctx.add_entity("a")
    ctx.add_entity("b")


def state_total(state: Any, extra: int = 0) -> Any:
    """A function for ``call``, by name: the builder's return value plus *extra*."""
    return None if state is None else state["total"] + extra


def _count(sim: Sim, me: Entity, totals: dict[str, int]) -> Generator[Event[Any], Any, None]:
    while True:
        payload = yield me.inbox.get()
        totals["total"] += payload


def build_counter(ctx: ShardContext) -> dict[str, int]:
    """'a' sends 1, 2, 3 to 'b', which adds them up in the state the builder returns."""
    totals = {"total": 0}
    ctx.spawn_entity("a", _send_numbers)
    ctx.spawn_entity("b", _count, totals)
    ctx.channel("a", "b", 1.0)
    return totals


def _send_numbers(sim: Sim, me: Entity) -> Generator[Event[Any], Any, None]:
    for k in (1, 2, 3):
        yield sim.delay(1.0)
        me.send("b", k)
