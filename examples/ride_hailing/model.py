"""A robotaxi fleet serving Poisson trip requests on a ring of city zones.

The city
    ``zones`` zones sit on a ring. Driving from zone *a* to zone *b* takes
    ``min_travel + hop_time * ring_distance(a, b)`` time units (think minutes),
    where ``ring_distance`` counts hops the short way round. ``min_travel`` is
    strictly positive, so no trip, not even one inside a zone, takes zero time.
    That minimum is deliberate: it is the *lookahead* of the model. Whatever a
    vehicle does in one zone can affect another zone no sooner than
    ``min_travel`` later, and a zone-sharded (PDES) variant of this model will
    use exactly that value as the lookahead of its cross-shard channels
    (:attr:`Params.lookahead`). Continuous coordinates would have given nearby
    points a lookahead close to zero, and no useful sharding.

Demand
    Requests arrive as a Poisson process of rate ``demand_rate`` (stream
    ``"demand"``) until ``horizon``. Origins are weighted towards "downtown"
    (zone 0: weight ``2 + cos(2 pi z / zones)``, from 1 to 3); destinations are
    uniform. A request that has no vehicle *assigned* within ``patience``
    abandons: its rider process waits on ``assigned | delay(patience)``. Once a
    vehicle is assigned, the rider waits for it however long the drive takes.

Vehicles
    Each vehicle is a process running the lifecycle
    ``idle -> drive to pickup -> carry -> drop off -> reposition -> recharge``:

    * *idle*: the vehicle puts itself into the fleet's :class:`~simulacra.FilterStore`
      of idle vehicles and waits for a job;
    * *drive to pickup* and *carry*: drive to the origin, then to the destination;
    * *drop off*: the trip is served;
    * *reposition*: move towards demand, to whichever of its own zone and the two
      neighbouring zones has the highest origin weight per vehicle idle there
      or heading there (staying on ties);
    * *recharge*: a vehicle whose battery has fallen below ``recharge_below`` of
      ``battery_range`` repositions to the nearest charging station instead,
      queues for one of its ``chargers`` (a :class:`~simulacra.Resource` per
      station) and charges back to full, taking ``charge_time`` for a full charge
      and proportionally less for a partial one.

    The battery is measured in driving time: it holds ``battery_range`` time
    units of driving and drains one unit per unit driven, so it decreases with
    distance. ``recharge_below * battery_range`` must cover the longest job
    (a pickup, a trip and the drive to a station), so a vehicle never runs dry.

Dispatch
    One dispatcher process serves waiting requests oldest first. For the oldest
    it picks a vehicle from the idle store with the dispatch policy, then takes
    that vehicle out of the store with a filter (``idle.get(filter=...)``).
    When no vehicle is idle it waits for the first vehicle to become idle.
    Policies (:data:`POLICIES`, chosen by the ``policy`` parameter):

    * ``"closest"``: the closest idle vehicle (the longest idle on ties);
    * ``"power_of_d"``: *d* idle vehicles sampled with the ``"dispatch"`` stream,
      the closest of those. It looks at *d* vehicles instead of all of them.

KPIs (:meth:`Fleet.kpis`)
    ``requests``, ``served`` (dropped off), ``abandoned``, ``open`` (still
    waiting, assigned or riding at the end), ``abandonment_rate`` (abandoned /
    requests), ``mean_wait`` (request to pickup, over picked-up requests),
    ``utilisation`` (fraction of vehicle time spent driving to a pickup or
    carrying), ``charges`` (charging sessions completed), ``mean_charger_wait``
    (time queued for a charger) and ``charger_utilisation`` (busy fraction of
    all chargers).

Knobs (:func:`knobs`, :data:`KNOBS` for the default three stations)
    Parameters a scenario may change during a run (see ``docs/scenarios.md``):
    ``demand`` (a multiplier on ``demand_rate``, from the next arrival on),
    ``charge_rate`` (a multiplier on charging speed: 0.5 charges at half speed,
    from the next charging session on), ``station_<k>`` (station *k* is up;
    a vehicle that needs a charge goes to the nearest station that is up, or
    waits at the nearest one until one is; vehicles charging when it goes down
    finish), ``patience`` (of requests made from then on) and ``fleet_size``
    (vehicles in service: a cut parks idle vehicles, and busy ones when they
    next become idle; a rise brings parked vehicles back, then new ones with a
    full battery at zone 0). Every change is recorded in the trace. Without a
    scenario the model runs exactly as it would without knobs.

Use :func:`build` to set the model up on a :class:`~simulacra.Sim` of your own
(tracing, another run length, reuse by experiments), and :func:`run` to run it
once and get the KPIs. Same seed, same KPIs and the same trace digest; with a
scenario, the same seed and scenario give the same KPIs and digest.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from simulacra import (
    ConfigError,
    Event,
    FilterStore,
    MonitorSet,
    ProcessGenerator,
    Resource,
    Sim,
    Tally,
)
from simulacra.scenarios import Knob, KnobBoard, Knobs, Scenario, apply_scenario, load_scenario

__all__ = [
    "KNOBS",
    "POLICIES",
    "Closest",
    "DispatchPolicy",
    "Fleet",
    "Params",
    "PowerOfD",
    "Request",
    "Vehicle",
    "build",
    "knobs",
    "run",
]


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True, slots=True)
class Params:
    """The parameters of the model; validated when made.

    Raises:
        ConfigError: a parameter is out of range; the message names the field,
            the value given and what was expected.
    """

    #: Number of vehicles.
    vehicles: int = 40
    #: Number of zones on the ring.
    zones: int = 12
    #: Requests per time unit (Poisson).
    demand_rate: float = 3.0
    #: Requests arrive until this time; ``run`` stops here.
    horizon: float = 600.0
    #: Dispatch policy: a key of POLICIES.
    policy: str = "closest"
    #: Vehicles sampled by the power_of_d policy.
    d: int = 2
    #: How long a request waits for a vehicle to be assigned before abandoning.
    patience: float = 8.0
    #: Travel time between two points of the same zone; the model's lookahead (> 0).
    min_travel: float = 1.0
    #: Extra travel time per hop of ring distance.
    hop_time: float = 1.0
    #: Number of charging stations, spread evenly around the ring.
    stations: int = 3
    #: Chargers per station (the capacity of its Resource).
    chargers: int = 3
    #: A full battery, in time units of driving.
    battery_range: float = 120.0
    #: Recharge after a drop-off when the battery is below this fraction of battery_range.
    recharge_below: float = 0.25
    #: Time to charge an empty battery to full (partial charges take proportionally less).
    charge_time: float = 30.0

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def lookahead(self) -> float:
        """The least time in which anything in one zone can affect another zone."""
        return self.min_travel


def _fail(name: str, value: object, expected: str) -> ConfigError:
    return ConfigError(f"ride_hailing: {name} must be {expected}, got {value!r}")


def _check_int(params: Params, name: str, least: int) -> None:
    value = getattr(params, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _fail(name, value, f"an int >= {least}")


def _check_number(params: Params, name: str, *, positive: bool) -> None:
    value = getattr(params, name)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (value > 0 if positive else value >= 0):
        raise _fail(name, value, "a finite number > 0" if positive else "a finite number >= 0")


def _validate(params: Params) -> None:
    for name in ("vehicles", "zones", "d", "stations", "chargers"):
        _check_int(params, name, 1)
    for name in ("demand_rate", "horizon", "patience", "min_travel", "battery_range",
                 "charge_time"):
        _check_number(params, name, positive=True)
    _check_number(params, "hop_time", positive=False)
    if params.policy not in POLICIES:
        known = ", ".join(repr(name) for name in POLICIES)
        raise _fail("policy", params.policy, f"one of {known}")
    if params.stations > params.zones:
        raise _fail("stations", params.stations,
                    f"at most zones={params.zones} (one station per zone at most)")
    below: object = params.recharge_below
    if isinstance(below, bool) or not isinstance(below, int | float) or not 0 < below < 1:
        raise _fail("recharge_below", below, "a fraction strictly between 0 and 1")
    # The longest job: a pickup and a trip, each at most half the ring, then the
    # drive to the nearest station (at most half the distance between stations).
    longest = (2 * _travel(params, params.zones // 2)
               + _travel(params, math.ceil(params.zones / params.stations) // 2))
    if below * params.battery_range < longest:
        raise _fail(
            "recharge_below", below,
            f"a fraction whose reserve recharge_below * battery_range covers the longest job "
            f"(pickup + trip + drive to a station = {longest!r} time units of driving; "
            f"battery_range={params.battery_range!r})",
        )


def _travel(params: Params, hops: int) -> float:
    return params.min_travel + params.hop_time * hops


def _station_zones(params: Params) -> list[int]:
    """The zone of each charging station, spread evenly around the ring."""
    return [round(k * params.zones / params.stations) % params.zones
            for k in range(params.stations)]


def knobs(params: Params | None = None) -> Knobs:
    """The knobs of a fleet with *params* (one ``station_<k>`` per station)."""
    params = params or Params()
    return Knobs(
        Knob("demand", "float", 1.0, low=0.01, high=100.0,
             doc="multiplier on the request rate demand_rate"),
        Knob("charge_rate", "float", 1.0, low=0.01, high=100.0,
             doc="multiplier on charging speed (0.5: a charge takes twice as long)"),
        *(Knob(f"station_{k}", "bool", True,
               doc=f"charging station {k} (in zone {zone}) is up")
          for k, zone in enumerate(_station_zones(params))),
        Knob("patience", "float", params.patience, low=0.01,
             doc="how long a new request waits for a vehicle before abandoning",
             unit="time units"),
        Knob("fleet_size", "int", params.vehicles, low=1, high=10 * params.vehicles,
             doc="vehicles in service", unit="vehicles"),
    )


# --------------------------------------------------------------------------- entities


class Vehicle:
    """One robotaxi: where it is, how much battery it has, and what it is doing."""

    __slots__ = ("battery", "busy_since", "index", "job", "name", "state", "zone")

    def __init__(self, index: int, zone: int, battery: float) -> None:
        self.index = index
        self.name = f"vehicle-{index}"
        #: The zone it is in (or was last in, while driving).
        self.zone = zone
        #: Remaining charge, in time units of driving.
        self.battery = battery
        #: idle, to_pickup, carrying, to_charger, charging or repositioning.
        self.state = "new"
        #: The event the dispatcher succeeds with a Request; set while idle.
        self.job: Event[Request] | None = None
        #: When the current pickup-and-carry job started; None when not on a job.
        self.busy_since: float | None = None

    def __repr__(self) -> str:
        return f"<Vehicle {self.index} zone={self.zone} {self.state} battery={self.battery:.1f}>"

    def __trace__(self) -> object:
        return {"vehicle": self.index, "zone": self.zone}


class Request:
    """One trip request and what became of it."""

    __slots__ = ("arrived", "assigned", "destination", "index", "origin", "outcome",
                 "picked_up", "vehicle")

    def __init__(self, sim: Sim, index: int, origin: int, destination: int) -> None:
        self.index = index
        self.arrived = sim.now
        self.origin = origin
        self.destination = destination
        #: Succeeds with the vehicle when the dispatcher assigns one.
        self.assigned: Event[Vehicle] = sim.event()
        self.vehicle: Vehicle | None = None
        self.picked_up: float | None = None
        #: None while open, then "served" or "abandoned".
        self.outcome: str | None = None

    def __repr__(self) -> str:
        return f"<Request {self.index} {self.origin}->{self.destination} {self.outcome}>"

    def __trace__(self) -> object:
        return {"request": self.index, "origin": self.origin, "destination": self.destination}


# --------------------------------------------------------------------------- dispatch policies


class DispatchPolicy(Protocol):
    """Chooses which idle vehicle serves a request."""

    def choose(self, request: Request, idle: Sequence[Vehicle]) -> Vehicle | None:
        """The vehicle to send to *request*, from *idle* (oldest idle first); None if empty."""
        ...


class Closest:
    """The closest idle vehicle; the one idle longest among equally close ones."""

    def __init__(self, travel: Sequence[Sequence[float]]) -> None:
        self._travel = travel

    def choose(self, request: Request, idle: Sequence[Vehicle]) -> Vehicle | None:
        """The closest of all idle vehicles."""
        if not idle:
            return None
        to_origin = self._travel[request.origin]
        return min(idle, key=lambda vehicle: to_origin[vehicle.zone])


class PowerOfD:
    """The closest of *d* idle vehicles sampled at random (all of them if fewer)."""

    def __init__(self, travel: Sequence[Sequence[float]], d: int, rng: random.Random) -> None:
        self._travel = travel
        self._d = d
        self._rng = rng

    def choose(self, request: Request, idle: Sequence[Vehicle]) -> Vehicle | None:
        """The closest of a random sample of *d* idle vehicles."""
        if not idle:
            return None
        sample = self._rng.sample(idle, min(self._d, len(idle)))
        to_origin = self._travel[request.origin]
        return min(sample, key=lambda vehicle: to_origin[vehicle.zone])


def _closest(fleet: Fleet) -> DispatchPolicy:
    return Closest(fleet.travel)


def _power_of_d(fleet: Fleet) -> DispatchPolicy:
    return PowerOfD(fleet.travel, fleet.params.d, fleet.sim.rng("dispatch"))


#: Dispatch policies by name: each makes the policy for a fleet. Add one here to plug it in.
POLICIES: dict[str, Callable[[Fleet], DispatchPolicy]] = {
    "closest": _closest,
    "power_of_d": _power_of_d,
}


# --------------------------------------------------------------------------- the model


class Fleet:
    """The model's state on one Sim: vehicles, stations, queues and counters."""

    def __init__(self, sim: Sim, params: Params) -> None:
        self.sim = sim
        self.params = params
        zones = params.zones
        #: travel[a][b]: driving time from zone a to zone b.
        self.travel: list[list[float]] = [
            [_travel(params, min(abs(a - b), zones - abs(a - b))) for b in range(zones)]
            for a in range(zones)
        ]
        #: Origin weight of each zone ("downtown" is zone 0).
        self.weight = [2.0 + math.cos(2.0 * math.pi * zone / zones) for zone in range(zones)]
        self._cum_weight = list(_accumulate(self.weight))
        self.idle: FilterStore[Vehicle] = FilterStore(sim)
        #: Vehicles idle in each zone or repositioning to it (what repositioning balances).
        self.supply = [0] * zones
        self.station_zones = _station_zones(params)
        self.stations = [Resource(sim, capacity=params.chargers) for _ in self.station_zones]
        #: Nearest station (its index) from each zone; the lowest index on ties.
        self.nearest_station = [self._nearest_station(zone) for zone in range(zones)]
        self.policy: DispatchPolicy = POLICIES[params.policy](self)
        #: Requests waiting for a vehicle to be assigned, oldest first.
        self.waiting: deque[Request] = deque()
        self._wakeup: Event[None] | None = None
        self.vehicles: list[Vehicle] = []
        self.requests: list[Request] = []
        self.served = 0
        self.abandoned = 0
        self.charges = 0
        #: Request-to-pickup times of picked-up requests.
        self.waits: list[float] = []
        #: Vehicle time spent on finished pickup-and-carry jobs.
        self.busy_time = 0.0
        self.started = sim.now
        #: The knobs' current values (see the module docstring); changes are traced.
        self.knobs = KnobBoard(knobs(params), sim)
        #: Vehicles in service (not parked by a fleet_size cut).
        self.in_service = 0
        #: Parked vehicles, oldest parked first.
        self.parked: deque[Vehicle] = deque()
        self._station_up: Event[None] | None = None
        self.knobs.watch("fleet_size", lambda old, new: self.resize(new))
        for k in range(params.stations):
            self.knobs.watch(f"station_{k}", self._station_changed)

    # -- knobs -----------------------------------------------------------------

    def station_is_up(self, k: int) -> bool:
        """Whether station *k* is up (its ``station_<k>`` knob)."""
        return bool(self.knobs[f"station_{k}"])

    def charging_station(self, zone: int) -> int | None:
        """The nearest station that is up (the lowest index on ties), or None if all are down."""
        nearest = self.nearest_station[zone]
        if self.station_is_up(nearest):
            return nearest  # the common case, exactly as without knobs
        up = [k for k in range(len(self.station_zones)) if self.station_is_up(k)]
        if not up:
            return None
        from_zone = self.travel[zone]
        return min(up, key=lambda k: from_zone[self.station_zones[k]])

    def wait_for_a_station(self) -> Event[None]:
        """An event that succeeds when some station comes back up."""
        if self._station_up is None:
            self._station_up = self.sim.event()
        return self._station_up

    def _station_changed(self, old: object, new: object) -> None:
        if new and self._station_up is not None:
            event, self._station_up = self._station_up, None
            event.succeed()

    def resize(self, size: int) -> None:
        """Bring the vehicles in service to *size*: unpark, add, or park idle ones."""
        while self.in_service < size and self.parked:
            vehicle = self.parked.popleft()
            self.in_service += 1
            self.supply[vehicle.zone] += 1
            vehicle.state = "idle"
            self.sim.record("unpark", vehicle.name, None)
            self.idle.put(vehicle)
        while self.in_service < size:
            vehicle = Vehicle(len(self.vehicles), 0, self.params.battery_range)
            self.vehicles.append(vehicle)
            self.supply[0] += 1
            self.in_service += 1
            self.sim.spawn(vehicle_process, self, vehicle, name=vehicle.name)
        surplus = self.in_service - size
        if surplus > 0:
            # Park the vehicles idle longest ago first; busy ones park when next idle.
            for vehicle in list(self.idle.items)[:surplus]:
                self.sim.spawn(_park_idle, self, vehicle, name=f"park:{vehicle.name}")
                self.in_service -= 1

    def must_park(self) -> bool:
        """Whether a vehicle about to become idle is one too many (a fleet_size cut)."""
        return self.in_service > int(self.knobs["fleet_size"])

    def park(self, vehicle: Vehicle) -> None:
        """Take *vehicle* out of service; its job event waits until it is unparked."""
        vehicle.state = "parked"
        self.supply[vehicle.zone] -= 1
        self.parked.append(vehicle)
        self.sim.record("park", vehicle.name, None)

    def _nearest_station(self, zone: int) -> int:
        from_zone = self.travel[zone]
        return min(range(len(self.station_zones)),
                   key=lambda k: from_zone[self.station_zones[k]])

    # -- helpers used by the processes ------------------------------------

    def drive(self, vehicle: Vehicle, zone: int) -> Generator[Event[Any], Any, None]:
        """Drive *vehicle* to *zone* (``yield from`` it in the vehicle's process)."""
        duration = self.travel[vehicle.zone][zone]
        yield self.sim.delay(duration)
        vehicle.battery -= duration
        vehicle.zone = zone

    def reposition_target(self, zone: int) -> int:
        """Its own zone or a neighbour: the highest origin weight per vehicle supplied."""
        zones = self.params.zones
        candidates = (zone, (zone - 1) % zones, (zone + 1) % zones)
        return max(candidates, key=lambda z: self.weight[z] / (1 + self.supply[z]))

    def origin(self, rng: random.Random) -> int:
        """A request origin, drawn with the zone weights."""
        return rng.choices(range(self.params.zones), cum_weights=self._cum_weight)[0]

    def notify_dispatcher(self) -> None:
        """Wake the dispatcher if it sleeps for lack of waiting requests."""
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.succeed()

    def wait_for_request(self) -> Event[None]:
        """The event the dispatcher sleeps on while no request waits."""
        self._wakeup = self.sim.event()
        return self._wakeup

    # -- monitors --------------------------------------------------------------

    def monitor(self, prefix: str = "") -> MonitorSet:
        """Record, from now on, the idle vehicles and each charging station over time.

        Series (``docs/monitors.md``): ``PREFIXidle.items`` (vehicles idle),
        ``PREFIXidle.getters`` (the dispatcher waiting for one), and per station
        ``PREFIXstation-K.utilisation`` and ``PREFIXstation-K.queue`` (vehicles
        waiting for a charger). Returns them, to save with the waits
        (:meth:`wait_tally`).
        """
        found = MonitorSet(self.idle.monitor(f"{prefix}idle"))
        for k, station in enumerate(self.stations):
            found.add(station.monitor(f"{prefix}station-{k}"))
        return found

    def wait_tally(self, name: str = "wait") -> Tally:
        """The request-to-pickup waits so far, as a Tally named *name*."""
        tally = Tally(self.sim, name)
        for wait in self.waits:
            tally.record(wait)
        return tally

    # -- KPIs ----------------------------------------------------------------

    def kpis(self) -> dict[str, float | int]:
        """The KPIs so far (see the module docstring)."""
        sim = self.sim
        now = sim.now
        span = now - self.started
        busy = self.busy_time + sum(now - v.busy_since for v in self.vehicles
                                    if v.busy_since is not None)
        requests = len(self.requests)
        stats = [station.statistics() for station in self.stations]
        grants = sum(s.grants for s in stats)
        return {
            "requests": requests,
            "served": self.served,
            "abandoned": self.abandoned,
            "open": requests - self.served - self.abandoned,
            "abandonment_rate": self.abandoned / requests if requests else 0.0,
            "mean_wait": math.fsum(self.waits) / len(self.waits) if self.waits else 0.0,
            "utilisation": busy / (span * len(self.vehicles)) if span > 0 else 0.0,
            "charges": self.charges,
            "mean_charger_wait": (math.fsum(s.mean_wait * s.grants for s in stats) / grants
                                  if grants else 0.0),
            "charger_utilisation": math.fsum(s.utilisation for s in stats) / len(stats),
        }


