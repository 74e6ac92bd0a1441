"""Executors: inline, threads, processes and sub-interpreters.

Processes run on a :class:`~simulacra.executors.WorkerPool` (``_workers.py``),
one unit per worker at a time, so a worker that dies is blamed exactly
(:func:`_run_on`). Threads and sub-interpreters drive a
:class:`concurrent.futures.Executor` through one loop,
:meth:`_FuturesExecutor._drive` (Dask reuses it). It keeps a bounded window of units
in flight (so that a crash can only take a few units down with it), yields
outcomes as they complete, and retries units whose worker died.

Blame for a crash is exact there too. When a pool's worker dies, every unit
in flight on the pool may be lost with it, and the pool cannot tell which one
killed it. So
each of those units becomes a *suspect* and is re-run alone, with nothing else
in flight: a unit that kills its worker while running alone is charged for it,
and the innocent ones simply finish. A unit is reported :class:`Lost` once its
worker has died ``retries + 1`` times under it.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import re
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import BaseContext
from typing import Any, ClassVar, TypeVar, final

from simulacra.errors import BackendUnavailable, ConfigError

from ._base import Done, Lost, Raised, call_unit, check_retries, check_workers
from ._refs import callable_ref
from ._subinterp import SubInterpreterPool
from ._subinterp import available as subinterp_available
from ._workers import (
    START_METHODS,
    PoolLease,
    WorkerPool,
    check_start_method,
    warn_if_oversubscribed,
)

__all__ = [
    "START_METHODS",
    "InterpreterExecutor",
    "ProcessExecutor",
    "SequentialExecutor",
    "ThreadExecutor",
    "process_pool",
]

U = TypeVar("U")
R = TypeVar("R")


class _EagerProcessPool(cf.ProcessPoolExecutor):
    """A ``ProcessPoolExecutor`` that starts all its workers at its first submit.

    With the "spawn" and "forkserver" start methods, CPython starts workers one
    by one from ``submit()``. On Python 3.11 the pool's manager thread marks a
    broken pool without the lock that ``submit()`` holds, then walks the pool's
    process table while a racing ``submit()`` adds a worker to it: the manager
    thread dies with "dictionary changed size during iteration" and the broken
    pool is never cleaned up (fixed in 3.12, where both sides take the lock).
    A killed worker is exactly when this happens, so the pools here launch every
    worker at once, the way CPython's "fork" pools do, before the manager thread
    starts, and no later ``submit()`` ever touches the process table. Workers
    are never replaced one by one: a broken pool is replaced whole.
    """

    def __init__(self, workers: int, context: BaseContext) -> None:
        super().__init__(workers, mp_context=context)
        # The switch CPython itself uses for "fork" (stable 3.11-3.14); where
        # it is gone, the pool keeps its own behaviour.
        if hasattr(self, "_safe_to_dynamically_spawn_children"):
            self._safe_to_dynamically_spawn_children = False


def process_pool(workers: int, start_method: str) -> cf.ProcessPoolExecutor:
    """A process pool of *workers* processes, all started at the first submit.

    The one way simulacra makes a ``ProcessPoolExecutor`` (replications, the
    process executor and in-run offload): each pool gets its own
    multiprocessing context, never the global one. See :class:`_EagerProcessPool`.
    """
    return _EagerProcessPool(workers, multiprocessing.get_context(start_method))


class _Closable:
    _closed: bool = False

    def _check_open(self, name: str) -> None:
        if self._closed:
            raise ConfigError(f"executor {name!r} is closed; create a new one with get_executor()")

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the workers. Calling it twice is harmless."""
        self._closed = True


@final
class SequentialExecutor(_Closable):
    """Runs each unit in the calling thread, one after the other: the reference.

    Every other executor must give the same results as this one. It needs no
    importable function and pickles nothing, so it also serves as the test
    double of the others.
    """

    name: ClassVar[str] = "sequential"

    @property
    def workers(self) -> int:
        """Always 1."""
        return 1

    def map_units(
        self, fn: Callable[[U], R], units: Sequence[U], /
    ) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
        """Run ``fn(unit)`` for each unit in order; yield ``(index, outcome)``."""
        self._check_open(self.name)
        return self._run(fn, units)

    def _run(
        self, fn: Callable[[U], R], units: Sequence[U]
    ) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
        for index, unit in enumerate(units):
            yield index, call_unit(fn, unit, False)

    def __repr__(self) -> str:
        return "SequentialExecutor()"


