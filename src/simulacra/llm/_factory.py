"""Build a provider from plain configuration data (what a YAML config holds)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from simulacra.errors import ConfigError

from ._openai import OpenAICompatible
from ._record import RecordingStore, ReplayModel
from ._scripted import ScriptedModel
from ._types import LanguageModel

__all__ = ["PROVIDERS", "model_from_config"]

PROVIDERS = ("scripted", "openai_compatible", "replay")
"""The ``provider`` names :func:`model_from_config` understands."""


def _options(target: Any, provider: str, options: dict[str, Any]) -> dict[str, Any]:
    allowed = [
        name
        for name, p in inspect.signature(target).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in ("self", "rules")
    ]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(
            f"llm provider {provider!r}: unknown option(s) {unknown}; expected some of {allowed}"
        )
    return options


def model_from_config(config: Mapping[str, Any]) -> LanguageModel:
    """Return the provider a config mapping describes.

    ``{"provider": "scripted", "seed": 0}`` gives a :class:`ScriptedModel`;
    ``{"provider": "openai_compatible", "base_url": ..., "model": ..., ...}``
    an :class:`OpenAICompatible` (every constructor argument may be given);
    ``{"provider": "replay", "path": ..., "strict": true}`` a
    :class:`ReplayModel` over a read-only :class:`RecordingStore`.

    Raises:
        ConfigError: An unknown provider or option; the message lists the
            valid ones.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"llm config must be a mapping, got {type(config).__name__}")
    options = dict(config)
    provider = options.pop("provider", "scripted")
    if provider == "scripted":
        return ScriptedModel(**_options(ScriptedModel, provider, options))
    if provider == "openai_compatible":
        for required in ("base_url", "model"):
            if required not in options:
                raise ConfigError(f"llm provider 'openai_compatible' needs {required!r}")
        return OpenAICompatible(**_options(OpenAICompatible, provider, options))
    if provider == "replay":
        path = options.pop("path", None)
        if path is None:
            raise ConfigError("llm provider 'replay' needs 'path' (the recording store)")
        strict = options.pop("strict", True)
        if options:
            raise ConfigError(
                f"llm provider 'replay': unknown option(s) {sorted(options)}; "
                "expected 'path' and 'strict'"
            )
        return ReplayModel(RecordingStore(path, readonly=True), strict=bool(strict))
    raise ConfigError(f"llm provider must be one of {PROVIDERS}, got {provider!r}")
