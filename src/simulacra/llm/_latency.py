"""Latency models: how long a call takes in simulated time, prefill plus per-token decode.

A duration is a function of the request, the completion and a random stream
that the caller passes in (a named stream of the simulation), never of the
wall clock, so a simulated run is reproducible under its seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from simulacra.errors import ConfigError

from ._types import Completion, CompletionRequest, approx_tokens

__all__ = ["LatencyModel"]


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Simulated call durations: ``(base + prefill + decode) * noise``, never below a floor.

    ``duration = max(min_duration, (base + prefill_per_token * prompt_tokens +
    decode_per_token * completion_tokens) * noise)`` where ``noise`` is
    lognormal with median ``exp(-noise_sigma**2 / 2)`` and mean 1, drawn from
    the random stream passed to :meth:`duration` (exactly one
    ``rng.lognormvariate`` per call, also when ``noise_sigma`` is 0).

    Attributes:
        base: Seconds of fixed overhead per call (network, queueing).
        prefill_per_token: Seconds per prompt token.
        decode_per_token: Seconds per generated token.
        noise_sigma: The sigma of the lognormal noise factor (0: none).
        min_duration: The hard lower bound of every duration, > 0. The
            event-driven engine uses it as its lookahead: every call issued
            inside one window of this length can run concurrently.
    """

    base: float = 0.2
    prefill_per_token: float = 0.0002
    decode_per_token: float = 0.02
    noise_sigma: float = 0.1
    min_duration: float = 0.1

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(
                    f"LatencyModel.{item.name} must be a finite number >= 0, "
                    f"got {type(value).__name__} {value!r}"
                )
            object.__setattr__(self, item.name, float(value))
        if self.min_duration <= 0:
            raise ConfigError(
                "LatencyModel.min_duration must be > 0 (it is the engine's lookahead), "
                f"got {self.min_duration!r}"
            )

    @classmethod
    def fixed(cls, seconds: float) -> LatencyModel:
        """Return a model where every call takes exactly *seconds* (> 0)."""
        return cls(
            base=seconds,
            prefill_per_token=0.0,
            decode_per_token=0.0,
            noise_sigma=0.0,
            min_duration=seconds,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyModel:
        """Build a model from a mapping of its fields (missing ones take their defaults).

        Raises:
            ConfigError: An unknown key (the message lists the known ones) or a
                bad value.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"latency config must be a mapping, got {type(data).__name__}")
        known = [item.name for item in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"unknown latency setting(s) {unknown}; expected some of {known}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, float]:
        """Return the fields as a dict (the inverse of :meth:`from_dict`)."""
        return asdict(self)

    def mean(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Return the noise-free duration for these token counts (floor applied)."""
        raw = (
            self.base
            + self.prefill_per_token * prompt_tokens
            + self.decode_per_token * completion_tokens
        )
        return max(self.min_duration, raw)

    def duration(
        self, request: CompletionRequest, completion: Completion, rng: random.Random
    ) -> float:
        """Return the simulated seconds *completion* of *request* took, >= ``min_duration``.

        Token counts come from the completion; when it reports none (0), they
        are estimated from the texts with :func:`approx_tokens`.

        Args:
            request: The request.
            completion: Its completion.
            rng: The stream the noise is drawn from (one draw per call).
        """
        prompt = completion.prompt_tokens or sum(approx_tokens(m.content) for m in request.messages)
        decoded = completion.completion_tokens or approx_tokens(completion.text)
        raw = self.base + self.prefill_per_token * prompt + self.decode_per_token * decoded
        sigma = self.noise_sigma
        noise = rng.lognormvariate(-sigma * sigma / 2.0, sigma)
        value = raw * noise
        if not math.isfinite(value):
            value = raw
        return max(self.min_duration, value)
