"""Classes and functions named as data: ``module:qualname``.

Agents are built, and phase actions run, wherever a backend puts them: in this
process, in a thread, in a worker process. Only names cross a process boundary,
so every agent class and every action must be importable by its module and
qualified name. These helpers turn an object into that name (refusing lambdas,
closures and anything else a worker could not find) and a name back into the
object.

``__main__`` is accepted: a worker process started with ``spawn`` or
``forkserver`` re-imports the main script under that name, exactly as
:mod:`pickle` expects (the script needs the usual ``if __name__ == "__main__":``
guard).
"""

from __future__ import annotations

from typing import Any

from simulacra.errors import ConfigError
from simulacra.executors import RefLoader

__all__ = ["object_ref", "resolve_ref"]

#: Agent classes and actions are named by module, never by file: a worker
#: process finds them by import, as pickle does. Classes and plain attributes
#: alike (the caller checks what it got).
_OBJECTS = RefLoader(files=False, callable_only=False)

_EXPECTED = "importable as module:qualname (defined with def or class at the top level of a module)"


def _describe(obj: object) -> str:
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    module = getattr(obj, "__module__", None)
    return f"{module}.{name}" if module else str(name)


def object_ref(obj: object, field: str) -> str:
    """Return ``"module:qualname"`` for *obj*, checking that it resolves back to *obj*.

    Args:
        obj: A class or function defined at the top level of a module, or a
            function defined in a class body at the top level (a method).
        field: The argument name to use in error messages.

    Returns:
        The reference, e.g. ``"examples.contagion.model:Bank.send_state"``.

    Raises:
        ConfigError: *obj* is a lambda, a closure or nested function, a bound
            method, a ``functools.partial`` or another object without a
            module and qualname, or its name leads to a different object.
    """
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise ConfigError(
            f"{field} must be {_EXPECTED}, got {type(obj).__name__} {obj!r}: it has no "
            "module and qualname (a functools.partial or a callable object?)"
        )
    if getattr(obj, "__self__", None) is not None and not isinstance(obj, type):
        raise ConfigError(
            f"{field} must be {_EXPECTED}, got the bound method {_describe(obj)}: name the "
            "function through its class (Bank.check, not bank.check)"
        )
    if "<lambda>" in qualname:
        raise ConfigError(
            f"{field} must be {_EXPECTED}, got the lambda {_describe(obj)}: a lambda has no "
            "name a worker process could import; define it with def"
        )
    if "<locals>" in qualname:
        raise ConfigError(
            f"{field} must be {_EXPECTED}, got {_describe(obj)}, defined inside a function: "
            "a worker process cannot import it; move it to the top level of a module"
        )
    ref = f"{module}:{qualname}"
    try:
        found = resolve_ref(ref, field)
    except ConfigError as exc:
        raise ConfigError(
            f"{field} must be {_EXPECTED}, but {ref} cannot be resolved: {exc}"
        ) from None
    if found is not obj:
        raise ConfigError(
            f"{field} must be {_EXPECTED}, but {ref} names a different object (was it "
            "redefined, or wrapped by a decorator that does not keep its name?)"
        )
    return ref


def resolve_ref(ref: str, field: str) -> Any:
    """Import and return the object that ``"module:qualname"`` names.

    Raises:
        ConfigError: *ref* is malformed, or its module or attribute is missing.
    """
    return _OBJECTS.resolve(ref, field)
