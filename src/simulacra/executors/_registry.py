"""The executor registry: names to factories, and the ``"auto"`` policy."""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from simulacra._util import did_you_mean
from simulacra.errors import ConfigError

from ._base import Executor, check_retries, check_workers
from ._dask import DaskExecutor, import_distributed
from ._pool import (
    InterpreterExecutor,
    ProcessExecutor,
    SequentialExecutor,
    ThreadExecutor,
    check_interpreters,
)
from ._workers import WorkerPool

__all__ = ["EXECUTOR_ALIASES", "EXECUTOR_NAMES", "auto_backend", "executor_name", "free_threaded",
           "get_executor"]

_log = logging.getLogger("simulacra.executors")


def _sequential(max_workers: int | None = None, retries: int = 3) -> Executor:
    # max_workers and retries are accepted so that a study can switch backend by
    # name alone; one unit at a time in the calling thread cannot use either,
    # but a value no backend would take is refused here too.
    if max_workers is not None:
        check_workers(max_workers)
    check_retries(retries)
    return SequentialExecutor()


def _threads(max_workers: int | None = None, retries: int = 3) -> Executor:
    del retries  # a thread cannot die on its own: nothing to retry
    return ThreadExecutor(max_workers)


def _processes(
    max_workers: int | None = None,
    retries: int = 3,
    start_method: str | None = None,
    pool: WorkerPool | None = None,
    preload: Sequence[str] = (),
) -> Executor:
    return ProcessExecutor(max_workers, start_method=start_method, retries=retries, pool=pool,
                           preload=preload)


def _interpreters(max_workers: int | None = None, retries: int = 3) -> Executor:
    return InterpreterExecutor(max_workers, retries=retries)


def _dask(max_workers: int | None = None, retries: int = 3, address: str | None = None) -> Executor:
    return DaskExecutor(max_workers, address=address, retries=retries)


#: name -> (factory, the options it accepts)
_REGISTRY: dict[str, tuple[Callable[..., Executor], tuple[str, ...]]] = {
    "sequential": (_sequential, ("max_workers", "retries")),
    "threads": (_threads, ("max_workers", "retries")),
    "processes": (_processes, ("max_workers", "retries", "start_method", "pool", "preload")),
    "interpreters": (_interpreters, ("max_workers", "retries")),
    "dask": (_dask, ("max_workers", "retries", "address")),
}

#: Every name :func:`get_executor` accepts, ``"auto"`` first.
EXECUTOR_NAMES: tuple[str, ...] = ("auto", *_REGISTRY)

#: The words the agent backends use for the same ideas (``Model(backend="local")``),
#: accepted here too, so that one vocabulary works everywhere.
EXECUTOR_ALIASES: dict[str, str] = {
    "local": "sequential", "inline": "sequential", "threaded": "threads", "thread": "threads",
    "process": "processes",
}


def executor_name(name: object, *, auto: bool = True, runnable: bool = False) -> str:
    """*name* as a registered executor name (an alias replaced).

    With *runnable*, also check that this Python can run it, without starting
    anything: ``"interpreters"`` needs Python 3.13 or later, ``"dask"`` needs
    ``distributed`` installed.

    Raises:
        ConfigError: *name* is not one (the closest name is suggested); or it
            is ``"auto"`` and *auto* is false.
        BackendUnavailable: *runnable* is true and this Python cannot run it
            (the message says why, and what to use instead).
    """
    if isinstance(name, str):
        name = EXECUTOR_ALIASES.get(name, name)
    if not isinstance(name, str) or name not in EXECUTOR_NAMES or (name == "auto" and not auto):
        known = ", ".join(map(repr, EXECUTOR_NAMES))
        hint = did_you_mean(name, [*EXECUTOR_NAMES, *EXECUTOR_ALIASES],
                            lambda match: EXECUTOR_ALIASES.get(match, match))
        raise ConfigError(f"backend must be one of {known}, got {name!r}{hint}")
    if runnable and name == "interpreters":
        check_interpreters()
    if runnable and name == "dask" and importlib.util.find_spec("distributed") is None:
        import_distributed()  # raises, with how to install it
    return name


def free_threaded() -> bool:
    """Whether this interpreter runs Python threads in parallel (a free-threaded build, GIL off)."""
    is_gil_enabled: Callable[[], bool] | None = getattr(sys, "_is_gil_enabled", None)
    return is_gil_enabled is not None and not is_gil_enabled()


def auto_backend() -> tuple[str, str]:
    """Return the backend ``"auto"`` stands for here, and why.

    Processes on a GIL build (threads would take turns on one core); threads
    on a free-threaded build with the GIL off (as parallel as processes,
    without pickling or start-up costs).

    Returns:
        ``(name, reason)``, e.g. ``("processes", "auto: the GIL is enabled, ...")``.
    """
    if free_threaded():
        return "threads", "auto: a free-threaded build with the GIL off, so threads run in parallel"
    return "processes", "auto: this Python has a GIL, so processes; threads would share one core"


def get_executor(name: str, /, **options: Any) -> Executor:
    """Return a new executor by name; the caller closes it (or uses ``with``).

    Args:
        name: ``"auto"``, ``"sequential"``, ``"threads"``, ``"processes"``,
            ``"interpreters"`` or ``"dask"`` (``"local"``/``"inline"``,
            ``"threaded"`` and ``"process"`` are other names for the first
            three, as the agent backends call them). ``"auto"`` resolves to
            :func:`auto_backend`'s choice and logs it on the
            ``simulacra.executors`` logger; the executor's ``name`` says which.
        **options: ``max_workers`` (all; ignored by ``sequential``),
            ``retries`` (all; unused by ``sequential`` and ``threads``, which
            cannot lose a worker), ``start_method``, ``pool`` (a
            :class:`WorkerPool` to borrow) and ``preload`` (``processes``),
            ``address`` (``dask``: a scheduler address instead of a new
            ``LocalCluster``).

    Returns:
        An :class:`Executor`.

    Raises:
        ConfigError: *name* is unknown (the message lists the known ones) or
            an option does not apply to this executor.
        BackendUnavailable: The executor cannot run on this Python or
            installation (the message says why).
    """
    name = executor_name(name)
    if name == "auto":
        name, reason = auto_backend()
        _log.info("backend %s (%s)", name, reason)
    factory, accepted = _REGISTRY[name]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(
            f"option {unknown[0]!r} does not apply to backend {name!r}; it accepts "
            f"{', '.join(map(repr, accepted))}"
        )
    return factory(**options)
