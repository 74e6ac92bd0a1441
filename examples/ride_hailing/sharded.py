"""The robotaxi fleet, sharded by zone: each zone of the ring is a PDES entity.

A simplified variant of :mod:`model` that a :class:`~simulacra.ShardedSim` can
partition. The ring of zones, the travel times, the demand weights, the
vehicles' battery and the parameters (:class:`model.Params`) are the same;
what changes is that nothing is shared between zones:

* each zone has its own demand (a Poisson share ``weight / total weight`` of
  ``demand_rate``, stream ``zone-<z>/demand``), its own riders with a patience
  window, its own dispatcher and its own queue of idle vehicles (the vehicle
  idle longest is the closest: it is in the zone);
* a vehicle is *data*: while it is in a zone, a process of that zone drives it;
  when it leaves for another zone (carrying a rider, repositioning, or going to
  a charging station), the zone sends it there as a message that takes the
  travel time. The channel from zone *a* to zone *b* has lookahead
  ``travel(a, b) = min_travel + hop_time * ring_distance(a, b) >= min_travel``:
  the model's minimum travel time is the lookahead;
* repositioning uses local knowledge only: a vehicle that drops off in a zone
  with at least two other vehicles idle moves to the busier neighbour (by
  origin weight), else it stays.

Usage::

    import sys; sys.path.insert(0, "examples")
    from simulacra import ShardedSim, UnshardedSim
    from ride_hailing import sharded

    with ShardedSim(sharded.build, shards=4, config={"horizon": 120.0}, seed=7) as sim:
        sim.run(until=120.0)
        print(sharded.total_kpis(sim.call(sharded.zone_kpis)))
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import deque
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simulacra import ConfigError, Entity, Event, Resource, ShardContext, Sim, Store

try:
    from .model import Params, Vehicle
except ImportError:  # run as a script: python examples/ride_hailing/sharded.py
    from model import Params, Vehicle  # type: ignore[no-redef]

__all__ = ["ZoneState", "build", "total_kpis", "zone_kpis", "zone_name"]


def zone_name(zone: int) -> str:
    """The entity name of *zone*."""
    return f"zone-{zone}"


@dataclass
class _Rider:
    """A request waiting in its origin zone."""

    index: str
    arrived: float
    destination: int
    assigned: Event[Vehicle]
    vehicle: Vehicle | None = None

    def __trace__(self) -> object:
        return {"request": self.index, "destination": self.destination}


@dataclass
class ZoneState:
    """One zone: its queues, its station (if any), its counters."""

    zone: int
    fleet: _Fleet
    entity: Entity | None = None
    idle: Store[Vehicle] | None = None
    waiting: deque[_Rider] = field(default_factory=deque)
    wakeup: Event[None] | None = None
    station: Resource | None = None
    requests: int = 0
    served: int = 0
    abandoned: int = 0
    waits: list[float] = field(default_factory=list)
    charges: int = 0


@dataclass
class _Fleet:
    """What every zone knows: the parameters and the geometry (all read-only)."""

    params: Params
    travel: list[list[float]]
    weight: list[float]
    station_zones: list[int]
    nearest_station: list[int]
    zones: dict[int, ZoneState]


def _params(config: Any) -> Params:
    if config is None:
        return Params()
    if isinstance(config, Params):
        return config
    if isinstance(config, Mapping):
        known = {f.name for f in dataclasses.fields(Params)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ConfigError(f"ride_hailing.sharded: unknown parameter {unknown[0]!r}")
        return Params(**config)
    raise ConfigError(f"ride_hailing.sharded: config must be a dict or Params, got {config!r}")


def build(ctx: ShardContext) -> _Fleet:
    """Build the zone-sharded fleet (config: a dict of :class:`model.Params` fields)."""
    params = _params(ctx.config)
    zones = params.zones
    travel = [
        [params.min_travel + params.hop_time * min(abs(a - b), zones - abs(a - b))
         for b in range(zones)]
        for a in range(zones)
    ]
    weight = [2.0 + math.cos(2.0 * math.pi * z / zones) for z in range(zones)]
    station_zones = [round(k * zones / params.stations) % zones for k in range(params.stations)]
    nearest = [min(station_zones, key=lambda s, z=z: (travel[z][s], s)) for z in range(zones)]
    fleet = _Fleet(params, travel, weight, station_zones, nearest, {})
    for z in range(zones):
        state = fleet.zones[z] = ZoneState(z, fleet)
        state.entity = ctx.spawn_entity(zone_name(z), _zone, state)
    for a in range(zones):
        for b in range(zones):
            if a != b:
                ctx.channel(zone_name(a), zone_name(b), travel[a][b])
    return fleet


# --------------------------------------------------------------------------- processes


def _zone(sim: Sim, me: Entity, state: ZoneState) -> Generator[Event[Any], Any, None]:
    """A zone's main process: set up, start the helpers, then take vehicles as they arrive."""
    fleet = state.fleet
    params = fleet.params
    state.idle = Store(sim)
    if state.zone in fleet.station_zones:
        state.station = Resource(sim, capacity=params.chargers)
    low = params.recharge_below * params.battery_range
    for index in range(params.vehicles):
        if index * params.zones // params.vehicles == state.zone:
            battery = me.rng(f"vehicle-{index}").uniform(low, params.battery_range)
            sim.spawn(_idle, state, Vehicle(index, state.zone, battery))
    me.spawn(_demand, state, name="demand")
    me.spawn(_dispatcher, state, name="dispatch")
    while True:
        kind, vehicle, rider = yield me.inbox.get()
        vehicle.zone = state.zone
        if kind == "drop":
            sim.spawn(_drop_off, state, vehicle, rider)
        elif kind == "charge":
            sim.spawn(_charge, state, vehicle)
        else:
            sim.spawn(_idle, state, vehicle)


