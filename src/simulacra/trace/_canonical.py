"""The canonical encoding: payloads to JSON values, records to bytes.

A trace digest is only worth something if the same record always encodes to the
same bytes: in another process, with another ``PYTHONHASHSEED``, on another
machine, on another backend. Everything here is chosen for that:

* sets are sorted by the canonical JSON text of their elements, never iterated
  in hash order;
* dicts are sorted by key (by canonical JSON text when a key is not a ``str``);
* floats are written with ``repr`` (shortest round-trip), so ``0.1`` stays
  ``0.1`` and reading a line back gives the same float bit for bit;
* unknown objects become their type's qualified name, never their ``repr()``
  (which usually contains a memory address).

The canonical form is a fixed point: ``canonical(canonical(x)) == canonical(x)``
for every payload. That is what lets :meth:`Trace.from_jsonl` re-encode what it
reads and get the original digest back. The price is that a user dict shaped
exactly like a tag (say ``{"$float": "inf"}``) encodes like the tagged value.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
import types
from collections import deque
from collections.abc import Mapping, Set
from typing import TypeAlias, cast

from simulacra.errors import TraceError

#: The address in a default repr (``<Cls object at 0x7f3a...>``): never the same twice.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

__all__ = [
    "TRACE_SCHEME",
    "JsonValue",
    "TraceRecord",
    "canonical",
    "encode_record",
]

#: Versioned domain separator of the digest and header of every JSONL trace. Any change
#: to the encoding that changes a single byte must come with a new scheme name.
TRACE_SCHEME = "simulacra.trace.v1"

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
"""A value :func:`canonical` returns: plain JSON, with ``$``-tagged objects for the rest."""

TraceRecord: TypeAlias = tuple[float, str, str, object]
"""One trace record: ``(time, kind, who, payload)``."""

# One configured, stateless encoder: building a JSONEncoder per call costs more than
# encoding a short record. allow_nan=False: a non-finite float that slipped past
# canonical() must fail loudly, not become the non-JSON token ``NaN``.
_ENCODER = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
)

# Types kept exactly as they are. Exact types only: a subclass may override
# __repr__/__str__, which the C encoder would then call.
_KEPT: frozenset[type] = frozenset({str, int, bool, type(None)})

_FUNCTION_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
)


def _dumps(value: JsonValue) -> str:
    """The canonical JSON text of an already canonical value."""
    return _ENCODER.encode(value)


def _to_bytes(text: str) -> bytes:
    # surrogatepass: a str with a lone surrogate is a legal Python str and must not make
    # tracing crash mid-run; from_jsonl decodes with the same error handler.
    return text.encode("utf-8", "surrogatepass")


def canonical(payload: object) -> JsonValue:
    """Map *payload* to a canonical JSON value, identical in every process and run.

    The mapping, in the order it is tried:

    * ``None``, ``bool``, ``int`` and ``str`` are kept.
    * A finite ``float`` is kept (and written with ``repr``, so it round-trips
      exactly). ``-0.0`` is kept distinct from ``0.0``: the two compare equal but
      behave differently (``1 / x``, ``math.copysign``), so a run that produces
      one where another produced the other has diverged. Non-finite floats become
      ``{"$float": "nan"}``, ``{"$float": "inf"}`` or ``{"$float": "-inf"}``;
      every NaN encodes alike.
    * ``list``, ``tuple`` (and their subclasses, such as named tuples) and
      ``collections.deque`` become lists.
    * A mapping whose keys are all exactly ``str`` becomes a JSON object (key
      order is irrelevant: objects are written with sorted keys). Any other
      mapping becomes ``{"$dict": [[key, value], ...]}``, with canonical keys and
      values, sorted by the canonical JSON text of the key, then of the value.
    * ``set`` and ``frozenset`` become a list of their canonical elements sorted
      by canonical JSON text.
    * ``bytes``, ``bytearray`` and ``memoryview`` become ``{"$bytes": hex}``.
    * An object whose type defines ``__trace__()`` becomes
      ``canonical(obj.__trace__())``; this takes precedence over every rule below.
    * An enum member becomes ``{"$enum": "Cls.NAME"}`` (a composite flag without
      a name: ``{"$enum": "Cls", "value": canonical(value)}``).
    * A dataclass instance becomes ``{"$dc": "Cls", field: canonical(value), ...}``
      over all of its fields.
    * An exception becomes ``{"$exc": "Cls", "args": canonical(exc.args)}``, with
      the memory address of a default ``repr()`` in a text argument (``<Event
      ... at 0x7f...>``, as the kernel's messages quote the object at fault)
      written as ``at 0x…``: it differs from run to run.
    * Subclasses of ``str``, ``int`` and ``float`` that match nothing above are
      reduced to the base value.
    * A class becomes ``{"$type": "Cls"}``; a function or method
      ``{"$fn": "qualname"}``.
    * Anything else becomes ``{"$obj": "Cls"}``: never ``repr()``, which usually
      contains a memory address. Give a type a ``__trace__`` method to have its
      state traced.

    Class names are ``__qualname__`` (``Outer.Inner``), without the module.

    Args:
        payload: Any object.

    Returns:
        A value made of ``None``, ``bool``, ``int``, finite ``float``, ``str``,
        ``list`` and ``dict`` with ``str`` keys only. Applying :func:`canonical`
        to it again returns an equal value.

    Raises:
        TraceError: *payload* contains a reference cycle.
    """
    return _canon(payload, set())


def _canon(x: object, active: set[int]) -> JsonValue:
    cls = type(x)
    if cls in _KEPT:
        return cast(JsonValue, x)
    if cls is float:
        return _canon_float(cast(float, x))
    if cls is list or cls is tuple:
        return _canon_seq(cast("list[object] | tuple[object, ...]", x), active)
    if cls is dict:
        return _canon_map(cast("dict[object, object]", x), active)
    return _canon_other(x, active)


def _canon_float(x: float) -> JsonValue:
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return {"$float": "nan"}
    return {"$float": "inf" if x > 0 else "-inf"}


def _enter(x: object, active: set[int]) -> int:
    oid = id(x)
    if oid in active:
        raise TraceError(
            f"payload contains a reference cycle through a {type(x).__qualname__}: "
            "a trace payload must be a finite tree"
        )
    active.add(oid)
    return oid


def _canon_seq(x: list[object] | tuple[object, ...] | deque[object], active: set[int]) -> JsonValue:
    oid = _enter(x, active)
    try:
        return [_canon(item, active) for item in x]
    finally:
        active.discard(oid)


def _canon_map(x: Mapping[object, object], active: set[int]) -> JsonValue:
    oid = _enter(x, active)
    try:
        items = list(x.items())
        if all(type(k) is str for k, _ in items):
            items.sort(key=lambda kv: cast(str, kv[0]))
            return {cast(str, k): _canon(v, active) for k, v in items}
        pairs = [(_canon(k, active), _canon(v, active)) for k, v in items]
        # Sort on the texts alone: comparing the JSON values themselves could raise
        # (dict < dict), and pairs with equal texts are interchangeable anyway.
        keyed = sorted(
            (((_dumps(k), _dumps(v)), i) for i, (k, v) in enumerate(pairs)),
            key=lambda t: t[0],
        )
        return {"$dict": [[pairs[i][0], pairs[i][1]] for _, i in keyed]}
    finally:
        active.discard(oid)


def _canon_set(x: Set[object], active: set[int]) -> JsonValue:
    oid = _enter(x, active)
    try:
        elements = [_canon(e, active) for e in x]
    finally:
        active.discard(oid)
    # Sort on the text alone: two elements with equal text are interchangeable, and
    # comparing the JSON values themselves could raise (dict < dict).
    keyed = sorted(((_dumps(e), i) for i, e in enumerate(elements)), key=lambda t: t[0])
    return [elements[i] for _, i in keyed]


def _canon_other(x: object, active: set[int]) -> JsonValue:
    cls = type(x)
    # Looked up on the type, so a class that defines __trace__ for its instances is
    # not itself mistaken for a traceable instance.
    if hasattr(cls, "__trace__"):
        oid = _enter(x, active)
        try:
            return _canon(x.__trace__(), active)  # type: ignore[attr-defined]
        finally:
            active.discard(oid)
    if isinstance(x, enum.Enum):
        # typeshed says str, but a composite flag value has no name of its own.
        name: str | None = getattr(x, "name", None)
        if name is None:
            return {"$enum": cls.__qualname__, "value": _canon(x.value, active)}
        return {"$enum": f"{cls.__qualname__}.{name}"}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        oid = _enter(x, active)
        try:
            out: dict[str, JsonValue] = {"$dc": cls.__qualname__}
            for field in dataclasses.fields(x):
                out[field.name] = _canon(getattr(x, field.name), active)
            return out
        finally:
            active.discard(oid)
    if isinstance(x, BaseException):
        return {"$exc": cls.__qualname__,
                "args": _canon(tuple(_ADDRESS.sub(" at 0x…", a) if a.__class__ is str else a
                                     for a in x.args), active)}
    if isinstance(x, float):
        return _canon_float(float.__float__(x))
    if isinstance(x, int):  # bool cannot be subclassed; IntEnum was handled above
        return int.__int__(x)
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, bytes | bytearray):
        return {"$bytes": bytes(x).hex()}
    if isinstance(x, memoryview):
        return {"$bytes": x.tobytes().hex()}
    if isinstance(x, Mapping):
        return _canon_map(x, active)
    if isinstance(x, list | tuple | deque):
        return _canon_seq(x, active)
    if isinstance(x, Set):
        return _canon_set(x, active)
    if isinstance(x, type):
        return {"$type": x.__qualname__}
    if isinstance(x, _FUNCTION_TYPES):
        return {"$fn": getattr(x, "__qualname__", cls.__qualname__)}
    return {"$obj": cls.__qualname__}


def _short(value: object) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _check_record(rec: object) -> TraceRecord:
    """Validate the shape of one record; return it with its time as a float.

    Raises:
        TraceError: The message names the offending field; callers prefix where.
    """
    if type(rec) is not tuple:
        if not isinstance(rec, tuple | list):
            raise TraceError(
                "a record must be a 4-tuple (time, kind, who, payload), "
                f"got {type(rec).__qualname__} {_short(rec)}"
            )
        rec = tuple(rec)
    if len(rec) != 4:
        raise TraceError(
            f"a record must be a 4-tuple (time, kind, who, payload), got {len(rec)} items"
        )
    time, kind, who, payload = rec
    if type(time) is not float:
        if isinstance(time, bool) or not isinstance(time, int | float):
            raise TraceError(
                f"time must be a finite float, got {type(time).__qualname__} {_short(time)}"
            )
        try:
            time = float(time)
        except OverflowError:
            raise TraceError(f"time must be a finite float, got {_short(time)}") from None
    if not math.isfinite(time):
        raise TraceError(f"time must be a finite float, got {time!r}")
    if type(kind) is not str:
        raise TraceError(f"kind must be a str, got {type(kind).__qualname__} {_short(kind)}")
    if type(who) is not str:
        raise TraceError(f"who must be a str, got {type(who).__qualname__} {_short(who)}")
    return (time, kind, who, payload)


def _encode_checked(rec: TraceRecord) -> bytes:
    """Canonical bytes of a record already passed through :func:`_check_record`."""
    time, kind, who, payload = rec
    if type(payload) not in _KEPT:  # most kernel records carry None or a str
        payload = _canon(payload, set())
    return _to_bytes(_ENCODER.encode([time, kind, who, payload]))


def encode_record(rec: TraceRecord) -> bytes:
    """Return the canonical bytes of one record, without a line terminator.

    The bytes are the compact JSON array ``[time, kind, who, canonical(payload)]``
    with sorted keys, UTF-8 (non-ASCII text is written as is). *time* is written
    as a float, so an ``int`` time encodes like the equal float.

    Example:
        >>> encode_record((1, "spawn", "customer#1", {"b": 0.1, "a": {"y", "x"}}))
        b'[1.0,"spawn","customer#1",{"a":["x","y"],"b":0.1}]'

    Args:
        rec: A ``(time, kind, who, payload)`` tuple.

    Returns:
        The canonical encoding; equal records give equal bytes in every process.

    Raises:
        TraceError: *rec* is not a 4-tuple with a finite numeric time and ``str``
            kind and who, or its payload contains a reference cycle.
    """
    return _encode_checked(_check_record(rec))


#: The first line of every JSONL trace file.
_HEADER_LINE = _to_bytes(_dumps({"scheme": TRACE_SCHEME})) + b"\n"
#: What the digest hashes before the first record.
_DIGEST_PREFIX = TRACE_SCHEME.encode("ascii") + b"\n"
