"""``OpenAICompatible``: the chat-completions HTTP API of vLLM, llama.cpp, Ollama and hosted APIs.

httpx is imported when the first call is made, so ``import simulacra.llm``
works without it. Policy lives here, explicitly: a timeout on every attempt,
retries with jittered exponential backoff on HTTP 429, 5xx, timeouts and
connection errors (honouring ``Retry-After``), a concurrency limit, and token
and cost accounting.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import json
import math
import os
import queue
import random
import ssl
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from simulacra.errors import ConfigError, ProviderError, ProviderTimeout, RateLimited

from ._types import (
    CallSite,
    ChatMessage,
    Completion,
    CompletionRequest,
    ToolCall,
    ToolSpec,
    approx_tokens,
    canonical_json,
)

if TYPE_CHECKING:
    import httpx

__all__ = [
    "SITE_HEADER",
    "OpenAICompatible",
    "TokenPrices",
    "UsageStats",
    "completion_from_openai",
    "completion_to_openai",
    "request_from_openai",
    "request_to_openai",
]

SITE_HEADER = "X-Simulacra-Site"
"""The header that carries the call site, ``agent/n`` (agent percent-encoded)."""

_SCHEMA_NAME = "response"
#: How :class:`OpenAICompatible` may send a response schema (``schema_format``).
SCHEMA_FORMATS = ("json_schema", "json_object")


# -- the wire format ---------------------------------------------------------------


def request_to_openai(request: CompletionRequest, model: str | None = None,
                      schema_format: str = "json_schema") -> dict[str, Any]:
    """Return the ``POST /chat/completions`` JSON body for *request*.

    Args:
        request: The request.
        model: The model name to send; ``None`` sends ``request.model``.
        schema_format: How a response schema is sent: ``"json_schema"``
            (OpenAI's form, below) or ``"json_object"`` (``{"type":
            "json_object", "schema": ...}``, the form llama.cpp's servers
            honour; llama-cpp-python's ignores OpenAI's).

    A ``"tool"`` message's ``name`` is sent as ``tool_call_id``; tools become
    ``{"type": "function", "function": {...}}``; a response schema becomes
    ``response_format = {"type": "json_schema", "json_schema": {"name":
    "response", "schema": ..., "strict": true}}``.
    """
    messages = []
    for message in request.messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.name is not None:
            item["tool_call_id" if message.role == "tool" else "name"] = message.name
        messages.append(item)
    body: dict[str, Any] = {
        "model": request.model if model is None else model,
        "messages": messages,
        "temperature": request.temperature,
    }
    if request.seed is not None:
        body["seed"] = request.seed
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
    if request.response_schema_json is not None and schema_format == "json_object":
        body["response_format"] = {"type": "json_object", "schema": request.response_schema}
    elif request.response_schema_json is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": _SCHEMA_NAME,
                "schema": request.response_schema,
                "strict": True,
            },
        }
    return body


def request_from_openai(body: Mapping[str, Any]) -> CompletionRequest:
    """Rebuild a :class:`CompletionRequest` from a chat-completions JSON body.

    The inverse of :func:`request_to_openai` (what :class:`ScriptedServer` uses).

    Raises:
        ConfigError: The body is malformed; the message names the field.
    """
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise ConfigError(f"'messages' must be a list, got {raw_messages!r}")
    messages = []
    for i, item in enumerate(raw_messages):
        if not isinstance(item, dict):
            raise ConfigError(f"messages[{i}] must be an object, got {item!r}")
        content = item.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        name = item.get("tool_call_id") if item.get("role") == "tool" else item.get("name")
        messages.append(ChatMessage(item.get("role", ""), content or "", name))
    tools = []
    for i, tool in enumerate(body.get("tools") or ()):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            raise ConfigError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        tools.append(
            ToolSpec(
                function.get("name", ""),
                function.get("description", "") or "",
                canonical_json(function.get("parameters", {})),
            )
        )
    schema_json = None
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema", {})
        schema_json = canonical_json(schema)
    elif (isinstance(response_format, dict) and response_format.get("type") == "json_object"
          and response_format.get("schema") is not None):
        schema_json = canonical_json(response_format["schema"])
    temperature = body.get("temperature", 1.0)
    return CompletionRequest(
        tuple(messages),
        model=body.get("model") or "scripted",
        temperature=float(temperature) if isinstance(temperature, int | float) else temperature,
        seed=body.get("seed"),
        max_tokens=body.get("max_tokens", body.get("max_completion_tokens")),
        tools=tuple(tools),
        response_schema_json=schema_json,
    )


def completion_to_openai(
    completion: Completion, *, response_id: str, created: int = 0
) -> dict[str, Any]:
    """Return the chat-completions response JSON for *completion*."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    if completion.tool_calls:
        message["content"] = completion.text or None
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call in completion.tool_calls
        ]
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": completion.model,
        "system_fingerprint": "simulacra-scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": completion.finish_reason}],
        "usage": {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "total_tokens": completion.total_tokens,
        },
    }