class _Workers(_Closable):
    """An executor on a set of workers: how many, and the re-runs of a unit whose worker died."""

    _workers: int
    _retries: int

    @property
    def workers(self) -> int:
        """How many units may run at the same time."""
        return self._workers

    @property
    def retries(self) -> int:
        """How many times a unit is re-run after its worker died under it."""
        return self._retries


class _FuturesExecutor(_Workers):
    """The shared loop over a ``concurrent.futures`` pool; see the module docstring."""

    name: ClassVar[str]
    #: Whether units cross a process or interpreter boundary (pickled).
    _portable: ClassVar[bool] = True

    def __init__(self, workers: int, retries: int) -> None:
        self._workers = workers
        self._retries = retries
        #: The current pool, created on first use and replaced when it breaks.
        self._pool: cf.Executor | None = None
        #: Bumped each time the pool is replaced; futures remember theirs, so
        #: that the many failures of one broken pool replace it only once.
        self._generation = 0

    # -- what each pool kind says ------------------------------------------------

    def _make_pool(self) -> cf.Executor:
        raise NotImplementedError

    def _window(self) -> int:
        """How many units to keep in flight: enough to keep every worker busy."""
        return self._workers + 1

    def _is_lost(self, exc: BaseException) -> bool:
        """Whether *exc*, set on a future, means the unit's worker died."""
        return False

    def _breaks_pool(self, exc: BaseException) -> bool:
        """Whether a lost unit leaves the whole pool unusable."""
        return False

    def _check_fn(self, fn: Callable[..., Any]) -> None:
        if self._portable:
            callable_ref(fn, "fn")

    def _call(self, pool: cf.Executor, fn: Callable[[U], R], unit: U) -> cf.Future[Any]:
        """Submit one unit to *pool*: the trampoline that runs ``fn(unit)`` there."""
        return pool.submit(call_unit, fn, unit, self._portable)

    def _outcome(self, result: Any) -> Done[Any] | Raised:
        """The outcome a finished future carries (see :meth:`_call`)."""
        outcome: Done[Any] | Raised = result
        return outcome

    # -- the loop -------------------------------------------------------------------

    def map_units(
        self, fn: Callable[[U], R], units: Sequence[U], /
    ) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
        """Run ``fn(unit)`` for every unit; yield ``(index, outcome)`` as each finishes.

        Raises:
            ConfigError: The executor is closed, or (for executors that cross a
                process boundary) *fn* is not importable by name.
        """
        self._check_open(self.name)
        self._check_fn(fn)
        return self._drive(fn, units)

    def _current_pool(self) -> tuple[cf.Executor, int]:
        if self._pool is None:
            self._pool = self._make_pool()
        return self._pool, self._generation

    def _discard_pool(self, generation: int) -> None:
        if generation != self._generation or self._pool is None:
            return  # already replaced
        pool, self._pool = self._pool, None
        self._generation += 1
        self._retire(pool)

    def _retire(self, pool: cf.Executor) -> None:
        """Let go of a broken pool without waiting for it."""
        pool.shutdown(wait=False, cancel_futures=True)

    def _submit(self, fn: Callable[[U], R], unit: U) -> tuple[cf.Future[Any], int]:
        pool, generation = self._current_pool()
        try:
            return self._call(pool, fn, unit), generation
        except BrokenProcessPool:  # it broke since the last look: replace it, once
            self._discard_pool(generation)
            pool, generation = self._current_pool()
            return self._call(pool, fn, unit), generation

    def _drive(
        self, fn: Callable[[U], R], units: Sequence[U]
    ) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
        fresh = deque(range(len(units)))
        suspects: deque[int] = deque()
        crashes = [0] * len(units)
        #: future -> (unit index, ran alone, pool generation)
        in_flight: dict[cf.Future[Any], tuple[int, bool, int]] = {}
        window = self._window()
        try:
            while fresh or suspects or in_flight:
                if suspects:
                    # Quarantine: a suspect runs with nothing else in flight.
                    if not in_flight:
                        index = suspects.popleft()
                        future, generation = self._submit(fn, units[index])
                        in_flight[future] = (index, True, generation)
                else:
                    while fresh and len(in_flight) < window:
                        index = fresh.popleft()
                        future, generation = self._submit(fn, units[index])
                        in_flight[future] = (index, False, generation)
                done, _ = cf.wait(list(in_flight), return_when=cf.FIRST_COMPLETED)
                for future in sorted(done, key=lambda f: in_flight[f][0]):
                    index, alone, generation = in_flight.pop(future)
                    exc = None if future.cancelled() else future.exception()
                    if exc is None and not future.cancelled():
                        yield index, self._outcome(future.result())
                    elif exc is not None and not self._is_lost(exc):
                        # The pool failed to deliver (e.g. an unpicklable unit or
                        # result): an error in the work, not a dead worker.
                        yield index, Raised(exc, "")
                    else:
                        if exc is not None and self._breaks_pool(exc):
                            self._discard_pool(generation)
                        crashes[index] += 1
                        if (alone or self._retries == 0) and crashes[index] > self._retries:
                            yield index, Lost(crashes[index], _reason(exc))
                        else:
                            suspects.append(index)
                if suspects and len(suspects) > 1:
                    suspects = deque(sorted(suspects))
        finally:
            for future in in_flight:
                future.cancel()

    def close(self) -> None:
        """Shut the pool down, cancelling units not yet started. Calling it twice is harmless."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_workers={self._workers}, retries={self._retries})"


def _reason(exc: BaseException | None) -> str:
    if exc is None:
        return "the unit was cancelled by the backend"
    return f"{type(exc).__name__}: {exc}"


@final
class ThreadExecutor(_FuturesExecutor):
    """Runs units on a thread pool (``concurrent.futures.ThreadPoolExecutor``).

    On a GIL build, pure-Python units take turns on one core, so this gives
    little speed-up for CPU-bound models (it helps when units wait on I/O); on a
    free-threaded build the threads run in parallel. Units share the process,
    so nothing is pickled and ``fn`` may be any callable. A thread cannot crash
    on its own, so nothing is ever retried.

    Args:
        max_workers: Threads in the pool; ``None`` means one per CPU.

    Raises:
        ConfigError: *max_workers* is not an int >= 1 or None.
    """

    name: ClassVar[str] = "threads"
    _portable: ClassVar[bool] = False

    def __init__(self, max_workers: int | None = None) -> None:
        super().__init__(check_workers(max_workers), 0)

    def _make_pool(self) -> cf.Executor:
        return cf.ThreadPoolExecutor(self._workers, thread_name_prefix="simulacra-unit")

    def _window(self) -> int:
        return 2 * self._workers

    def __repr__(self) -> str:
        return f"ThreadExecutor(max_workers={self._workers})"


@final
class ProcessExecutor(_Workers):
    """Runs units in worker processes: a :class:`WorkerPool` of its own, or one it is given.

    Each worker runs one unit at a time, so when a worker dies (killed,
    ``os._exit``, a segfault in an extension) the unit it was running is
    known exactly: that unit is re-run, up to *retries* times, on a fresh
    worker that replaces the dead one, and no other unit is disturbed. A
    unit whose worker died ``retries + 1`` times is :class:`Lost`.

    The workers start from a multiprocessing context chosen here and never
    set globally (``multiprocessing.set_start_method`` is never called):

    - ``"forkserver"`` (the default where the platform has it: Linux,
      macOS): workers fork from a server process that has already imported
      the kernel, so each starts in milliseconds.
    - ``"spawn"`` (the default elsewhere): each worker is a fresh interpreter
      that imports ``fn`` by name; starting one costs an interpreter start-up
      plus the imports.

    ``"fork"`` is refused: it copies a parent that runs threads, which can
    deadlock the child, and lets workers see state that was never sent to them.

    Args:
        max_workers: Worker processes; ``None`` means one per CPU. More than
            the CPUs warns (:class:`~simulacra.errors.OversubscribedWarning`).
        start_method: ``"forkserver"``, ``"spawn"`` or ``None`` (forkserver
            where the platform has it).
        retries: Re-runs allowed for a unit whose worker died under it.
        pool: A :class:`WorkerPool` to run on instead of starting workers:
            it is borrowed for each :meth:`map_units` and left open by
            :meth:`close`, so that several runs share its processes. Then
            *max_workers*, *start_method* and *preload* are the pool's.
        preload: Modules the forkserver imports before it forks the
            workers (what runs a unit), as :class:`WorkerPool` takes them.

    Raises:
        ConfigError: An argument is out of range, *start_method* is unknown,
            or *pool* comes with *max_workers*, *start_method* or *preload*.
        BackendUnavailable: *start_method* is not available on this platform.
    """

    name: ClassVar[str] = "processes"

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        start_method: str | None = None,
        retries: int = 3,
        pool: WorkerPool | None = None,
        preload: Sequence[str] = (),
    ) -> None:
        self._retries = check_retries(retries)
        self._preload = tuple(preload)
        self._pool: WorkerPool | None
        if pool is not None:
            if not isinstance(pool, WorkerPool):
                raise ConfigError(f"pool must be a WorkerPool, got {type(pool).__name__} {pool!r}")
            if max_workers is not None or start_method is not None or self._preload:
                raise ConfigError(
                    "max_workers, start_method and preload are the pool's when a WorkerPool "
                    "is given "
                    f"(this one: max_workers={pool.workers}, start_method={pool.start_method!r})"
                )
            self._pool, self._owned = pool, False
            self._workers, self._start_method = pool.workers, pool.start_method
        else:
            self._start_method = check_start_method(start_method)
            self._workers = check_workers(max_workers)
            warn_if_oversubscribed(self._workers)
            self._pool, self._owned = None, True

    @property
    def start_method(self) -> str:
        """The multiprocessing start method of this executor's workers."""
        return self._start_method

    def map_units(
        self, fn: Callable[[U], R], units: Sequence[U], /
    ) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
        """Run ``fn(unit)`` for every unit; yield ``(index, outcome)`` as each finishes.

        The workers are borrowed when the iteration starts and given back when
        it ends (or is closed early: a worker still running a unit is then
        replaced).

        Raises:
            ConfigError: The executor is closed, or *fn* is not importable by name.
            PoolClosed: The given pool was closed (raised by the first ``next()``).
            PoolBusy: Another run holds the given pool (raised by the first ``next()``).
        """
        self._check_open(self.name)
        callable_ref(fn, "fn")
        return self._drive(fn, units)

    def _current_pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(self._workers, start_method=self._start_method,
                                    preload=self._preload, oversubscribe=True)
        return self._pool

    def _drive(
        self, fn: Callable[[U], R], units: Sequence[U]
    ) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
        lease = self._current_pool().lease(f"a run of {len(units)} units")
        try:
            yield from _run_on(lease, fn, units, self._retries)
        finally:
            lease.release()

    def close(self) -> None:
        """Stop the workers (unless the pool was given). Calling it twice is harmless."""
        self._closed = True
        if self._owned and self._pool is not None:
            pool, self._pool = self._pool, None
            pool.close()

    def __repr__(self) -> str:
        return (
            f"ProcessExecutor(max_workers={self._workers}, start_method="
            f"{self._start_method!r}, retries={self._retries})"
        )


