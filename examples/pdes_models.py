"""Sharded models for simulacra's PDES tier: a grid conveyor and an adversarial tie model.

Each model is a builder ``build(ctx)`` (see ``simulacra.ShardContext``) that runs
unchanged unpartitioned (``simulacra.UnshardedSim``) and on any number of
shards (``simulacra.ShardedSim``), with the same trace. Both are importable
module-level functions, so worker processes can build them::

    import sys; sys.path.insert(0, "examples")
    from simulacra import ShardedSim, UnshardedSim
    import pdes_models

    grid = pdes_models.Grid(rows=8, cols=8, transfer=2.0)
    with ShardedSim(pdes_models.build_grid, shards=4, config=grid, seed=1) as sharded:
        sharded.run(until=50.0)
        print(pdes_models.merge_totals(sharded.call(pdes_models.grid_totals)))

Grid conveyor (:func:`build_grid`)
    ``rows x cols`` cells, each an entity with one server. Sources feed the
    cells of column 0 (Poisson arrivals); a cell serves an item (exponential
    service time, plus ``work`` units of pure-Python CPU work for
    benchmarks), then passes it to a cell of the next column (same row, or one
    up or down, wrapping around), taking ``transfer`` plus a random extra: the
    lookahead of every channel is ``transfer``. An item leaves after ``hops``
    services.

Adversarial ties (:func:`build_ties`)
    Entities on a ring tick at integer times and message their neighbours
    with delays that are exact multiples of the lookahead ``L`` (an integer), so
    messages arrive exactly on window horizons (``H = next + L``) and at the
    same instants as local ticks, zero-delay chains and child processes. Every
    entity folds what it sees, in the order it sees it, into a running
    checksum that it records and forwards: any difference in tie order
    changes the trace.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from simulacra import ConfigError, Entity, Event, ShardContext, Sim

__all__ = [
    "Grid",
    "Ties",
    "build_grid",
    "build_ties",
    "burn",
    "grid_totals",
    "merge_totals",
    "ties_totals",
]


def burn(seed: int, work: int) -> int:
    """Deterministic pure-Python CPU work: *work* steps of a 31-bit LCG from *seed*."""
    x = seed & 0x7FFFFFFF
    for _ in range(work):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


# --------------------------------------------------------------------------- grid conveyor


@dataclass(frozen=True, slots=True)
class Grid:
    """Parameters of the grid conveyor."""

    rows: int = 4
    cols: int = 4
    #: Minimum transfer time between cells: the lookahead of every channel.
    transfer: float = 1.0
    #: Mean of the exponential extra transfer time (0: always exactly `transfer`).
    jitter: float = 0.5
    #: Mean service time of a cell.
    service: float = 0.4
    #: Mean time between arrivals at each source cell (column 0).
    interarrival: float = 1.0
    #: Services an item gets before it leaves.
    hops: int = 6
    #: Arrivals stop after this time.
    horizon: float = 40.0
    #: LCG steps of CPU work per service (0 for none).
    work: int = 0

    def __post_init__(self) -> None:
        if self.rows < 1 or self.cols < 2:
            raise ConfigError(f"Grid: need rows >= 1 and cols >= 2, got {self.rows}x{self.cols}")
        if not self.transfer > 0:
            raise ConfigError(f"Grid: transfer (the lookahead) must be > 0, got {self.transfer}")


def _cell(r: int, c: int) -> str:
    return f"cell-{r}-{c}"


@dataclass
class _GridState:
    """One shard's view of the grid: counters of the cells it runs."""

    served: int = 0
    left: int = 0
    checksum: int = 0
    last_exit: float = 0.0


def build_grid(ctx: ShardContext) -> _GridState:
    """Build the grid conveyor (config: a :class:`Grid`)."""
    grid: Grid = ctx.config if ctx.config is not None else Grid()
    state = _GridState()
    rows, cols = grid.rows, grid.cols
    for r in range(rows):
        for c in range(cols):
            ctx.spawn_entity(_cell(r, c), _cell_process, grid, state, (r, c))
    for r in range(rows):
        for c in range(cols):
            for target in _successors(grid, r, c):
                ctx.channel(_cell(r, c), target, grid.transfer)
    return state


