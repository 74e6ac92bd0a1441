"""simulacra: deterministic simulation of many interacting actors.

One front door: everything public is re-exported here; every module behind it
is private. The same seed and config give the same trace digest on every
backend, worker count and shard count.
"""

import importlib
from typing import TYPE_CHECKING, Any

from simulacra._util import claim_public_module as _claim_public_module

from ._version import __version__ as __version__
from .core import NORMAL as NORMAL
from .core import URGENT as URGENT
from .core import ConditionValue as ConditionValue
from .core import Event as Event
from .core import Process as Process
from .core import ProcessGenerator as ProcessGenerator
from .core import Sim as Sim
from .core import TieStats as TieStats
from .core import Tracer as Tracer
from .errors import AgentActionError as AgentActionError
from .errors import AgentError as AgentError
from .errors import AgentStateError as AgentStateError
from .errors import AgentTimeout as AgentTimeout
from .errors import AlreadyTriggered as AlreadyTriggered
from .errors import BackendError as BackendError
from .errors import BackendUnavailable as BackendUnavailable
from .errors import CapacityExceeded as CapacityExceeded
from .errors import ChannelClosed as ChannelClosed
from .errors import CheckpointError as CheckpointError
from .errors import ConfigError as ConfigError
from .errors import ContextClosed as ContextClosed
from .errors import DeadProcess as DeadProcess
from .errors import DeterminismError as DeterminismError
from .errors import EmptySchedule as EmptySchedule
from .errors import EventError as EventError
from .errors import EventNotReady as EventNotReady
from .errors import ExperimentError as ExperimentError
from .errors import ForeignEvent as ForeignEvent
from .errors import ForeignRequest as ForeignRequest
from .errors import Interrupt as Interrupt
from .errors import InvalidAction as InvalidAction
from .errors import InvalidDelay as InvalidDelay
from .errors import KernelBug as KernelBug
from .errors import LLMError as LLMError
from .errors import LookaheadViolation as LookaheadViolation
from .errors import NotAnEvent as NotAnEvent
from .errors import OffloadError as OffloadError
from .errors import OffloadTimeout as OffloadTimeout
from .errors import OversubscribedWarning as OversubscribedWarning
from .errors import PartitionError as PartitionError
from .errors import PayloadNotData as PayloadNotData
from .errors import PoolBusy as PoolBusy
from .errors import PoolClosed as PoolClosed
from .errors import PoolError as PoolError
from .errors import ProcessError as ProcessError
from .errors import ProviderError as ProviderError
from .errors import ProviderTimeout as ProviderTimeout
from .errors import ProviderUnavailable as ProviderUnavailable
from .errors import RateLimited as RateLimited
from .errors import RecordingDamaged as RecordingDamaged
from .errors import RecordingError as RecordingError
from .errors import RemoteError as RemoteError
from .errors import ReplayMiss as ReplayMiss
from .errors import ReplicationFailed as ReplicationFailed
from .errors import ResourceError as ResourceError
from .errors import RunStopped as RunStopped
from .errors import ScenarioError as ScenarioError
from .errors import ScheduleError as ScheduleError
from .errors import SelfInterrupt as SelfInterrupt
from .errors import ShardCrashed as ShardCrashed
from .errors import ShardError as ShardError
from .errors import ShardTypeError as ShardTypeError
from .errors import SimError as SimError
from .errors import SpoolError as SpoolError
from .errors import ThreadOwnershipError as ThreadOwnershipError
from .errors import TraceError as TraceError
from .errors import UncopyableState as UncopyableState
from .errors import UnknownEndpoint as UnknownEndpoint
from .errors import UnknownEntity as UnknownEntity
from .errors import UnknownRecipient as UnknownRecipient
from .errors import UntilInPast as UntilInPast
from .errors import WorkerLost as WorkerLost
from .rng import SeedTree as SeedTree
from .rng import Streams as Streams
from .rng import derive_seed as derive_seed