def _run_on(
    lease: PoolLease, fn: Callable[[U], R], units: Sequence[U], retries: int
) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
    """Run every unit on the lease's workers, one unit per worker at a time.

    Blame is exact: a worker that dies was running one known unit. That unit
    is put back at the head of the queue (or reported :class:`Lost` once it
    has killed ``retries + 1`` workers) and the worker is replaced.
    """
    fresh = deque(range(len(units)))
    crashes = [0] * len(units)
    idle = list(range(lease.workers))
    busy: dict[int, int] = {}  # worker slot -> unit index
    while fresh or busy:
        lost: list[tuple[int, int, Lost]] = []  # (slot, unit index, how its worker died)
        while fresh and idle:
            slot, index = idle.pop(0), fresh.popleft()
            try:
                sent = lease.send(slot, "unit", (fn, units[index]))
            except Exception as exc:  # the unit (or fn) does not pickle: an error in the work
                idle.insert(0, slot)
                yield index, Raised(exc, "")
                continue
            if sent:
                busy[slot] = index
            else:  # the worker died before it got the unit (as it started, say)
                death = lease.receive(slot)
                lost.append((slot, index, death if isinstance(death, Lost) else
                             Lost(1, "the worker process could not be sent its unit")))
        for slot in lease.wait(list(busy)) if busy and not lost else ():
            index = busy.pop(slot)
            outcome = lease.receive(slot)
            if isinstance(outcome, Lost):
                lost.append((slot, index, outcome))
            else:
                idle.append(slot)
                yield index, outcome
        for slot, index, death in lost:
            lease.restart(slot)
            idle.append(slot)
            crashes[index] += 1
            if crashes[index] > retries:
                yield index, Lost(crashes[index], death.reason)
            else:
                fresh.appendleft(index)