def _successors(grid: Grid, r: int, c: int) -> list[str]:
    rows = grid.rows
    rows_next = sorted({(r + dr) % rows for dr in (-1, 0, 1)})
    return [_cell(rr, (c + 1) % grid.cols) for rr in rows_next]


def _source(sim: Sim, me: Entity, grid: Grid) -> Generator[Event[Any], Any, None]:
    rng = me.rng("arrivals")
    n = 0
    while True:
        gap = rng.expovariate(1.0 / grid.interarrival)
        if sim.now + gap >= grid.horizon:
            return
        yield sim.delay(gap)
        n += 1
        item = (f"{me.name}:{n}", 0, n)
        sim.record("arrive", me.name, item)
        me.inbox.put(item)


def _cell_process(sim: Sim, me: Entity, grid: Grid, state: _GridState,
                  where: tuple[int, int]) -> Generator[Event[Any], Any, None]:
    r, c = where
    if c == 0:
        me.spawn(_source, grid, name="source")
    service = me.rng("service")
    route = me.rng("route")
    successors = _successors(grid, r, c)
    inbox = me.inbox
    while True:
        name, hops, check = yield inbox.get()
        yield sim.delay(service.expovariate(1.0 / grid.service))
        check = burn(check + hops, grid.work) if grid.work else (check * 31 + hops + 7) % 1_000_003
        hops += 1
        state.served += 1
        item = (name, hops, check)
        if hops >= grid.hops:
            state.left += 1
            state.checksum += check  # a sum: shards' totals add up to the whole
            state.last_exit = sim.now
            sim.record("leave", me.name, item)
            continue
        target = successors[route.randrange(len(successors))]
        extra = route.expovariate(1.0 / grid.jitter) if grid.jitter > 0 else 0.0
        me.send(target, item, grid.transfer + extra)


def grid_totals(state: _GridState) -> dict[str, Any]:
    """One shard's counters (for ``ShardedSim.call``)."""
    return {"served": state.served, "left": state.left, "checksum": state.checksum}


