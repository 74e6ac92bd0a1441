"""In-run offload: CPU-heavy handlers run on a worker pool, results apply at deterministic slots.

A process hands a pure function and its arguments to a pool and waits for
the result as it would wait for a delay::

    def planner(sim: Sim, candidates: list[Plan]) -> ProcessGenerator[None]:
        best = yield offload(sim, rank_plans, candidates, delay=0.5)

**Strict mode** (the default) makes the result independent of the pool.
``offload(sim, fn, *args, delay=d)`` is, observably, ``sim.delay(d, fn(*args))``:

* the returned event *is* a delay event made at submission, so it has the
  position in the schedule of any event scheduled then with that delay (in
  fifo and in keyed ordering alike): the *completion slot*;
* ``fn(*args)`` starts on the pool at submission and runs while the
  simulation goes on with other events;
* when the simulation reaches the slot, it waits (in wall-clock time) for the
  result if it is not ready yet, and the event takes the result as its value,
  or fails with the payload's exception, before anything that waits on it
  resumes.

So the trace is the same inline, on threads and on processes, with any number
of workers: only the wall-clock time differs. What it costs: the model must
give every offloaded computation a simulated duration (*delay*) up front, and
the simulation stalls at a slot whose result is late.

**Non-strict mode** (``strict=False``) gives up reproducibility for speed when
no sensible delay is known: the event is succeeded by a poller process at the
first poll tick (every ``poll_interval`` of simulated time) after the result
has arrived in wall-clock time, and no earlier than ``now + delay``. Which
tick that is depends on how fast the machine is, so two runs of the same seed
can differ, and the poller's own events appear in the trace. Use it for
exploration, never for results you will compare.

**Work crosses as data.** ``fn`` and ``args`` are pickled at submission, on
every backend (inline and threads included): the payload sees a snapshot of
its arguments, the result is a fresh object, and a model that runs inline
also runs on processes. ``fn`` must be a module-level function (or a
``functools.partial`` of one), and must be a pure function of its arguments.

**Failures.** A payload that raises fails the event with that exception (the
process can catch it), chained to a cause that holds the traceback text from
the worker. A payload that does not finish within ``timeout`` seconds of the
simulation starting to wait for it fails the event with
:class:`~simulacra.OffloadTimeout`; a worker process that dies fails it with
:class:`~simulacra.OffloadError`. Blame is deterministic: before either
failure is reported, the payload is run again alone on a fresh pool, so a
payload that merely waited behind a hung one is never blamed for it.
"""

from __future__ import annotations

import inspect
import math
import os
import pickle
import queue
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Final, Protocol

from simulacra.core import Event, ProcessGenerator, Sim, copy_failure
from simulacra.errors import (
    ConfigError,
    InvalidDelay,
    OffloadError,
    OffloadTimeout,
    ThreadOwnershipError,
)
from simulacra.executors import process_pool

__all__ = ["OFFLOAD_BACKENDS", "Offloader", "offload", "use_pool"]

#: The backends an :class:`Offloader` can run payloads on.
OFFLOAD_BACKENDS: Final = ("inline", "threads", "processes")
#: Start methods a processes pool may use; ``fork`` is left out on purpose (it
#: copies the parent's threads' locks and the Sim's memory into each worker).
_START_METHODS: Final = ("spawn", "forkserver")
_PROTOCOL: Final = pickle.HIGHEST_PROTOCOL
_INF: Final = float("inf")


class _NotReady:
    """The value of an offload event before its slot is processed."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<offload result not ready before its slot>"


_NOT_READY: Final = _NotReady()


class _RemoteTraceback(Exception):
    """The cause of a payload's exception: the traceback text from where it ran."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


# --------------------------------------------------------------------------- the payload


def _describe_fn(fn: object) -> str:
    name = getattr(fn, "__qualname__", None)
    if name is None:
        inner = getattr(fn, "func", None)  # functools.partial
        name = f"partial({_describe_fn(inner)})" if inner is not None else type(fn).__name__
    return str(name)


