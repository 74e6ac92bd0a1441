"""Recorders: objects the kernel calls as ``tracer.record(time, kind, who, payload)``.

Both implement the kernel's ``Tracer`` protocol structurally; this module does not
import the kernel.
"""

from __future__ import annotations

import hashlib
import os
from io import FileIO
from types import TracebackType

from simulacra.errors import ConfigError, TraceError

from ._canonical import _DIGEST_PREFIX, _HEADER_LINE, TraceRecord, _check_record, _encode_checked
from ._trace import Trace

__all__ = ["JsonlTracer", "MemoryTracer"]


class MemoryTracer:
    """A tracer that keeps records in a list, as ``Sim(trace=True)`` does internally.

    Recording is a single ``list.append``: records are validated when
    :meth:`trace` builds a :class:`Trace`. Payloads are kept by reference, so a
    payload mutated after it was recorded is traced as it is when :meth:`trace`
    is called; record immutable values (or snapshots) to avoid that.

    The tracer also exposes its list as :attr:`trace_records`, so it can be
    passed directly to :meth:`Trace.of`, :func:`first_divergence` and
    :func:`assert_equivalent`.
    """

    __slots__ = ("records",)

    #: The records so far, in the order they were recorded.
    records: list[TraceRecord]

    def __init__(self) -> None:
        self.records = []

    def record(self, time: float, kind: str, who: str, payload: object) -> None:
        """Append one record.

        Args:
            time: Simulated time of the record.
            kind: What happened (``"spawn"``, ``"resume"``, a user kind...).
            who: The actor it happened to.
            payload: Anything :func:`canonical` can encode.
        """
        self.records.append((time, kind, who, payload))

    @property
    def trace_records(self) -> list[TraceRecord]:
        """The same list as :attr:`records` (the ``Sim.trace_records`` spelling)."""
        return self.records

    def trace(self) -> Trace:
        """Return a :class:`Trace` snapshot of the records so far.

        Raises:
            TraceError: A record is malformed; the message names its index.
        """
        return Trace(self.records)

    def __len__(self) -> int:
        return len(self.records)


class JsonlTracer:
    """A tracer that streams records to a JSON-lines file as they happen.

    The file has the format :meth:`Trace.to_jsonl` writes and
    :meth:`Trace.from_jsonl` reads: a header line, then one canonical record per
    line. Records are written in batches of *flush_every*, by whole lines, so a
    run that crashes keeps every record of every completed batch, and a process
    killed mid-write leaves at most one cut-short last line (see
    ``Trace.from_jsonl(path, allow_truncated=True)``). :meth:`flush` and
    :meth:`close` also fsync the file.

    A running SHA-256 is kept, so :meth:`digest` equals
    ``Trace(records).digest()`` without reading the file back.

    Use it as a context manager, so the last batch is written even when the run
    raises::

        with JsonlTracer(run_dir / "trace.jsonl") as tracer:
            sim = Sim(seed=7, trace=tracer)
            sim.run(until=100.0)
        print(tracer.digest())

    Args:
        path: The file to write; an existing file is replaced.
        flush_every: Write the pending records to the file every this many
            records (and on :meth:`flush` and :meth:`close`).

    Raises:
        ConfigError: *flush_every* is not a positive int.
        OSError: The file cannot be created.
    """

    __slots__ = ("_count", "_file", "_flush_every", "_hash", "_path", "_pending")

    #: Path of the output file.
    _path: str
    #: Unbuffered file; None once closed. Unbuffered so that only whole lines, joined in
    #: _pending, ever reach the OS: a BufferedWriter would spill half a line when full.
    _file: FileIO | None
    #: Encoded lines (each ending in a newline) recorded since the last write.
    _pending: list[bytes]
    #: SHA-256 over the digest prefix and every recorded line, written or pending.
    _hash: hashlib._Hash
    #: Records recorded so far.
    _count: int
    _flush_every: int

    def __init__(self, path: str | os.PathLike[str], *, flush_every: int = 1000) -> None:
        if type(flush_every) is not int or flush_every < 1:
            raise ConfigError(f"flush_every must be an int >= 1, got {flush_every!r}")
        self._path = os.fspath(path)
        self._flush_every = flush_every
        self._pending = []
        self._hash = hashlib.sha256(_DIGEST_PREFIX)
        self._count = 0
        self._file = open(self._path, "wb", buffering=0)  # noqa: SIM115  (closed in close())
        try:
            _write_all(self._file, _HEADER_LINE)
        except BaseException:
            self._file.close()
            raise

    @property
    def path(self) -> str:
        """Path of the output file."""
        return self._path

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._file is None

    def __len__(self) -> int:
        return self._count

    def record(self, time: float, kind: str, who: str, payload: object) -> None:
        """Encode one record and queue it for writing.

        Args:
            time: Simulated time of the record.
            kind: What happened.
            who: The actor it happened to.
            payload: Anything :func:`canonical` can encode; it is encoded now,
                so later mutation of the object does not change the trace.

        Raises:
            TraceError: The tracer is closed, or the record is malformed (the
                message names its index); nothing is recorded then.
        """
        if self._file is None:
            raise TraceError(f"{self._path}: record() called on a closed JsonlTracer")
        try:
            line = _encode_checked(_check_record((time, kind, who, payload))) + b"\n"
        except TraceError as exc:
            raise TraceError(f"{self._path}: record {self._count}: {exc}") from None
        self._hash.update(line)
        self._pending.append(line)
        self._count += 1
        if len(self._pending) >= self._flush_every:
            self._write_pending(self._file)

    def digest(self) -> str:
        """Return the digest of every record so far, as :meth:`Trace.digest` would.

        Returns:
            64 lowercase hex digits.
        """
        return self._hash.copy().hexdigest()

    def flush(self) -> None:
        """Write the pending records and fsync the file.

        Raises:
            TraceError: The tracer is closed.
        """
        if self._file is None:
            raise TraceError(f"{self._path}: flush() called on a closed JsonlTracer")
        self._write_pending(self._file)
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Flush and close the file. Closing twice is harmless."""
        if self._file is None:
            return
        try:
            self.flush()
        finally:
            self._file.close()
            self._file = None

    def __enter__(self) -> JsonlTracer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._file is None else "open"
        return f"<JsonlTracer {self._path!r} {state}, {self._count} records>"

    def _write_pending(self, file: FileIO) -> None:
        if self._pending:
            _write_all(file, b"".join(self._pending))
            # Cleared only after a successful write: a failed write (disk full)
            # keeps the records for the next attempt.
            self._pending = []


def _write_all(file: FileIO, data: bytes) -> None:
    """Write all of *data*: a raw write may write only part of it."""
    view = memoryview(data)
    while view:
        written = file.write(view)
        view = view[written:]