if TYPE_CHECKING:  # the type checker sees every name; at run time they load lazily
    from .agents import ActionEvent as ActionEvent
    from .agents import ActionSpec as ActionSpec
    from .agents import Agent as Agent
    from .agents import AgentMemory as AgentMemory
    from .agents import AgentSpec as AgentSpec
    from .agents import Context as Context
    from .agents import LLMAgent as LLMAgent
    from .agents import Message as Message
    from .agents import Phase as Phase
    from .agents import Sequence as Sequence
    from .agents import World as World
    from .backends import AsyncBackend as AsyncBackend
    from .backends import DataCollector as DataCollector
    from .backends import ExecutionBackend as ExecutionBackend
    from .backends import LocalBackend as LocalBackend
    from .backends import Model as Model
    from .backends import PregelBackend as PregelBackend
    from .backends import PregelGraph as PregelGraph
    from .backends import PregelResult as PregelResult
    from .backends import ProcessPoolBackend as ProcessPoolBackend
    from .backends import RunResult as RunResult
    from .backends import Settings as Settings
    from .backends import Superstep as Superstep
    from .backends import ThreadPoolBackend as ThreadPoolBackend
    from .backends import VectorizedResult as VectorizedResult
    from .backends import get_backend as get_backend
    from .backends import load_settings as load_settings
    from .backends import run_pregel as run_pregel
    from .backends import run_vectorized as run_vectorized
    from .core import SmallRandom as SmallRandom
    from .distributed import DaskBackend as DaskBackend
    from .distributed import EmulatorBackend as EmulatorBackend
    from .distributed import MCPBackend as MCPBackend
    from .distributed import MCPConfig as MCPConfig
    from .executors import Executor as Executor
    from .executors import WorkerPool as WorkerPool
    from .executors import get_executor as get_executor
    from .llm import CallSite as CallSite
    from .llm import ChatMessage as ChatMessage
    from .llm import Completion as Completion
    from .llm import CompletionRequest as CompletionRequest
    from .llm import Endpoint as Endpoint
    from .llm import LanguageModel as LanguageModel
    from .llm import LatencyModel as LatencyModel
    from .llm import OpenAICompatible as OpenAICompatible
    from .llm import RateLimit as RateLimit
    from .llm import RecordingModel as RecordingModel
    from .llm import RecordingStore as RecordingStore
    from .llm import ReplayModel as ReplayModel
    from .llm import Router as Router
    from .llm import ScriptedModel as ScriptedModel
    from .llm import ScriptedRule as ScriptedRule
    from .llm import ScriptedServer as ScriptedServer
    from .llm import ServerPool as ServerPool
    from .llm import TokenPrices as TokenPrices
    from .llm import ToolCall as ToolCall
    from .llm import ToolSpec as ToolSpec
    from .llm import UsageStats as UsageStats
    from .llm import model_from_config as model_from_config
    from .llm import parse_social_action as parse_social_action
    from .llm import social_prompt as social_prompt
    from .llm import social_rules as social_rules
    from .parallel import Entity as Entity
    from .parallel import Experiment as Experiment
    from .parallel import ExperimentResults as ExperimentResults
    from .parallel import Offloader as Offloader
    from .parallel import PDESStats as PDESStats
    from .parallel import ReplicationResult as ReplicationResult
    from .parallel import ShardContext as ShardContext
    from .parallel import ShardedSim as ShardedSim
    from .parallel import SpeedupEstimate as SpeedupEstimate
    from .parallel import UnshardedSim as UnshardedSim
    from .parallel import analyze as analyze
    from .parallel import config_grid as config_grid
    from .parallel import offload as offload
    from .parallel import use_pool as use_pool
    from .pausable import AgentLock as AgentLock
    from .pausable import AgentStatus as AgentStatus
    from .pausable import AsyncAgent as AsyncAgent
    from .pausable import AsyncHost as AsyncHost
    from .pausable import Channel as Channel
    from .pausable import PausableAgent as PausableAgent
    from .pausable import PausableContext as PausableContext
    from .pausable import PausableHost as PausableHost
    from .report import LiveView as LiveView
    from .report import build_report as build_report
    from .resources import Container as Container
    from .resources import ContainerMonitor as ContainerMonitor
    from .resources import ContainerStatistics as ContainerStatistics
    from .resources import FilterStore as FilterStore
    from .resources import Monitor as Monitor
    from .resources import MonitorSet as MonitorSet
    from .resources import Preempted as Preempted
    from .resources import PreemptiveResource as PreemptiveResource
    from .resources import PriorityItem as PriorityItem
    from .resources import PriorityResource as PriorityResource
    from .resources import PriorityStore as PriorityStore
    from .resources import Resource as Resource
    from .resources import ResourceMonitor as ResourceMonitor
    from .resources import ResourceStatistics as ResourceStatistics
    from .resources import Store as Store
    from .resources import StoreMonitor as StoreMonitor
    from .resources import StoreStatistics as StoreStatistics
    from .resources import Tally as Tally
    from .resources import monitors as monitors
    from .resources import read_monitors as read_monitors
    from .resources import write_monitors as write_monitors
    from .scenarios import Intervention as Intervention
    from .scenarios import Knob as Knob
    from .scenarios import KnobBoard as KnobBoard
    from .scenarios import Knobs as Knobs
    from .scenarios import Scenario as Scenario
    from .scenarios import apply_scenario as apply_scenario
    from .scenarios import load_scenario as load_scenario
    from .scenarios import load_scenarios as load_scenarios
    from .societies import EventEngine as EventEngine
    from .societies import EventResult as EventResult
    from .societies import LLMContext as LLMContext
    from .societies import LLMRuntime as LLMRuntime
    from .societies import ReplayReport as ReplayReport
    from .societies import RoundEngine as RoundEngine
    from .societies import RoundResult as RoundResult
    from .societies import RunConfig as RunConfig
    from .societies import RunControl as RunControl
    from .societies import RunDirectory as RunDirectory
    from .societies import SocietyRun as SocietyRun
    from .societies import StepReport as StepReport
    from .societies import WindowReport as WindowReport
    from .societies import load_config as load_config
    from .societies import preflight_provider as preflight_provider
    from .societies import replay_run as replay_run
    from .societies import resume_society as resume_society
    from .societies import run_society as run_society
    from .trace import Divergence as Divergence
    from .trace import JsonlTracer as JsonlTracer
    from .trace import MemoryTracer as MemoryTracer
    from .trace import Trace as Trace
    from .trace import assert_equivalent as assert_equivalent
    from .trace import digest as digest
    from .trace import first_divergence as first_divergence


