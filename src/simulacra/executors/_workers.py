"""Worker processes started once and lent to one run at a time: :class:`WorkerPool`.

A pool starts its worker processes when it is made and keeps them until it is
closed, so that several runs (replications with ``Experiment.run``, sharded
runs with ``ShardedSim``) pay the start-up once. Each worker is one process
with one duplex pipe to the parent and answers one request at a time, so the
parent always knows which unit a worker was running when it died: blame for a
crash is exact, and only that worker is replaced.

Where the platform has it (Linux, macOS), workers fork from multiprocessing's
*forkserver*, which imports the kernel and this module once, before it forks
any worker: a worker then starts in milliseconds instead of an interpreter
start-up plus the imports. Elsewhere (Windows), workers are spawned. The start
method is chosen per pool (``multiprocessing.get_context``), never globally;
``fork`` is refused (see ``START_METHODS``).

The protocol is a request ``(op, payload)`` answered by :class:`Done` or
:class:`Raised`:

* ``("unit", (fn, unit))``: ``fn(unit)`` (the executors' trampoline);
* ``("open", factory)``: the worker keeps ``factory()`` as its *session*, a
  callable that holds state across requests (a shard of a sharded run);
* ``("session", request)``: ``session(request)``;
* ``("close", None)``: the session is dropped;
* ``("stop", None)``: the worker exits (no answer).

A run holds the pool through a :class:`PoolLease`, one run at a time. When the
lease is released, every worker is left alive and idle with no session: one
that died, or still runs a request nobody will read, is replaced.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import pickle
import signal
import threading
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any, final

from simulacra.errors import (
    BackendUnavailable,
    ConfigError,
    OversubscribedWarning,
    PoolBusy,
    PoolClosed,
    RemoteError,
)

from ._base import Done, Lost, Raised, available_cpus, call_unit, check_workers

__all__ = [
    "PRELOAD",
    "START_METHODS",
    "PoolLease",
    "WorkerPool",
    "check_start_method",
    "default_start_method",
    "serve",
    "warn_if_oversubscribed",
]

#: Start methods a process pool may use. "fork" is refused: it copies a parent
#: that runs threads (the pool's own manager thread, a progress bar, Dask), which
#: can deadlock the child, and it lets a worker see state the model never sent.
START_METHODS = ("spawn", "forkserver")

#: What the forkserver imports once, before it forks any worker: the kernel, the
#: random streams and this module (the worker loop). Whatever else a unit needs
#: (the model, the parallel tier's worker module) each worker imports once in its
#: life, which a pool that is reused pays once.
PRELOAD = ("simulacra.core", "simulacra.rng", "simulacra.executors._workers")

Reply = Done[Any] | Raised


def default_start_method() -> str:
    """``"forkserver"`` where the platform has it (Linux, macOS), else ``"spawn"``."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def check_start_method(value: object) -> str:
    """Return *value* as a start method (``None`` -> :func:`default_start_method`).

    Raises:
        ConfigError: *value* is not one of :data:`START_METHODS`.
        BackendUnavailable: This platform lacks it.
    """
    if value is None:
        return default_start_method()
    if value not in START_METHODS:
        raise ConfigError(
            f"start_method must be one of {', '.join(map(repr, START_METHODS))} or None, got "
            f"{value!r} ('fork' copies a parent that runs threads and can deadlock)"
        )
    method = str(value)
    if method not in multiprocessing.get_all_start_methods():
        raise BackendUnavailable(
            f"start_method {method!r} is not available on this platform; use 'spawn'"
        )
    return method


def warn_if_oversubscribed(workers: int, field: str = "max_workers") -> None:
    """Warn (:class:`~simulacra.errors.OversubscribedWarning`) when *workers* exceeds the CPUs."""
    cpus = available_cpus()
    if workers > cpus:
        warnings.warn(
            f"{field}={workers} is more than the {cpus} CPU{'s' if cpus != 1 else ''} this "
            f"process may use: the workers take turns on {cpus}, so the run is no faster and "
            f"each extra worker costs its start-up and memory; {field}=None means one per CPU",
            OversubscribedWarning,
            stacklevel=3,
        )