def _accumulate(values: Sequence[float]) -> Generator[float, None, None]:
    total = 0.0
    for value in values:
        total += value
        yield total


# --------------------------------------------------------------------------- processes


def vehicle_process(sim: Sim, fleet: Fleet, vehicle: Vehicle) -> ProcessGenerator[None]:
    """One vehicle's life: idle, pickup, carry, drop off, reposition or recharge, again."""
    params = fleet.params
    reserve = params.recharge_below * params.battery_range
    name = vehicle.name
    while True:
        # Idle: offer ourselves to the dispatcher and wait for a job (parked
        # first, by a fleet_size cut, until the fleet grows again).
        vehicle.state = "idle"
        job: Event[Request] = sim.event()
        vehicle.job = job
        if fleet.must_park():
            fleet.in_service -= 1
            fleet.park(vehicle)
        else:
            yield fleet.idle.put(vehicle)
        request: Request = yield job
        vehicle.job = None

        vehicle.state = "to_pickup"
        vehicle.busy_since = sim.now
        yield from fleet.drive(vehicle, request.origin)
        request.picked_up = sim.now
        fleet.waits.append(sim.now - request.arrived)
        sim.record("pickup", name, request)

        vehicle.state = "carrying"
        yield from fleet.drive(vehicle, request.destination)
        request.outcome = "served"
        fleet.served += 1
        fleet.busy_time += sim.now - vehicle.busy_since
        vehicle.busy_since = None
        sim.record("drop_off", name, request)

        if vehicle.battery < reserve:
            chosen = fleet.charging_station(vehicle.zone)
            while chosen is None:  # every station is down: wait for one
                vehicle.state = "waiting_for_station"
                yield fleet.wait_for_a_station()
                chosen = fleet.charging_station(vehicle.zone)
            station = chosen
            vehicle.state = "to_charger"
            yield from fleet.drive(vehicle, fleet.station_zones[station])
            with fleet.stations[station].request() as charger:
                yield charger
                vehicle.state = "charging"
                sim.record("charge", name, {"station": station, "battery": vehicle.battery})
                full = params.charge_time * (1.0 - vehicle.battery / params.battery_range)
                rate = float(fleet.knobs["charge_rate"])
                yield sim.delay(full if rate == 1.0 else full / rate)
                vehicle.battery = params.battery_range
            fleet.charges += 1
            fleet.supply[vehicle.zone] += 1
        else:
            target = fleet.reposition_target(vehicle.zone)
            fleet.supply[target] += 1
            if target != vehicle.zone:
                vehicle.state = "repositioning"
                sim.record("reposition", name, {"from": vehicle.zone, "to": target})
                yield from fleet.drive(vehicle, target)


