"""Trace: an immutable, digested sequence of records; first divergence between two."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeAlias, cast, overload

from simulacra.errors import ConfigError, DeterminismError, TraceError

from ._canonical import (
    _DIGEST_PREFIX,
    _HEADER_LINE,
    TRACE_SCHEME,
    TraceRecord,
    _check_record,
    _encode_checked,
    _short,
)

__all__ = [
    "Divergence",
    "HasTraceRecords",
    "Trace",
    "TraceLike",
    "assert_equivalent",
    "first_divergence",
]


class HasTraceRecords(Protocol):
    """Anything that exposes its records as ``trace_records``, such as a traced ``Sim``."""

    @property
    def trace_records(self) -> Iterable[TraceRecord] | None:
        """The records so far, or ``None`` when tracing is off."""
        ...


class TieCounts(Protocol):
    """A run's event and tie counts, such as :class:`simulacra.TieStats`."""

    @property
    def events(self) -> int: ...
    @property
    def ties(self) -> int: ...
    @property
    def across_shards(self) -> int: ...


def _tie_counts(value: object) -> TieCounts | None:
    if all(isinstance(getattr(value, name, None), int)
           for name in ("events", "ties", "across_shards")):
        return cast("TieCounts", value)
    return None


_MISSING = object()


class Trace:
    """An immutable sequence of ``(time, kind, who, payload)`` records with a digest.

    Records are validated and encoded (see :func:`encode_record`) when the trace
    is built, so a trace is a snapshot: mutating a payload object afterwards
    changes neither its equality nor its digest. Two traces are equal when their
    canonical encodings are, record by record.

    Args:
        records: The records, in order. A record may be a tuple or a list; an
            ``int`` time is stored as the equal ``float``.

    Raises:
        TraceError: A record is malformed; the message names its index.
        ConfigError: *records* is not iterable.
    """

    __slots__ = ("_digest", "_lines", "_records", "ties")

    #: The validated records, in order.
    _records: tuple[TraceRecord, ...]
    #: The canonical encoding of each record, aligned with _records. Equality,
    #: digest and divergence all read these, never the payload objects.
    _lines: tuple[bytes, ...]
    #: The hex digest, computed on first use.
    _digest: str | None
    #: How many events the run processed and how many tied (see
    #: :class:`~simulacra.TieStats`), when the trace came from a traced run
    #: (``Trace.of(sim)``, ``ShardedSim.trace()``); None otherwise. Not part of
    #: equality or the digest.
    ties: TieCounts | None

    def __init__(self, records: Iterable[TraceRecord], *, ties: TieCounts | None = None) -> None:
        try:
            iterator = iter(records)
        except TypeError:
            raise ConfigError(
                f"records must be an iterable of (time, kind, who, payload) tuples, "
                f"got {type(records).__qualname__}"
            ) from None
        checked: list[TraceRecord] = []
        lines: list[bytes] = []
        for index, rec in enumerate(iterator):
            try:
                good = _check_record(rec)
                lines.append(_encode_checked(good))
            except TraceError as exc:
                raise TraceError(f"record {index}: {exc}") from None
            checked.append(good)
        self._records = tuple(checked)
        self._lines = tuple(lines)
        self._digest = None
        self.ties = ties

    @classmethod
    def _make(cls, records: tuple[TraceRecord, ...], lines: tuple[bytes, ...]) -> Trace:
        """Build from records already checked and encoded (no re-encoding)."""
        self = object.__new__(cls)
        self._records = records
        self._lines = lines
        self._digest = None
        self.ties = None
        return self

    @classmethod
    def of(cls, source: TraceLike) -> Trace:
        """Return the trace of *source*.

        Args:
            source: A :class:`Trace` (returned as is); an object with a
                ``trace_records`` attribute, such as ``Sim(trace=True)`` or a
                :class:`MemoryTracer` (when it is ``None``, the object's
                ``tracer`` is tried, so ``Sim(trace=MemoryTracer())`` works
                too); or an iterable of records.

        Returns:
            The trace.

        Raises:
            ConfigError: *source* has ``trace_records`` equal to ``None`` and
                no in-memory tracer (tracing is off, or records go to a
                file), or is neither of the accepted kinds.
            TraceError: A record is malformed.
        """
        if isinstance(source, Trace):
            return source
        records = getattr(source, "trace_records", _MISSING)
        if records is None:
            # Sim(trace=tracer) keeps no records itself; a MemoryTracer has them.
            tracer = getattr(source, "tracer", None)
            if tracer is not None and tracer is not source:
                inner = getattr(tracer, "trace_records", None)
                if inner is not None:
                    return cls.of(tracer)
                raise ConfigError(
                    f"{type(source).__qualname__}.trace_records is None: its records go to "
                    f"a {type(tracer).__qualname__}, not to memory; pass its records instead "
                    "(for a JsonlTracer: Trace.from_jsonl(tracer.path))"
                )
            raise ConfigError(
                "tracing is off: create the Sim with trace=True "
                f"({type(source).__qualname__}.trace_records is None)"
            )
        if records is not _MISSING:
            if isinstance(records, Trace):
                return records
            return cls(cast("Iterable[TraceRecord]", records),
                       ties=_tie_counts(getattr(source, "ties", None)))
        if isinstance(source, str | bytes | bytearray) or not isinstance(source, Iterable):
            raise ConfigError(
                "expected a Trace, an object with trace_records (a Sim created with "
                f"trace=True) or an iterable of records, got {type(source).__qualname__}"
            )
        return cls(source)

    @property
    def records(self) -> tuple[TraceRecord, ...]:
        """The records, in order."""
        return self._records

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[TraceRecord]:
        return iter(self._records)

    @overload
    def __getitem__(self, index: int) -> TraceRecord: ...
    @overload
    def __getitem__(self, index: slice) -> Trace: ...
    def __getitem__(self, index: int | slice) -> TraceRecord | Trace:
        if isinstance(index, slice):
            return Trace._make(self._records[index], self._lines[index])
        return self._records[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        if self._digest is not None and other._digest is not None:
            return self._digest == other._digest
        return self._lines == other._lines

    def __hash__(self) -> int:
        return hash(self.digest())

    def __repr__(self) -> str:
        return f"<Trace of {len(self._records)} records, digest {self.digest()[:16]}>"

    def digest(self) -> str:
        """Return the hex SHA-256 of the trace.

        The hash covers ``TRACE_SCHEME`` and a newline, then each record's
        canonical encoding followed by a newline: exactly the bytes of the JSONL
        file after its header line. It is computed once and cached.

        Returns:
            64 lowercase hex digits.
        """
        if self._digest is None:
            sha = hashlib.sha256(_DIGEST_PREFIX)
            for line in self._lines:
                sha.update(line)
                sha.update(b"\n")
            self._digest = sha.hexdigest()
        return self._digest

    def summary(self) -> dict[str, object]:
        """What the trace holds, in a few numbers (plain data, for JSON).

        Returns:
            ``records`` (how many), ``digest``, ``kinds`` (records per kind, in
            kind order), and, when the trace came from a traced run (see
            :attr:`ties`), ``events`` (events processed), ``ties`` (events at
            the same instant as the event before them: the order there came
            from the tie-break rule) and ``ties_across_shards`` (of those, the
            ones at an instant with events on more than one shard).
        """
        kinds: dict[str, int] = {}
        for _, kind, _, _ in self._records:
            kinds[kind] = kinds.get(kind, 0) + 1
        out: dict[str, object] = {
            "records": len(self._records),
            "digest": self.digest(),
            "kinds": dict(sorted(kinds.items())),
        }
        if self.ties is not None:
            out["events"] = self.ties.events
            out["ties"] = self.ties.ties
            out["ties_across_shards"] = self.ties.across_shards
        return out

    def filter(self, kinds: Iterable[str] | None = None, who: str | None = None) -> Trace:
        """Return the records of the given kinds and/or actor, in their original order.

        Args:
            kinds: Keep only records whose kind is one of these; ``None`` keeps
                every kind.
            who: Keep only records of this actor; ``None`` keeps every actor.

        Returns:
            A new trace.

        Raises:
            ConfigError: *kinds* is a single ``str`` (wrap it in a list).
        """
        if isinstance(kinds, str):
            raise ConfigError(
                f"kinds must be an iterable of str, got the str {kinds!r}: write kinds=[{kinds!r}]"
            )
        wanted = None if kinds is None else frozenset(kinds)
        keep = [
            i
            for i, (_, kind, actor, _) in enumerate(self._records)
            if (wanted is None or kind in wanted) and (who is None or actor == who)
        ]
        return Trace._make(
            tuple(self._records[i] for i in keep), tuple(self._lines[i] for i in keep)
        )

    def to_jsonl(self, path: str | os.PathLike[str]) -> None:
        """Write the trace to *path* as JSON lines, atomically.

        The file holds a header line ``{"scheme":"simulacra.trace.v1"}`` and then
        one canonical record per line. It is written to a temporary file in the
        same directory, flushed and fsynced, then renamed over *path*: a reader
        never sees a half-written trace.

        Args:
            path: Where to write; an existing file is replaced.
        """
        target = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(target))
        tmp = os.path.join(
            directory, f".{os.path.basename(target)}.{secrets.token_hex(6)}.jsonl.tmp"
        )
        try:
            with open(tmp, "xb") as f:
                f.write(_HEADER_LINE)
                for line in self._lines:
                    f.write(line)
                    f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_directory(directory)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str], *, allow_truncated: bool = False) -> Trace:
        """Read a trace written by :meth:`to_jsonl` or :class:`JsonlTracer`.

        The result has the same digest as the trace that was written.

        Args:
            path: The file.
            allow_truncated: Drop a last line that is cut short (no newline and
                not valid JSON), which is what a process killed in the middle of
                a write leaves. Off by default: such a line is an error.

        Returns:
            The trace.

        Raises:
            TraceError: The file is empty, has a wrong header or a malformed
                line; the message names the path and the line number.
        """
        name = os.fspath(path)
        records: list[TraceRecord] = []
        lines: list[bytes] = []
        with open(name, "rb") as f:
            header = f.readline()
            if not header:
                raise TraceError(
                    f"{name}: empty file, expected the header line {_HEADER_LINE.decode().strip()}"
                )
            _check_header(name, header)
            for lineno, raw in enumerate(f, start=2):
                complete = raw.endswith(b"\n")
                try:
                    value = _parse_line(raw)
                except TraceError as exc:
                    if not complete and allow_truncated:
                        break
                    hint = (
                        ""
                        if complete
                        else " (the line is not terminated: a truncated write? "
                        "pass allow_truncated=True to drop it)"
                    )
                    raise TraceError(f"{name}:{lineno}: {exc}{hint}") from None
                try:
                    rec = _check_record(value)
                    line = _encode_checked(rec)
                except TraceError as exc:
                    raise TraceError(f"{name}:{lineno}: {exc}") from None
                records.append(rec)
                lines.append(line)
        return cls._make(tuple(records), tuple(lines))