def _start_forkserver_deaf() -> None:
    """Start multiprocessing's forkserver (if it is not running) with SIGINT ignored.

    The forkserver is in the terminal's process group, so a Ctrl-C reaches it
    too; it ignores SIGINT only once its preload is imported, and a Ctrl-C that
    landed in the preload printed its KeyboardInterrupt traceback under the
    run's one line. An ignored SIGINT stays ignored across its exec, so it is
    ignored here, in the main thread, for the moment of the spawn only (a few
    milliseconds, in which a Ctrl-C to this process is lost too), and the
    forkserver starts deaf to it.
    """
    from multiprocessing import forkserver  # noqa: PLC0415  (not on Windows)

    server = getattr(forkserver, "_forkserver", None)
    if (server is None or getattr(server, "_forkserver_pid", None) is not None
            or threading.current_thread() is not threading.main_thread()):
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        server.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def _use_preloaded_forkserver(context: Any, preload: Sequence[str]) -> None:
    """Ask multiprocessing's forkserver to import *preload* before it forks anything.

    There is one forkserver per parent process, and its preload list takes
    effect when it starts: a server already running keeps what it has (the
    workers then import what they need themselves, as spawned ones do). A list
    the program set itself is kept, and ours is added to it.
    """
    from multiprocessing import forkserver  # noqa: PLC0415  (not on Windows)

    server = getattr(forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", None) is not None:
        return
    current = [str(m) for m in getattr(server, "_preload_modules", ())]
    wanted = current + [m for m in preload if m not in current]
    if wanted != current:
        context.set_forkserver_preload(wanted)


# -- the worker side ---------------------------------------------------------------


class _Worker:
    """One worker process's state between requests: at most one session."""

    def __init__(self) -> None:
        self.session: Callable[[Any], Any] | None = None

    def answer(self, op: str, payload: Any) -> Reply:
        if op == "unit":
            fn, unit = payload
            return call_unit(fn, unit, True)
        try:
            if op == "open":
                self.session = payload()
                return Done(None)
            if op == "session":
                if self.session is None:
                    raise RemoteError("a session request reached a worker with no session")
                return Done(self.session(payload))
            if op == "close":
                self.session = None
                return Done(None)
            raise RemoteError(f"unknown request {op!r}")
        except Exception as exc:
            return Raised(exc, traceback.format_exc())


def serve(conn: multiprocessing.connection.Connection) -> None:
    """The loop of a pool worker: answer requests until told to stop or the parent is gone."""
    # Ctrl-C goes to the whole process group: the parent handles it and stops or
    # replaces the workers; a worker must not die of it in the middle of a unit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = _Worker()
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent is gone
        try:
            op, payload = pickle.loads(data)  # noqa: S301  (from our own parent)
        except Exception as exc:  # it names something this worker cannot import
            reply: Reply = Raised(_portable(exc), traceback.format_exc())
        else:
            if op == "stop":
                return
            reply = worker.answer(op, payload)
        try:
            out = pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a result (or an exception) that does not pickle
            out = pickle.dumps(Raised(RemoteError(
                f"the worker's answer could not be pickled back ({type(exc).__name__}: {exc}); "
                "results must be plain data"), ""))
        try:
            conn.send_bytes(out)
        except OSError:
            return


def _portable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))  # noqa: S301  (our own bytes, this process)
    except Exception:
        return RemoteError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    return exc


# -- the parent side ---------------------------------------------------------------


def _death(process: Any) -> str:
    """How a worker process ended, for a message."""
    process.join(timeout=1.0)
    code = process.exitcode
    if code is None:
        how = "stopped answering"
    elif code < 0:
        try:
            how = f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return f"the worker process (pid {process.pid}) {how}"


