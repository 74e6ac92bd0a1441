"""Resources, containers and stores (layer 2), with SimPy 4's queueing semantics.

Built on the public kernel API of ``simulacra.core`` (plus its documented
``_owner``/``_data`` event slots); imports nothing above layer 1.
"""

from ._resources import Container as Container
from ._resources import ContainerStatistics as ContainerStatistics
from ._resources import FilterStore as FilterStore
from ._resources import Preempted as Preempted
from ._resources import PreemptiveResource as PreemptiveResource
from ._resources import PriorityItem as PriorityItem
from ._resources import PriorityResource as PriorityResource
from ._resources import PriorityStore as PriorityStore
from ._resources import Resource as Resource
from ._resources import ResourceStatistics as ResourceStatistics
from ._resources import Store as Store
from ._resources import StoreStatistics as StoreStatistics

__all__ = [
    "Container",
    "ContainerStatistics",
    "FilterStore",
    "PreemptiveResource",
    "Preempted",
    "PriorityItem",
    "PriorityResource",
    "PriorityStore",
    "Resource",
    "ResourceStatistics",
    "Store",
    "StoreStatistics",
]