TraceLike: TypeAlias = Trace | HasTraceRecords | Iterable[TraceRecord]
"""What :meth:`Trace.of` (and so :func:`first_divergence`) accepts."""


def _fsync_directory(directory: str) -> None:
    """Make a rename durable (POSIX); a no-op where directories cannot be opened."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(directory, flags)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _reject_constant(token: str) -> object:
    raise TraceError(f"{token} is not allowed (non-finite floats are written as {{'$float': ...}})")


def _object_without_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise TraceError(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def _parse_json(raw: bytes) -> object:
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise TraceError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise TraceError("blank line")
    try:
        return json.loads(
            text,
            parse_constant=_reject_constant,
            object_pairs_hook=_object_without_duplicates,
        )
    except json.JSONDecodeError as exc:
        raise TraceError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None


def _parse_line(raw: bytes) -> object:
    value = _parse_json(raw)
    if not isinstance(value, list):
        raise TraceError(
            f"expected a JSON array [time, kind, who, payload], got {type(value).__qualname__}"
        )
    return value


def _check_header(name: str, raw: bytes) -> None:
    try:
        header = _parse_json(raw)
    except TraceError as exc:
        raise TraceError(f"{name}:1: bad header line: {exc}") from None
    if not isinstance(header, dict) or "scheme" not in header:
        raise TraceError(
            f'{name}:1: expected the header line {{"scheme": {TRACE_SCHEME!r}}}, '
            f"got {_short(header)}"
        )
    if header["scheme"] != TRACE_SCHEME:
        raise TraceError(
            f"{name}:1: trace scheme {header['scheme']!r} is not supported, "
            f"expected {TRACE_SCHEME!r}"
        )


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where two traces part: the first record whose canonical encodings differ."""

    #: Index of the first differing record (the length of the shorter trace when
    #: one is a prefix of the other).
    index: int
    #: The record of the first trace at *index*, or ``None`` if it had ended.
    left: TraceRecord | None
    #: The record of the second trace at *index*, or ``None`` if it had ended.
    right: TraceRecord | None
    #: Up to three records just before *index*, which both traces share.
    context: tuple[TraceRecord, ...]

    def report(self, label_a: str = "left", label_b: str = "right") -> str:
        """Return a readable multi-line report, naming the two sides by label.

        Args:
            label_a: Name of the first trace.
            label_b: Name of the second trace.

        Returns:
            The report; its first line is ``traces diverge at record N:``.
        """
        width = max(len(label_a), len(label_b))
        lines = [f"traces diverge at record {self.index}:"]
        shown: list[str] = []
        for label, rec in ((label_a, self.left), (label_b, self.right)):
            text = f"<trace ended after {self.index} records>" if rec is None else _show(rec)
            shown.append(text)
            lines.append(f"  {label.ljust(width)}  {text}")
        if self.left is not None and self.right is not None and shown[0] == shown[1]:
            # Equal reprs, different encodings: show what actually differs.
            for label, rec in ((label_a, self.left), (label_b, self.right)):
                encoded = _encode_checked(rec).decode("utf-8", "backslashreplace")
                lines.append(f"  {label.ljust(width)}  canonical {encoded}")
        if self.context:
            first = self.index - len(self.context)
            lines.append("  preceded by (common to both):")
            lines.extend(f"    [{first + i}] {_show(rec)}" for i, rec in enumerate(self.context))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()


