"""Executors: run independent units of work inline, on threads, processes, sub-interpreters or Dask.

Layer 1, beside the kernel, and knowing nothing of it: an executor calls
``fn(unit)`` for each unit and reports what happened (:class:`Done`,
:class:`Raised` or :class:`Lost`) in completion order, with each unit's index.
The caller puts results back in identity order. Executors that cross a
process boundary take an importable function and pickled plain data, never a
live object.

This package imports only the standard library and :mod:`simulacra.errors`;
``dask.distributed`` is imported when a Dask executor is created, and ``rich``
when a :class:`ProgressBar` is.
"""

from typing import TYPE_CHECKING

from simulacra._util import lazy_names

if TYPE_CHECKING:  # the type checker sees every name; at run time they load lazily
    from ._base import Done as Done
    from ._base import Executor as Executor
    from ._base import Lost as Lost
    from ._base import Raised as Raised
    from ._base import available_cpus as available_cpus
    from ._dask import DaskExecutor as DaskExecutor
    from ._dask import import_distributed as import_distributed
    from ._dask import local_dask_client as local_dask_client
    from ._pool import START_METHODS as START_METHODS
    from ._pool import InterpreterExecutor as InterpreterExecutor
    from ._pool import ProcessExecutor as ProcessExecutor
    from ._pool import SequentialExecutor as SequentialExecutor
    from ._pool import ThreadExecutor as ThreadExecutor
    from ._pool import process_pool as process_pool
    from ._progress import ProgressBar as ProgressBar
    from ._refs import RefLoader as RefLoader
    from ._refs import callable_ref as callable_ref
    from ._refs import main_script as main_script
    from ._refs import resolve_callable as resolve_callable
    from ._registry import EXECUTOR_ALIASES as EXECUTOR_ALIASES
    from ._registry import EXECUTOR_NAMES as EXECUTOR_NAMES
    from ._registry import auto_backend as auto_backend
    from ._registry import executor_name as executor_name
    from ._registry import free_threaded as free_threaded
    from ._registry import get_executor as get_executor
    from ._workers import PoolLease as PoolLease
    from ._workers import WorkerPool as WorkerPool
    from ._workers import default_start_method as default_start_method

__all__ = [
    # the seam
    "Executor",
    "Done",
    "Raised",
    "Lost",
    "get_executor",
    "EXECUTOR_ALIASES",
    "EXECUTOR_NAMES",
    "executor_name",
    "auto_backend",
    # implementations
    "SequentialExecutor",
    "ThreadExecutor",
    "ProcessExecutor",
    "InterpreterExecutor",
    "DaskExecutor",
    "WorkerPool",
    "PoolLease",
    "default_start_method",
    "START_METHODS",
    # helpers
    "ProgressBar",
    "RefLoader",
    "callable_ref",
    "main_script",
    "resolve_callable",
    "available_cpus",
    "free_threaded",
    "import_distributed",
    "local_dask_client",
    "process_pool",
]

#: Each public name -> the private module that defines it.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Done", "Executor", "Lost", "Raised", "available_cpus"), "._base"),
    **dict.fromkeys(("DaskExecutor", "import_distributed", "local_dask_client"), "._dask"),
    **dict.fromkeys(("START_METHODS", "InterpreterExecutor", "ProcessExecutor",
                     "SequentialExecutor", "ThreadExecutor", "process_pool"), "._pool"),
    "ProgressBar": "._progress",
    **dict.fromkeys(("RefLoader", "callable_ref", "main_script", "resolve_callable"),
                     "._refs"),
    **dict.fromkeys(("PoolLease", "WorkerPool", "default_start_method"), "._workers"),
    **dict.fromkeys(("EXECUTOR_ALIASES", "EXECUTOR_NAMES", "auto_backend", "executor_name",
                     "free_threaded", "get_executor"), "._registry"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