def merge_totals(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Add up the shards' counters; the checksums are combined order-independently."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0) + value
    return out


# --------------------------------------------------------------------------- adversarial ties


@dataclass(frozen=True, slots=True)
class Ties:
    """Parameters of the adversarial tie model."""

    #: Entities on the ring.
    entities: int = 6
    #: The lookahead: an integer, so that horizons and arrivals land on integers.
    lookahead: int = 1
    #: Ticks per entity (one per time unit).
    ticks: int = 8
    #: Message delays, as multiples of the lookahead (cycled through by each entity).
    multiples: tuple[int, ...] = (1, 1, 2)
    #: Every `passive_every`-th entity is passive (handles messages in a callback).
    passive_every: int = 3
    #: Mixes the message pattern.
    salt: int = 0


@dataclass
class _TieEntity:
    """An entity's own state: its running checksum."""

    check: int = 1
    seen: int = 0


@dataclass
class _TieModel:
    """What build_ties returns: every entity's state and handle."""

    states: dict[str, _TieEntity]
    entities: dict[str, Entity]


def _mix(check: int, value: int) -> int:
    return (check * 1_000_003 + value + 1) % 2_147_483_647


def build_ties(ctx: ShardContext) -> _TieModel:
    """Build the adversarial tie model (config: a :class:`Ties`)."""
    ties: Ties = ctx.config if ctx.config is not None else Ties()
    model = _TieModel({}, {})
    for i in range(ties.entities):
        name = f"node-{i}"
        state = model.states[name] = _TieEntity(check=i + 1)
        if ties.passive_every and i % ties.passive_every == ties.passive_every - 1:
            entity = ctx.add_entity(name, on_message=_Passive(ties, state, i))
        else:
            entity = ctx.spawn_entity(name, _active, ties, state, i)
        model.entities[name] = entity
    for i in range(ties.entities):
        for target in _neighbours(ties, i):
            ctx.channel(f"node-{i}", target, ties.lookahead)
    return model


def _neighbours(ties: Ties, i: int) -> list[str]:
    n = ties.entities
    return [f"node-{j}" for j in sorted({(i + 1) % n, (i - 1) % n, (i + 2) % n} - {i})]


class _Passive:
    """A passive entity's handler: fold the message in, and sometimes pass it on."""

    def __init__(self, ties: Ties, state: _TieEntity, index: int) -> None:
        self.ties = ties
        self.state = state
        self.index = index

    def __call__(self, me: Entity, payload: Any) -> None:
        sender, value = payload
        state = self.state
        state.check = _mix(state.check, value)
        state.seen += 1
        me.sim.record("fold", me.name, {"from": sender, "check": state.check})
        if state.seen % 2 == 0:  # forward, from a callback: keyed by the delivery event
            targets = _neighbours(self.ties, self.index)
            target = targets[(state.seen // 2 + self.ties.salt) % len(targets)]
            me.send(target, (me.name, state.check), self.ties.lookahead)


def _active(sim: Sim, me: Entity, ties: Ties, state: _TieEntity,
            index: int) -> Generator[Event[Any], Any, None]:
    me.spawn(_receiver, ties, state, name="rx")
    targets = _neighbours(ties, index)
    lookahead = ties.lookahead
    for tick in range(ties.ticks):
        # Zero-delay chain at the tick instant: ties with arrivals at this time.
        yield sim.delay(0)
        state.check = _mix(state.check, tick)
        sim.record("tick", me.name, {"tick": tick, "check": state.check})
        pick = (tick + index + ties.salt) % (len(targets) + 1)
        if pick < len(targets):
            multiple = ties.multiples[(tick + index) % len(ties.multiples)]
            me.send(targets[pick], (me.name, state.check), multiple * lookahead)
        if (tick + ties.salt) % 3 == 0:
            sim.spawn(_echo, me, state, tick)  # an unnamed child at the same instant
        flag = sim.event()
        flag.succeed(tick)
        yield flag
        yield sim.delay(1)


def _echo(sim: Sim, me: Entity, state: _TieEntity, tick: int) -> Generator[Event[Any], Any, None]:
    yield sim.delay(0)
    state.check = _mix(state.check, 1000 + tick)
    sim.record("echo", me.name, {"tick": tick, "check": state.check})


def _receiver(sim: Sim, me: Entity, ties: Ties,
              state: _TieEntity) -> Generator[Event[Any], Any, None]:
    while True:
        sender, value = yield me.inbox.get()
        state.check = _mix(state.check, value)
        state.seen += 1
        sim.record("got", me.name, {"from": sender, "check": state.check})
        if state.seen % 3 == 0:
            yield sim.delay(0)
            targets = _neighbours(ties, int(me.name.split("-")[1]))
            me.send(targets[state.seen % len(targets)], (me.name, state.check),
                    ties.lookahead * ties.multiples[state.seen % len(ties.multiples)])


def ties_totals(model: _TieModel) -> dict[str, int]:
    """The checksums of the entities this shard runs (for ``ShardedSim.call``)."""
    return {name: model.states[name].check
            for name, entity in model.entities.items() if entity.owned}


def main() -> None:
    """Run the grid conveyor and the tie model unpartitioned and on 1 to 8 shards."""
    import argparse  # noqa: PLC0415
    import sys  # noqa: PLC0415

    argparse.ArgumentParser(  # no options: --help says what it does, anything else is refused
        prog="python examples/pdes_models.py",
        description="Run a grid conveyor and an adversarial tie model unpartitioned and on "
                    "1, 2, 4 and 8 shards, and check that every trace equals the unpartitioned "
                    "one (exit status 1 if one differs).").parse_args()
    from simulacra import ShardedSim, UnshardedSim, first_divergence  # noqa: PLC0415

    failed = False
    for name, builder, config, until in (
            ("grid", build_grid, Grid(rows=4, cols=4, transfer=1.0, horizon=20.0), 30.0),
            ("ties", build_ties, Ties(entities=8, lookahead=1, ticks=8), None)):
        ref = UnshardedSim(builder, seed=11, config=config, trace=True)
        ref.run(until=until)
        expected = ref.trace()
        print(f"{name}: {len(expected)} trace records unpartitioned, digest "
              f"{expected.digest()[:16]}")
        for shards in (1, 2, 4, 8):
            with ShardedSim(builder, shards=shards, mode="inline", seed=11, config=config,
                            trace=True) as sim:
                sim.run(until=until)
                trace, stats = sim.trace(), sim.stats
            same = first_divergence(expected, trace) is None
            failed |= not same
            print(f"  {shards} shard(s): {'equal' if same else 'DIFFERENT'}, {stats.rounds} "
                  f"rounds, {stats.messages} messages across shards")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