def _pack(fn: Any, args: tuple[Any, ...]) -> bytes:
    """Pickle ``(fn, args)``; a clear ConfigError when it cannot cross to a worker."""
    if not callable(fn):
        raise ConfigError(f"offload(fn=...): expected a callable, got {type(fn).__name__}")
    name = _describe_fn(fn)
    hint = ("work crosses to workers as data: pass a module-level function (or a "
            "functools.partial of one) and picklable arguments")
    if "<lambda>" in name or "<locals>" in name:
        raise ConfigError(
            f"offload(fn=...): expected a module-level function, got {name!r} (a lambda or a "
            f"function defined inside another function cannot be imported by a worker); {hint}"
        )
    if inspect.ismethod(fn) and not isinstance(fn.__self__, type):
        raise ConfigError(
            f"offload(fn=...): expected a module-level function, got the bound method {name!r} "
            f"of a {type(fn.__self__).__name__} (it would ship a copy of that live object); {hint}"
        )
    for arg in args:
        if isinstance(arg, Sim | Event) or inspect.isgenerator(arg) or inspect.iscoroutine(arg):
            raise ConfigError(
                f"offload({name}, ...): an argument is a live {type(arg).__name__}, which "
                f"cannot be pickled; {hint} (no Sim, events, generators, locks or open files)"
            )
    try:
        return pickle.dumps((fn, args), protocol=_PROTOCOL)
    except Exception as exc:
        raise ConfigError(
            f"offload({name}, ...): the function and its arguments cannot be pickled "
            f"({type(exc).__name__}: {exc}); {hint} (no Sim, events, generators, locks or "
            "open files)"
        ) from exc


def _pack_failure(exc: BaseException) -> bytes:
    text = "".join(traceback.format_exception(exc))
    blob: bytes | None
    try:
        blob = pickle.dumps(exc, protocol=_PROTOCOL)
        pickle.loads(blob)  # noqa: S301  (our own bytes; a custom __init__ may not round-trip)
    except Exception:
        blob = None
    return pickle.dumps((False, blob, type(exc).__qualname__, str(exc), text), protocol=_PROTOCOL)


def _execute(payload: bytes) -> bytes:
    """Run one pickled ``(fn, args)`` and return its pickled outcome; never raises.

    The same function runs the payload on every backend, so the result (or
    the exception) reaches the simulation through the same pickle round trip
    inline, on a thread or in another process.
    """
    try:
        fn, args = pickle.loads(payload)  # noqa: S301  (built by _pack in this library)
    except BaseException as exc:  # the function's module cannot be imported here, for one
        error = OffloadError(
            f"the worker could not load the payload ({type(exc).__name__}: {exc}); the "
            "function's module must be importable by name in a fresh interpreter (a module "
            "on sys.path, not a file loaded by path under another name)"
        )
        error.__cause__ = exc
        return _pack_failure(error)
    try:
        result = fn(*args)
    except BaseException as exc:
        return _pack_failure(exc)
    try:
        return pickle.dumps((True, result), protocol=_PROTOCOL)
    except Exception as exc:
        return _pack_failure(OffloadError(
            f"{_describe_fn(fn)} returned a {type(result).__name__}, which cannot be pickled "
            f"back to the simulation ({type(exc).__name__}: {exc})"
        ))


