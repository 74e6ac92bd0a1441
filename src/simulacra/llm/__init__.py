"""Language models: requests and completions, providers, record and replay, latency models.

Layer 1, beside the kernel, and knowing nothing of it: one small interface,
:class:`LanguageModel` (``complete`` / ``acomplete`` of a frozen
:class:`CompletionRequest` into a frozen :class:`Completion`), and the
providers behind it:

- :class:`ScriptedModel`: a deterministic fake whose reply is a pure function
  of ``(seed, request key, call site)``; it understands the social prompt
  convention (:func:`social_prompt`, :func:`social_rules`);
- :class:`OpenAICompatible`: the chat-completions HTTP API (vLLM, llama.cpp
  server, Ollama, hosted APIs) with retries, ``Retry-After``, timeouts, a
  concurrency limit and token and cost accounting;
- :class:`RecordingModel` and :class:`ReplayModel` over a content-addressed
  SQLite :class:`RecordingStore`: a re-run from recordings is exact and free;
- :class:`LatencyModel`: simulated call durations (prefill plus per-token
  decode, seeded noise);
- :class:`ScriptedServer`: a real OpenAI-compatible HTTP server on loopback.

This package imports only the standard library, :mod:`simulacra.errors` and
:mod:`simulacra.rng`; ``httpx`` is imported when the first HTTP call is made.
"""

from simulacra._util import claim_public_module

from ._factory import PROVIDERS as PROVIDERS
from ._factory import model_from_config as model_from_config
from ._latency import LatencyModel as LatencyModel
from ._openai import SITE_HEADER as SITE_HEADER
from ._openai import OpenAICompatible as OpenAICompatible
from ._openai import TokenPrices as TokenPrices
from ._openai import UsageStats as UsageStats
from ._openai import completion_from_openai as completion_from_openai
from ._openai import completion_to_openai as completion_to_openai
from ._openai import parse_retry_after as parse_retry_after
from ._openai import request_from_openai as request_from_openai
from ._openai import request_to_openai as request_to_openai
from ._record import STORE_FORMAT as STORE_FORMAT
from ._record import RecordingModel as RecordingModel
from ._record import RecordingStore as RecordingStore
from ._record import ReplayModel as ReplayModel
from ._router import AFFINITIES as AFFINITIES
from ._router import Endpoint as Endpoint
from ._router import RateLimit as RateLimit
from ._router import Router as Router
from ._router import ServerPool as ServerPool
from ._router import check_fallbacks as check_fallbacks
from ._router import endpoint_of as endpoint_of
from ._scripted import SOCIAL_ACTIONS as SOCIAL_ACTIONS
from ._scripted import SOCIAL_SCHEMA as SOCIAL_SCHEMA
from ._scripted import SOCIAL_TASK as SOCIAL_TASK
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptedRule as ScriptedRule
from ._scripted import default_rules as default_rules
from ._scripted import example_for_schema as example_for_schema
from ._scripted import parse_social_action as parse_social_action
from ._scripted import social_prompt as social_prompt
from ._scripted import social_rules as social_rules
from ._server import ScriptedServer as ScriptedServer
from ._types import REQUEST_SCHEME as REQUEST_SCHEME
from ._types import ROLES as ROLES
from ._types import CallSite as CallSite
from ._types import ChatMessage as ChatMessage
from ._types import Completion as Completion
from ._types import CompletionRequest as CompletionRequest
from ._types import LanguageModel as LanguageModel
from ._types import ToolCall as ToolCall
from ._types import ToolSpec as ToolSpec
from ._types import approx_tokens as approx_tokens
from ._types import canonical_json as canonical_json

__all__ = [
    # the interface
    "LanguageModel",
    "CompletionRequest",
    "Completion",
    "ChatMessage",
    "ToolSpec",
    "ToolCall",
    "CallSite",
    "ROLES",
    "REQUEST_SCHEME",
    "approx_tokens",
    "canonical_json",
    # providers
    "ScriptedModel",
    "ScriptedRule",
    "default_rules",
    "social_rules",
    "social_prompt",
    "parse_social_action",
    "example_for_schema",
    "SOCIAL_ACTIONS",
    "SOCIAL_SCHEMA",
    "SOCIAL_TASK",
    "OpenAICompatible",
    "UsageStats",
    "TokenPrices",
    "parse_retry_after",
    "SITE_HEADER",
    "request_to_openai",
    "request_from_openai",
    "completion_to_openai",
    "completion_from_openai",
    "model_from_config",
    "PROVIDERS",
    # record and replay
    "RecordingStore",
    "RecordingModel",
    "ReplayModel",
    "STORE_FORMAT",
    # several endpoints
    "Router",
    "Endpoint",
    "ServerPool",
    "RateLimit",
    "AFFINITIES",
    "endpoint_of",
    "check_fallbacks",
    # latency and the test server
    "LatencyModel",
    "ScriptedServer",
]

claim_public_module(__name__, globals())
