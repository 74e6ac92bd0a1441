"""DaskBackend in the conformance suite: 1, 2 and 4 workers (and 3 with hash partitioning).

All of them connect to one ``LocalCluster`` of four worker processes, started
on first use and closed when the interpreter exits: cluster start-ups are the
slow part. Each backend holds its partitions on the first *n_workers* workers
by address; ``DaskBackend`` without an address (its own cluster) is tested in
``tests/distributed/test_dask_backend.py``.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Any

from simulacra import ExecutionBackend

try:
    import distributed
except ImportError:  # the dask extra is not installed: no Dask rows in the suite
    distributed = None

_CLUSTER: list[Any] = []


def shared_address() -> str:
    """The scheduler address of this module's LocalCluster, started on first call."""
    if not _CLUSTER:
        cluster = distributed.LocalCluster(
            n_workers=4, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        )
        _CLUSTER.append(cluster)
        atexit.register(cluster.close)
    return str(_CLUSTER[0].scheduler_address)


def _dask(n_workers: int, partition: str = "round_robin") -> Callable[[], ExecutionBackend]:
    def factory() -> ExecutionBackend:
        from simulacra import DaskBackend

        return DaskBackend(shared_address(), n_workers=n_workers, partition=partition)

    return factory


BACKENDS: list[tuple[str, Callable[[], ExecutionBackend]]] = [
    ("dask-1", _dask(1)),
    ("dask-2", _dask(2)),
    ("dask-4", _dask(4)),
    ("dask-3-hash", _dask(3, "hash")),
] if distributed is not None else []
