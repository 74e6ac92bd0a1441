"""Record and replay: a content-addressed SQLite store of completions, and the models on it.

A recording is keyed by ``(request key, agent, n)``: the SHA-256 of the
canonical request plus its call site. A run replayed from the store is exact
(the same completions, whatever the order the calls are made in) and makes no
model calls; in strict mode a call the store does not hold fails with
:class:`~simulacra.errors.ReplayMiss`, naming the call site.

The file (format ``simulacra.llm.recordings.v2``) keeps every text once: each
distinct chat message and each distinct completion is a row of ``blobs``,
keyed by the SHA-256 of its canonical JSON and deflated (``zlib``, with a
preset dictionary of the JSON the store holds) when that makes it smaller. A
call row of ``completions`` holds the raw 32-byte request key, the call site,
the id of its completion's blob and the request, as the ids of the blobs of
its settings (all but the messages) and of its messages. A society run's
requests share their settings and their system prompt (and equal replies are
one blob), so a call costs a fraction of its JSON (about 0.8 KB a scripted call of the
social demo, against 4.6 KB in v1; ``bench/recording_size.py``). A held store (a society
run's) deflates only texts of 4 KB or more: about 1.5 KB a scripted call, written faster.

A file of the earlier layout (``simulacra.llm.recordings.v1``) is upgraded in
place when it is opened for writing (one transaction, then ``VACUUM``); opened
read-only, it is read through an upgraded copy in memory and left as it is. An
older simulacra refuses a v2 file with a :class:`~simulacra.errors.RecordingError`
naming the format.

Writes are durable when :meth:`RecordingStore.put` returns, as in v1: the
call is committed (WAL, ``synchronous=NORMAL``: it survives the process dying,
not a power cut). A store on :meth:`~RecordingStore.hold` (a society run's)
holds its writes until :meth:`~RecordingStore.commit`, one transaction per
step: a call is durable once its step's commit returned, and the calls of a
step a kill cut short are asked again by the resumed run. Writers that
arrive while another commit is under way wait, and the first of them commits
them all in one transaction (a group commit), with a few multi-row
statements; a text the store has seen lately costs no statement and no
compression.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import pickle
import signal
import sqlite3
import sys
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, NamedTuple

from simulacra._util import ModelWrapper
from simulacra.errors import (
    ConfigError,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
    RecordingDamaged,
    RecordingError,
    ReplayMiss,
)

from ._offload import FRAME, Offload, WriterGone
from ._types import (
    CallSite,
    ChatMessage,
    Completion,
    CompletionRequest,
    LanguageModel,
    canonical_json,
    completion_text,
    message_json,
    message_text,
)

__all__ = ["STORE_FORMAT", "RecordingModel", "RecordingStore", "ReplayModel"]

STORE_FORMAT = "simulacra.llm.recordings.v2"
"""The format tag written into every store; v1 files are upgraded, other tags refused."""

_FORMAT_V1 = "simulacra.llm.recordings.v1"

_NO_AGENT, _NO_N = "", -1  # the row of a call made without a call site

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (
    id INTEGER PRIMARY KEY,
    sha256 BLOB NOT NULL UNIQUE,
    codec INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS completions (
    request_key BLOB NOT NULL,
    agent TEXT NOT NULL,
    n INTEGER NOT NULL,
    completion INTEGER NOT NULL,
    request TEXT,
    PRIMARY KEY (request_key, agent, n)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS failures (
    request_key BLOB NOT NULL,
    agent TEXT NOT NULL,
    n INTEGER NOT NULL,
    error TEXT NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (request_key, agent, n)
) WITHOUT ROWID;
"""

#: How a blob (or a request's body) is stored: as it is, or raw deflate with _ZDICT.
_RAW, _DEFLATE = 0, 1
#: Shorter texts are stored as they are (deflate would not pay for its header).
_MIN_DEFLATE = 24
#: A held store (a society run's, see RecordingStore.hold) keeps texts shorter than this as
#: they are: deflating one costs about 8 us whatever its length (zlib builds its trees for
#: each), more than everything else a scripted call's recording costs; longer ones (a real
#: model's prompts) are deflated. Either codec is read by every v2 reader.
_HELD_RAW = 4096
#: The preset dictionary of codec 1: the JSON a store holds (field names, the
#: request scheme, the social prompt convention, scripted replies), most common
#: last. FROZEN: files depend on these exact bytes; another dictionary is
#: another codec.
_ZDICT = "".join((
    '{"arguments_json":"{}","id":"call_","name":""}',
    '{"description":"","name":"","parameters":{"properties":{},"required":[],"type":"object"}}',
    '{"content":"","name":"","role":"tool"}{"content":"","role":"assistant"}',
    '"metadata":{"created":,"id":"chatcmpl-","object":"chat.completion",'
    '"system_fingerprint":"fp_","usage":{"completion_tokens":,"prompt_tokens":,'
    '"total_tokens":}}',
    '{"max_tokens":null,"messages":[],"model":"","response_schema":null,'
    '"scheme":"simulacra.llm.request.v1","seed":null,"temperature":0.0,"tools":[]}',
    '{"content":"You are a helpful assistant.","role":"system"}',
    r'{"content":"You are @. Persona: . Interests: .\nAGENTS: @\nFEED:\n#1 @ (reply to #): '
    r'\nMENTIONS: none\nTASK: choose one action. Reply with JSON: {\"action\": \"post\"|'
    r'\"reply\"|\"like\"|\"follow\"|\"idle\", \"text\": str, \"target\": int|null}",'
    '"role":"user"}',
    '{"completion_tokens":0,"finish_reason":"stop","metadata":{"provider":"scripted",'
    '"rule":"social"},"model":"scripted","prompt_tokens":0,"text":"',
    r'{\"action\": \"reply\", \"text\": \"\", \"target\": null}","tool_calls":[]}',
)).encode("utf-8")

#: The provider errors a failed call is replayed as, by the name the store keeps.
_REPLAYED_ERRORS: dict[str, type[ProviderError]] = {
    "ProviderError": ProviderError, "RateLimited": RateLimited,
    "ProviderTimeout": ProviderTimeout,
}


def _replayed(error: str, message: str) -> ProviderError:
    """The recorded failure of a call, raised again: same type, same message."""
    failure = _REPLAYED_ERRORS.get(error, ProviderError)(message)
    failure.replayed = True  # type: ignore[attr-defined]
    return failure


def _site_columns(site: CallSite | None) -> tuple[str, int]:
    if site is None:
        return _NO_AGENT, _NO_N
    if not isinstance(site, CallSite):
        raise ConfigError(f"site must be a CallSite or None, got {type(site).__name__} {site!r}")
    return site.agent, site.n


def _site_of(agent: str, n: int) -> CallSite | None:
    return None if n == _NO_N else CallSite(agent, n)




def _key_bytes(key: object) -> bytes:
    """The raw SHA-256 digest a request key (``request.key()``, 64 hex digits) spells."""
    if type(key) is str and len(key) == 64:
        try:
            raw = bytes.fromhex(key)
        except ValueError:
            pass
        else:  # 32 bytes that spell it back: lowercase hex digits, nothing else
            if raw.hex() == key:
                return raw
    raise ConfigError("request key must be a request's key (request.key(): 64 lowercase hex "
                      f"digits of SHA-256), got {key!r}")


#: Deflaters with _ZDICT set, by window bits, that _pack copies (setting a
#: dictionary, and clearing a fresh deflater's tables, cost more than deflating
#: a short text). A small window and hash for short texts, the largest for long ones.
_PRIMED: dict[int, Any] = {}
_SHORT = 4096 - len(_ZDICT)  # the longest text the small window holds with the dictionary


def _deflater(size: int) -> Any:
    bits = 12 if size <= _SHORT else 15
    primed = _PRIMED.get(bits)
    if primed is None:
        primed = _PRIMED[bits] = zlib.compressobj(6, zlib.DEFLATED, -bits, 4 if bits == 12 else 8,
                                                  zlib.Z_DEFAULT_STRATEGY, _ZDICT)
    return primed.copy()


