"""ProcessPoolBackend: persistent worker processes, each owning a partition of the agents.

Protocol. The parent talks to each worker over its own duplex pipe. Every
exchange is one pickled (protocol 5) *list of commands* down and one pickled
reply back: ``("ok", result of the last command)`` or ``("error", packed
exception)``. Commands that need no answer -- registering a phase, delivering
a batch of messages -- are queued in the parent and ride along with the next
command that does, so a phase costs one round trip per worker:

    parent                                        worker k (owns ids[k::n])
    start   [("start", specs, seed, world, ids)] -> builds its Population
    phase   [("deliver", batch), ("phase", 3, phase), ("exec", 3, step, index)]
                                                  -> delivers, runs, replies messages
    end     [("snapshot",)]                       -> agent states

Agents are built in the worker from :class:`~simulacra.agents.AgentSpec` data
once per run and stay there; they are never pickled per phase. Messages travel
as plain tuples and become :class:`~simulacra.agents.Message` objects again on
arrival (pickling named tuples runs Python code per message). A worker that
dies (killed, crashed interpreter) is noticed at once -- the parent waits on
the workers' pipes *and* their process sentinels -- and surfaces as
:class:`~simulacra.WorkerLost`: the agents it held are gone, so the run
cannot continue.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import multiprocessing
import multiprocessing.connection as mpc
import os
import pickle
import signal
import sys
from collections.abc import Iterable, Mapping
from multiprocessing.process import BaseProcess
from typing import Any, Final, final

from simulacra._util import plural
from simulacra.agents import (
    AgentId,
    AgentSpec,
    Message,
    Phase,
    Population,
    canonical_line,
    freeze_world,
    sorted_ids,
)
from simulacra.errors import (
    BackendUnavailable,
    ConfigError,
    KernelBug,
    WorkerLost,
)
from simulacra.rng import SeedTree

from ._base import AgentSnapshot, BackendBase
from ._local import check_max_workers
from ._wire import (
    describe_exit,
    error_rank,
    pack_failure,
    plain_world,
    unpack_error,
    unpicklable_commands,
    unpicklable_reply,
)

__all__ = ["PARTITIONS", "START_METHODS", "ProcessPoolBackend", "partition_ids"]

#: Multiprocessing start methods a pool may use. "fork" is refused: it copies a
#: parent that may run threads (a deadlock risk) and state never sent on purpose.
START_METHODS: Final = ("spawn", "forkserver")
#: Ways to assign agents to workers.
PARTITIONS: Final = ("round_robin", "hash")

_PROTOCOL: Final = 5

#: Messages cross the pipes as plain tuples: pickling a named tuple calls Python
#: code per message (about 5x slower); they are rebuilt, C-level, on arrival.
_as_message: Final = functools.partial(tuple.__new__, Message)
#: Seconds between liveness checks while waiting for a worker's reply. Deaths are
#: normally seen at once through the process sentinel; this is the backstop.
_POLL_S: Final = 1.0
#: Seconds a worker gets to exit after "close" before it is terminated.
_JOIN_S: Final = 5.0


def available_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def partition_ids(ids: list[AgentId], workers: int,
                  strategy: str = "round_robin") -> list[list[AgentId]]:
    """Split sorted *ids* among *workers*, deterministically.

    ``"round_robin"``: worker k gets ``ids[k::workers]`` (balanced counts).
    ``"hash"``: an id goes to ``int(sha256(canonical JSON of id)[:8]) % workers``,
    so an agent's worker does not depend on which other agents exist. Neither
    uses Python's salted ``hash()``. Each part keeps id order.
    """
    if strategy == "round_robin":
        return [ids[k::workers] for k in range(workers)]
    parts: list[list[AgentId]] = [[] for _ in range(workers)]
    for agent_id in ids:
        digest = hashlib.sha256(canonical_line(agent_id)).digest()
        parts[int.from_bytes(digest[:8], "big") % workers].append(agent_id)
    return parts


# --------------------------------------------------------------------------- worker side


def _worker_main(conn: mpc.Connection) -> None:
    """A worker's loop: run command lists until "close" or the parent goes away."""
    # Ctrl-C reaches the whole process group; the parent decides what it means
    # (it stops the workers), so a worker must not die of it mid-command.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # This process only runs agents: defer full collections (see engines._model).
    threshold = gc.get_threshold()
    gc.set_threshold(threshold[0], threshold[1], max(threshold[2], 1000))
    population: Population | None = None
    phases: dict[int, Phase] = {}

    def held() -> Population:
        if population is None:
            raise KernelBug("a worker got a command before its start command")
        return population

    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent is gone
        stop = False
        try:
            commands = pickle.loads(data)  # noqa: S301  (from our parent process)
            result: object = None
            command: tuple[Any, ...] = ()
            for command in commands:
                op = command[0]
                if op == "exec":
                    _, key, step, index = command
                    result = list(map(tuple, held().run(phases[key], step, index)))
                elif op == "deliver":
                    held().deliver(map(_as_message, command[1]))
                elif op == "phase":
                    phases[command[1]] = command[2]
                elif op == "start":
                    _, specs, seed, world, all_ids = command
                    population = None
                    phases.clear()
                    population = Population(specs, seed, world, all_ids=all_ids)
                    result = os.getpid()
                elif op == "eligible":
                    result = held().eligible(phases[command[1]])
                elif op == "snapshot":
                    result = held().snapshot()
                elif op == "close":
                    stop = True
                else:
                    raise KernelBug(f"worker got an unknown command {op!r}")
            try:
                reply = pickle.dumps(("ok", result), _PROTOCOL)
            except Exception as exc:  # a payload or a state value that does not pickle
                raise unpicklable_reply(command, result, exc, population, phases) from exc
        except BaseException as exc:
            reply = pickle.dumps(("error", pack_failure(exc)), _PROTOCOL)
        try:
            conn.send_bytes(reply)
        except (EOFError, OSError):
            return
        if stop:
            return