def completion_from_openai(data: Any, request: CompletionRequest | None = None) -> Completion:
    """Parse a chat-completions response JSON into a :class:`Completion`.

    Token counts come from ``usage``; when a server sends none, they are
    estimated with :func:`approx_tokens`. The metadata keeps ``id``,
    ``system_fingerprint`` and ``usage``.

    Raises:
        ValueError: The response has no ``choices[0].message``.
    """
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("the response has no choices[0].message") from None
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise ValueError(f"choices[0].message.content must be a str, got {text!r}")
    calls = []
    for i, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):  # some servers send an object
            arguments = canonical_json(arguments)
        call_id = str(call.get("id") or f"call_{i}")
        calls.append(ToolCall(call_id, function.get("name", ""), arguments))
    usage = data.get("usage") or {}
    prompt_tokens = usage.get("prompt_tokens")
    if not isinstance(prompt_tokens, int):
        prompt_tokens = (
            sum(approx_tokens(m.content) + 3 for m in request.messages) if request else 0
        )
    completion_tokens = usage.get("completion_tokens")
    if not isinstance(completion_tokens, int):
        completion_tokens = approx_tokens(text)
    metadata = {
        key: data[key] for key in ("id", "system_fingerprint", "usage") if data.get(key) is not None
    }
    return Completion(
        text,
        tuple(calls),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        finish_reason=choice.get("finish_reason") or "stop",
        model=str(data.get("model") or ""),
        metadata_json=canonical_json(metadata),
    )


