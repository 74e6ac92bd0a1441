"""Several model endpoints behind one model: a route per call, fallbacks, rate limits, pools.

A :class:`Router` is a :class:`~simulacra.llm.LanguageModel` over named
endpoints (:class:`Endpoint`, each any model: a server, a pool of servers, a
scripted model). ``route(site, request)`` names the endpoint of each call. It
must be a pure function of the call site and the request, so the same call
goes to the same endpoint in every run, on every backend, whatever order the
calls are made in: routing never changes what a run does, only who answers.

An endpoint that becomes unusable (its model raises
:class:`~simulacra.ProviderUnavailable`) is *down* for the rest of the run.
Its calls, this one included, go to its declared ``fallback`` (and on down the
chain); without one, the :class:`~simulacra.ProviderUnavailable` propagates and
stops the run. Every completion says who served it in its metadata
(``"endpoint"``, and ``"fallback_from"`` when it was moved), which a recording
keeps: a replay serves the same replies without any endpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from simulacra.errors import ConfigError, ProviderError, ProviderUnavailable, UnknownEndpoint

from ._types import CallSite, Completion, CompletionRequest, LanguageModel, canonical_json

__all__ = ["AFFINITIES", "Endpoint", "RateLimit", "Router", "ServerPool", "check_fallbacks",
           "endpoint_of"]

#: How a :class:`ServerPool` picks a server: by the request's first message
#: (``prefix``: calls sharing a persona or preamble meet the same server's
#: prefix cache), by the calling agent (``agent``), or in turn (``round_robin``).
AFFINITIES: Final = ("prefix", "agent", "round_robin")


class RateLimit:
    """At most *per_second* calls start per second: each start is spaced 1/rate after the last.

    Thread-safe, and usable from asyncio (:meth:`await_turn` sleeps without
    blocking the loop). Waiting only delays a call; it never changes a reply.
    """

    __slots__ = ("_lock", "_next", "interval", "per_second")

    def __init__(self, per_second: float) -> None:
        if not (isinstance(per_second, int | float) and per_second > 0):  # type: ignore[redundant-expr]
            raise ConfigError(f"rate limit must be a number of calls per second > 0, "
                              f"got {per_second!r}")
        self.per_second = float(per_second)
        self.interval = 1.0 / self.per_second
        self._lock = threading.Lock()
        self._next = 0.0

    def _reserve(self) -> float:
        """Take the next start slot; return how long to wait for it."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.interval
        return start - now

    def wait_turn(self) -> None:
        """Block until this call may start."""
        wait = self._reserve()
        if wait > 0:
            time.sleep(wait)

    async def await_turn(self) -> None:
        """Wait (on the running loop) until this call may start."""
        wait = self._reserve()
        if wait > 0:
            await asyncio.sleep(wait)


class ServerPool:
    """One endpoint served by several servers of the same model; a call goes to one of them.

    A server that becomes unusable (its model raises
    :class:`~simulacra.ProviderUnavailable`) is *down*: its calls go to the
    next live server of the pool, in order. The pool itself is down only once
    every server is. Which server answers changes no reply the model makes
    deterministically.

    Args:
        servers: The models, one per server (at least one).
        affinity: One of :data:`AFFINITIES`. ``agent`` keeps each agent on one
            server; ``prefix`` hashes the request's first message (role and
            content), so calls that share that prefix go to the same server;
            ``round_robin`` takes the servers in turn.
        names: What messages call each server (its URL), or None.
    """

    __slots__ = ("_lock", "_turn", "affinity", "down", "names", "servers")

    def __init__(self, servers: Sequence[LanguageModel], affinity: str = "agent",
                 names: Sequence[str] | None = None) -> None:
        if not servers:
            raise ConfigError("a server pool needs at least one server")
        if affinity not in AFFINITIES:
            raise ConfigError(f"affinity must be one of {AFFINITIES}, got {affinity!r}")
        self.servers = tuple(servers)
        self.affinity = affinity
        self.names = tuple(names) if names is not None else tuple(
            f"server {i}" for i in range(len(self.servers)))
        self._turn = itertools.count()
        self._lock = threading.Lock()
        #: The servers found unusable (by index), with the error that said so.
        self.down: dict[int, ProviderUnavailable] = {}

    def pick(self, request: CompletionRequest, site: CallSite | None) -> int:
        """The index of the server this call is for (before skipping servers that are down)."""
        n = len(self.servers)
        if n == 1:
            return 0
        if self.affinity == "round_robin":
            return next(self._turn) % n
        if self.affinity == "agent":
            text = "" if site is None else site.agent
        else:
            first = request.messages[0]
            text = f"{first.role}\x00{first.content}"
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big") % n

    def _live(self, start: int) -> int:
        """The first server from *start* on (in turn) that is not down, or raise."""
        n = len(self.servers)
        for k in range(n):
            index = (start + k) % n
            if index not in self.down:
                return index
        reasons = "; ".join(f"{self.names[i]}: {e}" for i, e in sorted(self.down.items()))
        raise ProviderUnavailable(f"every server of the pool is down ({reasons})")

    def _lost(self, index: int, error: ProviderUnavailable) -> None:
        with self._lock:
            self.down.setdefault(index, error)

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        """The completion of *request*, from its server, or the next live one."""
        index = self._live(self.pick(request, site))
        while True:
            try:
                return self.servers[index].complete(request, site=site)
            except ProviderUnavailable as exc:
                self._lost(index, exc)
                index = self._live(index)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        """Like :meth:`complete`, on asyncio."""
        index = self._live(self.pick(request, site))
        while True:
            try:
                return await self.servers[index].acomplete(request, site=site)
            except ProviderUnavailable as exc:
                self._lost(index, exc)
                index = self._live(index)

    def close(self) -> None:
        """Close every server's model (its connections)."""
        for server in self.servers:
            close = getattr(server, "close", None)
            if callable(close):
                close()

    async def aclose(self) -> None:
        """Close every server's asyncio connections."""
        for server in self.servers:
            aclose = getattr(server, "aclose", None)
            if callable(aclose):
                await aclose()


