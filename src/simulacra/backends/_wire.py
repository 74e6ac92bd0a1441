"""Errors and worlds as data, for backends that run agents in another process or machine.

Every backend that holds agents elsewhere -- worker processes, Dask workers,
MCP workers -- must bring an agent's exception back to the engine with its
agent id, phase, step and the remote traceback, and must pick the failure the
sequential reference would have hit when several workers fail at once. These
functions are that shared wire format, so every backend reports failures the
same way:

* :func:`pack_error` turns an exception into plain data that survives any
  transport (a pickle of it when it round-trips, and always its type name,
  message and formatted traceback); :func:`pack_failure` is the never-raising
  version a worker loop uses;
* :func:`unpack_error` rebuilds it on the engine side (a
  :class:`~simulacra.errors.RemoteError` stands in for an exception that could
  not be pickled), with the remote traceback attached as its cause;
* :func:`error_rank` orders concurrent failures: the lowest agent id first;
* :func:`plain_world` turns a frozen world into picklable plain data;
* :func:`unpicklable_reply` and :func:`unpicklable_commands` turn a failed
  pickle of a worker's reply, or of the commands sent to it, into an
  :class:`~simulacra.errors.UncopyableState` that names the agent and the
  attribute, argument or message (found only after the pickle failed).
"""

from __future__ import annotations

import contextlib
import pickle
import signal
import traceback
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from simulacra.agents import (
    PICKLE_ADVICE,
    AgentSpec,
    Phase,
    Population,
    first_failure,
    payload_error,
    snapshot_when,
    state_error,
)
from simulacra.errors import AgentActionError, RemoteError, UncopyableState, UnknownRecipient

__all__ = ["WorkerTraceback", "describe_exit", "error_rank", "pack_error", "pack_exception",
           "pack_failure", "plain_world", "unpack_error", "unpicklable_commands",
           "unpicklable_messages", "unpicklable_reply", "unpicklable_snapshot"]

_PROTOCOL: Final = 5

#: One exception as data: (pickle of it or None, type name, message, traceback text).
PackedException = tuple[bytes | None, str, str, str]


def pack_exception(exc: BaseException) -> PackedException:
    """(pickled exception or None, type name, message, traceback text)."""
    text = "".join(traceback.format_exception(exc))
    blob: bytes | None
    try:
        blob = pickle.dumps(exc, _PROTOCOL)
        pickle.loads(blob)  # noqa: S301  (our own bytes; checks the round trip)
    except Exception:
        blob = None
    return blob, type(exc).__qualname__, str(exc), text


def pack_error(exc: BaseException) -> tuple[Any, ...]:
    """An exception as plain data: ``("agent", id, phase, step, text, cause)`` or ``("plain", e)``.

    An :class:`~simulacra.errors.AgentActionError` with a cause keeps its agent,
    phase and step; every exception travels as :func:`pack_exception`'s tuple.
    """
    if isinstance(exc, AgentActionError) and exc.__cause__ is not None:
        return ("agent", exc.agent, exc.phase, exc.step, str(exc), pack_exception(exc.__cause__))
    return ("plain", pack_exception(exc))


def pack_failure(exc: BaseException) -> tuple[Any, ...]:
    """:func:`pack_error`, falling back to the packing error itself: never raises."""
    try:
        return pack_error(exc)
    except BaseException as inner:  # e.g. an attribute that breaks formatting
        return ("plain", pack_exception(inner))