__all__ = [
    # kernel
    "Sim", "Event", "Process", "ConditionValue", "ProcessGenerator", "Tracer", "NORMAL", "URGENT",
    "TieStats",
    # resources
    "Resource", "PriorityResource", "PreemptiveResource", "Preempted", "ResourceStatistics",
    "Container", "ContainerStatistics", "Store", "FilterStore", "PriorityStore", "PriorityItem",
    "StoreStatistics",
    # monitors
    "Monitor", "Tally", "MonitorSet", "ResourceMonitor", "ContainerMonitor", "StoreMonitor",
    "monitors", "write_monitors", "read_monitors",
    # scenarios: knobs and interventions in virtual time
    "Knob", "Knobs", "KnobBoard", "Intervention", "Scenario", "apply_scenario", "load_scenario",
    "load_scenarios",
    # random streams
    "SeedTree", "SmallRandom", "Streams", "derive_seed",
    # trace
    "Trace", "Divergence", "digest", "first_divergence", "assert_equivalent", "JsonlTracer",
    "MemoryTracer",
    # replications and executors
    "Experiment", "ExperimentResults", "ReplicationResult", "config_grid", "Executor",
    "get_executor", "WorkerPool",
    # PDES
    "ShardedSim", "UnshardedSim", "ShardContext", "Entity", "PDESStats", "SpeedupEstimate",
    "analyze",
    # offload
    "offload", "Offloader", "use_pool",
    # agents and engines
    "Agent", "AgentSpec", "Message", "Context", "Phase", "Sequence", "Model", "RunResult",
    "DataCollector",
    "ExecutionBackend", "LocalBackend", "ThreadPoolBackend", "ProcessPoolBackend", "get_backend",
    "DaskBackend", "AsyncBackend", "MCPBackend", "MCPConfig", "EmulatorBackend",
    "load_settings", "Settings",
    # Pregel
    "PregelBackend", "PregelResult", "run_pregel", "PregelGraph", "Superstep",
    "VectorizedResult", "run_vectorized",
    # pausable agents
    "PausableHost", "PausableAgent", "PausableContext", "AgentStatus", "AsyncHost", "AsyncAgent",
    "Channel", "AgentLock",
    # language models
    "LanguageModel", "CompletionRequest", "Completion", "ChatMessage", "ToolSpec", "ToolCall",
    "CallSite", "ScriptedModel", "ScriptedRule", "social_rules", "social_prompt",
    "parse_social_action", "OpenAICompatible", "UsageStats", "TokenPrices", "RecordingStore",
    "RecordingModel", "ReplayModel", "LatencyModel", "ScriptedServer", "model_from_config",
    "Router", "Endpoint", "ServerPool", "RateLimit",
    # errors
    "SimError", "ScheduleError", "EmptySchedule", "InvalidDelay", "UntilInPast", "EventError",
    "AlreadyTriggered", "EventNotReady", "NotAnEvent", "ForeignEvent", "ProcessError",
    "DeadProcess", "SelfInterrupt", "ResourceError", "CapacityExceeded", "ForeignRequest",
    "ConfigError", "ScenarioError", "UnknownEndpoint", "ThreadOwnershipError",
    "DeterminismError", "TraceError",
    "Interrupt", "KernelBug",
    "BackendError", "BackendUnavailable", "WorkerLost", "RemoteError", "ExperimentError",
    "ReplicationFailed", "SpoolError", "PoolError", "PoolClosed", "PoolBusy",
    "OversubscribedWarning",
    "PartitionError", "UnknownEntity", "PayloadNotData", "ShardTypeError", "LookaheadViolation",
    "ShardError", "ShardCrashed",
    "OffloadError", "OffloadTimeout",
    "AgentError", "AgentActionError", "UnknownRecipient", "ContextClosed", "UncopyableState",
    "AgentStateError", "ChannelClosed", "AgentTimeout", "CheckpointError",
    "LLMError", "ProviderError", "ProviderUnavailable", "RateLimited", "ProviderTimeout",
    "ReplayMiss", "RecordingDamaged", "RecordingError", "RunStopped",
    # LLM agent societies: worlds, observe/act agents, the round-based engine, runs
    "World", "LLMAgent", "ActionSpec", "ActionEvent", "RoundEngine", "RoundResult", "StepReport",
    "AgentMemory", "EventEngine", "EventResult", "WindowReport", "LLMRuntime", "LLMContext",
    "RunConfig", "load_config", "run_society", "resume_society", "replay_run", "SocietyRun",
    "preflight_provider", "RunControl",
    "ReplayReport",
    "RunDirectory", "InvalidAction",
    # reports: one HTML file of a run, a study or a monitor file
    "build_report",
    # the live view of a society run
    "LiveView",
    "__version__",
]

