"""Engines: ways to advance an agent model, and the backends that run its agents (layer 5).

This increment holds the phased (lockstep) engine: :class:`Model` runs a
:class:`~simulacra.agents.Sequence` of phases for N steps on an
:class:`ExecutionBackend` -- :class:`LocalBackend` (the sequential
reference), :class:`ThreadPoolBackend` or :class:`ProcessPoolBackend`
(persistent workers that own partitions of the agents) -- with the same
per-step state and message digests on every one of them. A settings file
(:func:`load_settings`) switches the backend with no change to model code.

Imports: the standard library, layers 0-4 through their public surfaces
(``simulacra.agents``, ``simulacra.rng``, ``simulacra.errors``), and pydantic
(lazily, when settings are read).
"""

from simulacra._util import claim_public_module

from ._base import AgentSnapshot as AgentSnapshot
from ._base import BackendBase as BackendBase
from ._base import ExecutionBackend as ExecutionBackend
from ._local import LocalBackend as LocalBackend
from ._local import ThreadPoolBackend as ThreadPoolBackend
from ._model import RUN_SCHEME as RUN_SCHEME
from ._model import Model as Model
from ._model import RunResult as RunResult
from ._processes import PARTITIONS as PARTITIONS
from ._processes import START_METHODS as START_METHODS
from ._processes import ProcessPoolBackend as ProcessPoolBackend
from ._processes import partition_ids as partition_ids
from ._registry import PLUGIN_BACKENDS as PLUGIN_BACKENDS
from ._registry import RESERVED_BACKENDS as RESERVED_BACKENDS
from ._registry import backend_names as backend_names
from ._registry import backend_options as backend_options
from ._registry import get_backend as get_backend
from ._registry import register_backend as register_backend
from ._registry import unregister_backend as unregister_backend
from ._settings import Settings as Settings
from ._settings import load_settings as load_settings
from ._settings import parse_settings as parse_settings

__all__ = [
    # running models
    "Model", "RunResult", "RUN_SCHEME",
    # the backend seam and its implementations
    "ExecutionBackend", "BackendBase", "AgentSnapshot", "LocalBackend", "ThreadPoolBackend",
    "ProcessPoolBackend", "partition_ids", "PARTITIONS", "START_METHODS",
    # by name, and from settings files
    "get_backend", "register_backend", "unregister_backend", "backend_names",
    "backend_options", "RESERVED_BACKENDS", "PLUGIN_BACKENDS", "Settings", "load_settings",
    "parse_settings",
]

claim_public_module(__name__, globals())
del claim_public_module
