"""Engines: ways to advance an agent model, and the backends that run its agents (layer 5).

It holds the round-based engine of LLM agent societies (:class:`RoundEngine`:
observe/act agents and a world, flow batches, deterministic resolution), run
configs (:func:`load_config`), run directories (:class:`RunDirectory`),
:func:`run_society` and :func:`replay_run`; and the phased (lockstep) engine: :class:`Model` runs a
:class:`~simulacra.agents.Sequence` of phases for N steps on an
:class:`ExecutionBackend` -- :class:`LocalBackend` (the sequential
reference), :class:`ThreadPoolBackend` or :class:`ProcessPoolBackend`
(persistent workers that own partitions of the agents) -- with the same
per-step state and message digests on every one of them. A settings file
(:func:`load_settings`) switches the backend with no change to model code.

Imports: the standard library, layers 0-4 through their public surfaces
(``simulacra.agents``, ``simulacra.rng``, ``simulacra.errors``), and pydantic
(lazily, when settings are read).

Pausable agents (:class:`PausableHost`) run plain blocking functions on
greenlets on a Sim's virtual time; :class:`AsyncHost` runs them on threads,
with :class:`Channel` and :class:`AgentLock` to share state (``docs/pausable.md``).
"""

from simulacra._util import claim_public_module

from ._async import AsyncBackend as AsyncBackend
from ._base import AgentSnapshot as AgentSnapshot
from ._base import BackendBase as BackendBase
from ._base import ExecutionBackend as ExecutionBackend
from ._config import DEFAULTS as DEFAULTS
from ._config import RunConfig as RunConfig
from ._config import apply_overrides as apply_overrides
from ._config import load_config as load_config
from ._config import parse_config as parse_config
from ._events import EVENT_MODES as EVENT_MODES
from ._events import EVENTS_SCHEME as EVENTS_SCHEME
from ._events import EventEngine as EventEngine
from ._events import EventResult as EventResult
from ._events import WindowReport as WindowReport
from ._events_blocking import BlockingAgent as BlockingAgent
from ._events_blocking import BlockingContext as BlockingContext
from ._local import LocalBackend as LocalBackend
from ._local import ThreadPoolBackend as ThreadPoolBackend
from ._model import RUN_SCHEME as RUN_SCHEME
from ._model import Model as Model
from ._model import RunResult as RunResult
from ._pausable import AgentStatus as AgentStatus
from ._pausable import LLMHandle as LLMHandle
from ._pausable import PausableAgent as PausableAgent
from ._pausable import PausableContext as PausableContext
from ._pausable import PausableHost as PausableHost
from ._pausable_async import AgentLock as AgentLock
from ._pausable_async import AsyncAgent as AsyncAgent
from ._pausable_async import AsyncContext as AsyncContext
from ._pausable_async import AsyncHost as AsyncHost
from ._pausable_async import Channel as Channel
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
from ._provider import ProviderGuard as ProviderGuard
from ._provider import preflight as preflight_provider
from ._registry import PLUGIN_BACKENDS as PLUGIN_BACKENDS
from ._registry import RESERVED_BACKENDS as RESERVED_BACKENDS
from ._registry import backend_names as backend_names
from ._registry import backend_options as backend_options
from ._registry import get_backend as get_backend
from ._registry import register_backend as register_backend
from ._registry import unregister_backend as unregister_backend
from ._rounds import MODES as MODES
from ._rounds import RESOLUTIONS as RESOLUTIONS
from ._rounds import ROUNDS_SCHEME as ROUNDS_SCHEME
from ._rounds import RoundEngine as RoundEngine
from ._rounds import RoundResult as RoundResult
from ._rounds import StepReport as StepReport
from ._rounds_run import ReplayReport as ReplayReport
from ._rounds_run import RunControl as RunControl
from ._rounds_run import SocietyRun as SocietyRun
from ._rounds_run import StepEngine as StepEngine
from ._rounds_run import build_model as build_model
from ._rounds_run import build_society as build_society
from ._rounds_run import load_factory as load_factory
from ._rounds_run import register_step_engine as register_step_engine
from ._rounds_run import replay_run as replay_run
from ._rounds_run import resume_society as resume_society
from ._rounds_run import run_society as run_society
from ._rounds_run import step_engine_names as step_engine_names
from ._rundir import RUN_FILES as RUN_FILES
from ._rundir import RunDirectory as RunDirectory
from ._rundir import default_run_dir as default_run_dir
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

__all__ = [
    # running models
    "Model", "RunResult", "RUN_SCHEME",
    # the backend seam and its implementations
    "ExecutionBackend", "BackendBase", "AgentSnapshot", "LocalBackend", "ThreadPoolBackend",
    "AsyncBackend",
    "ProcessPoolBackend", "partition_ids", "PARTITIONS", "START_METHODS",
    # by name, and from settings files
    "get_backend", "register_backend", "unregister_backend", "backend_names",
    "backend_options", "RESERVED_BACKENDS", "PLUGIN_BACKENDS",
    # errors and worlds as data, for backends that run agents elsewhere
    "pack_error", "pack_exception", "pack_failure", "unpack_error", "error_rank", "plain_world",
    "describe_exit",
    "WorkerTraceback", "Settings", "load_settings",
    "parse_settings",
    # Pregel: supersteps, vote to halt, combiners, aggregators (docs/pregel.md)
    "PregelBackend", "PregelResult", "run_pregel", "Reducer", "REDUCERS", "PREGEL_SCHEME",
    "PregelGraph", "Superstep", "VectorizedResult", "run_vectorized", "VECTOR_SCHEME",
    # pausable agents: blocking functions on greenlets (virtual time) or threads (async)
    "PausableHost", "PausableAgent", "PausableContext", "LLMHandle", "AgentStatus",
    "AsyncHost", "AsyncAgent", "AsyncContext", "Channel", "AgentLock",
    # LLM agent societies: the round-based engine, run configs and run directories
    "EventEngine", "EventResult", "WindowReport", "EVENT_MODES", "EVENTS_SCHEME",
    "BlockingAgent", "BlockingContext",
    "RoundEngine", "RoundResult", "StepReport", "MODES", "RESOLUTIONS", "ROUNDS_SCHEME",
    "RunConfig", "load_config", "parse_config", "apply_overrides", "DEFAULTS",
    "run_society", "resume_society", "replay_run", "preflight_provider", "ProviderGuard",
    "SocietyRun", "ReplayReport", "RunControl", "build_model",
    "build_society",
    "load_factory", "register_step_engine", "step_engine_names", "StepEngine",
    "RunDirectory", "RUN_FILES", "default_run_dir",
]

claim_public_module(__name__, globals())
del claim_public_module