def rider_process(sim: Sim, fleet: Fleet, request: Request) -> ProcessGenerator[None]:
    """A request: wait for a vehicle to be assigned, or abandon after the patience window."""
    fleet.waiting.append(request)
    fleet.notify_dispatcher()
    yield request.assigned | sim.delay(float(fleet.knobs["patience"]))
    # Decide by state, not by the condition's value: an assignment made at the
    # very instant patience ran out may not be processed yet, and it stands.
    if request.vehicle is None:
        fleet.waiting.remove(request)
        request.outcome = "abandoned"
        fleet.abandoned += 1
        sim.record("abandon", "dispatcher", request)


def dispatcher_process(sim: Sim, fleet: Fleet) -> ProcessGenerator[None]:
    """Assign idle vehicles to waiting requests, oldest request first."""
    waiting = fleet.waiting
    idle = fleet.idle
    choose = fleet.policy.choose
    while True:
        if not waiting:
            yield fleet.wait_for_request()
            continue
        chosen = choose(waiting[0], idle.items)
        if chosen is None:
            # Nobody is idle: the first vehicle to become idle is the closest one.
            vehicle: Vehicle = yield idle.get()
        else:
            vehicle = yield idle.get(filter=_is(chosen))
        if not waiting:
            # Every waiting request abandoned while we waited: offer the vehicle again.
            yield idle.put(vehicle)
            continue
        request = waiting.popleft()
        request.vehicle = vehicle
        fleet.supply[vehicle.zone] -= 1
        sim.record("assign", "dispatcher", {"request": request.index, "vehicle": vehicle.index})
        job = vehicle.job
        assert job is not None
        job.succeed(request)
        request.assigned.succeed(vehicle)


