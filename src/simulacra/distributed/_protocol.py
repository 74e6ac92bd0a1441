"""The worker protocol shared by :class:`MCPBackend` and :class:`EmulatorBackend`.

A worker holds one partition of a model's agents (a
:class:`~simulacra.agents.Population`) and exposes six operations, each an
MCP tool of the same name::

    start(data)                     data: (specs, seed, world, all ids) -> the worker's pid
    deliver(data)                   data: message tuples, in total order  -> None
    execute_action(data, deliver?)  data: (phase, step, phase_index)     -> message tuples
    agents_for(data, deliver?)      data: phase                          -> sorted ids
    snapshot(deliver?)                                                    -> {id: (class, state)}
    shutdown()                                                            -> None (the server exits)

Encoding. Every argument and every reply is one string: a pickle (protocol
5) of the value, base64-encoded so it fits a JSON tool argument and a text
content block. The reply is ``("ok", value)`` or ``("error", packed
exception)``; an agent's exception travels as data and becomes an
:class:`~simulacra.AgentActionError` on the engine side, never an MCP-level
error. Pickle, not msgpack, because the payloads are Python values that must
come back *exactly* (tuples stay tuples, sets stay sets, ``1`` is not
``1.0``): bit-identical results depend on it, and agent classes and phase
actions travel by reference (module and qualified name).

Trust. Unpickling runs code, so a worker must only ever take requests from
its engine: every HTTP request needs the bearer token (see
``simulacra.distributed._mcp_worker``), workers bind the loopback interface
unless told otherwise, and the engine only unpickles replies from workers it
started or was pointed at.

The ``deliver`` argument of the later tools lets a message batch ride along
with the next call that needs an answer, so a phase costs one round trip per
worker, as in :class:`~simulacra.ProcessPoolBackend`.

This module needs nothing beyond the standard library and the lower layers:
the emulator and the tests drive :class:`WorkerState` without ``mcp``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import pickle
import traceback
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, final

from simulacra.agents import Message, Phase, Population
from simulacra.errors import (
    AgentActionError,
    BackendError,
    KernelBug,
    RemoteError,
    UnknownRecipient,
)

__all__ = [
    "PROTOCOL_VERSION",
    "TOOLS",
    "WorkerState",
    "decode",
    "encode",
    "error_rank",
    "plain",
    "unpack_error",
]

#: Bumped when the tools or their arguments change; ``start`` checks it.
PROTOCOL_VERSION: Final = 1
#: The tools a worker serves, in the order they are documented.
TOOLS: Final = ("start", "deliver", "execute_action", "agents_for", "snapshot", "shutdown")

_PICKLE: Final = 5

#: Messages travel as plain tuples (pickling a named tuple runs Python code per
#: message); they become Messages again, C-level, on arrival.
as_message: Final = functools.partial(tuple.__new__, Message)


def encode(value: object) -> str:
    """Pickle (protocol 5) *value* and base64 it: one JSON-safe string."""
    return base64.b64encode(pickle.dumps(value, _PICKLE)).decode("ascii")


def decode(text: str) -> Any:
    """Undo :func:`encode`. Only for text from a trusted peer: unpickling runs code."""
    return pickle.loads(base64.b64decode(text))  # noqa: S301  (authenticated peer only)


def plain(value: object) -> object:
    """A picklable copy of a frozen world (read-only mappings become dicts)."""
    if isinstance(value, MappingProxyType | dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(plain(item) for item in value)
    if isinstance(value, frozenset):
        return frozenset(plain(item) for item in value)
    return value


# --------------------------------------------------------------------------- errors as data


def _pack_exception(exc: BaseException) -> tuple[bytes | None, str, str, str]:
    """(pickled exception or None, type name, message, traceback text)."""
    text = "".join(traceback.format_exception(exc))
    blob: bytes | None
    try:
        blob = pickle.dumps(exc, _PICKLE)
        pickle.loads(blob)  # noqa: S301  (our own bytes; checks the round trip)
    except Exception:
        blob = None
    return blob, type(exc).__qualname__, str(exc), text


def pack_error(exc: BaseException) -> tuple[Any, ...]:
    """An exception as plain data that survives any transport."""
    if isinstance(exc, AgentActionError) and exc.__cause__ is not None:
        return ("agent", exc.agent, exc.phase, exc.step, str(exc), _pack_exception(exc.__cause__))
    return ("plain", _pack_exception(exc))


class _RemoteTraceback(Exception):
    """The traceback of an exception in a worker, shown as its cause."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n\n" + self.text


