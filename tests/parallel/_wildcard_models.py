"""Generated models whose messages go to random entities over wildcard channels.

A model is plain data (it pickles to worker processes): entities, each either a
*hold* entity (PHOLD's logical process: an ``on_message`` handler that sends
each message on to a random entity, itself or another) or an *inbox* entity
whose process reads its inbox with a patience and answers; and channels, some
between two named entities, some with ``"*"`` (any entity) at one end or both.

Every send uses exactly the lookahead of the channel that the documented rule
picks for its pair (``(src, dst)``, then ``(src, "*")``, ``("*", dst)``,
``("*", "*")``) plus a random extra: had the kernel picked a channel with a
larger lookahead, the send would raise ``LookaheadViolation``.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from simulacra import Entity, ShardContext, Sim

ANY = "*"


@dataclass(frozen=True)
class WildModel:
    #: (name, kind): kind "hold" (a handler) or "inbox" (a reading process).
    entities: tuple[tuple[str, str], ...]
    #: (src, dst, lookahead); src and dst may be "*".
    channels: tuple[tuple[str, str, float], ...]
    #: Messages each hold entity starts with.
    population: int
    #: The chance that a message goes to another entity (PHOLD's "remote").
    remote: float
    #: How many hops a message makes before it stops.
    hops: int
    #: Hold entities draw from ``small_rng`` (a SmallRandom) rather than ``rng``.
    small: bool = False

    def lookahead(self, src: str, dst: str) -> float | None:
        table = {(a, b): la for a, b, la in self.channels}
        for pair in ((src, dst), (src, ANY), (ANY, dst), (ANY, ANY)):
            if pair in table:
                return table[pair]
        return None

    def targets(self, src: str) -> list[str]:
        """The entities *src* has a channel to, in declaration order."""
        return [name for name, _ in self.entities if self.lookahead(src, name) is not None]


def _forward(model: WildModel, me: Entity, payload: tuple[int, int], tally: dict[str, Any]
             ) -> None:
    """Send *payload* one hop on: to a random target, at its channel's lookahead or later."""
    origin, hop = payload
    tally["last"][me.name] = me.sim.now
    me.sim.record("hop", me.name, [origin, hop])
    if hop >= model.hops:
        return
    rng = me.small_rng("hold") if model.small else me.rng("hold")
    targets = model.targets(me.name)
    if not targets:
        return
    if me.name in targets and rng.random() >= model.remote:
        dst = me.name
    else:
        dst = targets[rng.randrange(len(targets))]
    lookahead = model.lookahead(me.name, dst)
    assert lookahead is not None
    extra = rng.choice([0.0, 0.0, 0.25, rng.expovariate(1.0)])
    me.send(dst, (origin, hop + 1), lookahead + extra)


def _starter(sim: Sim, me: Entity, model: WildModel, tally: dict[str, Any]
             ) -> Generator[Any, Any, None]:
    for k in range(model.population):
        _forward(model, me, (me.index * 100 + k, 0), tally)
        yield sim.delay(me.rng("start").choice([0.0, 0.5, 1.0]))


def _reader(sim: Sim, me: Entity, model: WildModel, tally: dict[str, Any]
            ) -> Generator[Any, Any, None]:
    for _ in range(3 * model.population):
        with me.inbox.get() as get:  # an impatient reader: the get is withdrawn on exit
            got = yield get | sim.delay(2.0)
            if get not in got:
                sim.record("bored", me.name, None)
                continue
            _forward(model, me, got[get], tally)


def build(ctx: ShardContext) -> dict[str, Any]:
    model: WildModel = ctx.config
    tally: dict[str, Any] = {"last": {}}
    for name, kind in model.entities:
        if kind == "hold":
            ctx.spawn_entity(name, _starter, model, tally,
                             on_message=lambda me, payload: _forward(model, me, payload, tally))
        else:
            ctx.spawn_entity(name, _reader, model, tally)
    for src, dst, lookahead in model.channels:
        ctx.channel(src, dst, lookahead)
    return tally


def last_hops(state: dict[str, Any]) -> dict[str, float]:
    """When each of this shard's entities last handled a message."""
    return dict(state["last"])
