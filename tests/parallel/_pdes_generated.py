"""Generated sharded models: one interpreter builder for many small programs.

A model is plain data (so it pickles to worker processes): a list of entities,
each active (a program of operations, run ``repeat`` times) or passive (an
inbox, or an ``on_message`` handler that may spawn an unnamed process), and the
channels between them. ``build`` turns it into entities and channels; the
Hypothesis strategy ``models()`` in ``test_pdes_generated.py`` draws them.

The operations are the common patterns of the field: delays (zero included),
``any_of`` / ``all_of`` with timeouts, reneging from a ``Resource`` queue with
``req | sim.delay(patience)``, stores with impatient getters, interrupts of a
process of the same entity, and messages with delays at or above the lookahead.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from simulacra import Entity, Event, Interrupt, Resource, ShardContext, Sim, Store

Op = tuple[Any, ...]


@dataclass(frozen=True)
class EntitySpec:
    name: str
    #: "active" (runs `program`), "inbox" (passive, messages pile up) or
    #: "handler" (passive, an on_message handler that records and may spawn).
    kind: str
    program: tuple[Op, ...] = ()
    repeat: int = 1
    #: Active entities: read the inbox with this patience (None: no reader).
    reader: float | None = None
    #: Handler entities: spawn an unnamed echo process per message.
    spawns: bool = False


@dataclass(frozen=True)
class ModelSpec:
    entities: tuple[EntitySpec, ...]
    #: (src, dst, lookahead)
    channels: tuple[tuple[str, str, float], ...] = field(default=())

    def lookahead(self, src: str, dst: str) -> float | None:
        for a, b, la in self.channels:
            if (a, b) == (src, dst):
                return la
        return None


# --------------------------------------------------------------------------- processes


def _customer(sim: Sim, me: Entity, desk: Resource, patience: float,
              hold: float) -> Generator[Event[Any], Any, None]:
    with desk.request() as req:
        got = yield req | sim.delay(patience)
        if req in got:
            sim.record("served", me.name, sim.now)
            yield sim.delay(hold)
        else:
            sim.record("reneged", me.name, sim.now)


def _producer(sim: Sim, me: Entity, shelf: Store[Any], count: int,
              gap: float) -> Generator[Event[Any], Any, None]:
    for i in range(count):
        yield sim.delay(gap)
        yield shelf.put((me.name, i))


def _consumer(sim: Sim, me: Entity, shelf: Store[Any], count: int,
              patience: float) -> Generator[Event[Any], Any, None]:
    for _ in range(count):
        with shelf.get() as get:
            got = yield get | sim.delay(patience)
            if get in got:
                sim.record("took", me.name, got[get])
            else:
                sim.record("gave-up", me.name, sim.now)


def _sleeper(sim: Sim, me: Entity) -> Generator[Event[Any], Any, None]:
    try:
        yield sim.delay(100.0)
        sim.record("woke", me.name, sim.now)
    except Interrupt as stop:
        sim.record("interrupted", me.name, stop.cause)


def _reader(sim: Sim, me: Entity, patience: float) -> Generator[Event[Any], Any, None]:
    while True:
        with me.inbox.get() as get:
            got = yield get | sim.delay(patience)
            if get in got:
                sim.record("read", me.name, got[get])
                continue
        sim.record("idle", me.name, sim.now)
        if sim.now > 40:
            return


def _echo(sim: Sim, me: Entity, payload: Any) -> Generator[Event[Any], Any, None]:
    yield sim.delay(0.5)
    sim.record("echo", me.name, payload)


def _active(sim: Sim, me: Entity, spec: EntitySpec,
            model: ModelSpec) -> Generator[Event[Any], Any, None]:
    desk = Resource(sim, capacity=1)
    shelf: Store[Any] = Store(sim)
    spawned = 0

    def name(what: str) -> str:
        nonlocal spawned
        spawned += 1
        return f"{what}{spawned}"

    if spec.reader is not None:
        me.spawn(_reader, spec.reader, name="reader")
    for lap in range(spec.repeat):
        for step, op in enumerate(spec.program):
            kind = op[0]
            if kind == "delay":
                yield sim.delay(op[1])
            elif kind == "timeout":
                # The reneging shape with an event nobody triggers.
                yield sim.event() | sim.delay(op[1])
            elif kind == "any":
                yield sim.delay(op[1]) | sim.delay(op[2])
            elif kind == "all":
                yield sim.delay(op[1]) & sim.delay(op[2])
            elif kind == "renege":
                _, count, patience, hold = op
                for _ in range(count):
                    me.spawn(_customer, desk, patience, hold, name=name("c"))
            elif kind == "store":
                _, count, gap, patience = op
                me.spawn(_producer, shelf, count, gap, name=name("p"))
                me.spawn(_consumer, shelf, count, patience, name=name("g"))
            elif kind == "interrupt":
                child = me.spawn(_sleeper, name=name("s"))
                yield sim.delay(op[1])
                if child.is_alive:
                    child.interrupt((me.name, lap, step))
            elif kind == "send":
                _, dst, extra = op
                lookahead = model.lookahead(me.name, dst)
                assert lookahead is not None
                me.send(dst, (me.name, lap, step), lookahead + extra)
            else:  # pragma: no cover - the strategy makes only the kinds above
                raise AssertionError(kind)
            sim.record(kind, me.name, (lap, step))


def _handler(spec: EntitySpec) -> Any:
    def on_message(entity: Entity, payload: Any) -> None:
        entity.sim.record("handled", entity.name, payload)
        if spec.spawns:
            # Unnamed, from an event callback: its identity comes from the event.
            entity.sim.spawn(_echo, entity, payload)

    return on_message


def build(ctx: ShardContext) -> ModelSpec:
    """The builder of every generated model: ``ctx.config`` is a :class:`ModelSpec`."""
    model: ModelSpec = ctx.config
    for spec in model.entities:
        if spec.kind == "active":
            ctx.spawn_entity(spec.name, _active, spec, model)
        elif spec.kind == "handler":
            ctx.add_entity(spec.name, on_message=_handler(spec))
        else:
            ctx.add_entity(spec.name)
    for src, dst, lookahead in model.channels:
        ctx.channel(src, dst, lookahead)
    return model
