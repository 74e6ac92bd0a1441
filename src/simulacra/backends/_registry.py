"""Backends by name: ``get_backend("processes", max_workers=8)``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from simulacra._util import did_you_mean, install_hint
from simulacra.errors import BackendUnavailable, ConfigError

from ._async import AsyncBackend
from ._base import ExecutionBackend
from ._local import LocalBackend, ThreadPoolBackend
from ._processes import ProcessPoolBackend

__all__ = ["BACKEND_ALIASES", "OPTION_ALIASES", "PLUGIN_BACKENDS", "PLUGIN_REQUIRES",
           "RESERVED_BACKENDS",
           "backend_names", "backend_options", "canonical_backend", "canonical_options",
           "ensure_buildable", "get_backend", "register_backend"]

def _pregel_backend(max_supersteps: int = 100) -> ExecutionBackend:
    """``PregelBackend``, imported when it is first built.

    (``_pregel`` imports ``Model``'s types and ``Model`` imports this registry:
    importing ``_pregel`` here would close a circle.)
    """
    from ._pregel import PregelBackend  # noqa: PLC0415

    return PregelBackend(max_supersteps=max_supersteps)


def _async_backend(async_semaphore_limit: int = 128) -> ExecutionBackend:
    """``AsyncBackend`` under its settings name (``orchestration.async_semaphore_limit``)."""
    return AsyncBackend(semaphore_limit=async_semaphore_limit)


#: name -> (factory, the keyword options it takes).
_REGISTRY: dict[str, tuple[Callable[..., ExecutionBackend], frozenset[str]]] = {
    "local": (LocalBackend, frozenset()),
    "threaded": (ThreadPoolBackend, frozenset({"max_workers"})),
    "processes": (ProcessPoolBackend, frozenset({"max_workers", "start_method", "partition"})),
    "pregel": (_pregel_backend, frozenset({"max_supersteps"})),
    "async": (_async_backend, frozenset({"async_semaphore_limit"})),
}

#: Names kept for backends of later versions, with the options they will take.
RESERVED_BACKENDS: Final[dict[str, tuple[str, frozenset[str]]]] = {}

#: Backends that a higher layer provides (``simulacra.distributed``, layer 6).
#: This layer may not import it, so the module is imported by name the first
#: time one of its backends is asked for, and registers them itself with
#: :func:`register_backend` -- a plugin seam, like an entry point.
#: name -> (module, what it is, the options it takes, the extra that installs it).
PLUGIN_BACKENDS: Final[dict[str, tuple[str, str, frozenset[str], str]]] = {
    "dask": ("simulacra.distributed", "a Dask cluster",
             frozenset({"scheduler_address", "n_workers", "partition"}), "dask"),
    "mcp": ("simulacra.distributed", "remote MCP workers over streamable HTTP",
            frozenset({"mcp_config"}), "mcp"),
    "emulator": ("simulacra.distributed", "an in-process emulator of MCP workers",
                 frozenset({"mcp_config"}), "mcp"),
}

#: The top-level modules each plugin backend needs, checked before anything
#: starts (a worker process, a cluster), so that a missing extra is one line
#: naming it instead of a traceback from the first import deep inside.
PLUGIN_REQUIRES: Final[dict[str, tuple[str, ...]]] = {
    "dask": ("distributed",),
    "mcp": ("mcp", "httpx2", "uvicorn"),
    "emulator": ("mcp",),
}


def missing_modules(names: Iterable[str]) -> list[str]:
    """The modules of *names* that cannot be found here (without importing them)."""
    import importlib.util  # noqa: PLC0415

    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


#: Other names for the same backends: the words the executors and the society engines
#: use for the same ideas (``Experiment(backend="threads")``, ``sim.engine.mode=
#: sequential``), so that one vocabulary works everywhere.
BACKEND_ALIASES: Final[dict[str, str]] = {
    "sequential": "local", "inline": "local", "threads": "threaded", "thread": "threaded",
    "process": "processes", "asyncio": "async",
}


def canonical_backend(name: str) -> str:
    """The registered name of backend *name* (itself, or what its alias stands for)."""
    raw: object = name  # user input: not always a str
    return BACKEND_ALIASES.get(name, name) if isinstance(raw, str) else name


def backend_names() -> tuple[str, ...]:
    """The names :func:`get_backend` can build (built in, registered or plugin), sorted."""
    return tuple(sorted(set(_REGISTRY) | set(PLUGIN_BACKENDS)))


def _check_requires(name: str) -> None:
    """BackendUnavailable naming the extra, if a module plugin *name* needs is missing."""
    missing = missing_modules(PLUGIN_REQUIRES.get(name, ()))
    if missing:
        _, what, _, extra = PLUGIN_BACKENDS[name]
        raise BackendUnavailable(
            f"backend {name!r} ({what}) needs the package {missing[0]!r}, which is not "
            f"installed: {install_hint(extra)}"
        )


def _load_plugin(name: str) -> None:
    """Import the module that provides plugin backend *name* (it registers itself)."""
    module, what, _, extra = PLUGIN_BACKENDS[name]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend {name!r} ({what}) needs the package {exc.name!r}, which is not "
            f"installed: {install_hint(extra)}"
        ) from exc
    if name not in _REGISTRY:
        raise BackendUnavailable(f"backend {name!r} ({what}) is not implemented yet")


def ensure_buildable(name: str) -> None:
    """Check that :func:`get_backend` can build *name* here, importing its plugin.

    Raises:
        ConfigError: *name* is unknown.
        BackendUnavailable: *name* is reserved for a later version, or its
            plugin's dependencies are not installed.
    """
    key: object = name
    name = canonical_backend(name)
    if not isinstance(key, str) or (name not in _REGISTRY and name not in PLUGIN_BACKENDS
                                    and name not in RESERVED_BACKENDS):
        raise _unknown(key)
    if name in PLUGIN_BACKENDS:
        _check_requires(name)
    if name in _REGISTRY:
        return
    if name in PLUGIN_BACKENDS:
        _load_plugin(name)
        return
    raise BackendUnavailable(
        f"backend {name!r} ({RESERVED_BACKENDS[name][0]}) is reserved but not "
        f"implemented yet; available: {', '.join(backend_names())}"
    )


#: Other names for backend options: seed 001 calls the Dask backend's ``partition``
#: ``partition_strategy``.
OPTION_ALIASES: Final[dict[str, str]] = {"partition_strategy": "partition"}


def canonical_options(options: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """*options* with each alias (:data:`OPTION_ALIASES`) under its registered name.

    Raises:
        ConfigError: An option is given under both names.
    """
    result: dict[str, Any] = {}
    for key, value in options.items():
        name = OPTION_ALIASES.get(key, key)
        if name in result:
            raise ConfigError(
                f"{where}{name} is given twice ({key!r} is another name for {name!r}): "
                "give one of them")
        result[name] = value
    return result


def backend_options(name: str) -> frozenset[str]:
    """The keyword options backend *name* takes (also for reserved names).

    Raises:
        ConfigError: *name* is neither registered nor reserved.
    """
    name = canonical_backend(name)
    if name in _REGISTRY:
        return _REGISTRY[name][1]
    if name in PLUGIN_BACKENDS:
        return PLUGIN_BACKENDS[name][2]
    if name in RESERVED_BACKENDS:
        return RESERVED_BACKENDS[name][1]
    raise _unknown(name)


def _unknown(name: object) -> ConfigError:
    reserved = (f"; reserved for later versions: {', '.join(sorted(RESERVED_BACKENDS))}"
                if RESERVED_BACKENDS else "")
    hint = did_you_mean(name, [*backend_names(), *BACKEND_ALIASES], canonical_backend)
    return ConfigError(
        f"unknown backend {name!r} (known: {', '.join(backend_names())}{reserved}){hint}"
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
        BackendUnavailable: *name* is reserved for a backend of a later
            version, or is a plugin backend (``"dask"``, ``"mcp"``, ``"emulator"``)
            whose dependencies are not installed.
    """
    ensure_buildable(name)
    name = canonical_backend(name)
    factory, accepted = _REGISTRY[name]
    options = canonical_options(options)
    unknown = sorted(set(options) - accepted)
    if unknown:
        takes = ", ".join(sorted(accepted)) or "no options"
        raise ConfigError(
            f"backend {name!r} has no option {unknown[0]!r} (it takes: {takes})"
        )
    return factory(**options)