# --------------------------------------------------------------------------- parent side


@final
class _Worker:
    """The parent's handle on one worker process."""

    __slots__ = ("conn", "index", "pid", "process", "queued", "size")

    def __init__(self, index: int, process: BaseProcess, conn: mpc.Connection) -> None:
        self.index = index
        self.process = process
        self.conn = conn
        self.pid = process.pid
        #: Commands waiting to ride along with the next exchange.
        self.queued: list[tuple[Any, ...]] = []
        #: How many agents it holds.
        self.size = 0


@final
class ProcessPoolBackend(BackendBase):
    """Runs agents in persistent worker processes, each owning a partition of them.

    Agents are assigned to workers deterministically (*partition*), built in
    their worker from :class:`~simulacra.AgentSpec` data at the start of a run
    and kept there for the whole run. Per phase only the phase number and step
    go down, and message batches come back and go out (pickle protocol 5).
    Results are identical to :class:`LocalBackend` for every worker count.

    Agent classes, phase actions and message payloads must be importable or
    picklable by name (classes and functions at the top level of a module;
    the main script works too, behind ``if __name__ == "__main__":``).

    Workers are kept across runs of the same backend object and stopped by
    :meth:`close` (or ``with ProcessPoolBackend() as backend:``).

    Args:
        max_workers: Worker processes; ``None`` means one per available CPU.
            Never more than there are agents.
        start_method: ``"spawn"`` (the default: a fresh interpreter per
            worker, same behaviour on every OS) or ``"forkserver"`` (faster
            starts; not on Windows). Chosen for this pool only; the global
            multiprocessing start method is never set.
        partition: ``"round_robin"`` over sorted ids (the default) or
            ``"hash"`` (SHA-256 of the id; see :func:`partition_ids`).

    Raises:
        ConfigError: An argument is out of range or unknown.
        BackendUnavailable: *start_method* is not available on this platform.
    """

    name = "processes"

    def __init__(self, max_workers: int | None = None, *, start_method: str = "spawn",
                 partition: str = "round_robin") -> None:
        self._max_workers = check_max_workers(max_workers, allow_none=True)
        if start_method not in START_METHODS:
            raise ConfigError(
                f"start_method must be one of {', '.join(map(repr, START_METHODS))}, got "
                f"{start_method!r} ('fork' copies a parent that may run threads)"
            )
        if start_method not in multiprocessing.get_all_start_methods():
            raise BackendUnavailable(
                f"start_method {start_method!r} is not available on {sys.platform}; use 'spawn'"
            )
        if partition not in PARTITIONS:
            raise ConfigError(
                f"partition must be one of {', '.join(map(repr, PARTITIONS))}, got {partition!r}"
            )
        self._start_method = start_method
        self._partition = partition
        self._workers: list[_Worker] = []
        #: Which worker holds each agent.
        self._owner: dict[AgentId, int] = {}
        #: Phases registered with the workers in this run, and their numbers.
        self._phase_keys: dict[Phase, int] = {}
        self._started = False

    @property
    def max_workers(self) -> int | None:
        """The worker count asked for (``None``: one per CPU)."""
        return self._max_workers

    @property
    def worker_pids(self) -> tuple[int, ...]:
        """The process ids of the running workers, in worker order."""
        return tuple(w.pid for w in self._workers if w.pid is not None)

    # -- lifecycle ------------------------------------------------------------

    def start(self, specs: Iterable[AgentSpec], seed: SeedTree,
              world: Mapping[str, Any] | None) -> None:
        """Partition the agents, start (or reuse) the workers and build the agents there."""
        specs = list(specs)
        ids = sorted_ids([spec.id for spec in specs], "agent ids")
        world_data = plain_world(freeze_world(world))  # checked here, frozen again in each worker
        count = max(1, min(self._max_workers or available_cpus(), len(ids)))
        self._started = False
        if len(self._workers) != count or not all(w.process.is_alive() for w in self._workers):
            self._stop_workers()
            self._spawn(count)
        parts = partition_ids(ids, count, self._partition)
        by_id = {spec.id: spec for spec in specs}
        self._owner = {agent_id: k for k, part in enumerate(parts) for agent_id in part}
        self._phase_keys = {}
        for worker, part in zip(self._workers, parts, strict=True):
            worker.queued = [("start", [by_id[i] for i in part], seed, world_data, ids)]
            worker.size = len(part)
        self._exchange(self._workers, "starting")
        self._started = True

    def _spawn(self, count: int) -> None:
        # Per pool, never global. typeshed's BaseContext lacks Process, hence Any.
        context: Any = multiprocessing.get_context(self._start_method)
        for index in range(count):
            parent_end, child_end = context.Pipe(duplex=True)
            process = context.Process(target=_worker_main, args=(child_end,), daemon=True,
                                      name=f"simulacra-agents-{index}")
            process.start()
            child_end.close()
            self._workers.append(_Worker(index, process, parent_end))

    def close(self) -> None:
        """Stop the workers (their agents are dropped). Idempotent."""
        self._started = False
        self._stop_workers()

    def _stop_workers(self) -> None:
        workers, self._workers = self._workers, []
        for worker in workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send_bytes(pickle.dumps([("close",)], _PROTOCOL))
        for worker in workers:
            worker.process.join(_JOIN_S)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(_JOIN_S)
            with contextlib.suppress(OSError):
                worker.conn.close()

    # -- the three methods ------------------------------------------------------

    def execute_action(self, phase: Phase, step: int, phase_index: int) -> list[Message]:
        """Run the phase in every worker; return all their messages (worker by worker)."""
        key = self._register(phase)
        for worker in self._workers:
            worker.queued.append(("exec", key, step, phase_index))
        replies = self._exchange(self._workers, f"running phase {phase.name!r} at step {step}")
        out: list[Message] = []
        for part in replies:
            out += map(_as_message, part)
        return out

    def deliver_messages(self, messages: list[Message]) -> None:
        """Route each message to the worker of its recipient (sent with the next command)."""
        self._check_started()
        batches: list[list[Message]] = [[] for _ in self._workers]
        owner = self._owner
        try:
            for message in messages:
                batches[owner[message.recipient]].append(message)
        except KeyError as exc:
            raise KernelBug(
                f"a message for unknown agent {exc.args[0]!r} reached delivery"
            ) from None
        for worker, batch in zip(self._workers, batches, strict=True):
            worker.queued.append(("deliver", list(map(tuple, batch))))

    def get_agents_for(self, phase: Phase) -> list[AgentId]:
        """Ask every worker which of its agents *phase* would run on now; merge, sorted."""
        key = self._register(phase)
        for worker in self._workers:
            worker.queued.append(("eligible", key))
        merged: list[AgentId] = []
        for part in self._exchange(self._workers, "listing eligible agents"):
            merged += part
        merged.sort()  # ids of one model share a type
        return merged

    def snapshot(self) -> AgentSnapshot:
        """Every worker's agent states, merged in id order."""
        self._check_started()
        for worker in self._workers:
            worker.queued.append(("snapshot",))
        merged: AgentSnapshot = {}
        for part in self._exchange(self._workers, "taking a snapshot"):
            merged.update(part)
        return {agent_id: merged[agent_id] for agent_id in sorted(merged)}

    # -- plumbing -------------------------------------------------------------

    def _check_started(self) -> None:
        if not self._started:
            raise ConfigError("ProcessPoolBackend is not started: call start() first")

    def _register(self, phase: Phase) -> int:
        self._check_started()
        key = self._phase_keys.get(phase)
        if key is None:
            key = self._phase_keys[phase] = len(self._phase_keys)
            for worker in self._workers:
                worker.queued.append(("phase", key, phase))
        return key

    def _exchange(self, workers: list[_Worker], doing: str) -> list[Any]:
        """Send each worker its queued commands; return their results in worker order.

        Waits for every worker, so the pipes are drained even when one fails;
        then raises the failure of the lowest agent id, if any.
        """
        # Every worker's commands are pickled before any is sent: a failure (initial
        # state that does not pickle) then leaves no worker with a reply to drain.
        blobs: list[bytes] = []
        for worker in workers:
            commands, worker.queued = worker.queued, []
            try:
                blobs.append(pickle.dumps(commands, _PROTOCOL))
            except Exception as exc:
                self._started = False
                for other in workers:
                    other.queued = []
                raise unpicklable_commands(commands, exc) from exc
        for worker, blob in zip(workers, blobs, strict=True):
            try:
                worker.conn.send_bytes(blob)
            except (OSError, ValueError):
                self._lost(worker, doing)
        results: list[Any] = [None] * len(workers)
        errors: list[BaseException] = []
        waiting = {worker.conn: worker for worker in workers}
        sentinels = {worker.process.sentinel: worker for worker in workers}
        while waiting:
            ready = mpc.wait([*waiting, *(w.process.sentinel for w in waiting.values())],
                             timeout=_POLL_S)
            for obj in ready:
                if obj in sentinels:
                    worker = sentinels[obj]
                    if worker.conn in waiting and not worker.conn.poll(0):
                        self._lost(worker, doing)
                    continue
                worker = waiting.pop(obj)  # type: ignore[call-overload]  # a Connection here
                try:
                    status, value = pickle.loads(worker.conn.recv_bytes())  # noqa: S301
                except (EOFError, OSError):
                    self._lost(worker, doing)
                if status == "ok":
                    results[workers.index(worker)] = value
                else:
                    errors.append(unpack_error(value))
            if not ready:
                for worker in waiting.values():
                    if not worker.process.is_alive() and not worker.conn.poll(0):
                        self._lost(worker, doing)
        if errors:
            raise min(errors, key=error_rank)
        return results

    def _lost(self, worker: _Worker, doing: str) -> Any:
        worker.process.join(0.5)
        how = describe_exit(worker.process.exitcode)
        self.close()
        hint = ""
        if doing == "starting":
            hint = (
                ". A worker that dies as it starts usually cannot import the agents' code: "
                "spawned workers import the main module again, so a script must guard its "
                "run with `if __name__ == '__main__':`, and agent classes defined in code "
                "piped to `python -` or typed into a notebook must move into a module "
                "(the worker's own error is on stderr above)"
            )
        error = WorkerLost(
            f"worker {worker.index} of ProcessPoolBackend (pid {worker.pid}) {how} while "
            f"{doing}; the {plural(worker.size, 'agent')} it held "
            f"{'is' if worker.size == 1 else 'are'} lost, so the run cannot continue"
            f"{hint}"
        )
        error.unit = worker.index
        error.crashes = 1
        raise error

    def __repr__(self) -> str:
        return (
            f"ProcessPoolBackend(max_workers={self._max_workers}, start_method="
            f"{self._start_method!r}, partition={self._partition!r})"
        )
