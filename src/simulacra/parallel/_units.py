"""What a replication worker runs: one unit of an :class:`~simulacra.Experiment`.

This module is all that a worker imports of the ``parallel`` package, so it is
kept small and light: the standard library, the seed tree and the executors'
callable references. No polars, no rich, no scenarios (pydantic): a worker
loads what the model itself imports and little more, starts in milliseconds,
and can run in a sub-interpreter, which refuses some extension modules
(pydantic-core among them).

The unit of work is one ``(config_index, replication)``. It crosses to the
worker as data (:class:`Unit`: the model's ``module:qualname``, the master
seed, the two indices and the config) and comes back as a mapping of KPIs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, final

from simulacra.executors import resolve_callable
from simulacra.rng import SeedTree

__all__ = ["NotKPIs", "Unit", "model_of", "run_unit", "stream_for"]


@final
@dataclass(frozen=True, slots=True)
class Unit:
    """One replication, as plain data: everything a worker needs, nothing live."""

    model: str
    convention: str
    master_seed: int | str | bytes
    config_index: int
    replication: int
    config: dict[str, Any]
    common_random_numbers: bool
    #: The config index whose seeds it uses: its own, or (a scenario of a study
    #: with scenarios) its baseline's, so that every scenario of a config sees
    #: the draws of its baseline and the differences are paired.
    stream_index: int


@final
@dataclass(frozen=True, slots=True)
class NotKPIs:
    """What a worker sends back for a model that returned something other than a mapping.

    The value itself may not even pickle (a ``RunResult`` holds a
    ``mappingproxy``), so only its type travels, and the parent reports the
    broken contract by name instead of the pickling error.
    """

    type_name: str


#: Model functions already resolved in this process (or sub-interpreter), by reference.
_MODELS: dict[str, Callable[..., Any]] = {}


def model_of(reference: str) -> Callable[..., Any]:
    """The model function *reference* names, imported once per process."""
    model = _MODELS.get(reference)
    if model is None:
        model = _MODELS[reference] = resolve_callable(reference, "model_fn")
    return model


def stream_for(
    master_seed: int | str | bytes, config_index: int, replication: int, common: bool
) -> SeedTree:
    """The seed-tree node of one replication (see ``docs/parallel.md``)."""
    root = SeedTree(master_seed)
    if common:
        return root.replication(replication)
    return root.config(config_index).replication(replication)


def run_unit(unit: Unit) -> object:
    """Run one replication (in whatever worker the executor chose); return the model's KPIs."""
    model = model_of(unit.model)
    stream = stream_for(
        unit.master_seed, unit.stream_index, unit.replication, unit.common_random_numbers
    )
    # A copy per call: a model that mutates its config cannot leak into the next
    # replication (which, inline or on threads, would get the same objects).
    config = copy.deepcopy(unit.config)
    if unit.convention == "run":
        result = model(seed=stream.seed, **config)
    else:
        result = model(stream, config)
    if isinstance(result, Mapping):
        return result if type(result) is dict else dict(result)
    return NotKPIs(type(result).__qualname__)