def register_backend(name: str, factory: Callable[..., ExecutionBackend],
                     options: Iterable[str] = (), *, plugin: bool = False) -> None:
    """Make ``get_backend(name, **options)`` (and settings files) build *factory*.

    Args:
        name: The registry name; must not be taken or reserved.
        factory: Called with the options; returns an :class:`ExecutionBackend`.
        options: The keyword options *factory* takes.
        plugin: Set by the module named in :data:`PLUGIN_BACKENDS` when it
            registers its own backend; any other name must be new.

    Raises:
        ConfigError: *name* is taken or reserved, or not a non-empty str. (A
            plugin name of :data:`PLUGIN_BACKENDS` is taken by its own module.)
    """
    key: object = name
    if not isinstance(key, str) or not key:
        raise ConfigError(f"name must be a non-empty str, got {key!r}")
    if name in _REGISTRY or name in RESERVED_BACKENDS or (
            name in PLUGIN_BACKENDS and not plugin):
        raise ConfigError(f"backend name {name!r} is already taken")
    _REGISTRY[name] = (factory, frozenset(options))


def unregister_backend(name: str) -> None:
    """Remove a backend added with :func:`register_backend` (the built-ins stay)."""
    if name in ("local", "threaded", "processes", "pregel", "async"):
        raise ConfigError(f"backend {name!r} is built in and cannot be removed")
    _REGISTRY.pop(name, None)
