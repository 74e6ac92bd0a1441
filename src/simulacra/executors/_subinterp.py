"""A sub-interpreter pool for Python 3.13, built on its private ``_interpreters`` module.

Python 3.14 ships ``concurrent.futures.InterpreterPoolExecutor``. Python 3.13
has the machinery underneath it -- ``_interpreters`` (create an isolated
interpreter with its own GIL, run code in it) and ``_interpqueues`` (queues
that carry bytes between interpreters) -- but no pool. This module is that
pool, and nothing more: a ``concurrent.futures.Executor`` with one thread per
worker, each thread owning one isolated interpreter for its whole life.

A unit crosses into its interpreter as data, exactly as it would cross into a
worker process: ``pickle.dumps((fn, args, kwargs))`` is bound as bytes in the
interpreter's ``__main__``, the interpreter unpickles it (importing ``fn``'s
module by name), runs it, and puts ``pickle.dumps(("ok", result))`` or
``("err", exception)`` on the worker's queue. Nothing but bytes is shared.

The private modules are version-specific; :func:`available` says whether this
Python has the exact API used here, and the executor is only offered when it
does. Extension modules that do not support sub-interpreters (for example
those built with PyO3, such as pydantic-core) cannot be imported inside a
unit; such a unit fails with the import error, named.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import pickle
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

from simulacra.errors import BackendError, BackendUnavailable

__all__ = ["SubInterpreterPool", "available"]

#: Run once in a new sub-interpreter with ``_path`` (the parent's ``sys.path``,
#: one str per line) bound: units import their function by name, as a spawned
#: worker process does after multiprocessing copies the parent's path.
_SETUP = """
import sys as _s
_s.path[:] = _path.split("\\n")
del _s, _path
"""

#: Run inside the sub-interpreter with ``_unit`` (bytes) and ``_qid`` (int) bound.
_RUN_UNIT = """
import pickle as _p, _interpqueues as _q
_fn = _args = _kwargs = None
try:
    _fn, _args, _kwargs = _p.loads(_unit)
    _out = _p.dumps(("ok", _fn(*_args, **_kwargs)), 5)
except BaseException as _exc:
    try:
        _out = _p.dumps(("err", _exc), 5)
    except BaseException:
        _out = _p.dumps(("err", RuntimeError(f"{type(_exc).__name__}: {_exc}")), 5)
_q.put(_qid, _out, 0, 1)
del _fn, _args, _kwargs, _out, _unit
"""


def _modules() -> tuple[Any, Any]:
    interpreters = importlib.import_module("_interpreters")
    queues = importlib.import_module("_interpqueues")
    return interpreters, queues


def available() -> str | None:
    """None when this Python can run :class:`SubInterpreterPool`, else why not."""
    version: tuple[int, ...] = tuple(sys.version_info[:2])
    if version != (3, 13):
        return f"the private sub-interpreter API used here is Python 3.13's; this is {_version()}"
    try:
        interpreters, queues = _modules()
    except ImportError as exc:
        return f"this Python 3.13 build has no {exc.name} module"
    needed = [(interpreters, "create"), (interpreters, "exec"), (interpreters, "new_config"),
              (interpreters, "destroy"), (queues, "create"), (queues, "get"),
              (queues, "destroy")]
    missing = [f"{module.__name__}.{name}" for module, name in needed
               if not hasattr(module, name)]
    if missing:
        return f"this Python 3.13 build lacks {', '.join(missing)}"
    return None


def _version() -> str:
    return "Python " + ".".join(map(str, sys.version_info[:3]))


class _Worker(threading.Thread):
    """One thread, one isolated interpreter, one result queue."""

    def __init__(self, pool: SubInterpreterPool, index: int) -> None:
        super().__init__(name=f"simulacra-subinterp-{index}", daemon=True)
        self._pool = pool

    def run(self) -> None:
        interpreters, queues = _modules()
        interp = interpreters.create(interpreters.new_config("isolated"))
        qid = queues.create(0, 0, 1)
        try:
            failure = interpreters.exec(interp, _SETUP, shared={"_path": "\n".join(sys.path)})
            broken = None if failure is None else BackendError(
                f"sub-interpreter set-up failed: {getattr(failure, 'formatted', failure)}")
            while True:
                item = self._pool._work.get()
                if item is None:
                    return
                future, fn, args, kwargs = item
                if not future.set_running_or_notify_cancel():
                    continue
                if broken is not None:  # fail every unit rather than leave it hanging
                    future.set_exception(broken)
                    continue
                try:
                    unit = pickle.dumps((fn, args, kwargs), 5)
                    failure = interpreters.exec(interp, _RUN_UNIT,
                                                shared={"_unit": unit, "_qid": qid})
                    if failure is not None:
                        raise BackendError(
                            f"sub-interpreter failed to run {_name(fn)}: "
                            f"{getattr(failure, 'formatted', failure)}"
                        )
                    out, _, _ = queues.get(qid)
                    status, value = pickle.loads(out)  # noqa: S301  (our own bytes)
                except BaseException as exc:
                    future.set_exception(exc)
                    continue
                if status == "ok":
                    future.set_result(value)
                else:
                    future.set_exception(value)
        finally:
            queues.destroy(qid)
            interpreters.destroy(interp)


def _name(fn: object) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


class SubInterpreterPool(cf.Executor):
    """A ``concurrent.futures`` executor over isolated sub-interpreters (Python 3.13).

    Args:
        max_workers: Interpreters (and threads) in the pool, at least 1.

    Raises:
        BackendUnavailable: This Python lacks the API (see :func:`available`).
    """

    def __init__(self, max_workers: int) -> None:
        why = available()
        if why is not None:
            raise BackendUnavailable(f"sub-interpreter pool: {why}")
        self._work: queue.SimpleQueue[tuple[cf.Future[Any], Callable[..., Any],
                                            tuple[Any, ...], dict[str, Any]] | None]
        self._work = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._shutdown = False
        self._workers = [_Worker(self, index) for index in range(max_workers)]
        for worker in self._workers:
            worker.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        """Schedule ``fn(*args, **kwargs)`` in a sub-interpreter."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: cf.Future[Any] = cf.Future()
            self._work.put((future, fn, args, kwargs))
            return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers (after the queued units, unless *cancel_futures*)."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._workers:
                self._work.put(None)
        if wait:
            for worker in self._workers:
                worker.join()
