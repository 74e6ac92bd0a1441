"""Models that import nothing but the kernel: what does a worker load to run them?

Used by ``test_worker_imports.py``, which runs them in real worker processes
(and sub-interpreters) and reads back the worker's ``sys.modules``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from simulacra.core import Event, Sim
from simulacra.rng import SeedTree

#: Packages a worker must not load unless the model imports them.
HEAVY = ("pydantic", "pydantic_core", "rich", "yaml")


def heavy_loaded() -> list[str]:
    """The HEAVY packages this process (or sub-interpreter) has imported."""
    return sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))


def modules(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """A replication that reports what its worker imported (and a draw, to compare)."""
    if config.get("import_yaml"):
        import yaml  # noqa: F401  (the control: a model that imports a package)
    return {"heavy": " ".join(heavy_loaded()), "pid": os.getpid(),
            "x": stream.stream("x").random()}


def _tick(sim: Sim, me: Any) -> Generator[Event[Any], Any, None]:
    for _ in range(3):
        yield sim.delay(1.0)
        me.send(me.name, "tick", 1.0)


def build(ctx: Any) -> None:
    """Two entities that tick and message themselves."""
    for name in ("a", "b"):
        ctx.spawn_entity(name, _tick)
        ctx.channel(name, name, 1.0)


def shard_modules(state: Any) -> tuple[list[str], int]:
    """``ShardedSim.call``: the HEAVY packages of this shard's worker, and its pid."""
    return heavy_loaded(), os.getpid()


def slow(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """Sleeps ``config["sleep"]`` (default 0.1 s), then a draw; raises for replication ``fail``."""
    if stream.path[-1] == config.get("fail"):
        raise ValueError(f"replication {stream.path[-1]} fails")
    time.sleep(config.get("sleep", 0.1))
    return {"pid": os.getpid(), "x": stream.stream("x").random()}


def crash_once(stream: SeedTree, config: dict[str, Any]) -> dict[str, Any]:
    """Kills its worker the first time replication ``config["crash"]`` runs (a marker file)."""
    marker = Path(config["markers"]) / f"crashed-{stream.path[-1]}"
    if stream.path[-1] == config["crash"] and not marker.exists():
        marker.write_text(str(os.getpid()), encoding="utf-8")
        os._exit(1)
    return {"pid": os.getpid(), "x": stream.stream("x").random()}
