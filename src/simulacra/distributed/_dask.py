"""DaskBackend: agent partitions held on the workers of a ``dask.distributed`` cluster.

Design. Each worker that takes part in a run holds one partition of the
agents -- a :class:`~simulacra.agents.Population` -- for the whole run, in a
registry of its worker process keyed by (worker address, backend token)
(see ``_dask_worker``). The backend drives it with ordinary Dask tasks
pinned to that worker (``workers=[address]``, ``allow_other_workers=False``,
``pure=False``); each task carries a list of commands and returns one reply,
exactly like the pipes of :class:`~simulacra.backends.ProcessPoolBackend`::

    start   [("start", specs, seed, world, ids)]     -> builds the partition
    phase   [("deliver", batch), ("phase", 3, phase), ("exec", 3, step, index)]
                                                     -> delivers, runs, returns messages
    end     [("snapshot",)]                          -> agent states

So a phase costs one task per worker, and only phase numbers, step numbers
and message batches travel; agents are built on their worker once per run.

Why tasks and a registry rather than Dask actors: an actor handle finds its
client through Dask's process-wide default client (``get_client()``), which a
library must not take over (this backend's client is made with
``set_as_default=False``, and several backends may talk to several clusters
in one process); and an actor call whose worker died waits on the actor's
own future, which a worker restriction keeps pending for ever. Pinned tasks
use only Dask's public task API and fail in ways the backend can see.

Failures. The backend waits on each reply in slices of :data:`_POLL_S`
seconds and, between slices, checks that every worker it waits on is still
a member of the cluster: a worker that was killed (and perhaps restarted by
its nanny, at a new address, without the partition) surfaces as
:class:`~simulacra.WorkerLost` within about a second, never as a hang. A
worker that is restarted at the *same* address is caught by its reply: its
registry no longer holds the partition.

Agent state, a payload or initial state that copies but does not pickle (an
instance of a local class) raises :class:`~simulacra.errors.UncopyableState`
naming the agent, the attribute, argument or message, the phase and the step,
as :class:`~simulacra.backends.ProcessPoolBackend` does: a reply that does
not pickle is reported by its worker, commands that do not pickle before any
is sent. The cluster and the backend stay usable.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import itertools
import pickle
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final, NoReturn, final

from simulacra._util import plural
from simulacra.agents import AgentId, AgentSpec, Message, Phase, freeze_world, sorted_ids
from simulacra.backends import (
    PARTITIONS,
    AgentSnapshot,
    BackendBase,
    error_rank,
    partition_ids,
    plain_world,
    unpack_error,
    unpicklable_commands,
)
from simulacra.errors import (
    BackendUnavailable,
    ConfigError,
    KernelBug,
    WorkerLost,
)
from simulacra.executors import available_cpus, import_distributed, local_dask_client
from simulacra.rng import SeedTree

from ._dask_worker import run_commands

__all__ = ["DaskBackend"]

#: Messages travel as plain tuples; rebuilt, C-level, on arrival.
_as_message: Final = functools.partial(tuple.__new__, Message)
_PROTOCOL: Final = 5
#: Seconds between membership checks while a reply is awaited.
_POLL_S: Final = 0.5
#: Seconds to wait for a scheduler to answer, or for the workers a run needs to join.
_CONNECT_S: Final = 30.0
#: Seconds given to dropping partitions and closing the client and cluster.
_CLOSE_S: Final = 10.0


# --------------------------------------------------------------------------- errors


# --------------------------------------------------------------------------- the backend


def _set(event: threading.Event, _future: object) -> None:
    event.set()


@final
class DaskBackend(BackendBase):
    """Runs agents on the workers of a ``dask.distributed`` cluster, each owning a partition.

    Agents are assigned to workers deterministically (*partition*, never
    Python's ``hash()``), built on their worker from
    :class:`~simulacra.AgentSpec` data at the start of a run and kept there
    for the whole run; per phase only the phase number, the step and message
    batches travel. Results are identical to :class:`~simulacra.LocalBackend`
    for every worker count.

    With no *scheduler_address* the backend starts its own ``LocalCluster``
    (worker processes with one thread each, on 127.0.0.1, no dashboard) when
    it is first started, and closes it in :meth:`close`. With an address it
    connects a client to that scheduler and leaves the cluster running. The
    scheduler and the workers must be able to import simulacra and the
    model's agent classes and actions (a ``LocalCluster`` started here
    inherits ``sys.path``).

    A worker that dies during a run -- its process killed, or removed from
    the cluster -- surfaces as :class:`~simulacra.WorkerLost` within about a
    second; its agents are gone, so the run cannot go on. The next
    :meth:`start` uses the workers the cluster has then (a ``LocalCluster``'s
    nanny restarts a killed worker).

    Args:
        scheduler_address: A scheduler such as ``"tcp://10.0.0.5:8786"``, or
            ``None`` to start a ``LocalCluster``.
        n_workers: Workers that hold partitions: for a ``LocalCluster`` the
            workers it starts (``None``: one per available CPU); with an
            address the first *n_workers* by address, waiting up to
            *connect_timeout* for that many to join (``None``: every worker
            connected at start). Never more than there are agents.
        partition: ``"round_robin"`` over sorted ids (the default) or ``"hash"``
            (SHA-256 of the id); see :func:`~simulacra.backends.partition_ids`.
        partition_strategy: The same option under the name seed 001 gives it.
        connect_timeout: Seconds to wait for the scheduler to answer, and for
            the workers a run needs to join (a Python-only option).

    Raises:
        ConfigError: An argument is out of range or unknown.
        BackendUnavailable: ``dask.distributed`` is not installed. (From
            :meth:`start`: the scheduler cannot be reached, or too few
            workers join in time.)
    """

    name = "dask"

    def __init__(self, scheduler_address: str | None = None, n_workers: int | None = None,
                 partition: str = "round_robin", *, connect_timeout: float = _CONNECT_S,
                 partition_strategy: str | None = None) -> None:
        if partition_strategy is not None:  # seed 001's name for the same option
            if partition not in ("round_robin", partition_strategy):
                raise ConfigError(
                    f"partition={partition!r} and partition_strategy={partition_strategy!r} "
                    "name one option twice (partition_strategy is another name for "
                    "partition): give one of them")
            partition = partition_strategy
        address: object = scheduler_address
        if address is not None and (not isinstance(address, str) or not address):
            raise ConfigError(
                "scheduler_address must be a Dask scheduler address such as "
                f"'tcp://host:8786' or None, got {type(address).__name__} {address!r}"
            )
        workers: object = n_workers
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                    or workers < 1):
            raise ConfigError(
                f"n_workers must be an int >= 1 or None, got {type(workers).__name__} {workers!r}"
            )
        if partition not in PARTITIONS:
            raise ConfigError(
                f"partition must be one of {', '.join(map(repr, PARTITIONS))}, got {partition!r}"
            )
        timeout: object = connect_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ConfigError(
                f"connect_timeout must be a number of seconds > 0, got "
                f"{type(timeout).__name__} {timeout!r}"
            )
        self._timeout = float(connect_timeout)
        self._distributed = import_distributed()
        self._address = scheduler_address
        self._n_workers = n_workers
        self._partition = partition
        # Names this backend's partitions on the workers; not model logic, so a
        # random token cannot change results.
        self._token = uuid.uuid4().hex[:16]
        self._keys = itertools.count()
        self._cluster: Any = None
        self._client: Any = None
        #: The workers holding partitions in this run, in partition order.
        self._workers: list[str] = []
        self._sizes: list[int] = []
        #: Commands waiting to ride along with the next task of each worker.
        self._queued: list[list[tuple[Any, ...]]] = []
        #: Which partition holds each agent.
        self._owner: dict[AgentId, int] = {}
        self._phase_keys: dict[Phase, int] = {}
        self._generation = 0
        self._started = False

    # -- properties -------------------------------------------------------------

    @property
    def scheduler_address(self) -> str | None:
        """The scheduler address given (``None``: a ``LocalCluster`` of this backend)."""
        return self._address

    @property
    def n_workers(self) -> int | None:
        """The worker count asked for."""
        return self._n_workers

    @property
    def partition(self) -> str:
        """How agents are assigned to workers."""
        return self._partition

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` of this backend (connecting, or starting the cluster)."""
        return self._connect()

    @property
    def worker_addresses(self) -> tuple[str, ...]:
        """The addresses of the workers holding partitions now, in partition order."""
        return tuple(self._workers) if self._started else ()

    # -- lifecycle ------------------------------------------------------------

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        distributed = self._distributed
        if self._address is None:
            self._cluster, self._client = local_dask_client(
                distributed, self._n_workers or available_cpus()
            )
        else:
            try:
                self._client = distributed.Client(self._address, set_as_default=False,
                                                  timeout=self._timeout)
            except (OSError, TimeoutError) as exc:
                raise BackendUnavailable(
                    f"cannot reach the Dask scheduler at scheduler_address={self._address!r}: "
                    f"{exc}"
                ) from exc
        return self._client

    def _members(self) -> list[str]:
        """The addresses of the cluster's workers now, sorted."""
        try:
            return sorted(self._client.nthreads())
        except (OSError, TimeoutError) as exc:
            self._started = False
            raise WorkerLost(
                f"DaskBackend lost its scheduler ({self._address or 'LocalCluster'}): {exc}"
            ) from exc

    def _choose_workers(self, agents: int) -> list[str]:
        client = self._connect()
        wanted = self._n_workers
        if self._cluster is not None:
            wanted = self._n_workers or available_cpus()
        if wanted is not None:
            try:
                client.wait_for_workers(wanted, timeout=self._timeout)
            except TimeoutError as exc:
                have = len(self._members())
                raise BackendUnavailable(
                    f"DaskBackend needs {wanted} workers (n_workers={self._n_workers}), but "
                    f"only {have} joined the cluster within {self._timeout:g} s"
                ) from exc
        members = self._members()
        if not members:
            try:
                client.wait_for_workers(1, timeout=self._timeout)
            except TimeoutError as exc:
                raise BackendUnavailable(
                    f"the Dask cluster at {self._address!r} has no workers "
                    f"(waited {self._timeout:g} s)"
                ) from exc
            members = self._members()
        count = max(1, min(wanted or len(members), len(members), agents))
        return members[:count]

    def start(self, specs: Iterable[AgentSpec], seed: SeedTree,
              world: Mapping[str, Any] | None) -> None:
        """Partition the agents and build each partition on its worker.

        Starts the ``LocalCluster`` (or connects to the scheduler) the first
        time. Partitions of a previous run are dropped.
        """
        specs = list(specs)
        ids = sorted_ids([spec.id for spec in specs], "agent ids")
        world_data = plain_world(freeze_world(world))  # checked here, frozen again on each worker
        self._started = False
        previous = self._workers
        workers = self._choose_workers(len(ids))
        parts = partition_ids(ids, len(workers), self._partition)
        by_id = {spec.id: spec for spec in specs}
        self._generation += 1
        self._workers = workers
        self._sizes = [len(part) for part in parts]
        self._owner = {agent_id: k for k, part in enumerate(parts) for agent_id in part}
        self._phase_keys = {}
        self._queued = [[("start", [by_id[i] for i in part], seed, world_data, ids)]
                        for part in parts]
        self._drop([address for address in previous if address not in workers])
        self._exchange("starting")
        self._started = True

    def close(self) -> None:
        """Drop the partitions, close the client and any ``LocalCluster`` started here.

        Idempotent; a later :meth:`start` connects again.
        """
        self._started = False
        workers, self._workers = self._workers, []
        client, self._client = self._client, None
        cluster, self._cluster = self._cluster, None
        try:
            if client is not None and cluster is None and workers:
                self._drop(workers, client=client, wait=True)
        finally:
            try:
                if client is not None:
                    client.close(timeout=_CLOSE_S)
            finally:
                if cluster is not None:
                    cluster.close(timeout=_CLOSE_S)

    def _drop(self, workers: list[str], *, client: Any = None, wait: bool = False) -> None:
        """Best effort: forget this backend's partitions on *workers* that are still members."""
        client = client if client is not None else self._client
        if client is None or not workers:
            return
        with contextlib.suppress(Exception):
            members = set(client.nthreads())
            drop = pickle.dumps([("drop",)], _PROTOCOL)
            futures = [client.submit(run_commands, address, self._token, self._generation, drop,
                                     workers=[address], allow_other_workers=False,
                                     pure=False, key=self._key("drop", index))
                       for index, address in enumerate(workers) if address in members]
            if wait:
                for future in futures:
                    future.result(timeout=_CLOSE_S)
            else:
                self._distributed.fire_and_forget(futures)

    # -- the three methods ------------------------------------------------------

    def execute_action(self, phase: Phase, step: int, phase_index: int) -> list[Message]:
        """Run the phase on every worker; return all their messages, in total order."""
        key = self._register(phase)
        for queue in self._queued:
            queue.append(("exec", key, step, phase_index))
        out: list[Message] = []
        for part in self._exchange(f"running phase {phase.name!r} at step {step}"):
            out += map(_as_message, part)
        out.sort()  # (phase, sender, seq) is unique, so payloads are never compared
        return out

    def deliver_messages(self, messages: list[Message]) -> None:
        """Route each message to the worker of its recipient (sent with the next task)."""
        self._check_started()
        batches: list[list[tuple[Any, ...]]] = [[] for _ in self._workers]
        owner = self._owner
        try:
            for message in messages:
                batches[owner[message.recipient]].append(tuple(message))
        except KeyError as exc:
            raise KernelBug(
                f"a message for unknown agent {exc.args[0]!r} reached delivery"
            ) from None
        for queue, batch in zip(self._queued, batches, strict=True):
            queue.append(("deliver", batch))

    def get_agents_for(self, phase: Phase) -> list[AgentId]:
        """Ask every worker which of its agents *phase* would run on now; merge, sorted."""
        key = self._register(phase)
        for queue in self._queued:
            queue.append(("eligible", key))
        merged: list[AgentId] = []
        for part in self._exchange("listing eligible agents"):
            merged += part
        merged.sort()  # ids of one model share a type
        return merged

    def snapshot(self) -> AgentSnapshot:
        """Every worker's agent states, merged in id order."""
        self._check_started()
        for queue in self._queued:
            queue.append(("snapshot",))
        merged: AgentSnapshot = {}
        for part in self._exchange("taking a snapshot"):
            merged.update(part)
        return {agent_id: merged[agent_id] for agent_id in sorted(merged)}

    # -- plumbing -------------------------------------------------------------

    def _check_started(self) -> None:
        if not self._started:
            raise ConfigError("DaskBackend is not started: call start() first")

    def _register(self, phase: Phase) -> int:
        self._check_started()
        key = self._phase_keys.get(phase)
        if key is None:
            key = self._phase_keys[phase] = len(self._phase_keys)
            for queue in self._queued:
                queue.append(("phase", key, phase))
        return key

    def _key(self, what: str, index: int) -> str:
        return f"simulacra-{what}-{self._token}-{next(self._keys)}-{index}"

    def _exchange(self, doing: str) -> list[Any]:
        """Send each worker its queued commands as one pinned task; return the results.

        Waits for every worker, so that the failure reported is the one of
        the lowest agent id; a worker that leaves the cluster meanwhile
        raises :class:`~simulacra.WorkerLost` at once.
        """
        client = self._client
        queued, self._queued = self._queued, [[] for _ in self._workers]
        blobs = self._pickled(queued)
        futures: list[Any] = []
        for index, (address, blob) in enumerate(zip(self._workers, blobs, strict=True)):
            futures.append(client.submit(
                run_commands, address, self._token, self._generation, blob,
                workers=[address], allow_other_workers=False, pure=False,
                key=self._key("agents", index),
            ))
        try:
            return self._collect(futures, doing)
        finally:
            running = [future for future in futures if not future.done()]
            if running:
                with contextlib.suppress(Exception):
                    client.cancel(running)

    def _pickled(self, queued: list[list[tuple[Any, ...]]]) -> list[bytes]:
        """Every worker's commands, pickled before any is sent.

        Initial state that does not pickle (an instance of a local class)
        then reaches no worker: it raises an
        :class:`~simulacra.errors.UncopyableState` naming the lowest such
        agent and its argument, and the backend must be started again.
        """
        blobs: list[bytes] = []
        errors: list[BaseException] = []
        for commands in queued:
            try:
                blobs.append(pickle.dumps(commands, _PROTOCOL))
            except Exception as exc:
                error = unpicklable_commands(commands, exc)
                if error is not exc:
                    error.__cause__ = exc
                errors.append(error)
        if errors:
            self._started = False
            raise min(errors, key=error_rank)
        return blobs

    def _collect(self, futures: list[Any], doing: str) -> list[Any]:
        results: list[Any] = [None] * len(futures)
        errors: list[BaseException] = []
        pending = list(range(len(futures)))
        ready: dict[int, threading.Event] = {}
        lost_types = (self._distributed.KilledWorker, OSError, cf.CancelledError)
        while pending:
            index = pending[0]
            try:
                # Wait, then take the result of a finished future without a timeout:
                # result(timeout=...) races inside distributed's sync() when the
                # future finishes as the timeout fires (UnboundLocalError 'result').
                future = futures[index]
                if not future.done():
                    if index not in ready:  # one callback per future, however long it waits
                        ready[index] = threading.Event()
                        future.add_done_callback(functools.partial(_set, ready[index]))
                    if not ready[index].wait(_POLL_S):
                        raise TimeoutError
                data = future.result()
            except TimeoutError:
                members = set(self._members())
                for waiting in pending:
                    if self._workers[waiting] not in members:
                        self._lost(waiting, doing, "left the cluster (killed, or removed)")
                continue
            except lost_types as exc:
                self._lost(index, doing, f"failed ({type(exc).__name__}: {exc})", exc)
            except Exception as exc:  # e.g. the worker cannot import the model's code
                errors.append(exc)
                pending.pop(0)
                continue
            pending.pop(0)
            reply = pickle.loads(data)  # noqa: S301  (from our own worker task)
            status = reply[0]
            if status == "ok":
                results[index] = reply[1]
            elif status == "error":
                errors.append(unpack_error(reply[1]))
            else:
                self._lost(index, doing, reply[1])
        if errors:
            raise min(errors, key=error_rank)
        return results

    def _lost(self, index: int, doing: str, how: str,
              cause: BaseException | None = None) -> NoReturn:
        address = self._workers[index]
        self._started = False
        self._drop([a for a in self._workers if a != address])
        error = WorkerLost(
            f"worker {index} of DaskBackend ({address}) {how} while {doing}; the "
            f"{plural(self._sizes[index], 'agent')} it held "
            f"{'is' if self._sizes[index] == 1 else 'are'} lost, so the run cannot continue"
        )
        error.unit = index
        error.crashes = 1
        raise error from cause

    def __repr__(self) -> str:
        where = "LocalCluster" if self._address is None else repr(self._address)
        return (f"DaskBackend({where}, n_workers={self._n_workers}, "
                f"partition={self._partition!r})")