def _show(rec: TraceRecord) -> str:
    try:
        text = repr(rec)
    except Exception:  # a broken __repr__ must not hide the divergence
        text = _encode_checked(rec).decode("utf-8", "backslashreplace")
    return text if len(text) <= 300 else text[:297] + "..."


def digest(source: TraceLike) -> str:
    """The hex SHA-256 digest of *source*: a Trace, a traced Sim, or records.

    Shorthand for ``Trace.of(source).digest()``.
    """
    return Trace.of(source).digest()


def first_divergence(a: TraceLike, b: TraceLike) -> Divergence | None:
    """Find the first record where two traces differ.

    Records are compared by their canonical encodings, so a set payload equals
    the same set built in another order, and ``0.0`` differs from ``-0.0``.

    Args:
        a: Anything :meth:`Trace.of` accepts.
        b: Anything :meth:`Trace.of` accepts.

    Returns:
        ``None`` when the traces are equal, else where they part.
    """
    ta, tb = Trace.of(a), Trace.of(b)
    la, lb = ta._lines, tb._lines
    if la == lb:
        return None
    index = next(
        (i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y),
        min(len(la), len(lb)),
    )
    return Divergence(
        index=index,
        left=ta.records[index] if index < len(ta) else None,
        right=tb.records[index] if index < len(tb) else None,
        context=ta.records[max(0, index - 3) : index],
    )


def assert_equivalent(
    a: TraceLike,
    b: TraceLike,
    *,
    label_a: str = "reference",
    label_b: str = "candidate",
) -> None:
    """Check that two runs produced the same trace.

    Args:
        a: The reference; anything :meth:`Trace.of` accepts.
        b: The candidate; anything :meth:`Trace.of` accepts.
        label_a: Name of *a* in the report.
        label_b: Name of *b* in the report.

    Raises:
        DeterminismError: The traces differ. The message gives both digests
            and lengths, the index of the first differing record, both records
            there and the records before it.
    """
    ta, tb = Trace.of(a), Trace.of(b)
    divergence = first_divergence(ta, tb)
    if divergence is None:
        return
    width = max(len(label_a), len(label_b))
    raise DeterminismError(
        f"{label_a} and {label_b} traces are not equivalent\n"
        f"  {label_a.ljust(width)}  {len(ta)} records, digest {ta.digest()}\n"
        f"  {label_b.ljust(width)}  {len(tb)} records, digest {tb.digest()}\n"
        + divergence.report(label_a, label_b)
    )