@dataclass(slots=True)
class Endpoint:
    """One named endpoint of a :class:`Router`.

    Attributes:
        name: What routes and the run's files call it.
        model: The model that serves it (a provider, a :class:`ServerPool`...).
        fallback: The endpoint that takes its calls once it is down, or None.
        rate: A :class:`RateLimit` on its calls, or None.
        price: ``price(prompt_tokens, completion_tokens) -> cost`` at its
            pricing, or None (not priced).
        info: What the run's files say of it (provider, model, URLs; never a key).
    """

    name: str
    model: LanguageModel
    fallback: str | None = None
    rate: RateLimit | None = None
    price: Callable[[int, int], float] | None = None
    info: dict[str, Any] = field(default_factory=dict)


def _annotated(completion: Completion, endpoint: str, moved_from: str | None) -> Completion:
    """*completion* with who served it in its metadata."""
    meta = completion.metadata
    if not isinstance(meta, dict):
        meta = {"provider": meta}
    meta["endpoint"] = endpoint
    if moved_from is not None:
        meta["fallback_from"] = moved_from
    return dataclasses.replace(completion, metadata_json=canonical_json(meta))


def endpoint_of(completion: Completion) -> tuple[str | None, str | None]:
    """``(endpoint, fallback_from)`` of a completion a :class:`Router` returned, else Nones."""
    text = completion.metadata_json
    if '"endpoint"' not in text:
        return None, None
    try:
        meta = json.loads(text)
    except ValueError:
        return None, None
    endpoint, moved = meta.get("endpoint"), meta.get("fallback_from")
    return (endpoint if isinstance(endpoint, str) else None,
            moved if isinstance(moved, str) else None)