_RemoteTraceback.__module__ = "simulacra.distributed"
_RemoteTraceback.__qualname__ = _RemoteTraceback.__name__ = "WorkerTraceback"


def _unpack_exception(info: tuple[bytes | None, str, str, str]) -> BaseException:
    blob, type_name, text, tb = info
    exc: BaseException | None = None
    if blob is not None:
        with contextlib.suppress(Exception):
            exc = pickle.loads(blob)  # noqa: S301  (from an authenticated worker)
        if not isinstance(exc, BaseException):
            exc = None
    if exc is None:
        exc = RemoteError(f"{type_name}: {text}")
    exc.__cause__ = _RemoteTraceback(tb)
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
    return (1, 0)


# --------------------------------------------------------------------------- the worker


@final
class WorkerState:
    """One worker's agents and the dispatch of the six tools onto them.

    The MCP server of a worker process (and each emulated worker) wraps one
    of these; :meth:`call` takes a tool name and its string arguments and
    returns the encoded reply. It never raises for a failure inside a tool:
    the failure is the reply.
    """

    __slots__ = ("_population", "stopping")

    def __init__(self) -> None:
        self._population: Population | None = None
        #: Set by the ``shutdown`` tool; the server exits after replying.
        self.stopping = False

    def _held(self) -> Population:
        if self._population is None:
            raise BackendError("this worker holds no agents: the engine must call start first")
        return self._population

    def call(self, tool: str, arguments: Mapping[str, Any] | None) -> str:
        """Run *tool* with *arguments* (strings from :func:`encode`); the encoded reply."""
        try:
            return encode(("ok", self._dispatch(tool, arguments or {})))
        except BaseException as exc:
            try:
                return encode(("error", pack_error(exc)))
            except BaseException as inner:  # e.g. an attribute that cannot be pickled
                return encode(("error", ("plain", _pack_exception(inner))))

    def _dispatch(self, tool: str, arguments: Mapping[str, Any]) -> object:
        pending = arguments.get("deliver")
        if pending is not None:
            self._held().deliver(map(as_message, decode(pending)))
        if tool == "execute_action":
            phase, step, index = decode(arguments["data"])
            return list(map(tuple, self._held().run(_phase(phase), step, index)))
        if tool == "agents_for":
            return self._held().eligible(_phase(decode(arguments["data"])))
        if tool == "snapshot":
            return self._held().snapshot()
        if tool == "deliver":
            self._held().deliver(map(as_message, decode(arguments["data"])))
            return None
        if tool == "start":
            version, specs, seed, world, all_ids = decode(arguments["data"])
            if version != PROTOCOL_VERSION:
                raise BackendError(
                    f"the engine speaks worker protocol {version!r}, this worker "
                    f"{PROTOCOL_VERSION}: run the same simulacra version on both sides"
                )
            self._population = None
            self._population = Population(specs, seed, world, all_ids=all_ids)
            return os.getpid()
        if tool == "shutdown":
            self._population = None
            self.stopping = True
            return None
        raise KernelBug(f"a worker got an unknown tool {tool!r} (it serves {', '.join(TOOLS)})")


def _phase(value: object) -> Phase:
    if not isinstance(value, Phase):
        raise KernelBug(f"a worker got {type(value).__name__} where a Phase belongs")
    return value
