"""Requests, completions and the ``LanguageModel`` interface: plain frozen data.

Every value here is immutable and hashable, and has a canonical JSON form
(``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)``)
so that a request has a stable content address, :meth:`CompletionRequest.key`:
the same request gives the same key in every process, on every platform and
Python version (no salted ``hash()`` is involved).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, runtime_checkable
from urllib.parse import quote, unquote

from simulacra._util import fields_pickled
from simulacra.errors import ConfigError

__all__ = [
    "ROLES",
    "REQUEST_SCHEME",
    "CallSite",
    "ChatMessage",
    "Completion",
    "CompletionRequest",
    "LanguageModel",
    "ToolCall",
    "ToolSpec",
    "approx_tokens",
    "canonical_json",
]

ROLES = ("system", "user", "assistant", "tool")
"""The roles a :class:`ChatMessage` may have."""

REQUEST_SCHEME = "simulacra.llm.request.v1"
"""The version tag hashed into every request key; it changes only with the encoding."""


#: The encoder of canonical_json (one for all: json.dumps with options builds one a call).
_CANONICAL: Callable[[Any], str] = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of *value*: sorted keys, no spaces, UTF-8 kept.

    Raises:
        ConfigError: *value* holds something JSON cannot encode, or a NaN or
            infinite float.
    """
    try:
        return _CANONICAL(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"value is not canonical JSON: {exc}") from None


#: JSON text of a str as :func:`canonical_json` writes it (the C encoder's, ensure_ascii off).
_encode_str: Callable[[str], str] = json.encoder.encode_basestring

#: Canonical JSON of messages met lately (a request's key, then its recording, encode each
#: message once). Bounded: cleared when full.
_MESSAGE_JSON: dict[ChatMessage, str] = {}
_MESSAGE_JSON_MAX = 4096


def message_json(message: ChatMessage) -> str:
    """``canonical_json(message.to_dict())``, built from its parts (and remembered a while).

    The keys of a message sort as ``content``, ``name``, ``role``; each value is a
    str, written by the same encoder as :func:`canonical_json`'s, so the text is
    the same (tests check it with Hypothesis).
    """
    text = _MESSAGE_JSON.get(message)
    if text is None:
        text = message_text(message.role, message.content, message.name)
        if len(_MESSAGE_JSON) >= _MESSAGE_JSON_MAX:
            _MESSAGE_JSON.clear()
        _MESSAGE_JSON[message] = text
    return text


def message_text(role: str, content: str, name: str | None) -> str:
    """The canonical JSON of the message of these fields (see :func:`message_json`)."""
    return ('{"content":' + _encode_str(content)
            + ("" if name is None else ',"name":' + _encode_str(name))
            + ',"role":' + _encode_str(role) + "}")


def completion_text(fields: tuple[Any, ...]) -> str:
    """The canonical JSON of the completion of :meth:`Completion.fields` *fields*."""
    text, tool_calls, prompt, done, finish, model, metadata = fields
    metadata_json: str = metadata
    encode = _encode_str
    calls = ",".join(['{"arguments_json":' + encode(arguments) + ',"id":' + encode(ident)
                      + ',"name":' + encode(name) + "}" for arguments, ident, name in tool_calls])
    return ('{"completion_tokens":' + int.__repr__(done) + ',"finish_reason":' + encode(finish)
            + ',"metadata":' + metadata_json + ',"model":' + encode(model)
            + ',"prompt_tokens":' + int.__repr__(prompt) + ',"text":' + encode(text)
            + ',"tool_calls":[' + calls + "]}")


def _canonical_json_text(text: object, field_name: str) -> str:
    """Parse *text* as JSON and return its canonical form, or raise ConfigError."""
    if text == "{}":
        return "{}"
    if isinstance(text, str):
        return _canonical_json_str(text, field_name)
    raise ConfigError(f"{field_name} must be JSON text (a str), got {type(text).__name__} {text!r}")


