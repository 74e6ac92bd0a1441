"""The encodings built from parts give the bytes of the canonical walk, exactly.

Request keys, recordings and scripted replies hang on these bytes: a
difference of one byte would change every digest. Each fast path is checked
against the plain ``canonical_json(x.to_dict())`` it replaces.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from simulacra.llm import (
    ChatMessage,
    Completion,
    CompletionRequest,
    ToolCall,
    ToolSpec,
    canonical_json,
)
from simulacra.llm._types import message_json

# Every code point, lone surrogates and controls included.
TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
               max_size=40)
NAME = st.none() | TEXT.filter(bool)
MESSAGE = st.builds(ChatMessage, st.sampled_from(["system", "user", "assistant", "tool"]), TEXT,
                    NAME)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8)
TOOL = st.builds(ToolSpec, TEXT.filter(bool), TEXT,
                 st.dictionaries(TEXT, JSON, max_size=3).map(canonical_json))
REQUEST = st.builds(
    CompletionRequest, st.lists(MESSAGE, min_size=1, max_size=4).map(tuple),
    model=TEXT.filter(bool),
    temperature=st.sampled_from([0.0, -0.0, 0.7, 1.0, 1e-300, 2.5e20]) | st.integers(0, 3),
    seed=st.none() | st.integers(), max_tokens=st.none() | st.integers(1, 10**12),
    tools=st.lists(TOOL, max_size=2).map(tuple),
    response_schema_json=st.none() | JSON.map(canonical_json))
COMPLETION = st.builds(
    Completion, TEXT,
    st.lists(st.builds(ToolCall, TEXT, TEXT.filter(bool), TEXT), max_size=2).map(tuple),
    prompt_tokens=st.integers(0, 10**15), completion_tokens=st.integers(0, 10**15),
    finish_reason=TEXT.filter(bool), model=TEXT,
    metadata_json=st.dictionaries(TEXT, JSON, max_size=3).map(canonical_json))


def _canonical_bytes(value: object) -> bytes:
    return canonical_json(value).encode("utf-8", "surrogatepass")


@settings(max_examples=300, deadline=None)
@given(MESSAGE)
def test_message_json_is_the_canonical_json_of_the_message(message: ChatMessage) -> None:
    assert message_json(message) == canonical_json(message.to_dict())
    assert message_json(message) == canonical_json(message.to_dict())  # remembered, the same


@settings(max_examples=300, deadline=None)
@given(REQUEST)
def test_request_canonical_is_the_canonical_json_of_to_dict(request: CompletionRequest) -> None:
    expected = canonical_json(request.to_dict())
    try:
        wanted = expected.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: both refuse it
        try:
            request.canonical()
        except UnicodeEncodeError:
            return
        raise AssertionError("canonical() encoded a lone surrogate") from None
    assert request.canonical() == wanted


@settings(max_examples=300, deadline=None)
@given(COMPLETION)
def test_completion_to_json_is_the_canonical_json_of_to_dict(completion: Completion) -> None:
    assert completion.to_json() == canonical_json(completion.to_dict())
    assert Completion.from_json(_canonical_bytes(completion.to_dict())) == completion


def test_requests_that_differ_only_in_settings_have_their_own_text() -> None:
    messages = (ChatMessage("user", "hi"),)
    texts = {CompletionRequest(messages, temperature=t).canonical() for t in (0.0, -0.0, 1.0)}
    texts |= {CompletionRequest(messages, seed=s).canonical() for s in (None, 0, 1)}
    assert len(texts) == 5  # -0.0 and 0.0 are two requests; seed None and 0.0 is one twice
    assert all(t == canonical_json(CompletionRequest.from_dict(json.loads(t)).to_dict()).encode()
               for t in texts)