def _stop_workers(processes: list[Any], conns: list[Any]) -> None:
    """Stop every worker: ask, wait a little, then terminate (the pool's finalizer)."""
    for conn, process in zip(conns, processes, strict=True):
        if process is not None and process.is_alive():
            with contextlib.suppress(OSError):
                conn.send_bytes(pickle.dumps(("stop", None)))
    for process in processes:
        if process is not None:
            process.join(timeout=2.0)
    for process in processes:
        if process is not None and process.is_alive():
            process.kill()
            process.join(timeout=2.0)
    for conn in conns:
        if conn is not None:
            conn.close()


@final
class WorkerPool:
    """Worker processes started once and reused by several runs, one run at a time.

    Give it to :meth:`Experiment.run <simulacra.Experiment.run>` (``pool=``),
    to :class:`~simulacra.ShardedSim` (``pool=``) or to
    :class:`ProcessExecutor`; each run borrows every worker and gives them
    back when it ends, so the next run starts with no process start-up at all.
    Results are those of the sequential reference, as on any backend::

        with WorkerPool(max_workers=4) as pool:
            first = study.run(20, pool=pool)
            second = other_study.run(20, pool=pool)     # the same four processes
            with ShardedSim(build, shards=4, pool=pool) as sim:
                sim.run(until=100)

    The workers start when the pool is made. Where the platform has it, they
    fork from multiprocessing's forkserver with the kernel already imported
    (milliseconds each); elsewhere they are spawned. Each worker imports the
    model (and what it needs of simulacra) once in its life.

    Args:
        max_workers: Worker processes; ``None`` means one per CPU. More than the
            CPUs warns (:class:`~simulacra.errors.OversubscribedWarning`).
        start_method: ``"forkserver"`` or ``"spawn"``; ``None`` picks
            forkserver where the platform has it.
        preload: More modules for the forkserver to import before it forks
            the workers (a model's module, say). The forkserver is one per
            program: its imports are fixed when it first starts.
        oversubscribe: Allow more workers than CPUs without the warning (for
            a sharded run whose shards outnumber the CPUs on purpose).

    Raises:
        ConfigError: An argument is out of range.
        BackendUnavailable: *start_method* is not available here.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        start_method: str | None = None,
        preload: Sequence[str] = (),
        oversubscribe: bool = False,
    ) -> None:
        size = check_workers(max_workers)
        if not oversubscribe:
            warn_if_oversubscribed(size)
        self._start_method = check_start_method(start_method)
        if isinstance(preload, str) or not all(isinstance(m, str) for m in preload):
            raise ConfigError(f"preload must be a sequence of module names, got {preload!r}")
        self._context: Any = multiprocessing.get_context(self._start_method)
        if self._start_method == "forkserver":
            _use_preloaded_forkserver(self._context, (*PRELOAD, *preload))
        self._lock = threading.Lock()
        #: Who holds the pool now (a description for PoolBusy), or None.
        self._holder: str | None = None
        #: The lease now held, or None.
        self._lease: PoolLease | None = None
        self._closed = False
        #: Slot i's process and the parent's end of its pipe; a slot's worker is
        #: replaced in place, so these lists are what the finalizer stops.
        self._processes: list[Any] = [None] * size
        self._conns: list[Any] = [None] * size
        self._finalizer = multiprocessing.util.Finalize(
            self, _stop_workers, args=(self._processes, self._conns), exitpriority=10,
        )
        try:
            for slot in range(size):
                self._start(slot)
        except BaseException:
            self.close()
            raise

    def _start(self, slot: int) -> None:
        if self._context.get_start_method() == "forkserver":
            _start_forkserver_deaf()
        parent, child = self._context.Pipe(duplex=True)
        process = self._context.Process(target=serve, args=(child,),
                                        name=f"simulacra-worker-{slot}")
        process.start()
        child.close()
        self._processes[slot], self._conns[slot] = process, parent

    def _retire(self, slot: int) -> None:
        """Stop slot *slot*'s worker (killed if it still runs); the slot stays empty."""
        process, conn = self._processes[slot], self._conns[slot]
        self._processes[slot] = self._conns[slot] = None
        if process is None:
            return
        if process.is_alive():
            process.kill()
        process.join(timeout=5.0)
        conn.close()

    def _restart(self, slot: int) -> None:
        """Replace slot *slot*'s worker (killed if it still runs) with a fresh one."""
        self._retire(slot)
        self._start(slot)

    def _fill(self) -> None:
        """Start a worker in every empty slot (left by a run that stopped early)."""
        for slot, process in enumerate(self._processes):
            if process is None:
                self._start(slot)

    @property
    def workers(self) -> int:
        """How many worker processes the pool holds."""
        return len(self._processes)

    @property
    def start_method(self) -> str:
        """``"forkserver"`` or ``"spawn"``."""
        return self._start_method

    @property
    def pids(self) -> tuple[int, ...]:
        """The process id of each worker, in slot order (a replaced worker has a new one).

        A worker that a run stopped early (it was busy with a unit nobody would
        read) is replaced when the pool is next lent, and is left out until then.
        """
        return tuple(int(p.pid) for p in self._processes if p is not None)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def lease(self, holder: str) -> PoolLease:
        """Borrow every worker for one run; give them back with :meth:`PoolLease.release`.

        Args:
            holder: Who borrows the pool, as a :class:`~simulacra.errors.PoolBusy`
                error would name it (``"Experiment.run(...)"``).

        Raises:
            PoolClosed: The pool was closed.
            PoolBusy: Another run holds it.
        """
        with self._lock:
            if self._closed:
                raise PoolClosed(
                    "this WorkerPool is closed: its workers have stopped; make a new "
                    "WorkerPool (or use it in a `with` block around every run that shares it)"
                )
            if self._holder is not None:
                raise PoolBusy(
                    f"this WorkerPool is held by {self._holder}: one pool serves one run at a "
                    "time; finish (or close) that run first, or give this one another pool"
                )
            self._holder = holder
            try:
                self._fill()
            except BaseException:
                self._holder = None
                raise
            self._lease = lease = PoolLease(self)
            return lease

    def _give_back(self, lease: PoolLease) -> None:
        with self._lock:
            if self._lease is lease:
                self._lease = None
                self._holder = None

    def close(self) -> None:
        """Stop the workers. Harmless twice; a run still holding the pool loses them."""
        with self._lock:
            self._closed = True
        self._finalizer()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"held by {self._holder}" if self._holder else "idle"
        return (f"WorkerPool(max_workers={self.workers}, start_method={self._start_method!r}; "
                f"{state})")


