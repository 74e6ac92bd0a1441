"""simulacra: deterministic simulation of many interacting actors.

One front door: everything public is re-exported here; every module behind it
is private. The same seed and config give the same trace digest on every
backend, worker count and shard count.
"""

from simulacra._util import claim_public_module

from ._version import __version__ as __version__
from .core import NORMAL as NORMAL
from .core import URGENT as URGENT
from .core import ConditionValue as ConditionValue
from .core import Event as Event
from .core import Process as Process
from .core import ProcessGenerator as ProcessGenerator
from .core import Sim as Sim
from .core import Tracer as Tracer
from .errors import AlreadyTriggered as AlreadyTriggered
from .errors import CapacityExceeded as CapacityExceeded
from .errors import ConfigError as ConfigError
from .errors import DeadProcess as DeadProcess
from .errors import DeterminismError as DeterminismError
from .errors import EmptySchedule as EmptySchedule
from .errors import EventError as EventError
from .errors import EventNotReady as EventNotReady
from .errors import ForeignEvent as ForeignEvent
from .errors import ForeignRequest as ForeignRequest
from .errors import Interrupt as Interrupt
from .errors import InvalidDelay as InvalidDelay
from .errors import KernelBug as KernelBug
from .errors import NotAnEvent as NotAnEvent
from .errors import ProcessError as ProcessError
from .errors import ResourceError as ResourceError
from .errors import ScheduleError as ScheduleError
from .errors import SelfInterrupt as SelfInterrupt
from .errors import SimError as SimError
from .errors import ThreadOwnershipError as ThreadOwnershipError
from .errors import TraceError as TraceError
from .errors import UntilInPast as UntilInPast
from .resources import Container as Container
from .resources import ContainerStatistics as ContainerStatistics
from .resources import FilterStore as FilterStore
from .resources import Preempted as Preempted
from .resources import PreemptiveResource as PreemptiveResource
from .resources import PriorityItem as PriorityItem
from .resources import PriorityResource as PriorityResource
from .resources import PriorityStore as PriorityStore
from .resources import Resource as Resource
from .resources import ResourceStatistics as ResourceStatistics
from .resources import Store as Store
from .resources import StoreStatistics as StoreStatistics
from .rng import SeedTree as SeedTree
from .rng import Streams as Streams
from .rng import derive_seed as derive_seed
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
    # resources
    "Resource", "PriorityResource", "PreemptiveResource", "Preempted", "ResourceStatistics",
    "Container", "ContainerStatistics", "Store", "FilterStore", "PriorityStore", "PriorityItem",
    "StoreStatistics",
    # random streams
    "SeedTree", "Streams", "derive_seed",
    # trace
    "Trace", "Divergence", "digest", "first_divergence", "assert_equivalent", "JsonlTracer",
    "MemoryTracer",
    # errors
    "SimError", "ScheduleError", "EmptySchedule", "InvalidDelay", "UntilInPast", "EventError",
    "AlreadyTriggered", "EventNotReady", "NotAnEvent", "ForeignEvent", "ProcessError",
    "DeadProcess", "SelfInterrupt", "ResourceError", "CapacityExceeded", "ForeignRequest",
    "ConfigError", "ThreadOwnershipError", "DeterminismError", "TraceError", "Interrupt",
    "KernelBug",
    "__version__",
]

claim_public_module(__name__, globals())
del claim_public_module
