"""The worker side of :class:`~simulacra.distributed.DaskBackend`: partitions held in a worker.

Every Dask worker process that holds agents of a run keeps them here, in a
module-level registry keyed by ``(worker address, backend token)``: one
partition per worker per backend. The backend reaches it with ordinary Dask
tasks pinned to that worker (``workers=[address]``,
``allow_other_workers=False``) that run :func:`run_commands`; each task
carries a list of commands -- the same ones :class:`~simulacra.backends.ProcessPoolBackend`
sends down its pipes -- and returns ``("ok", result of the last command)``,
``("error", packed exception)`` or ``("lost", why)`` when the partition is
not there (the worker was restarted, or it never held it).

This module imports nothing from Dask: the tasks find their worker through
the address the backend passes in, so it stays importable (and testable)
without Dask.
"""

from __future__ import annotations

import functools
import gc
import pickle
import threading
from typing import Any, Final, final

from simulacra.agents import Message, Phase, Population
from simulacra.backends import pack_failure, unpicklable_reply
from simulacra.errors import KernelBug

__all__ = ["run_commands"]

_PROTOCOL: Final = 5

#: Messages travel as plain tuples and become :class:`Message` objects again on
#: arrival (pickling a named tuple runs Python code per message).
_as_message: Final = functools.partial(tuple.__new__, Message)


@final
class _Partition:
    """The agents one worker holds for one backend, and the phases it has been sent."""

    __slots__ = ("generation", "phases", "population")

    def __init__(self, generation: int, population: Population) -> None:
        self.generation = generation
        self.population = population
        self.phases: dict[int, Phase] = {}


#: (worker address, backend token) -> the partition held there. Worker threads of one
#: process (``LocalCluster(processes=False)``) share this dict, hence the lock.
_HELD: dict[tuple[str, str], _Partition] = {}
_LOCK: Final = threading.Lock()


def held_count() -> int:
    """How many partitions this process holds (for tests and diagnostics)."""
    with _LOCK:
        return len(_HELD)


def run_commands(address: str, token: str, generation: int, commands: bytes) -> bytes:
    """Run *commands* on the partition this worker holds for *token*; never raises.

    The commands come, and the reply goes back, as one pickle (protocol 5)
    each: opaque bytes that Dask neither walks (looking for futures in the
    arguments, per element) nor unpickles on the scheduler.

    Args:
        address: The address of the worker this task was pinned to (the key
            of its partition).
        token: The backend's token.
        generation: The backend's run number: a partition of an older run
            is as good as lost.
        commands: A pickled list of ``("start", specs, seed, world,
            all_ids)``, ``("phase", key, phase)``, ``("deliver", tuples)``,
            ``("exec", key, step, index)``, ``("eligible", key)``,
            ``("snapshot",)`` or ``("drop",)``.

    Returns:
        A pickled ``("ok", result of the last command)``, ``("error",
        packed)`` or ``("lost", reason)``. A result that does not pickle (a
        payload or a state value that copies but does not pickle, such as an
        instance of a local class) is an ``("error", ...)`` of the
        :class:`~simulacra.errors.UncopyableState` naming the agent and its
        attribute or message, the phase and the step.
    """
    # A phase makes many young objects that live until the next one; full
    # collections would rescan every agent each time. Deferred for this task
    # only (engines._model and ProcessPoolBackend's workers do the same), and
    # restored after it: the worker process is not ours.
    threshold = gc.get_threshold()
    gc.set_threshold(threshold[0], threshold[1], max(threshold[2], 1000))
    try:
        return _run(address, token, generation, commands)
    finally:
        gc.set_threshold(*threshold)


def _run(address: str, token: str, generation: int, data: bytes) -> bytes:
    key = (address, token)
    try:
        result: object = None
        command: tuple[Any, ...] = ()
        partition: _Partition | None = None
        commands: list[tuple[Any, ...]] = pickle.loads(data)  # noqa: S301  (from our backend)
        for command in commands:
            op = command[0]
            if op == "start":
                _, specs, seed, world, all_ids = command
                with _LOCK:
                    _HELD.pop(key, None)
                population = Population(specs, seed, world, all_ids=all_ids)
                partition = _Partition(generation, population)
                with _LOCK:
                    _HELD[key] = partition
                result = len(population.ids)
                continue
            if op == "drop":
                with _LOCK:
                    _HELD.pop(key, None)
                partition, result = None, None
                continue
            with _LOCK:
                partition = _HELD.get(key)
            if partition is None or partition.generation != generation:
                return pickle.dumps(
                    ("lost", "the worker does not hold its partition (was it restarted?)"),
                    _PROTOCOL)
            if op == "exec":
                _, phase_key, step, index = command
                sent = partition.population.run(partition.phases[phase_key], step, index)
                result = list(map(tuple, sent))
            elif op == "deliver":
                partition.population.deliver(map(_as_message, command[1]))
            elif op == "phase":
                partition.phases[command[1]] = command[2]
            elif op == "eligible":
                result = partition.population.eligible(partition.phases[command[1]])
            elif op == "snapshot":
                result = partition.population.snapshot()
            else:
                raise KernelBug(f"a Dask worker got an unknown command {op!r}")
        try:
            return pickle.dumps(("ok", result), _PROTOCOL)
        except Exception as exc:  # a payload or a state value that copies but does not pickle
            raise unpicklable_reply(command, result, exc,
                                    None if partition is None else partition.population,
                                    {} if partition is None else partition.phases) from exc
    except BaseException as exc:
        return pickle.dumps(("error", pack_failure(exc)), _PROTOCOL)