def _drive(sim: Sim, fleet: _Fleet, vehicle: Vehicle, zone: int) -> Event[Any]:
    duration = fleet.travel[vehicle.zone][zone]
    vehicle.battery -= duration
    return sim.delay(duration)


def _leave(state: ZoneState, vehicle: Vehicle, zone: int, kind: str, rider: object = None) -> None:
    """Send *vehicle* to *zone*: a message that takes the travel time."""
    assert state.entity is not None
    duration = state.fleet.travel[vehicle.zone][zone]
    vehicle.battery -= duration
    vehicle.job = None
    state.entity.send(zone_name(zone), (kind, vehicle, rider), duration)


def _idle(sim: Sim, state: ZoneState, vehicle: Vehicle) -> Generator[Event[Any], Any, None]:
    """Offer the vehicle to the dispatcher; serve the rider it is given."""
    assert state.idle is not None
    fleet = state.fleet
    name = zone_name(state.zone)
    vehicle.state = "idle"
    job: Event[_Rider] = sim.event()
    vehicle.job = job
    yield state.idle.put(vehicle)
    rider: _Rider = yield job
    vehicle.state = "to_pickup"
    yield _drive(sim, fleet, vehicle, state.zone)
    state.waits.append(sim.now - rider.arrived)
    sim.record("pickup", name, {"vehicle": vehicle.index, "request": rider.index})
    vehicle.state = "carrying"
    if rider.destination == state.zone:
        yield _drive(sim, fleet, vehicle, state.zone)
        sim.spawn(_drop_off, state, vehicle, rider.index)
    else:
        _leave(state, vehicle, rider.destination, "drop", rider.index)


def _drop_off(sim: Sim, state: ZoneState, vehicle: Vehicle,
              request: str) -> Generator[Event[Any], Any, None]:
    """A vehicle reached its rider's destination: drop off, then recharge or reposition."""
    fleet = state.fleet
    params = fleet.params
    name = zone_name(state.zone)
    state.served += 1
    sim.record("drop_off", name, {"vehicle": vehicle.index, "request": request})
    yield sim.delay(0)
    if vehicle.battery < params.recharge_below * params.battery_range:
        station = fleet.nearest_station[state.zone]
        vehicle.state = "to_charger"
        if station == state.zone:
            sim.spawn(_charge, state, vehicle)
        else:
            _leave(state, vehicle, station, "charge")
        return
    assert state.idle is not None
    zones = params.zones
    target = state.zone
    if len(state.idle.items) >= 2:
        left, right = (state.zone - 1) % zones, (state.zone + 1) % zones
        target = max((left, right), key=lambda z: (fleet.weight[z], -z))
    if target == state.zone:
        sim.spawn(_idle, state, vehicle)
    else:
        vehicle.state = "repositioning"
        sim.record("reposition", name, {"vehicle": vehicle.index, "to": target})
        _leave(state, vehicle, target, "reposition")


def _charge(sim: Sim, state: ZoneState, vehicle: Vehicle) -> Generator[Event[Any], Any, None]:
    """Queue for a charger of this zone's station and charge to full; then idle here."""
    params = state.fleet.params
    assert state.station is not None
    with state.station.request() as charger:
        yield charger
        vehicle.state = "charging"
        sim.record("charge", zone_name(state.zone),
                   {"vehicle": vehicle.index, "battery": vehicle.battery})
        yield sim.delay(params.charge_time * (1.0 - vehicle.battery / params.battery_range))
        vehicle.battery = params.battery_range
    state.charges += 1
    sim.spawn(_idle, state, vehicle)


def _demand(sim: Sim, me: Entity, state: ZoneState) -> Generator[Event[Any], Any, None]:
    """Poisson requests from this zone until the horizon."""
    fleet = state.fleet
    params = fleet.params
    rng = me.rng("demand")
    rate = params.demand_rate * fleet.weight[state.zone] / math.fsum(fleet.weight)
    count = 0
    while True:
        gap = rng.expovariate(rate)
        if sim.now + gap >= params.horizon:
            return
        yield sim.delay(gap)
        count += 1
        rider = _Rider(f"{state.zone}.{count}", sim.now, rng.randrange(params.zones), sim.event())
        state.requests += 1
        sim.record("request", me.name, rider)
        sim.spawn(_rider, state, rider)


