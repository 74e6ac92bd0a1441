"""Models of our own for the report's tests: a post office (a kernel model) and its study.

``post_office`` runs clerks (a Resource) serving visitors, samples the queue
length and the clerks' utilisation at every change and the visitors' waiting
times, and returns them in the ``simulacra.monitors.v1`` shape
(``write_monitors`` writes the file). ``run`` is the run-convention function
a study of ``simulacra experiment`` calls.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from simulacra import Resource, Sim


def _time_weighted_mean(t: list[float], v: list[float], end: float) -> float:
    if not t or end <= t[0]:
        return v[-1] if v else 0.0
    area = math.fsum(v[i] * ((t[i + 1] if i + 1 < len(t) else end) - t[i])
                     for i in range(len(t)))
    return area / (end - t[0])


def post_office(seed: int = 0, clerks: int = 2, visitors: int = 200, rate: float = 1.5,
                service: float = 1.1) -> dict[str, Any]:
    """Visitors arrive (Poisson, *rate*), queue for one of *clerks*, are served (exponential)."""
    sim = Sim(seed=seed)
    desk = Resource(sim, capacity=clerks)
    queue_t: list[float] = []
    queue_v: list[float] = []
    busy_t: list[float] = []
    busy_v: list[float] = []
    waits: list[float] = []

    def sample() -> None:
        now = sim.now
        for times, values, value in ((queue_t, queue_v, float(len(desk.queue))),
                                     (busy_t, busy_v, desk.count / clerks)):
            if times and times[-1] == now:
                values[-1] = value
            elif not values or values[-1] != value:
                times.append(now)
                values.append(value)

    def visitor(sim: Sim, number: int) -> Any:
        arrived = sim.now
        with desk.request() as ticket:
            sample()
            yield ticket
            waits.append(sim.now - arrived)
            sample()
            yield sim.delay(sim.rng("service").expovariate(1.0 / service))
        sample()

    def door(sim: Sim) -> Any:
        for number in range(visitors):
            yield sim.delay(sim.rng("arrivals").expovariate(rate))
            sim.spawn(visitor, number)

    sample()
    sim.spawn(door)
    sim.run()
    end = sim.now
    sample()
    return {
        "format": "simulacra.monitors.v1",
        "series": {
            "desk queue": {"kind": "queue", "t": queue_t, "v": queue_v,
                           "time_weighted_mean": _time_weighted_mean(queue_t, queue_v, end)},
            "desk utilisation": {"kind": "utilisation", "t": busy_t, "v": busy_v,
                                 "time_weighted_mean": _time_weighted_mean(busy_t, busy_v, end)},
        },
        "samples": {"waiting time": waits},
    }


def write_monitors(path: Path, **params: Any) -> Path:
    """Run :func:`post_office` and write its monitors to *path* (a file or a directory)."""
    target = path / "monitors.json" if path.is_dir() else path
    target.write_text(json.dumps(post_office(**params)), encoding="utf-8")
    return target


def run(seed: int = 0, clerks: int = 2, rate: float = 1.5, visitors: int = 80) -> dict[str, Any]:
    """The post office as a study's model: the KPIs of one replication."""
    monitors = post_office(seed=seed % (2**32), clerks=clerks, visitors=visitors, rate=rate)
    waits = monitors["samples"]["waiting time"]
    return {
        "mean_wait": math.fsum(waits) / len(waits),
        "busy": monitors["series"]["desk utilisation"]["time_weighted_mean"],
        "served": len(waits),
        "crowded": max(monitors["series"]["desk queue"]["v"]) > 3,
    }
