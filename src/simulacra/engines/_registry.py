"""Backends by name: ``get_backend("processes", max_workers=8)``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from simulacra.errors import BackendUnavailable, ConfigError

from ._base import ExecutionBackend
from ._local import LocalBackend, ThreadPoolBackend
from ._processes import ProcessPoolBackend

__all__ = ["RESERVED_BACKENDS", "backend_names", "backend_options", "get_backend",
           "register_backend"]

#: name -> (factory, the keyword options it takes).
_REGISTRY: dict[str, tuple[Callable[..., ExecutionBackend], frozenset[str]]] = {
    "local": (LocalBackend, frozenset()),
    "threaded": (ThreadPoolBackend, frozenset({"max_workers"})),
    "processes": (ProcessPoolBackend, frozenset({"max_workers", "start_method", "partition"})),
}

#: Names kept for backends of later versions, with the options they will take.
RESERVED_BACKENDS: Final[dict[str, tuple[str, frozenset[str]]]] = {
    "async": ("asyncio, for LLM-heavy models", frozenset({"async_semaphore_limit"})),
    "pregel": ("bulk-synchronous supersteps", frozenset({"max_supersteps"})),
    "dask": ("a Dask cluster", frozenset({"scheduler_address", "n_workers", "partition"})),
    "mcp": ("remote MCP/HTTP workers", frozenset({"mcp_config"})),
    "emulator": ("an in-process emulator of MCP workers", frozenset({"mcp_config"})),
}


def backend_names() -> tuple[str, ...]:
    """The names :func:`get_backend` can build now, sorted."""
    return tuple(sorted(_REGISTRY))


def backend_options(name: str) -> frozenset[str]:
    """The keyword options backend *name* takes (also for reserved names).

    Raises:
        ConfigError: *name* is neither registered nor reserved.
    """
    if name in _REGISTRY:
        return _REGISTRY[name][1]
    if name in RESERVED_BACKENDS:
        return RESERVED_BACKENDS[name][1]
    raise _unknown(name)


def _unknown(name: object) -> ConfigError:
    return ConfigError(
        f"unknown backend {name!r} (known: {', '.join(backend_names())}; reserved for later "
        f"versions: {', '.join(sorted(RESERVED_BACKENDS))})"
    )


def get_backend(name: str, /, **options: Any) -> ExecutionBackend:
    """Build the execution backend registered as *name*.

    Args:
        name: ``"local"``, ``"threaded"`` or ``"processes"`` (or a name added
            with :func:`register_backend`).
        **options: The backend's keyword options, e.g. ``max_workers=8``.

    Raises:
        ConfigError: *name* is unknown (the message lists the known ones), or
            an option is not one the backend takes, or its value is bad.
        BackendUnavailable: *name* is reserved for a backend of a later version
            (``"async"``, ``"pregel"``, ``"dask"``, ``"mcp"``, ``"emulator"``).
    """
    key: object = name
    entry = _REGISTRY.get(name) if isinstance(key, str) else None
    if entry is None:
        if name in RESERVED_BACKENDS:
            raise BackendUnavailable(
                f"backend {name!r} ({RESERVED_BACKENDS[name][0]}) is reserved but not "
                f"implemented yet; available: {', '.join(backend_names())}"
            )
        raise _unknown(name)
    factory, accepted = entry
    unknown = sorted(set(options) - accepted)
    if unknown:
        takes = ", ".join(sorted(accepted)) or "no options"
        raise ConfigError(
            f"backend {name!r} has no option {unknown[0]!r} (it takes: {takes})"
        )
    return factory(**options)


def register_backend(name: str, factory: Callable[..., ExecutionBackend],
                     options: Iterable[str] = ()) -> None:
    """Make ``get_backend(name, **options)`` (and settings files) build *factory*.

    Args:
        name: The registry name; must not be taken or reserved.
        factory: Called with the options; returns an :class:`ExecutionBackend`.
        options: The keyword options *factory* takes.

    Raises:
        ConfigError: *name* is taken or reserved, or not a non-empty str.
    """
    key: object = name
    if not isinstance(key, str) or not key:
        raise ConfigError(f"name must be a non-empty str, got {key!r}")
    if name in _REGISTRY or name in RESERVED_BACKENDS:
        raise ConfigError(f"backend name {name!r} is already taken")
    _REGISTRY[name] = (factory, frozenset(options))


def unregister_backend(name: str) -> None:
    """Remove a backend added with :func:`register_backend` (the built-ins stay)."""
    if name in ("local", "threaded", "processes"):
        raise ConfigError(f"backend {name!r} is built in and cannot be removed")
    _REGISTRY.pop(name, None)