def _pack(data: bytes) -> tuple[int, bytes]:
    """``(codec, stored bytes)`` for *data*: deflated when that is shorter."""
    if len(data) >= _MIN_DEFLATE:
        deflate = _deflater(len(data))
        packed = deflate.compress(data) + deflate.flush()
        if len(packed) < len(data):
            return _DEFLATE, packed
    return _RAW, data


def _unpack(codec: object, data: object) -> bytes:
    """The bytes :func:`_pack` was given; ValueError if *data* is not what *codec* says."""
    if not isinstance(data, bytes):
        raise ValueError(f"stored value is {type(data).__name__}, not bytes")
    if codec == _RAW:
        return data
    if codec == _DEFLATE:
        inflate = zlib.decompressobj(-15, _ZDICT)
        try:
            out = inflate.decompress(data) + inflate.flush()
        except zlib.error as exc:
            raise ValueError(f"cannot inflate: {exc}") from None
        if not inflate.eof or inflate.unused_data:
            raise ValueError("deflate stream truncated or followed by junk")
        return out
    raise ValueError(f"unknown codec {codec!r}")


def _encode(value: Any) -> bytes:
    return canonical_json(value).encode("utf-8")


class _Blob:
    """A text to store once: its SHA-256, its bytes, and (once packed) its stored form."""

    __slots__ = ("data", "digest", "packed")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.digest = hashlib.sha256(data).digest()
        self.packed: tuple[int, bytes] | None = None

    def pack(self) -> tuple[int, bytes]:
        if self.packed is None:
            self.packed = _pack(self.data)
        return self.packed


def _request_blobs(request: Mapping[str, Any]) -> list[_Blob]:
    """A request (``to_dict()``) as blobs: its settings (all but the messages), its messages."""
    settings = {k: v for k, v in request.items() if k != "messages"}
    return [_Blob(_encode(settings)), *(_Blob(_encode(m)) for m in request.get("messages", ()))]


#: Rows an upgrade from v1 reads and writes at a time, and the blob ids it remembers.
_MIGRATION_BATCH, _MIGRATION_KNOWN = 512, 100_000

#: A write of the queue: ``("call", key, agent, n, completion blob, request blobs or None)``
#: or ``("failure", key, agent, n, (error type name, message))``.
_Row = tuple[Any, ...]

#: Rows per INSERT: a group's rows go in a few statements of these sizes (a
#: statement releases the GIL and takes it back; a thread that waits for it
#: back pays a switch), and the few sizes keep the statement cache warm.
_CHUNKS = (64, 16, 4, 1)
#: Rows per INSERT of a write-behind (RecordingStore.commit(wait=False)): its thread
#: takes the GIL back after every statement, and each time waits up to the switch
#: interval (5 ms) for the thread running the society to let go of it; 470 small
#: statements a step of 10,000 calls made the writer five times slower than the step.
#: Sizes whose parameters exceed the SQLite build's limit are skipped.
_BIG_CHUNKS = (2048, 512, 64, 16, 4, 1)
_SQL: dict[tuple[str, int], str] = {}


def _insert(db: sqlite3.Connection, sql: str, width: int, rows: list[tuple[Any, ...]],  # noqa: PLR0917
            tail: str = "", chunks: tuple[int, ...] = _CHUNKS) -> int:
    """``sql VALUES (?, ...), ... tail`` for *rows*, a few statements; the rows inserted."""
    done, inserted = 0, 0
    limit = _variable_limit(db)
    for size in chunks:
        if size * width > limit:
            continue
        while len(rows) - done >= size:
            text = _SQL.get((sql, size))
            if text is None:
                one = "(" + ", ".join("?" * width) + ")"
                text = _SQL[(sql, size)] = f"{sql} VALUES {', '.join([one] * size)}{tail}"
            cursor = db.execute(text, [v for row in rows[done:done + size] for v in row])
            inserted += max(cursor.rowcount, 0)
            done += size
    return inserted


#: A call recorded again at its site replaces the completion (and keeps a request).
_UPSERT_CALL = (" ON CONFLICT (request_key, agent, n) DO UPDATE SET completion = "
                "excluded.completion, request = COALESCE(excluded.request, request)")


class _Batch(NamedTuple):
    """A write-behind's rows as statement parameters, blob ids assigned (see _prepare)."""

    epoch: int
    blobs: list[tuple[Any, ...]]
    calls: list[tuple[Any, ...]]
    failures: list[tuple[Any, ...]]