class Router:
    """A model that sends each call to one of several named endpoints (see the module's doc).

    Args:
        endpoints: The endpoints (names unique).
        route: ``route(site, request) -> endpoint name``; a pure function.

    Raises:
        ConfigError: Two endpoints share a name, a fallback names no endpoint
            or the fallbacks make a cycle.
    """

    def __init__(self, endpoints: Sequence[Endpoint],
                 route: Callable[[CallSite | None, CompletionRequest], str]) -> None:
        named: dict[str, Endpoint] = {}
        for endpoint in endpoints:
            if endpoint.name in named:
                raise ConfigError(f"two endpoints are named {endpoint.name!r}")
            named[endpoint.name] = endpoint
        if not named:
            raise ConfigError("a router needs at least one endpoint")
        check_fallbacks({name: e.fallback for name, e in named.items()})
        self.endpoints: Mapping[str, Endpoint] = named
        self.route = route
        self._lock = threading.Lock()
        #: Endpoints found unusable, with the error that said so.
        self.down: dict[str, ProviderUnavailable] = {}
        #: Calls moved to a fallback: (from, to) -> count.
        self.moved: dict[tuple[str, str], int] = {}

    # -- where a call goes ----------------------------------------------------

    def _target(self, site: CallSite | None, request: CompletionRequest) -> str:
        try:
            name = self.route(site, request)
        except UnknownEndpoint:
            raise
        except Exception as exc:
            raise UnknownEndpoint(f"the route of call {site} failed: {type(exc).__name__}: "
                                  f"{exc}") from exc
        if name not in self.endpoints:
            raise UnknownEndpoint(f"the route of call {site} names endpoint {name!r}, which is "
                              f"not declared (endpoints: {', '.join(self.endpoints)})")
        return name

    def _next(self, name: str, error: ProviderUnavailable) -> str:
        """The endpoint to try after *name* failed with *error* (now down), or raise."""
        with self._lock:
            self.down.setdefault(name, error)
        fallback = self.endpoints[name].fallback
        if fallback is None:
            raise ProviderUnavailable(f"endpoint {name!r}: {error}") from error
        return fallback

    def _live(self, name: str) -> str:
        """*name*, or the first endpoint down its fallback chain that is not down."""
        while name in self.down:
            fallback = self.endpoints[name].fallback
            if fallback is None:
                error = self.down[name]
                raise ProviderUnavailable(f"endpoint {name!r}: {error}") from error
            name = fallback
        return name

    def _count_move(self, routed: str, name: str) -> None:
        if name != routed:
            with self._lock:
                self.moved[(routed, name)] = self.moved.get((routed, name), 0) + 1

    @property
    def tripped(self) -> ProviderUnavailable | None:
        """The error of an endpoint that is down with no fallback left (the run must stop)."""
        for name in self.down:
            try:
                self._live(name)
            except ProviderUnavailable as exc:
                return exc
        return None

    # -- calls ----------------------------------------------------------------

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        """The completion of *request*, from the endpoint its route names (or a fallback).

        Raises:
            UnknownEndpoint: The route names an endpoint that is not declared,
                or the routing function raised.
            ProviderUnavailable: The endpoint is down and has no fallback left.
        """
        routed = self._target(site, request)
        name = routed
        while True:
            try:
                name = self._live(name)
            except ProviderUnavailable as exc:
                _blame(exc, name, routed)
                raise
            endpoint = self.endpoints[name]
            if endpoint.rate is not None:
                endpoint.rate.wait_turn()
            try:
                completion = endpoint.model.complete(request, site=site)
            except Exception as exc:
                name = self._failed(name, routed, exc)
                continue
            self._count_move(routed, name)
            return _annotated(completion, name, None if name == routed else routed)

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        """Like :meth:`complete`, on asyncio."""
        routed = self._target(site, request)
        name = routed
        while True:
            try:
                name = self._live(name)
            except ProviderUnavailable as exc:
                _blame(exc, name, routed)
                raise
            endpoint = self.endpoints[name]
            if endpoint.rate is not None:
                await endpoint.rate.await_turn()
            try:
                completion = await endpoint.model.acomplete(request, site=site)
            except Exception as exc:
                name = self._failed(name, routed, exc)
                continue
            self._count_move(routed, name)
            return _annotated(completion, name, None if name == routed else routed)

    def _failed(self, name: str, routed: str, error: Exception) -> str:
        """After *error* on endpoint *name*: the endpoint to try next, or raise *error*.

        A :class:`~simulacra.ProviderUnavailable` makes the endpoint down. So
        does any provider error once the endpoint is down (a call in flight
        when another call found it down): such a call moves on too.
        """
        down = self.down.get(name)
        if down is None:
            tripped = getattr(self.endpoints[name].model, "tripped", None)
            down = tripped if isinstance(tripped, ProviderUnavailable) else None
        if isinstance(error, ProviderUnavailable):
            down = error
        elif down is None or not isinstance(error, ProviderError):
            _blame(error, name, routed)
            raise error
        try:
            return self._next(name, down)
        except ProviderUnavailable as exc:
            _blame(exc, name, routed)
            raise exc from error

    def price(self, completion: Completion) -> float | None:
        """The cost of *completion* at its serving endpoint's pricing (None: not priced)."""
        name, _moved = endpoint_of(completion)
        endpoint = None if name is None else self.endpoints.get(name)
        if endpoint is None or endpoint.price is None:
            return None
        return endpoint.price(completion.prompt_tokens, completion.completion_tokens)

    def close(self) -> None:
        """Close every endpoint's model (its connections)."""
        for endpoint in self.endpoints.values():
            close = getattr(endpoint.model, "close", None)
            if callable(close):
                close()

    async def aclose(self) -> None:
        """Close every endpoint's asyncio connections."""
        for endpoint in self.endpoints.values():
            aclose = getattr(endpoint.model, "aclose", None)
            if callable(aclose):
                await aclose()


def _blame(error: BaseException, endpoint: str, routed: str) -> None:
    """Name the endpoint on a failed call's error (``calls.jsonl`` says who failed it)."""
    try:
        error.endpoint = endpoint  # type: ignore[attr-defined]
        if endpoint != routed:
            error.fallback_from = routed  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception that takes no attributes
        pass


def check_fallbacks(fallbacks: Mapping[str, str | None], where: str = "endpoint") -> None:
    """Every fallback names a declared endpoint, and no chain comes back on itself.

    Raises:
        ConfigError: One line naming the endpoint and the chain.
    """
    for name, fallback in fallbacks.items():
        if fallback is not None and fallback not in fallbacks:
            raise ConfigError(f"{where} {name!r}: fallback {fallback!r} is not a declared "
                              f"endpoint (declared: {', '.join(fallbacks)})")
    for start in fallbacks:
        chain = [start]
        at = fallbacks[start]
        while at is not None:
            if at in chain:
                loop = " -> ".join([*chain[chain.index(at):], at])
                raise ConfigError(f"the endpoints' fallbacks make a cycle: {loop}")
            chain.append(at)
            at = fallbacks[at]
