"""Small helpers shared by every layer (standard library only)."""

from __future__ import annotations

import contextlib
import gc
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, TypeVar

__all__ = ["claim_public_module", "describe_error", "did_you_mean", "install_hint",
           "naming", "os_problem", "plural", "yaml_problem"]


def claim_public_module(module_name: str, namespace: dict[str, Any]) -> None:
    """Rewrite ``__module__`` of the public names in *namespace* to *module_name*.

    Reprs, tracebacks and pickles then show ``simulacra.Sim`` rather than the
    private module that defines it. Only classes and functions defined inside
    simulacra are touched.
    """
    for name in namespace.get("__all__", ()):
        obj = namespace.get(name)
        mod = getattr(obj, "__module__", None)
        if (
            isinstance(mod, str)
            and mod.startswith("simulacra")
            and (isinstance(obj, type) or callable(obj))
        ):
            try:
                obj.__module__ = module_name
            except (AttributeError, TypeError):  # builtins and slots-only objects
                pass


class ModelWrapper:
    """A base for models that wrap another (``inner``): closing reaches the wrapped model.

    Recording, metering and guarding wrappers own no connection; the model at
    the bottom of the chain does. ``close()`` and ``aclose()`` pass through to
    ``inner``, so whoever closes the outermost model closes them all.
    """

    __slots__ = ()

    inner: Any

    def close(self) -> None:
        """Close the wrapped model (if it can be closed)."""
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    async def aclose(self) -> None:
        """Close the wrapped model's asyncio connections (if it has any)."""
        aclose = getattr(self.inner, "aclose", None)
        if callable(aclose):
            await aclose()

    async def aclose_loop(self) -> None:
        """Close the wrapped model's client of the running event loop (if it keeps one)."""
        release = getattr(self.inner, "aclose_loop", None)
        if callable(release):
            await release()


