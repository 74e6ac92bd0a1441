"""A small queue for the intervention tests: importable by worker processes by this name.

One station whose number of servers is a knob (``servers``, the capacity of
its Resource), arrivals at rate ``rate * demand`` from the ``"arrivals"``
stream, exponential services from the ``"service"`` stream, and a probe
``queue_0`` (the requests waiting) that triggers may watch. ``run`` follows
the ``run`` convention of :class:`~simulacra.Experiment` (``seed=``, then the
config) and returns KPIs; ``python _intervention_models.py SEED`` prints the
KPIs of the stochastic and the triggered scenario as JSON (the tests run it
under each kernel).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from simulacra import Resource, Sim
from simulacra.scenarios import (
    Knob,
    KnobBoard,
    Knobs,
    Scenario,
    apply_scenario,
    load_scenario,
)
from simulacra.trace import Trace

KNOBS = Knobs(
    Knob("servers", "int", 1, low=1, high=10, unit="servers", doc="servers at the station"),
    Knob("demand", "float", 1.0, low=0.1, high=10.0, doc="multiplier on the arrival rate"),
)

#: Starts 20 plus an exponential delay (mean 30, at most 100); lasts 10 to 40.
DRAWN = {"name": "drawn-surge-staff", "interventions": [
    {"knob": "servers", "at": 20, "value": 3,
     "draw": {"delay": {"dist": "exponential", "mean": 30, "high": 100},
              "duration": {"dist": "uniform", "low": 10, "high": 40}}},
]}

#: From 0, polled every time unit: once more than 5 wait, 4 servers for 30.
TRIGGERED = {"name": "staff-on-queue", "interventions": [
    {"knob": "servers", "at": 0, "value": 4, "duration": 30,
     "when": {"probe": "queue_0", "above": 5, "every": 1}},
]}


def run(seed: Any = 0, scenario: Any = None, rate: float = 1.2, service: float = 1.0,
        horizon: float = 200.0) -> dict[str, Any]:
    """One replication; KPIs: served, mean wait, the knob's changes, the draws and triggers."""
    sim = Sim(seed=seed, trace=True)
    board = KnobBoard(KNOBS, sim)
    station = Resource(sim, capacity=1)
    board.bind_capacity("servers", station)
    board.probe("queue_0", lambda: len(station.queue))
    if scenario is not None:
        apply_scenario(sim, board, scenario if isinstance(scenario, Scenario)
                       else load_scenario(scenario), end=horizon)
    waits: list[float] = []
    arrivals, services = sim.rng("arrivals"), sim.rng("service")

    def customer(sim: Sim) -> Any:
        arrived = sim.now
        with station.request() as req:
            yield req
            waits.append(sim.now - arrived)
            yield sim.delay(services.expovariate(service))

    def source(sim: Sim) -> Any:
        while True:
            yield sim.delay(arrivals.expovariate(rate * float(board["demand"])))
            sim.spawn(customer)

    sim.spawn(source)
    sim.run(until=horizon)
    records = sim.trace_records or []
    changes = [change[0] for change in board.changes]
    return {
        "served": len(waits),
        "mean_wait": sum(waits) / len(waits) if waits else 0.0,
        "changes": json.dumps([[t, name, new] for t, name, _, new, _ in board.changes]),
        "first_change": changes[0] if changes else -1.0,
        "draws": json.dumps([p for _, kind, _, p in records if kind == "draw"]),
        "triggers": json.dumps([[t, p] for t, kind, _, p in records if kind == "trigger"]),
        "digest": Trace(records).digest(),
    }


if __name__ == "__main__":
    seed = int(sys.argv[1])
    print(json.dumps({"drawn": run(seed, DRAWN), "triggered": run(seed, TRIGGERED)}))
