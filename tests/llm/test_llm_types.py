"""Requests, completions and call sites: validation, canonical keys and JSON round trips."""

from __future__ import annotations

import hashlib
import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulacra
from simulacra.errors import ConfigError
from simulacra.llm import (
    REQUEST_SCHEME,
    CallSite,
    ChatMessage,
    Completion,
    CompletionRequest,
    LanguageModel,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    approx_tokens,
    canonical_json,
)

texts = st.text(max_size=40)


def test_key_is_sha256_of_the_canonical_json() -> None:
    request = CompletionRequest.chat("héllo", system="sys", temperature=1, seed=3)
    canonical = request.canonical()
    data = json.loads(canonical)

    assert request.key() == hashlib.sha256(canonical).hexdigest()
    assert canonical.decode() == json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert data["scheme"] == REQUEST_SCHEME
    assert data["temperature"] == 1.0
    assert "héllo" in canonical.decode()  # not escaped


def test_known_answer_key() -> None:
    """Pinned: a change here silently invalidates every recording ever made."""
    request = CompletionRequest.chat("hello")
    assert request.canonical() == (
        b'{"max_tokens":null,"messages":[{"content":"hello","role":"user"}],"model":"scripted",'
        b'"response_schema":null,"scheme":"simulacra.llm.request.v1","seed":null,'
        b'"temperature":0.0,"tools":[]}'
    )
    assert request.key() == hashlib.sha256(request.canonical()).hexdigest()