# -- accounting -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenPrices:
    """Prices in any currency per one million tokens.

    Attributes:
        prompt: The price of 1M prompt (input) tokens.
        completion: The price of 1M completion (output) tokens.
    """

    prompt: float = 0.0
    completion: float = 0.0

    def __post_init__(self) -> None:
        for name in ("prompt", "completion"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(
                    f"TokenPrices.{name} must be a finite number >= 0 (per 1M tokens), "
                    f"got {value!r}"
                )

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Return the cost of a call with these token counts."""
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1_000_000


def _coerce_prices(prices: object) -> TokenPrices:
    if prices is None:
        return TokenPrices()
    if isinstance(prices, TokenPrices):
        return prices
    if isinstance(prices, Mapping):
        unknown = sorted(set(prices) - {"prompt", "completion"})
        if unknown:
            raise ConfigError(
                f"prices has unknown keys {unknown}; expected 'prompt' and 'completion' "
                "(per 1M tokens)"
            )
        return TokenPrices(prices.get("prompt", 0.0), prices.get("completion", 0.0))
    if isinstance(prices, Sequence) and not isinstance(prices, str) and len(prices) == 2:
        return TokenPrices(prices[0], prices[1])
    raise ConfigError(
        "prices must be a TokenPrices, a mapping {'prompt': p, 'completion': c} or a pair "
        f"(prompt, completion) per 1M tokens, got {prices!r}"
    )


@dataclass(frozen=True, slots=True)
class UsageStats:
    """What a provider has done so far (a snapshot).

    Attributes:
        calls: Calls that returned a completion.
        retries: HTTP attempts beyond the first of each call.
        prompt_tokens: Prompt tokens over the returned completions.
        completion_tokens: Completion tokens over the returned completions.
        cost: ``prices`` applied to the token counts.
        peak_in_flight: The most HTTP requests ever open at once.
        failures: Calls that raised.
        attempts: HTTP requests sent.
    """

    calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    peak_in_flight: int = 0
    failures: int = 0
    attempts: int = 0

    @property
    def total_tokens(self) -> int:
        """``prompt_tokens + completion_tokens``."""
        return self.prompt_tokens + self.completion_tokens


# -- retry policy -------------------------------------------------------------------


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Return the seconds to wait that a ``Retry-After`` header asks for, or ``None``.

    Args:
        value: The header: delay seconds (``"3"``, ``"1.5"``) or an HTTP date.
        now: The current Unix time, for an HTTP date (default ``time.time()``).
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


#: Server errors that say the server cannot serve this request at all: not retried.
_PERMANENT_5XX = frozenset({501, 505})


def error_snippet(text: str) -> str:
    """An HTTP error body as one short piece of a one-line message.

    A JSON body (an API's error) is kept, its whitespace folded, up to 300
    characters. Anything else is cut to its first line, at most 200
    characters; an HTML page is named as such instead of printed.
    """
    body = text.strip()
    if not body:
        return "(no body)"
    try:
        json.loads(body)
    except ValueError:
        pass
    else:
        return " ".join(body[:300].split())
    if body.startswith("<"):
        return "an HTML page, not an API's JSON error"
    lines = body.splitlines()
    first = " ".join(lines[0].split())
    if len(first) > 200:
        return first[:200] + " ..."
    return first + (" ..." if len(lines) > 1 else "")


def _is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_positive(value: object, field: str, *, zero: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        expected = ">= 0" if zero else "> 0"
        raise ConfigError(f"{field} must be a finite number {expected}, got {value!r}")
    return float(value)


def _check_int(value: object, field: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{field} must be an int >= {low}, got {value!r}")
    return value


_SHARD = 8
"""Connections per async client. httpcore's pool scans all its connections (and
polls their sockets) for every request it assigns, so one pool of 64 busy
connections costs O(64 * 64) per event; shards of 8 keep that flat."""


@dataclass(slots=True)
class _LoopState:
    clients: list[httpx.AsyncClient]
    slots: asyncio.Queue[int]  # one entry per request allowed in flight, naming its client
    keeper: AsyncGenerator[None, None]
    started: bool = False


async def _keeper(clients: list[httpx.AsyncClient]) -> AsyncGenerator[None, None]:
    """Close *clients* when their event loop shuts down its async generators.

    ``asyncio.run`` (and ``loop.shutdown_asyncgens()``) closes every async
    generator first iterated on the loop, so clients that their user never
    closed are still closed before the loop is, and leave no transport behind.
    """
    try:
        yield
    finally:
        for client in clients:
            await client.aclose()


class _Attempt:
    """The outcome of one HTTP attempt: a response, or the exception it raised."""

    __slots__ = ("error", "response")

    def __init__(self, response: httpx.Response | None, error: Exception | None) -> None:
        self.response = response
        self.error = error


class OpenAICompatible:
    """A provider that speaks OpenAI's ``POST {base_url}/chat/completions``.

    Thread-safe: lazily created ``httpx.Client`` objects, one per 8
    connections, serve every thread, and a queue of *concurrency* slots keeps
    at most *concurrency* requests open (a slot also names the client to use:
    one client's connection pool scans all its connections for every request,
    which costs more than the request itself at hundreds of connections);
    :meth:`acomplete` keeps the same per running event loop, with
    ``httpx.AsyncClient`` objects and an ``asyncio.Queue`` of slots. The loop's
    clients close when the loop shuts down its async generators (as
    ``asyncio.run`` does), or at :meth:`aclose_loop` / :meth:`aclose`.

    A call sends the provider's *model* (not ``request.model``). When a call
    site is given it is sent in the ``X-Simulacra-Site: agent/n`` header.

    Args:
        base_url: The API root, e.g. ``"http://127.0.0.1:8000/v1"`` (vLLM) or
            ``"https://api.openai.com/v1"``.
        model: The model name to send.
        api_key_env: The name of the environment variable that holds the API
            key, read at every call (``Authorization: Bearer ...``). A missing
            key is allowed only for a loopback URL; ``None`` never sends one.
        timeout: Seconds allowed for each attempt (connect, write, read, pool).
        max_retries: Retries after the first attempt, on HTTP 429, 5xx,
            timeouts and connection errors. Other 4xx are not retried.
        concurrency: The most requests open at once (sync and, per event
            loop, async).
        backoff_base: The first backoff in seconds; it doubles per retry and
            is jittered to a uniform draw in ``[d/2, d]``.
        backoff_max: The cap of the backoff before jitter.
        prices: :class:`TokenPrices`, a mapping ``{"prompt": p, "completion":
            c}`` or a pair, per one million tokens, for :attr:`usage`'s cost.
        retry_after_max: A ``Retry-After`` longer than this (seconds) is not
            waited for: the call fails at once.
        headers: Extra headers sent with every request.
        schema_format: How a response schema is sent (see
            :func:`request_to_openai`): ``"json_schema"`` or ``"json_object"``.
        jitter_seed: Seeds the backoff jitter (wall-clock only; it never
            changes a result). ``None`` seeds from the OS.
    """

    def __init__(  # noqa: PLR0917  (the documented positional order)
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 5,
        concurrency: int = 16,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        prices: TokenPrices | Mapping[str, float] | Sequence[float] | None = None,
        *,
        retry_after_max: float = 600.0,
        headers: Mapping[str, str] | None = None,
        jitter_seed: int | None = None,
        schema_format: str = "json_schema",
    ) -> None:
        if urlsplit(str(base_url)).scheme not in ("http", "https"):
            raise ConfigError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not model or not isinstance(model, str):
            raise ConfigError(f"model must be a non-empty str, got {model!r}")
        if api_key_env is not None and (not api_key_env or not isinstance(api_key_env, str)):
            raise ConfigError(
                f"api_key_env must be the name of an environment variable or None, "
                f"got {api_key_env!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = _check_positive(timeout, "timeout")
        self.max_retries = _check_int(max_retries, "max_retries", 0)
        self.concurrency = _check_int(concurrency, "concurrency", 1)
        self.backoff_base = _check_positive(backoff_base, "backoff_base", zero=True)
        self.backoff_max = _check_positive(backoff_max, "backoff_max", zero=True)
        self.retry_after_max = _check_positive(retry_after_max, "retry_after_max", zero=True)
        self.prices = _coerce_prices(prices)
        self.headers = dict(headers or {})
        if schema_format not in SCHEMA_FORMATS:
            raise ConfigError(f"schema_format must be one of {SCHEMA_FORMATS}, "
                              f"got {schema_format!r}")
        self.schema_format = schema_format
        self._loopback = _is_loopback(self.base_url)
        self._jitter = random.Random(jitter_seed)
        self._lock = threading.Lock()
        #: The sync clients (one per 8 connections) and the queue of slots naming them.
        self._clients: list[httpx.Client] | None = None
        self._slots: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._ssl: ssl.SSLContext | None = None
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )
        self._calls = self._retries = self._failures = self._attempts = 0
        self._prompt_tokens = self._completion_tokens = 0
        self._in_flight = self._peak = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"OpenAICompatible({self.base_url!r}, model={self.model!r})"

    # -- accounting ---------------------------------------------------------

    @property
    def usage(self) -> UsageStats:
        """A snapshot of calls, retries, tokens, cost and the peak number in flight."""
        with self._lock:
            return UsageStats(
                calls=self._calls,
                retries=self._retries,
                prompt_tokens=self._prompt_tokens,
                completion_tokens=self._completion_tokens,
                cost=self.prices.cost(self._prompt_tokens, self._completion_tokens),
                peak_in_flight=self._peak,
                failures=self._failures,
                attempts=self._attempts,
            )

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._attempts += 1
            self._peak = max(self._peak, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _account(self, completion: Completion | None, attempts: int) -> None:
        with self._lock:
            self._retries += attempts - 1
            if completion is None:
                self._failures += 1
            else:
                self._calls += 1
                self._prompt_tokens += completion.prompt_tokens
                self._completion_tokens += completion.completion_tokens

    # -- the request ---------------------------------------------------------

    def _headers(self, site: CallSite | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.headers}
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if key:
                headers["Authorization"] = f"Bearer {key}"
            elif not self._loopback:
                raise ConfigError(
                    f"environment variable {self.api_key_env} (api_key_env) is not set; "
                    f"it must hold the API key for {self.base_url} (a missing key is allowed "
                    "only for loopback URLs; pass api_key_env=None to send none)"
                )
        if site is not None:
            headers[SITE_HEADER] = str(site)
        return headers

    def _body(self, request: CompletionRequest) -> bytes:
        if not isinstance(request, CompletionRequest):
            raise ConfigError(
                f"request must be a CompletionRequest, got {type(request).__name__} {request!r}"
            )
        body = request_to_openai(request, self.model, self.schema_format)
        return json.dumps(body, ensure_ascii=False).encode()

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        base = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        with self._lock:
            delay = base * (0.5 + 0.5 * self._jitter.random())
        return float(delay if retry_after is None else max(delay, retry_after))

    def _judge(
        self, outcome: _Attempt, attempt: int, request: CompletionRequest
    ) -> tuple[Completion | None, float | None, Exception | None]:
        """Return (completion, retry delay, final error): exactly one is set."""
        import httpx  # noqa: PLC0415  (an optional extra, imported on first use)

        last = attempt > self.max_retries
        where = f"POST {self.url}"
        tries = f"after {attempt} attempt{'s' if attempt > 1 else ''}"
        error = outcome.error
        if error is not None:
            if isinstance(error, httpx.TimeoutException):
                final: ProviderError = ProviderTimeout(
                    f"{where}: timed out ({type(error).__name__}, timeout={self.timeout:g} s) "
                    f"{tries}"
                )
            elif isinstance(error, httpx.TransportError):
                final = ProviderError(f"{where}: {type(error).__name__}: {error} {tries}")
            else:
                raise error
            if last:
                return None, None, _tag(final, self.url, None, attempt)
            return None, self._backoff(attempt, None), None
        response = outcome.response
        if response is None:  # pragma: no cover - an attempt has a response or an error
            raise ProviderError(f"{where}: no response and no error {tries}")
        status = response.status_code
        if status == 200:
            try:
                return completion_from_openai(response.json(), request), None, None
            except ValueError as exc:  # also json.JSONDecodeError
                snippet = response.text[:200]
                return (
                    None,
                    None,
                    _tag(
                        ProviderError(f"{where}: malformed response ({exc}) {tries}: {snippet!r}"),
                        self.url,
                        status,
                        attempt,
                    ),
                )
        reason = f"HTTP {status} {response.reason_phrase}".rstrip()
        snippet = error_snippet(response.text)
        # 501 (not implemented) will not change on a retry, as 401/403/404/405 will not.
        retryable = status == 429 or (status >= 500 and status not in _PERMANENT_5XX)
        if not retryable:
            return (
                None,
                None,
                _tag(
                    ProviderError(f"{where}: {reason} {tries} (not retried): {snippet}"),
                    self.url,
                    status,
                    attempt,
                ),
            )
        kind = RateLimited if status == 429 else ProviderError
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if retry_after is not None and retry_after > self.retry_after_max:
            return (
                None,
                None,
                _tag(
                    kind(
                        f"{where}: {reason} with Retry-After {retry_after:g} s, more than "
                        f"retry_after_max={self.retry_after_max:g} s, {tries}: {snippet}"
                    ),
                    self.url,
                    status,
                    attempt,
                ),
            )
        if last:
            return (
                None,
                None,
                _tag(
                    kind(f"{where}: {reason} {tries} (max_retries={self.max_retries}): {snippet}"),
                    self.url,
                    status,
                    attempt,
                ),
            )
        return None, self._backoff(attempt, retry_after), None

    # -- sync --------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        """One SSL context for every client of this provider (building one takes ~40 ms)."""
        import httpx  # noqa: PLC0415  (an optional extra, imported on first use)

        context = self._ssl
        if context is None:
            context = self._ssl = httpx.create_ssl_context()
        return context

    def _client_options(self, httpx: Any) -> dict[str, Any]:
        """What every client of this provider is made with: 8 connections at most kept."""
        return {"timeout": httpx.Timeout(self.timeout), "verify": self._ssl_context(),
                "limits": httpx.Limits(max_connections=None, max_keepalive_connections=_SHARD)}

    def _sync_clients(self) -> list[httpx.Client]:
        clients = self._clients
        if clients is not None:
            return clients
        import httpx  # noqa: PLC0415  (an optional extra, imported on first use)

        with self._lock:
            if self._closed:
                raise ConfigError(f"{self!r} is closed")
            if self._clients is None:
                shards = -(-self.concurrency // _SHARD)
                made = [httpx.Client(**self._client_options(httpx)) for _ in range(shards)]
                for slot in range(self.concurrency):
                    self._slots.put(slot % shards)
                for client in made:
                    # A provider dropped without close() still closes its sockets.
                    weakref.finalize(self, client.close)
                self._clients = made
            return self._clients

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        """Send *request*, retrying as configured, and return the completion.

        Raises:
            ConfigError: The API key variable is unset for a non-loopback URL.
            RateLimited: HTTP 429 on every attempt.
            ProviderTimeout: The last attempt timed out.
            ProviderError: Any other failure: a non-retried 4xx, 5xx on every
                attempt, a connection error, a malformed response.
        """
        body = self._body(request)
        headers = self._headers(site)
        clients = self._sync_clients()
        attempt = 0
        while True:
            attempt += 1
            shard = self._slots.get()  # the concurrency limit
            self._enter()
            try:
                outcome = _Attempt(
                    clients[shard].post(self.url, content=body, headers=headers), None)
            except Exception as exc:  # judged below; non-httpx errors are re-raised
                outcome = _Attempt(None, exc)
            finally:
                self._leave()
                self._slots.put(shard)
            self._refuse_if_closed(outcome, attempt)
            completion, delay = self._settle(outcome, attempt, request)
            if completion is not None:
                return completion
            time.sleep(delay)

    def _refuse_if_closed(self, outcome: _Attempt, attempt: int) -> None:
        """A call that failed because :meth:`close` came while it was in flight: one line.

        Raises:
            ConfigError: the provider is closed (httpx's own error is chained).
        """
        if outcome.error is not None and self._closed:
            self._account(None, attempt)
            raise ConfigError(f"{self!r} is closed: close() was called while this call "
                              "was in flight or waiting for a slot") from outcome.error

    def _settle(self, outcome: _Attempt, attempt: int,
                request: CompletionRequest) -> tuple[Completion | None, float]:
        """Judge one attempt and account for it: the completion, or the delay before a retry.

        Raises:
            ProviderError: The attempt failed for good (the cause is chained).
        """
        try:
            completion, delay, error = self._judge(outcome, attempt, request)
        except BaseException:
            self._account(None, attempt)
            raise
        if completion is not None:
            self._account(completion, attempt)
            return completion, 0.0
        if error is not None:
            self._account(None, attempt)
            raise error from outcome.error
        return None, delay or 0.0

    # -- async -------------------------------------------------------------

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is not None:
            return state
        import httpx  # noqa: PLC0415  (an optional extra, imported on first use)

        with self._lock:
            if self._closed:
                raise ConfigError(f"{self!r} is closed")
            state = self._loops.get(loop)
            if state is None:
                shards = -(-self.concurrency // _SHARD)
                clients = [httpx.AsyncClient(**self._client_options(httpx))
                           for _ in range(shards)]
                slots: asyncio.Queue[int] = asyncio.Queue()
                for slot in range(self.concurrency):
                    slots.put_nowait(slot % shards)
                state = _LoopState(clients, slots, _keeper(clients))
                self._loops[loop] = state
            return state

    async def acomplete(
        self, request: CompletionRequest, *, site: CallSite | None = None
    ) -> Completion:
        """Send *request* from the running event loop; see :meth:`complete`."""
        body = self._body(request)
        headers = self._headers(site)
        state = self._loop_state()
        if not state.started:
            state.started = True
            await anext(state.keeper)  # registers the client's cleanup with the loop
        attempt = 0
        while True:
            attempt += 1
            shard = await state.slots.get()  # the concurrency limit of this loop
            self._enter()
            try:
                client = state.clients[shard]
                response = await client.post(self.url, content=body, headers=headers)
                outcome = _Attempt(response, None)
            except Exception as exc:  # judged below; non-httpx errors are re-raised
                outcome = _Attempt(None, exc)
            finally:
                self._leave()
                state.slots.put_nowait(shard)
            self._refuse_if_closed(outcome, attempt)
            completion, delay = self._settle(outcome, attempt, request)
            if completion is not None:
                return completion
            await asyncio.sleep(delay)

    # -- closing -----------------------------------------------------------

    def close(self) -> None:
        """Close the sync client; async clients of loops that ended are dropped.

        Call :meth:`aclose` from a running loop to close that loop's client.
        """
        with self._lock:
            clients, self._clients = self._clients, None
            self._closed = True
        for client in clients or ():
            client.close()

    async def aclose_loop(self) -> None:
        """Close only the running event loop's client; the model stays usable.

        Engines that run calls on an event loop of their own call this before
        the loop ends, so its connections are closed, not leaked.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._loops.pop(loop, None)
        if state is not None:
            if state.started:
                await state.keeper.aclose()  # its finally closes the clients
            else:
                for client in state.clients:
                    await client.aclose()

    async def aclose(self) -> None:
        """Close the clients of the running event loop, and the sync client; the model is done."""
        await self.aclose_loop()
        self.close()

    def __enter__(self) -> OpenAICompatible:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> OpenAICompatible:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _tag(error: ProviderError, url: str, status: int | None, attempts: int) -> ProviderError:
    error.url = url
    error.status = status
    error.attempts = attempts
    return error