def _park_idle(sim: Sim, fleet: Fleet, vehicle: Vehicle) -> ProcessGenerator[None]:
    """Take an idle *vehicle* out of the idle store and park it (a fleet_size cut)."""
    yield fleet.idle.get(filter=_is(vehicle))
    fleet.park(vehicle)


def _is(chosen: Vehicle) -> Callable[[Vehicle], bool]:
    def is_chosen(vehicle: Vehicle) -> bool:
        return vehicle is chosen

    return is_chosen


def demand_process(sim: Sim, fleet: Fleet) -> ProcessGenerator[None]:
    """Poisson trip requests until the horizon."""
    params = fleet.params
    rng = sim.rng("demand")
    while True:
        multiplier = float(fleet.knobs["demand"])
        gap = rng.expovariate(params.demand_rate if multiplier == 1.0
                              else params.demand_rate * multiplier)
        if sim.now + gap >= params.horizon:
            return
        yield sim.delay(gap)
        request = Request(sim, len(fleet.requests), fleet.origin(rng), rng.randrange(params.zones))
        fleet.requests.append(request)
        sim.record("request", "demand", request)
        sim.spawn(rider_process(sim, fleet, request))


# --------------------------------------------------------------------------- entry points


def build(sim: Sim, scenario: Scenario | dict[str, Any] | str | None = None,
          **params: Any) -> Fleet:
    """Set the model up on *sim* and return its state; run it with ``sim.run(until=...)``.

    Args:
        sim: The simulation to build on. Its seed drives every random draw:
            streams ``"fleet"`` (initial batteries), ``"demand"`` and
            ``"dispatch"`` (power_of_d sampling).
        scenario: Interventions on the knobs (a Scenario, its JSON data, or
            the path of its artifact), applied in virtual time; None: none.
        **params: Fields of :class:`Params`; the rest keep their defaults.

    Raises:
        ConfigError: an unknown or invalid parameter, or a scenario that does
            not fit the knobs (ScenarioError, a ConfigError).
    """
    known = {field.name for field in dataclasses.fields(Params)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ConfigError(
            f"ride_hailing: unknown parameter {unknown[0]!r}; expected one of {sorted(known)}"
        )
    config = Params(**params)
    fleet = Fleet(sim, config)
    batteries = sim.rng("fleet")
    low = config.recharge_below * config.battery_range
    for index in range(config.vehicles):
        zone = index * config.zones // config.vehicles
        vehicle = Vehicle(index, zone, batteries.uniform(low, config.battery_range))
        fleet.vehicles.append(vehicle)
        fleet.supply[zone] += 1
        fleet.in_service += 1
        sim.spawn(vehicle_process, fleet, vehicle, name=vehicle.name)
    sim.spawn(dispatcher_process, fleet, name="dispatcher")
    sim.spawn(demand_process, fleet, name="demand")
    apply_scenario(sim, fleet.knobs, _scenario(scenario), end=config.horizon)
    return fleet


def _scenario(scenario: Scenario | dict[str, Any] | str | None) -> Scenario | None:
    """A scenario given as itself, as its JSON data (a study's config) or as a file path."""
    if scenario is None or isinstance(scenario, Scenario):
        return scenario
    return load_scenario(scenario)


def run(seed: int = 7, *, vehicles: int = 40, zones: int = 12, demand_rate: float = 3.0,
        horizon: float = 600.0, policy: str = "closest", d: int = 2, patience: float = 8.0,
        min_travel: float = 1.0, hop_time: float = 1.0, stations: int = 3, chargers: int = 3,
        battery_range: float = 120.0, recharge_below: float = 0.25,
        charge_time: float = 30.0,
        scenario: Scenario | dict[str, Any] | str | None = None,
        monitors: MonitorSet | None = None) -> dict[str, float | int]:
    """Run the fleet once until *horizon* and return its KPIs.

    The parameters are those of :class:`Params` (keyword-only); *seed* seeds the
    Sim; *scenario* changes knobs during the run (see :func:`build`). With
    *monitors*, the run's monitors (:meth:`Fleet.monitor`) and waits (a Tally)
    are added to it, named after the policy (``closest.idle.items``,
    ``closest.wait``...): monitors change no KPI.

    Raises:
        ConfigError: a parameter is invalid (the message names it).
    """
    sim = Sim(seed=seed)
    fleet = build(sim, vehicles=vehicles, zones=zones, demand_rate=demand_rate,
                  horizon=horizon, policy=policy, d=d, patience=patience,
                  min_travel=min_travel, hop_time=hop_time, stations=stations,
                  chargers=chargers, battery_range=battery_range,
                  recharge_below=recharge_below, charge_time=charge_time, scenario=scenario)
    if monitors is not None:
        monitors.add(fleet.monitor(prefix=f"{policy}."))
    sim.run(until=fleet.params.horizon)
    if monitors is not None:
        monitors.add(fleet.wait_tally(f"{policy}.wait"))
    return fleet.kpis()


#: The knobs of the default fleet (three stations): what ``simulacra scenarios``
#: targets (``examples/ride_hailing/model.py:KNOBS``).
KNOBS = knobs()
