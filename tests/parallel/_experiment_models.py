"""Model functions for the Experiment tests: module-level, so worker processes can import them.

The test files put this directory on ``sys.path`` before importing it; spawned
workers and LocalCluster workers inherit ``sys.path``, so they import it by
the same name.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from simulacra import Agent, Model, Resource, SeedTree, Sequence, Sim

BANK = Path(__file__).resolve().parents[2] / "examples" / "bank.py"


def queue(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """A small M/M/c queue on the kernel; seeded by the replication's stream node."""
    sim = Sim(seed=stream)
    servers = Resource(sim, capacity=config.get("servers", 2))
    waits: list[float] = []

    def customer(sim: Sim) -> Any:
        arrived = sim.now
        with servers.request() as req:
            yield req
            waits.append(sim.now - arrived)
            yield sim.delay(sim.rng("service").expovariate(1.0))

    def source(sim: Sim) -> Any:
        arrivals = sim.rng("arrivals")
        for _ in range(config.get("customers", 300)):
            yield sim.delay(arrivals.expovariate(config.get("rate", 1.5)))
            sim.spawn(customer)

    sim.spawn(source)
    sim.run()
    return {"mean_wait": sum(waits) / len(waits), "served": len(waits), "end": sim.now}


def draws(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """Three draws from a named stream, plus the config echoed back."""
    rng = stream.stream("x")
    return {
        "a": rng.random(),
        "b": rng.random(),
        "c": rng.randrange(1000),
        "tag": str(config.get("label", "")),
        "ok": True,
    }


def crash_once(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """Kill the worker process the first time it runs a (config, replication) listed in crash.

    A marker file in ``config["markers"]`` remembers that the crash happened, so
    the re-run (and every later run) returns normally.
    """
    replication = stream.path[-1]
    key = [config["index"], replication]
    if key in config.get("crash", []):
        marker = Path(config["markers"]) / f"crashed-{key[0]}-{key[1]}"
        if not marker.exists():
            marker.write_text(str(os.getpid()), encoding="utf-8")
            if config.get("how") == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(1)
    return draws(stream, config)


def always_crash(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """Kill the worker every time for replication 1 of each config; else a result."""
    if stream.path[-1] == 1:
        os._exit(3)
    return draws(stream, config)


class ModelBug(Exception):
    """A model's own exception, with a constructor that does not pickle back."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what} (code {code})")


def buggy(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """Raise ZeroDivisionError for replication 2 of config 1."""
    if (config.get("index"), stream.path[-1]) == (1, 2):
        return {"x": 1 / 0}
    return draws(stream, config)


def unpicklable_bug(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """Raise an exception that cannot be unpickled in the parent."""
    raise ModelBug("broken", 7)


def not_a_mapping(stream: SeedTree, config: dict[str, Any]) -> Any:
    return [1, 2]


def bad_kpi(stream: SeedTree, config: dict[str, Any]) -> Any:
    return {"hist": [1, 2]}


def numpy_kpis(stream: SeedTree, config: dict[str, Any]) -> Any:
    import numpy as np

    rng = stream.np_rng("x")
    return {"mean": np.float64(rng.random()), "count": np.int64(3), "flag": np.bool_(True)}


def run_style(seed: int = 0, *, servers: int = 2, customers: int = 200) -> dict[str, Any]:
    """A ``run(seed=..., **params)`` model, like the examples'."""
    return queue(SeedTree(seed), {"servers": servers, "customers": customers})


def mutates_config(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """Mutates its config: must not leak into other replications."""
    config.setdefault("seen", []).append(stream.path[-1])
    config["nested"]["n"] += 1
    return {"seen": len(config["seen"]), "n": config["nested"]["n"]}


class Holder:
    """For bound-method and classmethod refusal tests."""

    def method(self, stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
        return {}

    @classmethod
    def factory(cls, stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
        return draws(stream, config)


class Saver(Agent):
    def __init__(self, id: int) -> None:
        super().__init__(id)
        self.wealth = 0

    def save(self, ctx: Any) -> None:
        self.wealth += 1


def returns_run_result(seed: int = 0, *, agents: int = 3, steps: int = 2) -> Any:
    """A common first try: return the Model's RunResult itself instead of KPIs."""
    model = Model(seed=seed)
    for i in range(agents):
        model.add(Saver, i)
    return model.run(Sequence(Saver.save), steps=steps)


def needs_rate(seed: int, *, servers: int, rate: float, customers: int = 10) -> dict[str, Any]:
    return {"servers": servers, "rate": rate, "customers": customers, "seed_bits": seed % 7}


def takes_anything(seed: int, **params: Any) -> dict[str, Any]:
    return {"n": len(params)}
