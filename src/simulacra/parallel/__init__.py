"""Parallel tiers: replications (``Experiment``), PDES (``ShardedSim``) and in-run offload.

Layer 4. May import layers 0-2 (``errors``, ``rng``, ``core``, ``resources``,
``trace``) and the ``executors`` of layer 1; never ``agents``, ``engines`` or
anything above. A parallel run must give the same results as the sequential
reference on every backend and worker count, and every feature here lands
with the test that shows it.
"""

from simulacra._util import claim_public_module

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
from ._stats import MeanInterval as MeanInterval
from ._stats import mean_interval as mean_interval
from ._stats import t_quantile as t_quantile

__all__ = [
    # replications
    "Experiment", "ExperimentResults", "ReplicationResult", "config_grid", "CONVENTIONS",
    "KPIValue", "MeanInterval", "mean_interval", "t_quantile",
]

# PDES and offload exports are added below by their modules.
# (Import them with the redundant `as` form and extend __all__ with `__all__ += [...]`;
# keep claim_public_module last, so that it claims their names too.)

# PDES: partition-invariant sharded runs (ShardedSim) and their sequential reference.
from ._pdes import PDESStats as PDESStats
from ._pdes import ShardedSim as ShardedSim
from ._pdes import UnshardedSim as UnshardedSim
from ._pdes_analyze import SpeedupEstimate as SpeedupEstimate
from ._pdes_analyze import analyze as analyze
from ._pdes_analyze import measure_barrier_cost as measure_barrier_cost
from ._pdes_model import Entity as Entity
from ._pdes_model import ShardContext as ShardContext

__all__ += [
    "ShardedSim", "UnshardedSim", "ShardContext", "Entity", "PDESStats", "analyze",
    "SpeedupEstimate", "measure_barrier_cost",
]

# Offload: CPU-heavy handlers on a worker pool, results at deterministic completion slots
# (imported in the first block above: an import after `__all__ +=` is E402).
__all__ += ["offload", "Offloader", "use_pool", "OFFLOAD_BACKENDS"]

claim_public_module(__name__, globals())
