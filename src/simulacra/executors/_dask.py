"""The Dask executor: units as futures on a ``dask.distributed`` cluster.

``dask.distributed`` is an optional dependency (``python -m pip install '.[dask]'``),
imported only when a :class:`DaskExecutor` is created.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import pickle
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, final

from simulacra._util import install_hint
from simulacra.errors import BackendUnavailable, ConfigError

from ._base import Done, Raised, call_unit, check_retries, check_workers
from ._pool import _FuturesExecutor

__all__ = ["DaskExecutor", "call_unit_packed", "import_distributed", "local_dask_client"]

U = TypeVar("U")
R = TypeVar("R")


def call_unit_packed(fn: Callable[[U], R], unit: U) -> bytes:
    """Run one unit on a Dask worker and return its outcome pickled.

    The outcome travels as bytes, so every failure of the unit (it raised, or
    its result does not pickle) is a :class:`Raised` inside them, and an
    exception that Dask sets on the future can only come from the cluster:
    a lost worker, whatever shape ``distributed`` gives it.
    """
    outcome = call_unit(fn, unit, True)
    try:
        return pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        value = outcome.value if isinstance(outcome, Done) else outcome.error
        text = (
            f"the unit's {'result' if isinstance(outcome, Done) else 'exception'} "
            f"({type(value).__module__}.{type(value).__qualname__}) cannot be pickled "
            f"to travel back from the Dask worker: {type(exc).__name__}: {exc}"
        )
        error = pickle.PicklingError(text)
        return pickle.dumps(Raised(error, text), pickle.HIGHEST_PROTOCOL)


def _submit_failed(exc: Exception) -> cf.Future[Any]:
    """A finished future whose outcome says the unit could not be sent."""
    future: cf.Future[Any] = cf.Future()
    text = f"the unit cannot be sent to a Dask worker: {type(exc).__name__}: {exc}"
    future.set_result(Raised(exc, text))
    return future


def import_distributed() -> Any:
    """The ``distributed`` module, or BackendUnavailable saying how to install it."""
    try:
        return importlib.import_module("distributed")
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend 'dask' needs dask.distributed, which cannot be imported ({exc}): "
            f"{install_hint('dask')}"
        ) from exc


def local_dask_client(distributed: Any, n_workers: int) -> tuple[Any, Any]:
    """Start a ``LocalCluster`` of *n_workers* single-threaded processes on loopback.

    Returns ``(cluster, client)``; the cluster is closed again if the client
    cannot be made.
    """
    cluster = distributed.LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        # No dashboard; the scheduler's HTTP server (health, metrics) still
        # starts, on a free port rather than 8787, which another cluster may hold.
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )
    try:
        client = distributed.Client(cluster, set_as_default=False)
    except BaseException:
        cluster.close()
        raise
    return cluster, client


def _is_address(value: object) -> bool:
    return value is None or (isinstance(value, str) and bool(value))


@final
class DaskExecutor(_FuturesExecutor):
    """Runs units as futures on a ``dask.distributed`` cluster.

    Either connects to a running scheduler (*address*), or starts a
    ``LocalCluster`` of *max_workers* worker processes (one thread each, on the
    loopback interface, no dashboard) and closes it again in :meth:`close`.

    Units are submitted through the client's ``concurrent.futures`` adapter
    with ``pure=False``, so a re-run is never answered from a cached key. When
    a worker dies, Dask itself re-runs the tasks it held (up to the
    scheduler's ``allowed-failures``); a task that still fails is then retried
    here, alone, up to *retries* times. Each unit's outcome comes back pickled
    inside the task's result (:func:`call_unit_packed`), so any exception Dask
    sets on a future is the cluster's, not the unit's: ``KilledWorker``, a
    worker that left, or a failure in a shape ``distributed`` gives no name
    to. All of them count as a lost worker; none is charged to the model.

    Every worker must be able to import ``fn`` and the modules a unit names.
    A ``LocalCluster`` started here inherits ``sys.path``; a remote cluster
    needs the code installed on its workers.

    Args:
        max_workers: Workers of the ``LocalCluster`` to start (``None``: one per
            CPU). With *address* it does not size the cluster: twice this many
            units are kept in flight (``None``: the workers connected now).
        address: A scheduler address such as ``"tcp://10.0.0.5:8786"``;
            ``None`` starts a ``LocalCluster``.
        retries: Re-runs allowed for a unit that still lost its worker after
            Dask's own retries.

    Raises:
        BackendUnavailable: ``dask.distributed`` is not installed, or the
            scheduler at *address* cannot be reached.
        ConfigError: An argument is out of range.
    """

    name: ClassVar[str] = "dask"

    def __init__(
        self, max_workers: int | None = None, *, address: str | None = None, retries: int = 3
    ) -> None:
        if not _is_address(address):
            raise ConfigError(
                f"address must be a Dask scheduler address such as 'tcp://host:8786' or None, "
                f"got {type(address).__name__} {address!r}"
            )
        retries = check_retries(retries)
        distributed = import_distributed()
        self._distributed = distributed
        self._cluster: Any = None
        if address is None:
            workers = check_workers(max_workers)
            self._cluster, self._client = local_dask_client(distributed, workers)
        else:
            try:
                self._client = distributed.Client(address, set_as_default=False, timeout=30)
            except (OSError, TimeoutError) as exc:
                raise BackendUnavailable(
                    f"cannot reach the Dask scheduler at address={address!r}: {exc}"
                ) from exc
            if max_workers is None:
                connected = len(self._client.scheduler_info().get("workers", {}))
                workers = max(1, connected)
            else:
                workers = check_workers(max_workers)
        self._address = address
        super().__init__(workers, retries)

    @property
    def address(self) -> str:
        """The address of the scheduler the units go to."""
        return str(self._client.scheduler.address)

    def _make_pool(self) -> cf.Executor:
        pool: cf.Executor = self._client.get_executor(pure=False)
        return pool

    def _window(self) -> int:
        # Each submission is a round trip to the scheduler: keep more in flight.
        return 2 * self._workers

    def _call(self, pool: cf.Executor, fn: Callable[[U], R], unit: U) -> cf.Future[Any]:
        try:
            return pool.submit(call_unit_packed, fn, unit)
        except Exception as exc:  # Dask serialises at submit: the unit does not pickle
            return _submit_failed(exc)

    def _outcome(self, result: Any) -> Done[Any] | Raised:
        if isinstance(result, Raised):  # from _submit_failed
            return result
        try:
            outcome: Done[Any] | Raised = pickle.loads(result)  # noqa: S301 (our worker's bytes)
        except Exception as exc:  # e.g. a class the worker has and this process has not
            text = f"the unit's outcome cannot be unpickled here: {type(exc).__name__}: {exc}"
            return Raised(exc, text)
        return outcome

    def _is_lost(self, exc: BaseException) -> bool:
        # Unit failures travel inside the result (call_unit_packed): whatever
        # Dask raised, the cluster failed to run the unit.
        return True

    def close(self) -> None:
        """Cancel what is left, close the client and any ``LocalCluster`` started here."""
        if self._closed:
            return
        self._closed = True
        pool, self._pool = self._pool, None
        try:
            if pool is not None:
                pool.shutdown(wait=False)
        finally:
            try:
                self._client.close()
            finally:
                if self._cluster is not None:
                    self._cluster.close()

    def __repr__(self) -> str:
        where = "LocalCluster" if self._address is None else repr(self._address)
        return f"DaskExecutor({where}, workers={self._workers}, retries={self._retries})"