def test_equal_requests_have_equal_keys_whatever_their_spelling() -> None:
    a = CompletionRequest(
        [{"role": "user", "content": "x"}],  # type: ignore[arg-type]
        temperature=0,
        tools=[ToolSpec("f", parameters_json='{"b": 1, "a": [1, 2]}')],  # type: ignore[arg-type]
        response_schema_json='{ "type" : "object" }',
    )
    b = CompletionRequest(
        (ChatMessage("user", "x"),),
        temperature=0.0,
        tools=(ToolSpec("f", parameters_json='{"a":[1,2],"b":1}'),),
        response_schema_json='{"type":"object"}',
    )
    assert a == b
    assert hash(a) == hash(b)
    assert a.key() == b.key()
    assert a.key() != CompletionRequest.chat("x", temperature=0.1).key()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ChatMessage("robot", "x"), "role must be one of"),
        (lambda: ChatMessage("user", 3), "content must be a str"),  # type: ignore[arg-type]
        (
            lambda: CompletionRequest.chat("x", temperature=-1),
            "temperature must be a finite float >= 0, got int -1",
        ),
        (lambda: CompletionRequest.chat("x", temperature=float("nan")), "temperature"),
        (lambda: CompletionRequest.chat("x", temperature=True), "temperature"),
        (lambda: CompletionRequest.chat("x", max_tokens=0), "max_tokens must be an int >= 1"),
        (lambda: CompletionRequest.chat("x", seed=1.5), "seed must be an int or None"),
        (lambda: CompletionRequest(()), "at least one message"),
        (lambda: CompletionRequest("hello"), "messages must be a sequence"),  # type: ignore[arg-type]
        (lambda: CompletionRequest.chat("x", model=""), "model must be a non-empty str"),
        (lambda: CompletionRequest.chat("x", tools=["f"]), r"tools\[0\] must be a ToolSpec"),
        (lambda: CompletionRequest.chat("x", response_schema_json="{nope"), "must be valid JSON"),
        (lambda: ToolSpec(""), "ToolSpec.name"),
        (lambda: Completion("x", prompt_tokens=-1), "prompt_tokens must be an int >= 0"),
        (lambda: Completion("x", tool_calls=("call",)), r"tool_calls\[0\] must be a ToolCall"),
        (lambda: Completion("x", finish_reason=""), "finish_reason"),
        (lambda: CallSite("", 0), "CallSite.agent"),
        (lambda: CallSite("a", -1), "CallSite.n must be an int >= 0"),
        (lambda: CallSite("a", True), "CallSite.n"),  # type: ignore[arg-type]
    ],
)
def test_bad_values_raise_config_error_naming_the_field(build: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()  # type: ignore[operator]
    assert issubclass(ConfigError, ValueError)


def test_chat_builds_system_then_user() -> None:
    request = CompletionRequest.chat("q", system="s", model="m", max_tokens=5)
    assert request.messages == (ChatMessage("system", "s"), ChatMessage("user", "q"))
    assert (request.model, request.max_tokens, request.prompt) == ("m", 5, "q")


def test_call_site_accepts_int_agents_and_round_trips_through_text() -> None:
    assert CallSite(7, 2) == CallSite("7", 2)  # type: ignore[arg-type]
    site = CallSite("a/b c%", 12)
    assert CallSite.parse(str(site)) == site
    with pytest.raises(ConfigError, match="agent/n"):
        CallSite.parse("nothing")


@st.composite
def completions(draw: st.DrawFn) -> Completion:
    calls = draw(
        st.lists(st.builds(ToolCall, texts, st.text(min_size=1, max_size=10), texts), max_size=3)
    )
    metadata = draw(st.dictionaries(st.text(max_size=5), st.integers() | texts, max_size=3))
    return Completion(
        draw(texts),
        tuple(calls),
        prompt_tokens=draw(st.integers(0, 10**6)),
        completion_tokens=draw(st.integers(0, 10**6)),
        finish_reason=draw(st.sampled_from(["stop", "length", "tool_calls"])),
        model=draw(texts),
        metadata_json=canonical_json(metadata),
    )


@settings(max_examples=60, deadline=None)
@given(completions())
def test_completion_json_round_trip(completion: Completion) -> None:
    text = completion.to_json()
    assert Completion.from_json(text) == completion
    assert Completion.from_json(text).to_json() == text
    assert pickle.loads(pickle.dumps(completion)) == completion  # noqa: S301


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.builds(ChatMessage, st.sampled_from(["system", "user", "assistant"]), texts),
        min_size=1,
        max_size=4,
    ),
    st.floats(0, 2),
    st.none() | st.integers(-(2**40), 2**40),
    st.none() | st.integers(1, 4096),
)
def test_request_dict_round_trip_keeps_the_key(
    messages: list[ChatMessage], temperature: float, seed: int | None, max_tokens: int | None
) -> None:
    request = CompletionRequest(
        tuple(messages), temperature=temperature, seed=seed, max_tokens=max_tokens
    )
    again = CompletionRequest.from_dict(json.loads(request.canonical()))
    assert again == request
    assert again.key() == request.key()


def test_from_json_rejects_garbage() -> None:
    with pytest.raises(ConfigError, match="invalid JSON"):
        Completion.from_json("{")
    with pytest.raises(ConfigError, match="expected an object"):
        Completion.from_json("[1]")


def test_approx_tokens_is_four_thirds_per_word_rounded_up() -> None:
    assert approx_tokens("") == 0
    assert approx_tokens("one") == 2
    assert approx_tokens("one two three") == 4
    assert approx_tokens("a  b\nc d") == 6


def test_providers_satisfy_the_protocol_and_the_front_door_exports_them() -> None:
    assert isinstance(ScriptedModel(), LanguageModel)
    for name in (
        "CompletionRequest",
        "Completion",
        "ScriptedModel",
        "OpenAICompatible",
        "RecordingStore",
        "ReplayModel",
        "LatencyModel",
        "ScriptedServer",
        "ReplayMiss",
    ):
        assert name in simulacra.__all__
        assert getattr(simulacra, name).__module__ in ("simulacra", "simulacra.errors")
    assert issubclass(simulacra.ReplayMiss, LookupError)
    assert issubclass(simulacra.ProviderTimeout, TimeoutError)
    assert issubclass(simulacra.ProviderError, simulacra.LLMError)