@functools.lru_cache(maxsize=1024)
def _canonical_json_str(text: str, field_name: str) -> str:
    """The cached worker of :func:`_canonical_json_text` (schemas and metadata repeat)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{field_name} must be valid JSON, got {text[:80]!r} ({exc})") from None
    return canonical_json(value)


def is_int(value: object) -> TypeGuard[int]:
    """Return whether *value* is an int and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[float]:
    """Return whether *value* is a finite int or float and not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def approx_tokens(text: str) -> int:
    """Return a deterministic token estimate for *text*: 4/3 tokens per word, rounded up.

    Used where a provider reports no usage (the scripted model, latency models).
    """
    return -(-len(text.split()) * 4 // 3)


def _check_str(value: object, field_name: str, *, empty: bool = True) -> str:
    if not isinstance(value, str) or (not empty and not value):
        expected = "a str" if empty else "a non-empty str"
        raise ConfigError(f"{field_name} must be {expected}, got {type(value).__name__} {value!r}")
    return value


def _check_count(value: object, field_name: str, *, optional: bool = False) -> int | None:
    if optional and value is None:
        return None
    if not is_int(value) or value < 0:
        expected = "an int >= 0" + (" or None" if optional else "")
        raise ConfigError(f"{field_name} must be {expected}, got {type(value).__name__} {value!r}")
    return int(value)


@fields_pickled
@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat turn.

    Attributes:
        role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
        content: The text of the turn.
        name: An optional participant name. For a ``"tool"`` message it is
            the id of the tool call it answers (OpenAI's ``tool_call_id``).
    """

    role: str
    content: str
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"ChatMessage.role must be one of {ROLES}, got {self.role!r}")
        _check_str(self.content, "ChatMessage.content")
        if self.name is not None:
            _check_str(self.name, "ChatMessage.name", empty=False)

    def to_dict(self) -> dict[str, Any]:
        """Return the message as a plain dict (``name`` only when set)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            out["name"] = self.name
        return out


@fields_pickled
@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool (function) the model may call.

    Attributes:
        name: The function name.
        description: What the tool does, for the model.
        parameters_json: The JSON schema of its arguments, as JSON text. It is
            stored in canonical form, so equal schemas give equal requests.
    """

    name: str
    description: str = ""
    parameters_json: str = "{}"

    def __post_init__(self) -> None:
        _check_str(self.name, "ToolSpec.name", empty=False)
        _check_str(self.description, "ToolSpec.description")
        object.__setattr__(
            self,
            "parameters_json",
            _canonical_json_text(self.parameters_json, "ToolSpec.parameters_json"),
        )

    @property
    def parameters(self) -> Any:
        """The parameters schema, parsed (a fresh object on every read)."""
        return json.loads(self.parameters_json)

    def to_dict(self) -> dict[str, Any]:
        """Return the tool as a plain dict with the schema parsed."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def _coerce_message(value: object, index: int) -> ChatMessage:
    if isinstance(value, ChatMessage):
        return value
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - {"role", "content", "name"})
        if unknown:
            raise ConfigError(
                f"CompletionRequest.messages[{index}] has unknown keys {unknown}; "
                "expected 'role', 'content' and optionally 'name'"
            )
        return ChatMessage(value.get("role", ""), value.get("content", ""), value.get("name"))
    raise ConfigError(
        f"CompletionRequest.messages[{index}] must be a ChatMessage or a mapping, "
        f"got {type(value).__name__} {value!r}"
    )


def _coerce_tool(value: object, index: int) -> ToolSpec:
    if isinstance(value, ToolSpec):
        return value
    raise ConfigError(
        f"CompletionRequest.tools[{index}] must be a ToolSpec, got {type(value).__name__} {value!r}"
    )


@fields_pickled
@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """Everything that determines a completion; its :meth:`key` is its content address.

    Lists given for ``messages`` and ``tools`` are turned into tuples, mappings
    into :class:`ChatMessage`, an int ``temperature`` into a float and JSON
    texts into canonical form, so equal requests have equal keys.

    Attributes:
        messages: The conversation, at least one message.
        model: The model name (part of the key). ``OpenAICompatible`` sends
            its own configured model instead.
        temperature: A float >= 0.
        seed: The provider's sampling seed, or ``None``.
        max_tokens: The most tokens to generate (>= 1), or ``None``.
        tools: Tools the model may call.
        response_schema_json: A JSON schema the reply must follow (canonical
            JSON text), or ``None``.
    """

    messages: tuple[ChatMessage, ...]
    model: str = "scripted"
    temperature: float = 0.0
    seed: int | None = None
    max_tokens: int | None = None
    tools: tuple[ToolSpec, ...] = ()
    response_schema_json: str | None = None
    _key: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        messages = self.messages
        if (type(messages) is tuple and messages and type(self.tools) is tuple and not self.tools
                and all(type(m) is ChatMessage for m in messages)):
            self._check_settings()  # the common case: nothing to coerce
            self._check_schema()
            return
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise ConfigError(
                "CompletionRequest.messages must be a sequence of ChatMessage, "
                f"got {type(messages).__name__} {messages!r}"
            )
        coerced = tuple(_coerce_message(m, i) for i, m in enumerate(messages))
        if not coerced:
            raise ConfigError("CompletionRequest.messages must hold at least one message, got ()")
        object.__setattr__(self, "messages", coerced)
        self._check_settings()
        tools = self.tools
        if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
            raise ConfigError(
                "CompletionRequest.tools must be a sequence of ToolSpec, "
                f"got {type(tools).__name__} {tools!r}"
            )
        object.__setattr__(self, "tools", tuple(_coerce_tool(t, i) for i, t in enumerate(tools)))
        self._check_schema()

    def _check_settings(self) -> None:
        """Check (and coerce) the model, temperature, seed and max_tokens."""
        _check_str(self.model, "CompletionRequest.model", empty=False)
        temperature: object = self.temperature
        if not is_number(temperature) or temperature < 0:
            raise ConfigError(
                "CompletionRequest.temperature must be a finite float >= 0, "
                f"got {type(temperature).__name__} {temperature!r}"
            )
        object.__setattr__(self, "temperature", float(self.temperature))
        if self.seed is not None and not is_int(self.seed):
            raise ConfigError(
                f"CompletionRequest.seed must be an int or None, "
                f"got {type(self.seed).__name__} {self.seed!r}"
            )
        if self.max_tokens is not None and not (is_int(self.max_tokens) and self.max_tokens >= 1):
            raise ConfigError(
                "CompletionRequest.max_tokens must be an int >= 1 or None, "
                f"got {type(self.max_tokens).__name__} {self.max_tokens!r}"
            )

    def _check_schema(self) -> None:
        if self.response_schema_json is not None:
            object.__setattr__(
                self,
                "response_schema_json",
                _canonical_json_text(
                    self.response_schema_json, "CompletionRequest.response_schema_json"
                ),
            )

    @classmethod
    def chat(cls, prompt: str, *, system: str | None = None, **kw: Any) -> CompletionRequest:
        """Build a request of one user message, after an optional system message.

        Args:
            prompt: The user message.
            system: An optional system message put first.
            **kw: Any other field (``model``, ``temperature``, ``seed``...).
        """
        messages: list[ChatMessage] = []
        if system is not None:
            messages.append(ChatMessage("system", system))
        messages.append(ChatMessage("user", prompt))
        return cls(tuple(messages), **kw)

    @property
    def prompt(self) -> str:
        """The content of the last user message ("" when there is none)."""
        for message in reversed(self.messages):
            if message.role == "user":
                return message.content
        return ""

    @property
    def response_schema(self) -> Any:
        """The response schema, parsed, or ``None``."""
        if self.response_schema_json is None:
            return None
        return json.loads(self.response_schema_json)

    def to_dict(self) -> dict[str, Any]:
        """Return the request as plain JSON-ready data, with a ``"scheme"`` version tag."""
        return {
            "scheme": REQUEST_SCHEME,
            "messages": [m.to_dict() for m in self.messages],
            "model": self.model,
            "temperature": self.temperature,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "tools": [t.to_dict() for t in self.tools],
            "response_schema": self.response_schema,
        }

    def canonical(self) -> bytes:
        """Return the canonical JSON encoding (UTF-8 bytes) of :meth:`to_dict`.

        Built from parts: the settings (all but the messages) encoded once for
        every request that shares them, and each message by :func:`message_json`.
        The keys sort as ``max_tokens``, ``messages``, then the rest, so the text
        is ``canonical_json(self.to_dict())`` exactly (tests check it).
        """
        head, tail = self._settings_json()
        return (head + ",".join([message_json(m) for m in self.messages]) + tail).encode("utf-8")

    def _settings_json(self) -> tuple[str, str]:
        """The canonical text of the request around its messages' list: ``(head, tail)``."""
        # -0.0 and 0.0 are equal, and so are 1 and 1.0 (a float here): repr tells them apart.
        setting = (self.model, repr(self.temperature), self.seed, self.max_tokens, self.tools,
                   self.response_schema_json)
        found = _SETTINGS_JSON.get(setting)
        if found is None:
            data = self.to_dict()
            del data["messages"]
            rest = canonical_json(data)  # {"max_tokens":...,"model":...}: messages go between
            cut = rest.index(',"model":')
            found = (rest[:cut] + ',"messages":[', "]" + rest[cut:])
            if len(_SETTINGS_JSON) >= 256:
                _SETTINGS_JSON.clear()
            _SETTINGS_JSON[setting] = found
        return found

    def key(self) -> str:
        """Return the request's content address: the SHA-256 hex digest of :meth:`canonical`."""
        key = self._key
        if key is None:
            key = hashlib.sha256(self.canonical()).hexdigest()
            object.__setattr__(self, "_key", key)
        return key

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompletionRequest:
        """Rebuild a request from :meth:`to_dict` output.

        Raises:
            ConfigError: *data* is of another scheme or malformed.
        """
        scheme = data.get("scheme", REQUEST_SCHEME)
        if scheme != REQUEST_SCHEME:
            raise ConfigError(f"request scheme must be {REQUEST_SCHEME!r}, got {scheme!r}")
        schema = data.get("response_schema")
        return cls(
            tuple(data.get("messages", ())),
            model=data.get("model", "scripted"),
            temperature=data.get("temperature", 0.0),
            seed=data.get("seed"),
            max_tokens=data.get("max_tokens"),
            tools=tuple(
                ToolSpec(
                    t.get("name", ""), t.get("description", ""), canonical_json(t["parameters"])
                )
                if "parameters" in t
                else ToolSpec(t.get("name", ""), t.get("description", ""))
                for t in data.get("tools", ())
            ),
            response_schema_json=None if schema is None else canonical_json(schema),
        )


