"""Backends: where the agents of a :class:`Model` run (layer 5).

:class:`Model` runs a :class:`~simulacra.agents.Sequence` of phases for N steps
on an :class:`ExecutionBackend` -- :class:`LocalBackend` (the sequential
reference), :class:`ThreadPoolBackend`, :class:`ProcessPoolBackend`
(persistent workers that own partitions of the agents), :class:`AsyncBackend`
and :class:`PregelBackend` (supersteps, ``docs/pregel.md``) -- with the same
per-step state and message digests on every one of them. A settings file
(:func:`load_settings`) switches the backend with no change to model code;
the registry (:func:`get_backend`, :func:`register_backend`) lets the Dask,
MCP and emulator backends of ``simulacra.distributed`` plug in from above.
A :class:`DataCollector` passed to ``Model.run(collect=...)`` evaluates model-
and agent-level reporters on the states after every step (Mesa's).

Imports: the standard library, layers 0-4 through their public surfaces, and
pydantic (lazily, when settings are read) and polars (lazily, for tables).
"""

from simulacra._util import claim_public_module

from ._async import AsyncBackend as AsyncBackend
from ._base import AgentSnapshot as AgentSnapshot
from ._base import BackendBase as BackendBase
from ._base import ExecutionBackend as ExecutionBackend
from ._collect import DataCollector as DataCollector
from ._local import LocalBackend as LocalBackend
from ._local import ThreadPoolBackend as ThreadPoolBackend
from ._model import RUN_SCHEME as RUN_SCHEME
from ._model import Model as Model
from ._model import RunResult as RunResult
from ._pregel import PREGEL_SCHEME as PREGEL_SCHEME
from ._pregel import REDUCERS as REDUCERS
from ._pregel import PregelBackend as PregelBackend
from ._pregel import PregelResult as PregelResult
from ._pregel import Reducer as Reducer
from ._pregel import run_pregel as run_pregel
from ._pregel_vector import VECTOR_SCHEME as VECTOR_SCHEME
from ._pregel_vector import PregelGraph as PregelGraph
from ._pregel_vector import Superstep as Superstep
from ._pregel_vector import VectorizedResult as VectorizedResult
from ._pregel_vector import run_vectorized as run_vectorized
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
from ._wire import WorkerTraceback as WorkerTraceback
from ._wire import describe_exit as describe_exit
from ._wire import error_rank as error_rank
from ._wire import pack_error as pack_error
from ._wire import pack_exception as pack_exception
from ._wire import pack_failure as pack_failure
from ._wire import plain_world as plain_world
from ._wire import unpack_error as unpack_error
from ._wire import unpicklable_commands as unpicklable_commands
from ._wire import unpicklable_messages as unpicklable_messages
from ._wire import unpicklable_reply as unpicklable_reply
from ._wire import unpicklable_snapshot as unpicklable_snapshot

__all__ = [
    "Model", "RunResult", "RUN_SCHEME", "DataCollector", "ExecutionBackend", "BackendBase",
    "AgentSnapshot",
    "LocalBackend", "ThreadPoolBackend", "AsyncBackend", "ProcessPoolBackend", "partition_ids",
    "PARTITIONS", "START_METHODS", "get_backend", "register_backend", "unregister_backend",
    "backend_names", "backend_options", "RESERVED_BACKENDS", "PLUGIN_BACKENDS", "pack_error",
    "pack_exception", "pack_failure", "unpack_error", "error_rank", "plain_world",
    "describe_exit", "WorkerTraceback", "unpicklable_commands", "unpicklable_messages",
    "unpicklable_reply", "unpicklable_snapshot", "Settings", "load_settings", "parse_settings",
    "PregelBackend", "PregelResult", "run_pregel", "Reducer", "REDUCERS", "PREGEL_SCHEME",
    "PregelGraph", "Superstep", "VectorizedResult", "run_vectorized", "VECTOR_SCHEME",
]

claim_public_module(__name__, globals())
del claim_public_module
