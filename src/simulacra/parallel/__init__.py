"""Parallel tiers: replications (``Experiment``), PDES (``ShardedSim``) and in-run offload.

Layer 4. May import layers 0-2 (``errors``, ``rng``, ``core``, ``resources``,
``trace``) and the ``executors`` of layer 1; never ``agents``, ``engines`` or
anything above. A parallel run must give the same results as the sequential
reference on every backend and worker count, and every feature here lands
with the test that shows it.

Names load on first use (PEP 562), each with the module that defines it, so
that a worker process, which imports only what runs its unit (``_units.py``
for a replication, ``_pdes_workers.py`` for a shard), pays for nothing else:
``import simulacra.parallel`` costs about what ``import simulacra.core`` costs.
"""

from typing import TYPE_CHECKING

from simulacra._util import lazy_names

if TYPE_CHECKING:  # the type checker sees every name; at run time they load lazily
    from ._experiment import CONVENTIONS as CONVENTIONS
    from ._experiment import Experiment as Experiment
    from ._experiment import ExperimentResults as ExperimentResults
    from ._experiment import KPIValue as KPIValue
    from ._experiment import ReplicationResult as ReplicationResult
    from ._experiment import config_grid as config_grid
    from ._offload import OFFLOAD_BACKENDS as OFFLOAD_BACKENDS
    from ._offload import Offloader as Offloader
    from ._offload import offload as offload
    from ._offload import use_pool as use_pool
    from ._pdes import PDESStats as PDESStats
    from ._pdes import ShardedSim as ShardedSim
    from ._pdes import UnshardedSim as UnshardedSim
    from ._pdes_analyze import SpeedupEstimate as SpeedupEstimate
    from ._pdes_analyze import analyze as analyze
    from ._pdes_analyze import measure_barrier_cost as measure_barrier_cost
    from ._pdes_model import Entity as Entity
    from ._pdes_model import ShardContext as ShardContext
    from ._stats import MeanInterval as MeanInterval
    from ._stats import mean_interval as mean_interval
    from ._stats import t_quantile as t_quantile

__all__ = [
    # replications
    "Experiment", "ExperimentResults", "ReplicationResult", "config_grid", "CONVENTIONS",
    "KPIValue", "MeanInterval", "mean_interval", "t_quantile",
    # PDES
    "ShardedSim", "UnshardedSim", "ShardContext", "Entity", "PDESStats", "analyze",
    "SpeedupEstimate", "measure_barrier_cost",
    # offload: CPU-heavy handlers on a worker pool, results at deterministic completion slots
    "offload", "Offloader", "use_pool", "OFFLOAD_BACKENDS",
]

#: Each public name -> the private module that defines it.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("CONVENTIONS", "Experiment", "ExperimentResults", "KPIValue",
                     "ReplicationResult", "config_grid"), "._experiment"),
    **dict.fromkeys(("OFFLOAD_BACKENDS", "Offloader", "offload", "use_pool"), "._offload"),
    **dict.fromkeys(("PDESStats", "ShardedSim", "UnshardedSim"), "._pdes"),
    **dict.fromkeys(("SpeedupEstimate", "analyze", "measure_barrier_cost"), "._pdes_analyze"),
    **dict.fromkeys(("Entity", "ShardContext"), "._pdes_model"),
    **dict.fromkeys(("MeanInterval", "mean_interval", "t_quantile"), "._stats"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