def _variable_limit(db: sqlite3.Connection) -> int:
    """How many ``?`` one statement may hold on *db* (999 before SQLite 3.32)."""
    try:
        return int(db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    except (AttributeError, sqlite3.Error):  # Python < 3.11 has no getlimit
        return 999


def _write_rows(db: sqlite3.Connection, rows: list[_Row], known: dict[bytes, int]
                ) -> dict[bytes, int]:
    """Write *rows* (inside the caller's transaction); return the new blobs' ids by digest.

    *known* maps the digests of blobs the store holds to their ids; the blobs
    not in it are inserted with ids after the largest (or, when the store has
    them already, looked up).
    """
    new: dict[bytes, _Blob] = {}
    for row in rows:
        if row[0] == "call":
            for blob in (row[4], *(row[5] or ())):
                if blob.digest not in known:
                    new.setdefault(blob.digest, blob)
    ids: dict[bytes, int] = {}
    if new:
        top = db.execute("SELECT MAX(id) FROM blobs").fetchone()[0]
        first = 1 + (int(top) if top is not None else 0)
        ids = {digest: first + i for i, digest in enumerate(new)}
        stored = _insert(db, "INSERT OR IGNORE INTO blobs (id, sha256, codec, data)", 4,
                         [(ids[d], d, *b.pack()) for d, b in new.items()])
        if stored != len(new):  # some were there already (another session wrote them)
            digests = list(new)
            for i in range(0, len(digests), 500):
                part = digests[i:i + 500]
                ids.update((bytes(d), int(b)) for d, b in db.execute(
                    f"SELECT sha256, id FROM blobs WHERE sha256 IN ({', '.join('?' * len(part))})",  # noqa: S608
                    part))

    def blob_id(blob: _Blob) -> int:
        found = known.get(blob.digest)
        return ids[blob.digest] if found is None else found

    calls, failures = [], []
    for row in rows:
        if row[0] == "call":
            _, key, agent, n, completion, request = row
            refs = None if request is None else " ".join(str(blob_id(b)) for b in request)
            calls.append((key, agent, n, blob_id(completion), refs))
        else:
            failures.append((*row[1:4], *row[4]))
    _insert(db, "INSERT INTO completions (request_key, agent, n, completion, request)", 5,
            calls, _UPSERT_CALL)
    _insert(db, "INSERT OR REPLACE INTO failures (request_key, agent, n, error, message)", 5,
            failures)
    return ids


def _flat_row(row: _Row) -> tuple[Any, ...]:
    """A held row as the plain data an offloaded write-behind sends (see ``_offload``)."""
    if row[0] != "call":
        return row
    _, raw, agent, n, completion, request = row
    if request is None:
        return ("call", raw, agent, n, completion.fields(), None, None)
    return ("call", raw, agent, n, completion.fields(), request._settings_json(),
            [(m.role, m.content, m.name) for m in request.messages])


def offloaded_rows(flat: list[tuple[Any, ...]], cache: dict[Any, Any]) -> list[_Row]:
    """The held rows :func:`_flat_row` made *flat* from (in the child process).

    *cache* keeps the blobs of settings and messages met lately, as
    ``RecordingStore._request_blobs`` does.
    """
    rows: list[_Row] = []
    for row in flat:
        kind = row[0]
        if kind == "failure":
            rows.append(row)
            continue
        _, raw, agent, n, completion, settings, messages = row
        request: list[_Blob] | None = None
        if settings is not None:
            if len(cache) >= 4096:
                cache.clear()
            head, tail = settings
            first = cache.get(settings)
            if first is None:
                first = cache[settings] = _held_blob(_settings_text(head, tail))
            request = [first]
            for message in messages:
                blob = cache.get(message)
                if blob is None:
                    blob = cache[message] = _held_blob(message_text(*message).encode("utf-8"))
                request.append(blob)
        rows.append(("call", raw, agent, n,
                     _held_blob(completion_text(completion).encode("utf-8")), request))
    return rows


def _settings_text(head: str, tail: str) -> bytes:
    """A request's settings blob: its canonical text around the messages, less them."""
    return (head[:-len(',"messages":[')] + tail[1:]).encode("utf-8")


def _held_blob(data: bytes) -> _Blob:
    """A blob as a held store writes it: short texts as they are (see RecordingStore.hold)."""
    blob = _Blob(data)
    if len(data) < _HELD_RAW:
        blob.packed = (_RAW, data)
    return blob


def _create_schema(db: sqlite3.Connection) -> None:
    """Create the tables (statement by statement: ``executescript`` would commit first)."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def _tables(db: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _format_of(db: sqlite3.Connection) -> str | None:
    """The format tag of the store *db* holds; None if it has no ``meta`` table."""
    if "meta" not in _tables(db):
        return None
    row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    return "" if row is None else str(row[0])


def _copy_v1(source: sqlite3.Connection, target: sqlite3.Connection, path: str,
             prefix: str = "") -> None:
    """Write the v1 tables of *source* (named ``prefix + name``) into the v2 tables of *target*.

    Streamed, a batch of rows at a time; inside the caller's transaction.
    """
    def key_of(text: object) -> bytes:
        try:
            return _key_bytes(text)
        except ConfigError:
            raise RecordingError(
                f"{path}: a v1 recording store with request key {text!r}, which is not a "
                "request's SHA-256 key; it cannot be upgraded to "
                f"{STORE_FORMAT!r}") from None

    known: dict[bytes, int] = {}

    def write(rows: list[_Row]) -> None:
        if len(known) > _MIGRATION_KNOWN:
            known.clear()  # a blob not known is looked up when its insert is ignored
        known.update(_write_rows(target, rows, known))

    # The table names are fixed ('' or 'v1_' before the v1 names): no input reaches the SQL.
    tables = _tables(source)
    request = "NULL"
    if f"{prefix}requests" in tables:
        request = f"(SELECT request FROM {prefix}requests AS r WHERE r.request_key = c.request_key)"  # noqa: S608
    cursor = source.execute(
        f"SELECT request_key, agent, n, completion, {request} FROM {prefix}completions AS c "  # noqa: S608
        "ORDER BY agent, n, request_key")
    while batch := cursor.fetchmany(_MIGRATION_BATCH):
        write([("call", key_of(key), str(agent), int(n), _Blob(str(text).encode("utf-8")),
                None if query is None else _request_blobs(json.loads(str(query))))
               for key, agent, n, text, query in batch])
    if f"{prefix}failures" in tables:
        cursor = source.execute(
            f"SELECT request_key, agent, n, error, message FROM {prefix}failures "  # noqa: S608
            "ORDER BY agent, n, request_key")
        while batch := cursor.fetchmany(_MIGRATION_BATCH):
            write([("failure", key_of(key), str(agent), int(n), (str(error), str(message)))
                   for key, agent, n, error, message in batch])


def _refuse(path: str, found: str | None) -> RecordingError:
    if found and found.startswith("simulacra.llm.recordings."):
        return RecordingError(
            f"{path} holds format {found!r}, written by another version of simulacra; this one "
            f"reads {_FORMAT_V1!r} and {STORE_FORMAT!r}: open it with the simulacra that wrote "
            "it (or a newer one)")
    return RecordingError(f"{path} holds format {found!r}, expected {STORE_FORMAT!r}: it is not "
                          "a simulacra recording store")


class _Write:
    """One write waiting for its group commit: what to write, and how it went.

    ``wake`` is held from the start; it is released when the write is done, or
    when its thread is to commit the next group.
    """

    __slots__ = ("args", "done", "error", "wake")

    def __init__(self, args: list[tuple[Any, ...]]) -> None:
        self.args = args
        self.done = False
        self.error: BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


class RecordingStore:
    """A SQLite file of completions keyed by ``(request key, agent, n)``.

    Thread-safe: one connection behind a lock, in WAL mode; a write is
    committed when :meth:`put` returns, and writers that wait meanwhile share
    the next commit (see the module docstring). ``len(store)`` is the number
    of completions; iteration yields ``(request_key, site)`` in sorted order.
    Use it as a context manager, or call :meth:`close`.

    Attributes:
        opened_format: The format the file held when it was opened:
            ``simulacra.llm.recordings.v1`` for a file read or upgraded from v1,
            else :data:`STORE_FORMAT`.

    Args:
        path: The database file (created with its directory if missing), or
            ``":memory:"``. A file of format ``simulacra.llm.recordings.v1``
            is upgraded to the current format (read-only: read through an
            upgraded copy in memory).
        readonly: Open an existing file for reading only.

    Raises:
        RecordingError: The file is not a store of this format (or of v1).
    """

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = str(path)
        self.readonly = readonly
        #: The format the file held when it was opened (v1 for an upgraded file).
        self.opened_format = STORE_FORMAT
        self._lock = threading.Lock()  # the connection
        # The group commit: the writes waiting, and the one whose thread commits next.
        self._state = threading.Condition(threading.Lock())
        self._queue: list[_Write] = []
        self._leader: _Write | None = None
        self._leading = False  # a thread is committing, or has been told to
        self._closed = False
        #: With :meth:`hold`: the writes not committed yet, by ``(kind, key, agent, n)``
        #: (a later write of a site replaces an earlier one, as in the tables).
        self._held = False
        self._pending: dict[tuple[str, bytes, str, int], _Row] = {}
        #: Groups handed to the writer thread by commit(wait=False), until written.
        self._flying: list[dict[tuple[str, bytes, str, int], _Row]] = []
        self._behind: list[Future[None]] = []
        self._writer: ThreadPoolExecutor | None = None
        #: The child process that writes the write-behinds (hold(offload=True)), or None.
        self._offload: Offload | None = None
        #: The groups sent to the child as parts of the step's transaction, until its commit.
        self._parts: list[dict[tuple[str, bytes, str, int], _Row]] = []
        #: In the child: the blob ids known within the step's open transaction (stream()).
        self._step_known: dict[bytes, int] = {}
        # The blob ids write-behinds count on (see _prepare), and their generation.
        self._ids = threading.RLock()
        self._epoch = 0
        self._next_id: int | None = None
        self._ahead: dict[bytes, int] = {}
        self._hot: set[bytes] = set()
        #: A read-only store's completions in memory, once preload() read them.
        self._preloaded: dict[tuple[bytes, str, int], tuple[Any, Any]] | None = None
        if readonly:
            if not Path(self.path).exists():
                raise RecordingError(f"recording store {self.path} does not exist")
            target, uri = Path(self.path).resolve().as_uri() + "?mode=ro", True
        else:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            target, uri = self.path, False
        try:
            self._db = sqlite3.connect(target, uri=uri, check_same_thread=False,
                                       isolation_level=None)
        except sqlite3.DatabaseError as exc:
            raise RecordingError(f"{self.path} is not a recording store: {exc}") from exc
        try:
            self._open()
        except BaseException:
            self._db.close()  # a store that failed to open keeps no connection
            raise
        #: Ids of blobs the store holds, by digest (a bounded cache: a text seen
        #: before costs no statement and no compression).
        self._known: dict[bytes, int] = {}
        #: Blobs of request settings and messages seen lately (see _request_blobs).
        self._settings: dict[str, _Blob] = {}
        self._messages: dict[ChatMessage, _Blob] = {}

    def _open(self) -> None:
        """Set up (or, read-only, only check) the schema of a fresh connection."""
        db = self._db
        try:
            if self.readonly:
                found = _format_of(db)
                if found == _FORMAT_V1:
                    try:
                        self._db = self._upgraded_copy()
                    finally:
                        db.close()  # the file itself is read no more
                    self.opened_format = _FORMAT_V1
                elif found != STORE_FORMAT:
                    raise _refuse(self.path, found)
                return
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("BEGIN IMMEDIATE")
            try:
                found = _format_of(db)
                if found == _FORMAT_V1:
                    self._upgrade_in_place()
                elif found is None:
                    _create_schema(db)
                    db.execute("INSERT INTO meta (key, value) VALUES ('format', ?)",
                               (STORE_FORMAT,))
                elif found != STORE_FORMAT:
                    raise _refuse(self.path, found)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            if found == _FORMAT_V1:
                self.opened_format = _FORMAT_V1
                with contextlib.suppress(sqlite3.OperationalError):  # another holds it: later
                    db.execute("VACUUM")  # give back the space the v1 tables held
        except sqlite3.DatabaseError as exc:
            raise RecordingError(f"{self.path} is not a recording store: {exc}") from exc

    def _upgrade_in_place(self) -> None:
        """Rewrite the v1 tables of the file as v2 ones (inside the caller's transaction)."""
        db = self._db
        old = _tables(db) & {"completions", "requests", "failures"}
        db.execute("DROP INDEX IF EXISTS completions_by_site")
        for name in sorted(old):
            db.execute(f"ALTER TABLE {name} RENAME TO v1_{name}")
        _create_schema(db)
        _copy_v1(db, db, self.path, prefix="v1_")
        for name in sorted(old):
            db.execute(f"DROP TABLE v1_{name}")
        db.execute("UPDATE meta SET value = ? WHERE key = 'format'", (STORE_FORMAT,))

    def _upgraded_copy(self) -> sqlite3.Connection:
        """A v2 store in memory holding what the (read-only) v1 file holds."""
        copy = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        try:
            copy.execute("BEGIN")
            _create_schema(copy)
            copy.execute("INSERT INTO meta (key, value) VALUES ('format', ?)", (STORE_FORMAT,))
            _copy_v1(self._db, copy, self.path)
            copy.execute("COMMIT")
        except BaseException:
            copy.close()
            raise
        return copy

    def __repr__(self) -> str:
        return f"RecordingStore({self.path!r})"

    def _execute(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """*sql* on the store as it holds every write made so far (held ones committed first)."""
        if self._pending or self._behind:
            self.commit()
        return self._query(sql, args)

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """*sql* on the committed rows only (for a lookup of one site that checked the held)."""
        with self._lock:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            return self._db.execute(sql, args).fetchall()

    # -- writing -------------------------------------------------------------------

    # -- held writes: one commit per step -----------------------------------------

    def hold(self, *, offload: bool = False) -> None:
        """Hold the writes from now on until :meth:`commit`: one transaction for many calls.

        A society run holds its store and commits it at the end of every step
        (``commit(wait=False)``: on the store's writer thread; the next call
        through a RecordingModel, a checkpoint and the run's end wait for it),
        so a step of a million calls costs one commit. What is held is served by
        :meth:`get` and :meth:`get_failure` at once, and committed before any
        other read and by :meth:`close`. A process killed before the commit
        loses the held writes of that step only; a resumed run, which starts
        from a checkpoint of an earlier step, asks for those calls again.

        Texts of fewer than 4,096 bytes that a held store writes are kept as they
        are, not deflated (codec 0, which every reader of the format reads):
        a scripted society run's file is about twice the size, and each call
        costs some 20 us less to record.

        Args:
            offload: The write-behinds are written by a child process (see
                ``simulacra.llm._offload``): this process only lists each call
                (about 2 us) where encoding, hashing and packing it here costs
                10-20 us of the run's own thread. The calls go to the child
                while the step runs, in parts written inside the step's one
                transaction (the child holds the file's write lock meanwhile).
                Worth it for steps of a thousand calls and more; a store in
                memory, or read-only, is not offloaded. The files written are
                the same either way.
        """
        if offload and self._offload is None and self.path != ":memory:" and not self.readonly:
            if self._pending:  # held before as blobs: written before the objects
                self.commit()
            self._offload = Offload(self.path)
        self._held = True

    @property
    def held(self) -> int:
        """Writes made under :meth:`hold` and not committed yet."""
        return len(self._pending)

    def commit(self, *, wait: bool = True) -> int:
        """Commit the held writes in one transaction; return how many there were.

        Durable when it returns (WAL, ``synchronous=NORMAL``: the process
        dying loses nothing committed; a power cut may), with the writes of
        every earlier ``commit(wait=False)``. On a failure nothing of the group
        is written and the writes stay held.

        Args:
            wait: False hands the group to the store's writer thread and
                returns at once (a write-behind: SQLite writes while the caller
                goes on, on another core). The writes are served by :meth:`get`
                meanwhile, and durable once :meth:`sync` (or a waiting commit,
                a read of the whole store, :meth:`close`) returns. A failed
                write-behind keeps its writes held and raises there.

        Raises:
            RecordingError: The write failed (rolled back), or an earlier
                write-behind did.
        """
        if self._offload is not None and (self._parts or self._offload.gone is None):
            if wait:  # the child holds the step's transaction: it commits, and is waited for
                count = self.commit(wait=False)
                self.sync()
                return count
            return self._commit_offloaded()
        if wait:
            self.sync()
        with self._state:
            if not self._pending:
                return 0
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            rows = list(self._pending.values())
            pending, self._pending = self._pending, {}
            if not wait:
                self._flying.append(pending)
        if not wait:
            try:
                batch = self._prepare(rows)
            except BaseException:
                with self._state:
                    self._pending = {**pending, **self._pending}
                    self._flying = [each for each in self._flying if each is not pending]
                raise
            with self._state:
                if self._writer is None:
                    self._writer = ThreadPoolExecutor(
                        1, thread_name_prefix="simulacra-recordings")
                self._behind.append(self._writer.submit(self._write_behind, pending, rows,
                                                        batch))
            return len(rows)
        try:
            self._submit(rows)
        except BaseException:
            with self._state:  # held again, before any written since
                self._pending = {**pending, **self._pending}
            raise
        return len(rows)

    #: Blob ids a write-behind remembers (by digest) for the blobs it wrote or will write
    #: (some 40 MB at most): when full, only those met more than once are kept. A blob
    #: forgotten and met again costs its group the careful way (see _prepare).
    _AHEAD = 262_144

    def _prepare(self, rows: list[_Row]) -> _Batch:
        """*rows* as the parameters of a write-behind's statements (on the caller's thread).

        The blobs get their ids here, after the largest the file holds (read
        once, then counted on), so that the writer thread only runs SQL:
        Python work on that thread waits for the GIL, and made a write-behind
        cost the run more than the commit it hides. A blob written or queued
        earlier keeps its id (the ``_ahead`` map). If the file turns out to
        hold one of these ids or digests already (another session wrote it,
        or a remembered id was dropped), the writer finds out (fewer rows
        inserted than given) and writes the group the careful way instead.
        """
        if self._offload is not None:  # its child is gone: this process writes
            rows = [self._blob_row(row) for row in rows]
        with self._ids:
            if self._next_id is None:
                self.sync()  # the ids the writer thread has yet to write are in the file
                top = self._query("SELECT MAX(id) FROM blobs")[0][0]
                self._next_id = 1 + (int(top) if top is not None else 0)
                self._ahead, self._hot = {}, set()
            ahead, hot, known = self._ahead, self._hot, self._known
            nid = self._next_id
            blobs: list[tuple[Any, ...]] = []
            calls: list[tuple[Any, ...]] = []
            failures: list[tuple[Any, ...]] = []

            def blob_id(blob: _Blob) -> int:
                nonlocal nid
                digest = blob.digest
                found = ahead.get(digest)
                if found is not None:
                    hot.add(digest)
                    return found
                found = known.get(digest)
                if found is None:
                    found = nid
                    nid += 1
                    blobs.append((found, digest, *blob.pack()))
                ahead[digest] = found
                return found

            for row in rows:
                if row[0] == "call":
                    _, key, agent, n, completion, request = row
                    refs = None if request is None else " ".join(
                        [str(blob_id(b)) for b in request])
                    calls.append((key, agent, n, blob_id(completion), refs))
                else:
                    failures.append((*row[1:4], *row[4]))
            self._next_id = nid
            if len(ahead) > self._AHEAD:  # keep the blobs met again (a system prompt)
                self._ahead = {d: ahead[d] for d in hot if d in ahead}
                self._hot = set()
            return _Batch(self._epoch, blobs, calls, failures)

    def _forget_ids(self) -> None:
        """The ids counted on may be wrong: the next write-behind reads them again."""
        with self._ids:
            self._epoch += 1
            self._next_id = None
            self._ahead, self._hot = {}, set()

    def _write_fast(self, batch: _Batch) -> bool:
        """Write a prepared *batch* in one transaction; False (rolled back) if its ids clash."""
        with self._lock:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                stored = _insert(db, "INSERT OR IGNORE INTO blobs (id, sha256, codec, data)", 4,
                                 batch.blobs, chunks=_BIG_CHUNKS)
                if stored != len(batch.blobs):
                    db.execute("ROLLBACK")
                    return False
                _insert(db, "INSERT INTO completions (request_key, agent, n, completion, "
                        "request)", 5, batch.calls, _UPSERT_CALL, _BIG_CHUNKS)
                _insert(db, "INSERT OR REPLACE INTO failures (request_key, agent, n, error, "
                        "message)", 5, batch.failures, chunks=_BIG_CHUNKS)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return True

    def _write_behind(self, pending: dict[tuple[str, bytes, str, int], _Row],
                      rows: list[_Row], batch: _Batch) -> None:
        """The writer thread's part of ``commit(wait=False)``: write *rows*, or hold them again."""
        try:
            if batch.epoch != self._epoch or not self._write_fast(batch):
                self._forget_ids()  # and the groups queued behind this one go this way too
                self._submit(rows)
        except BaseException:
            self._forget_ids()
            self._land([pending], again=True)
            raise
        self._land([pending], again=False)

    def _land(self, groups: list[dict[tuple[str, bytes, str, int], _Row]], *,
              again: bool) -> None:
        """Take written-behind *groups* off the flying list.

        With *again* (a failed write), they are held again, before anything held since.
        """
        with self._state:
            if again:
                held: dict[tuple[str, bytes, str, int], _Row] = {}
                for group in groups:
                    held.update(group)
                self._pending = {**held, **self._pending}
            self._flying = [each for each in self._flying
                            if not any(each is group for group in groups)]

    #: Blob ids an offloaded store's child remembers across steps (see stream()).
    _STREAM_KNOWN = 262_144

    def stream(self, rows: list[_Row]) -> None:
        """Write *rows* inside the step's transaction, begun by the first (the child's).

        Nothing is committed until :meth:`stream_commit`; :meth:`stream_abort`
        rolls the step back. Not for a store whose writes are held or behind.
        """
        with self._lock:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            db = self._db
            if not db.in_transaction:
                db.execute("BEGIN IMMEDIATE")
                self._step_known = dict(self._known)
            self._step_known.update(_write_rows(db, rows, self._step_known))

    def stream_commit(self) -> None:
        """Commit the step :meth:`stream` wrote (a step of no rows commits nothing)."""
        with self._lock:
            if self._db.in_transaction:
                self._db.execute("COMMIT")
            known, self._step_known = self._step_known, {}
            self._known = known if len(known) <= self._STREAM_KNOWN else {}

    def stream_abort(self) -> None:
        """Roll back the step :meth:`stream` wrote (its blob ids with it)."""
        with self._lock:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            self._step_known = {}

    def _commit_offloaded(self) -> int:
        """``commit(wait=False)`` of an offloaded store; return how many writes there were.

        The child commits the step's parts and the writes still held, in one transaction.
        """
        with self._state:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            if not self._pending and not self._parts:
                return 0
            groups, self._parts = self._parts, []
            tail, self._pending = self._pending, {}
            if tail:
                self._flying.append(tail)
                groups.append(tail)
            rows = [row for group in groups for row in group.values()]
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="simulacra-recordings")
            data = b"C" + pickle.dumps([_flat_row(row) for row in tail.values()], protocol=5)
            self._behind.append(self._writer.submit(self._send_commit, groups, rows, data))
        return len(rows)

    def _send_commit(self, groups: list[dict[tuple[str, bytes, str, int], _Row]],
                     rows: list[_Row], data: bytes) -> None:
        """The writer thread's part of an offloaded commit: the child commits the step.

        If the child is gone, the step's rows (its parts too: the child's transaction
        went with it) are written here; if the child could not write them, they are
        held again, every part of the step with them.
        """
        offload = self._offload
        assert offload is not None  # noqa: S101  (only queued when offloaded)
        try:
            try:
                offload.write(data)
            except WriterGone:  # this process writes the step (and every later one)
                self._forget_ids()
                self._submit(rows)
            except RuntimeError as exc:
                raise RecordingError(f"recording store {self.path}: the write failed and was "
                                     f"rolled back: {exc}") from None
        except BaseException:
            self._land(groups, again=True)
            raise
        self._land(groups, again=False)

    def sync(self) -> None:
        """Wait until every ``commit(wait=False)`` so far is written (durable).

        Several threads may wait at once: each returns once every write-behind
        queued before it is written (a write is taken off the queue only when
        done, so no thread returns early because another is waiting on it).

        Raises:
            RecordingError: One of them failed (its writes are held again:
                the next commit tries them once more); raised in the thread
                that finds it first.
        """
        failed: BaseException | None = None
        while True:
            with self._state:
                if not self._behind:
                    break
                future = self._behind[0]
            try:
                future.result()  # a Ctrl-C here leaves it queued, for the next sync
            except Exception as exc:  # the first is raised, after all were waited for
                failed = failed or exc
            with self._state:
                if self._behind and self._behind[0] is future:
                    del self._behind[0]
                elif future in self._behind:  # another thread took the ones before it
                    self._behind.remove(future)
        if failed is not None:
            if isinstance(failed, RecordingError):
                raise failed
            raise RecordingError(f"recording store {self.path}: the write failed and was "
                                 f"rolled back: {failed}") from failed

    def _keep(self, row: _Row) -> None:
        """Write *row* now, or hold it (:meth:`hold`)."""
        if not self._held:
            self._submit([row])
            return
        with self._state:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            pending = self._pending
            pending[(row[0], row[1], row[2], row[3])] = row
            if len(pending) >= self._PART and self._offload is not None:
                self._send_part()

    #: Calls an offloaded store sends its child at a time during a step (see _send_part).
    _PART = 2048

    def _send_part(self) -> None:
        """Send the held writes to the child as a part of the step's transaction (under _state).

        The child writes them at once, inside a transaction it commits only with the
        step's commit: the step's SQL is done while the step runs, and a step cut off
        leaves nothing of itself in the file. The part stays served (``_flying``) and,
        if that commit fails, is held again with the rest of the step.
        """
        offload = self._offload
        if offload is None or offload.gone is not None or not self._pending:
            return
        part, self._pending = self._pending, {}
        self._flying.append(part)
        self._parts.append(part)
        data = b"P" + pickle.dumps([_flat_row(row) for row in part.values()], protocol=5)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="simulacra-recordings")
        self._writer.submit(offload.send, data)  # its failure is the commit's (gone)

    def _submit(self, args: list[_Row]) -> None:
        """Write the rows *args*; return once committed (with the writes queued beside it).

        The first writer to find nobody committing commits the queue; the
        writers that queue up meanwhile wait, each on its own lock, and the
        first of them commits them all next.
        """
        if self._offload is not None:
            args = [self._blob_row(row) for row in args]
        write = _Write(args)
        with self._state:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            self._queue.append(write)
            lead = not self._leading
            if lead:
                self._leading, self._leader = True, write
        try:
            if not lead:
                write.wake.acquire()  # done, or told to commit the next group
                lead = not write.done
            if lead:
                self._lead()
        except BaseException:
            self._abandon(write)
            raise
        if write.error is not None:
            raise RecordingError(f"recording store {self.path}: the write failed and was "
                                 f"rolled back: {write.error}") from write.error

    def _lead(self) -> None:
        """Commit the queue as one group, then hand over to the first writer queued since."""
        with self._state:
            group, self._queue, self._leader = self._queue, [], None
        error: BaseException | None = None
        try:
            self._commit(group)
        except BaseException as exc:  # every writer of the group raises it, as RecordingError
            error = exc
        with self._state:
            for each in group:
                each.done, each.error = True, error
            self._hand_over()
        for each in group:
            each.wake.release()
        if error is not None and not isinstance(error, Exception):
            raise error  # KeyboardInterrupt and the like: this thread's own, too

    def _hand_over(self) -> None:
        """Tell the first writer queued to commit next, or mark the store idle (lock held)."""
        if self._queue:
            self._leader = self._queue[0]
            self._leader.wake.release()
        else:
            self._leading, self._leader = False, None
            self._state.notify_all()  # close() waits for this

    def _abandon(self, write: _Write) -> None:
        """The thread of *write* stops waiting (an interrupt): drop it, pass on its turn."""
        with self._state:
            if any(each is write for each in self._queue):
                self._queue.remove(write)
            if self._leader is write:
                self._hand_over()

    _KNOWN = 8192  # blob ids the store remembers
    _CACHED = 256  # request settings and messages it remembers

    def _commit(self, group: list[_Write]) -> None:
        """Write *group* in one transaction."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                ids = _write_rows(db, [row for write in group for row in write.args],
                                  self._known)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            if len(self._known) + len(ids) > self._KNOWN:
                self._known.clear()
            self._known.update(ids)
        if ids and self._next_id is not None:
            self._forget_ids()  # it wrote blobs past the ids a write-behind counts on

    def put(
        self,
        key: str,
        site: CallSite | None,
        completion: Completion,
        *,
        request: CompletionRequest | None = None,
    ) -> None:
        """Store *completion* under ``(key, site)``, replacing what was there.

        Committed when it returns.

        Args:
            key: The request key (``request.key()``).
            site: The call site, or ``None``.
            completion: The completion to store.
            request: The request itself, kept once per key for inspection
                (its messages once per store).

        Raises:
            RecordingError: The store is read-only or closed, or the write failed.
        """
        if self.readonly:
            raise RecordingError(f"recording store {self.path} is open read-only")
        raw = _key_bytes(key)
        agent, n = _site_columns(site)
        if not isinstance(completion, Completion):
            raise ConfigError(
                f"completion must be a Completion, got {type(completion).__name__} {completion!r}"
            )
        if request is not None and not isinstance(request, CompletionRequest):
            raise ConfigError(f"request must be a CompletionRequest or None, "
                              f"got {type(request).__name__}")
        row: _Row = ("call", raw, agent, n, completion, request)
        # Offloaded (see hold()), the child process encodes the call: this thread lists it.
        self._keep(row if self._offload is not None else self._blob_row(row))

    def _blob_row(self, row: _Row) -> _Row:
        """*row* with its completion and request as blobs (a call put as objects when offloaded)."""
        if row[0] != "call" or type(row[4]) is _Blob:
            return row
        _, raw, agent, n, completion, request = row
        blobs = [_Blob(completion.to_json().encode("utf-8"))]
        if request is not None:
            blobs.extend(self._request_blobs(request))
        known = self._known
        # Compressed here, outside the lock (zlib lets other threads run); a held store
        # keeps short texts as they are (see hold()).
        short = _HELD_RAW if self._held else 0
        for blob in blobs:
            if blob.packed is None and blob.digest not in known:
                blob.packed = (_RAW, blob.data) if len(blob.data) < short else _pack(blob.data)
        return ("call", raw, agent, n, blobs[0], blobs[1:] if request is not None else None)

    def _request_blobs(self, request: CompletionRequest) -> list[_Blob]:
        """The blobs of *request*: its settings, then its messages.

        Settings and messages seen lately come from two small caches: a run's
        requests share their settings and system prompt, and encoding and
        hashing those again is much of the cost of recording a request.
        """
        # The canonical text of the settings (the request's, around its messages), as the
        # request encoded it for its key: canonical_json of to_dict() less the messages.
        head, tail = request._settings_json()
        setting = head + tail
        settings = self._settings.get(setting)
        if settings is None:
            settings = _Blob(_settings_text(head, tail))
            if len(self._settings) >= self._CACHED:
                self._settings.clear()
            self._settings[setting] = settings
        blobs = [settings]
        for message in request.messages:
            blob = self._messages.get(message)
            if blob is None:
                blob = _Blob(message_json(message).encode("utf-8"))
                if len(self._messages) >= self._CACHED:
                    self._messages.clear()
                self._messages[message] = blob
            blobs.append(blob)
        return blobs

    def put_failure(self, key: str, site: CallSite | None, error: BaseException) -> None:
        """Store that the call ``(key, site)`` failed with *error* (its type name and message).

        A resumed run and a replay raise the same error at the same call site,
        so a run in which the provider failed some calls stays replayable.
        """
        if self.readonly:
            raise RecordingError(f"recording store {self.path} is open read-only")
        raw = _key_bytes(key)
        agent, n = _site_columns(site)
        self._keep(("failure", raw, agent, n, (type(error).__name__, str(error))))

    # -- reading -------------------------------------------------------------------

    def failure(self, key: str, site: CallSite | None) -> ProviderError | None:
        """The recorded failure of ``(key, site)`` as the error to raise again, or ``None``.

        Of the type and with the message it was recorded with (what a
        :class:`RecordingModel` with ``reuse=True`` raises for it).
        """
        failed = self.get_failure(key, site)
        return None if failed is None else _replayed(*failed)

    def get_failure(self, key: str, site: CallSite | None) -> tuple[str, str] | None:
        """The ``(error type name, message)`` recorded for ``(key, site)``, or ``None``."""
        agent, n = _site_columns(site)
        raw = _key_bytes(key)
        held = self._held_row(("failure", raw, agent, n))
        if held is not None:
            return (str(held[4][0]), str(held[4][1]))
        rows = self._query(
            "SELECT error, message FROM failures WHERE request_key = ? AND agent = ? AND n = ?",
            (raw, agent, n))
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def _held_row(self, at: tuple[str, bytes, str, int]) -> _Row | None:
        """The write held (or being written behind) for *at*, the newest; None if none."""
        if self._pending:
            held = self._pending.get(at)
            if held is not None:
                return held
        if self._flying:
            for group in reversed(self._flying[:]):
                held = group.get(at)
                if held is not None:
                    return held
        return None

    def calls_per_agent(self) -> dict[str, int]:
        """How many distinct calls (completions or failures) are recorded per agent."""
        rows = self._execute(
            "SELECT agent, COUNT(DISTINCT n) FROM (SELECT agent, n FROM completions "
            "UNION SELECT agent, n FROM failures) WHERE n >= 0 GROUP BY agent")
        return {str(agent): int(count) for agent, count in rows}

    #: A store of at most this many completions is read into memory by :meth:`preload`.
    PRELOAD_MAX = 500_000

    def preload(self) -> bool:
        """Read every completion of a read-only store into memory; whether it did.

        A replay asks for every call once: one query for them all costs about
        2.6 us a call where a query each costs 13 (the completions only: some
        250 bytes a call, so a store of more than :attr:`PRELOAD_MAX` calls is
        left on disk). Only a read-only store preloads: nothing writes to it
        through this connection, so what was read stays what the file holds
        (a file written by another process at the same time is not a recording
        to replay).
        """
        if not self.readonly or self._preloaded is not None:
            return self._preloaded is not None
        with self._lock:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            count = self._db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]
            if int(count) > self.PRELOAD_MAX:
                return False
            self._preloaded = {
                (bytes(raw), str(agent), int(n)): (codec, data)
                for raw, agent, n, codec, data in self._db.execute(
                    "SELECT c.request_key, c.agent, c.n, b.codec, b.data FROM completions AS c "
                    "LEFT JOIN blobs AS b ON b.id = c.completion")}
        return True

    def get(self, key: str, site: CallSite | None) -> Completion | None:
        """Return the completion stored under ``(key, site)``, or ``None``."""
        agent, n = _site_columns(site)
        raw = _key_bytes(key)
        preloaded = self._preloaded
        if preloaded is not None:
            stored = preloaded.get((raw, agent, n))
            return None if stored is None else self._load(stored, key, site)
        held = self._held_row(("call", raw, agent, n))
        if held is not None:
            if type(held[4]) is not _Blob:  # offloaded: the completion as it was put
                return held[4]  # type: ignore[no-any-return]
            return self._load((_RAW, held[4].data), key, site)
        rows = self._query(
            "SELECT b.codec, b.data FROM completions AS c LEFT JOIN blobs AS b "
            "ON b.id = c.completion WHERE c.request_key = ? AND c.agent = ? AND c.n = ?",
            (raw, agent, n))
        return self._load(rows[0], key, site) if rows else None

    def get_any(self, key: str) -> tuple[CallSite | None, Completion] | None:
        """Return the first ``(site, completion)`` stored for *key* under any site, or ``None``."""
        rows = self._execute(
            "SELECT c.agent, c.n, b.codec, b.data FROM completions AS c LEFT JOIN blobs AS b "
            "ON b.id = c.completion WHERE c.request_key = ? ORDER BY c.agent, c.n LIMIT 1",
            (_key_bytes(key),))
        if not rows:
            return None
        agent, n, *stored = rows[0]
        site = _site_of(str(agent), int(n))
        return site, self._load(tuple(stored), key, site)

    def request(self, key: str) -> CompletionRequest | None:
        """Return the request recorded for *key*, if it was stored with one.

        Raises:
            RecordingError: What is stored does not hash to *key* (a damaged store).
        """
        if self._pending or self._behind:
            self.commit()
        with self._lock:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            row = self._db.execute(
                "SELECT request FROM completions WHERE request_key = ? AND request IS NOT NULL "
                "ORDER BY agent, n LIMIT 1", (_key_bytes(key),)).fetchone()
            if row is None:
                return None
            try:
                parts = [self._blob_json(int(blob)) for blob in str(row[0]).split()]
                request = CompletionRequest.from_dict({**parts[0], "messages": parts[1:]})
            except (ValueError, TypeError, KeyError, IndexError) as exc:  # ConfigError: ValueError
                raise RecordingDamaged(f"recording store {self.path}: damaged request {key}: "
                                     f"{exc}") from None
        if request.key() != key:
            raise RecordingDamaged(f"recording store {self.path}: damaged request {key}: it "
                                 f"hashes to {request.key()}")
        return request

    def request_messages_json(self, keys: Iterable[str]) -> dict[str, tuple[bytes, ...]]:
        """Like :meth:`request_messages`, each message as its canonical JSON (UTF-8).

        ``{"content": ..., "role": ...}`` (:meth:`ChatMessage.to_dict`, as
        :func:`canonical_json` writes it), not decoded: for a reader that
        embeds the messages in JSON of its own (a report), half the cost again.

        Raises:
            RecordingError: The store is closed or a message is damaged.
        """
        return self._bulk_messages(keys, decode=False)

    def request_messages(self, keys: Iterable[str]) -> dict[str, tuple[tuple[str, str], ...]]:
        """The ``(role, content)`` messages recorded for each of *keys* that has a request.

        For readers of many requests at once (a report): one query for the
        calls, each distinct message read and inflated once, no request
        rebuilt or hashed again -- about 20 times cheaper a request than
        :meth:`request`, and unchecked (use :meth:`request` to verify one).

        Raises:
            RecordingError: The store is closed or a message is damaged.
        """
        return self._bulk_messages(keys, decode=True)

    def _bulk_messages(self, keys: Iterable[str], *, decode: bool) -> dict[str, tuple[Any, ...]]:
        wanted = {_key_bytes(key) for key in keys}
        if not wanted:
            return {}
        if self._pending or self._behind:
            self.commit()
        refs: dict[bytes, list[int]] = {}
        with self._lock:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            for raw, request in self._db.execute(
                    "SELECT request_key, request FROM completions WHERE request IS NOT NULL"):
                if raw in wanted and raw not in refs:
                    refs[raw] = list(map(int, request.split()[1:]))
            needed = sorted({blob for ids in refs.values() for blob in ids})
            texts: dict[int, Any] = {}
            for at in range(0, len(needed), 500):
                part = needed[at:at + 500]
                marks = ", ".join("?" * len(part))
                for blob, codec, data in self._db.execute(
                        f"SELECT id, codec, data FROM blobs WHERE id IN ({marks})",  # noqa: S608
                        part):
                    try:
                        if not decode:
                            texts[blob] = _unpack(codec, data)
                            continue
                        message = json.loads(_unpack(codec, data))
                        texts[blob] = (str(message["role"]), str(message["content"]))
                    except (ValueError, KeyError, TypeError) as exc:
                        raise RecordingDamaged(f"recording store {self.path}: damaged message "
                                             f"blob {blob}: {exc}") from None
        try:
            return {raw.hex(): tuple(texts[blob] for blob in ids) for raw, ids in refs.items()}
        except KeyError as exc:
            raise RecordingError(f"recording store {self.path}: message blob {exc} is "
                                 "missing") from None

    def _blob_json(self, blob: int) -> Any:
        """The JSON value of blob *blob* (the caller holds the lock); ValueError if damaged."""
        stored = self._db.execute("SELECT codec, data FROM blobs WHERE id = ?", (blob,)).fetchone()
        if stored is None:
            raise ValueError(f"blob {blob} is missing")
        return json.loads(_unpack(*stored))

    def sites_for(self, key: str) -> list[CallSite | None]:
        """Return the call sites that hold a recording of *key*, sorted."""
        rows = self._execute(
            "SELECT agent, n FROM completions WHERE request_key = ? ORDER BY agent, n",
            (_key_bytes(key),))
        return [_site_of(str(a), int(n)) for a, n in rows]

    def keys_for(self, site: CallSite | None) -> list[str]:
        """Return the request keys recorded at *site*, sorted."""
        agent, n = _site_columns(site)
        rows = self._execute(
            "SELECT request_key FROM completions WHERE agent = ? AND n = ? ORDER BY request_key",
            (agent, n))
        return [bytes(r[0]).hex() for r in rows]

    def _load(self, stored: tuple[Any, ...], key: str, site: CallSite | None) -> Completion:
        try:
            if stored[0] is None:
                raise ValueError("its blob is missing")
            return Completion.from_json(_unpack(*stored))
        except ValueError as exc:  # ConfigError is a ValueError
            raise RecordingDamaged(
                f"recording store {self.path}: damaged completion at site {site} key {key}: {exc}"
            ) from None

    def __len__(self) -> int:
        return int(self._execute("SELECT COUNT(*) FROM completions")[0][0])

    def __contains__(self, item: object) -> bool:
        if not (isinstance(item, tuple) and len(item) == 2):
            return False
        key, site = item
        if not isinstance(key, str):
            return False
        try:
            raw = _key_bytes(key)
        except ConfigError:
            return False
        agent, n = _site_columns(site)
        return bool(self._execute("SELECT 1 FROM completions WHERE request_key = ? AND "
                                  "agent = ? AND n = ?", (raw, agent, n)))

    def __iter__(self) -> Iterator[tuple[str, CallSite | None]]:
        rows = self._execute("SELECT request_key, agent, n FROM completions ORDER BY agent, n, 1")
        return iter([(bytes(k).hex(), _site_of(str(a), int(n))) for k, a, n in rows])

    def close(self) -> None:
        """Wait for the writes under way, then close the database.

        Every :meth:`put` that returned is committed already, or held
        (:meth:`hold`) and committed now; later use raises :class:`RecordingError`.
        """
        failed: RecordingError | None = None
        if not self._closed:
            # A run that stops keeps the calls of its last, partial step; a failed
            # write-behind is tried once more. The database is closed all the same.
            for attempt in (self.sync, self.commit):
                try:
                    attempt()
                except RecordingError as exc:
                    failed = failed or exc
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)
        if self._offload is not None:
            self._offload.close()
        with self._state:
            if self._closed:
                return
            self._closed = True  # no new writes
            while self._leading:
                self._state.wait()
        with self._lock:
            self._db.close()
        if failed is not None:
            raise failed

    def __enter__(self) -> RecordingStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RecordingModel(ModelWrapper):
    """Calls *inner* and stores every completion under ``(request.key(), site)``.

    Args:
        inner: The model that answers.
        store: Where completions go.
        reuse: Serve a call already in the store from it instead of calling
            *inner* (to resume a run that stopped half way).
    """

    def __init__(self, inner: LanguageModel, store: RecordingStore, *, reuse: bool = False) -> None:
        if not isinstance(inner, LanguageModel):
            raise ConfigError(f"inner must be a LanguageModel, got {type(inner).__name__}")
        if not isinstance(store, RecordingStore):
            raise ConfigError(f"store must be a RecordingStore, got {type(store).__name__}")
        self.inner = inner
        self.store = store
        self.reuse = reuse
        self._lock = threading.Lock()
        self._recorded = 0
        self._reused = 0

    @property
    def recorded(self) -> int:
        """Completions obtained from *inner* and stored."""
        return self._recorded

    @property
    def reused(self) -> int:
        """Calls served from the store (with ``reuse=True``)."""
        return self._reused

    def _hit(self, request: CompletionRequest, site: CallSite | None) -> Completion | None:
        if not self.reuse:
            return None
        key = request.key()
        found = self.store.get(key, site)
        if found is None:
            failed = self.store.get_failure(key, site)
            if failed is not None:
                with self._lock:
                    self._reused += 1
                raise _replayed(*failed)
        if found is not None:
            with self._lock:
                self._reused += 1
        return found

    def _failed(self, request: CompletionRequest, site: CallSite | None,
                error: ProviderError) -> None:
        # A call that failed for good is part of the run: keep it, so that a
        # resume or a replay fails it again at the same call site. A provider
        # found unusable is not an answer to this call: the run stops, and a
        # resume calls again.
        if not isinstance(error, ProviderUnavailable):
            self.store.put_failure(request.key(), site, error)

    def _record(
        self, request: CompletionRequest, site: CallSite | None, completion: Completion
    ) -> Completion:
        self.store.put(request.key(), site, completion, request=request)
        with self._lock:
            self._recorded += 1
        return completion

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        """Return *inner*'s completion of *request*, recorded under its call site.

        A write-behind of the store (``commit(wait=False)``: the last step's
        calls) is written before this call is made: no call is paid while the
        calls before it could still be lost.
        """
        found = self._hit(request, site)
        if found is not None:
            return found
        if self.store._behind:
            self.store.sync()
        try:
            completion = self.inner.complete(request, site=site)
        except ProviderError as exc:
            self._failed(request, site, exc)
            raise
        return self._record(request, site, completion)

    async def acomplete(
        self, request: CompletionRequest, *, site: CallSite | None = None
    ) -> Completion:
        """Await *inner*'s completion of *request*, recorded under its call site."""
        found = self._hit(request, site)
        if found is not None:
            return found
        if self.store._behind:
            await asyncio.to_thread(self.store.sync)  # as complete(), off the event loop
        try:
            completion = await self.inner.acomplete(request, site=site)
        except ProviderError as exc:
            self._failed(request, site, exc)
            raise
        return self._record(request, site, completion)


class ReplayModel:
    """Serves completions from a :class:`RecordingStore`; makes no model calls.

    Args:
        store: The recordings.
        strict: A call whose exact ``(request key, site)`` is not recorded
            raises :class:`~simulacra.errors.ReplayMiss`. With
            ``strict=False`` a miss is served, in order, by the same request
            recorded at another call site, then by *fallback*; only then does
            it raise.
        fallback: A model for misses (``strict=False`` only).
    """

    def __init__(
        self,
        store: RecordingStore,
        strict: bool = True,
        fallback: LanguageModel | None = None,
    ) -> None:
        if not isinstance(store, RecordingStore):
            raise ConfigError(f"store must be a RecordingStore, got {type(store).__name__}")
        if strict and fallback is not None:
            raise ConfigError("ReplayModel(strict=True) takes no fallback; pass strict=False")
        if fallback is not None and not isinstance(fallback, LanguageModel):
            raise ConfigError(f"fallback must be a LanguageModel, got {type(fallback).__name__}")
        self.store = store
        self.strict = strict
        self.fallback = fallback
        self._lock = threading.Lock()
        self._served = 0
        self._misses = 0

    @property
    def calls_served(self) -> int:
        """Calls answered from the store (exact or, non-strict, another site)."""
        return self._served

    @property
    def misses(self) -> int:
        """Calls whose exact ``(request key, site)`` was not recorded."""
        return self._misses

    def _lookup(self, request: CompletionRequest, site: CallSite | None) -> Completion | None:
        key = request.key()
        found = self.store.get(key, site)
        if found is None:
            failed = self.store.get_failure(key, site)
            if failed is not None:  # the call failed in the run: it fails again, here
                with self._lock:
                    self._served += 1
                raise _replayed(*failed)
        if found is None:
            with self._lock:
                self._misses += 1
            if not self.strict:
                other = self.store.get_any(key)
                if other is not None:
                    found = other[1]
        if found is not None:
            with self._lock:
                self._served += 1
            return found
        if self.fallback is None:
            raise self._miss(key, site)
        return None

    def _miss(self, key: str, site: CallSite | None) -> ReplayMiss:
        where = (
            "a call without a call site"
            if site is None
            else (f"call site agent={site.agent!r} n={site.n}")
        )
        hints = []
        elsewhere = self.store.sites_for(key)
        if elsewhere:
            shown = ", ".join(str(s) for s in elsewhere[:5])
            hints.append(f"the same request is recorded at other call sites ({shown})")
        here = self.store.keys_for(site)
        if here:
            hints.append(
                f"this call site was recorded with a different request (key {here[0][:16]}...): "
                "the prompt or the request settings changed"
            )
        if not hints:
            hints.append("the store holds nothing for this request or this call site")
        error = ReplayMiss(
            f"no recording for {where}, request key {key} in {self.store.path} "
            f"({len(self.store)} completions); " + "; ".join(hints)
        )
        error.site = None if site is None else str(site)
        error.request_key = key
        return error

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        """Return the recorded completion of *request* at *site*.

        Raises:
            ReplayMiss: Nothing recorded answers the call.
        """
        found = self._lookup(request, site)
        if found is not None:
            return found
        if self.fallback is None:  # pragma: no cover - _lookup raised already
            raise self._miss(request.key(), site)
        return self.fallback.complete(request, site=site)

    async def acomplete(
        self, request: CompletionRequest, *, site: CallSite | None = None
    ) -> Completion:
        """Return the recorded completion of *request* at *site*; see :meth:`complete`."""
        found = self._lookup(request, site)
        if found is not None:
            return found
        if self.fallback is None:  # pragma: no cover - _lookup raised already
            raise self._miss(request.key(), site)
        return await self.fallback.acomplete(request, site=site)


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    """Exactly *size* bytes of *stream*, or None at its end (a frame cut off: not written)."""
    data = stream.read(size)
    return data if len(data) == size else None


def serve_offload() -> None:
    """The child of an offloaded store (``_offload``): write the steps read from stdin.

    The store is ``sys.argv[1]``. A step's parts are written as they come, inside
    one transaction; its commit frame commits it and is answered with one JSON
    line. A failure rolls the step back; the parts after it are read and dropped
    until the commit, which answers the failure. Ctrl-C is the run's, not the
    child's.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    source, answers = sys.stdin.buffer, sys.stdout.buffer
    store = RecordingStore(sys.argv[1])
    cache: dict[Any, Any] = {}
    failed: Exception | None = None
    try:
        while True:
            head = _read_exactly(source, FRAME)
            size = 0 if head is None else int.from_bytes(head, "big")
            data = _read_exactly(source, size) if size else None
            if data is None:
                break  # a step not committed is rolled back as the store closes
            if failed is None:
                try:
                    store.stream(offloaded_rows(pickle.loads(data[1:]), cache))  # noqa: S301
                    if data[:1] == b"C":
                        store.stream_commit()
                except Exception as exc:  # said to the parent at the commit
                    failed = exc
                    store.stream_abort()
            if data[:1] == b"C":
                answer: dict[str, Any] = ({"ok": True} if failed is None else
                                          {"error": f"{type(failed).__name__}: {failed}"})
                failed = None
                answers.write(json.dumps(answer).encode("utf-8") + b"\n")
                answers.flush()
    finally:
        store.close()
