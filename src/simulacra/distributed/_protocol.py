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
import functools
import os
import pickle
from collections.abc import Mapping
from typing import Any, Final, final

from simulacra.agents import Message, Phase, Population
from simulacra.backends import (
    error_rank,
    pack_failure,
    unpack_error,
    unpicklable_commands,
    unpicklable_messages,
    unpicklable_snapshot,
)
from simulacra.backends import plain_world as plain
from simulacra.errors import (
    BackendError,
    KernelBug,
)

__all__ = [
    "PROTOCOL_VERSION",
    "TOOLS",
    "WorkerState",
    "decode",
    "encode",
    "encode_start",
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


# --------------------------------------------------------------------------- errors as data


def encode_start(data: tuple[Any, ...]) -> str:
    """:func:`encode` the ``start`` tool's ``(version, specs, seed, world, all ids)``.

    Raises:
        UncopyableState: Initial state does not pickle (an instance of a local
            class): it names the agent and the argument.
    """
    try:
        return encode(data)
    except Exception as exc:
        # unpicklable_commands reads ProcessPoolBackend's ("start", specs, ...) command.
        error = unpicklable_commands([("start", *data[1:])], exc)
        if error is exc:
            raise
        raise error from exc


def _unpicklable(tool: str, value: object, exc: Exception,
                 population: Population | None) -> BaseException:
    """Why the reply *value* of *tool* did not pickle, as an error to send back instead."""
    ran = None if population is None else population.last_phase
    if tool == "execute_action" and isinstance(value, list) and ran is not None:
        return unpicklable_messages(value, exc, population=population, phase=ran[0], step=ran[1])
    if tool == "snapshot" and isinstance(value, dict):
        return unpicklable_snapshot(value, exc, population=population)
    return exc


# --------------------------------------------------------------------------- the worker


@final
class WorkerState:
    """One worker's agents and the dispatch of the six tools onto them.

    The MCP server of a worker process (and each emulated worker) wraps one
    of these; :meth:`call` takes a tool name and its string arguments and
    returns the encoded reply. It never raises for a failure inside a tool:
    the failure is the reply -- also when the reply itself does not pickle (a
    payload or a state value that copies but does not pickle, such as an
    instance of a local class): that is an
    :class:`~simulacra.errors.UncopyableState` naming the agent and its
    attribute or message, the phase and the step.
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
            value = self._dispatch(tool, arguments or {})
            try:
                return encode(("ok", value))
            except Exception as exc:  # a payload or a state value that does not pickle
                raise _unpicklable(tool, value, exc, self._population) from exc
        except BaseException as exc:
            return encode(("error", pack_failure(exc)))

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