# Layers above the kernel load on first use, so `import simulacra.core` (which
# imports this package first) stays fast and light: the kernel must not pay for
# pydantic, polars, json or the process pools of the layers above it.
_LAZY: dict[str, str] = {
    # From simulacra.core, which installs the compiled class into simulacra.rng first.
    "SmallRandom": ".core",
    "ActionEvent": ".agents",
    "ActionSpec": ".agents",
    "LLMAgent": ".agents",
    "AgentMemory": ".agents",
    "World": ".agents",
    "ReplayReport": ".societies",
    "RoundEngine": ".societies",
    "EventEngine": ".societies",
    "LLMRuntime": ".societies",
    "LLMContext": ".societies",
    "EventResult": ".societies",
    "WindowReport": ".societies",
    "RoundResult": ".societies",
    "RunConfig": ".societies",
    "RunDirectory": ".societies",
    "SocietyRun": ".societies",
    "StepReport": ".societies",
    "load_config": ".societies",
    "replay_run": ".societies",
    "run_society": ".societies",
    "preflight_provider": ".societies",
    "RunControl": ".societies",
    "build_report": ".report",
    "LiveView": ".report",
    "resume_society": ".societies",
    "Agent": ".agents",
    "AgentSpec": ".agents",
    "Context": ".agents",
    "Message": ".agents",
    "Phase": ".agents",
    "Sequence": ".agents",
    "DaskBackend": ".distributed",
    "EmulatorBackend": ".distributed",
    "MCPBackend": ".distributed",
    "MCPConfig": ".distributed",
    "AgentLock": ".pausable",
    "AgentStatus": ".pausable",
    "AsyncAgent": ".pausable",
    "AsyncHost": ".pausable",
    "Channel": ".pausable",
    "PausableAgent": ".pausable",
    "PausableContext": ".pausable",
    "PausableHost": ".pausable",
    "ExecutionBackend": ".backends",
    "LocalBackend": ".backends",
    "Model": ".backends",
    "DataCollector": ".backends",
    "ProcessPoolBackend": ".backends",
    "PregelBackend": ".backends",
    "PregelGraph": ".backends",
    "PregelResult": ".backends",
    "Superstep": ".backends",
    "VectorizedResult": ".backends",
    "run_pregel": ".backends",
    "run_vectorized": ".backends",
    "RunResult": ".backends",
    "Settings": ".backends",
    "ThreadPoolBackend": ".backends",
    "AsyncBackend": ".backends",
    "get_backend": ".backends",
    "load_settings": ".backends",
    "Executor": ".executors",
    "get_executor": ".executors",
    "WorkerPool": ".executors",
    "CallSite": ".llm",
    "ChatMessage": ".llm",
    "Completion": ".llm",
    "CompletionRequest": ".llm",
    "LanguageModel": ".llm",
    "LatencyModel": ".llm",
    "OpenAICompatible": ".llm",
    "RecordingModel": ".llm",
    "RecordingStore": ".llm",
    "ReplayModel": ".llm",
    "ScriptedModel": ".llm",
    "ScriptedRule": ".llm",
    "ScriptedServer": ".llm",
    "Router": ".llm",
    "Endpoint": ".llm",
    "ServerPool": ".llm",
    "RateLimit": ".llm",
    "TokenPrices": ".llm",
    "ToolCall": ".llm",
    "ToolSpec": ".llm",
    "UsageStats": ".llm",
    "model_from_config": ".llm",
    "parse_social_action": ".llm",
    "social_prompt": ".llm",
    "social_rules": ".llm",
    "Entity": ".parallel",
    "Experiment": ".parallel",
    "ExperimentResults": ".parallel",
    "Offloader": ".parallel",
    "PDESStats": ".parallel",
    "ReplicationResult": ".parallel",
    "ShardContext": ".parallel",
    "ShardedSim": ".parallel",
    "SpeedupEstimate": ".parallel",
    "UnshardedSim": ".parallel",
    "analyze": ".parallel",
    "config_grid": ".parallel",
    "offload": ".parallel",
    "use_pool": ".parallel",
    "Container": ".resources",
    "ContainerStatistics": ".resources",
    "FilterStore": ".resources",
    "Preempted": ".resources",
    "PreemptiveResource": ".resources",
    "PriorityItem": ".resources",
    "PriorityResource": ".resources",
    "PriorityStore": ".resources",
    "Resource": ".resources",
    "ResourceStatistics": ".resources",
    "Store": ".resources",
    "StoreStatistics": ".resources",
    "Monitor": ".resources",
    "Knob": ".scenarios",
    "KnobBoard": ".scenarios",
    "Knobs": ".scenarios",
    "Intervention": ".scenarios",
    "Scenario": ".scenarios",
    "apply_scenario": ".scenarios",
    "load_scenario": ".scenarios",
    "load_scenarios": ".scenarios",
    "Tally": ".resources",
    "MonitorSet": ".resources",
    "ResourceMonitor": ".resources",
    "ContainerMonitor": ".resources",
    "StoreMonitor": ".resources",
    "monitors": ".resources",
    "write_monitors": ".resources",
    "read_monitors": ".resources",
    "Divergence": ".trace",
    "JsonlTracer": ".trace",
    "MemoryTracer": ".trace",
    "Trace": ".trace",
    "assert_equivalent": ".trace",
    "digest": ".trace",
    "first_divergence": ".trace",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'simulacra' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    _claim_public_module(__name__, {"__all__": [name], name: value})
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


_claim_public_module(__name__, globals())