#: ``(head, tail)`` of the canonical text of requests, by their settings (see _settings_json).
_SETTINGS_JSON: dict[tuple[Any, ...], tuple[str, str]] = {}


@fields_pickled
@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call of a tool that the model asked for.

    Attributes:
        id: The provider's id for the call (answer it with a ``"tool"`` message
            whose ``name`` is this id).
        name: The tool's name.
        arguments_json: The arguments as JSON text, exactly as the model wrote
            them (it may be invalid JSON: models make mistakes).
    """

    id: str
    name: str
    arguments_json: str = "{}"

    def __post_init__(self) -> None:
        _check_str(self.id, "ToolCall.id")
        _check_str(self.name, "ToolCall.name", empty=False)
        _check_str(self.arguments_json, "ToolCall.arguments_json")

    @property
    def arguments(self) -> Any:
        """The arguments, parsed.

        Raises:
            ValueError: The model wrote invalid JSON (``json.JSONDecodeError``).
        """
        return json.loads(self.arguments_json)

    def to_dict(self) -> dict[str, Any]:
        """Return the call as a plain dict."""
        return {"id": self.id, "name": self.name, "arguments_json": self.arguments_json}


@fields_pickled
@dataclass(frozen=True, slots=True)
class Completion:
    """A model's reply.

    Attributes:
        text: The reply text ("" when the model only called tools).
        tool_calls: The tool calls the model asked for.
        prompt_tokens: Tokens in the prompt, as the provider counted them.
        completion_tokens: Tokens generated.
        finish_reason: Why generation stopped: ``"stop"``, ``"length"``,
            ``"tool_calls"``... (the provider's word, kept as given).
        model: The model that answered, as the provider named it.
        metadata_json: Provider metadata (id, system fingerprint, usage...) as
            canonical JSON text.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    model: str = ""
    metadata_json: str = "{}"

    def __post_init__(self) -> None:
        _check_str(self.text, "Completion.text")
        calls = self.tool_calls
        if type(calls) is tuple and not calls:
            pass  # the common case: no tool calls
        elif isinstance(calls, str | bytes | Mapping) or not isinstance(calls, Sequence):
            raise ConfigError(
                "Completion.tool_calls must be a sequence of ToolCall, "
                f"got {type(calls).__name__} {calls!r}"
            )
        for i, call in enumerate(calls):
            if not isinstance(call, ToolCall):
                raise ConfigError(
                    f"Completion.tool_calls[{i}] must be a ToolCall, "
                    f"got {type(call).__name__} {call!r}"
                )
        object.__setattr__(self, "tool_calls", tuple(calls))
        _check_count(self.prompt_tokens, "Completion.prompt_tokens")
        _check_count(self.completion_tokens, "Completion.completion_tokens")
        _check_str(self.finish_reason, "Completion.finish_reason", empty=False)
        _check_str(self.model, "Completion.model")
        object.__setattr__(
            self,
            "metadata_json",
            _canonical_json_text(self.metadata_json, "Completion.metadata_json"),
        )

    @property
    def total_tokens(self) -> int:
        """``prompt_tokens + completion_tokens``."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def metadata(self) -> Any:
        """The provider metadata, parsed (a fresh object on every read)."""
        return json.loads(self.metadata_json)

    def to_dict(self) -> dict[str, Any]:
        """Return the completion as plain JSON-ready data (metadata parsed)."""
        return {
            "text": self.text,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "model": self.model,
            "metadata": self.metadata,
        }

    def to_json(self) -> str:
        """Return the canonical JSON text of the completion; :meth:`from_json` reverses it.

        ``canonical_json(self.to_dict())``, built from its parts: the keys in
        sorted order, the metadata as its canonical text (which the canonical
        encoding of its parsed value gives back unchanged). Tests check it.
        """
        return completion_text(self.fields())

    def fields(self) -> tuple[Any, ...]:
        """The completion as plain data: :func:`completion_text` encodes it as :meth:`to_json`."""
        return (self.text, tuple([(c.arguments_json, c.id, c.name) for c in self.tool_calls]),
                self.prompt_tokens, self.completion_tokens, self.finish_reason, self.model,
                self.metadata_json)

    @classmethod
    def from_json(cls, text: str | bytes) -> Completion:
        """Rebuild a completion from :meth:`to_json` output.

        Raises:
            ConfigError: *text* is not JSON or not a completion.
        """
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"Completion.from_json: invalid JSON ({exc})") from None
        if not isinstance(data, dict) or "text" not in data:
            raise ConfigError(f"Completion.from_json: expected an object with 'text', got {data!r}")
        try:
            return cls(
                data["text"],
                tuple(
                    ToolCall(c["id"], c["name"], c.get("arguments_json", "{}"))
                    for c in data.get("tool_calls", ())
                ),
                prompt_tokens=data.get("prompt_tokens", 0),
                completion_tokens=data.get("completion_tokens", 0),
                finish_reason=data.get("finish_reason", "stop"),
                model=data.get("model", ""),
                metadata_json=_metadata_json(data.get("metadata", {})),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"Completion.from_json: malformed completion ({exc!r})") from None


#: Canonical JSON of parsed metadata values met lately, by their repr (a replay reads the
#: same few metadata objects again and again). Bounded: cleared when full.
_METADATA_JSON: dict[str, str] = {}


def _metadata_json(value: Any) -> str:
    """``canonical_json(value)`` for a value parsed from JSON (remembered by its repr).

    The repr of parsed JSON data is a function of the value (``True`` and ``1``,
    ``1.0`` and ``1`` have different reprs), so equal reprs mean equal texts.
    """
    seen = repr(value)
    text = _METADATA_JSON.get(seen)
    if text is None:
        text = canonical_json(value)
        if len(_METADATA_JSON) >= 1024:
            _METADATA_JSON.clear()
        _METADATA_JSON[seen] = text
    return text


@fields_pickled
@dataclass(frozen=True, slots=True)
class CallSite:
    """Who made a call: an agent id (as a str) and that agent's n-th call, from 0.

    An int agent id is turned into its decimal str. ``str(site)`` is
    ``"agent/n"`` with the agent percent-encoded (the form of the
    ``X-Simulacra-Site`` header); :meth:`parse` reverses it.
    """

    agent: str
    n: int

    def __post_init__(self) -> None:
        agent: object = self.agent
        if is_int(agent):
            object.__setattr__(self, "agent", str(agent))
        else:
            _check_str(agent, "CallSite.agent", empty=False)
        if not (is_int(self.n) and self.n >= 0):
            raise ConfigError(
                f"CallSite.n must be an int >= 0, got {type(self.n).__name__} {self.n!r}"
            )

    def __str__(self) -> str:
        return f"{quote(self.agent, safe='')}/{self.n}"

    @classmethod
    def parse(cls, text: str) -> CallSite:
        """Parse ``"agent/n"`` (the agent percent-encoded) as written by ``str(site)``.

        Raises:
            ConfigError: *text* is not of that form.
        """
        agent, sep, n = text.strip().rpartition("/")
        if not sep or not agent or not n.isdigit():
            raise ConfigError(f"call site must look like 'agent/n' with n >= 0, got {text!r}")
        return cls(unquote(agent), int(n))


@runtime_checkable
class LanguageModel(Protocol):
    """The interface of every provider: a completion for a request, sync or async.

    Implementations are thread-safe. *site* names the caller (agent and its
    n-th call); providers that record, replay or script replies use it, others
    may ignore it.
    """

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        """Return the completion of *request*, blocking."""
        ...

    async def acomplete(
        self, request: CompletionRequest, *, site: CallSite | None = None
    ) -> Completion:
        """Return the completion of *request*, awaiting it."""
        ...

