"""Callables named as data: ``module:qualname`` or ``path/to/file.py:qualname``.

Work crosses a process boundary as data, never as a live object, so a callable
that runs elsewhere must be one that the other side can import by name. This
module turns a callable into that name (refusing what cannot be named) and a
name back into the callable.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from simulacra.errors import ConfigError

__all__ = ["callable_ref", "main_script", "resolve_callable"]

#: Module names that do not name the same module in another process: a worker
#: started by ``spawn`` (or a Dask worker) has its own ``__main__``.
_MAIN_MODULES = frozenset({"__main__", "__mp_main__"})

_EXPECTED = "a module-level function importable as module:qualname"

#: Modules loaded from files by :func:`resolve_callable`, keyed by absolute path.
_FILE_MODULES: dict[str, ModuleType] = {}
_FILE_LOCK = threading.Lock()


def _describe(obj: object) -> str:
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    module = getattr(obj, "__module__", None)
    return f"{type(obj).__name__} {module}.{name}" if module else f"{type(obj).__name__} {name}"


def _refuse(field: str, obj: object, why: str) -> ConfigError:
    return ConfigError(f"{field} must be {_EXPECTED}, got {_describe(obj)}: {why}")


def main_script(ref: str) -> str | None:
    """How *ref* names a function of the program's own script: ``"file"``, ``"session"``, None.

    ``"file"``: the script file that runs as ``__main__`` (a worker process of
    ``multiprocessing`` has it as ``__mp_main__``, imported without its main
    block); ``"session"``: ``__main__`` without a file (an interactive session,
    a script read from stdin), which no other process can import.
    """
    where = ref.rpartition(":")[0]
    if where in _MAIN_MODULES:
        return "session"
    if is_file_ref(where):
        for name in _MAIN_MODULES:
            file = getattr(sys.modules.get(name), "__file__", None)
            if isinstance(file, str) and Path(file).resolve() == Path(where).resolve():
                return "file"
    return None


def callable_ref(fn: object, field: str = "fn", *, main: bool = False) -> str:
    """Return the reference that names *fn* in any process.

    Accepted: functions (and classes, or classmethods of classes) defined at the
    top level of an importable module, such that importing the module and
    walking the qualname gives back *fn* itself; or a reference string,
    ``"package.module:qualname"`` or ``"path/to/file.py:qualname"``, which is
    checked by resolving it (a relative file path is made absolute).

    With *main*, a function of the program's own script (``__main__``) is
    accepted too, as ``"/path/to/script.py:qualname"`` (a worker process
    imports the script as ``multiprocessing`` does, without its main block), or
    as ``"__main__:qualname"`` when the script has no file: the caller checks
    what can run it (:func:`main_script`).

    Args:
        fn: The callable to name, or its reference string.
        field: The argument name to use in the error message.
        main: Accept a function of the program's own script (see above).

    Returns:
        ``"package.module:qualname"`` or ``"/absolute/path/file.py:qualname"``.

    Raises:
        ConfigError: *fn* is a lambda, a nested function or closure, a bound
            method of an instance, a ``functools.partial`` or other callable
            object, is defined in ``__main__`` (which a worker process does not
            share), or its module and qualname do not lead back to it; or the
            reference string cannot be resolved to a callable.
    """
    if isinstance(fn, str):
        where, name = split_ref(fn, field)
        ref = f"{Path(where).resolve()}:{name}" if is_file_ref(where) else fn
        resolve_callable(ref, field)
        return ref
    if not callable(fn):
        raise _refuse(field, fn, "it is not callable")
    if _bound_to_instance(fn):
        raise _refuse(
            field,
            fn,
            "a bound method carries a live object, which cannot cross a process "
            "boundary; use a module-level function and pass the object's settings as config",
        )
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise _refuse(
            field,
            fn,
            "it has no module and qualname (a functools.partial or a callable "
            "object?); pass parameters through the config instead",
        )
    if "<lambda>" in qualname:
        raise _refuse(
            field,
            fn,
            "a lambda has no importable name; define it with def at the top level of a module",
        )
    if "<locals>" in qualname:
        raise _refuse(
            field,
            fn,
            "a function defined inside another function (a closure) has "
            "no importable name; move it to the top level of a module",
        )
    if module in _MAIN_MODULES and not main:
        raise _refuse(
            field,
            fn,
            "it is defined in __main__, which a worker process does not share; "
            "move it into a module, or name its file as 'path/to/file.py:function'",
        )
    ref = f"{module}:{qualname}"
    if module in _MAIN_MODULES:
        file = getattr(sys.modules.get(module), "__file__", None)
        if isinstance(file, str) and file.endswith(".py") and Path(file).is_file():
            ref = f"{Path(file).resolve()}:{qualname}"
    try:
        found = resolve_callable(ref, field)
    except ConfigError as exc:
        raise _refuse(field, fn, f"{ref} cannot be imported ({exc})") from None
    if found is not fn and found != fn:  # == for classmethods: a fresh bound method each time
        raise _refuse(
            field,
            fn,
            f"{ref} names a different object (was it redefined, or replaced by a "
            "decorator that does not keep its name?)",
        )
    return ref


def _bound_to_instance(fn: object) -> bool:
    """Whether *fn* is a method bound to an instance (a classmethod is bound to a class)."""
    return inspect.ismethod(fn) and not isinstance(fn.__self__, type)


def split_ref(ref: str, field: str = "fn") -> tuple[str, str]:
    """Split ``WHERE:QUALNAME`` into its two parts, checking their shape."""
    if not isinstance(ref, str):
        raise ConfigError(
            f"{field} must be a str 'module:qualname' or 'path/to/file.py:qualname', "
            f"got {type(ref).__name__} {ref!r}"
        )
    where, sep, qualname = ref.rpartition(":")
    if not sep or not where or not all(p.isidentifier() for p in qualname.split(".")):
        raise ConfigError(
            f"{field} must look like 'module:qualname' or 'path/to/file.py:qualname', got {ref!r}"
        )
    return where, qualname


def is_file_ref(where: str) -> bool:
    """Whether the WHERE part of a reference is a file path rather than a module name."""
    return where.endswith(".py") or "/" in where or "\\" in where


def resolve_callable(ref: str, field: str = "fn") -> Callable[..., Any]:
    """Import and return the callable that *ref* names.

    Args:
        ref: ``"package.module:qualname"``, or ``"path/to/file.py:qualname"``
            for a model kept in a file outside any package. A file is loaded
            once per process under a private module name derived from its
            absolute path, with its directory first on ``sys.path`` while it
            loads (so that it can import its sibling files).
        field: The argument name to use in error messages.

    Returns:
        The callable.

    Raises:
        ConfigError: The reference is malformed, its module or file cannot be
            found, or the name is missing or not callable.
    """
    where, qualname = split_ref(ref, field)
    if is_file_ref(where):
        module = _load_file(Path(where), field)
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (where == exc.name or where.startswith(f"{exc.name}.")):
                raise  # the module exists; one of its own imports is broken: a bug to show
            raise ConfigError(f"{field}: no module named {where!r} (from {ref!r})") from None
    obj: Any = module
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{field}: {where!r} has no attribute {qualname!r}") from None
    if not callable(obj):
        raise ConfigError(f"{field}: {ref!r} is not callable: its type is {type(obj).__name__}")
    result: Callable[..., Any] = obj
    return result


def _load_file(path: Path, field: str) -> ModuleType:
    path = path.resolve()
    key = str(path)
    for name in _MAIN_MODULES:  # the program's own script: the module it already is
        running = sys.modules.get(name)
        file = getattr(running, "__file__", None)
        if running is not None and isinstance(file, str) and Path(file).resolve() == path:
            return running
    with _FILE_LOCK:
        module = _FILE_MODULES.get(key)
        if module is not None:
            return module
        if path.is_dir():
            inside = [name for name in ("model.py", "__main__.py") if (path / name).is_file()]
            hint = f": name the file, e.g. {str(path / inside[0])!r}" if inside else ""
            raise ConfigError(f"{field}: {key!r} is a directory, not a Python file{hint}")
        if not path.is_file():
            raise ConfigError(f"{field}: file not found: {key!r}")
        name = "_simulacra_file_" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
        loader = importlib.machinery.SourceFileLoader(name, key)
        # A file location (not just an origin), so that the module has __file__.
        spec = importlib.util.spec_from_file_location(name, key, loader=loader)
        if spec is None:  # pragma: no cover (a SourceFileLoader always gives a spec)
            raise ConfigError(f"{field}: cannot load {key!r} as Python source")
        module = importlib.util.module_from_spec(spec)
        # A real sys.modules entry: dataclasses and typing look their module up there.
        sys.modules[name] = module
        directory = str(path.parent)
        sys.path.insert(0, directory)
        try:
            loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        finally:
            try:
                sys.path.remove(directory)
            except ValueError:  # the file removed it itself
                pass
        _FILE_MODULES[key] = module
        return module
