"""State and payloads that cannot be copied or pickled: naming the culprit, after the failure.

Agent state is deep-copied for snapshots, initial state when it is added, and
mutable payloads when they are sent; whatever leaves a worker process is
pickled too. None of those copies is checked before it is made (they run on
the hot path). Only when one fails do these functions try the parts one at a
time, to build an :class:`~simulacra.errors.UncopyableState` that names the
agent, the attribute or message, the phase and step, and what would work.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

from simulacra.errors import UncopyableState

__all__ = [
    "COPY_ADVICE",
    "INITIAL_ADVICE",
    "PAYLOAD_ADVICE",
    "PICKLE_ADVICE",
    "culprit",
    "first_failure",
    "payload_error",
    "state_error",
    "type_name",
]

_K = TypeVar("_K")

#: What works instead of live objects (locks, files) in agent state.
COPY_ADVICE: Final = (
    "agent state must be plain data that copies: keep locks, open files, sockets and clients "
    "out of it (agents share nothing, so a lock per agent guards nothing); hold them at module "
    "level, or create them inside the action that uses them"
)
#: What works instead of live objects in initial state.
INITIAL_ADVICE: Final = (
    "initial state is copied when it is added, so that every run starts from the same state: "
    "pass plain data (numbers, strings, tuples, lists, dicts), and keep locks, open files and "
    "clients out of agent state"
)
#: What works instead of live objects in a payload.
PAYLOAD_ADVICE: Final = (
    "a payload that is not immutable is deep-copied for each recipient: send plain data "
    "(numbers, strings, tuples, lists, dicts), not locks, open files or other live objects"
)
#: What works for values that must leave a worker process.
PICKLE_ADVICE: Final = (
    "what crosses to or from a worker process must pickle: define its classes and functions "
    "at the top level of an importable module, not inside a function (a local class) or as a "
    "lambda; or run on a backend in this process ('local', 'threaded' or 'async')"
)


def _pickle(value: object) -> object:
    return pickle.dumps(value, 5)


def type_name(value: object) -> str:
    """The type of *value*, as ``module.qualname`` (just ``qualname`` for builtins)."""
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _a(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def first_failure(items: Iterable[tuple[_K, Any]],
                  attempt: Callable[[Any], object]) -> tuple[_K, Any, Exception] | None:
    """The first ``(key, value)`` of *items* for which ``attempt(value)`` raises, with the error."""
    for key, value in items:
        try:
            attempt(value)
        except Exception as exc:  # whatever a __deepcopy__ or __reduce__ raises
            return key, value, exc
    return None


#: How deep :func:`culprit` looks inside a value.
_DEPTH: Final = 12


def culprit(value: Any, attempt: Callable[[Any], object],
            path: str = "") -> tuple[str, Any, Exception] | None:
    """The innermost part of *value* for which ``attempt`` raises: ``(path, part, error)``.

    Looks into lists, tuples, sets, dicts (their values) and the attributes of
    plain instances, e.g. ``("[2]['lock']", <lock>, TypeError(...))``;
    ``("", value, error)`` when *value* fails but none of its parts does, and
    ``None`` when *value* itself does not fail.
    """
    try:
        attempt(value)
    except Exception as exc:  # whatever a __deepcopy__ or __reduce__ raises
        return _deeper(value, attempt, path, exc, depth=0, seen=set())
    return None


def _parts(value: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(value, list | tuple):
        return ((f"[{n}]", item) for n, item in enumerate(value))
    if isinstance(value, dict):
        return ((f"[{key!r}]", item) for key, item in value.items())
    if isinstance(value, set | frozenset):
        return (("{...}", item) for item in value)
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and not isinstance(value, type):
        return ((f".{key}", item) for key, item in state.items())
    return ()


def _deeper(value: Any, attempt: Callable[[Any], object], path: str, exc: Exception, *,
            depth: int, seen: set[int]) -> tuple[str, Any, Exception]:
    if depth < _DEPTH and id(value) not in seen:
        seen.add(id(value))
        for where, part in _parts(value):
            try:
                attempt(part)
            except Exception as inner:
                return _deeper(part, attempt, path + where, inner, depth=depth + 1, seen=seen)
    return path, value, exc


def _cause(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def state_error(agent: object, cls_name: str, found: tuple[str, Any, Exception] | None,
                exc: BaseException, *, pickled: bool, when: str, advice: str,
                phase: str | None = None, step: int | None = None,
                argument: bool = False) -> UncopyableState:
    """The error for agent state (or initial state) that cannot be copied or pickled.

    Args:
        agent: The agent's id.
        cls_name: The agent's class (its qualified name).
        found: ``(attribute, value, error)`` of the first attribute that fails
            alone (see :func:`first_failure`), or ``None``.
        exc: The failure of the whole copy or pickle.
        pickled: Whether it was a pickle (else a deep copy).
        when: What was being done, e.g. ``"when its state was copied for a snapshot"``.
        advice: What would work.
        phase: The phase name, if one applies.
        step: The step, if one applies.
        argument: The names are initial state arguments, not attributes.
    """
    verb = "pickled" if pickled else "copied"
    if found is None:
        what = f"its {'initial ' if argument else ''}state cannot be {verb} ({_cause(exc)})"
    else:
        name, value, error = found
        kind = "argument" if argument else "attribute"
        inner = culprit(value, _pickle if pickled else copy.deepcopy)
        if inner is not None and inner[0]:
            path, part, error = inner
            what = (f"{kind} {name!r} holds {_a(type_name(value))}, and {name}{path} in it is "
                    f"{_a(type_name(part))}, which cannot be {verb} ({_cause(error)})")
        else:
            what = (f"{kind} {name!r} holds {_a(type_name(value))}, which cannot be {verb} "
                    f"({_cause(error)})")
    error_out = UncopyableState(f"agent {agent!r} ({cls_name}): {what}, {when}; {advice}")
    error_out.agent, error_out.phase, error_out.step = agent, phase, step
    error_out.attribute = None if found is None else found[0]
    return error_out


def payload_error(sender: object, recipient: object, topic: str, payload: Any,
                  exc: BaseException, *, phase: str, step: int, pickled: bool,
                  cls_name: str | None = None) -> UncopyableState:
    """The error for a message payload that cannot be copied (when sent) or pickled.

    Args:
        sender: The sender's id.
        recipient: The recipient's id.
        topic: The message's topic.
        payload: The payload.
        exc: The copy's or pickle's error.
        phase: The phase that sent it.
        step: The step.
        pickled: Whether it failed to pickle (leaving a worker process), else
            to deep-copy (when sent).
        cls_name: The sender's class, when known.
    """
    who = f"agent {sender!r}" if cls_name is None else f"agent {sender!r} ({cls_name})"
    inner = culprit(payload, _pickle if pickled else copy.deepcopy)
    where = ""
    if inner is not None and inner[0]:
        path, part, exc = inner
        where = f" (payload{path} in it is {_a(type_name(part))})"
    if pickled:
        how = "cannot be pickled to leave its worker process"
        advice = PICKLE_ADVICE
    else:
        how = "cannot be copied"
        advice = PAYLOAD_ADVICE
    error = UncopyableState(
        f"{who} sent a message to {recipient!r} with topic {topic!r} in phase {phase!r} at "
        f"step {step} whose payload, {_a(type_name(payload))}{where}, {how} ({_cause(exc)}); "
        f"{advice}"
    )
    error.agent, error.recipient, error.topic = sender, recipient, topic
    error.phase, error.step = phase, step
    return error
