"""``ScriptedServer``: a real OpenAI-compatible HTTP server on loopback, answering from a model.

It lets tests, benchmarks and users exercise the whole HTTP path of
:class:`OpenAICompatible` (retries, ``Retry-After``, timeouts, the concurrency
limit) with no real server and no key. Standard library only: a
``ThreadingHTTPServer`` in a daemon thread.
"""

from __future__ import annotations

import json
import random
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from simulacra.errors import ConfigError
from simulacra.rng import derive_seed

from ._openai import SITE_HEADER, completion_to_openai, request_from_openai
from ._scripted import ScriptedModel
from ._types import CallSite, CompletionRequest, LanguageModel, is_int, is_number

__all__ = ["ScriptedServer"]

LatencySpec = float | tuple[float, float] | Callable[[CompletionRequest, CallSite | None], float]

_LATENCY_TAG = "simulacra.llm.server.latency.v1"


@dataclass(slots=True)
class _Fault:
    status: int | None = None
    retry_after: str | None = None
    body: str | None = None
    delay: float = 0.0
    disconnect: bool = False


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # the listen backlog: socketserver's 5 drops bursts of connects
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.owner._record_error()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30.0
    disable_nagle_algorithm = True  # headers and body go out in two writes
    wbufsize = -1  # ...unless buffered: handle_one_request() flushes once per reply
    server: _HTTPServer

    def do_POST(self) -> None:
        if self._gone():
            return
        self.server.owner._handle_post(self)

    def do_GET(self) -> None:
        if self._gone():
            return
        self.server.owner._handle_get(self)

    def _gone(self) -> bool:
        """A closed server is gone: a kept-alive connection is dropped, not answered."""
        if self.server.owner._stopping.is_set():
            self.close_connection = True
            return True
        return False

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests read the counters, not a log."""


def _send(
    handler: BaseHTTPRequestHandler,
    status: int,
    payload: Any,
    headers: dict[str, str] | None = None,
) -> None:
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)
        handler.wfile.flush()
    except OSError:  # the client gave up (a timeout): nothing to tell it
        handler.close_connection = True


def _error_body(message: str, kind: str, status: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


class ScriptedServer:
    """An OpenAI-compatible HTTP server on ``127.0.0.1`` (a free port), answering from a model.

    It serves ``POST /v1/chat/completions`` (and ``GET /v1/models``) from
    *model*, by default ``ScriptedModel(seed)``. The call site is read from
    the ``X-Simulacra-Site: agent/n`` header that :class:`OpenAICompatible`
    sends, so replies over HTTP equal the model's replies in process when the
    client's model name equals ``request.model``. It starts at once; use it as
    a context manager, or call :meth:`close`.

    Args:
        model: Any :class:`LanguageModel` (a ``ReplayModel`` serves
            recordings); ``None`` means ``ScriptedModel(seed)``.
        latency: Wall-clock seconds before each reply: a number, a pair
            ``(low, high)`` for a uniform delay drawn per request from
            ``(latency_seed, request key, site)`` (so replies arrive in a
            random but reproducible order), or ``callable(request, site)``.
        seed: The seed of the default ``ScriptedModel``.
        latency_seed: Seeds the random delays.
        api_key: When set, requests (completions and ``GET /v1/models``
            alike) must send ``Authorization: Bearer <api_key>``; others get
            HTTP 401.
        host: The interface to listen on.
        port: The port; 0 picks a free one.

    Attributes:
        calls: POST requests to the chat-completions path received.
        served: Requests answered with a completion (HTTP 200).
        peak_in_flight: The most requests being handled at once.
    """

    def __init__(
        self,
        model: LanguageModel | None = None,
        latency: LatencySpec = 0.0,
        *,
        seed: int | str | bytes = 0,
        latency_seed: int | str | bytes = 0,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if model is not None and not isinstance(model, LanguageModel):
            raise ConfigError(f"model must be a LanguageModel, got {type(model).__name__}")
        self.model: LanguageModel = ScriptedModel(seed) if model is None else model
        self._latency = self._check_latency(latency)
        derive_seed(latency_seed)  # validates it
        self._latency_seed = latency_seed
        self.api_key = api_key
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._faults: deque[_Fault] = deque()
        self._barrier: threading.Barrier | None = None
        self._barrier_left = 0
        self._barriers: list[threading.Barrier] = []
        self.calls = 0
        self.served = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.errors = 0
        self._requests: list[dict[str, Any]] = []
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.owner = self
        address = self._httpd.server_address
        self.host: str = str(address[0])
        self.port: int = int(address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"ScriptedServer:{self.port}",
            daemon=True,
        )
        self._thread.start()
        self._closed = False

    @staticmethod
    def _check_latency(latency: object) -> LatencySpec:
        if callable(latency):
            return latency
        if isinstance(latency, tuple) and len(latency) == 2:
            low, high = latency
            ok = all(isinstance(v, int | float) and not isinstance(v, bool) for v in latency)
            if ok and 0 <= low <= high:
                return (float(low), float(high))
        elif isinstance(latency, int | float) and not isinstance(latency, bool) and latency >= 0:
            return float(latency)
        raise ConfigError(
            "latency must be seconds >= 0, a pair (low, high) with 0 <= low <= high, or "
            f"callable(request, site) -> seconds; got {latency!r}"
        )

    # -- public surface -------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The API root to give a client: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of every chat-completions request received, in arrival order.

        Each is ``{"site": "agent/n" or None, "body": the JSON body (or None
        when it was not JSON), "status": the HTTP status answered (None for a
        dropped connection), "authorized": whether a bearer token came}``.
        """
        with self._lock:
            return [dict(r) for r in self._requests]

    def fail_next(
        self,
        count: int = 1,
        status: int = 500,
        *,
        retry_after: float | str | None = None,
        body: str | None = None,
    ) -> None:
        """Answer the next *count* requests with HTTP *status* instead of a completion.

        Args:
            count: How many requests fail.
            status: The HTTP status, e.g. 429, 500, 503, 400.
            retry_after: A ``Retry-After`` header: seconds, or a str sent
                verbatim (an HTTP date).
            body: The error message (an OpenAI-style error object is sent).
        """
        if not (is_int(status) and 400 <= status <= 599):
            raise ConfigError(f"status must be an HTTP error status 400..599, got {status!r}")
        header = (
            None
            if retry_after is None
            else (retry_after if isinstance(retry_after, str) else f"{retry_after:g}")
        )
        self._push(count, _Fault(status=status, retry_after=header, body=body))

    def delay_next(self, count: int, seconds: float) -> None:
        """Hold the next *count* requests *seconds* longer before answering (to force timeouts)."""
        if not (is_number(seconds) and seconds >= 0):
            raise ConfigError(f"seconds must be >= 0, got {seconds!r}")
        self._push(count, _Fault(delay=float(seconds)))

    def disconnect_next(self, count: int = 1) -> None:
        """Close the connection of the next *count* requests without answering."""
        self._push(count, _Fault(disconnect=True))

    def rendezvous(self, count: int, timeout: float = 10.0) -> None:
        """Hold the next *count* requests until all *count* are in flight together.

        With a client allowed *count* concurrent requests they all pass, so
        ``peak_in_flight >= count`` is reached without relying on timing. When
        fewer arrive together within *timeout* seconds, they get HTTP 500.
        """
        if not (is_int(count) and count >= 1):
            raise ConfigError(f"count must be an int >= 1, got {count!r}")
        barrier = threading.Barrier(count, timeout=timeout)
        with self._lock:
            self._barrier, self._barrier_left = barrier, count
            self._barriers.append(barrier)

    def reset(self) -> None:
        """Forget counters, recorded requests and pending faults."""
        with self._lock:
            self.calls = self.served = self.peak_in_flight = self.errors = 0
            self._requests.clear()
            self._faults.clear()
            self._barrier, self._barrier_left = None, 0

    def _push(self, count: int, fault: _Fault) -> None:
        if not (is_int(count) and count >= 0):
            raise ConfigError(f"count must be an int >= 0, got {count!r}")
        with self._lock:
            self._faults.extend(replace(fault) for _ in range(count))

    def close(self) -> None:
        """Stop serving, wake held requests, and close the socket."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            barriers = list(self._barriers)
        self._stopping.set()
        for barrier in barriers:
            barrier.abort()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ScriptedServer({self.base_url!r}, calls={self.calls})"

    # -- handlers ------------------------------------------------------------

    def _record_error(self) -> None:
        with self._lock:
            self.errors += 1

    def _delay_for(self, request: CompletionRequest, site: CallSite | None) -> float:
        latency = self._latency
        if callable(latency):
            return max(0.0, float(latency(request, site)))
        if isinstance(latency, tuple):
            low, high = latency
            path: tuple[int | str, ...] = (request.key(),)
            if site is not None:
                path += (site.agent, site.n)
            u = random.Random(derive_seed(self._latency_seed, _LATENCY_TAG, *path)).random()
            return low + (high - low) * u
        return latency

    def _handle_get(self, handler: _Handler) -> None:
        if handler.path.rstrip("/") in ("/v1/models", "/models"):
            # The key is checked here as for completions, so that a preflight can refuse it.
            if (self.api_key is not None
                    and handler.headers.get("Authorization") != f"Bearer {self.api_key}"):
                _send(handler, 401, _error_body("invalid API key", "invalid_request_error", 401))
                return
            _send(
                handler,
                200,
                {
                    "object": "list",
                    "data": [{"id": "scripted", "object": "model", "owned_by": "simulacra"}],
                },
            )
        else:
            _send(handler, 404, _error_body(f"no route {handler.path}", "not_found", 404))

    def _handle_post(self, handler: _Handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length > 0 else b""
        if handler.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            _send(handler, 404, _error_body(f"no route {handler.path}", "not_found", 404))
            return
        try:
            body: Any = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        site_text = handler.headers.get(SITE_HEADER)
        authorization = handler.headers.get("Authorization")
        record: dict[str, Any] = {
            "site": site_text,
            "body": body,
            "status": None,
            "authorized": bool(authorization),
        }
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            fault = self._faults.popleft() if self._faults else None
            barrier = self._barrier
            if barrier is not None:
                self._barrier_left -= 1
                if self._barrier_left <= 0:
                    self._barrier = None
            self._requests.append(record)
        status: int = 500
        payload: Any = _error_body("internal error", "server_error", 500)
        headers: dict[str, str] = {}
        try:
            status, payload, headers = self._answer(barrier, fault, body, site_text, authorization)
        finally:
            # Leave before the reply is written: the client may send its next
            # request as soon as it reads this one, and must not be counted twice.
            with self._lock:
                self.in_flight -= 1
                record["status"] = status if status else None
                if status == 200:
                    self.served += 1
        if status == 0:
            handler.close_connection = True
            try:
                handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        _send(handler, status, payload, headers)

    def _answer(
        self,
        barrier: threading.Barrier | None,
        fault: _Fault | None,
        body: Any,
        site_text: str | None,
        authorization: str | None,
    ) -> tuple[int, Any, dict[str, str]]:
        """Return (status, JSON payload, headers); status 0 drops the connection."""
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            return 401, _error_body("invalid API key", "invalid_request_error", 401), {}
        if barrier is not None:
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                message = "rendezvous broken: fewer requests arrived together than expected"
                return 500, _error_body(message, "server_error", 500), {}
        if fault is not None:
            if fault.delay:
                self._stopping.wait(fault.delay)
            if fault.disconnect:
                return 0, None, {}
            if fault.status is not None:
                headers = {} if fault.retry_after is None else {"Retry-After": fault.retry_after}
                message = fault.body or f"injected fault: HTTP {fault.status}"
                kind = "rate_limit_error" if fault.status == 429 else "server_error"
                return fault.status, _error_body(message, kind, fault.status), headers
        if not isinstance(body, dict):
            return 400, _error_body("body must be a JSON object", "invalid_request_error", 400), {}
        try:
            request = request_from_openai(body)
            site = None if site_text is None else CallSite.parse(site_text)
        except (ConfigError, TypeError, AttributeError) as exc:
            return 400, _error_body(str(exc), "invalid_request_error", 400), {}
        try:
            completion = self.model.complete(request, site=site)
        except Exception as exc:  # the model's failure is the client's HTTP 500
            message = f"{type(exc).__name__}: {exc}"
            return 500, _error_body(message, "server_error", 500), {}
        delay = self._delay_for(request, site)
        if delay > 0:
            self._stopping.wait(delay)
        response_id = "chatcmpl-" + request.key()[:24]
        return 200, completion_to_openai(completion, response_id=response_id), {}