def _rider(sim: Sim, state: ZoneState, rider: _Rider) -> Generator[Event[Any], Any, None]:
    """Wait for a vehicle to be assigned, or abandon after the patience window."""
    state.waiting.append(rider)
    wakeup = state.wakeup
    if wakeup is not None:
        state.wakeup = None
        wakeup.succeed()
    yield rider.assigned | sim.delay(state.fleet.params.patience)
    if rider.vehicle is None:
        state.waiting.remove(rider)
        state.abandoned += 1
        sim.record("abandon", zone_name(state.zone), rider)


def _dispatcher(sim: Sim, me: Entity, state: ZoneState) -> Generator[Event[Any], Any, None]:
    """Give idle vehicles of this zone to its waiting riders, oldest first."""
    assert state.idle is not None
    while True:
        if not state.waiting:
            state.wakeup = sim.event()
            yield state.wakeup
            continue
        vehicle: Vehicle = yield state.idle.get()
        if not state.waiting:  # everyone abandoned meanwhile: offer it again
            yield state.idle.put(vehicle)
            continue
        rider = state.waiting.popleft()
        rider.vehicle = vehicle
        sim.record("assign", me.name, {"request": rider.index, "vehicle": vehicle.index})
        job = vehicle.job
        assert job is not None
        job.succeed(rider)
        rider.assigned.succeed(vehicle)


# --------------------------------------------------------------------------- results


def zone_kpis(fleet: _Fleet) -> dict[str, Any]:
    """The counters of the zones this shard runs (for ``ShardedSim.call``)."""
    out: dict[str, Any] = {"requests": 0, "served": 0, "abandoned": 0, "charges": 0,
                           "waits": []}
    for state in fleet.zones.values():
        if state.entity is None or not state.entity.owned:
            continue
        out["requests"] += state.requests
        out["served"] += state.served
        out["abandoned"] += state.abandoned
        out["charges"] += state.charges
        out["waits"].extend(state.waits)
    return out


def total_kpis(parts: Sequence[dict[str, Any]]) -> dict[str, float | int]:
    """Fleet KPIs from the shards' counters (the same for every partition)."""
    requests = sum(p["requests"] for p in parts)
    abandoned = sum(p["abandoned"] for p in parts)
    waits = sorted(w for p in parts for w in p["waits"])
    return {
        "requests": requests,
        "served": sum(p["served"] for p in parts),
        "abandoned": abandoned,
        "abandonment_rate": abandoned / requests if requests else 0.0,
        "mean_wait": math.fsum(waits) / len(waits) if waits else 0.0,
        "charges": sum(p["charges"] for p in parts),
    }


def main() -> None:
    """Run the fleet unpartitioned and on 1, 2 and 4 worker processes; show they agree."""
    import argparse  # noqa: PLC0415
    import sys  # noqa: PLC0415

    argparse.ArgumentParser(  # no options: --help says what it does, anything else is refused
        prog="python examples/ride_hailing/sharded.py",
        description="Run the zone-sharded robotaxi fleet unpartitioned and on 1, 2 and 4 "
                    "worker processes, and check that the traces and KPIs agree (exit status "
                    "1 if not).").parse_args()
    import time  # noqa: PLC0415

    from simulacra import ShardedSim, UnshardedSim, first_divergence  # noqa: PLC0415

    config = {"horizon": 120.0, "vehicles": 24, "zones": 8, "demand_rate": 2.0}
    ref = UnshardedSim(build, seed=7, config=config, trace=True)
    ref.run(until=120.0)
    expected = ref.trace()
    print(f"unpartitioned: {total_kpis(ref.call(zone_kpis))}")
    print(f"  {len(expected)} trace records, digest {expected.digest()[:16]}")
    failed = False
    for shards in (1, 2, 4):
        start = time.perf_counter()
        # Worker processes import the builder by name: this file's path.
        with ShardedSim(f"{__file__}:build", shards=shards, config=config, seed=7,
                        trace=True) as sim:
            sim.run(until=120.0)
            trace = sim.trace()
            kpis = total_kpis(sim.call(f"{__file__}:zone_kpis"))
        same = first_divergence(expected, trace) is None
        failed |= not same
        ties = trace.ties
        print(f"{shards} shard(s), processes: {'equal' if same else 'DIFFERENT'} trace "
              f"({trace.digest()[:16]}), {time.perf_counter() - start:.2f} s, "
              f"ties {ties.ties if ties else '?'} ({ties.across_shards if ties else '?'} "
              f"across shards)")
        if kpis != total_kpis(ref.call(zone_kpis)):
            failed = True
            print(f"  KPIs differ: {kpis}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's exit status, no traceback
        print("interrupted", file=sys.stderr)
        sys.exit(130)