def describe_error(error: Mapping[str, Any],
                   mapping: str = "must be a mapping (a JSON object, a TOML table)") -> str:
    """One pydantic validation error as ``dotted.field message (got value)``."""
    where = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        message = mapping
    elif error["type"] == "extra_forbidden":
        message = "is not a known setting"
    else:
        message = str(error["msg"]).replace("Input should", "should")
    last = str(error["loc"][-1]).lower() if error["loc"] else ""
    counts_tokens = last.endswith(("tokens", "_token")) and ("max" in last or "budget" in last)
    if not counts_tokens and any(word in last for word in ("key", "token", "secret",
                                                           "password")):
        # Never echo what may be a credential (a key put in the config by mistake).
        return f"{where} {message} (its value is not shown; credentials belong in the " \
               "environment: sim.llm.api_key_env names the variable)"
    shown = repr(error.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{where} {message} (got {shown})"


def yaml_problem(exc: BaseException) -> str:
    """One line for a YAML error: ``line L, column C: <problem>`` (PyYAML's text spans lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def did_you_mean(name: object, choices: Iterable[str],
                 resolve: Callable[[str], str] | None = None) -> str:
    """``"; did you mean 'x'?"`` for the choice closest to *name*, or ``""`` if none is close.

    *resolve* maps the match to the name to suggest (an alias to what it stands for).
    """
    import difflib  # noqa: PLC0415  (only on the error path)

    close = difflib.get_close_matches(str(name), list(choices), n=1)
    if not close:
        return ""
    return f"; did you mean {(resolve or str)(close[0])!r}?"


def plural(count: int, noun: str, many: str | None = None, *, grouped: bool = False) -> str:
    """*count* and *noun* agreeing in number: ``"1 step"``, ``"3 steps"``, ``"0 steps"``.

    *many* is the plural where it is not *noun* + ``s`` (``plural(n, "entry", "entries")``);
    *grouped* writes the count with thousands separators (``"12,000 calls"``).
    """
    shown = f"{count:,}" if grouped else str(count)
    return f"{shown} {noun if count == 1 else (many or noun + 's')}"


def os_problem(exc: OSError) -> str:
    """What an OSError says went wrong, without the paths it names: ``"Is a directory"``.

    ``str(exc)`` is ``[Errno 21] Is a directory: 'x.yaml'``: a message that names the
    file itself would name it twice.
    """
    return exc.strerror or str(exc)


def naming(path: object, exc: BaseException) -> str:
    """*exc*'s message led by ``path:``, unless the message names *path* already.

    A :class:`~simulacra.RecordingError` begins with the store's path: prefixing
    it again printed the path twice in one line.
    """
    text = str(exc)
    return text if str(path) in text else f"{path}: {text}"


def install_hint(extra: str) -> str:
    """The command that installs the optional *extra*, as README.md gives it.

    simulacra is installed from a clone of its repository; it is not on the
    package index, so the hint names the checkout (``'.[report]'``), not a
    package called simulacra. *extra* may name several extras, comma-separated
    (``"parallel,plot"``).
    """
    return f"python -m pip install '.[{extra}]' in a clone of simulacra"


#: The oldest generation's collection threshold while a run is in progress (its
#: objects -- messages, events, held recordings -- live a phase or a step, long
#: enough to reach the oldest generation, and each full collection walks every
#: live object: at CPython 3.11's default of 10 they cost more than a messaging
#: model itself, 2.6x its run time at 100k agents, and 10% of a society run).
DEFERRED_GEN2: Final = 1000


@contextlib.contextmanager
def full_collections_deferred(enabled: bool = True) -> Iterator[None]:
    """Raise the oldest generation's GC threshold inside (to :data:`DEFERRED_GEN2`).

    The young generations are collected as usual; the old threshold comes back
    after, also on an exception. *enabled* False does nothing.
    """
    if not enabled:
        yield
        return
    old = gc.get_threshold()
    gc.set_threshold(old[0], old[1], max(old[2], DEFERRED_GEN2))
    try:
        yield
    finally:
        gc.set_threshold(*old)


def lazy_names(package: str, table: Mapping[str, str], namespace: dict[str, Any]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The PEP 562 ``__getattr__`` and ``__dir__`` of a package whose names load on first use.

    *table* maps each public name to the private module (relative to
    *package*) that defines it. The first use of a name imports its module and
    puts every public name of that module in *namespace* (the package's
    globals) at once, claimed as ``package.X`` (reprs, tracebacks and pickles
    never show the private module). Used as::

        __getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
    """

    def getattr_(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(where, package)
        names = [n for n, w in table.items() if w == where]
        loaded = {n: getattr(module, n) for n in names}
        claim_public_module(package, {"__all__": names, **loaded})
        namespace.update(loaded)
        return loaded[name]

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return getattr_, dir_


T = TypeVar("T")

#: The field names of each class :func:`fields_pickled` decorated, in order.
_PICKLED_FIELDS: dict[type, tuple[str, ...]] = {}


def _rebuilt(cls: type, values: tuple[Any, ...]) -> Any:
    """An instance of *cls* with its fields set to *values* (unpickling; no checks re-run)."""
    names = _PICKLED_FIELDS.get(cls)
    if names is None:  # a subclass: its own fields
        import dataclasses  # noqa: PLC0415

        names = _PICKLED_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    obj: Any = object.__new__(cls)
    setter = object.__setattr__
    for name, value in zip(names, values, strict=True):
        setter(obj, name, value)
    return obj


def fields_pickled(cls: type[T]) -> type[T]:
    """Pickle a frozen, slotted dataclass as its field values: a tuple, not a state walk.

    The dataclass's own pickling asks ``dataclasses.fields()`` for every object
    (a shard's turns send thousands of requests and replies a step). Pickles
    made before keep loading: the class keeps its ``__setstate__``.
    """
    import dataclasses  # noqa: PLC0415

    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    _PICKLED_FIELDS[cls] = names

    def reduce(self: Any) -> tuple[Any, ...]:
        kind = type(self)
        mine = names if kind is cls else _PICKLED_FIELDS.get(kind) or tuple(
            f.name for f in dataclasses.fields(kind))
        return (_rebuilt, (kind, tuple([getattr(self, name) for name in mine])))

    cls.__reduce__ = reduce  # type: ignore[method-assign]
    return cls