class WorkerTraceback(Exception):
    """The traceback of an exception raised where the agents run, shown as its cause."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n\n" + self.text


# Shown in tracebacks as the cause of a worker's exception: no private module path there.
WorkerTraceback.__module__ = "simulacra.backends"


def _unpack_exception(info: PackedException) -> BaseException:
    blob, type_name, text, tb = info
    exc: BaseException | None = None
    if blob is not None:
        with contextlib.suppress(Exception):
            exc = pickle.loads(blob)  # noqa: S301  (from our own worker)
        if not isinstance(exc, BaseException):
            exc = None
    if exc is None:
        exc = RemoteError(f"{type_name}: {text}")
    exc.__cause__ = WorkerTraceback(tb)
    return exc


def unpack_error(packed: tuple[Any, ...]) -> BaseException:
    """Rebuild the exception :func:`pack_error` packed (a RemoteError if it cannot be)."""
    if packed[0] == "agent":
        _, agent, phase, step, text, cause_info = packed
        error = AgentActionError(text)
        error.agent, error.phase, error.step = agent, phase, step
        error.remote_traceback = cause_info[3]
        error.__cause__ = _unpack_exception(cause_info)
        return error
    return _unpack_exception(packed[1])


def error_rank(exc: BaseException) -> tuple[int, Any]:
    """Order concurrent failures: the lowest agent id first (the one the reference hits)."""
    if isinstance(exc, AgentActionError) and exc.agent is not None:
        return (0, exc.agent)
    if isinstance(exc, UnknownRecipient) and exc.sender is not None:
        return (0, exc.sender)
    if isinstance(exc, UncopyableState) and exc.agent is not None:
        return (0, exc.agent)
    return (1, 0)


def plain_world(value: object) -> object:
    """A picklable copy of a frozen world (read-only mappings become dicts)."""
    if isinstance(value, MappingProxyType | dict):
        return {key: plain_world(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(plain_world(item) for item in value)
    if isinstance(value, frozenset):
        return frozenset(plain_world(item) for item in value)
    return value


def describe_exit(code: int | None) -> str:
    """How a worker process ended, from its exit code (None: it is still running)."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _pickle(value: object) -> object:
    return pickle.dumps(value, _PROTOCOL)


def unpicklable_reply(command: tuple[Any, ...], result: Any, exc: Exception,
                      population: Population | None,
                      phases: Mapping[int, Phase]) -> BaseException:
    """Why a worker's reply to *command* (its *result*) did not pickle, as an error to raise.

    For the worker command lists of :class:`ProcessPoolBackend` (and Dask's):
    an ``("exec", key, step, index)`` command goes to
    :func:`unpicklable_messages`, a ``("snapshot",)`` to
    :func:`unpicklable_snapshot`; for any other, *exc* itself.
    """
    op = command[0] if command else None
    if op == "exec" and isinstance(result, list):
        _, key, step, _ = command
        phase = phases[key].name if key in phases else "?"
        return unpicklable_messages(result, exc, population=population, phase=phase, step=step)
    if op == "snapshot" and isinstance(result, dict):
        return unpicklable_snapshot(result, exc, population=population)
    return exc


def unpicklable_messages(messages: list[tuple[Any, ...]], exc: Exception, *,
                         population: Population | None, phase: str,
                         step: int) -> BaseException:
    """An UncopyableState naming the first of *messages* whose payload does not pickle.

    *messages* are a worker's outbox as plain tuples (``(phase index, sender,
    seq, recipient, topic, payload)``); *exc* is returned when every payload
    pickles alone.
    """
    found = first_failure(((m, m[5]) for m in messages), _pickle)
    if found is None:
        return exc
    message, payload, error = found
    return payload_error(message[1], message[3], message[4], payload, error, phase=phase,
                         step=step, pickled=True,
                         cls_name=None if population is None
                         else population.class_name(message[1]))


def unpicklable_snapshot(snapshot: Mapping[Any, tuple[str, Mapping[str, Any]]],
                         exc: Exception, *, population: Population | None) -> BaseException:
    """An UncopyableState naming the first agent and attribute of *snapshot* that does not pickle.

    *exc* is returned when every value pickles alone.
    """
    ran = None if population is None else population.last_phase
    for agent_id, (cls_name, state) in snapshot.items():
        attribute = first_failure(state.items(), _pickle)
        if attribute is not None:
            phase, step = ran or (None, None)
            return state_error(agent_id, cls_name, attribute, exc, pickled=True,
                               when=snapshot_when(ran, "left its worker process"),
                               advice=PICKLE_ADVICE, phase=phase, step=step)
    return exc


def unpicklable_commands(commands: list[tuple[Any, ...]], exc: Exception) -> BaseException:
    """Why *commands* for a worker did not pickle, as an error to raise.

    For a ``("start", specs, ...)`` command: an
    :class:`~simulacra.errors.UncopyableState` naming the first agent and
    initial state argument that does not pickle. Otherwise *exc* itself.
    """
    for command in commands:
        if command[0] != "start":
            continue
        spec: AgentSpec
        for spec in command[1]:
            argument = first_failure(spec.state.items(), _pickle)
            if argument is not None:
                return state_error(
                    spec.id, spec.cls_path.rpartition(":")[2], argument, exc, pickled=True,
                    when="when the agents were sent to their worker processes at the start of "
                         "the run, before step 0",
                    advice=PICKLE_ADVICE, argument=True)
    return exc