def _interpreter_pool_class() -> Callable[[int], cf.Executor]:
    cls: type[cf.Executor] | None = getattr(cf, "InterpreterPoolExecutor", None)
    if cls is not None:  # Python 3.14+
        return cls
    why = subinterp_available()
    if why is None:  # Python 3.13: our pool over its private _interpreters module
        return SubInterpreterPool
    version = ".".join(map(str, sys.version_info[:3]))
    # Before 3.13 the version says it all; a 3.13 build says what it lacks.
    this = f"this is Python {version}" if sys.version_info < (3, 13) else why
    raise BackendUnavailable(
        f"backend 'interpreters' needs sub-interpreters: Python 3.14's "
        f"concurrent.futures.InterpreterPoolExecutor or Python 3.13's _interpreters "
        f"module; {this}. Use 'processes' for the same isolation, or 'threads' on a "
        "free-threaded build"
    )


def check_interpreters() -> None:
    """Raise BackendUnavailable, saying why, if this Python cannot run InterpreterExecutor."""
    _interpreter_pool_class()


@final
class InterpreterExecutor(_FuturesExecutor):
    """Runs units in sub-interpreters of this process (Python 3.13 and 3.14+).

    Uses ``concurrent.futures.InterpreterPoolExecutor`` on 3.14, and on 3.13
    simulacra's own small pool over the private ``_interpreters`` module
    (``SubInterpreterPool``, same contract): each worker is an
    isolated interpreter with its own GIL, so CPU-bound units run in parallel
    without the start-up cost of a process. Units are pickled, as for
    processes, and ``fn`` must be importable by name. Extension modules that do
    not support sub-interpreters cannot be imported in them.

    Args:
        max_workers: Interpreters in the pool; ``None`` means one per CPU.
        retries: Re-runs allowed for a unit whose interpreter broke under it.

    Raises:
        BackendUnavailable: This Python has neither (3.11, 3.12).
        ConfigError: An argument is out of range.
    """

    name: ClassVar[str] = "interpreters"

    def __init__(self, max_workers: int | None = None, *, retries: int = 3) -> None:
        self._pool_class = _interpreter_pool_class()
        super().__init__(check_workers(max_workers), check_retries(retries))
        warn_if_oversubscribed(self._workers)

    def _make_pool(self) -> cf.Executor:
        factory: Callable[[int], cf.Executor] = self._pool_class
        return factory(self._workers)

    def map_units(
        self, fn: Callable[[U], R], units: Sequence[U], /
    ) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
        """Run ``fn(unit)`` for every unit; yield ``(index, outcome)`` as each finishes.

        A unit that failed because it imports an extension module that refuses
        sub-interpreters is reported as :class:`Raised` with a
        :class:`~simulacra.errors.BackendUnavailable` that names the module,
        its package and the backends that can run it.
        """
        return _explain_refusals(super().map_units(fn, units), _name_of(fn))

    def _is_lost(self, exc: BaseException) -> bool:
        return _is_broken_interpreter_pool(exc)

    def _breaks_pool(self, exc: BaseException) -> bool:
        return _is_broken_interpreter_pool(exc)