def _unpack(raw: bytes, name: str) -> tuple[bool, Any]:
    """The outcome of :func:`_execute`: ``(True, result)`` or ``(False, exception)``."""
    try:
        outcome = pickle.loads(raw)  # noqa: S301  (made by _execute)
    except Exception as exc:
        error = OffloadError(f"the result of {name} could not be unpickled: "
                             f"{type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return False, error
    if outcome[0]:
        return True, outcome[1]
    _, blob, type_name, message, text = outcome
    exc_value: BaseException | None = None
    if blob is not None:
        try:
            exc_value = pickle.loads(blob)  # noqa: S301  (made by _pack_failure)
        except Exception:
            exc_value = None
    if exc_value is None:
        exc_value = OffloadError(
            f"{name} raised {type_name}: {message} (the exception itself could not be sent "
            "back from the worker; its traceback is the cause)"
        )
    exc_value.__cause__ = _RemoteTraceback(text)
    return False, exc_value


# --------------------------------------------------------------------------- backends


class _Backend(Protocol):
    def submit(self, payload: bytes) -> Future[bytes]: ...

    def restart(self) -> None: ...

    def close(self, kill: bool) -> None: ...


class _InlineBackend:
    """Runs each payload at submission, in the simulation's thread."""

    def submit(self, payload: bytes) -> Future[bytes]:
        future: Future[bytes] = Future()
        future.set_result(_execute(payload))
        return future

    def restart(self) -> None:
        pass

    def close(self, kill: bool) -> None:
        pass


class _ThreadGeneration:
    """A set of daemon worker threads with their own queue.

    A restart abandons a generation: its threads exit after their current
    payload. A hung payload cannot be stopped (Python cannot kill a thread);
    its thread is a daemon, so it does not keep the interpreter alive.
    """

    def __init__(self, workers: int, number: int) -> None:
        self.queue: queue.SimpleQueue[tuple[Future[bytes], bytes] | None] = queue.SimpleQueue()
        self.alive = True
        self.workers = workers
        for index in range(workers):
            threading.Thread(target=self._work, name=f"simulacra-offload-{number}.{index}",
                             daemon=True).start()

    def _work(self) -> None:
        while True:
            item = self.queue.get()
            if item is None or not self.alive:
                return
            future, payload = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(_execute(payload))
            except BaseException as exc:  # pragma: no cover - _execute does not raise
                future.set_exception(exc)

    def stop(self) -> None:
        self.alive = False
        for _ in range(self.workers):
            self.queue.put(None)


class _ThreadBackend:
    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._number = 0
        self._generation: _ThreadGeneration | None = None

    def submit(self, payload: bytes) -> Future[bytes]:
        if self._generation is None:
            self._number += 1
            self._generation = _ThreadGeneration(self._workers, self._number)
        future: Future[bytes] = Future()
        self._generation.queue.put((future, payload))
        return future

    def restart(self) -> None:
        if self._generation is not None:
            self._generation.stop()
            self._generation = None

    def close(self, kill: bool) -> None:
        self.restart()


class _ProcessBackend:
    def __init__(self, workers: int, start_method: str) -> None:
        self._workers = workers
        self._start_method = start_method
        self._executor: ProcessPoolExecutor | None = None

    def submit(self, payload: bytes) -> Future[bytes]:
        if self._executor is None:
            self._executor = process_pool(self._workers, self._start_method)
        return self._executor.submit(_execute, payload)

    def restart(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            _kill(executor)

    def close(self, kill: bool) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if kill:
            _kill(executor)
        else:
            executor.shutdown(wait=True, cancel_futures=True)


def _kill(executor: ProcessPoolExecutor) -> None:
    """Stop a process pool now, hung workers included."""
    kill_workers = getattr(executor, "kill_workers", None)  # Python 3.14+
    if kill_workers is not None:
        kill_workers()
        executor.shutdown(wait=True, cancel_futures=True)
        return
    # Before 3.14 the pool has no public way to stop a running worker: take its
    # processes (a stdlib attribute, stable since 3.3) and kill them.
    workers = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.kill()
    for worker in workers:
        worker.join(10.0)


# --------------------------------------------------------------------------- tasks


class _Task:
    """One submitted payload and where its result goes."""

    __slots__ = ("callbacks", "earliest", "event", "future", "key", "name", "payload",
                 "started", "strict", "submitted_at")

    def __init__(self, name: str, payload: bytes, event: Event[Any], *, strict: bool,
                 earliest: float, submitted_at: float) -> None:
        self.name = name
        self.payload = payload
        self.event = event
        self.strict = strict
        #: Non-strict: the result applies no earlier than this simulated time.
        self.earliest = earliest
        self.submitted_at = submitted_at
        self.future: Future[bytes] | None = None
        #: Strict, pooled: the task's key in Offloader._outstanding (its submission number).
        self.key = 0
        #: Wall-clock time of submission (non-strict timeouts).
        self.started = 0.0
        #: Strict: the event's callback list; the resolver runs first in it.
        self.callbacks: list[Any] | None = None


def _raise_if_unhandled(event: Event[Any]) -> None:
    """Crash ``run`` with a failure that nobody waiting on *event* handled (as the kernel does)."""
    if not event.ok and not event.defused:
        raise copy_failure(event.value)


def _settle(event: Event[Any], ok: bool, value: Any) -> None:
    """Give a scheduled, not yet processed offload event its outcome.

    This is the one place that writes the kernel's event slots (``_value``,
    ``_ok``), which ``simulacra.core`` documents as its low-level extension
    API. It runs as the event's first callback, before any waiting process is
    resumed (the event keeps a callback list, so waiters subscribe after it).
    A public kernel hook for this (an event whose outcome is computed when it
    is processed) is described in ``docs/design.md`` under "Offload".
    """
    event._value = value
    event._ok = ok


# --------------------------------------------------------------------------- the pool


class _Poller:
    """Non-strict results waiting to be applied on one Sim, and the process applying them."""

    __slots__ = ("running", "sim", "tasks")

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.tasks: list[_Task] = []
        self.running = False


class Offloader:
    """A pool of workers that runs offloaded payloads; use it as a context manager.

    Args:
        backend: ``"processes"`` (the default: real parallelism for pure
            Python), ``"threads"`` (for payloads that release the GIL, such as
            numpy, or on free-threaded builds) or ``"inline"`` (each payload
            runs at submission, in the simulation's thread: the sequential
            reference, and what :func:`offload` uses when no pool is set).
        max_workers: Workers in the pool; ``None`` for one per CPU. Must be
            ``None`` or 1 for ``"inline"``.
        timeout: Wall-clock seconds the simulation waits at a completion slot
            for a result that is not ready (``None``: forever). A payload
            that runs past it fails its event with
            :class:`~simulacra.OffloadTimeout`. Never part of a model's
            semantics: size it far above any payload's honest running time.
        start_method: How a processes pool starts its workers: ``"spawn"``
            (the default) or ``"forkserver"``. Chosen for this pool only; the
            global multiprocessing start method is never touched.
        poll_interval: Non-strict mode: the simulated time between checks
            for results that have arrived.

    Raises:
        ConfigError: a bad argument; the message names it.

    An Offloader, like a Sim, belongs to the thread that first submits to it
    (the inline default pool, which keeps no state, excepted). Closing it
    stops its workers (killing any that are still busy) and unbinds it from
    every Sim it was the default pool of (:func:`use_pool`).
    """

    def __init__(self, backend: str = "processes", max_workers: int | None = None, *,
                 timeout: float | None = 60.0, start_method: str = "spawn",
                 poll_interval: float = 1.0) -> None:
        if backend not in OFFLOAD_BACKENDS:
            raise ConfigError(f"Offloader(backend=...): expected one of "
                              f"{', '.join(map(repr, OFFLOAD_BACKENDS))}, got {backend!r}")
        if max_workers is not None and not _is_count(max_workers):
            raise ConfigError(f"Offloader(max_workers=...): expected None or an int >= 1, "
                              f"got {max_workers!r}")
        if backend == "inline" and max_workers not in (None, 1):
            raise ConfigError(f"Offloader(max_workers=...): the inline backend has exactly one "
                              f"worker (the simulation's thread), got {max_workers!r}")
        if timeout is not None and not _positive(timeout):
            raise ConfigError(f"Offloader(timeout=...): expected None or a finite number of "
                              f"seconds > 0, got {timeout!r}")
        if start_method not in _START_METHODS:
            raise ConfigError(f"Offloader(start_method=...): expected one of "
                              f"{', '.join(map(repr, _START_METHODS))}, got {start_method!r}")
        if not _positive(poll_interval):
            raise ConfigError(f"Offloader(poll_interval=...): expected a finite number > 0, "
                              f"got {poll_interval!r}")
        self._backend_name = backend
        workers = 1 if backend == "inline" else (max_workers or os.cpu_count() or 1)
        self._max_workers = workers
        self._timeout = None if timeout is None else float(timeout)
        self._start_method = start_method
        self._poll_interval = float(poll_interval)
        self._backend: _Backend
        if backend == "inline":
            self._backend = _InlineBackend()
        elif backend == "threads":
            self._backend = _ThreadBackend(workers)
        else:
            self._backend = _ProcessBackend(workers, start_method)
        #: Strict tasks submitted and not yet applied, in submission order (a
        #: restart resubmits them in that order). The inline backend keeps none.
        self._outstanding: dict[int, _Task] = {}
        self._submitted = 0
        self._pollers: dict[int, _Poller] = {}
        self._pollers_lock = threading.Lock()
        self._owner_thread: int | None = None
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._outstanding)} in flight"
        return f"<Offloader {self._backend_name} x{self._max_workers} {state}>"

    # -- properties --------------------------------------------------------

    @property
    def backend(self) -> str:
        """``"inline"``, ``"threads"`` or ``"processes"``."""
        return self._backend_name

    @property
    def max_workers(self) -> int:
        """The number of workers (1 for inline)."""
        return self._max_workers

    @property
    def timeout(self) -> float | None:
        """Seconds the simulation waits at a slot for a late result (None: forever)."""
        return self._timeout

    @property
    def start_method(self) -> str:
        """The multiprocessing start method of a processes pool."""
        return self._start_method

    @property
    def poll_interval(self) -> float:
        """Non-strict mode: the simulated time between checks for arrived results."""
        return self._poll_interval

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> Offloader:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()

    def start(self) -> Offloader:
        """Start the workers now rather than on first use (benchmarks, latency-sensitive runs).

        Returns:
            The pool itself.
        """
        self._check_open("start()")
        if self._backend_name != "inline":
            payload = _pack(_noop, ())
            futures = [self._backend.submit(payload) for _ in range(self._max_workers)]
            wait_futures(futures, timeout=self._timeout)
        return self

    def close(self) -> None:
        """Stop the workers and unbind this pool from its Sims; idempotent.

        Payloads still running are abandoned (their workers killed), and
        their events fail with :class:`~simulacra.OffloadError` if the
        simulation reaches their slots later.
        """
        if self._closed:
            return
        self._closed = True
        busy = any(task.future is not None and not task.future.done()
                   for task in self._outstanding.values())
        with self._pollers_lock:
            busy = busy or any(not task.future.done() for poller in self._pollers.values()
                               for task in poller.tasks if task.future is not None)
        self._backend.close(kill=busy)
        _unbind_pool(self)

    # -- submission --------------------------------------------------------

    def submit(self, sim: Sim, fn: Any, *args: Any, delay: float | None = None,
               strict: bool = True) -> Event[Any]:
        """Run ``fn(*args)`` on this pool; the event to yield for its result.

        See :func:`offload`, which calls this on the Sim's default pool.
        """
        if not isinstance(sim, Sim):
            raise ConfigError(f"offload(sim, ...): expected a Sim, got {type(sim).__name__}")
        self._check_open("offload()")
        if strict is not True and strict is not False:
            raise ConfigError(f"offload(strict=...): expected True or False, got {strict!r}")
        if delay is None:
            if strict:
                raise ConfigError(
                    "offload(delay=...): strict mode needs the simulated duration of the "
                    "computation, e.g. offload(sim, fn, x, delay=0.5) (or use strict=False)"
                )
            delay = 0.0
        if not _is_finite(delay) or delay < 0:
            proc = sim.active_process
            where = f"process {proc.who!r}" if proc is not None else "host code"
            raise InvalidDelay(f"offload(delay=...): expected a finite number >= 0, got "
                               f"{delay!r} (in {where})")
        if self._backend_name != "inline":
            self._check_thread()
        name = _describe_fn(fn)
        payload = _pack(fn, args)
        if strict:
            event: Event[Any] = sim.delay(delay, _NOT_READY)
            task = _Task(name, payload, event, strict=True, earliest=sim.now + delay,
                         submitted_at=sim.now)
            callbacks = event.callbacks
            assert callbacks is not None  # noqa: S101  (a new event is not processed)
            task.callbacks = callbacks
            callbacks.append(self._make_resolver(task))
        else:
            event = sim.event()
            task = _Task(name, payload, event, strict=False, earliest=sim.now + delay,
                         submitted_at=sim.now)
        task.started = time.monotonic()
        task.future = self._submit_payload(payload)
        if self._backend_name != "inline":
            self._submitted += 1
            if strict:
                task.key = self._submitted
                self._outstanding[task.key] = task
        if not strict:
            self._add_nonstrict(sim, task)
        return event

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise OffloadError(f"{what}: this {self._backend_name} Offloader is closed")

    def _check_thread(self) -> None:
        me = threading.get_ident()
        if self._owner_thread is None:
            self._owner_thread = me
        elif self._owner_thread != me:
            raise ThreadOwnershipError(
                "an Offloader belongs to the thread that first used it, like a Sim; make one "
                "per thread (or per replication)"
            )

    def _submit_payload(self, payload: bytes) -> Future[bytes]:
        try:
            return self._backend.submit(payload)
        except BrokenProcessPool:  # a worker died between two submissions
            self._backend.restart()
            self._resubmit(exclude=None)
            return self._backend.submit(payload)

    # -- strict: resolving at the slot ---------------------------------------

    def _make_resolver(self, task: _Task) -> Any:
        def resolve(event: Event[Any]) -> None:
            self._resolve(task, event)

        return resolve

    def _resolve(self, task: _Task, event: Event[Any]) -> None:
        """The slot is being processed: give the event its outcome before anyone resumes."""
        try:
            ok, value = _unpack(self._result(task), task.name)
        except OffloadError as exc:
            ok, value = False, exc
        finally:
            self._forget(task)
        _settle(event, ok, value)
        if not ok:
            # Runs after every subscriber (a list grows while it is iterated),
            # so a failure nobody handled crashes run() in every run loop.
            callbacks = task.callbacks
            assert callbacks is not None  # noqa: S101
            callbacks.append(_raise_if_unhandled)

    def _forget(self, task: _Task) -> None:
        self._outstanding.pop(task.key, None)
        task.payload = b""

    def _result(self, task: _Task, timeout: float | None = None) -> bytes:
        """Wait for the raw outcome of *task*; isolate it on a timeout or a dead worker."""
        if self._closed:
            raise OffloadError(
                f"the pool was closed before the result of {task.name} (submitted at "
                f"t={task.submitted_at!r}) was applied"
            )
        future = task.future
        assert future is not None  # noqa: S101
        try:
            return future.result(timeout=self._timeout if timeout is None else timeout)
        except FutureTimeout:
            return self._isolate(task, "timeout")
        except (BrokenProcessPool, CancelledError):
            return self._isolate(task, "died")

    def _isolate(self, task: _Task, reason: str) -> bytes:
        """Rerun *task* alone on fresh workers: only a payload that fails alone is to blame.

        Every other outstanding payload is resubmitted afterwards, in
        submission order, so nothing is lost and the outcome of each payload
        does not depend on which others shared the pool with it (with one
        worker, a payload queued behind a hung one would otherwise time out).
        *reason* (``"timeout"`` or ``"died"``) is what happened the first time.
        """
        self._backend.restart()
        future = self._backend.submit(task.payload)
        error: OffloadError | None = None
        raw = b""
        try:
            raw = future.result(timeout=self._timeout)
        except FutureTimeout:
            error = OffloadTimeout(
                f"{task.name} (submitted at t={task.submitted_at!r}) did not finish within "
                f"timeout={self._timeout!r} s on the {self._backend_name} pool, even when run "
                "alone; its worker was abandoned"
                + (" (a thread cannot be killed: it runs on as a daemon)"
                   if self._backend_name == "threads" else " and killed")
            )
        except (BrokenProcessPool, CancelledError):
            error = OffloadError(
                f"the worker process running {task.name} (submitted at t={task.submitted_at!r}) "
                f"died, even when it ran alone (a crash, os._exit or the OOM killer; first "
                f"failure: {'a timeout' if reason == 'timeout' else 'its worker died'})"
            )
        if error is not None:
            self._backend.restart()
        self._resubmit(exclude=task)
        if error is not None:
            raise error
        return raw

    def _resubmit(self, exclude: _Task | None) -> None:
        """After a restart: resubmit, in submission order, every payload still owed a result."""
        with self._pollers_lock:
            pending = [task for poller in self._pollers.values() for task in poller.tasks]
        for task in [*self._outstanding.values(), *pending]:
            future = task.future
            if task is exclude or (future is not None and future.done()
                                   and not future.cancelled() and future.exception() is None):
                continue
            task.future = self._backend.submit(task.payload)

    # -- non-strict: applying at poll ticks ----------------------------------

    def _add_nonstrict(self, sim: Sim, task: _Task) -> None:
        with self._pollers_lock:
            poller = self._pollers.get(id(sim))
            if poller is None or poller.sim is not sim:
                poller = self._pollers[id(sim)] = _Poller(sim)
            poller.tasks.append(task)
            start = not poller.running
            poller.running = True
        if start:
            sim.spawn(self._poll, poller)

    def _poll(self, sim: Sim, poller: _Poller) -> ProcessGenerator[None]:
        """Apply arrived non-strict results at poll ticks, in submission order."""
        while True:
            now = sim.now
            with self._pollers_lock:
                tasks = list(poller.tasks)
            still: list[_Task] = []
            for task in tasks:
                future = task.future
                assert future is not None  # noqa: S101
                overdue = (self._timeout is not None
                           and time.monotonic() - task.started > self._timeout)
                if task.earliest <= now and (future.done() or overdue or self._closed):
                    self._apply_nonstrict(task)
                else:
                    still.append(task)
            with self._pollers_lock:
                poller.tasks = still + poller.tasks[len(tasks):]
                if not poller.tasks:
                    poller.running = False
                    self._pollers.pop(id(sim), None)
                    return
                remaining = list(poller.tasks)
            if sim.peek() == _INF:
                # Nothing else is scheduled: wait in wall-clock time rather than
                # spin the simulated clock through empty ticks.
                due = [task for task in remaining if task.earliest <= now]
                if not due:
                    yield sim.delay(min(task.earliest for task in remaining) - now)
                    continue
                futures = [task.future for task in due if task.future is not None]
                wait_futures(futures, timeout=self._timeout, return_when=FIRST_COMPLETED)
                yield sim.delay(0)
                continue
            yield sim.delay(self._poll_interval)

    def _apply_nonstrict(self, task: _Task) -> None:
        try:
            ok, value = _unpack(self._result(task, timeout=0.0), task.name)
        except OffloadError as exc:
            ok, value = False, exc
        task.payload = b""
        if ok:
            task.event.succeed(value)
        else:
            task.event.fail(value)


