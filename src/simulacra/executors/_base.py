"""The executor seam: a Protocol, the outcome of one unit, and the worker-side trampoline."""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeAlias, TypeVar, final, runtime_checkable

from simulacra.errors import ConfigError, RemoteError

__all__ = [
    "Done",
    "Executor",
    "Lost",
    "Outcome",
    "Raised",
    "available_cpus",
    "call_unit",
    "check_retries",
    "check_workers",
]

U = TypeVar("U")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@final
@dataclass(frozen=True, slots=True)
class Done(Generic[R_co]):
    """A unit ran to completion and returned :attr:`value`."""

    #: What the function returned.
    value: R_co


@final
@dataclass(frozen=True, slots=True)
class Raised:
    """The function raised :attr:`error`: a bug in the unit, never retried."""

    #: The exception the function raised (a :class:`~simulacra.errors.RemoteError`
    #: standing in for it when it could not be pickled back from a worker).
    error: BaseException
    #: The worker's formatted traceback ("" when the executor has none to give).
    traceback: str


@final
@dataclass(frozen=True, slots=True)
class Lost:
    """The unit's worker died every time it ran: it crashed more often than retries allow."""

    #: How many times a worker died while this unit was running on it.
    crashes: int
    #: What the backend said about the last death.
    reason: str


#: What happened to one unit of work.
Outcome: TypeAlias = "Done[R] | Raised | Lost"


@runtime_checkable
class Executor(Protocol):
    """Runs independent units of work somewhere: inline, threads, processes, Dask...

    An executor knows nothing of simulations: it calls ``fn(unit)`` for each
    unit and reports what happened. Results come back in *completion* order,
    each with the unit's index; putting them back in order is the caller's job
    (and the only way a parallel result may be returned: by identity, never by
    arrival).

    Executors that run units in other processes require ``fn`` to be a
    module-level function importable by name, and pickle each unit: work
    crosses the boundary as data (an importable callable and plain arguments),
    never as a live object.
    """

    @property
    def name(self) -> str:
        """The registry name of this executor, e.g. ``"processes"``."""
        ...

    @property
    def workers(self) -> int:
        """How many units may run at the same time."""
        ...

    def map_units(
        self, fn: Callable[[U], R], units: Sequence[U], /
    ) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
        """Run ``fn(unit)`` for every unit; yield ``(index, outcome)`` as each finishes.

        Every index in ``range(len(units))`` is yielded exactly once, unless
        the caller stops early: closing the iterator (``close()``, or leaving a
        ``for`` loop) cancels the units not yet started. A unit whose worker
        dies is retried (see :class:`Lost`); a unit whose function raises is
        reported as :class:`Raised` and not retried.
        """
        ...

    def close(self) -> None:
        """Release the workers. Calling it twice is harmless."""
        ...


def call_unit(fn: Callable[[U], R], unit: U, portable: bool) -> Done[R] | Raised:
    """Run one unit where the executor put it, turning an exception into :class:`Raised`.

    This is the trampoline every executor runs in its workers, so that an
    exception from *fn* (a bug) travels back as data and is never confused with
    the death of the worker (a crash). With *portable*, an exception that would
    not survive pickling is replaced by a :class:`RemoteError` carrying its
    text and traceback.
    """
    try:
        return Done(fn(unit))
    except Exception as exc:
        text = traceback.format_exc()
        if portable:
            return Raised(_portable(exc, text), text)
        return Raised(exc, text)


def _portable(exc: Exception, text: str) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))  # noqa: S301  (our own bytes, this process)
    except Exception:  # any failure at all means it cannot travel as itself
        return RemoteError(
            f"{type(exc).__module__}.{type(exc).__qualname__}: {exc} "
            f"(not picklable, so replaced by this RemoteError)\n{text}"
        )
    return exc


def available_cpus() -> int:
    """The CPUs this process may run on (affinity and cgroup-aware where Python knows)."""
    count: int | None
    if sys.version_info >= (3, 13):
        count = os.process_cpu_count()
    elif hasattr(os, "sched_getaffinity"):
        count = len(os.sched_getaffinity(0))
    else:  # pragma: no cover (macOS and Windows on 3.11/3.12)
        count = os.cpu_count()
    return max(1, count or 1)


def check_workers(value: object, field: str = "max_workers") -> int:
    """Return *value* as a worker count (``None`` -> :func:`available_cpus`)."""
    if value is None:
        return available_cpus()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"{field} must be an int >= 1 or None (one per CPU), got "
            f"{type(value).__name__} {value!r}"
        )
    return value


def check_retries(value: object, field: str = "retries") -> int:
    """Return *value* as a retry count (an int >= 0)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"{field} must be an int >= 0 (re-runs of a unit whose worker died), got "
            f"{type(value).__name__} {value!r}"
        )
    return value
