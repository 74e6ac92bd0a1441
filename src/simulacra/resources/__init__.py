"""Resources, containers and stores (layer 2), with SimPy 4's queueing semantics.

Also their monitors: time series with time-weighted means (:class:`Monitor`),
sample tallies (:class:`Tally`) and the monitor file (:func:`write_monitors`).

Built on the public kernel API of ``simulacra.core`` (plus its documented
``_owner``/``_data`` event slots); imports nothing above layer 1 and only the
standard library (polars lazily, for ``to_polars()``).
"""

from . import _monitors, _resources
from ._monitors import KINDS as KINDS
from ._monitors import MONITORS_FORMAT as MONITORS_FORMAT
from ._monitors import POLARS_EXTRA as POLARS_EXTRA
from ._monitors import ContainerMonitor as ContainerMonitor
from ._monitors import Monitor as Monitor
from ._monitors import MonitorSet as MonitorSet
from ._monitors import ResourceMonitor as ResourceMonitor
from ._monitors import StoreMonitor as StoreMonitor
from ._monitors import Tally as Tally
from ._monitors import import_polars as import_polars
from ._monitors import monitors as monitors
from ._monitors import read_monitors as read_monitors
from ._monitors import write_monitors as write_monitors
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

#: What the two modules export, in their order (each module's ``__all__`` is the one list).
__all__ = _monitors.__all__ + _resources.__all__