def _noop() -> None:
    """A payload that does nothing (to start workers)."""


def _is_finite(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _positive(value: object) -> bool:
    return _is_finite(value) and value > 0  # type: ignore[operator]


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


# --------------------------------------------------------------------------- default pools

#: Sim -> its default pool, keyed by id(sim) with the Sim itself kept, so an
#: id cannot be reused while bound. A binding ends with use_pool(sim, None) or
#: when the pool closes. (A Sim has no slot for it: see docs/design.md.)
_BINDINGS: dict[int, tuple[Sim, Offloader]] = {}
_BINDINGS_LOCK = threading.Lock()
#: The pool of Sims that have none: inline, stateless, shared by every thread.
_INLINE = Offloader("inline")


def use_pool(sim: Sim, pool: Offloader | None) -> None:
    """Make *pool* the default of :func:`offload` on *sim* (``None``: back to inline).

    The binding lasts until it is replaced or the pool is closed. Without
    one, ``offload`` runs payloads inline, which gives the same results.

    Raises:
        ConfigError: *sim* is not a Sim or *pool* not an Offloader.
        OffloadError: *pool* is closed.
    """
    if not isinstance(sim, Sim):
        raise ConfigError(f"use_pool(sim, ...): expected a Sim, got {type(sim).__name__}")
    if pool is not None and not isinstance(pool, Offloader):
        raise ConfigError(f"use_pool(sim, pool): expected an Offloader or None, got "
                          f"{type(pool).__name__}")
    if pool is not None:
        pool._check_open("use_pool()")
    with _BINDINGS_LOCK:
        if pool is None:
            _BINDINGS.pop(id(sim), None)
        else:
            _BINDINGS[id(sim)] = (sim, pool)


def _pool_of(sim: Sim) -> Offloader:
    entry = _BINDINGS.get(id(sim))
    if entry is not None and entry[0] is sim:
        return entry[1]
    return _INLINE


def _unbind_pool(pool: Offloader) -> None:
    with _BINDINGS_LOCK:
        for key in [key for key, (_, bound) in _BINDINGS.items() if bound is pool]:
            del _BINDINGS[key]


def offload(sim: Sim, fn: Any, *args: Any, delay: float | None = None,
            pool: Offloader | None = None, strict: bool = True) -> Event[Any]:
    """Run ``fn(*args)`` on a worker pool; return the event that carries its result.

    ``result = yield offload(sim, score, batch, delay=0.5)`` gives the same
    trace on every pool and worker count as ``yield sim.delay(0.5,
    score(batch))``: the returned event is a delay event made now, and the
    result becomes its value when the simulation reaches it (the design, and
    what it costs, is in ``docs/design.md`` under "Offload").

    Args:
        sim: The simulation.
        fn: A module-level function (or a ``functools.partial`` of one),
            pure in its arguments: it runs in another thread or process.
        *args: Its arguments; pickled at submission, so later changes to
            them are not seen.
        delay: The simulated duration of the computation. Strict mode: the
            result applies exactly at ``now + delay``, ordered like any event
            scheduled now with that delay. Non-strict mode: the least time
            before the result applies (default 0).
        pool: The :class:`Offloader` to run on; by default the one bound to
            *sim* with :func:`use_pool`, else inline.
        strict: ``False`` for non-strict mode: the result applies at the
            first poll tick after it arrives in wall-clock time. Faster when
            no delay is known, but not reproducible.

    Returns:
        An event to yield. It succeeds with ``fn(*args)``, or fails with the
        exception it raised (its ``__cause__`` carries the worker's
        traceback), with :class:`~simulacra.OffloadTimeout` if it hung, or
        with :class:`~simulacra.OffloadError` if its worker died. Its value
        is meaningless before it is processed.

    Raises:
        ConfigError: *fn* or *args* cannot be sent to a worker (a lambda, a
            closure, a bound method, something unpicklable), a strict
            offload without *delay*, or a bad argument.
        InvalidDelay: *delay* is negative, NaN or not a number.
        OffloadError: the pool is closed.
    """
    chosen = _pool_of(sim) if pool is None else pool
    if not isinstance(chosen, Offloader):
        raise ConfigError(f"offload(pool=...): expected an Offloader or None, got "
                          f"{type(chosen).__name__}")
    return chosen.submit(sim, fn, *args, delay=delay, strict=strict)
