"""Record and replay: a content-addressed SQLite store of completions, and the models on it.

A recording is keyed by ``(request key, agent, n)``: the SHA-256 of the
canonical request plus its call site. A run replayed from the store is exact
(the same completions, whatever the order the calls are made in) and makes no
model calls; in strict mode a call the store does not hold fails with
:class:`~simulacra.errors.ReplayMiss`, naming the call site.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from simulacra._util import ModelWrapper
from simulacra.errors import (
    ConfigError,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
    RecordingError,
    ReplayMiss,
)

from ._types import CallSite, Completion, CompletionRequest, LanguageModel

__all__ = ["STORE_FORMAT", "RecordingModel", "RecordingStore", "ReplayModel"]

STORE_FORMAT = "simulacra.llm.recordings.v1"
"""The format tag written into every store; another tag is refused."""

_NO_AGENT, _NO_N = "", -1  # the row of a call made without a call site

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS completions (
    request_key TEXT NOT NULL,
    agent TEXT NOT NULL,
    n INTEGER NOT NULL,
    completion TEXT NOT NULL,
    PRIMARY KEY (request_key, agent, n)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS completions_by_site ON completions (agent, n);
CREATE TABLE IF NOT EXISTS requests (request_key TEXT PRIMARY KEY, request TEXT NOT NULL)
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS failures (
    request_key TEXT NOT NULL,
    agent TEXT NOT NULL,
    n INTEGER NOT NULL,
    error TEXT NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (request_key, agent, n)
) WITHOUT ROWID;
"""

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


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise ConfigError(f"request key must be a non-empty str, got {key!r}")
    return key