#: How CPython says that an extension module cannot be loaded in a sub-interpreter.
_REFUSED = re.compile(r"module '?([\w.]+)'? does not support loading in subinterpreters")


def refused_module(error: BaseException, traceback_text: str = "") -> str | None:
    """The extension module that *error* says refuses sub-interpreters, or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _REFUSED.search(str(current))
        if found:
            return found.group(1)
        current = current.__cause__ or current.__context__
    found = _REFUSED.search(traceback_text)
    return found.group(1) if found else None


def _package_of(module: str) -> str:
    """The distribution that installs *module* (its top-level package's name if unknown)."""
    top = module.split(".", maxsplit=1)[0]
    try:
        from importlib.metadata import packages_distributions  # noqa: PLC0415

        names = packages_distributions().get(top, [])
    except Exception:  # only a nicer name is at stake
        names = []
    return names[0] if names else top


def _explain_refusals(
    outcomes: Iterator[tuple[int, Done[R] | Raised | Lost]], what: str
) -> Iterator[tuple[int, Done[R] | Raised | Lost]]:
    try:
        for index, outcome in outcomes:
            if isinstance(outcome, Raised):
                module = refused_module(outcome.error, outcome.traceback)
                if module is not None:
                    outcome = Raised(BackendUnavailable(
                        f"backend 'interpreters' cannot run {what}: it needs {module} (package "
                        f"{_package_of(module)}), an extension module that refuses to load in "
                        "sub-interpreters; backends that can run it: 'processes' (the same "
                        "isolation), 'threads', 'sequential', 'dask'"
                    ), outcome.traceback)
            yield index, outcome
    finally:
        close = getattr(outcomes, "close", None)
        if close is not None:
            close()


def _name_of(fn: object) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def _is_broken_interpreter_pool(exc: BaseException) -> bool:
    broken: type[BaseException] | None = None
    with contextlib.suppress(ImportError):
        module = __import__("concurrent.futures.interpreter", fromlist=["BrokenInterpreterPool"])
        broken = getattr(module, "BrokenInterpreterPool", None)
    return broken is not None and isinstance(exc, broken)
