"""Models that import nothing but the kernel: what does a worker load to run them?

Used by ``test_worker_imports.py``, which runs them in real worker processes
(and sub-interpreters) and reads back the worker's ``sys.modules``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
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