@final
class PoolLease:
    """One run's hold on a :class:`WorkerPool`: send requests to its workers, read answers.

    Made by :meth:`WorkerPool.lease`. A worker answers one request at a time,
    in order. :meth:`release` gives the workers back, each alive, idle and
    without a session; it is also what leaving a ``with`` block does.
    """

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool
        self._released = False
        #: Requests sent to each slot and not yet answered.
        self._outstanding = [0] * pool.workers
        #: Slots whose worker holds a session.
        self._sessions: set[int] = set()

    @property
    def workers(self) -> int:
        """How many workers the lease holds."""
        return self._pool.workers

    @property
    def pids(self) -> tuple[int, ...]:
        """Each worker's process id."""
        return self._pool.pids

    def _check(self) -> None:
        if self._pool.closed:
            raise PoolClosed("the WorkerPool was closed while a run held it; make a new one")
        if self._released:
            raise PoolClosed("this lease of the WorkerPool was released; lease it again")

    def send(self, slot: int, op: str, payload: Any) -> bool:
        """Send one request to worker *slot*; False if that worker is dead.

        Raises:
            Exception: The request does not pickle (whatever pickle raised).
            PoolClosed: The lease was released or the pool closed.
        """
        self._check()
        data = pickle.dumps((op, payload), pickle.HIGHEST_PROTOCOL)
        try:
            self._pool._conns[slot].send_bytes(data)
        except OSError:
            return False
        self._outstanding[slot] += 1
        if op == "open":
            self._sessions.add(slot)
        elif op == "close":
            self._sessions.discard(slot)
        return True

    def wait(self, slots: Sequence[int], timeout: float | None = None) -> list[int]:
        """The slots among *slots* with an answer to read or a dead worker (sorted).

        Blocks until there is one, or for *timeout* seconds (then ``[]``).
        """
        self._check()
        by_object: dict[Any, int] = {}
        for slot in slots:
            by_object[self._pool._conns[slot]] = slot
            by_object[self._pool._processes[slot].sentinel] = slot
        ready = multiprocessing.connection.wait(list(by_object), timeout=timeout)
        return sorted({by_object[obj] for obj in ready})

    def receive(self, slot: int) -> Done[Any] | Raised | Lost:
        """Read worker *slot*'s next answer; :class:`Lost` (with how) if it died instead.

        Call it for a slot that :meth:`wait` returned: it blocks until the
        worker answers or dies.
        """
        self._check()
        conn, process = self._pool._conns[slot], self._pool._processes[slot]
        while True:
            try:
                if conn.poll(0.05):
                    data = conn.recv_bytes()
                    break
            except (EOFError, OSError):
                return self._lost(slot)
            if not process.is_alive() and not conn.poll(0):
                return self._lost(slot)
        self._outstanding[slot] -= 1
        try:
            reply: Done[Any] | Raised = pickle.loads(data)  # noqa: S301  (our own worker)
        except Exception as exc:  # e.g. a class the worker had and this process lacks
            return Raised(RemoteError(
                f"an answer from the worker could not be unpickled here "
                f"({type(exc).__name__}: {exc})"), "")
        return reply

    def _lost(self, slot: int) -> Lost:
        self._outstanding[slot] = 0
        self._sessions.discard(slot)
        return Lost(1, _death(self._pool._processes[slot]))

    def alive(self, slot: int) -> bool:
        """Whether worker *slot* is running."""
        return bool(self._pool._processes[slot].is_alive())

    def pid(self, slot: int) -> int:
        """Worker *slot*'s process id."""
        return int(self._pool._processes[slot].pid)

    def restart(self, slot: int) -> None:
        """Replace worker *slot* with a fresh one (killing it if it still runs)."""
        self._check()
        self._pool._restart(slot)
        self._outstanding[slot] = 0
        self._sessions.discard(slot)

    def release(self) -> None:
        """Give the workers back: each alive, idle, without a session. Harmless twice.

        A worker still running a request nobody will read (a run stopped
        early, a timeout) is replaced, since its late answer would reach the
        next run; so is a dead one. Sessions are closed.
        """
        if self._released:
            return
        try:
            if not self._pool.closed:
                self._reset()
        finally:
            self._released = True
            self._pool._give_back(self)

    def _reset(self) -> None:
        # A worker busy with a request nobody will read, or a dead one, is retired
        # now and replaced when the pool is next lent (not at all if it is closed
        # first, as a pool that a run made for itself is).
        for slot in range(self.workers):
            if self._outstanding[slot] or not self.alive(slot):
                self._pool._retire(slot)
                self._outstanding[slot] = 0
                self._sessions.discard(slot)
        closing = [slot for slot in sorted(self._sessions) if self.send(slot, "close", None)]
        for slot in closing:
            if not self.wait([slot], timeout=5.0) or isinstance(self.receive(slot), Lost):
                self._pool._retire(slot)
        self._sessions.clear()

    def __enter__(self) -> PoolLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
