"""Callables named as data: ``module:qualname`` or ``path/to/file.py:qualname``.

Work crosses a process boundary as data, never as a live object, so a callable
that runs elsewhere must be one that the other side can import by name. This
module turns a callable into that name (refusing what cannot be named) and a
name back into the callable.

:class:`RefLoader` is the one loader of references in simulacra: the agents'
``resolve_ref``, the societies' ``sim.world.factory`` and the command line's
TARGET use it too, each with its own options, so that a bad reference reads
the same wherever it was given.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from simulacra.errors import ConfigError

__all__ = ["RefLoader", "callable_ref", "main_script", "resolve_callable"]

#: Module names that do not name the same module in another process: a worker
#: started by ``spawn`` (or a Dask worker) has its own ``__main__``.
_MAIN_MODULES = frozenset({"__main__", "__mp_main__"})

_EXPECTED = "a module-level function importable as module:qualname"


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
    return CALLABLES.split(ref, field)


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
    result: Callable[..., Any] = CALLABLES.resolve(ref, field)
    return result


# -- the loader every caller uses -----------------------------------------------------

#: Serialises loading files (a thread pool may resolve the same file at once).
_LOAD_LOCK = threading.RLock()

#: The shapes a reference may take, as the error messages name them.
_SHAPES = "'module:qualname' or 'path/to/file.py:qualname'"
_MODULE_SHAPE = "'module:qualname'"


def _private_name(path: Path) -> str:
    """The ``sys.modules`` name of a file loaded by :func:`resolve_callable`."""
    return "_simulacra_file_" + hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:16]


def _prefix(field: str) -> str:
    return f"{field}: " if field else ""


@dataclass(frozen=True, slots=True)
class RefLoader:
    """How one caller turns ``"WHERE:QUALNAME"`` into an object; the words of its errors.

    Every reference in simulacra (a model function, an agent class, a world
    factory, a model file on the command line) goes through one of these, so
    that a missing file, module or name reads the same wherever it was given.
    Messages start with the field that held the reference (none for an empty
    field: the command line says ``error:`` instead):

    - ``FIELD must be a str 'module:qualname' or ...``, ``FIELD must look like ...``;
    - ``FIELD: file not found: 'x'``, and for a directory ``FIELD: 'd' is a
      directory, not a Python file: name the file, e.g. 'd/model.py'`` or
      ``FIELD: file not found: directory 'd' has no model.py``;
    - ``FIELD: no module named 'm' (from 'ref')`` (a module whose own imports
      are broken raises its own error, traceback and all: that is a bug to show);
    - ``FIELD: 'm' has no attribute 'q'``; ``FIELD: ref is not callable: its type is T``.

    Attributes:
        files: Accept ``path/to/file.py`` (or any WHERE with a slash) as well
            as module names.
        file_module: The ``sys.modules`` name a file is loaded under; the
            default is a private name derived from the absolute path, so that
            two files with one stem never meet.
        package_files: A file in a package folder (one with ``__init__.py``)
            is imported as ``package.stem``, with the folder's parent first on
            ``sys.path``, so that its relative imports work.
        main: A file that is the program's own script is the module it
            already runs as (``__main__``), not a second copy.
        directory_file: A directory given as WHERE names this file in it (the
            command line's ``model.py``); None refuses directories.
        callable_only: The object named must be callable.
    """

    files: bool = True
    file_module: Callable[[Path], str] = _private_name
    package_files: bool = False
    main: bool = False
    directory_file: str | None = None
    callable_only: bool = True

    def split(self, ref: object, field: str) -> tuple[str, str]:
        """Split ``WHERE:QUALNAME`` into its two parts, checking their shape."""
        shapes = _SHAPES if self.files else _MODULE_SHAPE
        if not isinstance(ref, str):
            raise ConfigError(f"{field} must be a str {shapes}, got {type(ref).__name__} {ref!r}")
        where, sep, qualname = ref.rpartition(":")
        if (not sep or not where or not all(p.isidentifier() for p in qualname.split("."))
                or (not self.files and not all(p.isidentifier() for p in where.split(".")))):
            raise ConfigError(f"{field} must look like {shapes}, got {ref!r}")
        return where, qualname

    def resolve(self, ref: str, field: str) -> Any:
        """Import and return the object *ref* names (loading a file once per process)."""
        where, qualname = self.split(ref, field)
        return self.lookup(self.module(where, field, ref), where, qualname, field, ref)

    def module(self, where: str, field: str, ref: str | None = None) -> ModuleType:
        """The module WHERE names, imported or loaded once per process."""
        path = self._path(where, field)
        if path is None:
            return self._import(where, field, ref)
        if self.main:
            for name in _MAIN_MODULES:  # the program's own script: the module it already is
                running = sys.modules.get(name)
                if running is not None and _file_of(running) == path.resolve():
                    return running
        if self.package_files:
            folder = path.parent
            if (folder / "__init__.py").is_file() and folder.name.isidentifier():
                return self._import_from_package(path, field)
        with _LOAD_LOCK:
            name = self.file_module(path.resolve())
            loaded = sys.modules.get(name)
            if loaded is not None and _file_of(loaded) == path.resolve():
                # Loaded once per process, like any import: executing the file again
                # would make new classes, and live objects hold the old ones.
                return loaded
            with _first_on_sys_path(path.parent):
                return _exec_file(name, path)

    @contextlib.contextmanager
    def scoped(self, where: str, field: str, ref: str | None = None) -> Iterator[ModuleType]:
        """The module WHERE names, for one use: ``sys.path`` and ``sys.modules`` restored after.

        Like ``python file.py`` and ``python -m module``, the file's folder (for a
        module, the working directory) is first on ``sys.path`` while the module
        is used, so that a model split over several files can import its parts.
        A file is executed afresh under :attr:`file_module`; modules imported by
        name stay imported, as any import would.
        """
        path = self._path(where, field)
        if path is None:
            with _first_on_sys_path(Path.cwd()):
                yield self._import(where, field, ref)
            return
        name = self.file_module(path.resolve())
        with _first_on_sys_path(path.parent):
            module = _exec_file(name, path)
            try:
                yield module
            finally:
                sys.modules.pop(name, None)

    def lookup(self, module: ModuleType, where: str, qualname: str, field: str,
               ref: str | None = None) -> Any:
        """Walk *qualname* from *module*; check that the result is callable if it must be."""
        obj: Any = module
        for part in qualname.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                hint = (" (a worker process cannot see classes and functions defined in an "
                        "interactive session or a notebook: move them into a module)"
                        if where in _MAIN_MODULES else "")
                raise ConfigError(
                    f"{_prefix(field)}{where!r} has no attribute {qualname!r}{hint}"
                ) from None
        if self.callable_only and not callable(obj):
            raise ConfigError(f"{_prefix(field)}{ref or f'{where}:{qualname}'} is not callable: "
                              f"its type is {type(obj).__name__}")
        return obj

    def _path(self, where: str, field: str) -> Path | None:
        """The file WHERE names (checked), or None for a module name."""
        if not self.files or not (
            is_file_ref(where) or (self.directory_file is not None and Path(where).is_dir())
        ):
            if not all(part.isidentifier() for part in where.split(".")):
                raise ConfigError(f"{_prefix(field)}file not found: {where!r} is neither a file "
                                  "nor a module name")
            return None
        path = Path(where)
        if path.is_dir():
            if self.directory_file is not None and (path / self.directory_file).is_file():
                return path / self.directory_file
            names = [self.directory_file] if self.directory_file else ["model.py", "__main__.py"]
            inside = [name for name in names if (path / name).is_file()]
            if inside:
                raise ConfigError(f"{_prefix(field)}{where!r} is a directory, not a Python "
                                  f"file: name the file, e.g. {str(path / inside[0])!r}")
            raise ConfigError(f"{_prefix(field)}file not found: directory {where!r} has no "
                              f"{names[0]}")
        if not path.is_file():
            raise ConfigError(f"{_prefix(field)}file not found: {where!r}")
        return path

    def _import(self, where: str, field: str, ref: str | None) -> ModuleType:
        try:
            return importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (where == exc.name or where.startswith(f"{exc.name}.")):
                raise  # the module exists; one of its own imports is broken: a bug to show
            raise ConfigError(
                f"{_prefix(field)}no module named {where!r} (from {ref or where!r})"
            ) from None

    @staticmethod
    def _import_from_package(path: Path, field: str) -> ModuleType:
        name = f"{path.parent.name}.{path.stem}"
        loaded = sys.modules.get(name)
        if loaded is not None:
            if _file_of(loaded) != path.resolve():
                raise ConfigError(f"{_prefix(field)}a different module {name!r} is already "
                                  f"imported (from {getattr(loaded, '__file__', '?')})")
            return loaded
        with _LOAD_LOCK, _first_on_sys_path(path.parent.parent):
            return importlib.import_module(name)


def _file_of(module: ModuleType) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if isinstance(file, str) and file else None


@contextlib.contextmanager
def _first_on_sys_path(directory: Path) -> Iterator[None]:
    entry = str(directory)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # the module removed it itself
            sys.path.remove(entry)


def _exec_file(name: str, path: Path) -> ModuleType:
    """Execute *path* as the module *name*, with a real ``sys.modules`` entry."""
    key = str(path.resolve())
    loader = importlib.machinery.SourceFileLoader(name, key)
    # A file location (not just an origin), so that the module has __file__.
    spec = importlib.util.spec_from_file_location(name, key, loader=loader)
    if spec is None:  # pragma: no cover (a SourceFileLoader always gives a spec)
        raise ConfigError(f"cannot load {key!r} as Python source")
    module = importlib.util.module_from_spec(spec)
    # A real sys.modules entry: dataclasses and typing look their module up there.
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except SyntaxError as exc:  # the user's file does not parse: one line that says where
        sys.modules.pop(name, None)
        raise ConfigError(f"{key}, line {exc.lineno}: {type(exc).__name__}: {exc.msg}") from None
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


#: The loader of :func:`resolve_callable`: files under private names, the
#: program's own script as itself.
CALLABLES = RefLoader(main=True)