class RecordingStore:
    """A SQLite file of completions keyed by ``(request key, agent, n)``.

    Thread-safe: one connection behind a lock, in WAL mode. ``len(store)`` is
    the number of completions; iteration yields ``(request_key, site)`` in
    sorted order. Use it as a context manager, or call :meth:`close`.

    Args:
        path: The database file (created with its directory if missing), or
            ``":memory:"``.
        readonly: Open an existing file for reading only.

    Raises:
        RecordingError: The file is not a store of this format.
    """

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = str(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        if readonly:
            if not Path(self.path).exists():
                raise RecordingError(f"recording store {self.path} does not exist")
            target, uri = Path(self.path).resolve().as_uri() + "?mode=ro", True
        else:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            target, uri = self.path, False
        try:
            self._db = sqlite3.connect(target, uri=uri, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise RecordingError(f"{self.path} is not a recording store: {exc}") from exc
        try:
            self._open()
        except BaseException:
            self._db.close()  # a store that failed to open keeps no connection
            raise
        self._closed = False

    def _open(self) -> None:
        """Set up (or, read-only, only check) the schema of a fresh connection."""
        try:
            if not self.readonly:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(_SCHEMA)
                self._db.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('format', ?)", (STORE_FORMAT,)
                )
                self._db.commit()
            row = self._db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise RecordingError(f"{self.path} is not a recording store: {exc}") from exc
        if row is None or row[0] != STORE_FORMAT:
            found = None if row is None else row[0]
            raise RecordingError(f"{self.path} holds format {found!r}, expected {STORE_FORMAT!r}")

    def __repr__(self) -> str:
        return f"RecordingStore({self.path!r})"

    def _execute(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            return self._db.execute(sql, args).fetchall()

    def put(
        self,
        key: str,
        site: CallSite | None,
        completion: Completion,
        *,
        request: CompletionRequest | None = None,
    ) -> None:
        """Store *completion* under ``(key, site)``, replacing what was there.

        Args:
            key: The request key (``request.key()``).
            site: The call site, or ``None``.
            completion: The completion to store.
            request: The request itself, kept once per key for inspection.
        """
        if self.readonly:
            raise RecordingError(f"recording store {self.path} is open read-only")
        _check_key(key)
        agent, n = _site_columns(site)
        if not isinstance(completion, Completion):
            raise ConfigError(
                f"completion must be a Completion, got {type(completion).__name__} {completion!r}"
            )
        text = completion.to_json()
        request_text = None if request is None else request.canonical().decode("utf-8")
        with self._lock:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            with self._db:
                self._db.execute(
                    "INSERT OR REPLACE INTO completions (request_key, agent, n, completion) "
                    "VALUES (?, ?, ?, ?)",
                    (key, agent, n, text),
                )
                if request_text is not None:
                    self._db.execute(
                        "INSERT OR IGNORE INTO requests (request_key, request) VALUES (?, ?)",
                        (key, request_text),
                    )

    def put_failure(self, key: str, site: CallSite | None, error: BaseException) -> None:
        """Store that the call ``(key, site)`` failed with *error* (its type name and message).

        A resumed run and a replay raise the same error at the same call site,
        so a run in which the provider failed some calls stays replayable.
        """
        if self.readonly:
            raise RecordingError(f"recording store {self.path} is open read-only")
        _check_key(key)
        agent, n = _site_columns(site)
        with self._lock:
            if self._closed:
                raise RecordingError(f"recording store {self.path} is closed")
            with self._db:
                self._db.execute(
                    "INSERT OR REPLACE INTO failures (request_key, agent, n, error, message) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (key, agent, n, type(error).__name__, str(error)),
                )

    def get_failure(self, key: str, site: CallSite | None) -> tuple[str, str] | None:
        """The ``(error type name, message)`` recorded for ``(key, site)``, or ``None``."""
        agent, n = _site_columns(site)
        try:
            rows = self._execute(
                "SELECT error, message FROM failures WHERE request_key = ? AND agent = ? "
                "AND n = ?", (_check_key(key), agent, n))
        except sqlite3.OperationalError:  # a read-only store from before failures were kept
            return None
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def calls_per_agent(self) -> dict[str, int]:
        """How many distinct calls (completions or failures) are recorded per agent."""
        sql = ("SELECT agent, COUNT(DISTINCT n) FROM (SELECT agent, n FROM completions "
               "UNION SELECT agent, n FROM failures) WHERE n >= 0 GROUP BY agent")
        try:
            rows = self._execute(sql)
        except sqlite3.OperationalError:
            rows = self._execute("SELECT agent, COUNT(DISTINCT n) FROM completions WHERE n >= 0 "
                                 "GROUP BY agent")
        return {str(agent): int(count) for agent, count in rows}

    def get(self, key: str, site: CallSite | None) -> Completion | None:
        """Return the completion stored under ``(key, site)``, or ``None``."""
        agent, n = _site_columns(site)
        rows = self._execute(
            "SELECT completion FROM completions WHERE request_key = ? AND agent = ? AND n = ?",
            (_check_key(key), agent, n),
        )
        return self._load(rows[0][0], key, site) if rows else None

    def get_any(self, key: str) -> tuple[CallSite | None, Completion] | None:
        """Return the first ``(site, completion)`` stored for *key* under any site, or ``None``."""
        rows = self._execute(
            "SELECT agent, n, completion FROM completions WHERE request_key = ? "
            "ORDER BY agent, n LIMIT 1",
            (_check_key(key),),
        )
        if not rows:
            return None
        agent, n, text = rows[0]
        site = _site_of(str(agent), int(n))
        return site, self._load(text, key, site)

    def request(self, key: str) -> CompletionRequest | None:
        """Return the request recorded for *key*, if it was stored with one."""
        rows = self._execute("SELECT request FROM requests WHERE request_key = ?", (key,))
        if not rows:
            return None
        return CompletionRequest.from_dict(json.loads(str(rows[0][0])))

    def sites_for(self, key: str) -> list[CallSite | None]:
        """Return the call sites that hold a recording of *key*, sorted."""
        rows = self._execute(
            "SELECT agent, n FROM completions WHERE request_key = ? ORDER BY agent, n", (key,)
        )
        return [_site_of(str(a), int(n)) for a, n in rows]

    def keys_for(self, site: CallSite | None) -> list[str]:
        """Return the request keys recorded at *site*, sorted."""
        agent, n = _site_columns(site)
        rows = self._execute(
            "SELECT request_key FROM completions WHERE agent = ? AND n = ? ORDER BY request_key",
            (agent, n),
        )
        return [str(r[0]) for r in rows]

    def _load(self, text: object, key: str, site: CallSite | None) -> Completion:
        try:
            return Completion.from_json(str(text))
        except ConfigError as exc:
            raise RecordingError(
                f"recording store {self.path}: damaged completion at site {site} key {key}: {exc}"
            ) from None

    def __len__(self) -> int:
        return int(self._execute("SELECT COUNT(*) FROM completions")[0][0])

    def __contains__(self, item: object) -> bool:
        if not (isinstance(item, tuple) and len(item) == 2):
            return False
        key, site = item
        return isinstance(key, str) and self.get(key, site) is not None

    def __iter__(self) -> Iterator[tuple[str, CallSite | None]]:
        rows = self._execute("SELECT request_key, agent, n FROM completions ORDER BY agent, n, 1")
        return iter([(str(k), _site_of(str(a), int(n))) for k, a, n in rows])

    def close(self) -> None:
        """Commit and close the database; later use raises :class:`RecordingError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._db.close()

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
        """Return *inner*'s completion of *request*, recorded under its call site."""
        found = self._hit(request, site)
        if found is not None:
            return found
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
